import XCTest
@testable import Tether

/// What the graph and fetch layers promise whatever the connection: run
/// against Kinto (KintoGraphTests) and the memory server (MemoryGraphTests).
enum GraphContract {
    static func fetchPagingAndUniquing(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        XCTAssertTrue(context.isOnline)
        let items = try XCTUnwrap(context.model.entity(named: "items"))
        XCTAssertEqual(items.attributes[items.attributeIndex(named: "Title")!].code, 501)
        XCTAssertEqual(items.operations, .all)

        var request = FetchRequest(entity: "items")
        request.sort = "-Rank"
        let first = try fetch(context, request)
        XCTAssertEqual(first.map(\.phase), [.cached, .final])
        XCTAssertEqual(first[0].objects.count, 0)
        XCTAssertNil(first[1].error)
        XCTAssertEqual(first[1].objects.count, itemCount, "all pages followed (pages of 50)")
        XCTAssertEqual(try first[1].objects.first?.peek("Rank"), .integer(Int64(itemCount - 1)))
        XCTAssertEqual(try first[1].objects.map { try $0.peek("Rank") }, (0..<itemCount).reversed().map { .integer(Int64($0)) },
                       "the server's order, across pages")

        let second = try fetch(context, request)
        XCTAssertEqual(second[0].objects.count, itemCount, "the cache answers first")
        XCTAssertTrue(second[0].objects[0] === first[1].objects[0], "one object per record while held")
        XCTAssertTrue(try context.object(entity: "items", id: "i119") === first[1].objects[0])

        request.limit = 7
        request.policy = .serverOnly
        let limited = try fetch(context, request)
        XCTAssertEqual(limited.count, 1)
        XCTAssertEqual(limited[0].objects.count, 7)
    }

    static func predicatesAnswerAlikeFromServerAndCache(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        try backend.setTitle("i5", "5")  // text that looks like a number stays text on the server too
        func ranks(_ predicate: String, _ arguments: [Value] = [], sort: String? = "Rank", limit: Int64 = 0,
                   offset: Int64 = 0, policy: CachePolicy = .serverOnly) throws -> [Int64] {
            var request = FetchRequest(entity: "items")
            request.predicate = predicate
            request.offset = offset
            request.arguments = arguments
            request.sort = sort
            request.limit = limit
            request.policy = policy
            let results = try fetch(context, request)
            XCTAssertNil(results.last?.error, predicate)
            return try results.last!.objects.map { object in
                guard case .integer(let rank) = try object.peek("Rank") else { throw TetherError(.type, "no rank") }
                return rank
            }
        }
        for policy in [CachePolicy.serverOnly, .cacheOnly] {  // the server's answer, then the cache's
            XCTAssertEqual(try ranks("Rank >= 10 AND Rank < 20 AND Title ENDSWITH '5'", policy: policy), [15], "\(policy)")
            XCTAssertEqual(try ranks("Title ==[c] 'ITEM 7'", policy: policy), [7], "\(policy)")
            XCTAssertEqual(try ranks("Title CONTAINS $1", [.text("11")], limit: 3, policy: policy), [11, 110, 111], "\(policy)")
            XCTAssertEqual(try ranks("Rank IN {3, 5, 200} OR Title == $1", [.text("item 8")], policy: policy), [3, 5, 8], "\(policy)")
            XCTAssertEqual(try ranks("NOT (Rank > 2)", sort: "-Rank", policy: policy), [2, 1, 0], "\(policy)")
            XCTAssertEqual(try ranks("Title == '5'", policy: policy), [5], "\(policy)")
            XCTAssertEqual(try ranks("Rank > 100 AND Rank < 104", limit: 2, policy: policy), [101, 102], "\(policy)")
            XCTAssertEqual(try ranks("Rank < 10", limit: 4, offset: 3, policy: policy), [3, 4, 5, 6], "\(policy)")
            XCTAssertEqual(try ranks("Rank < 5", offset: 3, policy: policy), [3, 4], "\(policy)")
            XCTAssertEqual(try ranks("Title ENDSWITH '7'", limit: 2, offset: 1, policy: policy), [17, 27], "\(policy)")
            XCTAssertEqual(try ranks("Rank < 5", offset: 9, policy: policy), [], "\(policy)")
        }
        var negative = FetchRequest(entity: "items")
        negative.offset = -1
        XCTAssertThrowsError(try context.makeFetch(negative)) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        var all = FetchRequest(entity: "items")
        all.policy = .cacheOnly
        XCTAssertEqual(try fetch(context, all).last?.objects.count, itemCount, "a filtered listing removes nothing from the cache")
        var bad = FetchRequest(entity: "items")
        bad.predicate = "Rank == 'x'"
        XCTAssertThrowsError(try context.makeFetch(bad)) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
    }

