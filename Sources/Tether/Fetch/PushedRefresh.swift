extension FetchTask {
    var followsServer: Bool { request.policy != .cacheOnly && !entity.isLocal }
    var refreshesByListing: Bool { true }

    /// The server pushed a change of the entity (see PushedChanges.swift), a
    /// periodic round or the host says it may have: a fetch of all of it
    /// from the server (a sync once synced), as any fetch stores its pages
    /// and tells the live fetches; `done` at its final callback.
    func refreshFromServer(_ done: @escaping @Sendable () -> Void) -> Bool {
        var request = FetchRequest(entity: entity.name)
        request.policy = .serverOnly
        request.resultType = .ids
        request.isBackgroundSync = true
        do {
            let task = try context.makeFetch(request)
            try task.start { result in if result.phase == .final { done() } }
            return true
        } catch {
            return false
        }
    }
}
