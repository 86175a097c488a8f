/// Live data over a server that does not push (Kinto, the memory server, a
/// host's connection; a PostgreSQL table without Tether's triggers): while
/// an entity has live fetches or observed objects,
/// the context asks for its changes every `syncIntervalMilliseconds`, with a
/// tenth of it as random jitter so a fleet of clients does not ask in step.
/// Each round goes the way a pushed notice does (`PushedChanges.swift`):
/// one incremental sync per watched entity, coalesced with one running.
///
/// - Offline, a round asks for one entity only: it is the probe that finds
///   the server again, and then every watched entity syncs at once.
/// - While the server asks to back off (Kinto's `Backoff`, a 503's
///   `Retry-After`), rounds are skipped; what the host asks for still goes.
/// - No entity watched, or the context closed: no round is scheduled.
/// - The host may say an entity changed (`serverChanged`): a round of it at once.
///
/// Where the server has one change feed for all its entities (Kinto's
/// history plugin), a round reads it instead (`ChangeFeedRounds`): one
/// conditional request for them all.
///
/// A round's sync costs one conditional request when nothing changed: the
/// checks a sync ends with (the server's count, and its ids and versions
/// for rewritten history) run in a round at most every
/// `fullCheckIntervalMilliseconds` per entity (`takeFullCheck`).
struct PeriodicSync {
    var roundScheduled = false
    /// Entities of a server that pushes, found not to (said once each).
    var toldPolling: Set<Int> = []
    /// The reachability listener's token, while there is one.
    var listener: UInt64?
    /// When each entity (by index) last began its full checks.
    var lastFullCheck: [Int: MonotonicTime] = [:]
    /// Where the server's change feed was read to (`ChangeFeedRounds`).
    var feed = ChangeFeedState()
}

extension Context {
    /// Whether rounds run at all. (Over a server that pushes they find
    /// nothing to ask while every watched entity is pushed.)
    var syncsPeriodically: Bool { options.syncIntervalMilliseconds > 0 }

    /// At open: the first answer after the server was lost starts a round.
    func startPeriodicSync() {
        guard syncsPeriodically else { return }
        // The listener only queues (Reachability's rule): the round runs on the worker.
        let token = reachability.listen { [weak self] online in
            guard online, let self else { return }
            worker.async { [weak self] in
                guard let self, connection.backoffRemainingMilliseconds == 0 else { return }
                let polled = notPushed(graph.withLock { watchedEntityNames($0) })
                if !polled.isEmpty { serverChanged(polled, byRound: true) }
            }
        }
        let stale = graph.withLock { graph -> UInt64? in
            guard !graph.closed else { return token }
            graph.periodic.listener = token
            return nil
        }
        if let stale { reachability.unlisten(stale) }
    }

    /// At close.
    func stopPeriodicSync() {
        stopFeedReading()
        let token = graph.withLock { graph -> UInt64? in
            defer { graph.periodic.listener = nil }
            return graph.periodic.listener
        }
        if let token { reachability.unlisten(token) }
    }

    /// The server entities with live fetches or observed objects that
    /// follow the server (not a cache-only live fetch), by name.
    func watchedEntityNames(_ graph: Graph) -> Set<String> {
        var names = Set<String>()
        guard !graph.closed else { return names }
        for (index, listeners) in graph.rowListeners where listeners.values.contains(where: \.followsServer) {
            let entity = model.entities[index]
            if !entity.isLocal { names.insert(entity.name) }
        }
        return names
    }

    /// Those of `names` whose changes the server does not push: a round's to ask for.
    private func notPushed(_ names: Set<String>) -> Set<String> { names.filter { !connection.pushesChanges(of: $0) } }

    /// Under the graph's lock, after row listeners came or went: whether a
    /// round must be scheduled now (the caller schedules it, outside the lock).
    func needsPeriodicRound(_ graph: inout Graph) -> Bool {
        guard syncsPeriodically, !graph.periodic.roundScheduled, !watchedEntityNames(graph).isEmpty else { return false }
        graph.periodic.roundScheduled = true
        return true
    }

    func schedulePeriodicRound() {
        let interval = options.syncIntervalMilliseconds
        let jitter = Int64.random(in: -(interval / 10)...(interval / 10))
        worker.async(afterMilliseconds: max(1, interval + jitter)) { [weak self] in self?.periodicRound() }
    }

    /// On the worker: one round, and the next scheduled while anything is watched.
    private func periodicRound() {
        let anyWatched = graph.withLock { graph -> Set<String>? in
            let names = watchedEntityNames(graph)
            graph.periodic.roundScheduled = !names.isEmpty
            return names.isEmpty ? nil : names
        }
        guard let all = anyWatched else { return }
        schedulePeriodicRound()
        let watched = notPushed(all)
        guard !watched.isEmpty else { return }
        if connection.canPushChanges { tellPolling(watched) }
        if connection.backoffRemainingMilliseconds > 0 { return }
        if isOnline {
            if !roundByFeed(watched) { serverChanged(watched, byRound: true) }
        } else if let probe = watched.min() {
            serverChanged([probe], byRound: true)
        }
    }

    /// A server that pushes changes does not for these: said once each, at WARNING.
    private func tellPolling(_ names: Set<String>) {
        let new = graph.withLock { graph in
            names.compactMap { model.entity(named: $0) }.filter { graph.periodic.toldPolling.insert($0.index).inserted }
        }
        for entity in new {
            Log.warning(.sync, "\(entity.name): no change of it is known to be pushed (its table not tracked, "
                               + "see tether_postgres_install, or not listed yet): its live fetches and observers "
                               + "ask every \(options.syncIntervalMilliseconds) ms instead")
        }
    }

    /// Whether a sync of `entity` ends with the full checks now (`always`:
    /// one the host started); if so, they count as begun, and the next
    /// background sync's are due a full-check interval later.
    func takeFullCheck(_ entity: Entity, always: Bool) -> Bool {
        let now = MonotonicTime.now()
        return graph.withLock { graph -> Bool in
            if !always, let last = graph.periodic.lastFullCheck[entity.index],
               now.milliseconds(since: last) < options.fullCheckIntervalMilliseconds {
                return false
            }
            graph.periodic.lastFullCheck[entity.index] = now
            return true
        }
    }

    /// Whether `name`'s full checks, once begun, are due again (without
    /// taking them). Never begun: its syncs have not needed them (a
    /// filtered listing checks by itself; observed objects are asked by id).
    func fullCheckDue(_ name: String) -> Bool {
        guard let entity = model.entity(named: name) else { return false }
        let now = MonotonicTime.now()
        return graph.withLock { graph in
            graph.periodic.lastFullCheck[entity.index].map { now.milliseconds(since: $0) >= options.fullCheckIntervalMilliseconds } ?? false
        }
    }

    /// The next background syncs of these entities run their full checks.
    func forgetFullChecks(_ names: Set<String>) {
        let indexes = names.compactMap { model.entity(named: $0)?.index }
        graph.withLock { graph in for index in indexes { graph.periodic.lastFullCheck[index] = nil } }
    }

    /// The host says `entity` (nil: every watched entity) changed on the
    /// server: its live fetches and observers follow at once, as after a
    /// pushed notice. An entity nothing watches has nothing to follow.
    public func changed(entity name: String?) throws {
        try checkOpen()
        if let name {
            guard try !model.existingEntity(named: name).isLocal else {
                throw TetherError(.invalid, "\(name) is a local store's entity: it has no server to change it")
            }
        }
        serverChanged(name.map { [$0] })
    }
}
