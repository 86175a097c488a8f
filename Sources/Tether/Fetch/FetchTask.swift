/// An asynchronous fetch: answers from the cache, then from the server, and
/// ends in exactly one final callback. After that the library keeps no
/// reference to it, its callback, or its results.
///
/// Its life is a `TaskLifecycle`: `Work` while it works, `Watching` once a
/// live fetch has answered.
public final class FetchTask: Sendable {
    public let request: FetchRequest
    let entity: Entity
    let sort: [(index: Int, descending: Bool)]
    let predicate: Predicate?
    /// The predicate as the server can filter; `isExact`: all of it.
    let server: (filters: [Filter], isExact: Bool)
    /// The attributes of a values fetch.
    let properties: [Int]
    /// See `FetchPlan.serverLimit`.
    let serverLimit: Int64?
    /// The graph it answers in (objects, unsaved changes, merging pages)...
    let context: Context
    /// ...and what it needs besides, given at creation: the store holding
    /// its entity, the connection, the queue it works on.
    let store: Store
    let connection: any Connection
    let worker: WorkQueue
    let lifecycle: TaskLifecycle<FetchResult, FetchProgress, Work, Watching>

    /// While the fetch works: its cache answer, its server listing, progress.
    struct Work {
        /// The cache's answer, for a final error of CACHE_THEN_SERVER.
        var cached: FetchedResults?
        /// A sync's records were counted on the server (once per fetch).
        var counted = false
        /// A live fetch's changes noted meanwhile: its answer may have been
        /// read before them, so the first answer is followed by a look.
        var changedIDs = Set<ExactString>()
        /// The server phase so far, once it has begun.
        var listing: Listing?
        /// When progress was last told.
        var progressToldAt: MonotonicTime?
        /// The count asked for progress's total, while in flight.
        var totalRequest: (any Cancellable)?
    }

    /// One server phase, from its plan's first page (it starts again, with
    /// another plan, when a sync's history was lost).
    struct Listing {
        let plan: ServerPlan
        /// Each object once: a listing can name a record twice (a hostile
        /// server, or a record moving between pages).
        var results: [ManagedObject] = []
        var inResults = Set<ObjectIdentifier>()
        var received: Int64 = 0
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
        /// Records the server sent so far (for progress), of `total`.
        var sentByServer: Int64 = 0
        var total: Int64?

        init(_ plan: ServerPlan) { self.plan = plan }
    }

    /// A live fetch that has answered: the answer last posted, the ids
    /// changed since, whether a look is scheduled, and whether a posted
    /// answer is still being delivered (then the next waits for it: one in
    /// the queue at most).
    struct Watching {
        var lastRows: [ResultChanges.Row]
        var lastCount: Int
        var changedIDs: Set<ExactString>
        var lookScheduled = false
        var answerInFlight = true
    }

    init(context: Context, request: FetchRequest) throws {
        let plan = try FetchPlan(request, in: context)
        entity = plan.entity
        sort = plan.sort
        predicate = plan.predicate
        server = plan.server
        properties = plan.properties
        serverLimit = plan.serverLimit
        self.request = request
        self.context = context
        store = context.store(for: plan.entity)
        connection = context.connection
        worker = context.worker
        lifecycle = TaskLifecycle(context: context, noun: "fetch")
    }

    /// Starts the fetch; `callback` runs once per phase, `progress` (if
    /// any) as server pages arrive, at most every `progressIntervalMilliseconds`
    /// but always for a listing's last page.
    public func start(progress: (@Sendable (FetchProgress) -> Void)? = nil,
                      _ callback: @escaping @Sendable (FetchResult) -> Void) throws {
        let started = try lifecycle.start(
            progress: progress, callback, cancelled: FetchResult(phase: .final, error: .cancelled, results: .empty(request.resultType)),
            work: Work(), whenCancelled: { [self] former in
                if case .running(let work, _) = former { work.totalRequest?.cancel() }
                if request.live { context.stopListening(self, to: entity) }
            })
        guard started else { return }
        if request.live {
            // Watched from the start: a change that lands while the server
            // phase runs (another fetch's page, a save) is looked at after
            // the first answer, which may not hold it.
            context.listen(self, to: entity)
            if !lifecycle.isRunning { context.stopListening(self, to: entity) }
        }
        worker.async { [self] in run() }
    }

    /// Cancels; afterwards only the final cancelled callback can arrive.
    /// Fails with `.closed` if the fetch was cancelled or has finished.
    public func cancel() throws {
        try lifecycle.cancel()
    }

    var isRunning: Bool { lifecycle.isRunning }

    /// Runs `body` on the server phase's listing while the fetch runs; nil otherwise.
    func withListing<T>(_ body: (inout Listing) throws -> T) rethrows -> T? {
        try lifecycle.withRunning { work -> T? in
            guard work.listing != nil else { return nil }
            return try body(&work.listing!)
        } ?? nil
    }

    /// Event: the fetch ends with `error` (nil: success). Only the first end counts.
    func finish(_ error: TetherError?, _ results: FetchedResults) {
        if request.live { return beginWatching(error, results) }
        // Else cancelled meanwhile: the cancellation is the final.
        guard let work = lifecycle.finish(FetchResult(phase: .final, error: error, results: results)) else { return }
        work.totalRequest?.cancel()
        Log.debug(.sync, "fetch of \(entity.name) (\(request.policy)) ended: "
                  + (error.map { "\($0.kind): \($0.message)" } ?? "\(results.count) results"))
    }

    /// Event: a server request left; remember it for cancel.
    func sent(_ remote: any Cancellable) { lifecycle.sent(remote) }

    // MARK: on the worker

    func run() {
        guard isRunning else { return }
        do {
            // A local entity's store is its truth: the cache answers, once.
            switch entity.isLocal ? .cacheOnly : request.policy {
            case .cacheOnly:
                finish(nil, try readCache())
            case .cacheThenServer:
                let cached = try readCache()
                lifecycle.withRunning { $0.cached = cached }
                lifecycle.post(update: FetchResult(phase: .cached, error: nil, results: cached))
                fetchFromServer()
            case .serverOnly:
                fetchFromServer()
            case .cacheElseServer:
                // Only a synced entity's cache holds every match: before,
                // it holds what earlier answers happened to bring.
                let synced = try store.syncVersion(entity) != nil
                let cached = try readCache()
                if synced, cached.count > 0 { finish(nil, cached) } else { fetchFromServer() }
            }
        } catch {
            finish(TetherError.wrap(error), FetchedResults.empty(request.resultType))
        }
    }

    func fail(_ error: any Error) {
        let fallback = lifecycle.withRunning { $0.cached } ?? nil
        finish(TetherError.wrap(error), (try? fallback ?? readCache()) ?? FetchedResults.empty(request.resultType))
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
