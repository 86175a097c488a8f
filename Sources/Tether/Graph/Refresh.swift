/// Background refreshes started by `get`. Requests from a burst of gets are
/// gathered for a moment and sent as few requests per entity as the
/// connection's batches allow.
extension Context {
    /// A burst of gets is gathered until it pauses this long...
    static let refreshGatherMilliseconds: Int64 = 5
    /// ...or has been gathering this long.
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
        let schedule = graph.withLock { graph -> Bool in
            guard !graph.closed else { return false }
            graph.pendingRefreshes[object.entity.index, default: []].append(object)
            let now = MonotonicTime.now()
            graph.lastRefreshRequest = now
            guard !graph.refreshScheduled else { return false }
            graph.refreshScheduled = true
            graph.refreshGatherStart = now
            return true
        }
        if schedule { worker.async(afterMilliseconds: Self.refreshGatherMilliseconds) { [self] in sendRefreshes() } }
    }

    /// On the worker.
    private func sendRefreshes() {
        let batches = graph.withLock { graph -> [Int: [ManagedObject]]? in
            let now = MonotonicTime.now()
            if now.milliseconds(since: graph.lastRefreshRequest) < Self.refreshGatherMilliseconds,
               now.milliseconds(since: graph.refreshGatherStart) < Self.refreshGatherLimitMilliseconds {
                return nil  // still arriving: gather a little longer
            }
            defer {
                graph.pendingRefreshes = [:]
                graph.refreshScheduled = false
            }
            return graph.pendingRefreshes
        }
        guard let batches else {
            worker.async(afterMilliseconds: Self.refreshGatherMilliseconds) { [self] in sendRefreshes() }
            return
        }
        for (index, objects) in batches {
            let entity = model.entities[index]
            let byID = Dictionary(objects.map { (ExactString($0.id), $0) }, uniquingKeysWith: { first, _ in first })
            for ids in connection.idBatches(byID.keys.map(\.string)) {
                refresh(ids.compactMap { byID[ExactString($0)] }, of: entity, cursor: nil, seen: [], cursors: CursorTrail())
            }
        }
    }

    /// Asks for one page of these objects' records; on the worker.
    private func refresh(_ objects: [ManagedObject], of entity: Entity, cursor: PageCursor?, seen: Set<ExactString>,
                         cursors: CursorTrail) {
        _ = connection.records(entity.spec, ids: objects.map(\.id), cursor: cursor) { [self] result in
            worker.async { [self] in refreshed(objects, of: entity, result, seen: seen, cursors: cursors) }
        }
    }

    private func refreshed(_ objects: [ManagedObject], of entity: Entity, _ result: Result<Page, TetherError>,
                           seen: Set<ExactString>, cursors: CursorTrail) {
        var seen = seen
        var cursors = cursors
        do {
            let page = try result.get()
            seen.formUnion(try absorb(page.decode(), of: entity).map { ExactString($0.id) })
            if let next = page.next {
                try cursors.advance(to: next, of: entity.name)
                return refresh(objects, of: entity, cursor: next, seen: seen, cursors: cursors)
            }
            let gone = objects.map(\.id).filter { !seen.contains(ExactString($0)) }
            try store(for: entity).delete(ids: gone, of: entity)
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
