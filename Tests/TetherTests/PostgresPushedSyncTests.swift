import Foundation
import XCTest
@testable import Tether

/// The two halves of PostgreSQL's change feed together: the triggers that
/// `PostgresConnection.install` (sql/tether-postgres.sql) puts on a schema's
/// tables both record changes for incremental sync and send the NOTIFY a live
/// fetch listens for, so another session's commits reach a live fetch with
/// no fetch by the test and no trigger of the test's own.
final class PostgresPushedSyncTests: PostgresTestCase {
    override var schemaPrefix: String { "p" }

    override func schemaStatements(_ schema: String) -> [String] {
        ["CREATE TABLE \(schema).items (id int8 PRIMARY KEY, title text NOT NULL)",
         "INSERT INTO \(schema).items VALUES (1, 'one'), (2, 'two')"]
    }

    func testInstalledTrackingPushesCommitsToALiveFetch() throws {
        XCTAssertEqual(try PostgresConnection.install(options), 1, "one table tracked")

        let context = try openContext()
        defer { try? context.close() }
        let live = try PostgresListenTests.Live(context)
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two"] }, "\(live.last)")
        _ = try admin.query("INSERT INTO \(schema).items VALUES (3, 'three')")
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:two", "3:three"] }, "an insert: \(live.last)")
        _ = try admin.query("UPDATE \(schema).items SET title = 'TWO' WHERE id = 2")
        XCTAssertTrue(eventually(20) { live.last == ["1:one", "2:TWO", "3:three"] }, "an update: \(live.last)")
        _ = try admin.query("DELETE FROM \(schema).items WHERE id = 1")
        XCTAssertTrue(eventually(20) { live.last == ["2:TWO", "3:three"] }, "a delete: \(live.last)")
        try live.task.cancel()
    }

    func openContext(syncInterval: Int64) throws -> Context {
        var contextOptions = ContextOptions(storePath: directory + "/store.sqlite")
        contextOptions.syncIntervalMilliseconds = syncInterval
        return try Context.open(contextOptions, connection: PostgresConnection(options))
    }

    /// A live fetch of `entity` by id; the ids and titles of its last answer.
    func liveTitles(_ context: Context, _ entity: String) throws -> (FetchTask, ConditionLock<[String]>) {
        var request = FetchRequest(entity: entity)
        request.sort = "id"
        request.live = true
        let seen = ConditionLock<[String]>([])
        let task = try context.makeFetch(request)
        try task.start { result in
            if result.phase == .live { seen.withLock { $0 = result.objects.map { "\($0.id):\(PostgresListenTests.title($0))" } } }
        }
        return (task, seen)
    }

    /// A table whose name the triggers' format('%I.%I') quotes ("Orders")
    /// pushes too: the listener compared the bare name, and it never heard.
    func testAQuotedTableNamePushes() throws {
        _ = try admin.query("CREATE TABLE \(schema).\"Orders\" (id int8 PRIMARY KEY, title text NOT NULL)")
        _ = try admin.query("INSERT INTO \(schema).\"Orders\" VALUES (1, 'one')")
        XCTAssertEqual(try PostgresConnection.install(options), 2)
        let context = try openContext(syncInterval: 0)  // heard by the push alone
        defer { try? context.close() }
        let (task, seen) = try liveTitles(context, "Orders")
        XCTAssertTrue(eventually(20) { seen.withLock { $0 } == ["1:one"] })
        usleep(1_000_000)  // past the listings every new LISTEN starts with
        _ = try admin.query("INSERT INTO \(schema).\"Orders\" VALUES (2, 'two')")
        XCTAssertTrue(eventually(10) { seen.withLock { $0 } == ["1:one", "2:two"] }, "pushed: \(seen.withLock { $0 })")
        try task.cancel()
    }

    /// Issue 40: a table without tracking pushes nothing; once a listing
    /// finds it so, its live fetch gets the sync interval (said once at
    /// WARNING), while the tracked table's stays pushed.
    func testAnUntrackedTableGetsTheSyncInterval() throws {
        XCTAssertEqual(try PostgresConnection.install(options), 1)
        _ = try admin.query("CREATE TABLE \(schema).later (id int8 PRIMARY KEY, title text NOT NULL)")  // after: untracked
        _ = try admin.query("INSERT INTO \(schema).later VALUES (1, 'one')")
        let recorder = LogTests.Recorder()
        try Log.install(.warning, recorder.sink)
        defer { try? Log.install(.off, nil) }
        let context = try openContext(syncInterval: 200)
        defer { try? context.close() }
        let (task, seen) = try liveTitles(context, "later")
        let items = try PostgresListenTests.Live(context)
        XCTAssertTrue(eventually(20) { seen.withLock { $0 } == ["1:one"] && items.last == ["1:one", "2:two"] })
        usleep(1_000_000)  // past the listings every new LISTEN starts with
        _ = try admin.query("INSERT INTO \(schema).later VALUES (2, 'two')")
        XCTAssertTrue(eventually(10) { seen.withLock { $0 } == ["1:one", "2:two"] }, "by the interval: \(seen.withLock { $0 })")
        _ = try admin.query("INSERT INTO \(schema).items VALUES (3, 'three')")
        XCTAssertTrue(eventually(10) { items.last == ["1:one", "2:two", "3:three"] }, "pushed: \(items.last)")
        let polling = recorder.messages(.sync).filter { $0.hasPrefix("later:") && $0.contains("ask every") }
        XCTAssertEqual(polling.count, 1, "said once: \(recorder.messages(.sync))")
        try task.cancel()
        try items.task.cancel()
    }
}
