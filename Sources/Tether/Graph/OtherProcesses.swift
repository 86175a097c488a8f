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

    /// At open: the first look takes the stores' versions as they are.
    func startStoreWatch() {
        lookAtStores()
    }

    /// On the worker, and again after the watch interval until the close.
    private func lookAtStores() {
        var moved: [Int] = []
        for (index, store) in stores.enumerated() {
            guard let version = try? store.dataVersion() else { continue }
            let last = graph.withLock { graph -> Int64?? in
                guard !graph.closed else { return nil }
                if graph.storeVersions.count < stores.count { graph.storeVersions = Array(repeating: nil, count: stores.count) }
                defer { graph.storeVersions[index] = version }
                return .some(graph.storeVersions[index])
            }
            guard let last else { return }  // closed: no more looks
            if let seen = last, seen != version { moved.append(index) }
        }
        for index in moved {
            do {
                try takeOtherProcessesWrites(storeIndex: index)
            } catch {
                Log.warning(.store, "another process's writes to the store could not be read (\(error)); the next look tries again")
                graph.withLock { $0.storeVersions[index] = nil }
            }
        }
        worker.async(afterMilliseconds: Self.storeWatchMilliseconds) { [weak self] in self?.lookAtStores() }
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
                        if !current { _ = merge([row.record], of: entity, fetchedAt: row.fetchedAt, acceptingOlder: true) }
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
}
