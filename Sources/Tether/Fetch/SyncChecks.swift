/// What a listing does after its last page, since pages are no snapshot:
/// the catch-up (what changed since the first page) and the id check
/// (cached rows the server's filtered answer did not name).
extension FetchTask {
    /// Catch-ups after a listing of several pages, at most: a catch-up of
    /// several pages is no snapshot either, and is followed by another.
    static let catchUpRounds = 3

    /// Asks what changed since `since` (the first page's version), stores
    /// it and puts it in the answer, then the entity's version is the
    /// catch-up's and `then` goes on.
    func catchUp(since: Int64, round: Int = 1, cursor: PageCursor? = nil, version: Int64? = nil,
                         cursors: CursorTrail = CursorTrail(), then: @escaping @Sendable () throws -> Void) {
        var request = PageRequest(spec: entity.spec)
        request.since = since
        request.cursor = cursor
        let askedAt = try? store.nextWrite()
        let remote = connection.page(request) { [self] result in
            worker.async { [self] in
                guard isRunning else { return }
                do {
                    let page = try result.get()
                    let content = try page.decode()
                    let taken = try context.absorbAnswer(content, of: entity, askedAt: askedAt)
                    caughtUp(taken.deletedIDs, taken.objects)
                    let version = version ?? page.version ?? since
                    if let next = page.next {
                        var cursors = cursors
                        try cursors.advance(to: next, of: entity.name)
                        return catchUp(since: since, round: round, cursor: next, version: version, cursors: cursors, then: then)
                    }
                    withListing { $0.version = max($0.version ?? version, version) }
                    if cursor != nil, round < Self.catchUpRounds {
                        return catchUp(since: version, round: round + 1, then: then)
                    }
                    try then()
                } catch {
                    fail(error)
                }
            }
        }
        sent(remote)
    }

    /// A catch-up's changes in the answer so far: what went or no longer
    /// matches leaves it, what matches is in it.
    func caughtUp(_ deleted: [String], _ objects: [ManagedObject]) {
        let leaving = Set(deleted.map(ExactString.init)).union(objects.filter { object in
            guard let predicate else { return false }
            return !(object.state.withLock { $0.record }.map { predicate.matches($0.values) } ?? false)
        }.map { ExactString($0.id) })
        withListing { listing in
            guard keepsPageObjects(listing.plan) else { return }
            listing.results.removeAll { leaving.contains(ExactString($0.id)) }
            listing.inResults = Set(listing.results.map(ObjectIdentifier.init))
            for object in objects where !leaving.contains(ExactString(object.id))
                && listing.inResults.insert(ObjectIdentifier(object)).inserted {
                listing.results.append(object)
            }
        }
    }

    /// Rows the cache holds as matching that the server's whole filtered
    /// answer did not name: asked for by id (changed or deleted there).
    func verify(_ stale: [String]) {
        ByIDRefetch(context: context, store: store, connection: connection, worker: worker, entity: entity,
                    acceptingOlder: false, sent: { [self] in sent($0) }, isCurrent: { [self] in isRunning }) { [self] outcome in
            do {
                try outcome.get()
                finish(nil, try listingEnded(.query))
            } catch {
                fail(error)
            }
        }.start(stale)
    }
}
