/// A context's connection when local stores are attached: requests about
/// local entities go to their stores, the rest to the server, so a save of
/// changes to both is one save. The server's identity is the context's.
final class RoutedConnection: Connection {
    let server: any Connection
    let local: LocalConnection

    init(server: any Connection, local: LocalConnection) {
        self.server = server
        self.local = local
    }

    var identity: String { server.identity }
    var formerIdentities: [String] { server.formerIdentities }

    private func route(_ spec: Spec) -> any Connection { local.holds(spec) ? local : server }

    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        server.serverInfo(done)
    }

    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        server.specs(done)
    }

    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        route(request.spec).page(request, done)
    }

    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        route(request.spec).count(request, done)
    }

    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        route(spec).records(spec, ids: ids, cursor: cursor, done)
    }

    func idBatches(_ ids: [String]) -> [[String]] { server.idBatches(ids) }

    func supports(_ filter: Filter) -> Bool { server.supports(filter) }
    func filtersExactly(_ filter: Filter) -> Bool { server.filtersExactly(filter) }
    var changeListingsCanMissRewrites: Bool { server.changeListingsCanMissRewrites }
    func limit(ofServerQuery query: String) -> Int64? { server.limit(ofServerQuery: query) }
    var canPushChanges: Bool { server.canPushChanges }
    func pushesChanges(of entity: String) -> Bool { server.pushesChanges(of: entity) }
    var backoffRemainingMilliseconds: Int64 { server.backoffRemainingMilliseconds }
    func changeFeed(since position: String?,
                    _ done: @escaping @Sendable (Result<ChangeFeed, TetherError>) -> Void) -> (any Cancellable)? {
        server.changeFeed(since: position, done)
    }

    /// Each side gets its writes, in order; their outcomes are put back in
    /// the order of `writes` and answered as each prefix is complete.
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        let isLocal = writes.map { local.holds($0.spec) }
        if !isLocal.contains(true) { return server.write(writes, answered) }
        if !isLocal.contains(false) { return local.write(writes, answered) }
        let merge = OrderedOutcomes(count: writes.count, answered)
        let positions = (local: isLocal.indices.filter { isLocal[$0] }, server: isLocal.indices.filter { !isLocal[$0] })
        let localSide = local.write(positions.local.map { writes[$0] }) { merge.take($0, for: positions.local) }
        let serverSide = server.write(positions.server.map { writes[$0] }) { merge.take($0, for: positions.server) }
        return BothCancellable(first: localSide, second: serverSide)
    }

    func shutdown() {
        server.shutdown()
        local.shutdown()
    }
}

/// Outcomes arriving from two connections, each in its own order, handed on
/// in the order of the writes, a complete prefix at a time.
private final class OrderedOutcomes: Sendable {
    private struct State {
        var outcomes: [WriteOutcome?]
        /// Each side's next write without an outcome, as an index into its positions.
        var taken: [Int: Int] = [:]
        var delivered = 0
    }

    private let state: Lock<State>
    private let answered: @Sendable ([WriteOutcome]) -> Void

    init(count: Int, _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) {
        state = Lock(State(outcomes: Array(repeating: nil, count: count)))
        self.answered = answered
    }

    /// A run of one side's outcomes; `positions` are its writes' places.
    /// Handed on under the lock, so runs reach `answered` in order; the
    /// callback only queues work (the connection contract's `answered`).
    func take(_ run: [WriteOutcome], for positions: [Int]) {
        state.withLock { state in
            let side = positions.first ?? -1
            let start = state.taken[side, default: 0]
            for (offset, outcome) in run.enumerated() where start + offset < positions.count {
                state.outcomes[positions[start + offset]] = outcome
            }
            state.taken[side] = start + run.count
            var ready: [WriteOutcome] = []
            while state.delivered < state.outcomes.count, let next = state.outcomes[state.delivered] {
                ready.append(next)
                state.delivered += 1
            }
            if !ready.isEmpty { answered(ready) }
        }
    }
}

private struct BothCancellable: Cancellable {
    let first: any Cancellable
    let second: any Cancellable

    func cancel() {
        first.cancel()
        second.cancel()
    }
}

/// The server's pushed changes pass through (local entities are never subscribed to).
extension RoutedConnection: ChangePushing {
    func pushChanges(of entities: Set<String>, to subscriber: ObjectIdentifier,
                     _ changed: @escaping @Sendable (Set<String>) -> Void) {
        (server as? any ChangePushing)?.pushChanges(of: entities, to: subscriber, changed)
    }
}
