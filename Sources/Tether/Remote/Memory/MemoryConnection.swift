import Glibc
import Synchronization

/// A record server held in memory: specs and tables of records with versions.
/// It is a second, complete implementation of the connection interface, not
/// an imitation of Kinto, so the core can be shown to depend on the interface
/// alone; hosts can use it for tests and offline demos. Several connections
/// (several contexts) can share one server.
public final class MemoryServer: Sendable {
    public let name: String
    /// Records per page of a listing.
    public let pageSize: Int
    /// How long each answer takes, as a network's would.
    public let latencyMilliseconds: Int64

    fileprivate struct Table {
        var records: [String: (fields: RecordFields, version: Int64)] = [:]
        /// Deleted records' versions, for listings `since` a version.
        var tombstones: [String: Int64] = [:]
        /// The newest change, deletions included.
        var version: Int64 = 0
        /// Changes at or before this have no tombstones any longer.
        var historyStart: Int64 = 0

        mutating func set(_ id: String, _ fields: RecordFields, version: Int64) {
            records[id] = (fields, version)
            tombstones[id] = nil
            self.version = version
        }

        mutating func remove(_ id: String, version: Int64) {
            guard records.removeValue(forKey: id) != nil else { return }
            tombstones[id] = version
            self.version = version
        }
    }

    fileprivate struct State {
        var specs: [Spec]
        var tables: [String: Table] = [:]
        var clock: Int64 = 0
        var reachable = true
    }

    private let state: Lock<State>

    public init(name: String, specs: [Spec], pageSize: Int = 50, latencyMilliseconds: Int64 = 0) {
        self.name = name
        self.pageSize = max(1, pageSize)
        self.latencyMilliseconds = max(0, latencyMilliseconds)
        state = Lock(State(specs: specs))
    }

    /// While false, every request fails as if the server could not be reached.
    public var isReachable: Bool {
        get { state.withLock { $0.reachable } }
        set { state.withLock { $0.reachable = newValue } }
    }

    public func setSpecs(_ specs: [Spec]) { state.withLock { $0.specs = specs } }

    /// Creates or replaces a record as the server's own change (not a
    /// conditional write); returns its new version.
    @discardableResult
    public func put(_ entity: String, id: String, _ fields: RecordFields) -> Int64 {
        state.withLock { state in
            state.clock += 1
            state.tables[entity, default: Table()].set(id, fields.filter { $0.key != "id" }, version: state.clock)
            return state.clock
        }
    }

    public func remove(_ entity: String, id: String) {
        state.withLock { state in
            state.clock += 1
            state.tables[entity]?.remove(id, version: state.clock)
        }
    }

    /// Forgets the tombstones of `entity`: a listing since an earlier
    /// version then fails with `.expired`, as a server's expired history does.
    public func purgeHistory(_ entity: String) {
        state.withLock { state in
            guard var table = state.tables[entity] else { return }
            table.tombstones = [:]
            table.historyStart = table.version
            state.tables[entity] = table
        }
    }

    // MARK: answers, for MemoryConnection

    fileprivate func answer<T>(_ body: (inout State) throws -> T) throws -> T {
        try state.withLock { state in
            guard state.reachable else {
                throw TetherError(.network, "cannot reach the memory server \(name)", unreachable: true)
            }
            return try body(&state)
        }
    }

    fileprivate func specs() throws -> [Spec] { try answer { $0.specs } }

    fileprivate func spec(_ name: String, in state: State) throws -> Spec {
        guard let spec = state.specs.first(where: { $0.name == name }) else {
            throw TetherError(.notFound, "the memory server has no \(name)")
        }
        return spec
    }

    /// The whole listing in order, as the records stand now (with `since`,
    /// the changes after it), the deletions since, and the table's version.
    fileprivate func listing(_ request: PageRequest) throws -> (rows: [RecordFields], deleted: [(id: String, version: Int64)], version: Int64) {
        try answer { state in
            let spec = try spec(request.spec.name, in: state)
            let table = state.tables[spec.name] ?? Table()
            var deleted: [(id: String, version: Int64)] = []
            var records = table.records
            if let since = request.since {
                guard since >= table.historyStart, since <= table.version else {
                    throw TetherError(.expired, "the memory server has no history of \(spec.name) since \(since)")
                }
                records = records.filter { $0.value.version > since }
                deleted = table.tombstones.filter { $0.value > since }.map { (id: $0.key, version: $0.value) }.sorted { $0.id < $1.id }
            }
            var rows = records.map { id, row in Self.render(spec, id, row) }
                .filter { record in request.filters.allSatisfy { Self.holds($0, in: record) } }
            let keys = request.sort + [SortKey(field: spec.idField, descending: false)]
            rows.sort { left, right in
                for key in keys {
                    let a = left.first { $0.key == key.field }?.value ?? .null
                    let b = right.first { $0.key == key.field }?.value ?? .null
                    if a == b { continue }
                    return JSON.orders(a, before: b) != key.descending
                }
                return false
            }
            return (request.limit > 0 ? Array(rows.prefix(Int(request.limit))) : rows, deleted, table.version)
        }
    }

    fileprivate func records(_ spec: Spec, ids: [String]) throws -> [RecordFields] {
        try answer { state in
            let spec = try self.spec(spec.name, in: state)
            let table = state.tables[spec.name]?.records ?? [:]
            return ids.compactMap { id in table[id].map { Self.render(spec, id, $0) } }
        }
    }

