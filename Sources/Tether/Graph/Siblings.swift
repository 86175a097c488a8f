/// Siblings: contexts sharing one store and connection, each with its own
/// objects and unsaved changes; what one saves or fetches reaches the
/// objects the others hold.
extension Context {
    /// The contexts open on one store: each context's name is its own, and
    /// the last to close closes the store and the connection.
    final class Coordinator: Sendable {
        private let open = Lock<[(name: String, context: WeakContext)]>([])

        struct WeakContext { weak var context: Context? }

        func join(_ context: Context) throws {
            try open.withLock { open in
                guard !open.contains(where: { $0.name == context.name && $0.context.context != nil }) else {
                    throw TetherError(.invalid, "a context named \(context.name.debugDescription) is already open on this store")
                }
                open.append((context.name, WeakContext(context: context)))
            }
        }

        /// Removes `context`: whether it had joined, and whether it was the last.
        func leave(_ context: Context) -> (joined: Bool, last: Bool) {
            open.withLock { open in
                let joined = open.contains { $0.context.context === context }
                open.removeAll { $0.context.context === context || $0.context.context == nil }
                return (joined, open.isEmpty)
            }
        }

        func isOpen(_ name: String) -> Bool {
            open.withLock { open in open.contains { $0.name == name && $0.context.context != nil } }
        }

        func others(than context: Context) -> [Context] {
            open.withLock { open in open.compactMap { $0.context.context }.filter { $0 !== context } }
        }
    }

    /// A sibling: another context on this one's store, model and connection,
    /// with its own objects, callbacks and unsaved changes (a background
    /// context for an import beside one for a UI, as Core Data has them).
    /// Its changes are kept in the store under `name`, so a sibling opened
    /// again under that name finds its unsaved changes. A save in either
    /// updates the objects the other holds and tells their observers. The
    /// store and connection close with the last context sharing them.
    public func openSibling(name: String, delivery mode: DeliveryMode? = nil) throws -> Context {
        // "" is the first context's: a sibling takes it (and its unsaved
        // changes) once that context has closed, as join checks.
        guard !name.unicodeScalars.contains("\u{0}") else {
            throw TetherError(.invalid, "a sibling's name cannot hold U+0000")
        }
        try checkOpen()
        var siblingOptions = options
        siblingOptions.delivery = mode ?? options.delivery
        guard !name.unicodeScalars.contains("\u{1}") else {
            throw TetherError(.invalid, "a sibling's name cannot hold U+0001 (it marks another process's changes)")
        }
        guard !coordinator.isOpen(name) else {
            throw TetherError(.invalid, "a context named \(name.debugDescription) is already open on this store")
        }
        let claims = try Self.claim(stores, name: name, exclusive: options.exclusive)
        let sibling: Context
        do {
            sibling = Context(model: model, isOnline: openedOnline, options: siblingOptions, stores: stores, connection: connection,
                              reachability: reachability, delivery: try Delivery(mode: siblingOptions.delivery), name: name,
                              claims: claims, coordinator: coordinator)
        } catch {
            for (store, claim) in zip(stores, claims) { try? store.release(claim) }
            throw error
        }
        do {
            try coordinator.join(sibling)
            sibling.takeStoreBaseline()
            try sibling.restoreChanges()
            try sibling.adoptOrphanedChanges()
            sibling.startPeriodicSync()
            sibling.startStoreWatch()
        } catch {
            // Its threads are running already: a sibling refused is closed, not dropped.
            try? sibling.close()
            throw error
        }
        return sibling
    }

    /// This context's object for the record `object` stands for in another
    /// (Core Data's `objectWithID:` in another context).
    public func localInstance(of object: ManagedObject) throws -> ManagedObject {
        guard object.context.coordinator === coordinator else {
            throw TetherError(.invalid, "the object belongs to a context on another store")
        }
        try checkOpen()
        return uniqueObjects(object.entity, [object.id])[0]
    }

    /// A save in a sibling settled this record (nil: deleted on the server):
    /// objects here take it, their observers and live fetches are told.
    /// Changes pending here stay; their own save meets the new version.
    func takeSaved(_ record: Record?, id: String, of entity: Entity) {
        guard let object = objectsInMemory(entity, [id]).first else { return }
        let now = wallClockMilliseconds()
        let observers = object.state.withLock { state -> [KeyObserver] in
            let before = state.observedValues
            if let record {
                state.record = record
                state.loaded = true
                state.fetchedAt = now
                state.deletedOnServer = false
                state.neverOnServer = false
            } else {
                if state.pending == nil { state.record = nil }
                state.deletedOnServer = true
            }
            return state.observers(changedSince: before)
        }
        for observer in observers { observer.notify() }
        tellRowsChanged(entity, [id])
    }
}
