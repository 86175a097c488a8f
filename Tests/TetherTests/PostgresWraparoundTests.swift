import XCTest
@testable import Tether

/// A row's version over PostgreSQL is its xmin, 32 bits that wrap around (a
/// busy server's within weeks). Taken as it is, a row written after the
/// wrap had a smaller version than before it: the cache kept the old values
/// as newer, silently. The cluster is moved near the wrap (scripts/pg-xid-jump)
/// and across it.
final class PostgresWraparoundTests: PostgresTestCase {
    override var schemaPrefix: String { "wrap" }
    static let wrap: Int64 = 1 << 32

    override func schemaStatements(_ schema: String) -> [String] {
        ["CREATE TABLE \(schema).items (id text PRIMARY KEY, title text NOT NULL, n int4)"]
    }

    private func nextXID() throws -> Int64 {
        try XCTUnwrap(Int64(XCTUnwrap(admin.query("SELECT pg_current_xact_id()::text").first?.first ?? nil)))
    }

    func testVersionsGrowAcrossTheWrapOfTransactionIDs() throws {
        let dir = try XCTUnwrap(ProcessInfo.processInfo.environment["TETHER_PG_DIR"])
        if try nextXID() < Self.wrap - 5_000 {
            admin.close()
            try runScript("pg-xid-jump", dir, String(Self.wrap - 3_000))
            admin = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        }
        XCTAssertGreaterThan(try nextXID(), Self.wrap - 5_000)
        _ = try admin.query("INSERT INTO \(schema).items SELECT 'r' || n, 'before', n FROM generate_series(1, 50) n")
        let context = try openContext()
        defer { try? context.close() }
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        XCTAssertEqual(try fetch(context, request).last?.objects.count, 50)
        let object = try context.object(entity: "items", id: "r1")
        let before = try object.version()
        // Transactions until the 32-bit ids have wrapped.
        while try nextXID() < Self.wrap + 100 {}
        _ = try admin.query("UPDATE \(schema).items SET title = 'after'")
        XCTAssertLessThan(try XCTUnwrap(Int64(XCTUnwrap(admin.query("SELECT xmin::text FROM \(schema).items WHERE id = 'r1'").first?.first ?? nil))),
                          before, "xmin wrapped")
        let answer = try fetch(context, request).last
        XCTAssertNil(answer?.error)
        XCTAssertEqual(answer?.objects.count, 50)
        XCTAssertEqual(try object.peek("title"), .text("after"), "written after the wrap: newer, and taken")
        XCTAssertGreaterThan(try object.version(), before)
        var cached = request
        cached.policy = .cacheOnly
        let titles = try (fetch(context, cached).last?.objects ?? []).map { try $0.peek("title") }
        XCTAssertEqual(titles.filter { $0 == .text("after") }.count, 50, "every row, in the store too")
        // A conditional write against the widened version goes through.
        try object.set("title", .text("saved after"))
        let saved = try SaveContract.save(context)
        XCTAssertNil(saved.error)
        XCTAssertEqual(try admin.query("SELECT title FROM \(schema).items WHERE id = 'r1'").first?.first, "saved after")
        XCTAssertGreaterThan(try object.version(), Self.wrap, "the version our save read back is past the wrap")
    }
}
