import Foundation
import XCTest
@testable import Tether

/// Incremental sync over PostgreSQL's change tracking (sql/tether-postgres.sql)
/// against the real server scripts/with-postgres starts: another client's
/// changes (a second libpq session) reach the next fetch, deletions leave the
/// cache, a fetch with nothing new lists no row, and without tracking whole
/// listings still give the exact answer. Each test makes a schema of its own.
final class PostgresSyncTests: PostgresTestCase {
    override var schemaPrefix: String { "s" }

    override func schemaStatements(_ schema: String) -> [String] {
        [
            "CREATE TABLE \(schema).items (id int8 PRIMARY KEY, name text NOT NULL, n int4)",
            "CREATE TABLE \(schema).tags (code varchar(8) PRIMARY KEY, label text)",
            "CREATE TABLE \(schema).nokey (a int)",
            "INSERT INTO \(schema).items SELECT i, 'item ' || i, i % 7 FROM generate_series(1, 1500) i",
            "INSERT INTO \(schema).tags VALUES ('a', 'A'), ('b', 'B')",
        ]
    }

    func open() throws -> (Context, PostgresConnection) {
        let connection = try PostgresConnection(options)
        return (try Context.open(ContextOptions(storePath: directory + "/store.sqlite"), connection: connection), connection)
    }

    /// The ids and names the fetch answers, by id.
    func names(_ context: Context, _ entity: String = "items") throws -> [String: String] {
        var request = FetchRequest(entity: entity)
        request.policy = .serverOnly
        let answer = try XCTUnwrap(fetch(context, request).last)
        if let error = answer.error { throw error }
        var names: [String: String] = [:]
        for index in 0..<answer.results.count {
            let id = try answer.results.id(at: index)
            let value = try context.object(entity: entity, id: id).peek(entity == "items" ? "name" : "label")
            if case .text(let text) = value { names[id] = text }
        }
        return names
    }

    /// What SQL says the table holds now.
    func expected(_ table: String = "items", _ key: String = "id", _ column: String = "name") throws -> [String: String] {
        Dictionary(uniqueKeysWithValues: try admin.query("SELECT \(key)::text, \(column) FROM \(schema).\(table)").map { ($0[0]!, $0[1]!) })
    }

    /// Equal, or the ids that differ (not two dictionaries of 1,500 entries).
    func assertSame(_ seen: [String: String], _ expected: [String: String], file: StaticString = #filePath, line: UInt = #line) throws {
        let differing = Set(seen.keys).union(expected.keys).filter { seen[$0] != expected[$0] }.sorted().prefix(10)
        XCTAssertEqual(differing.map { "\($0): \(seen[$0] ?? "-") vs \(expected[$0] ?? "-")" }, [], file: file, line: line)
    }

