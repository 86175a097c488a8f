import Foundation
import XCTest
@testable import Tether

/// Which order PostgreSQL pages in: by the key's index when the core reads
/// every page (a whole listing, a query read to its end), by the ids' bytes
/// when it may stop once it has its limit, so the cut is the cache's.
final class PostgresPagingTests: PostgresTestCase {
    override var schemaPrefix: String { "p" }

    override func schemaStatements(_ schema: String) -> [String] {
        [
            "CREATE TABLE \(schema).items (id int8 PRIMARY KEY, ratio float8 NOT NULL)",
            "INSERT INTO \(schema).items SELECT i, i / 10.0 FROM generate_series(1, 2500) i",  // three pages
        ]
    }

    func ids(_ context: Context, where predicate: String?, limit: Int64) throws -> [String] {
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        request.predicate = predicate
        request.limit = limit
        let answer = try XCTUnwrap(fetch(context, request).last)
        if let error = answer.error { throw error }
        return try (0..<answer.results.count).map { try answer.results.id(at: $0) }
    }

    func testALimitCutOverAnIntegerKeyIsTheIdsBytewiseFirst() throws {
        let context = try openContext()
        defer { try? context.close() }
        // A real comparison is checked here, not by PostgreSQL: pages are read
        // until five match. In the index's order the first page holds 1..1000,
        // which has five, but the bytewise first five include 1001.
        XCTAssertEqual(try ids(context, where: "ratio >= 0.0", limit: 5), ["1", "10", "100", "1000", "1001"])
        // Read to the end (no limit): every row, in the cache's order.
        let all = try ids(context, where: "ratio >= 0.0", limit: 0)
        XCTAssertEqual(all.count, 2500)
        XCTAssertEqual(all, all.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }
}
