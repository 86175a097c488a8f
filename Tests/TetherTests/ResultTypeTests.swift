import XCTest
@testable import Tether

/// Result types, batches and progress, against Kinto and the memory server.
enum ResultTypeContract {
    static func request(_ type: ResultType, _ policy: CachePolicy, where predicate: String? = nil,
                        _ arguments: [Value] = []) -> FetchRequest {
        var request = FetchRequest(entity: "items")
        request.resultType = type
        request.policy = policy
        request.predicate = predicate
        request.arguments = arguments
        request.sort = "Rank"
        return request
    }

    static func counted(_ results: [FetchResult]) -> Int? {
        guard let last = results.last, last.error == nil, last.results.type == .count else { return nil }
        return last.results.count
    }

    /// A count the server can filter is asked of it without listing a
    /// record; one it cannot is listed and counted here; both exact.
    static func countsAreExactAndCheap(_ backend: Backend) throws {
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        // Text equality: Kinto's is exact (its integer comparisons are not: 5.0 is 5 there).
        let firstThirty = "Title IN {" + (0..<30).map { "'item \($0)'" }.joined(separator: ", ") + "}"
        XCTAssertEqual(counted(try fetch(context, request(.count, .serverOnly, where: firstThirty))), 30)
        XCTAssertTrue(recorder.all.isEmpty, "the server counted: nothing was listed")
        var window = request(.count, .serverOnly, where: firstThirty)
        window.offset = 25
        XCTAssertEqual(counted(try fetch(context, window)), 5)
        window.offset = 0
        window.limit = 10
        XCTAssertEqual(counted(try fetch(context, window)), 10)
        XCTAssertEqual(counted(try fetch(context, request(.count, .serverOnly))), itemCount)
        XCTAssertEqual(try context.store.count(try XCTUnwrap(context.model.entity(named: "items")), where: nil), 0,
                       "counting stored nothing")

        // "1" in the title: ranks 1, 10-19, 21, 31, ... 91, 100-119.
        let withOne = (0..<itemCount).filter { String($0).contains("1") }.count
        let contains = request(.count, .serverOnly, where: "Title CONTAINS $1", [.text("1")])
        XCTAssertEqual(counted(try fetch(context, contains)), withOne)
        XCTAssertFalse(recorder.all.isEmpty, "what the server cannot filter is listed")

        _ = try fetch(context, FetchRequest(entity: "items"))
        let cached = try fetch(context, request(.count, .cacheThenServer, where: "Rank >= $1", [.integer(100)]))
        XCTAssertEqual(cached.map { $0.results.count }, [20, 20], "the cache's count, then the synced one")
        try backend.deleteItem("i110")
        XCTAssertEqual(counted(try fetch(context, request(.count, .serverOnly, where: "Rank >= $1", [.integer(100)]))), 19)
    }

