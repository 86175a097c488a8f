/// Background refreshes started by `get`. Requests from a burst of gets are
/// gathered until the burst ends and sent as few requests per entity as the
/// connection's batches allow.
///
/// The burst's end is measured in its first caller's own time, not the wall
/// clock's: on a loaded machine the scheduler can keep a host thread from a
/// CPU for tens of milliseconds between two gets of one loop, and that wait
/// must not split the burst (a lone first get would then go by itself).
struct RefreshGathering {
    var pending: [Int: [ManagedObject]] = [:]
    /// Whether a send is scheduled on the worker (the burst below is set
    /// before it runs).
    var scheduled = false
    var burst: Burst?
    /// Refreshes asked since the worker last looked.
    var asked = 0

    struct Burst {
        let thread: ThreadTime
        let start: ThreadTime.Sample
        /// The pause is counted from here: the first get, or the last
        /// look that found more gets since the one before.
        var pauseFrom: ThreadTime.Sample
    }
}

extension Context {
    /// A burst of gets is gathered until its thread has spent this long
    /// (running other code, or asleep) without asking for another...
    static let refreshGatherMilliseconds: Int64 = 5
    /// ...or this long of its own time since the first.
    static let refreshGatherLimitMilliseconds: Int64 = 100

    /// `evenIfFresh`: whatever the staleness window says (the server is
    /// known to have changed it).
    func scheduleRefresh(_ object: ManagedObject, evenIfFresh: Bool = false) {
        // A local entity's store is its truth: there is nothing to refresh from.
        guard !object.entity.isLocal else { return noteAbsentLocal(object) }
        let staleness = options.stalenessMilliseconds
        let wanted = object.state.withLock { state -> Bool in
            guard !state.refreshInFlight else {
                // The one in flight may have read the server before this get:
                // one more follows it, however many gets come meanwhile.
                state.refreshAgain = true
                return false
            }
            if !evenIfFresh && staleness > 0 && state.record != nil && wallClockMilliseconds() - state.fetchedAt < staleness {
                return false
            }
            state.refreshInFlight = true
            return true
        }
        guard wanted else { return }
        let first = graph.withLock { graph -> Bool in
            guard !graph.closed else { return false }
            graph.refreshes.pending[object.entity.index, default: []].append(object)
            guard !graph.refreshes.scheduled else {
                graph.refreshes.asked += 1
                return false
            }
            graph.refreshes.scheduled = true
            return true
        }
        guard first else { return }
        // Once a burst (a few µs of /proc), outside the lock.
        let thread = ThreadTime.current()
        let now = thread.sample()
        graph.withLock { $0.refreshes.burst = RefreshGathering.Burst(thread: thread, start: now, pauseFrom: now) }
        worker.async(afterMilliseconds: Self.refreshGatherMilliseconds) { [self] in sendRefreshes() }
    }

    /// On the worker: sends the burst's refreshes once it has ended, or looks again.
    private func sendRefreshes() {
        let now = graph.withLock { $0.refreshes.burst?.thread }?.settledSample()
        let (batches, wait) = graph.withLock { graph -> ([Int: [ManagedObject]]?, Int64) in
            if let now, var burst = graph.refreshes.burst {
                if graph.refreshes.asked > 0 {
                    graph.refreshes.asked = 0
                    burst.pauseFrom = now
                    graph.refreshes.burst = burst
                }
                let pause = now.ownMilliseconds(since: burst.pauseFrom)
                if pause < Self.refreshGatherMilliseconds,
                   now.ownMilliseconds(since: burst.start) < Self.refreshGatherLimitMilliseconds {
                    return (nil, Self.refreshGatherMilliseconds - pause)  // still asking: gather a little longer
                }
            }
            defer { graph.refreshes = RefreshGathering() }
            return (graph.refreshes.pending, 0)
        }
        guard let batches else {
            worker.async(afterMilliseconds: max(1, wait)) { [self] in sendRefreshes() }
            return
        }
        for (index, objects) in batches {
            let entity = model.entities[index]
            let byID = Dictionary(objects.map { (ExactString($0.id), $0) }, uniquingKeysWith: { first, _ in first })
            for ids in connection.idBatches(byID.keys.map(\.string)) {
                // Rows written from now on (a save's answer) are newer than what this refresh says is gone.
                let serial = (try? store(for: entity).nextWrite()) ?? .max
                refresh(ids.compactMap { byID[ExactString($0)] }, of: entity, cursor: nil, seen: [], cursors: CursorTrail(), since: serial)
            }
        }
    }

    /// Asks for one page of these objects' records; on the worker.
    /// `serial`: the store's next write when the first page was asked for.
    private func refresh(_ objects: [ManagedObject], of entity: Entity, cursor: PageCursor?, seen: Set<ExactString>,
                         cursors: CursorTrail, since serial: Int64) {
        _ = connection.records(entity.spec, ids: objects.map(\.id), cursor: cursor) { [self] result in
            worker.async { [self] in refreshed(objects, of: entity, result, seen: seen, cursors: cursors, since: serial) }
        }
    }

    private func refreshed(_ objects: [ManagedObject], of entity: Entity, _ result: Result<Page, TetherError>,
                           seen: Set<ExactString>, cursors: CursorTrail, since serial: Int64) {
        var seen = seen
        var cursors = cursors
        do {
            let page = try result.get()
            seen.formUnion(try absorb(page.decode(), of: entity, askedAt: serial).map { ExactString($0.id) })
            if let next = page.next {
                try cursors.advance(to: next, of: entity.name)
                return refresh(objects, of: entity, cursor: next, seen: seen, cursors: cursors, since: serial)
            }
            let unseen = objects.map(\.id).filter { !seen.contains(ExactString($0)) }
            let gone = try store(for: entity).delete(ids: unseen, of: entity, unlessWrittenSince: serial)
            markDeleted(gone, of: entity)
            Log.debug(.sync, "refreshed \(objects.count) \(entity.name) objects: \(seen.count) found, \(gone.count) gone")
        } catch {
            // The cache stays as it was and the next get tries again; the
            // observers hear why this one failed, unless the context is closing.
            let failure = TetherError.wrap(error)
            if failure.kind != .cancelled && !isClosed {
                Log.warning(.sync, "refresh of \(objects.count) \(entity.name) objects failed (\(failure.kind)); the cache stays as it was")
                for object in objects { object.state.withLock { $0.observers }.forEach { $0.notify(failure) } }
            }
        }
        for object in objects {
            let again = object.state.withLock { state -> Bool in
                state.refreshInFlight = false
                defer { state.refreshAgain = false }
                return state.refreshAgain
            }
            if again && !isClosed { scheduleRefresh(object) }
        }
    }
}
