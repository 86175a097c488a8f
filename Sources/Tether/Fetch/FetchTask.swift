import Synchronization

public enum CachePolicy: Sendable {
    case cacheThenServer, cacheOnly, serverOnly, cacheElseServer
}

/// `live`: a live fetch's answer, first the server's, then each time it
/// changes; its `final` comes only when it is cancelled.
public enum FetchPhase: Sendable { case cached, live, final }

public struct FetchRequest: Sendable {
    public var entity: String
    /// Attribute names, comma-separated, "-" for descending.
    public var sort: String?
    /// At most this many objects; 0: no limit.
    public var limit: Int64 = 0
    public var policy: CachePolicy = .cacheThenServer
    /// Which records: a predicate (see `Predicate`); nil: all.
    public var predicate: String?
    /// The values of the predicate's `$1`, `$2`…
    public var arguments: [Value] = []
    /// Skips this many results (in sort order) before the first one given.
    public var offset: Int64 = 0
    /// A query in the server's own language (for Kinto, query parameters
    /// such as `has_Owner=true&_since=...`), used as given for the server
    /// phase instead of the predicate's filters; its answer is the result as
    /// the server gives it. The predicate still selects from the cache.
    /// Refused for a live fetch, which follows the cache.
    public var serverQuery: String?
    /// Objects, ids, values or a count.
    public var resultType = ResultType.objects
    /// For `.values`: attribute names; empty: every attribute.
    public var properties: [String] = []
    /// 0: the answer holds its objects. n > 0: it holds ids and makes
    /// objects n at a time as they are read, so a large answer stays small.
    public var batchSize = 0
    /// Kept live: after its answer, it answers again (phase `.live`, with
    /// the changes) whenever matching records are inserted, changed or
    /// deleted in the context, until cancelled.
    public var live = false
    /// The to-many relationship `relationship` of `owner`: the records
    /// referring to it (with `predicate`, those of them that match). The
    /// entity is the relationship's (`entity` may be empty).
    public var related: (owner: ManagedObject, relationship: String)?

    public init(entity: String) { self.entity = entity }
}

/// One callback of a fetch. On a final error, `results` are the cache's.
public struct FetchResult: Sendable {
    public let phase: FetchPhase
    public let error: TetherError?
    public let results: FetchedResults

    /// Every object of the results.
    public var objects: [ManagedObject] { results.objects }
}

/// How far the server phase has come: records received (every record the
/// server sent, matching or not) of `total`, when the server tells it.
public struct FetchProgress: Sendable, Equatable {
    public let received: Int64
    public let total: Int64?
}

/// An asynchronous fetch: answers from the cache, then from the server, and
/// ends in exactly one final callback. After that the library keeps no
/// reference to it, its callback, or its results.
///
/// Its life is one state machine (`Machine.State`), changed under its lock
/// by events from the worker, the network and the host (cancel); each event
/// returns what to do, done outside the lock.
public final class FetchTask: Sendable {
    public let request: FetchRequest
    let entity: Entity
    private let sort: [(index: Int, descending: Bool)]
    private let predicate: Predicate?
    /// The predicate as the server can filter; `isExact`: all of it.
    private let server: (filters: [Filter], isExact: Bool)
    /// The attributes of a values fetch.
    private let properties: [Int]
    private let context: Context
    private let machine = Lock(Machine())

    private struct Machine {
        enum State {
            case idle
            /// Working; `remote` is the server request on the wire, if any.
            case running(remote: (any Cancellable)?)
            /// A live fetch that has answered: watching its entity's changes.
            case watching
            /// The final callback is posted (or the cancellation is).
            case done
        }
        var state = State.idle
        var subscription: Delivery.SubscriptionID?
        var callback: (@Sendable (FetchResult) -> Void)?
        var progress: (@Sendable (FetchProgress) -> Void)?
        /// Records the server sent so far, and when progress was last told.
        var sentByServer: Int64 = 0
        var total: Int64?
        /// The count asked for progress's total, while in flight.
        var totalRequest: (any Cancellable)?
        var progressToldAt: MonotonicTime?
        /// Watching: the answer last posted, the ids changed since, whether
        /// a look is scheduled, and whether a posted answer is still being
        /// delivered (then the next waits for it: one in the queue at most).
        var lastRows: [ResultChanges.Row] = []
        var lastCount = 0
        /// (Also gathered while running: see `noteChanged`.)
        var changedIDs = Set<ExactString>()
        var lookScheduled = false
        var answerInFlight = false
        /// The server phase so far, each object once: a listing can name a
        /// record twice (a hostile server, or a record moving between pages).
        var results: [ManagedObject] = []
        var inResults = Set<ObjectIdentifier>()
        var received: Int64 = 0
        var plan = ServerPlan.query
        /// The collection's version when the listing's first page was answered.
        var version: Int64?
        var firstPage = true
        /// The listing's cursors so far, and the ids of its last page: a
        /// listing must move on (see `CursorTrail`, `receive`).
        var cursors = CursorTrail()
        var lastPageIDs = Set<ExactString>()
        /// Pages answered, pages found to move on, and the last page whose
        /// next was requested: a next page leaves before its page is stored
        /// only once the pages before are found to move on, so a listing
        /// that goes round is not chased on the wire meanwhile.
        var answeredPages = 0
        var checkedPages = 0
        var requestedAfter = -1
        /// The cache's answer, for a final error of CACHE_THEN_SERVER.
        var cached: FetchedResults?