    func testInstallTwiceIsHarmlessAndTheFileIsTheLibrarysText() throws {
        XCTAssertEqual(try PostgresConnection.install(options), 2, "items and tags; nokey has no key")
        XCTAssertEqual(try PostgresConnection.install(options), 0, "already tracked")
        XCTAssertEqual(try admin.query("SELECT count(*)::text FROM pg_trigger WHERE tgname LIKE 'tether_track_%' AND tgrelid IN "
                                       + "('\(schema).items'::regclass, '\(schema).tags'::regclass)").first?.first, "8")
        _ = try admin.query("CREATE TABLE \(schema).later (id uuid PRIMARY KEY)")
        XCTAssertEqual(try PostgresConnection.install(options), 1, "a new table is tracked by installing again")
        var wrong = options
        wrong.schema = "no_such_schema"
        XCTAssertThrowsError(try PostgresConnection.install(wrong)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        // The library applies the very text a DBA reads.
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("sql/tether-postgres.sql")
        var text = try String(contentsOf: file, encoding: .utf8)
        if text.hasSuffix("\n") { text.removeLast() }
        XCTAssertEqual(text, PostgresChangeSchema.sql, "sql/tether-postgres.sql and PostgresChangeSchema.swift differ")
    }

    func testAnotherClientsChangesReachTheNextFetchAndNothingNewListsNothing() throws {
        try PostgresConnection.install(options)
        let (context, connection) = try open()
        defer { try? context.close() }
        try assertSame(try names(context), try expected())
        let listed = connection.changes.rowsListed.withLock { $0 }
        XCTAssertEqual(listed, 1500, "the first fetch lists the table whole")

        try assertSame(try names(context), try expected())
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed, "nothing new: no row listed")

        // Another client (a second libpq session) inserts, updates and deletes.
        _ = try admin.query("INSERT INTO \(schema).items VALUES (2000, 'new', 1)")
        _ = try admin.query("UPDATE \(schema).items SET name = 'renamed' WHERE id IN (5, 6)")
        _ = try admin.query("DELETE FROM \(schema).items WHERE id IN (7, 8, 9)")
        _ = try admin.query("UPDATE \(schema).items SET id = 3000 WHERE id = 10")  // a key changed: one gone, one new
        let seen = try names(context)
        try assertSame(seen, try expected())
        XCTAssertEqual(seen["2000"], "new")
        XCTAssertEqual(seen["5"], "renamed")
        XCTAssertNil(seen["7"])
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed + 4, "only the rows changed are listed")
        // The deleted records left the cache, not only the answer.
        for id in ["7", "8", "9", "10"] {
            XCTAssertThrowsError(try context.object(entity: "items", id: id).peek("name"), id) {
                XCTAssertEqual(($0 as? TetherError)?.kind, .notFound, "known gone")
            }
        }
        try assertSame(try names(context), try expected())
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed + 4, "nothing new again")

        // Another table's changes do not make this one's sync list anything.
        _ = try admin.query("UPDATE \(schema).tags SET label = 'AA' WHERE code = 'a'")
        try assertSame(try names(context), try expected())
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed + 4)
        try assertSame(try names(context, "tags"), try expected("tags", "code", "label"))
        // A varchar(8) key: the recorded key text is cast back to it to find the row.
        let tagsListed = connection.changes.rowsListed.withLock { $0 }
        _ = try admin.query("UPDATE \(schema).tags SET label = 'BB' WHERE code = 'b'")
        _ = try admin.query("INSERT INTO \(schema).tags VALUES ('c d', 'spaced')")
        try assertSame(try names(context, "tags"), ["a": "AA", "b": "BB", "c d": "spaced"])
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, tagsListed + 2, "two of three rows")
        _ = try admin.query("DELETE FROM \(schema).tags WHERE code = 'a'")
        try assertSame(try names(context, "tags"), ["b": "BB", "c d": "spaced"])
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, tagsListed + 2, "a deletion lists no row")
    }

    /// Change numbers are taken before commit, out of commit order: a change
    /// numbered before one already synced, committed after, is still seen.
    func testAChangeCommittedLateIsNotSkipped() throws {
        try PostgresConnection.install(options)
        let (context, _) = try open()
        defer { try? context.close() }
        try assertSame(try names(context), try expected())
        let slow = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        defer { slow.close() }
        _ = try slow.query("BEGIN")
        _ = try slow.query("UPDATE \(schema).items SET name = 'slow' WHERE id = 1")  // numbered first
        _ = try admin.query("UPDATE \(schema).items SET name = 'quick' WHERE id = 2")  // numbered and committed next
        let before = try names(context)
        XCTAssertEqual(before["1"], "item 1", "not committed yet")
        XCTAssertEqual(before["2"], "quick")
        _ = try slow.query("COMMIT")
        let after = try names(context)
        XCTAssertEqual(after["1"], "slow", "committed after the sync that saw a later change")
        try assertSame(after, try expected())
    }

    func testChangesOfSeveralPagesAndATruncate() throws {
        try PostgresConnection.install(options)
        let (context, connection) = try open()
        defer { try? context.close() }
        try assertSame(try names(context), try expected())
        let listed = connection.changes.rowsListed.withLock { $0 }
        _ = try admin.query("UPDATE \(schema).items SET name = name || '!' WHERE id <= 1200")  // two pages of changes
        try assertSame(try names(context), try expected())
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed + 1200)
        // A truncate forgets the changes: the table is listed whole again.
        _ = try admin.query("TRUNCATE \(schema).items")
        _ = try admin.query("INSERT INTO \(schema).items VALUES (1, 'one', 1)")
        XCTAssertEqual(try names(context), ["1": "one"])
        // A trigger the DBA disabled: changes may be missing, so the table is listed whole.
        let before = connection.changes.rowsListed.withLock { $0 }
        _ = try admin.query("ALTER TABLE \(schema).items DISABLE TRIGGER tether_track_update")
        _ = try admin.query("UPDATE \(schema).items SET name = 'uno' WHERE id = 1")
        XCTAssertEqual(try names(context), ["1": "uno"])
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, before + 1, "listed whole: its one row")
    }

    func testWithoutTrackingWholeListingsGiveTheExactAnswer() throws {
        // Not installed at all (another test may have installed it in this database).
        _ = try admin.query("DROP SCHEMA IF EXISTS tether CASCADE")
        let said = Lock<[String]>([])
        try Log.install(.info) { _, category, message in
            if category == .sync, message.contains("change tracking is not installed") { said.withLock { $0.append(message) } }
        }
        defer { try? Log.install(.off, nil) }
        let (context, connection) = try open()
        defer { try? context.close() }
        try assertSame(try names(context), try expected())
        _ = try admin.query("INSERT INTO \(schema).items VALUES (2000, 'new', 1)")
        _ = try admin.query("UPDATE \(schema).items SET name = 'renamed' WHERE id = 5")
        _ = try admin.query("DELETE FROM \(schema).items WHERE id = 7")
        try assertSame(try names(context), try expected())
        XCTAssertThrowsError(try context.object(entity: "items", id: "7").peek("name")) {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound, "known gone")
        }
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, 3000, "each fetch lists the table whole")
        XCTAssertEqual(said.withLock { $0.count }, 1, "said once, in category sync")

        // Installed while the context is open: its next fetches sync.
        try PostgresConnection.install(options)
        try assertSame(try names(context), try expected())
        let listed = connection.changes.rowsListed.withLock { $0 }
        _ = try admin.query("DELETE FROM \(schema).items WHERE id = 8")
        try assertSame(try names(context), try expected())
        XCTAssertEqual(connection.changes.rowsListed.withLock { $0 }, listed, "a deletion alone lists no row")
    }
}
