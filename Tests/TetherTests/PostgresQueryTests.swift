import Foundation
import XCTest
@testable import Tether

/// Queries over PostgreSQL give the answer the cache gives: fetches compared
/// with the same query run in SQL (text in the "C" collation, nulls first
/// ascending, ties by id), and each filter the connection runs on the
/// server compared with `Filter.matches` over every record.
extension PostgresTests {
    func testFetchesAnswerAsTheSameQueryInSQL() throws {
        let synced = try open("synced.sqlite")
        defer { try? synced.close() }
        XCTAssertNil(try fetch(synced, FetchRequest(entity: "things")).last?.error)
        let cases: [(predicate: String?, sort: String, limit: Int64, sql: String)] = [
            (nil, "title", 0, "true ORDER BY title COLLATE \"C\""),
            ("rank > 3", "rank", 0, "rank > 3 ORDER BY rank"),
            ("rank != 5", "-rank", 0, "rank IS DISTINCT FROM 5 ORDER BY rank DESC NULLS LAST"),
            ("title == 'apple'", "id", 0, "title = 'apple'"),
            ("title < 'b'", "title", 0, "title COLLATE \"C\" < 'b' ORDER BY title COLLATE \"C\""),
            ("title >= 'Ä'", "-title", 0, "title COLLATE \"C\" >= 'Ä' ORDER BY title COLLATE \"C\" DESC"),
            ("status IN {'open'}", "title", 0, "status = 'open' ORDER BY title COLLATE \"C\""),
            ("status != 'open'", "id", 0, "status IS DISTINCT FROM 'open'"),
            ("done == true AND rank >= 0", "rank", 0, "done AND rank >= 0 ORDER BY rank"),
            ("done != true", "id", 0, "NOT done"),
            ("ratio < 0.5", "ratio", 0, "ratio < 0.5 ORDER BY ratio"),
            ("price >= 10", "-price", 0, "price >= 10 ORDER BY price DESC"),
            ("title BEGINSWITH 'a'", "title", 0, "title LIKE 'a%' ORDER BY title COLLATE \"C\""),
            ("owner == '1'", "id", 0, "owner = 1"),
            ("owner IN {'1', '2'} AND small == 2", "id", 0, "owner IN (1, 2) AND small = 2"),
            ("at >= '2026-01-01T10'", "-at", 0, "at >= '2026-01-01 10:00+00' ORDER BY at DESC"),
            ("id < 'a9'", "id", 0, "id COLLATE \"C\" < 'a9'"),
            ("mood == 'ok'", "id", 0, "mood = 'ok'"),
            ("rank > 0", "rank", 5, "rank > 0 ORDER BY rank"),
            (nil, "-title", 7, "true ORDER BY title COLLATE \"C\" DESC"),
            ("small IN {0, 1}", "-small,title", 4, "small IN (0, 1) ORDER BY small DESC, title COLLATE \"C\""),
        ]
        for (predicate, sort, limit, sql) in cases {
            // The same query in SQL: ties by id, as the cache breaks them.
            var query = "SELECT id FROM \(schema).things WHERE " + sql
            query += (sql.contains("ORDER BY") ? ", " : " ORDER BY ") + "id COLLATE \"C\""
            if limit > 0 { query += " LIMIT \(limit)" }
            let expected = try admin.query(query).map { $0[0]! }
            let what = "\(predicate ?? "all") sort \(sort) limit \(limit)"
            XCTAssertFalse(expected.isEmpty && limit == 0 && predicate == nil, what)
            for (context, policy) in [(try open("\(UUID()).sqlite"), CachePolicy.serverOnly), (synced, .cacheOnly)] {
                defer { if policy == .serverOnly { try? context.close() } }
                var request = FetchRequest(entity: "things")
                request.predicate = predicate
                request.sort = sort
                request.limit = limit
                request.policy = policy
                request.resultType = .ids
                let answer = try XCTUnwrap(fetch(context, request).last, what)
                XCTAssertNil(answer.error, "\(what): \(answer.error?.message ?? "")")
                let ids = try (0..<answer.results.count).map { try answer.results.id(at: $0) }
                XCTAssertEqual(ids, expected, "\(what), \(policy)")
                request.resultType = .count
                XCTAssertEqual(try fetch(context, request).last?.results.count, expected.count, "\(what), \(policy) count")
            }
        }
    }

    /// Every filter the connection says it runs exactly selects, on the
    /// server, what `Filter.matches` selects from the whole listing.
    func testServerFiltersAreExact() throws {
        let connection = try connection()
        defer { connection.shutdown() }
        let specs = try connection.wait(connection.specs).get()
        let spec = try XCTUnwrap(specs.first { $0.name == "things" })
        func listing(_ filters: [Filter]) throws -> [RecordFields] {
            var request = PageRequest(spec: spec)
            request.filters = filters
            var records: [RecordFields] = []
            var cursor: PageCursor?
            repeat {
                request.cursor = cursor
                let page = try connection.wait { connection.page(request, $0) }.get()
                records += try page.decode().records
                cursor = page.next
            } while cursor != nil
            return records
        }
        let all = try listing([])
        XCTAssertEqual(all.count, 40)
        let texts: [JSON] = [.string("apple"), .string("b"), .string("Ä"), .string("é"), .string(""), .string("zeta"), .string("B1")]
        let integers: [JSON] = [.integer(-5), .integer(0), .integer(3), .integer(17), .integer(Int64.max)]
        var filters: [Filter] = []
        for op in FilterOperator.allCases {
            for field in ["title", "status", "id", "owner", "at", "mood", "uid"] {
                for value in texts { filters.append(Filter(field: field, op, op == .oneOf ? [value, .string("open")] : [value], type: .text)) }
            }
            for field in ["rank", "small"] {
                for value in integers { filters.append(Filter(field: field, op, op == .oneOf ? [value, .integer(1)] : [value], type: .integer)) }
            }
        }
        for op in [FilterOperator.equal, .notEqual, .oneOf] {
            filters.append(Filter(field: "done", op, [.bool(true)], type: .boolean))
        }
        filters.append(Filter(field: "xmin", .atLeast, [.integer(0)], type: .integer))
        for filter in filters {
            XCTAssertTrue(connection.supports(filter) && connection.filtersExactly(filter), "\(filter)")
            let expected = all.filter { record in filter.matches(record.first { $0.key == filter.field }?.value) }
                .map { $0[0].value }
            XCTAssertEqual(try listing([filter]).map { $0[0].value }, expected, "\(filter)")
            var request = PageRequest(spec: spec)
            request.filters = [filter]
            XCTAssertEqual(try connection.wait { connection.count(request, $0) }.get(), Int64(expected.count), "count \(filter)")
        }
        XCTAssertFalse(connection.supports(Filter(field: "ratio", .lessThan, [.real(0.5)], type: .real)), "reals: in the cache")
        XCTAssertFalse(connection.supports(Filter(field: "title", .equal, [.string("a\u{0}b")], type: .text)), "U+0000: in the cache")
        XCTAssertFalse(connection.supports(Filter(field: "rank", .equal, [.real(1)], type: .integer)), "mixed: in the cache")
    }
}
