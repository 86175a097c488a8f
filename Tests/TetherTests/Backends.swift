import XCTest
@testable import Tether

/// A server the graph and fetch contract runs against: the real Kinto that
/// scripts/with-kinto starts, or the in-memory server. Each makes one data
/// set: the "items" entity with Title (code 501) and Rank, and 120 records.
protocol Backend: AnyObject {
    var storePath: String { get }
    func connection() throws -> any Connection
    /// A change made on the server by someone else.
    func setTitle(_ id: String, _ title: String) throws
    func setRank(_ id: String, _ rank: Int64) throws
    /// Creates or replaces a record with these fields (JSON object text);
    /// throws if the server refuses it.
    func putItem(_ id: String, _ fields: String) throws
    func deleteItem(_ id: String) throws
    /// The record as the server has it now; nil if it has none.
    func record(_ id: String) throws -> RecordFields?
    /// The server no longer has the history `context` synced from (a
    /// purge of old deletions, or a restore from an older backup).
    func loseHistory(syncedBy context: Context) throws
}

extension Backend {
    /// `syncInterval` and `fullCheckInterval` (ms): the periodic sync's, the defaults when nil.
    func open(_ mode: DeliveryMode = .thread, cacheSize: Int = 1024, localStores: [LocalStoreOptions] = [],
              syncInterval: Int64? = nil, fullCheckInterval: Int64? = nil,
              wrapping wrap: (any Connection) -> any Connection = { $0 }) throws -> Context {
        var options = ContextOptions(storePath: storePath)
        options.delivery = mode
        options.objectCacheSize = cacheSize
        options.localStores = localStores
        if let syncInterval { options.syncIntervalMilliseconds = syncInterval }
        if let fullCheckInterval { options.fullCheckIntervalMilliseconds = fullCheckInterval }
        return try Context.open(options, connection: wrap(connection()))
    }
}

let itemCount = 120

final class KintoBackend: Backend {
    let server: String
    let bucket: String
    let storePath: String
    private let admin: HTTPEngine

