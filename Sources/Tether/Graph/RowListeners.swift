/// Who wants to hear that rows of an entity changed in the context (a live
/// fetch does): the graph tells them, and knows nothing else of them.
protocol RowListener: AnyObject, Sendable {
    /// Records of the entity listened to, with these ids, were written or
    /// deleted in the context (a page stored, a save answered, a local
    /// change). Called on whichever thread made the change, with no lock held.
    func rowsChanged(_ ids: [String])
    /// The server says the entity changed: lists it from the server (the
    /// changes reach the listeners as after any fetch), then calls `done`
    /// once; false (and `done` never called) if no listing could start.
    func refreshFromServer(_ done: @escaping @Sendable () -> Void) -> Bool
    /// Whether it follows the server at all (a live fetch that answers from
    /// the cache only does not: it never makes the context ask the server).
    var followsServer: Bool { get }
    /// Whether `refreshFromServer` lists the entity (a live fetch does, an
    /// observer refreshes its own object): a listing brings every change.
    var refreshesByListing: Bool { get }
}

extension Context {
    /// `listener` hears of `entity`'s changed rows until it stops listening.
    func listen(_ listener: any RowListener, to entity: Entity) {
        let startsRounds = graph.withLock { graph in
            graph.rowListeners[entity.index, default: [:]][ObjectIdentifier(listener)] = listener
            updatePushedEntities(&graph)
            return needsPeriodicRound(&graph)
        }
        if startsRounds { schedulePeriodicRound() }
    }

    /// (Periodic rounds end by themselves: the next finds nothing watched.)
    func stopListening(_ listener: any RowListener, to entity: Entity) {
        let gone = graph.withLock { graph in
            defer { updatePushedEntities(&graph) }
            return graph.rowListeners[entity.index]?.removeValue(forKey: ObjectIdentifier(listener))
        }
        _ = gone  // released here, outside the lock
    }

    /// Records of `entity` were written or deleted: its listeners are told.
    func tellRowsChanged(_ entity: Entity, _ ids: [String]) {
        guard !ids.isEmpty else { return }
        let listeners = graph.withLock { $0.rowListeners[entity.index].map { Array($0.values) } ?? [] }
        for listener in listeners { listener.rowsChanged(ids) }
    }
}
