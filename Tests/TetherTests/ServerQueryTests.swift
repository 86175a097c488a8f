import XCTest
@testable import Tether

/// Counts the listing pages asked for.
final class PageCountingConnection: WrappingConnection {
    let inner: any Connection
    let pages = Lock(0)
    init(_ inner: any Connection) { self.inner = inner }

    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        pages.withLock { $0 += 1 }
        return inner.page(request, done)
    }
}

/// A server query's `_limit` is a limit, as a host means it, not Kinto's
/// page size (issue 39): the answer is the server's first that many
/// records, below Kinto's page size of 50 in the test server and above it.
final class KintoServerQueryTests: KintoTestCase {
    func testALimitInAServerQueryIsALimit() throws {
        let counting = Lock<PageCountingConnection?>(nil)
        let context = try backend.open(wrapping: { inner in
            let wrapper = PageCountingConnection(inner)
            counting.withLock { $0 = wrapper }
            return wrapper
        })
        defer { try? context.close() }
        let pages = try XCTUnwrap(counting.withLock { $0 })
        func ranks(_ query: String, limit: Int64 = 0, offset: Int64 = 0) throws -> [Int64] {
            var request = FetchRequest(entity: "items")
            request.serverQuery = query
            request.limit = limit
            request.offset = offset
            request.policy = .serverOnly
            let results = try fetch(context, request)
            XCTAssertNil(results.last?.error, query)
            return try results.last!.objects.map { object in
                guard case .integer(let rank) = try object.peek("Rank") else { throw TetherError(.type, "no rank") }
                return rank
            }
        }
        pages.pages.withLock { $0 = 0 }
        XCTAssertEqual(try ranks("_limit=1&_sort=Rank"), [0], "one record asked, one given")
        XCTAssertEqual(pages.pages.withLock { $0 }, 1, "no page followed past the limit")
        XCTAssertEqual(try ranks("_sort=-Rank&_limit=3"), [119, 118, 117])
        pages.pages.withLock { $0 = 0 }
        XCTAssertEqual(try ranks("_limit=70&_sort=Rank"), Array(0..<70), "past Kinto's page size: not cut at it, nor past the limit")
        XCTAssertEqual(pages.pages.withLock { $0 }, 2, "the pages holding the first 70, no more")
        XCTAssertEqual(try ranks("%5Flimit=2&_sort=Rank"), [0, 1], "percent-encoded, as Kinto reads it")
        XCTAssertEqual(try ranks("_limit=70&_sort=Rank", limit: 10, offset: 65), Array(65..<70),
                       "offset and limit apply to the server's answer")
        XCTAssertEqual(try ranks("_limit=5&_sort=Rank", limit: 2), [0, 1])
        XCTAssertEqual(try ranks("gt_Rank=100&_limit=500&_sort=Rank"), Array(101..<120), "fewer records than the limit: all")
        XCTAssertEqual(try ranks("_limit=0&_sort=Rank").count, itemCount, "Kinto's 0: no limit")

        var count = FetchRequest(entity: "items")
        count.serverQuery = "_limit=7"
        count.resultType = .count
        count.policy = .serverOnly
        XCTAssertEqual(try fetch(context, count).last?.results.count, 7, "a count of the answer, as its records")
    }
}
