import Foundation
import XCTest
@testable import Tether

/// The server restarted in the middle of a sync or a save (scripts/pg-stop,
/// then pg-start, on the cluster scripts/with-postgres started): the fetch
/// that was cut fails rather than answering part of the table with OK, the
/// store keeps no half-done sync that a later fetch trusts, and a save cut
/// cut mid-transaction loses nothing and applies nothing twice.
final class PostgresRestartTests: PostgresTestCase {
    override var schemaPrefix: String { "r" }
    static let rows = 12_000  // twelve pages of a listing

    override func schemaStatements(_ schema: String) -> [String] {
        [
            "CREATE TABLE \(schema).items (id text PRIMARY KEY, name text NOT NULL)",
            "INSERT INTO \(schema).items SELECT 'r' || lpad(i::text, 6, '0'), 'item ' || i FROM generate_series(1, \(Self.rows)) i",
        ]
    }

    /// Stops the server when the connection's `pageToStopAfter`-th page
    /// (counted from when it is set) has arrived, on the connection's own
    /// thread, so the next page is asked of a stopped server.
    final class StopAfterPage: @unchecked Sendable {
        let directory: String
        let state = Lock<(armed: Int?, seen: Int, stopped: Bool)>((nil, 0, false))
        init(directory: String) { self.directory = directory }
        func arm(_ pages: Int) { state.withLock { $0 = (pages, 0, false) } }
        var stopped: Bool { state.withLock { $0.stopped } }
        func pageArrived() {
            let stop = state.withLock { state -> Bool in
                guard let armed = state.armed else { return false }
                state.seen += 1
                guard state.seen == armed else { return false }
                state.stopped = true
                state.armed = nil
                return true
            }
            if stop { try? runScript("pg-stop", directory) }
        }
    }

    func open(_ stopper: StopAfterPage) throws -> Context {
        let connection = ForwardingConnection(try PostgresConnection(options)) { _, page in
            stopper.pageArrived()
            return page
        }
        return try Context.open(ContextOptions(storePath: directory + "/store.sqlite"), connection: connection)
    }

    /// The fetch's final answer as id -> name, or its error.
    func names(_ context: Context, policy: CachePolicy = .serverOnly) throws -> Result<[String: String], TetherError> {
        var request = FetchRequest(entity: "items")
        request.policy = policy
        let answer = try XCTUnwrap(fetch(context, request).last)
        if let error = answer.error { return .failure(error) }
        var names: [String: String] = [:]
        for index in 0..<answer.results.count {
            let id = try answer.results.id(at: index)
            if case .text(let text) = try context.object(entity: "items", id: id).peek("name") { names[id] = text }
        }
        return .success(names)
    }

    func table() throws -> [String: String] {
        Dictionary(uniqueKeysWithValues: try admin.query("SELECT id, name FROM \(schema).items").map { ($0[0]!, $0[1]!) })
    }

    func assertExact(_ answer: Result<[String: String], TetherError>, file: StaticString = #filePath, line: UInt = #line) throws {
        let expected = try table()
        switch answer {
        case .failure(let error): XCTFail("the server is back: \(error)", file: file, line: line)
        case .success(let seen):
            let differing = Set(seen.keys).union(expected.keys).filter { seen[$0] != expected[$0] }.sorted().prefix(5)
            XCTAssertEqual(differing.map { "\($0): \(seen[$0] ?? "-") vs \(expected[$0] ?? "-")" }, [], file: file, line: line)
        }
    }

    func pgDir() throws -> String { try XCTUnwrap(ProcessInfo.processInfo.environment["TETHER_PG_DIR"]) }

    /// Stops the server (when `after` pages of the next fetch have arrived),
    /// checks that fetch fails, restarts, and checks the next answers are the table.
    func assertCutListingFailsThenAnswersExactly(_ context: Context, _ stopper: StopAfterPage, after pages: Int,
                                                file: StaticString = #filePath, line: UInt = #line) throws {
        admin.close()
        stopper.arm(pages)
        let cut = try names(context)
        XCTAssertTrue(stopper.stopped, "the server was stopped mid-listing", file: file, line: line)
        guard case .failure(let error) = cut else {
            return XCTFail("a listing cut after \(pages) pages answered OK", file: file, line: line)
        }
        XCTAssertEqual(error.kind, .network, "\(error)", file: file, line: line)
        try runScript("pg-start", pgDir())
        admin = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        // The default policy trusts the store's sync state: it must not think the cut sync done.
        try assertExact(try names(context, policy: .cacheThenServer), file: file, line: line)
        try assertExact(try names(context), file: file, line: line)
    }

