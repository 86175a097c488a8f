/// The server phase: which requests (a count, a sync, a whole listing or a
/// query), paging (the next page on the wire while this one is stored), a
/// listing that must move on, and its end (the table brought up to date,
/// the answer made).
extension FetchTask {
    func fetchFromServer() {
        do {
            let plan: ServerPlan
            if request.resultType == .count, server.isExact, try store.syncVersion(entity) == nil || request.serverQuery != nil {
                return countOnServer()
            } else if request.serverQuery != nil {
                plan = .query
            } else if let since = try store.syncVersion(entity) {
                plan = .sync(since: since)
            } else if isWholeListing {
                plan = .wholeListing(firstWrite: try store.nextWrite(), afterLostHistory: false,
                                     intoEmpty: try store.count(entity, where: nil, limit: 1) == 0)
            } else {
                plan = .query
            }
            beginListing(plan)
        } catch {
            fail(error)
        }
    }

    /// The server counts what it filters: nothing is listed or stored.
    func countOnServer() {
        var page = PageRequest(spec: entity.spec)
        page.filters = server.filters
        page.rawQuery = request.serverQuery
        let remote = connection.count(page) { [self] result in
            worker.async { [self] in
                guard isRunning else { return }
                do {
                    // A server query's limit cuts its answer before the offset (Kinto counts without it).
                    let total = try result.get()
                    let matching = max(0, min(total, serverLimit ?? total) - request.offset)
                    finish(nil, .counted(Int(request.limit > 0 ? min(matching, request.limit) : matching)))
                } catch {
                    fail(error)
                }
            }
        }
        sent(remote)
    }

    /// The server phase starts (again) with `plan`.
    func beginListing(_ plan: ServerPlan) {
        lifecycle.withRunning { $0.listing = Listing(plan) }
        let wantsTotal = lifecycle.wantsProgress
        // Not for a sync: a count leaves deletions out, which a sync sends.
        switch plan {
        case .wholeListing: if wantsTotal { askTotal(plan) }
        case .query: if wantsTotal, server.isExact { askTotal(plan) }
        case .sync: break
        }
        requestPage(nil, plan)
    }

    func requestPage(_ cursor: PageCursor?, _ plan: ServerPlan) {
        var page = PageRequest(spec: entity.spec)
        page.cursor = cursor
        switch plan {
        case .sync(let since):
            page.since = since  // everything that changed, in any order: the cache answers
        case .wholeListing:
            page.sort = serverSort
        case .query:
            page.sort = serverSort
            page.filters = server.filters
            page.rawQuery = request.serverQuery
            // A limit is the server's only where it says which records (its
            // filters say the whole predicate exactly, or the host's own
            // query); else pages are read until enough records match.
            // Offsets are skipped here.
            page.limit = stopsAtLimit && server.isExact ? needed : 0
        }
        let readsToTheEnd = plan.readsToTheEnd || !stopsAtLimit
        // A whole listing's answer is the store's, a query's is sorted here (`listingEnded`).
        page.readsEveryPage = readsToTheEnd && page.rawQuery == nil
        // Rows written from now on (a save's answer) are newer than the deletions this page names.
        let askedAt = try? store.nextWrite()
        let remote = connection.page(page) { [self] result in
            var result = result
            var index = 0
            // On the network thread: with no limit to watch, the next page
            // leaves now, while this one is decoded and stored on the worker.
            let eager = withListing { listing -> PageCursor? in
                guard listing.plan == plan else { return nil }  // a page of a plan given up
                index = listing.answeredPages
                listing.answeredPages += 1
                guard case .success(let answer) = result, let next = answer.next else { return nil }
                do {
                    try listing.cursors.advance(to: next, of: entity.name)
                } catch {
                    result = .failure(TetherError.wrap(error))
                    return nil
                }
                guard readsToTheEnd, listing.checkedPages >= index else { return nil }
                listing.requestedAfter = index
                return next
            }
            if let eager = eager ?? nil { requestPage(eager, plan) }
            worker.async { [self, result, index] in receive(result, plan, page: index, askedAt: askedAt) }
        }
        sent(remote)
    }

