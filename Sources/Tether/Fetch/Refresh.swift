/// Background refreshes started by `get`. Requests from a burst of gets are
/// gathered for a moment and sent as one listing per entity and chunk of ids.
extension Context {
    /// A burst of gets is gathered until it pauses this long...
    static let refreshGatherMilliseconds: Int64 = 5
    /// ...or has been gathering this long.
    static let refreshGatherLimitMilliseconds: Int64 = 50
    /// Each id costs about its length in the URL and in Kinto's Next-Page header.
    static let refreshChunkSize = 100

    /// With the lock held.
    func scheduleRefreshLocked(_ object: ManagedObject) {
        guard !object.refreshInFlight else {
            // The one in flight may have read the server before this get:
            // one more follows it, however many gets come meanwhile.
            object.refreshAgain = true
            return
        }
        let staleness = options.stalenessMilliseconds
        if staleness > 0 && object.record != nil && wallClockMilliseconds() - object.fetchedAt < staleness { return }
        object.refreshInFlight = true
        pendingRefreshes[object.entity.name, default: []].append(object)
        let now = MonotonicTime.now()
        lastRefreshRequest = now
        if !refreshScheduled {
            refreshScheduled = true
            refreshGatherStart = now
            engine.perform(afterMilliseconds: Self.refreshGatherMilliseconds) { [unowned self] in sendRefreshes() }
        }
    }

    /// On the engine thread.
    private func sendRefreshes() {
        let batches: [String: [ManagedObject]]? = lock.withLock {
            let now = MonotonicTime.now()
            if now.milliseconds(since: lastRefreshRequest) < Self.refreshGatherMilliseconds,
               now.milliseconds(since: refreshGatherStart) < Self.refreshGatherLimitMilliseconds {
                // Still arriving: gather a little longer.
                engine.perform(afterMilliseconds: Self.refreshGatherMilliseconds) { [unowned self] in sendRefreshes() }
                return nil
            }
            defer {
                pendingRefreshes = [:]
                refreshScheduled = false
            }
            return pendingRefreshes
        }
        guard let batches else { return }
        for (name, objects) in batches {
            guard let entity = model.entity(named: name) else { continue }
            var start = 0
            while start < objects.count {
                let chunk = Array(objects[start..<min(start + Self.refreshChunkSize, objects.count)])
                start += Self.refreshChunkSize
                refresh(chunk, of: entity)
            }
        }
    }

    private func refresh(_ objects: [ManagedObject], of entity: Entity) {
        var seen = Set<String>()
        let ids = objects.map(\.id).joined(separator: ",")
        _ = client.listRecords(route: entity.route, query: [("in_id", ids)], maximum: 0, page: { [unowned self] page in
            let records = try page.map { try Record(entity: entity, json: $0) }
            let now = wallClockMilliseconds()
            try store.upsert(records, of: entity, fetchedAt: now)
            _ = merge(records, of: entity, fetchedAt: now)
            seen.formUnion(records.map(\.id))
        }, done: { [unowned self] outcome in
            // A failed refresh leaves the cache as it was; the next get tries again.
            if case .success = outcome {
                let gone = objects.map(\.id).filter { !seen.contains($0) }
                if (try? store.delete(ids: gone, of: entity)) != nil { markDeleted(gone, of: entity) }
            }
            lock.withLock {
                guard !isClosedLocked else { return }
                for object in objects {
                    object.refreshInFlight = false
                    if object.refreshAgain {
                        object.refreshAgain = false
                        scheduleRefreshLocked(object)
                    }
                }
            }
        })
    }
}
