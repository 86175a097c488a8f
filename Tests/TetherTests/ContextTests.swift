import XCTest
@testable import Tether

/// Against the real Kinto that scripts/with-kinto starts (TETHER_TEST_URL).
final class ContextTests: XCTestCase {
    private var server: String!
    private var bucket: String!
    private var directory: String!
    private var admin: HTTPEngine!

    override func setUpWithError() throws {
        guard let url = ProcessInfo.processInfo.environment["TETHER_TEST_URL"] else {
            XCTFail("TETHER_TEST_URL is not set: run the tests with `make test` (scripts/with-kinto)")
            throw XCTSkip("no server")
        }
        server = url
        bucket = "swift-\(UUID().uuidString.prefix(8).lowercased())"
        directory = NSTemporaryDirectory() + "tether-context-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        admin = try HTTPEngine(credentials: HTTPCredentials(username: "test", password: "test"), timeoutMilliseconds: 10_000)
        try send("PUT", "/buckets/\(bucket!)", #"{"permissions": {"read": ["system.Everyone"]}}"#)
        try send("PUT", "/buckets/\(bucket!)/collections/items", """
            {"data": {"schema": {"type": "object", "properties": {
              "Title": {"type": "string", "x-tether-code": 501}, "Rank": {"type": "integer"}}}}}
            """)
        for rank in 0..<120 {
            try send("PUT", "/buckets/\(bucket!)/collections/items/records/i\(rank)",
                     #"{"data": {"Title": "item \#(rank)", "Rank": \#(rank)}}"#)
        }
    }

    override func tearDownWithError() throws {
        admin?.shutdown()
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    @discardableResult
    private func send(_ method: String, _ path: String, _ body: String? = nil) throws -> HTTPResponse {
        let response = try admin.send(HTTPRequest(method: method, url: server + path, body: body.map { Array($0.utf8) })).get()
        XCTAssertTrue((200..<300).contains(response.status), "\(method) \(path): HTTP \(response.status)")
        return response
    }

    private func open(_ mode: DeliveryMode = .thread, url: String? = nil, bucket: String? = nil) throws -> Context {
        var options = ContextOptions(serverURL: url ?? server, bucket: bucket ?? self.bucket, storePath: directory + "/store.sqlite")
        options.delivery = mode
        options.timeoutMilliseconds = 5_000
        return try Context.open(options)
    }

    /// Runs a fetch to its final callback; returns every callback in order.
    private func fetch(_ context: Context, _ request: FetchRequest) throws -> [FetchResult] {
        let lock = NSCondition()
        var results: [FetchResult] = []
        let task = try context.makeFetch(request)
        try task.start { result in
            lock.lock()
            results.append(result)
            lock.broadcast()
            lock.unlock()
        }
        lock.lock()
        defer { lock.unlock() }
        let deadline = Date().addingTimeInterval(15)
        while results.last?.phase != .final {
            XCTAssertTrue(lock.wait(until: deadline), "no final callback")
            if Date() > deadline { break }
        }
        return results
    }

    func testModelFetchPagingAndUniquing() throws {
        let context = try open()
        defer { try? context.close() }
        XCTAssertTrue(context.isOnline)
        let items = try XCTUnwrap(context.model.entity(named: "items"))
        XCTAssertEqual(items.attributes[items.attributeIndex(named: "Title")!].code, 501)
        XCTAssertEqual(items.operations, .all, "the bucket's creator may do everything")

        var request = FetchRequest(entity: "items")
        request.sort = "-Rank"
        let first = try fetch(context, request)
        XCTAssertEqual(first.map(\.phase), [.cached, .final])
        XCTAssertEqual(first[0].objects.count, 0)
        XCTAssertNil(first[1].error)
        XCTAssertEqual(first[1].objects.count, 120, "all pages followed (the server pages by 50)")
        XCTAssertEqual(try first[1].objects.first?.peek("Rank"), .integer(119))

        let second = try fetch(context, request)
        XCTAssertEqual(second[0].objects.count, 120, "the cache answers first")
        XCTAssertTrue(second[0].objects[0] === first[1].objects[0], "one object per record")
        XCTAssertTrue(try context.object(entity: "items", id: "i119") === first[1].objects[0])

        request.limit = 7
        request.policy = .serverOnly
        let limited = try fetch(context, request)
        XCTAssertEqual(limited.count, 1)
        XCTAssertEqual(limited[0].objects.count, 7)
    }

    func testGetRefreshesAndTellsObserversOfBothForms() throws {
        let context = try open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i3")
        let changed = NSCondition()
        var told: [String] = []
        for key in ["Title", "TitlePeek"] {
            let observer = try object.makeObserver(key: key)
            try observer.activate { error in
                changed.lock()
                if error == nil { told.append(key) }
                changed.broadcast()
                changed.unlock()
            }
        }
        try send("PATCH", "/buckets/\(bucket!)/collections/items/records/i3", #"{"data": {"Title": "renamed"}}"#)
        XCTAssertEqual(try object.peek("Title"), .text("item 3"), "peek does not touch the network")
        XCTAssertEqual(try object.get("Title"), .text("item 3"), "get answers from the cache at once")
        changed.lock()
        let deadline = Date().addingTimeInterval(10)
        while told.count < 2 && changed.wait(until: deadline) {}
        changed.unlock()
        XCTAssertEqual(Set(told), ["Title", "TitlePeek"])
        XCTAssertEqual(try object.peek("Title"), .text("renamed"))
    }

    func testModelChangesOnTheServerMigrateTheStore() throws {
        let before = try open()
        _ = try fetch(before, FetchRequest(entity: "items"))
        let titleCode = before.model.entity(named: "items")!.attributes.first { $0.name == "Title" }!.code
        try before.close()
        try send("PUT", "/buckets/\(bucket!)/collections/items", """
            {"data": {"schema": {"type": "object", "properties": {
              "Title": {"type": "string"}, "Owner": {"type": "string"}}}}}
            """)
        let after = try open()
        defer { try? after.close() }
        let items = after.model.entity(named: "items")!
        XCTAssertNotNil(items.attributeIndex(named: "Owner"), "a field added on the server appears")
        XCTAssertNil(items.attributeIndex(named: "Rank"), "a field removed on the server goes")
        XCTAssertEqual(items.attributes[items.attributeIndex(named: "Title")!].code, titleCode, "codes are stable")
        let object = try after.object(entity: "items", id: "i5")
        XCTAssertEqual(try object.peek("Title"), .text("item 5"), "cached rows survive the migration")
        XCTAssertEqual(try object.peek("Owner"), .null)
    }

    func testOfflineOpenFromTheStore() throws {
        try open().close()
        // Nothing listens on port 9 of the loopback: the server is unreachable.
        let offlineURL = "http://127.0.0.1:9/v1"
        var options = ContextOptions(serverURL: offlineURL, bucket: bucket, storePath: directory + "/fresh.sqlite")
        options.timeoutMilliseconds = 2_000
        XCTAssertThrowsError(try Context.open(options)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .network, "no store, no server: a clear network error")
        }
        XCTAssertThrowsError(try open(url: offlineURL)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .store, "the store belongs to the real server's URL")
        }
    }

    func testUnknownBucketIsNotFoundAndLeavesTheStoreAlone() throws {
        XCTAssertThrowsError(try open(bucket: "no-such-bucket")) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .notFound)
        }
        let context = try open()
        XCTAssertTrue(context.isOnline)
        try context.close()
    }

    func testCancelDeliversOneFinalCancelled() throws {
        let context = try open(.poll)
        defer { try? context.close() }
        let task = try context.makeFetch(FetchRequest(entity: "items"))
        var phases: [(FetchPhase, TetherError.Kind?)] = []
        try task.start { phases.append(($0.phase, $0.error?.kind)) }
        try task.cancel()
        let deadline = Date().addingTimeInterval(3)
        while Date() < deadline { _ = try context.poll(timeoutMilliseconds: 50) }
        XCTAssertEqual(phases.count, 1)
        XCTAssertEqual(phases.first?.0, .final)
        XCTAssertEqual(phases.first?.1, .cancelled)
        XCTAssertThrowsError(try task.cancel()) { XCTAssertEqual(($0 as? TetherError)?.kind, .closed) }
    }
}