    /// `index`: the page's place in the listing (0: the first); `askedAt`:
    /// the store's next write when it was asked for.
    func receive(_ result: Result<Page, TetherError>, _ plan: ServerPlan, page index: Int, askedAt: Int64?) {
        guard withListing({ $0.plan == plan }) == true else { return }  // ended, or a page of a plan given up
        do {
            // (Only a sync can lose its history: a listing answered so again would start over forever.)
            // (Decoding can tell it too: changes that do not reach the version.)
            let page: Page
            let content: PageContent
            do {
                page = try result.get()
                content = try page.decode()
            } catch let error as TetherError where error.kind == .expired {
                guard case .sync = plan else { throw error }
                return relist()  // the server lost the history since our version
            }
            // The host's own server query says which records: not filtered here.
            var acceptingOlder = false
            if case .wholeListing(_, afterLostHistory: true, _) = plan { acceptingOlder = true }
            // A page older than what another fetch has synced since would
            // bring back what that listing replaced: the cache answers.
            if request.serverQuery == nil, try store.isOlderThanSync(page.version, of: entity) {
                Log.debug(.sync, "\(entity.name): a page of version \(page.version ?? 0) is older than the sync: the cache answers")
                // A sync the host started, told "nothing changed since" a
                // version older than one the store has since seen, still
                // ends with its full checks: that is how a restore shows on
                // Kinto's PostgreSQL backend (its collection's ETag falls
                // back to the version put back). Any other older page is a
                // listing that lost a race, and the cache is newer.
                guard !request.isBackgroundSync, case .sync(let since) = plan, page.version == since,
                      checksVersions(plan), context.takeFullCheck(entity, always: true) else {
                    return finish(nil, try readCache())
                }
                return checkVersions(plan) { [self] in try readCache() }
            }
            if let next = page.next { try checkProgress(content, next) }
            withListing { $0.checkedPages = index + 1 }
            Log.debug(.sync, "\(entity.name): page of \(content.records.count) records, \(content.deletedIDs.count) deletions"
                      + (page.next == nil ? ", the last" : ", more to come"))
            received(content.records.count + content.deletedIDs.count, total: page.total, last: page.next == nil)
            // Objects are made only for an answer that holds them; else only
            // those in memory take the records (the rest are rows, read when asked).
            let objects = try context.absorb(content, of: entity, matching: request.serverQuery == nil ? predicate : nil,
                                             acceptingOlder: acceptingOlder, makingObjects: keepsPageObjects(plan), askedAt: askedAt)
            let received = withListing { listing -> Int64 in
                if listing.firstPage { listing.version = page.version }
                listing.firstPage = false
                guard keepsPageObjects(plan) else { return 0 }
                for object in objects where listing.inResults.insert(ObjectIdentifier(object)).inserted {
                    listing.results.append(object)
                }
                listing.received += Int64(objects.count)
                return listing.received
            } ?? 0
            if let next = page.next {
                if plan.readsToTheEnd || !stopsAtLimit {
                    let requested = withListing { listing -> Bool in
                        defer { listing.requestedAfter = max(listing.requestedAfter, index) }
                        return listing.requestedAfter >= index
                    } ?? false
                    return requested ? () : requestPage(next, plan)
                }
                if received < needed { return requestPage(next, plan) }
            }
            // Pages are no snapshot: a record changed meanwhile may have moved
            // to a page already read. What changed since the first page is
            // asked for before the answer is made (and before a whole
            // listing removes what it did not see).
            if index > 0, request.serverQuery == nil, let since = withListing({ $0.version }) ?? nil {
                return catchUp(since: since) { [self] in try ended(plan, page) }
            }
            try ended(plan, page)
        } catch {
            fail(error)
        }
    }

    /// The entity's sync is forgotten and everything listed again, the
    /// server's versions taken even where older than the store's: what the
    /// listing does not name leaves the store, and its observers are told.
    func relist() {
        do {
            try store.clearSyncVersion(entity)
            beginListing(.wholeListing(firstWrite: try store.nextWrite(), afterLostHistory: true))
        } catch {
            fail(error)
        }
    }

    /// The listing is in: makes the answer and ends the fetch.
    func ended(_ plan: ServerPlan, _ page: Page) throws {
        // A background sync that found nothing new costs its one request: the checks run when due.
        let checks = plan == .query || context.takeFullCheck(entity, always: !request.isBackgroundSync)
        if checks, checksVersions(plan) {
            // What changed since a version cannot show history rewritten
            // behind a newer change: the server's ids and versions are
            // compared with the store's (see `VersionCheck`). The cache,
            // then exact, answers (another fetch's check may have changed it too).
            try settle(plan)
            return checkVersions(plan) { [self] in try storedAnswer() }
        }
        if checks, case .sync = plan, lifecycle.withRunning({ work -> Bool in defer { work.counted = true }; return !work.counted }) == true {
            // A set re-created leaves no trace in what changed since our
            // version: then the server holds another number of records than the store.
            let remote = connection.count(PageRequest(spec: entity.spec)) { [self] result in
                worker.async { [self] in
                    guard withListing({ $0.plan == plan }) == true else { return }
                    do {
                        let held = try store.count(entity, where: nil)
                        if case .success(let total) = result, total != held {
                            Log.debug(.sync, "\(entity.name): the server holds \(total) records, the store \(held): listing all again")
                            return relist()
                        }
                        finish(nil, try listingEnded(plan))  // (a count that failed leaves the sync as it is)
                    } catch {
                        fail(error)
                    }
                }
            }
            return sent(remote)
        }
        if case .query = plan, page.next == nil, predicate != nil, request.serverQuery == nil {
            // The whole filtered answer is in: rows the cache still thinks
            // match, but the server did not name, changed or went.
            let named = Set((withListing { $0.results } ?? []).map { ExactString($0.id) })
            let cached = try store.idList(entity, where: predicate, sort: nil)
            let stale = (0..<cached.count).map { cached[$0] }.filter { !named.contains(ExactString($0)) }
            if !stale.isEmpty { return verify(stale) }
        }
        finish(nil, try listingEnded(plan))
    }