    init(directory: String) throws {
        guard let url = ProcessInfo.processInfo.environment["TETHER_TEST_URL"] else {
            XCTFail("TETHER_TEST_URL is not set: run the tests with `make test` (scripts/with-kinto)")
            throw XCTSkip("no server")
        }
        server = url
        bucket = "swift-\(UUID().uuidString.prefix(8).lowercased())"
        storePath = directory + "/kinto.sqlite"
        admin = try HTTPEngine(credentials: HTTPCredentials(username: "test", password: "test"), timeoutMilliseconds: 10_000)
        try send("PUT", "/buckets/\(bucket)", #"{"permissions": {"read": ["system.Everyone"], "write": ["system.Everyone"]}}"#)
        try createItems()
        var requests: [String] = []
        for rank in 0..<itemCount {
            requests.append(#"{"method": "PUT", "path": "/buckets/\#(bucket)/collections/items/records/i\#(rank)", "body": {"data": {"Title": "item \#(rank)", "Rank": \#(rank)}}}"#)
        }
        for start in stride(from: 0, to: requests.count, by: 25) {
            let chunk = requests[start..<min(requests.count, start + 25)].joined(separator: ",")
            try send("POST", "/batch", #"{"requests": [\#(chunk)]}"#)
        }
    }

    deinit { admin.shutdown() }

    /// Creates the (empty) items collection with its schema.
    func createItems() throws {
        try send("PUT", "/buckets/\(bucket)/collections/items", """
            {"data": {"schema": {"type": "object", "properties": {
              "Title": {"type": "string", "x-tether-code": 501}, "Rank": {"type": "integer"}}}}}
            """)
    }

    func connection() throws -> any Connection {
        var options = KintoOptions(serverURL: server, bucket: bucket)
        options.timeoutMilliseconds = 5_000
        return try KintoConnection(options)
    }

    @discardableResult
    func send(_ method: String, _ path: String, _ body: String? = nil) throws -> HTTPResponse {
        let response = try admin.send(HTTPRequest(method: method, url: server + path, body: body.map { Array($0.utf8) })).get()
        XCTAssertTrue((200..<300).contains(response.status), "\(method) \(path): HTTP \(response.status)")
        return response
    }

    func setTitle(_ id: String, _ title: String) throws {
        try send("PATCH", "/buckets/\(bucket)/collections/items/records/\(id)", #"{"data": {"Title": "\#(title)"}}"#)
    }

    func deleteItem(_ id: String) throws {
        try send("DELETE", "/buckets/\(bucket)/collections/items/records/\(id)")
    }

    func record(_ id: String) throws -> RecordFields? {
        let response = try admin.send(HTTPRequest(url: server + "/buckets/\(bucket)/collections/items/records/\(id)")).get()
        if response.status == 404 { return nil }
        XCTAssertEqual(response.status, 200)
        return try JSON.parse(response.body)["data"]?.objectValue
    }

    /// Throws if Kinto refuses the record (its schema says what it accepts).
    func putItem(_ id: String, _ fields: String) throws {
        let body = Array(#"{"data": \#(fields)}"#.utf8)
        let response = try admin.send(HTTPRequest(method: "PUT", url: server + "/buckets/\(bucket)/collections/items/records/\(id)",
                                                  body: body)).get()
        guard (200..<300).contains(response.status) else { throw TetherError(.server, "HTTP \(response.status)") }
    }

    func setRank(_ id: String, _ rank: Int64) throws {
        try send("PATCH", "/buckets/\(bucket)/collections/items/records/\(id)", #"{"data": {"Rank": \#(rank)}}"#)
    }

    /// Kinto cannot be made to forget its tombstones from here: the store is
    /// made to hold a version far beyond the server's, as after a restore.
    func loseHistory(syncedBy context: Context) throws {
        let items = try XCTUnwrap(context.model.entity(named: "items"))
        let version = try XCTUnwrap(context.store.syncVersion(items), "the store has synced items")
        try context.store.setSyncVersion(items, version + 10_000_000)
    }
}

final class MemoryBackend: Backend {
    let server: MemoryServer
    let storePath: String

    static let itemsSpec = Spec(name: "items", route: "items", idField: "id", versionField: "last_modified",
                                fields: [FieldSpec(name: "Title", type: .text, code: 501),
                                         FieldSpec(name: "Rank", type: .integer)],
                                operations: .all)

    init(directory: String, latencyMilliseconds: Int64 = 0) {
        storePath = directory + "/memory.sqlite"
        server = MemoryServer(name: "test-\(UUID().uuidString.prefix(8))", specs: [Self.itemsSpec], pageSize: 50,
                              latencyMilliseconds: latencyMilliseconds)
        for rank in 0..<itemCount {
            server.put("items", id: "i\(rank)", [("Title", .string("item \(rank)")), ("Rank", .integer(Int64(rank)))])
        }
    }

    func connection() throws -> any Connection { MemoryConnection(server) }

    func setTitle(_ id: String, _ title: String) throws {
        let current = try XCTUnwrap(server.recordForTest("items", id: id))
        server.put("items", id: id, current.filter { $0.key != "Title" && $0.key != "last_modified" } + [("Title", .string(title))])
    }

    func deleteItem(_ id: String) throws { server.remove("items", id: id) }

    func record(_ id: String) throws -> RecordFields? { server.recordForTest("items", id: id) }

    func setRank(_ id: String, _ rank: Int64) throws {
        let current = try XCTUnwrap(server.recordForTest("items", id: id))
        server.put("items", id: id, current.filter { $0.key != "Rank" && $0.key != "last_modified" } + [("Rank", .integer(rank))])
    }

    func loseHistory(syncedBy context: Context) throws { server.purgeHistory("items") }

    func putItem(_ id: String, _ fields: String) throws {
        server.put("items", id: id, try XCTUnwrap(JSON.parse(fields).objectValue))
    }
}

extension MemoryServer {
    func recordForTest(_ entity: String, id: String) -> RecordFields? {
        let done = ConditionLock<Result<Page, TetherError>?>(nil)
        let connection = MemoryConnection(self)
        defer { connection.shutdown() }
        _ = connection.records(MemoryBackend.itemsSpec, ids: [id], cursor: nil) { result in done.withLock { $0 = result } }
        let page = done.withLock(when: { $0 != nil }, until: nil) { value, _ in value! }
        return (try? page.get().decode())?.records.first
    }
}

/// Waits (up to `seconds`) until `condition` holds; true if it did.
func eventually(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}

/// Runs a fetch to its final callback; returns every callback in order.
func fetch(_ context: Context, _ request: FetchRequest) throws -> [FetchResult] {
    let results = ConditionLock<[FetchResult]>([])
    let task = try context.makeFetch(request)
    try task.start { result in results.withLock { $0.append(result) } }
    if context.deliveryMode == .poll {
        let deadline = Date().addingTimeInterval(15)
        while results.withLock({ $0.last?.phase != .final }) && Date() < deadline {
            _ = try context.poll(timeoutMilliseconds: 50)
        }
    }
    return results.withLock(when: { $0.last?.phase == .final }, until: MonotonicTime.now().adding(milliseconds: 15_000)) { value, timedOut in
        XCTAssertFalse(timedOut, "no final callback")
        return value
    }
}

/// A new, empty folder for a test's files (stores); removeDirectory() it after.
func makeTemporaryDirectory(_ purpose: String) throws -> String {
    let directory = NSTemporaryDirectory() + "tether-\(purpose)-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return directory
}

func removeDirectory(_ directory: String?) {
    if let directory { try? FileManager.default.removeItem(atPath: directory) }
}

/// A test case with a new folder for its stores, made before each test and
/// removed after (named after the test class, to tell leftovers apart).
class DirectoryTestCase: XCTestCase {
    var directory: String!

    override func setUpWithError() throws { directory = try makeTemporaryDirectory(String(describing: Self.self)) }
    override func tearDownWithError() throws { removeDirectory(directory) }
}

/// A test case with a new Kinto bucket and a folder for its store.
class KintoTestCase: DirectoryTestCase {
    var backend: KintoBackend!

    override func setUpWithError() throws {
        try super.setUpWithError()
        backend = try KintoBackend(directory: directory)
    }

    override func tearDownWithError() throws {
        backend = nil
        try super.tearDownWithError()
    }
}

/// A test case with a new memory server and a folder for its store.
class MemoryTestCase: DirectoryTestCase {
    var backend: MemoryBackend!

    override func setUpWithError() throws {
        try super.setUpWithError()
        backend = MemoryBackend(directory: directory)
    }

    override func tearDownWithError() throws {
        backend = nil
        try super.tearDownWithError()
    }
}

/// A test's connection around another: every request goes to `inner` unless
/// the wrapper says otherwise, so a wrapper names only what it changes (and a
/// method added to `Connection` is forwarded by all of them at once).
protocol WrappingConnection: Connection {
    var inner: any Connection { get }
}

extension WrappingConnection {
    var identity: String { inner.identity }
    var formerIdentities: [String] { inner.formerIdentities }
    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        inner.serverInfo(done)
    }
    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable { inner.specs(done) }
    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.page(request, done)
    }
    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        inner.count(request, done)
    }
    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.records(spec, ids: ids, cursor: cursor, done)
    }
    func idBatches(_ ids: [String]) -> [[String]] { inner.idBatches(ids) }
    func supports(_ filter: Filter) -> Bool { inner.supports(filter) }
    func filtersExactly(_ filter: Filter) -> Bool { inner.filtersExactly(filter) }
    var changeListingsCanMissRewrites: Bool { inner.changeListingsCanMissRewrites }
    func limit(ofServerQuery query: String) -> Int64? { inner.limit(ofServerQuery: query) }
    var canPushChanges: Bool { inner.canPushChanges }
    func pushesChanges(of entity: String) -> Bool { inner.pushesChanges(of: entity) }
    var backoffRemainingMilliseconds: Int64 { inner.backoffRemainingMilliseconds }
    func changeFeed(since position: String?,
                    _ done: @escaping @Sendable (Result<ChangeFeed, TetherError>) -> Void) -> (any Cancellable)? {
        inner.changeFeed(since: position, done)
    }
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        inner.write(writes, answered)
    }
    func shutdown() { inner.shutdown() }
}
