/// A periodic round over the server's change feed (`Connection.changeFeed`,
/// Kinto's history plugin): one conditional request for every watched
/// entity instead of one each. The entities it names are synced as a round
/// syncs them; a record it shows written with a version the store's sync
/// had already passed was put back older (a restore), which no listing of
/// changes shows: it is asked for by id at once, taken older or not. Each
/// watched entity still has its full checks every full-check interval (a
/// server may leave writes out of its feed, or trim it), and a write to the
/// entity itself (its collection re-created) brings them forward.
struct ChangeFeedState {
    enum Position {
        case unread
        case at(String)
        /// The server offers none, or refused this user: rounds ask each entity.
        case unavailable
    }

    var position = Position.unread
    /// The read in flight (one at a time: a slow read is the rounds' meanwhile).
    var reading: (any Cancellable)?
    var isReading = false
}

extension Context {
    /// On the worker, a round of these (polled, watched) entities by the
    /// feed; false when there is no feed to read, and the round must ask each.
    func roundByFeed(_ polled: Set<String>) -> Bool {
        let asked = graph.withLock { graph -> (read: Bool, since: String?)? in
            if graph.periodic.feed.isReading { return (false, nil) }
            switch graph.periodic.feed.position {
            case .unavailable: return nil
            case .unread: break
            case .at(let position): graph.periodic.feed.isReading = true; return (true, position)
            }
            graph.periodic.feed.isReading = true
            return (true, nil)
        }
        guard let asked else { return false }
        guard asked.read else { return true }
        let request = connection.changeFeed(since: asked.since) { [weak self] result in
            self?.worker.async { [weak self] in self?.feedRead(result, since: asked.since) }
        }
        // (The answer is handled on this worker, so after this.)
        graph.withLock { graph in
            graph.periodic.feed.reading = request
            if request == nil { graph.periodic.feed = ChangeFeedState(position: .unavailable) }
        }
        return request != nil
    }

    /// At close: the read in flight ends.
    func stopFeedReading() {
        graph.withLock { $0.periodic.feed.reading }?.cancel()
    }

    private func feedRead(_ result: Result<ChangeFeed, TetherError>, since asked: String?) {
        let watched = graph.withLock { graph -> Set<String>? in
            graph.periodic.feed.isReading = false
            graph.periodic.feed.reading = nil
            return graph.closed ? nil : watchedEntityNames(graph)
        }
        guard let watched else { return }
        let polled = watched.filter { !connection.pushesChanges(of: $0) }
        let feed: ChangeFeed
        switch result {
        case .success(let answer):
            feed = answer
        case .failure(let error) where [.network, .server, .busy, .cancelled].contains(error.kind):
            return  // the server busy or gone: the next round reads from the same position (offline: it probes)
        case .failure(let error):
            // Refused, or not a feed this library reads: the rounds ask each entity instead, as without one.
            graph.withLock { $0.periodic.feed.position = .unavailable }
            let level: LogLevel = error.kind == .auth || error.kind == .notFound ? .info : .warning
            Log.at(level, .sync, "the server's change feed cannot be read (\(error.message)): each round asks each watched entity")
            return serverChanged(polled, byRound: true)
        }
        graph.withLock { $0.periodic.feed.position = .at(feed.position) }
        guard let writes = feed.writes else {
            // The first read, which syncs everything once; or more writes
            // than a read takes, any of which may be a restore.
            if asked != nil { forgetFullChecks(polled) }
            return serverChanged(polled, byRound: true)
        }
        var changed = polled.filter(fullCheckDue)
        var restored: [Int: [String]] = [:]
        for write in writes where polled.contains(write.entity) {
            guard let entity = model.entity(named: write.entity) else { continue }
            changed.insert(entity.name)
            guard let id = write.id else {
                forgetFullChecks([entity.name])
                continue
            }
            if !write.deleted, let version = write.version, let synced = try? store.syncVersion(entity), version <= synced {
                restored[entity.index, default: []].append(id)
            }
        }
        if !changed.isEmpty { serverChanged(changed, byRound: true) }
        for (index, ids) in restored { refetchRestored(model.entities[index], ids) }
    }

    /// Records the feed shows put back older than the store's sync: by id,
    /// taken as the server has them now (unless written since they were asked).
    private func refetchRestored(_ entity: Entity, _ ids: [String]) {
        Log.info(.sync, "\(entity.name): \(ids.count) records put back with older versions (the server's change feed): asked again")
        ByIDRefetch(context: self, store: store, connection: connection, worker: worker, entity: entity,
                    acceptingOlder: true, sent: { _ in }, isCurrent: { [weak self] in self?.isClosed == false }) { outcome in
            if case .failure(let error) = outcome, error.kind != .cancelled {
                Log.warning(.sync, "\(entity.name): records put back older could not be asked again (\(error.message)); "
                                   + "the next full check finds them")
            }
        }.start(Array(Set(ids)).sorted())
    }
}