    static func idsAndValuesMatchTheObjects(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        for policy in [CachePolicy.serverOnly, .cacheOnly] {
            let objects = try fetch(context, request(.objects, policy, where: "Rank < $1", [.integer(12)]))
            let ids = try XCTUnwrap(fetch(context, request(.ids, policy, where: "Rank < $1", [.integer(12)])).last?.results)
            XCTAssertEqual(ids.type, .ids)
            XCTAssertEqual(try (0..<ids.count).map { try ids.id(at: $0) }, objects.last?.objects.map(\.id), "\(policy)")
            XCTAssertTrue(try ids.object(at: 3) === objects.last?.objects[3], "one object per record")

            var valuesRequest = request(.values, policy, where: "Rank < $1", [.integer(12)])
            valuesRequest.properties = ["Rank", "Title"]
            let values = try XCTUnwrap(fetch(context, valuesRequest).last?.results)
            XCTAssertEqual(values.count, 12)
            XCTAssertEqual(try values.value(at: 4, column: 0), .integer(4))
            XCTAssertEqual(try values.value(at: 4, column: 1), .text("item 4"))
            XCTAssertEqual(values.column(named: "Title"), 1)
            XCTAssertNil(values.column(named: "id"))
            XCTAssertThrowsError(try ids.value(at: 0, column: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        }
        var bad = request(.values, .cacheOnly)
        bad.properties = ["Nope"]
        XCTAssertThrowsError(try context.makeFetch(bad)) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        var misplaced = request(.ids, .cacheOnly)
        misplaced.properties = ["Rank"]
        XCTAssertThrowsError(try context.makeFetch(misplaced)) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
    }

    /// Iterating a batched answer holds one batch of objects at a time.
    static func batchesKeepMemoryFlat(_ backend: Backend) throws {
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertTrue(eventually { Live.count(.objects) < 10 }, "the fetch's objects are gone")
        let baseline = Live.count(.objects)
        var batched = request(.objects, .cacheOnly)
        batched.batchSize = 10
        let results = try XCTUnwrap(fetch(context, batched).last?.results)
        XCTAssertEqual(results.count, itemCount)
        var peak = 0
        for index in 0..<results.count {
            XCTAssertEqual(try results.object(at: index).peek("Rank"), .integer(Int64(index)))
            peak = max(peak, Live.count(.objects) - baseline)
        }
        XCTAssertLessThanOrEqual(peak, 12, "about one batch of objects alive at a time")
        XCTAssertGreaterThanOrEqual(peak, 10, "the batch is held while read")

        // Values a batch at a time: the same as unbatched; a row deleted since reads as not found.
        var values = request(.values, .cacheOnly)
        values.properties = ["Title", "Rank"]
        let whole = try XCTUnwrap(fetch(context, values).last?.results)
        values.batchSize = 7
        let batchedValues = try XCTUnwrap(fetch(context, values).last?.results)
        XCTAssertEqual(batchedValues.count, whole.count)
        for index in 0..<whole.count {
            XCTAssertEqual(try batchedValues.id(at: index), try whole.id(at: index))
            for column in 0..<2 { XCTAssertEqual(try batchedValues.value(at: index, column: column), try whole.value(at: index, column: column)) }
        }
        try backend.deleteItem("i50")
        _ = try fetch(context, FetchRequest(entity: "items"))
        let fresh = try XCTUnwrap(fetch(context, values).last?.results)
        XCTAssertEqual(fresh.count, itemCount - 1)
        // The answer holds rowids: a row gone has no id left either (see tether.h, batch_size).
        XCTAssertThrowsError(try batchedValues.id(at: 50)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertThrowsError(try batchedValues.value(at: 50, column: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertEqual(try batchedValues.value(at: 51, column: 1), Value.integer(51))
    }

    /// A batched answer reads each row as an object reads it, whatever the
    /// batch: rows in a descending order (rowids not ascending), rows with
    /// gaps between them (rows of the table in the batch's range but not in
    /// the answer), a field of another type than the spec's (kept as JSON),
    /// and unsaved changes made after the fetch.
    static func batchesReadRowsAsObjectsDo(_ backend: Backend) throws {
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        // Kinto's schema refuses a text Rank; the memory server takes it.
        let misfit = (try? backend.putItem("x3", #"{"Title": "text rank", "Rank": "seven"}"#)) != nil
        _ = try fetch(context, FetchRequest(entity: "items"))
        func ranks(_ keep: (Int) -> Bool) -> String {
            "Rank IN {" + (0..<itemCount).filter(keep).map(String.init).joined(separator: ", ") + "}"
        }
        let orders: [(predicate: String?, arguments: [Value], descending: Bool)] = [
            (nil, [], true), (ranks { $0 % 3 != 1 }, [], false), (ranks { $0 % 5 == 0 }, [], true),
            ("Title CONTAINS $1", [.text("1")], false),
        ]
        for order in orders {
            for batchSize in [1, 3, 7, 64] {
                var values = request(.values, .cacheOnly, where: order.predicate, order.arguments)
                values.sort = order.descending ? "-Rank" : "Rank"
                values.properties = ["Title", "Rank"]
                let unbatched = try XCTUnwrap(fetch(context, values).last?.results)
                values.batchSize = batchSize
                let batched = try XCTUnwrap(fetch(context, values).last?.results)
                var objects = values
                objects.resultType = .objects
                objects.properties = []
                let batchedObjects = try XCTUnwrap(fetch(context, objects).last?.results)
                XCTAssertGreaterThan(unbatched.count, 10)
                XCTAssertEqual(batched.count, unbatched.count)
                XCTAssertEqual(batchedObjects.count, unbatched.count)
                for index in 0..<unbatched.count {
                    let id = try unbatched.id(at: index)
                    let object = try context.object(entity: "items", id: id)
                    let why = "\(order) batch \(batchSize) row \(index) (\(id))"
                    XCTAssertEqual(try batched.id(at: index), id, why)
                    XCTAssertEqual(try batchedObjects.object(at: index).id, id, why)
                    for (column, key) in ["Title", "Rank"].enumerated() {
                        XCTAssertEqual(try batched.value(at: index, column: column), try object.peek(key), why)
                        XCTAssertEqual(try unbatched.value(at: index, column: column), try object.peek(key), why)
                    }
                }
            }
        }
        if misfit {
            XCTAssertEqual(try context.object(entity: "items", id: "x3").peek("Rank"), .json(#""seven""#))
        }

        // Unsaved changes made after a batched fetch, before their batch is
        // read (tether.h: values are read with their batch): as the host sees them.
        var values = request(.values, .cacheOnly)
        values.properties = ["Title"]
        let ids = try XCTUnwrap(fetch(context, values).last?.results)
        let edited = try ids.id(at: 5), deleted = try ids.id(at: 6)
        values.batchSize = 4
        let batched = try XCTUnwrap(fetch(context, values).last?.results)
        try context.object(entity: "items", id: edited).set("Title", .text("edited here"))
        try context.object(entity: "items", id: deleted).delete()
        XCTAssertEqual(try batched.value(at: 5, column: 0), .text("edited here"))
        XCTAssertThrowsError(try batched.value(at: 6, column: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertEqual(try batched.value(at: 7, column: 0), try context.object(entity: "items", id: batched.id(at: 7)).peek("Title"))
        try context.rollback()
    }

    /// A batched answer holds rowids: a record stored after one was deleted
    /// must not take the deleted one's row. SQLite alone gives a deleted last
    /// row's rowid to the next row stored, and the answer then read the new
    /// record at the deleted one's index.
    static func rowidsAreNeverGivenTwice(_ backend: Backend) throws {
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let entity = try XCTUnwrap(context.model.entity(named: "items"))
        let store = context.store(for: entity)
        let inStoreOrder = try store.rowidList(entity, where: nil, sort: nil)
        let lastRowid = inStoreOrder.slice(inStoreOrder.count - 1..<inStoreOrder.count)
        let last = try XCTUnwrap(try store.ids(entity, rowids: lastRowid).first ?? nil)
        var values = request(.values, .cacheOnly)
        values.properties = ["Title"]
        let unbatched = try XCTUnwrap(fetch(context, values).last?.results)
        let index = try XCTUnwrap((0..<unbatched.count).first { try unbatched.id(at: $0) == last })
        values.batchSize = 5
        let batched = try XCTUnwrap(fetch(context, values).last?.results)
        var objects = values
        objects.resultType = .objects
        objects.properties = []
        let batchedObjects = try XCTUnwrap(fetch(context, objects).last?.results)

        try backend.deleteItem(last)
        _ = try fetch(context, FetchRequest(entity: "items"))
        try backend.putItem("new-after-delete", #"{"Title": "new", "Rank": 7}"#)
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertNotNil(try context.object(entity: "items", id: "new-after-delete").peek("Title"))
        for results in [batched, batchedObjects] {
            XCTAssertThrowsError(try results.id(at: index), "\(last) was deleted") {
                XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
            }
        }
        XCTAssertThrowsError(try batched.value(at: index, column: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertThrowsError(try batchedObjects.object(at: index)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }

        // Reopened, the store still gives no rowid twice.
        try context.close()
        let reopened = try backend.open(cacheSize: 0)
        defer { try? reopened.close() }
        let deletedRowid = lastRowid[0]
        try backend.deleteItem("new-after-delete")
        _ = try fetch(reopened, FetchRequest(entity: "items"))
        try backend.putItem("newer", #"{"Title": "newer", "Rank": 8}"#)
        _ = try fetch(reopened, FetchRequest(entity: "items"))
        let reopenedEntity = try XCTUnwrap(reopened.model.entity(named: "items"))
        let reopenedStore = reopened.store(for: reopenedEntity)
        let rowids = try reopenedStore.rowidList(reopenedEntity, where: nil, sort: nil)
        let all = rowids.slice(0..<rowids.count)
        let newer = try XCTUnwrap(zip(all, try reopenedStore.ids(reopenedEntity, rowids: all)).first { $0.1 == "newer" }?.0)
        XCTAssertGreaterThan(newer, deletedRowid + 1, "past the rowids of both deleted records")
    }

    /// A batched answer from the cache while the store changes, as tether.h
    /// says (batch_size): count and order stay the fetch's, a record changed
    /// since reads as changed, one deleted since is `.notFound` at its row,
    /// one stored since is not in it; and it holds rowids, not ids.
    static func batchedAnswerSeesTheStoreAsDocumented(_ backend: Backend) throws {
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertTrue(eventually { Live.count(.objects) < 10 }, "the fetch's objects are gone")
        var batched = request(.objects, .cacheOnly)
        batched.batchSize = 10
        let objects = try XCTUnwrap(fetch(context, batched).last?.results)
        var values = request(.values, .cacheOnly)
        values.properties = ["Title"]
        values.batchSize = 10
        let titles = try XCTUnwrap(fetch(context, values).last?.results)
        XCTAssertEqual(try objects.object(at: 0).peek("Title"), .text("item 0"))
        XCTAssertEqual(try titles.value(at: 0, column: 0), .text("item 0"))
        // A predicate with the library's SQL functions, on the connection the rowids are listed on.
        var matching = request(.objects, .cacheOnly, where: "Title BEGINSWITH[c] $1", [.text("ITEM 1")])
        matching.batchSize = 4
        let found = try fetch(context, matching)
        XCTAssertNil(found.last?.error)
        XCTAssertEqual(found.last?.results.count, 31, "item 1, 10-19, 100-119")
        XCTAssertEqual(try found.last?.results.id(at: 0), "i1")

        try backend.putItem("i25", #"{"Title": "changed", "Rank": 25}"#)
        try backend.deleteItem("i35")
        try backend.putItem("i999", #"{"Title": "new", "Rank": 1}"#)
        _ = try fetch(context, FetchRequest(entity: "items"))
        _ = eventually { Live.count(.objects) < 20 }  // the sync's objects gone: rows are read from the store

        for results in [objects, titles] {
            XCTAssertEqual(results.count, itemCount, "the count is the fetch's")
            XCTAssertEqual(try results.id(at: 2), "i2", "the order is the fetch's, the new record (rank 1) not in it")
            XCTAssertThrowsError(try results.id(at: 35)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
            XCTAssertEqual(try results.id(at: 36), "i36")
            XCTAssertEqual(try results.id(at: itemCount - 1), "i\(itemCount - 1)")
        }
        XCTAssertEqual(try objects.object(at: 25).peek("Title"), .text("changed"))
        XCTAssertEqual(try titles.value(at: 25, column: 0), .text("changed"))
        XCTAssertThrowsError(try objects.object(at: 35)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertThrowsError(try titles.value(at: 35, column: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertEqual(try objects.object(at: 2).peek("Title"), .text("item 2"))
        XCTAssertEqual(objects.allIDs.count, itemCount - 1, "a live answer's ids: the rows still there")
    }

    /// Servers order nulls, missing fields and values of another type their
    /// own way; the answer is in the cache's order all the same.
    static func serverAndCacheAgreeOnOrder(_ backend: Backend) throws {
        // Kinto's schema refuses a null or text Rank; the memory server takes them.
        let nulls = [("x1", #"{"Title": "null rank", "Rank": null}"#), ("x2", #"{"Title": "no rank"}"#),
                     ("x3", #"{"Title": "text rank", "Rank": "seven"}"#)]
            .filter { (try? backend.putItem($0.0, $0.1)) != nil }.map(\.0)
        XCTAssertTrue(nulls.contains("x2"))
        try backend.putItem("x4", #"{"Title": "Zed", "Rank": 7}"#)
        try backend.putItem("x5", #"{"Title": "élan", "Rank": 7}"#)
        let context = try backend.open()
        defer { try? context.close() }
        for sort in ["Rank", "-Rank", "Title", "-Title,Rank", "Rank,-Title"] {
            var request = FetchRequest(entity: "items")
            request.sort = sort
            request.predicate = "Rank == nil OR Rank == $1 OR Title BEGINSWITH $2"
            request.arguments = [.integer(7), .text("item 1")]
            request.policy = .serverOnly
            let server = try fetch(context, request).last?.objects.map(\.id) ?? []
            request.policy = .cacheOnly
            let cache = try fetch(context, request).last?.objects.map(\.id) ?? []
            XCTAssertEqual(server.count, nulls.count + 2 + 1 + 31, sort)  // nulls, x4 and x5, i7, "item 1…"
            XCTAssertEqual(server, cache, "sorted by \(sort)")
        }
        var request = FetchRequest(entity: "items")
        request.sort = "Rank"
        request.predicate = "Rank == nil"
        XCTAssertEqual(try fetch(context, request).last?.objects.map(\.id), nulls, "null first, then by id")
    }

    /// Progress comes as pages arrive, before the final; cancel from inside works.
    static func progressIsToldAndCanCancel(_ backend: Backend) throws {
        let context = try backend.open()
        let told = ConditionLock<[FetchProgress]>([])
        let finalSeen = ConditionLock(false)
        let lateProgress = ConditionLock(false)
        let task = try context.makeFetch(request(.objects, .serverOnly))
        try task.start(progress: { progress in
            if finalSeen.withLock({ $0 }) { lateProgress.withLock { $0 = true } }
            told.withLock { $0.append(progress) }
        }) { result in if result.phase == .final { finalSeen.withLock { $0 = true } } }
        XCTAssertTrue(finalSeen.withLock(when: { $0 }, until: MonotonicTime.now().adding(milliseconds: 15_000)) { v, _ in v })
        usleep(200_000)
        let progress = told.withLock { $0 }
        XCTAssertFalse(progress.isEmpty, "progress was told")
        XCTAssertEqual(progress.map(\.received), progress.map(\.received).sorted())
        XCTAssertTrue(progress.allSatisfy { $0.received > 0 && $0.received <= Int64(itemCount) })
        XCTAssertFalse(lateProgress.withLock { $0 }, "no progress after the final")
        XCTAssertEqual(progress.last?.received, Int64(itemCount), "the last page is always told")
        XCTAssertTrue(progress.allSatisfy { $0.total == nil || $0.total == Int64(itemCount) }, "\(progress)")
        XCTAssertNotNil(progress.last?.total, "the total came (from the pages, or a count asked alongside)")
        try context.close()  // a store is one context's (and its siblings') at a time

        // Pages slowed down, so the fetch is still running when progress is told.
        let slow = try backend.open(wrapping: { connection in
            ForwardingConnection(connection) { _, page in
                usleep(150_000)
                return page
            }
        })
        defer { try? slow.close() }
        // Unsynced, so the fetch lists every page (not one page of changes).
        try slow.store.clearSyncVersion(try XCTUnwrap(slow.model.entity(named: "items")))
        let finals = ConditionLock<[TetherError.Kind?]>([])
        let cancelling = try slow.makeFetch(request(.objects, .serverOnly))
        try cancelling.start(progress: { _ in try? cancelling.cancel() }) { result in
            if result.phase == .final { finals.withLock { $0.append(result.error?.kind) } }
        }
        let seen = finals.withLock(when: { !$0.isEmpty }, until: MonotonicTime.now().adding(milliseconds: 15_000)) { v, _ in v }
        usleep(200_000)
        XCTAssertEqual(seen, [.cancelled])
        XCTAssertEqual(finals.withLock { $0 }.count, 1, "exactly one final")
    }
}

final class KintoResultTypeTests: KintoTestCase {
    func testCountsAreExactAndCheap() throws { try ResultTypeContract.countsAreExactAndCheap(backend) }
    func testIdsAndValuesMatchTheObjects() throws { try ResultTypeContract.idsAndValuesMatchTheObjects(backend) }
    func testBatchesKeepMemoryFlat() throws { try ResultTypeContract.batchesKeepMemoryFlat(backend) }
    func testBatchesReadRowsAsObjectsDo() throws { try ResultTypeContract.batchesReadRowsAsObjectsDo(backend) }
    func testRowidsAreNeverGivenTwice() throws { try ResultTypeContract.rowidsAreNeverGivenTwice(backend) }
    func testBatchedAnswerSeesTheStoreAsDocumented() throws {
        try ResultTypeContract.batchedAnswerSeesTheStoreAsDocumented(backend)
    }
    func testProgressIsToldAndCanCancel() throws { try ResultTypeContract.progressIsToldAndCanCancel(backend) }
    func testServerAndCacheAgreeOnOrder() throws { try ResultTypeContract.serverAndCacheAgreeOnOrder(backend) }
}

final class MemoryResultTypeTests: MemoryTestCase {
    func testCountsAreExactAndCheap() throws { try ResultTypeContract.countsAreExactAndCheap(backend) }
    func testIdsAndValuesMatchTheObjects() throws { try ResultTypeContract.idsAndValuesMatchTheObjects(backend) }
    func testBatchesKeepMemoryFlat() throws { try ResultTypeContract.batchesKeepMemoryFlat(backend) }
    func testBatchesReadRowsAsObjectsDo() throws { try ResultTypeContract.batchesReadRowsAsObjectsDo(backend) }
    func testRowidsAreNeverGivenTwice() throws { try ResultTypeContract.rowidsAreNeverGivenTwice(backend) }
    func testBatchedAnswerSeesTheStoreAsDocumented() throws {
        try ResultTypeContract.batchedAnswerSeesTheStoreAsDocumented(backend)
    }
    func testProgressIsToldAndCanCancel() throws { try ResultTypeContract.progressIsToldAndCanCancel(backend) }
    func testServerAndCacheAgreeOnOrder() throws { try ResultTypeContract.serverAndCacheAgreeOnOrder(backend) }
}
