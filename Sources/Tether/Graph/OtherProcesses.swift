/// Other processes' writes to a shared store (`Store/Claims.swift`): what
/// another process stored (fetched, refreshed, saved, deleted) reaches this
/// context's objects in memory, their observers and its live fetches, with
/// no request to the server. Every `storeWatchMilliseconds` the context asks
/// each of its stores whether another connection committed since it last
/// looked (SQLite's `PRAGMA data_version`: no I/O, a few microseconds);
/// when one did, the objects in memory of that store's entities read their
/// rows again (taking them as they are, older versions too: the store is
/// the truth), and every live fetch of them looks again. Unsaved changes
/// are not in those rows: another process's stay its own until saved.
extension Context {
    static let storeWatchMilliseconds: Int64 = 200

    /// At open, before the outbox is read: where each store is now (what
    /// another process writes from here on is heard). Then looks begin.
    func takeStoreBaseline() {
        let now = stores.map { store in (try? store.dataVersion()).map { StoreMark(dataVersion: $0, lastWrite: (try? store.lastWrite()) ?? 0) } }
        graph.withLock { $0.storeMarks = now }
    }

    func startStoreWatch() {
        worker.async(afterMilliseconds: Self.storeWatchMilliseconds) { [weak self] in self?.lookAtStores() }
    }

    /// On the worker, and again after the watch interval until the close.
    private func lookAtStores() {
        for (index, store) in stores.enumerated() {
            guard let version = try? store.dataVersion() else { continue }
            let mark = graph.withLock { graph -> StoreMark?? in
                guard !graph.closed else { return nil }
                return .some(graph.storeMarks.indices.contains(index) ? graph.storeMarks[index] : nil)
            }
            guard let mark else { return }  // closed: no more looks
            guard mark?.dataVersion != version else { continue }
            do {
                // Another connection committed: rows of server records moved only if the write serial did
                // (an outbox edit or a claim moves data_version alone).
                let written = try store.lastWrite()
                if let mark, written != mark.lastWrite { try takeOtherProcessesWrites(storeIndex: index) }
                graph.withLock { graph in
                    if graph.storeMarks.indices.contains(index) { graph.storeMarks[index] = StoreMark(dataVersion: version, lastWrite: written) }
                }
            } catch {
                // The mark stays: the next look tries again.
                Log.warning(.store, "another process's writes to the store could not be read (\(error)); the next look tries again")
            }
        }
        startStoreWatch()
    }

    /// The store at `storeIndex` changed under this context: its objects in
    /// memory take their rows as they are now, and its live fetches look again.
    private func takeOtherProcessesWrites(storeIndex: Int) throws {
        let store = stores[storeIndex]
        for entity in model.entities where entity.storeIndex == storeIndex {
            let held = uniquing.allInMemory(entity).filter { $0.state.withLock { $0.loaded } }
            if !held.isEmpty {
                let rows = try store.rows(entity, ids: held.map(\.id))
                var gone: [String] = []
                for object in held {
                    if let row = rows[ExactString(object.id)] {
                        let current = object.state.withLock { $0.record.map { $0.values == row.record.values } ?? false }
                        if !current { try reload(object) }
                    } else if object.state.withLock({ $0.record != nil && !$0.deletedOnServer }),
                              try store.isDeleted(entity, id: object.id) {
                        gone.append(object.id)
                    }
                }
                markDeleted(gone, of: entity)
            }
            // A live fetch reads its answer again (the ids only wake it).
            tellRowsChanged(entity, [""])
        }
    }

    /// The object takes its row as the store has it now, read under the
    /// object's lock: a sibling's newer answer, stored and handed over since
    /// the batch was read, is not undone (older versions are taken: the store
    /// is the truth, a restore there included).
    private func reload(_ object: ManagedObject) throws {
        let entity = object.entity
        let observers = try object.state.withLock { state -> [KeyObserver] in
            guard let row = try store(for: entity).load(entity, id: object.id) else { return [] }
            guard state.record.map({ $0.values != row.record.values }) ?? true else { return [] }
            let before = state.observedValues
            state.record = row.record
            state.loaded = true
            state.fetchedAt = row.fetchedAt
            state.deletedOnServer = false
            state.neverOnServer = false
            return state.observers(changedSince: before)
        }
        for observer in observers { observer.notify() }
    }
}

/// Where a store was when a context last looked.
struct StoreMark {
    let dataVersion: Int64
    /// The store's write serial of server records (`Store.lastWrite`).
    let lastWrite: Int64
}
