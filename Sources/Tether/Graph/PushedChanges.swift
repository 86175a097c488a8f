/// Changes the server pushes (a `ChangePushing` connection: PostgreSQL's
/// NOTIFY). While an entity has live fetches or observed objects the
/// context subscribes to it; a notice schedules one listing of the entity
/// (or, with observers only, a refresh of the observed objects), after a short gathering
/// delay, so a burst of commits costs one listing; notices that come while
/// it runs cause one more after it. Nothing here grows beyond one entry per
/// entity.
struct PushedRefreshes {
    /// The entity names subscribed to, as last told to the connection.
    var subscribed: Set<String> = []
    /// Entities (by index) noticed and not yet listed since.
    var pending: Set<Int> = []
    /// Those of `pending` only a periodic round asked for: dropped while the
    /// server asks to back off (a push or the host's word is not).
    var pendingByRound: Set<Int> = []
    /// Entities whose listing runs.
    var running: Set<Int> = []
    /// Whether a start of the pending listings is scheduled on the worker.
    var scheduled = false
}

extension Context {
    /// Notices are gathered this long before a listing starts.
    static let pushGatherMilliseconds: Int64 = 20

    /// Under the graph's lock, after row listeners came or went: the
    /// connection is told the entities that now have any (none once closed).
    /// Called under the lock so that two threads' updates reach the
    /// connection in order; the connection never calls back synchronously.
    func updatePushedEntities(_ graph: inout Graph) {
        guard let pushing = connection as? any ChangePushing else { return }
        let names = watchedEntityNames(graph)
        guard names != graph.pushed.subscribed else { return }
        graph.pushed.subscribed = names
        pushing.pushChanges(of: names, to: ObjectIdentifier(self)) { [weak self] changed in self?.serverChanged(changed) }
    }

    /// These entities (nil: every watched one) changed on the server: from
    /// the connection's thread, a periodic round (`byRound`), or the host.
    func serverChanged(_ names: Set<String>?, byRound: Bool = false) {
        let schedule = graph.withLock { graph -> Bool in
            let watched = watchedEntityNames(graph)  // none once closed
            for name in names ?? watched where watched.contains(name) {
                guard let entity = model.entity(named: name) else { continue }
                if byRound, !graph.pushed.pending.contains(entity.index) { graph.pushed.pendingByRound.insert(entity.index) }
                if !byRound { graph.pushed.pendingByRound.remove(entity.index) }
                graph.pushed.pending.insert(entity.index)
            }
            guard !graph.pushed.pending.isEmpty, !graph.pushed.scheduled else { return false }
            graph.pushed.scheduled = true
            return true
        }
        if schedule { worker.async(afterMilliseconds: Self.pushGatherMilliseconds) { [self] in startPushedRefreshes() } }
    }

    /// On the worker: starts a listing of each pending entity not listed now.
    private func startPushedRefreshes() {
        let backingOff = connection.backoffRemainingMilliseconds > 0
        let starting = graph.withLock { graph -> [(Int, [any RowListener])] in
            graph.pushed.scheduled = false
            guard !graph.closed else { return [] }
            if backingOff {
                // (A round asked before the backoff began, or while a sync ran into it.)
                graph.pushed.pending.subtract(graph.pushed.pendingByRound)
                graph.pushed.pendingByRound = []
            }
            let ready = graph.pushed.pending.subtracting(graph.pushed.running)
            graph.pushed.pending.subtract(ready)  // the running ones stay pending: listed again after
            graph.pushed.pendingByRound.subtract(ready)
            graph.pushed.running.formUnion(ready)
            return ready.map { ($0, graph.rowListeners[$0].map { Array($0.values) } ?? []) }
        }
        for (index, listeners) in starting {
            // One listing (a live fetch starts it) updates every object in
            // memory; an observer asked before it refreshes its own object.
            // A listing first: it brings every change, observers' objects' too.
            let following = listeners.filter(\.followsServer)
            let ordered = following.filter(\.refreshesByListing) + following.filter { !$0.refreshesByListing }
            let started = ordered.contains { $0.refreshFromServer { [weak self] in self?.pushedRefreshEnded(index) } }
            if !started { pushedRefreshEnded(index) }
        }
    }

    private func pushedRefreshEnded(_ index: Int) {
        let schedule = graph.withLock { graph -> Bool in
            graph.pushed.running.remove(index)
            guard !graph.closed, graph.pushed.pending.contains(index), !graph.pushed.scheduled else { return false }
            graph.pushed.scheduled = true
            return true
        }
        if schedule { worker.async(afterMilliseconds: Self.pushGatherMilliseconds) { [self] in startPushedRefreshes() } }
    }
}

/// An observed object follows the server's pushed changes too.
extension KeyObserver: RowListener {
    func rowsChanged(_ ids: [String]) {}  // its object tells it of its own changes
    var followsServer: Bool { true }
    var refreshesByListing: Bool { false }

    /// A refresh of the object (gathered with others, as gets are), not a listing: false.
    func refreshFromServer(_ done: @escaping @Sendable () -> Void) -> Bool {
        object.context.scheduleRefresh(object, evenIfFresh: true)
        return false
    }
}
