/// Changes the server pushes (a `ChangePushing` connection: PostgreSQL's
/// NOTIFY). While an entity has live fetches the context subscribes to it;
/// a notice schedules one listing of the entity, after a short gathering
/// delay, so a burst of commits costs one listing; notices that come while
/// it runs cause one more after it. Nothing here grows beyond one entry per
/// entity.
struct PushedRefreshes {
    /// The entity names subscribed to, as last told to the connection.
    var subscribed: Set<String> = []
    /// Entities (by index) noticed and not yet listed since.
    var pending: Set<Int> = []
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
        var names = Set<String>()
        if !graph.closed {
            for (index, listeners) in graph.rowListeners where !listeners.isEmpty {
                let entity = model.entities[index]
                if !entity.isLocal { names.insert(entity.name) }
            }
        }
        guard names != graph.pushed.subscribed else { return }
        graph.pushed.subscribed = names
        pushing.pushChanges(of: names, to: ObjectIdentifier(self)) { [weak self] changed in self?.serverChanged(changed) }
    }

    /// On the connection's thread: these entities changed on the server.
    private func serverChanged(_ names: Set<String>) {
        let entities = names.compactMap { model.entity(named: $0) }
        let schedule = graph.withLock { graph -> Bool in
            guard !graph.closed else { return false }
            for entity in entities where graph.rowListeners[entity.index]?.isEmpty == false {
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
        let starting = graph.withLock { graph -> [(Int, (any RowListener)?)] in
            graph.pushed.scheduled = false
            guard !graph.closed else { return [] }
            let ready = graph.pushed.pending.subtracting(graph.pushed.running)
            graph.pushed.pending.subtract(ready)  // the running ones stay pending: listed again after
            graph.pushed.running.formUnion(ready)
            return ready.map { ($0, graph.rowListeners[$0]?.values.first) }
        }
        for (index, listener) in starting {
            let started = listener?.refreshFromServer { [weak self] in self?.pushedRefreshEnded(index) } ?? false
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
