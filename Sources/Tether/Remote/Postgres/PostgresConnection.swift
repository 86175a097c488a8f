/// How to reach one schema of a PostgreSQL database.
public struct PostgresOptions: Sendable {
    /// A libpq connection string: "host=... dbname=..." or a postgresql:// URI.
    public var conninfo: String
    /// The schema whose tables are the entities ("public" by default).
    public var schema: String
    public var timeoutMilliseconds: Int64 = 30_000

    public init(conninfo: String, schema: String = "public") {
        self.conninfo = conninfo
        self.schema = schema
    }
}

/// A PostgreSQL schema behind the connection interface, over libpq (loaded
/// on first use). Each table with a one-column primary key is an entity
/// (PostgresCatalog); a record's id is its key as text and its version the
/// row's xmin. This step reads only: whole listings, pages by key,
/// filters PostgreSQL evaluates exactly as `Filter` means them
/// (PostgresQuery), changes since a version where the tables are tracked
/// (PostgresChanges), and conditional writes (PostgresWrites).
public final class PostgresConnection: Connection, ReachabilityReporting, ChangePushing {
    public let identity: String
    public let reachability = Reachability()
    let schema: String
    private let session: PostgresSession
    /// Change tracking, where installed: syncs since a version.
    let changes: PostgresChanges
    private let requests = RequestQueue()
    /// LISTEN, while a context subscribes (live fetches): the process's one
    /// for this database, shared with every other connection to it.
    private let listener: PostgresListener
    /// The contexts subscribed through this connection, to unsubscribe at
    /// shutdown (nil once shut down).
    private let subscribers = Lock<Set<ObjectIdentifier>?>([])
    /// The catalog as last read: the only names SQL is built from.
    private let catalog = Lock<[String: PostgresTable]?>(nil)
    static let pageSize = 1000
    static let idsPerRequest = 1000

    public init(_ options: PostgresOptions) throws {
        guard !options.schema.isEmpty, options.schema.utf8.count <= 63, !options.schema.utf8.contains(0) else {
            throw TetherError(.invalid, "schema \(options.schema.debugDescription) is not a PostgreSQL name (1 to 63 bytes)")
        }
        guard options.timeoutMilliseconds > 0 else { throw TetherError(.invalid, "timeout must be positive") }
        let parsed = try PostgresSession.parse(options.conninfo)
        schema = options.schema
        changes = PostgresChanges(schema: options.schema)
        // What names the data set, never the password (nor other options).
        let place = ["host", "hostaddr", "port", "dbname", "user"].compactMap { key in parsed[key].map { "\(key)=\($0)" } }
        identity = "postgresql \(place.joined(separator: " ")), schema \(options.schema)"
        session = try PostgresSession(conninfo: options.conninfo, timeoutMilliseconds: options.timeoutMilliseconds)
        listener = PostgresListeners.acquire(conninfo: options.conninfo, parameters: parsed,
                                             timeoutMilliseconds: options.timeoutMilliseconds)
    }

    public func pushChanges(of entities: Set<String>, to subscriber: ObjectIdentifier,
                            _ changed: @escaping @Sendable (Set<String>) -> Void) {
        // Under the lock, so that no subscription lands after the shutdown's
        // (the listener only queues its thread's start or stop meanwhile).
        subscribers.withLock { subscribers in
            guard subscribers != nil else { return }
            if entities.isEmpty { subscribers!.remove(subscriber) } else { subscribers!.insert(subscriber) }
            listener.subscribe(schema: schema, entities, key(subscriber), changed)
        }
    }

    /// A context subscribed through this connection, as the shared listener knows it.
    private func key(_ subscriber: ObjectIdentifier) -> PostgresListener.Key {
        PostgresListener.Key(connection: ObjectIdentifier(self), context: subscriber)
    }

    /// Its contexts stop hearing; the listener goes with the database's last connection.
    public func shutdown() {
        let wasOpen = subscribers.withLock { subscribers -> Bool in
            defer { subscribers = nil }
            for subscriber in subscribers ?? [] {
                listener.subscribe(schema: schema, [], key(subscriber)) { _ in }
            }
            return subscribers != nil
        }
        if wasOpen { PostgresListeners.release(listener) }
        requests.shutdown()
        session.close()  // the queue's thread is done with it
    }