    /// The server's ids and versions compared with the store's
    /// (`VersionCheck`); then `answer` ends the fetch.
    private func checkVersions(_ plan: ServerPlan, then answer: @escaping @Sendable () throws -> FetchedResults) {
        VersionCheck(context: context, store: store, connection: connection, worker: worker, entity: entity,
                     sent: { [self] in sent($0) },
                     isCurrent: { [self] in withListing({ $0.plan == plan }) == true }) { [self] outcome in
            do {
                _ = try outcome.get()
                finish(nil, try answer())
            } catch {
                fail(error)
            }
        }.start()
    }

    /// A page that names a next cursor must bring a record or deletion the
    /// page before did not: else the listing goes round (a cursor that
    /// changes while the pages do not), and ends with `.protocol`.
    func checkProgress(_ content: PageContent, _ next: PageCursor) throws {
        let idField = entity.attributes[entity.idIndex].name
        var ids = Set(content.deletedIDs.map(ExactString.init))
        for fields in content.records {
            if let id = fields.first(where: { $0.key == idField })?.value.stringValue { ids.insert(ExactString(id)) }
        }
        let moved = withListing { listing -> Bool in
            defer { listing.lastPageIDs = ids }
            return !ids.isSubset(of: listing.lastPageIDs)
        } ?? true  // (ended meanwhile: nothing is asked next)
        guard moved else {
            throw TetherError(.protocol, "a page of \(entity.name) brought nothing new (\(content.records.count) records, "
                                         + "none new) and named the cursor \(CursorTrail.name(next)): the listing would never end")
        }
    }

    /// The listing's last page is in: brings the table up to date (its sync
    /// version, rows a whole listing did not name), returns the results.
    func listingEnded(_ plan: ServerPlan) throws -> FetchedResults {
        try settle(plan)
        let results = withListing { $0.results } ?? []
        switch plan {
        case .sync, .wholeListing:
            return try storedAnswer()
        case .query:
            // In the cache's order, so both phases agree; a host's own server
            // query is answered as the server orders it.
            // (A last page may hold more than a server query's limit: its first are the answer.)
            let ordered = request.serverQuery == nil ? SortOrder(entity: entity, keys: sort).sorted(results)
                : Array(results.prefix(Int(clamping: serverLimit ?? Int64(results.count))))
            let pending = context.pendingRows(entity)
            if !pending.isEmpty {

                let ids = PendingResults(entity: entity, rows: pending, predicate: predicate, sort: sort)
                    .ids(stored: ordered.map(\.id), offset: request.offset, limit: request.limit,
                         inServerOrder: request.serverQuery != nil) { [entity] id in
                        try? store.rows(entity, ids: [id])[ExactString(id)]?.record.values
                    }
                return try answer(ids: ids, PendingResults(entity: entity, rows: pending, predicate: predicate, sort: sort))
            }
            let wanted = ordered.dropFirst(Int(request.offset))
            return answer(request.limit > 0 ? Array(wanted.prefix(Int(request.limit))) : Array(wanted))
        }
    }

    /// The cache's answer at the end of a sync or whole listing. Objects
    /// (without a batch size) are made as the host reads them, from ids in
    /// the cache's order (by id, SQLite's primary key, without sort keys):
    /// rows just stored are not read back into objects no one may read.
    func storedAnswer() throws -> FetchedResults {
        if request.isBackgroundSync { return .empty(request.resultType) }
        guard request.resultType == .objects, request.batchSize == 0, context.pendingRows(entity).isEmpty else {
            return try readCache()
        }
        let keys = (predicate?.indexableAttributes ?? []) + sort.prefix(1).map(\.index)
        try store.ensureIndexes(entity, on: keys.filter { $0 != entity.idIndex })  // as `readCache`
        let ids = try store.idList(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
        return .ids(ids, type: .objects, context: context, entity: entity, batchSize: 0)
    }

    /// The table brought up to the listing's end: its sync version; for a
    /// whole listing, the rows it did not name removed. Nothing for a query.
    func settle(_ plan: ServerPlan) throws {
        let version = withListing { $0.version } ?? nil
        switch plan {
        case .sync:
            if let version { try store.setSyncVersion(entity, version) }
        case .wholeListing(let firstWrite, _, _):
            // What a whole listing did not include is gone from the server.
            context.markDeleted(try store.deleteRows(of: entity, writtenBefore: firstWrite), of: entity)
            if let version { try store.setSyncVersion(entity, version) }
        case .query:
            break
        }
    }

    /// Asks the server for records by id, batch after batch; stores what
    /// it has, removes what it has not, then ends the fetch.
}