    fileprivate func apply(_ write: RecordWrite) -> WriteOutcome {
        do {
            return try answer { state in
                let spec = try self.spec(write.spec.name, in: state)
                let current = state.tables[spec.name]?.records[write.id]
                let verdict = write.verdict(holding: current?.version, exists: current != nil)
                guard verdict == .apply else {
                    if verdict == .nothingToDo(gone: true) { return .deleted(version: state.tables[spec.name]?.tombstones[write.id]) }
                    return write.outcome(of: verdict, current: current.map { Self.render(spec, write.id, $0) })
                }
                state.clock += 1
                if write.kind == .delete {
                    state.tables[spec.name]?.remove(write.id, version: state.clock)
                    return .deleted(version: state.clock)
                }
                let fields = write.applied(to: current?.fields ?? [])
                state.tables[spec.name, default: Table()].set(write.id, fields, version: state.clock)
                return .written(Self.render(spec, write.id, (fields, state.clock)))
            }
        } catch {
            return .failed(TetherError.wrap(error))
        }
    }

    /// The memory server evaluates a filter as `Filter` defines it: exactly.
    private static func holds(_ filter: Filter, in record: RecordFields) -> Bool {
        filter.matches(record.first { $0.key == filter.field }?.value)
    }

    private static func render(_ spec: Spec, _ id: String, _ row: (fields: RecordFields, version: Int64)) -> RecordFields {
        [(spec.idField, .string(id)), (spec.versionField, .integer(row.version))] + row.fields
    }
}

/// One context's connection to a MemoryServer. Answers come asynchronously,
/// on a thread of the connection's own, as a network connection's would.
public final class MemoryConnection: Connection, ReachabilityReporting {
    public let server: MemoryServer
    private let requests = RequestQueue()
    public let reachability = Reachability()

    public init(_ server: MemoryServer) { self.server = server }

    public var identity: String { "memory server \(server.name)" }

    public func shutdown() { requests.shutdown() }

    /// Runs `work` on the connection's thread after the server's latency; `done` exactly once.
    private func respond<T: Sendable>(_ done: @escaping @Sendable (Result<T, TetherError>) -> Void,
                                      _ work: @escaping @Sendable () throws -> T) -> any Cancellable {
        requests.respond(latencyMilliseconds: server.latencyMilliseconds, { [reachability] result in
            reachability.note(result)
            done(result)
        }, work)
    }

    public func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        respond(done) { [server] in
            _ = try server.specs()
            return ServerInfo(name: "memory", version: "1")
        }
    }

    public func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        respond(done) { [server] in try server.specs() }
    }

    public func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void)
        -> any Cancellable {
        respond(done) { [server] in
            // The cursor is the offset of the next page in the listing as it stands.
            let offset = request.cursor.flatMap { Int($0.token) } ?? 0
            if request.rawQuery != nil { throw TetherError(.invalid, "the memory server has no query language of its own") }
            let (rows, deleted, version) = try server.listing(request)
            let end = min(rows.count, offset + server.pageSize)
            let slice = offset < end ? Array(rows[offset..<end]) : []
            // Deletions come with the first page.
            var page = PageContent(records: slice, deletedIDs: offset == 0 ? deleted.map(\.id) : [])
            if offset == 0 { page.deletedVersions = deleted.map(\.version) }
            let content = page
            return Page(next: end < rows.count ? PageCursor(String(end)) : nil, version: version,
                        total: Int64(rows.count)) { content }
        }
    }

    public func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void)
        -> any Cancellable {
        respond(done) { [server] in
            if request.rawQuery != nil { throw TetherError(.invalid, "the memory server has no query language of its own") }
            var whole = request
            whole.limit = 0
            return Int64(try server.listing(whole).rows.count)
        }
    }

    public func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                        _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        respond(done) { [server] in
            let rows = try server.records(spec, ids: ids)
            return Page(next: nil) { PageContent(records: rows) }
        }
    }

    public func supports(_ filter: Filter) -> Bool { true }
    public func filtersExactly(_ filter: Filter) -> Bool { true }
    /// Like Kinto: a record put back with an older version is in no `since` listing.
    public var changeListingsCanMissRewrites: Bool { true }
    public func limit(ofServerQuery query: String) -> Int64? { nil }  // it takes no server query

    public func idBatches(_ ids: [String]) -> [[String]] {
        // As many as a Kinto batch of listings carries.
        stride(from: 0, to: ids.count, by: 2500).map { Array(ids[$0..<min(ids.count, $0 + 2500)]) }
    }

    /// Each write applied alone, in order, as Kinto's batch does.
    public func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        respond({ (result: Result<[WriteOutcome], TetherError>) in
            switch result {
            case .success(let outcomes): answered(outcomes)
            case .failure(let error): answered(Array(repeating: .failed(error), count: writes.count))
            }
        }) { [server] in writes.map { server.apply($0) } }
    }
}

extension JSON {
    /// An order over JSON values for sorting listings: null, booleans,
    /// numbers, strings, then the rest by their text.
    static func orders(_ a: JSON, before b: JSON) -> Bool {
        func rank(_ value: JSON) -> Int {
            switch value {
            case .null: return 0
            case .bool: return 1
            case .integer, .real, .number: return 2
            case .string: return 3
            default: return 4
            }
        }
        switch (a, b) {
        case let (.bool(x), .bool(y)): return !x && y
        case let (.integer(x), .integer(y)): return x < y
        case let (.string(x), .string(y)): return Array(x.utf8).lexicographicallyPrecedes(y.utf8)
        default:
            let numbers = (a.numberValue, b.numberValue)
            if let x = numbers.0, let y = numbers.1 { return x < y }
            if rank(a) != rank(b) { return rank(a) < rank(b) }
            return a.serialized(sortKeys: true) < b.serialized(sortKeys: true)
        }
    }

    var numberValue: Double? {
        switch self {
        case .integer(let i): return Double(i)
        case .real(let d): return d
        case .number(let text): return Double(text)
        default: return nil
        }
    }
}
