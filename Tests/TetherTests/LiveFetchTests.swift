import XCTest
@testable import Tether

/// Live fetches, against Kinto and the memory server.
enum LiveFetchContract {
    /// Collects a live fetch's callbacks.
    final class Watcher: Sendable {
        let seen = ConditionLock<[FetchResult]>([])

        func callback(_ result: FetchResult) { seen.withLock { $0.append(result) } }

        /// Waits for the `n`th callback.
        func wait(for n: Int, seconds: Int64 = 10) -> [FetchResult] {
            seen.withLock(when: { $0.count >= n }, until: MonotonicTime.now().adding(milliseconds: seconds * 1000)) { v, _ in v }
        }
    }

    static func ids(_ result: FetchResult?) -> [String] { result?.objects.map(\.id) ?? [] }

    static func followsChangesUntilCancelled(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        var request = FetchRequest(entity: "items")
        request.predicate = "Rank < $1"
        request.arguments = [.integer(10)]
        request.sort = "Rank"
        request.policy = .serverOnly
        request.live = true
        let watcher = Watcher()
        let task = try context.makeFetch(request)
        try task.start(watcher.callback)
        let first = watcher.wait(for: 1)
        XCTAssertEqual(first.first?.phase, .live)
        XCTAssertNil(first.first?.error)
        XCTAssertEqual(ids(first.first), (0..<10).map { "i\($0)" })
        XCTAssertNil(first.first?.results.changes)

        // A whole listing writes every record again, none changed: nothing to tell.
        _ = try fetch(context, FetchRequest(entity: "items"))
        usleep(300_000)
        XCTAssertEqual(watcher.seen.withLock { $0.count }, 1, "rows written again unchanged tell nothing")

        // The next fetch syncs the changes, in one page: i3 leaves, i50 comes
        // (between i5 and i6), i7 changes in place.
        try backend.setRank("i3", 500)
        try backend.setRank("i50", 5)
        try backend.setTitle("i7", "seven")
        _ = try fetch(context, FetchRequest(entity: "items"))
        let second = watcher.wait(for: 2)
        XCTAssertEqual(second.count, 2, "one answer for the whole burst of changes")
        let answer = try XCTUnwrap(second.last)
        XCTAssertEqual(answer.phase, .live)
        XCTAssertEqual(ids(answer), ["i0", "i1", "i2", "i4", "i5", "i50", "i6", "i7", "i8", "i9"])
        let changes = try XCTUnwrap(answer.results.changes)
        XCTAssertEqual(changes.deleted, [3])
        XCTAssertEqual(changes.inserted, [5])
        XCTAssertEqual(changes.moved, [])
        XCTAssertEqual(changes.updated, [ResultChanges.Move(from: 7, to: 7)])

        // A change that does not touch the answer tells nothing.
        try backend.setTitle("i100", "far away")
        _ = try fetch(context, FetchRequest(entity: "items"))
        usleep(300_000)
        XCTAssertEqual(watcher.seen.withLock { $0.count }, 2)

        // Deleted on the server: leaves the answer.
        try backend.deleteItem("i0")
        _ = try fetch(context, FetchRequest(entity: "items"))
        let third = watcher.wait(for: 3)
        XCTAssertEqual(third.last?.results.changes?.deleted, [0])
        XCTAssertEqual(ids(third.last).first, "i1")

        try task.cancel()
        let all = watcher.wait(for: 4)
        XCTAssertEqual(all.last?.phase, .final)
        XCTAssertEqual(all.last?.error?.kind, .cancelled)
        try backend.setRank("i1", 900)
        _ = try fetch(context, FetchRequest(entity: "items"))
        usleep(300_000)
        XCTAssertEqual(watcher.seen.withLock { $0.count }, 4, "nothing after the final")
        XCTAssertTrue(context.graph.withLock { $0.rowListeners.values.allSatisfy(\.isEmpty) }, "the context let it go")
    }

    /// A live count; closing the context ends the live fetch with one final.
    static func liveCountEndsWithTheContext(_ backend: Backend) throws {
        let context = try backend.open()
        var request = FetchRequest(entity: "items")
        request.resultType = .count
        request.predicate = "Rank >= $1"
        request.arguments = [.integer(110)]
        request.policy = .cacheOnly
        request.live = true
        let watcher = Watcher()
        try context.makeFetch(request).start(watcher.callback)
        XCTAssertEqual(watcher.wait(for: 1).first?.results.count, 0, "nothing cached yet")
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(watcher.wait(for: 2).last?.results.count, 10)
        try context.close()
        let all = watcher.seen.withLock { $0 }
        XCTAssertEqual(all.count, 3)
        XCTAssertEqual(all.last?.phase, .final)
        XCTAssertEqual(all.last?.error?.kind, .cancelled)
    }

    static func diffsComposeFromRandomMoves(_ backend: Backend) throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let old = (0..<Int.random(in: 0...12, using: &generator)).map { ExactString("r\($0)") }.shuffled()
            var new = old.filter { _ in Bool.random() } + (0..<Int.random(in: 0...4)).map { ExactString("n\($0)") }
            new.shuffle()
            let changes = ResultChanges.between(old, new, changed: [])
            // Delete (descending), then insert (ascending); a move is both.
            var rows = old
            for index in (changes.deleted + changes.moved.map(\.from)).sorted(by: >) { rows.remove(at: index) }
            for (index, id) in (changes.inserted.map { ($0, new[$0]) } + changes.moved.map { ($0.to, new[$0.to]) })
                .sorted(by: { $0.0 < $1.0 }) { rows.insert(id, at: index) }
            XCTAssertEqual(rows, new, "\(old) → \(new): \(changes)")
        }
    }
}

final class KintoLiveFetchTests: KintoTestCase {
    func testFollowsChangesUntilCancelled() throws { try LiveFetchContract.followsChangesUntilCancelled(backend) }
    func testLiveCountEndsWithTheContext() throws { try LiveFetchContract.liveCountEndsWithTheContext(backend) }
}

final class MemoryLiveFetchTests: MemoryTestCase {
    func testFollowsChangesUntilCancelled() throws { try LiveFetchContract.followsChangesUntilCancelled(backend) }
    func testLiveCountEndsWithTheContext() throws { try LiveFetchContract.liveCountEndsWithTheContext(backend) }
    func testDiffsCompose() throws { try LiveFetchContract.diffsComposeFromRandomMoves(backend) }
}
