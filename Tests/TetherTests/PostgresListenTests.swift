import Foundation
import XCTest
@testable import Tether

/// Changes pushed by PostgreSQL (LISTEN/NOTIFY): another session's commits
/// reach a live fetch without a fetch by the test, also after the server
/// restarted; the listening connection exists only while a live fetch does,
/// and a close does not wait for it. The trigger is the test's own, as
/// sql/tether-postgres.sql installs it: pg_notify('tether_changes', '<schema>.<table>').
final class PostgresListenTests: PostgresTestCase {
    override var schemaPrefix: String { "l" }

    override func schemaStatements(_ s: String) -> [String] {
        [
            "CREATE TABLE \(s).items (id int8 PRIMARY KEY, title text NOT NULL)",
            "CREATE TABLE \(s).other (id int8 PRIMARY KEY)",
            """
            CREATE FUNCTION \(s).notify() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_notify('tether_changes', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME); RETURN NULL; END $$
            """,
            "CREATE TRIGGER items_notify AFTER INSERT OR UPDATE OR DELETE ON \(s).items FOR EACH STATEMENT EXECUTE FUNCTION \(s).notify()",
            "INSERT INTO \(s).items VALUES (1, 'one'), (2, 'two')",
        ]
    }

    func open() throws -> Context {
        try openContext()
    }

    /// A live fetch of all items by id; its callbacks are kept.
    final class Live: Sendable {
        let task: FetchTask
        let results = ConditionLock<[FetchResult]>([])

        init(_ context: Context) throws {
            var request = FetchRequest(entity: "items")
            request.sort = "id"
            request.live = true
            task = try context.makeFetch(request)
            try task.start { [results] result in results.withLock { $0.append(result) } }
        }

        /// The ids and titles of the last live answer.
        var last: [String] {
            results.withLock { $0.last(where: { $0.phase == .live }) }.map { result in
                result.objects.map { object in "\(object.id):\(PostgresListenTests.title(object))" }
            } ?? []
        }
    }

    static func title(_ object: ManagedObject) -> String {
        if case .text(let text)? = try? object.peek("title") { return text }
        return "?"
    }

    /// Listening connections of this process, as the server sees them (one
    /// per process and database, whatever the schema).
    func listeners() throws -> Int {
        let rows = try admin.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                                   [PostgresListener.applicationName])
        return Int(rows.first?.first.flatMap { $0 } ?? "") ?? -1
    }

    func testAnotherSessionsCommitsReachALiveFetch() throws {
        let context = try open()
        defer { try? context.close() }
        let live = try Live(context)
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two"] }, "\(live.last)")
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        let before = live.results.withLock { $0.count }
        _ = try admin.query("INSERT INTO \(schema).items VALUES (3, 'three')")
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two", "3:three"] }, "an insert: \(live.last)")
        _ = try admin.query("UPDATE \(schema).items SET title = 'TWO' WHERE id = 2")
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:TWO", "3:three"] }, "an update: \(live.last)")
        _ = try admin.query("DELETE FROM \(schema).items WHERE id = 1")
        XCTAssertTrue(eventually(20) { live.last == ["2:TWO", "3:three"] }, "a delete: \(live.last)")
        XCTAssertGreaterThan(live.results.withLock { $0.count }, before)
        try live.task.cancel()
    }

    func testAChangeAfterTheServerRestartedStillArrives() throws {
        let dir = try XCTUnwrap(ProcessInfo.processInfo.environment["TETHER_PG_DIR"])
        let context = try open()
        defer { try? context.close() }
        let live = try Live(context)
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two"] }, "\(live.last)")
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        try script("pg-stop", dir)
        try script("pg-start", dir)
        _ = try admin.query("INSERT INTO \(schema).items VALUES (4, 'four')")  // (the session connects again)
        XCTAssertTrue(eventually(30) { live.last == ["1:one", "2:two", "4:four"] }, "after a restart: \(live.last)")
        // Listening again, not only caught up once: a later change arrives too.
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        _ = try admin.query("UPDATE \(schema).items SET title = 'FOUR' WHERE id = 4")
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two", "4:FOUR"] }, "\(live.last)")
        try live.task.cancel()
    }

    func testCloseWithTheListenerIdleReturnsAndDisconnects() throws {
        let context = try open()
        let live = try Live(context)
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two"] })
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        try context.close()  // returns: no wait on the idle LISTEN connection
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 0 }, "the listening connection closes")
    }

    /// Issue 40: contexts of one process on one database share one
    /// listening connection; a close ends only its own subscriptions.
    func testContextsOfAProcessShareOneListeningConnection() throws {
        let first = try openContext(store: "first.sqlite")
        defer { try? first.close() }
        let second = try openContext(store: "second.sqlite")
        defer { try? second.close() }
        let sibling = try first.openSibling(name: "beside")
        let lives = try [first, second, sibling].map { try Live($0) }
        XCTAssertTrue(eventually(20) { lives.allSatisfy { $0.last == ["1:one", "2:two"] } })
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        usleep(300_000)
        XCTAssertEqual(try listeners(), 1, "three contexts, two stores, one listening connection")
        try second.close()
        _ = try admin.query("INSERT INTO \(schema).items VALUES (5, 'five')")
        XCTAssertTrue(eventually(20) { lives[0].last == ["1:one", "2:two", "5:five"] }, "the first still hears: \(lives[0].last)")
        XCTAssertTrue(eventually(20) { lives[2].last == ["1:one", "2:two", "5:five"] }, "the sibling too: \(lives[2].last)")
        XCTAssertEqual(try listeners(), 1)
        try sibling.close()
        try first.close()
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 0 }, "the last context gone: no listening")
    }

    func testNoListeningConnectionWithoutALiveFetch() throws {
        let context = try open()
        defer { try? context.close() }
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        XCTAssertEqual(try listeners(), 0, "a fetch that is not live does not listen")
        let live = try Live(context)
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 })
        let second = try Live(context)
        XCTAssertTrue(eventually(20) { second.last == ["1:one", "2:two"] })
        XCTAssertEqual(try listeners(), 1, "one connection for every live fetch")
        try live.task.cancel()
        XCTAssertEqual(try listeners(), 1, "a live fetch is left")
        try second.task.cancel()
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 0 }, "the last live fetch gone: no listening")
    }

    /// An observed object follows the server too, with no live fetch.
    func testAnObserverHearsAnotherSessionsCommit() throws {
        let context = try open()
        defer { try? context.close() }
        let two = try context.object(entity: "items", id: "2")
        _ = try? two.get("title")
        XCTAssertTrue(eventually(20) { (try? two.peek("title")) == .text("two") })
        let observer = try two.makeObserver(key: "title")
        let calls = ConditionLock<[TetherError?]>([])
        try observer.activate { error in calls.withLock { $0.append(error) } }
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 1 }, "an observer listens")
        _ = try admin.query("UPDATE \(schema).items SET title = 'zwei' WHERE id = 2")
        XCTAssertTrue(eventually(20) { (try? two.peek("title")) == .text("zwei") })
        XCTAssertTrue(eventually(20) { calls.withLock { $0.contains { $0 == nil } } }, "told of the change")
        try observer.remove()
        XCTAssertTrue(eventually(20) { (try? self.listeners()) == 0 }, "the observer gone: no listening")
    }

    func script(_ name: String, _ argument: String) throws { try runScript(name, argument) }
}
