public enum CachePolicy: Sendable {
    case cacheThenServer, cacheOnly, serverOnly, cacheElseServer
}

public enum FetchPhase: Sendable { case cached, final }

public struct FetchRequest: Sendable {
    public var entity: String
    /// Attribute names, comma-separated, "-" for descending.
    public var sort: String?
    /// At most this many objects; 0: no limit.
    public var limit: Int64 = 0
    public var policy: CachePolicy = .cacheThenServer

    public init(entity: String) { self.entity = entity }
}

/// One callback of a fetch. On a final error, `objects` are the cache's.
public struct FetchResult {
    public let phase: FetchPhase
    public let error: TetherError?
    public let objects: [ManagedObject]
}

/// An asynchronous fetch: answers from the cache, then from the server, and
/// ends in exactly one final callback.
public final class FetchTask: Subscription, @unchecked Sendable {
    public let request: FetchRequest
    let entity: Entity
    private let sort: [(index: Int, descending: Bool)]
    private unowned let context: Context
    private var callback: ((FetchResult) -> Void)?
    /// The listing in flight, set on the engine thread, read by `cancel`.
    private let listingLock = Lock()
    private var listing: ListingHandle?

    init(context: Context, request: FetchRequest) throws {
        guard let entity = context.model.entity(named: request.entity) else {
            throw TetherError(.notFound, "the model has no entity \(request.entity.debugDescription)")
        }
        guard request.limit >= 0 else { throw TetherError(.invalid, "limit cannot be negative") }
        var sort: [(index: Int, descending: Bool)] = []
        for part in (request.sort ?? "").split(separator: ",", omittingEmptySubsequences: false) where !(request.sort ?? "").isEmpty {
            let descending = part.hasPrefix("-")
            let name = String(descending ? part.dropFirst() : part[...])
            guard let index = entity.attributeIndex(named: name) else {
                throw TetherError(.invalid, "cannot sort \(entity.name) by \(name.debugDescription): no such attribute")
            }
            sort.append((index, descending))
        }
        self.request = request
        self.entity = entity
        self.sort = sort
        self.context = context
        super.init(delivery: context.delivery)
    }

    /// Starts the fetch; `callback` runs once per phase.
    public func start(_ callback: @escaping (FetchResult) -> Void) throws {
        self.callback = callback
        try context.register(self)
        context.engine.perform { [self] in run() }
    }

    public func cancel() throws {
        try cancelSubscription()
        if let listing = listingLock.withLock({ listing }) { context.client.cancel(listing) }
    }

    override func deliverCancellation() {
        callback?(FetchResult(phase: .final, error: .cancelled, objects: []))
    }

    // MARK: on the engine thread

    private func run() {
        guard !isCancelled else { return }
        do {
            switch request.policy {
            case .cacheOnly:
                finish(nil, try readCache())
            case .cacheThenServer:
                let cached = try readCache()
                delivery.post(update: self) { [self] in callback?(FetchResult(phase: .cached, error: nil, objects: cached)) }
                fetchFromServer(fallback: cached)
            case .serverOnly:
                fetchFromServer(fallback: nil)
            case .cacheElseServer:
                let cached = try readCache()
                if cached.isEmpty { fetchFromServer(fallback: cached) } else { finish(nil, cached) }
            }
        } catch let error as TetherError {
            finish(error, [])
        } catch {
            finish(TetherError(.internal, "\(error)"), [])
        }
    }

    private func readCache() throws -> [ManagedObject] {
        context.adopt(try context.store.query(entity, sort: sort, limit: request.limit), of: entity)
    }

    private func fetchFromServer(fallback: [ManagedObject]?) {
        var query: [(String, String)] = []
        if let sortText = request.sort, !sortText.isEmpty { query.append(("_sort", sortText)) }
        if request.limit > 0 { query.append(("_limit", String(request.limit))) }
        let startedAt = wallClockMilliseconds()
        var results: [ManagedObject] = []
        let listing = context.client.listRecords(route: entity.route, query: query, maximum: request.limit, page: { [self] page in
            guard !isCancelled else { throw TetherError.cancelled }
            let records = try page.map { try Record(entity: entity, json: $0) }
            let now = wallClockMilliseconds()
            try context.store.upsert(records, of: entity, fetchedAt: now)
            results += context.merge(records, of: entity, fetchedAt: now)
        }, done: { [self] outcome in
            switch outcome {
            case .success:
                if request.limit == 0 {
                    // A complete listing: what it did not include is gone from the server.
                    do {
                        context.markDeleted(try context.store.deleteRows(of: entity, fetchedBefore: startedAt), of: entity)
                    } catch let error as TetherError {
                        return finish(error, results)
                    } catch {}
                }
                finish(nil, request.limit > 0 ? Array(results.prefix(Int(request.limit))) : results)
            case .failure(let error):
                finish(error, (try? fallback ?? readCache()) ?? [])
            }
        })
        listingLock.withLock { self.listing = listing }
        // A cancel that came before the assignment did not see the listing.
        if isCancelled { context.client.cancel(listing) }
    }

    private func finish(_ error: TetherError?, _ objects: [ManagedObject]) {
        delivery.post(final: self) { [self] in callback?(FetchResult(phase: .final, error: error, objects: objects)) }
    }
}

extension Context {
    /// A fetch, validated but not started, so a caller can keep a reference
    /// before any callback can run.
    public func makeFetch(_ request: FetchRequest) throws -> FetchTask {
        try lock.withLock { try checkOpen() }
        return try FetchTask(context: self, request: request)
    }
}