        /// The server phase starts (again) with `plan`.
        mutating func begin(_ plan: ServerPlan) {
            self.plan = plan
            results = []
            inResults = []
            received = 0
            version = nil
            firstPage = true
            cursors = CursorTrail()
            lastPageIDs = []
            answeredPages = 0
            checkedPages = 0
            requestedAfter = -1
            sentByServer = 0
            total = nil
        }

        /// The fetch has ended: it holds no objects any longer.
        mutating func end() {
            totalRequest?.cancel()
            totalRequest = nil
            state = .done
            results = []
            inResults = []
            cached = nil
            progress = nil
            lastRows = []
            changedIDs = []
        }
    }

    init(context: Context, request: FetchRequest) throws {
        // A to-many relationship is a fetch of the records referring to its owner.
        let related = try request.related.map { try context.inverse(of: $0.owner, named: $0.relationship) }
        guard let entity = related?.source ?? context.model.entity(named: request.entity) else {
            throw TetherError(.notFound, "the model has no entity \(request.entity.debugDescription)")
        }
        if let related, !request.entity.isEmpty, request.entity != related.source.name {
            throw TetherError(.invalid, "\(request.related!.relationship) holds \(related.source.name), not \(request.entity)")
        }
        guard request.limit >= 0 else { throw TetherError(.invalid, "limit cannot be negative") }
        guard request.offset >= 0, request.offset <= Int64(Int32.max) else {
            throw TetherError(.invalid, "offset must be between 0 and \(Int32.max)")
        }
        if let query = request.serverQuery {
            // Goes into a URL as given: printable ASCII, no fragment, no space.
            guard !query.isEmpty, query.utf8.count <= 8_000,
                  query.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") }) else {
                throw TetherError(.invalid, "the server query must be printable ASCII without spaces or #, "
                                            + "percent-encoded, at most 8000 bytes")
            }
            // A live fetch follows the cache, which cannot answer the
            // server's own query: its answers would change meaning.
            if request.live {
                throw TetherError(.invalid, "a live fetch cannot have a server query: it follows the cache, "
                                            + "which answers the predicate, not the server's query")
            }
        }
        var sort: [(index: Int, descending: Bool)] = []
        let sortText = request.sort ?? ""
        for part in sortText.split(separator: ",", omittingEmptySubsequences: false) where !sortText.isEmpty {
            let descending = part.hasPrefix("-")
            let name = String(descending ? part.dropFirst() : part[...])
            guard let index = entity.attributeIndex(named: name) else {
                throw TetherError(.invalid, "cannot sort \(entity.name) by \(name.debugDescription): no such attribute")
            }
            sort.append((index, descending))
        }
        let asked = try request.predicate.map { try Predicate.parse($0, entity: entity, arguments: request.arguments, maximumValues: Self.mostValues) }
        if let related, let owner = request.related?.owner {
            let refers = context.refers(related, to: owner)
            predicate = asked.map { .and([refers, $0]) } ?? refers
        } else {
            predicate = asked
        }
        // Refused here, not by SQLite at the first read (a store error).
        if let predicate, case let values = predicate.sql(entity).parameters.count, values > Self.mostValues {
            throw TetherError(.invalid, "predicate: \(values) values, more than the \(Self.mostValues) the store binds in one query")
        }
        if request.predicate == nil, !request.arguments.isEmpty {
            throw TetherError(.invalid, "arguments given without a predicate")
        }
        server = request.serverQuery != nil ? ([], true) : predicate?.serverFilters(entity, context.connection) ?? ([], true)
        guard request.batchSize >= 0 else { throw TetherError(.invalid, "batch size cannot be negative") }
        if request.resultType != .values, !request.properties.isEmpty {
            throw TetherError(.invalid, "properties are for a values fetch")
        }
        properties = try (request.resultType == .values && request.properties.isEmpty
            ? Array(entity.attributes.indices) : request.properties.map { name in
                guard let index = entity.attributeIndex(named: name) else {
                    throw TetherError(.invalid, "\(entity.name) has no attribute \(name.debugDescription) to fetch")
                }
                return index
            })
        self.request = request
        self.entity = entity
        self.sort = sort
        self.context = context
        Live.tasks.add(1, ordering: .relaxed)
    }

    deinit { Live.tasks.subtract(1, ordering: .relaxed) }

    /// Most values a predicate may hold: what one SQLite statement binds,
    /// less those a query adds (limit, offset).
    static let mostValues = Database.variableLimit - 16

    /// Starts the fetch; `callback` runs once per phase, `progress` (if
    /// any) as server pages arrive, at most every `progressIntervalMilliseconds`
    /// but always for a listing's last page.
    public func start(progress: (@Sendable (FetchProgress) -> Void)? = nil,
                      _ callback: @escaping @Sendable (FetchResult) -> Void) throws {
        try machine.withLock { machine in
            guard case .idle = machine.state else { throw TetherError(.misuse, "the fetch has already started") }
            machine.callback = callback
            machine.progress = progress
        }
        let id = try context.subscribe(
            cancel: { [self] id in try? cancel(id) },
            deliverCancellation: { [self] in deliver(FetchResult(phase: .final, error: .cancelled, results: .empty(request.resultType))) },
            finished: { [self] in machine.withLock { $0.callback = nil; $0.progress = nil } })
        let started = machine.withLock { machine -> Bool in
            machine.subscription = id
            guard case .idle = machine.state else { return false }
            machine.state = .running(remote: nil)
            return true
        }
        guard started else { return }
        if request.live {
            // Watched from the start: a change that lands while the server
            // phase runs (another fetch's page, a save) is looked at after
            // the first answer, which may not hold it.
            context.watch(self, entity)
            if machine.withLock({ if case .done = $0.state { true } else { false } }) { context.unwatch(self, entity) }
        }
        context.worker.async { [self] in run() }
    }

    /// Cancels; afterwards only the final cancelled callback can arrive.
    /// Fails with `.closed` if the fetch was cancelled or has finished.
    public func cancel() throws {
        guard let id = machine.withLock({ $0.subscription }) else {
            throw TetherError(.closed, "the fetch has not started")
        }
        try cancel(id)
    }

    private func cancel(_ id: Delivery.SubscriptionID) throws {
        try context.delivery.cancel(id)
        let remote = machine.withLock { machine -> (any Cancellable)? in
            defer { machine.end() }
            if case .running(let remote) = machine.state { return remote }
            return nil
        }
        remote?.cancel()
        if request.live { context.unwatch(self, entity) }
    }

    /// Results to collect from the server before the offset is skipped; 0: all.
    private var needed: Int64 {
        guard request.limit > 0 else { return 0 }
        let (sum, overflow) = request.limit.addingReportingOverflow(request.offset)
        return overflow ? .max : sum
    }

    private var isRunning: Bool {
        machine.withLock { if case .running = $0.state { return true } else { return false } }
    }

    private func deliver(_ result: FetchResult) {
        let callback = machine.withLock { $0.callback }
        callback?(result)
    }

    private func post(_ phase: FetchPhase, _ error: TetherError?, _ results: FetchedResults) {
        guard let id = machine.withLock({ $0.subscription }) else { return }
        let kind: Delivery.Kind = phase == .final ? .final : .update
        context.delivery.post(kind, to: id) { [self] in deliver(FetchResult(phase: phase, error: error, results: results)) }
    }

    /// Progress is told at most this often (and not after the final).
    static let progressIntervalMilliseconds: Int64 = 100

    /// Event: `count` more records came from the server; `last`: the
    /// listing's last page, whose count is told whatever the interval.
    private func received(_ count: Int, total: Int64?, last: Bool) {
        // The callback is taken now: by delivery time the fetch may have
        // ended (its final is queued behind this) and let it go.
        let told = machine.withLock { machine -> (FetchProgress, @Sendable (FetchProgress) -> Void)? in
            machine.sentByServer += Int64(count)
            if machine.total == nil { machine.total = total }
            guard case .running = machine.state else { return nil }
            let now = MonotonicTime.now()
            if !last, let told = machine.progressToldAt, now.milliseconds(since: told) < Self.progressIntervalMilliseconds {
                return nil
            }
            machine.progressToldAt = now
            guard let progress = machine.progress else { return nil }
            return (FetchProgress(received: machine.sentByServer, total: machine.total), progress)
        }
        guard let (progress, callback) = told, let id = machine.withLock({ $0.subscription }) else { return }
        context.delivery.post(.update, to: id) { callback(progress) }
    }

    /// Event: the fetch ends with `error` (nil: success). Only the first end counts.
    private func finish(_ error: TetherError?, _ results: FetchedResults) {
        if request.live { return settle(error, results) }
        let first = machine.withLock { machine -> Bool in
            switch machine.state {
            case .running:
                machine.end()
                return true
            case .done, .watching:
                return false  // cancelled meanwhile: the cancellation is the final
            case .idle:
                assertionFailure("a fetch finished before it started")
                return false
            }
        }
        if first {
            Log.debug(.sync, "fetch of \(entity.name) (\(request.policy)) ended: "
                      + (error.map { "\($0.kind): \($0.message)" } ?? "\(results.count) results"))
            post(.final, error, results)
        }
    }

    // MARK: live

    /// Event: a live fetch has its answer (or its server phase failed: the
    /// error is told, and it watches the cache all the same).
    private func settle(_ error: TetherError?, _ results: FetchedResults) {
        // The versions of the rows the host is given, to tell updates later.
        let ids = results.allIDs
        let versions = (try? context.store(for: entity).versions(entity, ids: ids.map(\.string))) ?? [:]
        let first = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return false }
            machine.state = .watching
            machine.results = []
            machine.inResults = []
            machine.cached = nil
            machine.lastRows = ids.map { ResultChanges.Row(id: $0, version: versions[$0]) }
            machine.lastCount = results.count
            machine.answerInFlight = true
            return true
        }
        guard first else { return }
        // Changes noted meanwhile stay in `changedIDs`: once this answer is
        // delivered, the cache is looked at again.
        postLive(error, results)
    }

    private func postLive(_ error: TetherError?, _ results: FetchedResults) {
        guard let id = machine.withLock({ $0.subscription }) else { return }
        context.delivery.post(.update, to: id) { [self] in
            deliver(FetchResult(phase: .live, error: error, results: results))
            answerDelivered()
        }
    }

    /// Event: records of the entity were written or deleted in the context.
    /// While the server phase runs they are only noted: its answer may have
    /// been read before them, so the first answer is followed by a look.
    func noteChanged(_ ids: [String]) {
        let schedule = machine.withLock { machine -> Bool in
            switch machine.state {
            case .running:
                machine.changedIDs.formUnion(ids.map(ExactString.init))
                return false
            case .watching: break
            case .idle, .done: return false
            }
            machine.changedIDs.formUnion(ids.map(ExactString.init))
            guard !machine.lookScheduled, !machine.answerInFlight else { return false }
            machine.lookScheduled = true
            return true
        }
        if schedule { scheduleLook() }
    }

    private func answerDelivered() {
        let schedule = machine.withLock { machine -> Bool in
            machine.answerInFlight = false
            guard case .watching = machine.state, !machine.changedIDs.isEmpty, !machine.lookScheduled else { return false }
            machine.lookScheduled = true
            return true
        }
        if schedule { scheduleLook() }
    }

    /// Changes come in bursts (a listing's pages): they are gathered this long.
    static let liveGatherMilliseconds: Int64 = 10

    private func scheduleLook() {
        context.worker.async(afterMilliseconds: Self.liveGatherMilliseconds) { [self] in look() }
    }

    /// On the worker: reads the answer again; posts it if it moved.
    private func look() {
        guard let (lastRows, lastCount) = machine.withLock({ machine -> ([ResultChanges.Row], Int)? in
            machine.lookScheduled = false
            guard case .watching = machine.state else { return nil }
            machine.changedIDs = []
            machine.answerInFlight = true
            return (machine.lastRows, machine.lastCount)
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
                let versions = try context.store(for: entity).versions(entity, ids: ids.map(\.string))
                var revisions: [ExactString: Int64] = [:]
                for row in pending { revisions[ExactString(row.object.id)] = -row.revision }
                rows = ids.map { ResultChanges.Row(id: $0, version: revisions[$0] ?? versions[$0]) }
                count = answer.count
                read = answer
            } else if request.resultType == .count {
                rows = []
                count = Int(try context.store(for: entity).count(entity, where: predicate, limit: request.limit, offset: request.offset))
            } else {
                rows = try context.store(for: entity).versions(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
                    .map { ResultChanges.Row(id: ExactString($0.id), version: $0.version) }
                count = rows.count
            }
        } catch {
            machine.withLock { $0.answerInFlight = false }
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
                let versions = try context.store(for: entity).versions(entity, ids: ids.map(\.string))
                var revisions: [ExactString: Int64] = [:]
                for row in context.pendingRows(entity) { revisions[ExactString(row.object.id)] = -row.revision }
                rows = ids.map { ResultChanges.Row(id: $0, version: revisions[$0] ?? versions[$0]) }
                count = results.count
            }
        } catch { return answerDelivered() }
        guard rows != lastRows || count != lastCount else { return answerDelivered() }
        let changes = ResultChanges.between(lastRows, rows)
        let moved = machine.withLock { machine -> Bool in
            guard case .watching = machine.state else { return false }
            machine.lastRows = rows
            machine.lastCount = count
            return true
        }
        if moved { postLive(nil, results.with(changes)) } else { answerDelivered() }
    }

    /// Event: a server request left; remember it for cancel.
    private func sent(_ remote: any Cancellable) {
        let cancelledMeanwhile = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return true }
            machine.state = .running(remote: remote)
            return false
        }
        if cancelledMeanwhile { remote.cancel() }
    }

    // MARK: on the worker

    private func run() {
        guard isRunning else { return }
        do {
            // A local entity's store is its truth: the cache answers, once.
            switch entity.isLocal ? .cacheOnly : request.policy {
            case .cacheOnly:
                finish(nil, try readCache())
            case .cacheThenServer:
                let cached = try readCache()
                machine.withLock { $0.cached = cached }
                post(.cached, nil, cached)
                fetchFromServer()
            case .serverOnly:
                fetchFromServer()
            case .cacheElseServer:
                // Only a synced entity's cache holds every match: before,
                // it holds what earlier answers happened to bring.
                let synced = try context.store(for: entity).syncVersion(entity) != nil
                let cached = try readCache()
                if synced, cached.count > 0 { finish(nil, cached) } else { fetchFromServer() }
            }
        } catch {
            finish(TetherError.wrap(error), FetchedResults.empty(request.resultType))
        }
    }

    /// The cache's answer, reading only what the result type needs.
    private func readCache() throws -> FetchedResults {
        let store = context.store(for: entity)
        let keys = (predicate?.indexableAttributes ?? []) + sort.prefix(1).map(\.index)
        try store.ensureIndexes(entity, on: keys.filter { $0 != entity.idIndex })  // the id has its own
        let pending = context.pendingRows(entity)
        if !pending.isEmpty {
            return try readCache(with: PendingResults(entity: entity, rows: pending, predicate: predicate, sort: sort))
        }
        switch request.resultType {
        case .count:
            return .counted(Int(try store.count(entity, where: predicate, limit: request.limit, offset: request.offset)))
        case .objects where request.batchSize > 0, .ids:
            let ids = try store.idList(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .ids(ids, type: request.resultType, context: context, entity: entity, batchSize: request.batchSize)
        case .values where request.batchSize > 0:
            let ids = try store.idList(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .batchedValues(ids, properties: properties, context: context, entity: entity, batchSize: request.batchSize)
        case .values:
            let rows = try store.query(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .values(rows.map(\.record.id), rows.map { row in properties.map { row.record.values[$0] } },
                           properties: properties, context: context, entity: entity)
        case .objects:
            return .objects(context.adopt(try store.query(entity, where: predicate, sort: sort, limit: request.limit,
                                                          offset: request.offset), of: entity))
        }
    }

    /// The cache's answer with unsaved changes in it.
    private func readCache(with pending: PendingResults) throws -> FetchedResults {
        let store = context.store(for: entity)
        if request.resultType == .count {
            let total = try store.count(entity, where: predicate)
            return .counted(Int(pending.count(stored: total, offset: request.offset, limit: request.limit)))
        }
        let window = request.limit > 0 ? request.limit.addingReportingOverflow(request.offset + pending.extraRows).partialValue : 0
        let stored = try store.idList(entity, where: predicate, sort: sort, limit: max(0, window))
        let ids = pending.ids(stored: (0..<stored.count).map { stored[$0] }, offset: request.offset, limit: request.limit,
                              inServerOrder: false) { [entity] id in try? store.rows(entity, ids: [id])[ExactString(id)]?.record.values }
        return try answer(ids: ids, pending)
    }

    /// An answer of these ids, changed objects showing their pending values.
    private func answer(ids: [String], _ pending: PendingResults) throws -> FetchedResults {
        switch request.resultType {
        case .count:
            return .counted(ids.count)
        case .objects where request.batchSize > 0, .ids:
            return .ids(IDList(ids), type: request.resultType, context: context, entity: entity, batchSize: request.batchSize)
        case .values where request.batchSize > 0:
            return .batchedValues(IDList(ids), properties: properties, context: context, entity: entity, batchSize: request.batchSize)
        case .values:
            let visible = pending.visibleByID
            let stored = try context.store(for: entity).rows(entity, ids: ids.filter { visible[ExactString($0)] == nil })
            let present = ids.filter { visible[ExactString($0)] != nil || stored[ExactString($0)] != nil }
            return .values(present, present.map { id in
                let values = visible[ExactString(id)] ?? stored[ExactString(id)]!.record.values
                return properties.map { values[$0] }
            }, properties: properties, context: context, entity: entity)
        case .objects:
            let stored = try context.store(for: entity).rows(entity, ids: ids)
            let objects = context.uniqueObjects(entity, ids)
            _ = context.adopt(objects.compactMap { stored[ExactString($0.id)] }, of: entity)
            return .objects(objects)
        }
    }

    /// The server's answer, as the result type wants it.
    private func answer(_ objects: [ManagedObject]) -> FetchedResults {
        switch request.resultType {
        case .count:
            return .counted(objects.count)
        case .objects where request.batchSize > 0, .ids:
            return .ids(IDList(objects.map(\.id)), type: request.resultType, context: context, entity: entity,
                        batchSize: request.batchSize)
        case .values:
            let values = objects.map { object in
                let record = object.state.withLock { $0.record }
                return properties.map { record?.values[$0] ?? .null }
            }
            return .values(objects.map(\.id), values, properties: properties, context: context, entity: entity)
        case .objects:
            return .objects(objects)
        }
    }

    /// A plain listing of the whole entity: no predicate, limit, offset or query.
    private var isWholeListing: Bool {
        request.limit == 0 && request.offset == 0 && predicate == nil && request.serverQuery == nil
    }

    private func fetchFromServer() {
        do {
            let plan: ServerPlan
            if request.resultType == .count, server.isExact, try context.store(for: entity).syncVersion(entity) == nil || request.serverQuery != nil {
                return countOnServer()
            } else if request.serverQuery != nil {
                plan = .query
            } else if let since = try context.store(for: entity).syncVersion(entity) {
                plan = .sync(since: since)
            } else if isWholeListing {
                plan = .wholeListing(firstWrite: try context.store(for: entity).nextWrite(), afterLostHistory: false)
            } else {
                plan = .query
            }
            start(plan)
        } catch {
            fail(error)
        }
    }

    /// The server counts what it filters: nothing is listed or stored.
    private func countOnServer() {
        var page = PageRequest(spec: entity.spec)
        page.filters = server.filters
        page.rawQuery = request.serverQuery
        let remote = context.connection.count(page) { [self] result in
            context.worker.async { [self] in
                guard isRunning else { return }
                do {
                    let matching = max(0, try result.get() - request.offset)
                    finish(nil, .counted(Int(request.limit > 0 ? min(matching, request.limit) : matching)))
                } catch {
                    fail(error)
                }
            }
        }
        sent(remote)
    }

    private func start(_ plan: ServerPlan) {
        let wantsTotal = machine.withLock { machine -> Bool in
            machine.begin(plan)
            return machine.progress != nil
        }
        // Not for a sync: a count leaves deletions out, which a sync sends.
        switch plan {
        case .wholeListing: if wantsTotal { askTotal(plan) }
        case .query: if wantsTotal, server.isExact { askTotal(plan) }
        case .sync: break
        }
        requestPage(nil, plan)
    }

    /// For progress: how many records the listing holds, when the server
    /// does not say with its pages (Kinto's only on HEAD). Holds the task
    /// weakly, so it keeps nothing alive, and is cancelled when the fetch ends.
    private func askTotal(_ plan: ServerPlan) {
        var page = PageRequest(spec: entity.spec)
        if case .query = plan {
            page.filters = server.filters
            page.rawQuery = request.serverQuery
        }
        // A cancel's answer may come at once, from inside `end()`: it must
        // not take the machine's lock, and it does not (only a count does).
        let remote = context.connection.count(page) { [weak self] result in
            guard let self, case .success(let count) = result else { return }
            let total = needed > 0 ? min(count, needed) : count  // the listing stops at the limit
            machine.withLock { machine in
                if machine.plan == plan, machine.total == nil { machine.total = total }
            }
        }
        let ended = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return true }
            machine.totalRequest = remote
            return false
        }
        if ended { remote.cancel() }
    }

    private func requestPage(_ cursor: PageCursor?, _ plan: ServerPlan) {
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
        let remote = context.connection.page(page) { [self] result in
            var result = result
            var index = 0
            // On the network thread: with no limit to watch, the next page
            // leaves now, while this one is decoded and stored on the worker.
            let eager = machine.withLock { machine -> PageCursor? in
                guard machine.plan == plan else { return nil }  // a page of a plan given up
                index = machine.answeredPages
                machine.answeredPages += 1
                guard case .success(let answer) = result, let next = answer.next else { return nil }
                do {
                    try machine.cursors.advance(to: next, of: entity.name)
                } catch {
                    result = .failure(TetherError.wrap(error))
                    return nil
                }
                guard readsToTheEnd, machine.checkedPages >= index, case .running = machine.state else { return nil }
                machine.requestedAfter = index
                return next
            }
            if let eager { requestPage(eager, plan) }
            context.worker.async { [self, result, index] in receive(result, plan, page: index) }
        }
        sent(remote)
    }

    /// Whether a `.query` listing stops at the limit: only where the
    /// server's order is the cache's, so its first records are the cache's
    /// first (or where the host's own query says which records). A server
    /// orders nulls, missing fields and values of other types its own way,
    /// so with sort keys every page is read and the cut made here.
    private var stopsAtLimit: Bool { request.limit > 0 && (sort.isEmpty || request.serverQuery != nil) }

    /// The order asked of the server: by id alone, whatever the sort keys
    /// (the answer is sorted here). It is the cache's order without keys on
    /// every server, so a limit's cut is the cache's; it cannot fail (a sort
    /// value Kinto cannot put in its page token is never an id's); and a
    /// listing cut short leaves the first ids.
    private var serverSort: [SortKey] {
        if request.serverQuery != nil {
            return sort.map { SortKey(field: entity.attributes[$0.index].name, descending: $0.descending) }
        }
        return [SortKey(field: entity.spec.idField, descending: false)]
    }

    /// `index`: the page's place in the listing (0: the first).
    private func receive(_ result: Result<Page, TetherError>, _ plan: ServerPlan, page index: Int) {
        guard isRunning, machine.withLock({ $0.plan == plan }) else { return }  // or a page of a plan given up
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
            if case .wholeListing(_, afterLostHistory: true) = plan { acceptingOlder = true }
            // A page older than what another fetch has synced since would
            // bring back what that listing replaced: the cache answers.
            if request.serverQuery == nil, try context.store(for: entity).isOlderThanSync(page.version, of: entity) {
                Log.debug(.sync, "\(entity.name): a page of version \(page.version ?? 0) is older than the sync: the cache answers")
                return finish(nil, try readCache())
            }
            if let next = page.next { try checkProgress(content, next) }
            machine.withLock { $0.checkedPages = index + 1 }
            Log.debug(.sync, "\(entity.name): page of \(content.records.count) records, \(content.deletedIDs.count) deletions"
                      + (page.next == nil ? ", the last" : ", more to come"))
            received(content.records.count + content.deletedIDs.count, total: page.total, last: page.next == nil)
            let objects = try context.absorb(content, of: entity, matching: request.serverQuery == nil ? predicate : nil,
                                             acceptingOlder: acceptingOlder)
            let received = machine.withLock { machine -> Int64 in
                if machine.firstPage { machine.version = page.version }
                machine.firstPage = false
                guard keepsPageObjects(plan) else { return 0 }
                for object in objects where machine.inResults.insert(ObjectIdentifier(object)).inserted {
                    machine.results.append(object)
                }
                machine.received += Int64(objects.count)
                return machine.received
            }
            if let next = page.next {
                if plan.readsToTheEnd || !stopsAtLimit {
                    let requested = machine.withLock { machine -> Bool in
                        defer { machine.requestedAfter = max(machine.requestedAfter, index) }
                        return machine.requestedAfter >= index
                    }
                    return requested ? () : requestPage(next, plan)
                }
                if received < needed { return requestPage(next, plan) }
            }
            // Pages are no snapshot: a record changed meanwhile may have moved
            // to a page already read. What changed since the first page is
            // asked for before the answer is settled (and before a whole
            // listing removes what it did not see).
            if index > 0, request.serverQuery == nil, let since = machine.withLock({ $0.version }) {
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
    private func relist() {
        do {
            try context.store(for: entity).clearSyncVersion(entity)
            start(.wholeListing(firstWrite: try context.store(for: entity).nextWrite(), afterLostHistory: true))
        } catch {
            fail(error)
        }
    }

    /// The listing is in: settles the answer and ends the fetch.
    private func ended(_ plan: ServerPlan, _ page: Page) throws {
        if plan != .query {
            // What changed since a version cannot show history rewritten
            // behind a newer change: the server's ids and versions are
            // compared with the store's (see `VersionCheck`). The cache,
            // then exact, answers (another fetch's check may have changed it too).
            _ = try listingEnded(plan)
            return VersionCheck(context: context, entity: entity, sent: { [self] in sent($0) },
                                isCurrent: { [self] in isRunning && machine.withLock { $0.plan == plan } }) { [self] outcome in
                do {
                    _ = try outcome.get()
                    finish(nil, try readCache())
                } catch {
                    fail(error)
                }
            }.start()
        }
        if case .query = plan, page.next == nil, predicate != nil, request.serverQuery == nil {
            // The whole filtered answer is in: rows the cache still thinks
            // match, but the server did not name, changed or went.
            let named = Set(machine.withLock { $0.results }.map { ExactString($0.id) })
            let cached = try context.store(for: entity).idList(entity, where: predicate, sort: nil)
            let stale = (0..<cached.count).map { cached[$0] }.filter { !named.contains(ExactString($0)) }
            if !stale.isEmpty { return verify(context.connection.idBatches(stale), cursor: nil, seen: [], cursors: CursorTrail()) }
        }
        finish(nil, try listingEnded(plan))
    }

    /// Catch-ups after a listing of several pages, at most: a catch-up of
    /// several pages is no snapshot either, and is followed by another.
    static let catchUpRounds = 3

    /// Asks what changed since `since` (the first page's version), stores
    /// it and puts it in the answer, then the entity's version is the
    /// catch-up's and `then` goes on.
    private func catchUp(since: Int64, round: Int = 1, cursor: PageCursor? = nil, version: Int64? = nil,
                         cursors: CursorTrail = CursorTrail(), then: @escaping @Sendable () throws -> Void) {
        var request = PageRequest(spec: entity.spec)
        request.since = since
        request.cursor = cursor
        let remote = context.connection.page(request) { [self] result in
            context.worker.async { [self] in
                guard isRunning else { return }
                do {
                    let page = try result.get()
                    let content = try page.decode()
                    caughtUp(content.deletedIDs, try context.absorb(content, of: entity))
                    let version = version ?? page.version ?? since
                    if let next = page.next {
                        var cursors = cursors
                        try cursors.advance(to: next, of: entity.name)
                        return catchUp(since: since, round: round, cursor: next, version: version, cursors: cursors, then: then)
                    }
                    machine.withLock { $0.version = max($0.version ?? version, version) }
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
    private func caughtUp(_ deleted: [String], _ objects: [ManagedObject]) {
        let leaving = Set(deleted.map(ExactString.init)).union(objects.filter { object in
            guard let predicate else { return false }
            return !(object.state.withLock { $0.record }.map { predicate.matches($0.values) } ?? false)
        }.map { ExactString($0.id) })
        machine.withLock { machine in
            guard keepsPageObjects(machine.plan) else { return }
            machine.results.removeAll { leaving.contains(ExactString($0.id)) }
            machine.inResults = Set(machine.results.map(ObjectIdentifier.init))
            for object in objects where !leaving.contains(ExactString(object.id))
                && machine.inResults.insert(ObjectIdentifier(object)).inserted {
                machine.results.append(object)
            }
        }
    }

    /// A page that names a next cursor must bring a record or deletion the
    /// page before did not: else the listing goes round (a cursor that
    /// changes while the pages do not), and ends with `.protocol`.
    private func checkProgress(_ content: PageContent, _ next: PageCursor) throws {
        let idField = entity.attributes[entity.idIndex].name
        var ids = Set(content.deletedIDs.map(ExactString.init))
        for fields in content.records {
            if let id = fields.first(where: { $0.key == idField })?.value.stringValue { ids.insert(ExactString(id)) }
        }
        let moved = machine.withLock { machine -> Bool in
            defer { machine.lastPageIDs = ids }
            return !ids.isSubset(of: machine.lastPageIDs)
        }
        guard moved else {
            throw TetherError(.protocol, "a page of \(entity.name) brought nothing new (\(content.records.count) records, "
                                         + "none new) and named the cursor \(CursorTrail.name(next)): the listing would never end")
        }
    }

    /// Whether the pages' objects are kept as they come, to be the answer. A
    /// whole listing answered as ids, values, a count or in batches is read
    /// from the store at its end instead: a large one holds no objects
    /// meanwhile (those of each page go once nothing else holds them).
    private func keepsPageObjects(_ plan: ServerPlan) -> Bool {
        guard plan.pagesAnswer else { return false }
        if case .wholeListing = plan { return request.resultType == .objects && request.batchSize == 0 }
        return true
    }

    /// The listing's last page is in: settles the table, returns the results.
    private func listingEnded(_ plan: ServerPlan) throws -> FetchedResults {
        let (results, version) = machine.withLock { ($0.results, $0.version) }
        switch plan {
        case .sync:
            if let version { try context.store(for: entity).setSyncVersion(entity, version) }
            return try readCache()
        case .wholeListing(let firstWrite, _):
            // What a whole listing did not include is gone from the server.
            context.markDeleted(try context.store(for: entity).deleteRows(of: entity, writtenBefore: firstWrite), of: entity)
            if let version { try context.store(for: entity).setSyncVersion(entity, version) }
            // After lost history the request may be any: the cache answers it.
            return keepsPageObjects(plan) ? answer(SortOrder(entity: entity, keys: sort).sorted(results)) : try readCache()
        case .query:
            // In the cache's order, so both phases agree; a host's own server
            // query is answered as the server orders it.
            let ordered = request.serverQuery == nil ? SortOrder(entity: entity, keys: sort).sorted(results) : results
            let pending = context.pendingRows(entity)
            if !pending.isEmpty {
                let store = context.store(for: entity)
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

    /// Asks the server for records by id, batch after batch; stores what
    /// it has, removes what it has not, then ends the fetch.
    private func verify(_ batches: [[String]], cursor: PageCursor?, seen: Set<ExactString>, cursors: CursorTrail) {
        guard let batch = batches.first else { return }
        let remote = context.connection.records(entity.spec, ids: batch, cursor: cursor) { [self] result in
            context.worker.async { [self] in
                guard isRunning else { return }
                do {
                    let page = try result.get()
                    var seen = seen
                    seen.formUnion(try context.absorb(page.decode(), of: entity).map { ExactString($0.id) })
                    if let next = page.next {
                        var cursors = cursors
                        try cursors.advance(to: next, of: entity.name)
                        return verify(batches, cursor: next, seen: seen, cursors: cursors)
                    }
                    let gone = batch.filter { !seen.contains(ExactString($0)) }
                    try context.store(for: entity).delete(ids: gone, of: entity)
                    context.markDeleted(gone, of: entity)
                    if batches.count > 1 { return verify(Array(batches.dropFirst()), cursor: nil, seen: [], cursors: CursorTrail()) }
                    finish(nil, try listingEnded(.query))
                } catch {
                    fail(error)
                }
            }
        }
        sent(remote)
    }

    private func fail(_ error: any Error) {
        let fallback = machine.withLock { $0.cached }
        finish(TetherError.wrap(error), (try? fallback ?? readCache()) ?? FetchedResults.empty(request.resultType))
    }
}

/// How a fetch's server phase goes.
enum ServerPlan: Equatable {
    /// Only what changed since the entity's sync version; the cache, then
    /// up to date, answers.
    case sync(since: Int64)
    /// Every record: rows written before `firstWrite` and not sent again are
    /// gone; the entity's sync starts at the listing's version. After the
    /// server lost the history a sync needed, the server's versions are
    /// taken even where older than the store's.
    case wholeListing(firstWrite: Int64, afterLostHistory: Bool)
    /// The records the request asks for, as the server gives them.
    case query

    /// The pages' objects are the answer; else the cache answers.
    var pagesAnswer: Bool {
        switch self {
        case .sync: return false
        case .wholeListing(_, let afterLostHistory): return !afterLostHistory
        case .query: return true
        }
    }

    /// Every page is read, whatever the request's limit.
    var readsToTheEnd: Bool {
        if case .query = self { return false }
        return true
    }
}

extension Context {
    /// A fetch, validated but not started, so a caller can keep a reference
    /// before any callback can run.
    public func makeFetch(_ request: FetchRequest) throws -> FetchTask {
        try checkOpen()
        return try FetchTask(context: self, request: request)
    }
}