    static func getRefreshesAndTellsObserversOfBothForms(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i3")
        let told = ConditionLock<[String]>([])
        for key in ["Title", "TitlePeek"] {
            try object.makeObserver(key: key).activate { error in
                if error == nil { told.withLock { $0.append(key) } }
            }
        }
        try backend.setTitle("i3", "renamed")
        XCTAssertEqual(try object.peek("Title"), .text("item 3"), "peek does not touch the network")
        XCTAssertEqual(try object.get("Title"), .text("item 3"), "get answers from the cache at once")
        XCTAssertTrue(eventually { told.withLock { $0.count } >= 2 })
        XCTAssertEqual(Set(told.withLock { $0 }), ["Title", "TitlePeek"])
        XCTAssertEqual(try object.peek("Title"), .text("renamed"))
    }

    static func deletedOnServerLeavesTheCache(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i7")
        let told = ConditionLock(0)
        try object.makeObserver(key: "Title").activate { error in if error == nil { told.withLock { $0 += 1 } } }
        try backend.deleteItem("i7")
        let after = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(after.last?.objects.count, itemCount - 1)
        XCTAssertTrue(eventually { told.withLock { $0 } == 1 }, "the observer hears of the deletion")
        XCTAssertThrowsError(try object.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
    }

    /// A get of a record the server never had: its observer hears, once,
    /// that none will come (notFound), and peek says so.
    static func getOfARecordTheServerLacksTellsObservers(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        let object = try context.object(entity: "items", id: "no-such-item")
        let told = ConditionLock<[TetherError.Kind?]>([])
        try object.makeObserver(key: "Title").activate { error in told.withLock { $0.append(error?.kind) } }
        XCTAssertThrowsError(try object.get("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notCached) }
        XCTAssertTrue(eventually { told.withLock { $0 } == [.notFound] }, "\(told.withLock { $0 })")
        XCTAssertThrowsError(try object.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertThrowsError(try object.get("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        usleep(200_000)
        XCTAssertEqual(told.withLock { $0 }, [.notFound], "told once")
    }

    static func cancelDeliversOneFinalCancelled(_ backend: Backend) throws {
        let context = try backend.open(.poll)
        defer { try? context.close() }
        let task = try context.makeFetch(FetchRequest(entity: "items"))
        let phases = ConditionLock<[(FetchPhase, TetherError.Kind?)]>([])
        try task.start { result in phases.withLock { $0.append((result.phase, result.error?.kind)) } }
        try task.cancel()
        let deadline = Date().addingTimeInterval(1)
        while Date() < deadline { _ = try context.poll(timeoutMilliseconds: 50) }
        let seen = phases.withLock { $0 }
        XCTAssertEqual(seen.count, 1)
        XCTAssertEqual(seen.first?.0, .final)
        XCTAssertEqual(seen.first?.1, .cancelled)
        XCTAssertThrowsError(try task.cancel()) { XCTAssertEqual(($0 as? TetherError)?.kind, .closed) }
    }

    /// Objects, tasks and observers live as long as something holds them.
    static func lifetimesFollowWhatIsHeld(_ backend: Backend) throws {
        let baseline = (objects: Live.count(.objects), tasks: Live.count(.tasks), observers: Live.count(.observers))
        let context = try backend.open(cacheSize: 10)
        do {
            for _ in 0..<20 { _ = try fetch(context, FetchRequest(entity: "items")) }
            XCTAssertTrue(eventually { Live.count(.tasks) == baseline.tasks }, "tasks are freed after their final callback")
            XCTAssertLessThanOrEqual(Live.count(.objects) - baseline.objects, 10,
                                     "only the object cache holds objects nobody else does")
            let held = try context.object(entity: "items", id: "i5")
            for index in 0..<2_000 { _ = try? context.object(entity: "items", id: "n\(index)").peek("Title") }
            XCTAssertLessThanOrEqual(Live.count(.objects) - baseline.objects, 11)
            XCTAssertTrue(try context.object(entity: "items", id: "i5") === held, "a held object stays the one object")
            XCTAssertEqual(try held.peek("Rank"), .integer(5))

            let observer = try held.makeObserver(key: "Rank")
            try observer.activate { _ in }
            try observer.remove()
            XCTAssertThrowsError(try observer.remove()) { XCTAssertEqual(($0 as? TetherError)?.kind, .closed) }
        }
        try context.close()
        XCTAssertTrue(eventually {
            Live.count(.objects) == baseline.objects && Live.count(.tasks) == baseline.tasks
                && Live.count(.observers) == baseline.observers
        }, "after close nothing is left: \(Live.count(.objects)) objects, \(Live.count(.tasks)) tasks, \(Live.count(.observers)) observers")
    }

    /// Close with fetches on the wire ends each exactly once.
    static func closeEndsEveryRequestOnce(_ backend: Backend) throws {
        for mode in [DeliveryMode.thread, .poll] {
            let context = try backend.open(mode)
            let finals = ConditionLock<[Int: Int]>([:])
            for index in 0..<30 {
                var request = FetchRequest(entity: "items")
                request.policy = .serverOnly
                try context.makeFetch(request).start { result in
                    if result.phase == .final { finals.withLock { $0[index, default: 0] += 1 } }
                }
            }
            try context.close()
            let counts = finals.withLock { $0 }
            XCTAssertEqual(counts.count, 30, "\(mode): every fetch got its final before close returned")
            XCTAssertTrue(counts.values.allSatisfy { $0 == 1 }, "\(mode): exactly one final each")
        }
    }

    /// Reading an object costs one prepared statement, prepared once per store.
    static func firstPeekUsesACachedStatement(_ backend: Backend) throws {
        // Filled by another context, so no object of this one holds values
        // (a fetch's results can outlive its final callback for a moment).
        let filler = try backend.open()
        _ = try fetch(filler, FetchRequest(entity: "items"))
        try filler.close()
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        _ = try context.object(entity: "items", id: "i0").peek("Title")
        let items = try XCTUnwrap(context.model.entity(named: "items"))
        let statement = try XCTUnwrap(context.store.loadStatement(items), "the first peek prepared it")
        for rank in 1..<itemCount {
            XCTAssertEqual(try context.object(entity: "items", id: "i\(rank)").peek("Rank"), .integer(Int64(rank)))
        }
        // The load statement itself: the store's whole prepare count also
        // moved once with other work of the context under ThreadSanitizer.
        XCTAssertTrue(context.store.loadStatement(items) === statement, "the load statement was not prepared again")
    }
}

/// Observers judge a change against what their key read when they began,
/// from the store if the object was not in memory yet (issue 39).
extension GraphContract {
    /// A record cached, then synced as deleted; the context closed; on the
    /// server made again and deleted again; a new context observes it, no
    /// peek first, and syncs: it read "was deleted" before and after, so
    /// the observer hears nothing (not NOT_FOUND, kept for none ever cached).
    static func observerOfARecordDeletedBeforeHearsNothing(_ backend: Backend) throws {
        let first = try backend.open()
        _ = try fetch(first, FetchRequest(entity: "items"))
        try backend.deleteItem("i9")
        _ = try fetch(first, FetchRequest(entity: "items"))
        try first.close()
        try backend.putItem("i9", #"{"Title": "again", "Rank": 9}"#)
        try backend.deleteItem("i9")
        let context = try backend.open()
        defer { try? context.close() }
        let object = try context.object(entity: "items", id: "i9")
        let told = ConditionLock<[TetherError.Kind?]>([])
        try object.makeObserver(key: "Title").activate { error in
            if error?.kind != .cancelled { told.withLock { $0.append(error?.kind) } }
        }
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        usleep(200_000)
        XCTAssertEqual(told.withLock { $0 }, [], "nothing changed for the observer")
        XCTAssertThrowsError(try object.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.message, "items/i9 was deleted") }
    }

    /// The rest of that class: observed without a peek, a cached record
    /// deleted (by this context's sync, or a sibling's) is a change (OK,
    /// once), and one a listing sends unchanged is none.
    static func observerWithoutAPeekJudgesByTheStore(_ backend: Backend) throws {
        let filler = try backend.open()
        _ = try fetch(filler, FetchRequest(entity: "items"))
        try filler.close()
        let context = try backend.open()
        defer { try? context.close() }
        let sibling = try context.openSibling(name: "b")
        defer { try? sibling.close() }
        var told: [String: ConditionLock<[TetherError.Kind?]>] = [:]
        for id in ["i3", "i7", "i8"] {
            let calls = ConditionLock<[TetherError.Kind?]>([])
            told[id] = calls
            try context.object(entity: "items", id: id).makeObserver(key: "Title").activate { error in
                if error?.kind != .cancelled { calls.withLock { $0.append(error?.kind) } }
            }
        }
        func calls(_ id: String) -> [TetherError.Kind?] { told[id]!.withLock { $0 } }
        // Server-only fetches: a cache answer would load the objects first.
        var sync = FetchRequest(entity: "items")
        sync.policy = .serverOnly
        XCTAssertEqual(try sibling.object(entity: "items", id: "i3").get("Title"), .text("item 3"))
        try backend.deleteItem("i8")
        XCTAssertNil(try fetch(sibling, sync).last?.error)
        try backend.deleteItem("i7")
        XCTAssertNil(try fetch(context, sync).last?.error)
        XCTAssertTrue(eventually { calls("i7").count == 1 && calls("i8").count == 1 })
        usleep(200_000)
        XCTAssertEqual(calls("i3"), [], "a record a sibling's get found unchanged is no change")
        XCTAssertEqual(calls("i7"), [nil], "a cached record deleted by this context's sync: a change")
        XCTAssertEqual(calls("i8"), [nil], "a cached record deleted by a sibling's sync: a change")
    }
}

final class KintoGraphTests: KintoTestCase {
    func testFetchPagingAndUniquing() throws { try GraphContract.fetchPagingAndUniquing(backend) }
    func testPredicates() throws { try GraphContract.predicatesAnswerAlikeFromServerAndCache(backend) }
    func testGetRefreshesAndTellsObservers() throws { try GraphContract.getRefreshesAndTellsObserversOfBothForms(backend) }
    func testDeletedOnServerLeavesTheCache() throws { try GraphContract.deletedOnServerLeavesTheCache(backend) }
    func testGetOfARecordTheServerLacks() throws { try GraphContract.getOfARecordTheServerLacksTellsObservers(backend) }
    func testCancelDeliversOneFinalCancelled() throws { try GraphContract.cancelDeliversOneFinalCancelled(backend) }
    func testLifetimesFollowWhatIsHeld() throws { try GraphContract.lifetimesFollowWhatIsHeld(backend) }
    func testCloseEndsEveryRequestOnce() throws { try GraphContract.closeEndsEveryRequestOnce(backend) }
    func testFirstPeekUsesACachedStatement() throws { try GraphContract.firstPeekUsesACachedStatement(backend) }
    func testObserverOfARecordDeletedBeforeHearsNothing() throws { try GraphContract.observerOfARecordDeletedBeforeHearsNothing(backend) }
    func testObserverWithoutAPeekJudgesByTheStore() throws { try GraphContract.observerWithoutAPeekJudgesByTheStore(backend) }
}

extension GraphContract {
    /// A refresh that fails is not lost silently: its observers hear why.
    static func failedRefreshTellsObservers(_ backend: MemoryBackend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i4")
        let told = ConditionLock<[TetherError.Kind?]>([])
        try object.makeObserver(key: "Title").activate { error in told.withLock { $0.append(error?.kind) } }
        backend.server.isReachable = false
        XCTAssertEqual(try object.get("Title"), .text("item 4"), "the cached value, at once")
        XCTAssertTrue(eventually { told.withLock { $0 } == [.network] }, "told: \(told.withLock { $0 })")
        XCTAssertEqual(try object.peek("Title"), .text("item 4"), "the cache is as it was")
        backend.server.isReachable = true
        try backend.setTitle("i4", "back")
        _ = try object.get("Title")
        XCTAssertTrue(eventually { told.withLock { $0 }.count == 2 })
        XCTAssertEqual(told.withLock { $0 }.last, .some(nil), "the next refresh lands")
    }
}

final class MemoryGraphTests: MemoryTestCase {
    func testFetchPagingAndUniquing() throws { try GraphContract.fetchPagingAndUniquing(backend) }
    func testPredicates() throws { try GraphContract.predicatesAnswerAlikeFromServerAndCache(backend) }
    func testGetRefreshesAndTellsObservers() throws { try GraphContract.getRefreshesAndTellsObserversOfBothForms(backend) }
    func testDeletedOnServerLeavesTheCache() throws { try GraphContract.deletedOnServerLeavesTheCache(backend) }
    func testGetOfARecordTheServerLacks() throws { try GraphContract.getOfARecordTheServerLacksTellsObservers(backend) }
    func testCancelDeliversOneFinalCancelled() throws { try GraphContract.cancelDeliversOneFinalCancelled(backend) }
    func testLifetimesFollowWhatIsHeld() throws { try GraphContract.lifetimesFollowWhatIsHeld(backend) }
    func testCloseEndsEveryRequestOnce() throws { try GraphContract.closeEndsEveryRequestOnce(backend) }
    func testFirstPeekUsesACachedStatement() throws { try GraphContract.firstPeekUsesACachedStatement(backend) }
    func testObserverOfARecordDeletedBeforeHearsNothing() throws { try GraphContract.observerOfARecordDeletedBeforeHearsNothing(backend) }
    func testObserverWithoutAPeekJudgesByTheStore() throws { try GraphContract.observerWithoutAPeekJudgesByTheStore(backend) }

    func testFailedRefreshTellsObservers() throws { try GraphContract.failedRefreshTellsObservers(backend) }

    func testOfflineOpenFromTheStore() throws {
        try backend.open().close()
        backend.server.isReachable = false
        let context = try backend.open()
        defer { try? context.close() }
        XCTAssertFalse(context.isOnline, "an unreachable server opens from the store")
        XCTAssertNotNil(context.model.entity(named: "items"))
    }

    /// isOnline follows the server's answers, for siblings alike (one
    /// connection); its observers hear each change once, then a cancelled final.
    func testOnlineFollowsTheServer() throws {
        let context = try backend.open()
        defer { try? context.close() }
        let sibling = try context.openSibling(name: "b")
        defer { try? sibling.close() }
        let told = ConditionLock<[String]>([])
        try OnlineObserver(context: context).activate { online, final in
            told.withLock { $0.append(final == nil ? "\(online)" : "final") }
        }
        _ = try fetch(context, FetchRequest(entity: "items"))
        backend.server.isReachable = false
        XCTAssertNotNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        XCTAssertFalse(context.isOnline)
        XCTAssertFalse(sibling.isOnline, "one server, one state")
        backend.server.isReachable = true
        XCTAssertNil(try fetch(sibling, FetchRequest(entity: "items")).last?.error)
        XCTAssertTrue(context.isOnline, "a sibling's answer is the server's")
        // Changes are told on the delivery thread; a close drops what is not told yet.
        XCTAssertTrue(eventually { told.withLock { $0 } == ["false", "true"] }, "\(told.withLock { $0 })")
        try context.close()
        XCTAssertEqual(told.withLock { $0 }, ["false", "true", "final"])
    }
}
