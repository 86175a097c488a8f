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
}