    /// A connection refused while the server starts up or shuts down (SQLSTATE
    /// 57P03, libpq's "the database system is ...") is a restart in progress:
    /// unreachable for now (NETWORK, so a context opens offline), not a server
    /// error. A fetch that connects in that window met it (helper pgkill's runs).
    func testAServerStartingUpOrShuttingDownIsUnreachable() {
        for state in ["shutting down", "starting up", "in recovery mode"] {
            let error = PostgresSession.connectFailure(
                "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  the database system is \(state)")
            XCTAssertEqual(error.kind, .network, state)
            XCTAssertTrue(error.isUnreachable, state)
        }
        XCTAssertEqual(PostgresSession.connectFailure("connection to server failed: FATAL:  password authentication failed").kind,
                       .auth, "an answer that refuses stays what it is")
    }

    func testAWholeListingCutByARestartFailsAndTheNextIsExact() throws {
        let stopper = StopAfterPage(directory: try pgDir())
        let context = try open(stopper)
        defer { try? context.close() }
        try assertCutListingFailsThenAnswersExactly(context, stopper, after: 3)
    }

    func testAnIncrementalSyncCutByARestartIsNotTakenForDone() throws {
        try PostgresConnection.install(options)
        let stopper = StopAfterPage(directory: try pgDir())
        let context = try open(stopper)
        defer { try? context.close() }
        try assertExact(try names(context))
        // Four pages of changes, and deletions, made by another client.
        _ = try admin.query("UPDATE \(schema).items SET name = name || '!' WHERE id <= 'r004000'")
        _ = try admin.query("DELETE FROM \(schema).items WHERE id > 'r011000'")
        try assertCutListingFailsThenAnswersExactly(context, stopper, after: 2)
        let seen = try names(context).get()
        XCTAssertEqual(seen["r000001"], "item 1!")
        XCTAssertNil(seen["r011500"])
    }

    /// A save is one transaction (a savepoint per record). Another session
    /// holds a row the save updates, so the save waits mid-transaction, its
    /// inserts made; then the server stops. Nothing of it may be committed
    /// or lost: after the restart the next save applies each change once.
    func testASaveCutMidTransactionLosesNothingAndAppliesNothingTwice() throws {
        let context = try openContext(store: "save.sqlite")
        defer { try? context.close() }
        try assertExact(try names(context))
        for i in 0..<300 { _ = try context.insert(entity: "items", id: "new\(i)", values: [("name", .text("new \(i)"))]) }
        for i in 1...100 { try context.object(entity: "items", id: String(format: "r%06d", i)).set("name", .text("edited \(i)")) }
        for i in 101...150 { try context.object(entity: "items", id: String(format: "r%06d", i)).delete() }

        let holder = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        _ = try holder.query("BEGIN")
        _ = try holder.query("SELECT id FROM \(schema).items WHERE id = 'r000050' FOR UPDATE")
        let outcome = ConditionLock<SaveResult?>(nil)
        try context.makeSave(policy: nil).start(progress: nil) { result in outcome.withLock { $0 = result } }
        // Until the save's transaction waits for the row.
        let deadline = MonotonicTime.now().adding(milliseconds: 4_000)
        while try admin.query("SELECT count(*)::text FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                              + "AND datname = current_database()").first?.first != "1" {
            guard MonotonicTime.now() < deadline else { return XCTFail("the save never waited for the locked row") }
            usleep(10_000)
        }
        XCTAssertEqual(try admin.query("SELECT count(*)::text FROM \(schema).items WHERE id LIKE 'new%'").first?.first, "0",
                       "the inserts are not visible before the commit")
        // The holder stays open until the server stops: closing it would end
        // its transaction and let the save commit first.
        admin.close()
        try runScript("pg-stop", pgDir())
        holder.close()
        let cut = outcome.withLock(when: { $0 != nil }, until: MonotonicTime.now().adding(milliseconds: 20_000)) { value, _ in value }
        let failed = try XCTUnwrap(cut, "the save answered")
        XCTAssertEqual((failed.error ?? failed.failures.first?.error)?.kind, .network, "\(failed.failures.prefix(2))")
        XCTAssertEqual(failed.saved, 0, "nothing is confirmed of a transaction that did not commit")
        XCTAssertTrue(context.hasChanges)

        try runScript("pg-start", pgDir())
        admin = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        XCTAssertEqual(try admin.query("SELECT count(*)::text FROM \(schema).items WHERE id LIKE 'new%'").first?.first, "0",
                       "nothing of the cut transaction was committed")
        let saved = try SaveContract.save(context)
        XCTAssertNil(saved.error, "\(saved.failures.prefix(3).map { $0.error })")
        XCTAssertEqual(saved.saved, 450)
        XCTAssertFalse(context.hasChanges)
        let rows = try table()
        XCTAssertEqual(rows.count, Self.rows + 300 - 50, "each insert once, each delete done")
        XCTAssertEqual((0..<300).filter { rows["new\($0)"] != "new \($0)" }, [])
        XCTAssertEqual((1...100).filter { rows[String(format: "r%06d", $0)] != "edited \($0)" }, [])
        XCTAssertEqual((101...150).filter { rows[String(format: "r%06d", $0)] != nil }, [])
        try assertExact(try names(context))
    }
}