    private func respond<T: Sendable>(_ done: @escaping @Sendable (Result<T, TetherError>) -> Void,
                                      _ work: @escaping @Sendable () throws -> T) -> any Cancellable {
        requests.respond({ [reachability] result in
            reachability.note(result)
            done(result)
        }, work)
    }

    public func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        respond(done) { [session] in
            let version = try session.query("SELECT current_setting('server_version')").first?.first ?? nil
            return ServerInfo(name: "postgresql", version: version ?? "")
        }
    }

    public func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        respond(done) { [self] in try readCatalog().map(\.spec) }
    }

    @discardableResult
    private func readCatalog() throws -> [PostgresTable] {
        let tables = try PostgresCatalog.tables(session, schema: schema)
        catalog.withLock { $0 = Dictionary(tables.map { ($0.spec.name, $0) }, uniquingKeysWith: { first, _ in first }) }
        return tables
    }

    /// The table of `spec`, as the catalog has it (read now if not yet).
    private func table(_ spec: Spec) throws -> PostgresTable {
        if catalog.withLock({ $0 == nil }) { try readCatalog() }
        guard let table = catalog.withLock({ $0?[spec.name] }) else {
            throw TetherError(.notFound, "the PostgreSQL schema \(schema) has no table \(spec.name) with a usable key")
        }
        return table
    }

    public func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void)
        -> any Cancellable {
        respond(done) { [self] in
            let table = try table(request.spec)
            if let since = request.since {
                return try changes.page(since: since, request, table, session, pageSize: Self.pageSize)
            }
            // Tracked (PostgresChanges): the first page's horizon lets later refreshes sync.
            let version = request.cursor == nil ? try changes.tracking(table, cursor: nil, session)?.horizon : nil
            let query = try PostgresQuery(table, request)
            let (sql, parameters) = query.pageSQL(pageSize: Self.pageSize)
            let rows = try session.query(sql, parameters)
            changes.rowsListed.withLock { $0 += rows.count }
            let next = query.next(after: rows, pageSize: Self.pageSize)
            let content = query.content(rows)
            return Page(next: next, version: version) { content }
        }
    }

    public func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void)
        -> any Cancellable {
        respond(done) { [self] in
            let query = try PostgresQuery(try table(request.spec), request)
            let (sql, parameters) = query.countSQL()
            guard let text = try session.query(sql, parameters).first?.first ?? nil, let count = Int64(text) else {
                throw TetherError(.protocol, "PostgreSQL answered a count without a number")
            }
            return count
        }
    }

    public func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                        _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        respond(done) { [self] in
            let table = try table(spec)
            guard !ids.isEmpty else { return Page(next: nil) { PageContent(records: []) } }
            let (sql, parameters) = PostgresQuery.recordsSQL(table, ids: ids)
            let content = PostgresQuery.content(table, try session.query(sql, parameters))
            return Page(next: nil) { content }
        }
    }

    public func idBatches(_ ids: [String]) -> [[String]] {
        stride(from: 0, to: ids.count, by: Self.idsPerRequest).map { Array(ids[$0..<min(ids.count, $0 + Self.idsPerRequest)]) }
    }

    public func supports(_ filter: Filter) -> Bool { PostgresQuery.isExact(filter) }
    public func filtersExactly(_ filter: Filter) -> Bool { PostgresQuery.isExact(filter) }
    /// Every change is recorded by the triggers: none is put back behind another.
    public var changeListingsCanMissRewrites: Bool { false }
    public func limit(ofServerQuery query: String) -> Int64? { nil }  // it takes no server query
    public var canPushChanges: Bool { true }
    /// Once a listing found the table tracked (until then it is polled, so
    /// never silent: an object observed but never listed, tracking dropped).
    public func pushesChanges(of entity: String) -> Bool { changes.isTracked(entity) }

    public func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        respond({ (result: Result<[WriteOutcome], TetherError>) in
            switch result {
            case .success(let outcomes): answered(outcomes)
            case .failure(let error): answered(Array(repeating: .failed(error), count: writes.count))
            }
        }) { [self] () -> [WriteOutcome] in
            try PostgresWrites.apply(writes, session, table: table)
        }
    }
}
