/// A live fetch: after its answer it watches the cache (the context tells it
/// which rows of its entity changed) and answers again when its answer moves.
extension FetchTask: RowListener {
    /// Event: a live fetch has its answer (or its server phase failed: the
    /// error is told, and it watches the cache all the same).
    func beginWatching(_ error: TetherError?, _ results: FetchedResults) {
        // The versions of the rows the host is given, to tell updates later.
        let ids = results.allIDs
        let versions = (try? store.versions(entity, ids: ids.map(\.string))) ?? [:]
        // Changes noted meanwhile stay in `changedIDs`: once this answer is
        // delivered, the cache is looked at again.
        let former = lifecycle.beginWatching { work in
            Watching(lastRows: ids.map { ResultChanges.Row(id: $0, version: versions[$0]) }, lastCount: results.count,
                     changedIDs: work.changedIDs)
        }
        guard let former else { return }
        former.totalRequest?.cancel()
        postLive(error, results)
    }

    func postLive(_ error: TetherError?, _ results: FetchedResults) {
        lifecycle.post(update: FetchResult(phase: .live, error: error, results: results)) { [self] in answerDelivered() }
    }

    /// Event: records of the entity were written or deleted in the context.
    /// While the server phase runs they are only noted: its answer may have
    /// been read before them, so the first answer is followed by a look.
    func rowsChanged(_ ids: [String]) {
        let schedule = lifecycle.withWork(running: { work -> Bool in
            work.changedIDs.formUnion(ids.map(ExactString.init))
            return false
        }, watching: { watching -> Bool in
            watching.changedIDs.formUnion(ids.map(ExactString.init))
            guard !watching.lookScheduled, !watching.answerInFlight else { return false }
            watching.lookScheduled = true
            return true
        }) ?? false
        if schedule { scheduleLook() }
    }

    func answerDelivered() {
        let schedule = lifecycle.withWatching { watching -> Bool in
            watching.answerInFlight = false
            guard !watching.changedIDs.isEmpty, !watching.lookScheduled else { return false }
            watching.lookScheduled = true
            return true
        } ?? false
        if schedule { scheduleLook() }
    }

    /// Changes come in bursts (a listing's pages): they are gathered this long.
    static let liveGatherMilliseconds: Int64 = 10

    func scheduleLook() {
        worker.async(afterMilliseconds: Self.liveGatherMilliseconds) { [self] in look() }
    }

    /// On the worker: reads the answer again; posts it if it moved.
    func look() {
        guard let (lastRows, lastCount) = lifecycle.withWatching({ watching -> ([ResultChanges.Row], Int) in
            watching.lookScheduled = false
            watching.changedIDs = []
            watching.answerInFlight = true
            return (watching.lastRows, watching.lastCount)
        }) else { return }
        var rows: [ResultChanges.Row]
        var count: Int
        var read: FetchedResults?  // the answer, when read whole already
        do {
            let pending = context.pendingRows(entity)
            if !pending.isEmpty {
                // An unsaved change moves no version: its revision stands in (negative, never a server's).
                let answer = try readCache()
                let ids = answer.allIDs
                let versions = try store.versions(entity, ids: ids.map(\.string))
                var revisions: [ExactString: Int64] = [:]
                for row in pending { revisions[ExactString(row.object.id)] = -row.revision }
                rows = ids.map { ResultChanges.Row(id: $0, version: revisions[$0] ?? versions[$0]) }
                count = answer.count
                read = answer
            } else if request.resultType == .count {
                rows = []
                count = Int(try store.count(entity, where: predicate, limit: request.limit, offset: request.offset))
            } else {
                rows = try store.versions(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
                    .map { ResultChanges.Row(id: ExactString($0.id), version: $0.version) }
                count = rows.count
            }
        } catch {
            _ = lifecycle.withWatching { $0.answerInFlight = false }
            return  // the context is closing: its cancel ends the fetch
        }
        guard rows != lastRows || count != lastCount else { return answerDelivered() }
        // The answer and its changes come from one read of the rows: unsaved
        // changes made meanwhile on another thread must not make the changes
        // disagree with the answer they describe.
        let results: FetchedResults
        do {
            if let read {
                results = read
            } else {
                results = try readCache()
                let ids = results.allIDs
                let versions = try store.versions(entity, ids: ids.map(\.string))
                var revisions: [ExactString: Int64] = [:]
                for row in context.pendingRows(entity) { revisions[ExactString(row.object.id)] = -row.revision }
                rows = ids.map { ResultChanges.Row(id: $0, version: revisions[$0] ?? versions[$0]) }
                count = results.count
            }
        } catch { return answerDelivered() }
        guard rows != lastRows || count != lastCount else { return answerDelivered() }
        let changes = ResultChanges.between(lastRows, rows)
        let moved = lifecycle.withWatching { watching -> Bool in
            watching.lastRows = rows
            watching.lastCount = count
            return true
        } ?? false
        if moved { postLive(nil, results.with(changes)) } else { answerDelivered() }
    }
}
