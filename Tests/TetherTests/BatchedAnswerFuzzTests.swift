import XCTest
@testable import Tether

/// A seeded walk over batched answers from the cache (tether.h,
/// batch_size), against what the documented semantics say each row reads.
/// Awkward on purpose: ids in no order related to their rowids, predicates
/// that leave rows between a batch's rowids (a few, or most), sorts either way, batch sizes
/// from 1 up, fields of another type than the spec's, and the store changed
/// after the fetch (records changed, deleted, deleted and stored again,
/// stored new). Each row, read in a random order of batches, must be the
/// fetch's id; `.notFound` if its record left the store since (even if
/// stored again: it has a new rowid); else the values its object peeks now.
final class BatchedAnswerFuzzTests: XCTestCase {
    func testBatchedAnswersReadRowsAsDocumented() throws {
        // BATCH_FUZZ_SEEDS=N walks more (a failing seed replays).
        let seeds = ProcessInfo.processInfo.environment["BATCH_FUZZ_SEEDS"].flatMap { UInt64($0) } ?? 8
        for seed in UInt64(1)...max(1, seeds) { try walk(seed: seed) }
    }

    private func walk(seed: UInt64) throws {
        let directory = try makeTemporaryDirectory("batchfuzz")
        defer { removeDirectory(directory) }
        let backend = MemoryBackend(directory: directory)
        var random = LiveConvergence.Seeded(state: seed)
        let context = try backend.open(cacheSize: 0)
        defer { try? context.close() }
        // Ids whose order has nothing to do with the order they are stored in.
        let pool = (0..<720).map { _ in "k" + String(UInt32.random(in: 0...UInt32.max, using: &random), radix: 36) }
        func put(_ id: String) throws {
            let rank = Bool.random(using: &random) && random.next() % 9 == 0
                ? #""\#(Int.random(in: 0...99, using: &random))""#  // text where the spec says integer
                : String(Int.random(in: -50...150, using: &random))
            try backend.putItem(id, #"{"Title": "t\#(Int.random(in: 0...999, using: &random))", "Rank": \#(rank)}"#)
        }
        // Enough rows that a sparse predicate leaves a batch of 200 a hundred
        // rowids apart from each other (read by lists, not ranges).
        for id in pool.shuffled(using: &random).prefix(480) { try put(id) }
        _ = try fetch(context, FetchRequest(entity: "items"))

        for round in 0..<6 {
            var request = FetchRequest(entity: "items")
            request.policy = .cacheOnly
            request.resultType = Bool.random(using: &random) ? .values : .objects
            if request.resultType == .values { request.properties = ["Title", "Rank"] }
            request.sort = ["Rank", "-Rank", "Title", "-Title,Rank", "id"].randomElement(using: &random)!
            switch Int.random(in: 0...4, using: &random) {
            case 0: break
            case 1:
                let low = Int64.random(in: -50...100, using: &random)
                request.predicate = "Rank >= $1 AND Rank < $2"
                request.arguments = [.integer(low), .integer(low + Int64.random(in: 10...120, using: &random))]
            case 2:
                let keep = Int.random(in: 2...5, using: &random)
                request.predicate = "Rank IN {" + (-50...150).filter { $0 % keep != 0 }.map(String.init).joined(separator: ", ") + "}"
            case 3:
                let keep = Int.random(in: 3...6, using: &random)
                request.predicate = "Rank IN {" + (-50...150).filter { $0 % keep == 0 }.map(String.init).joined(separator: ", ") + "}"
            default:
                request.predicate = "Title CONTAINS $1"
                request.arguments = [.text(String(Int.random(in: 0...9, using: &random)))]
            }
            var whole = request
            whole.resultType = .ids
            whole.properties = []
            request.batchSize = [1, 2, 3, 7, 16, 50, 200].randomElement(using: &random)!
            let why = "seed \(seed) round \(round): \(request.resultType) where \(request.predicate ?? "-") sort \(request.sort ?? "-") batch \(request.batchSize)"
            let snapshotAnswer = try fetch(context, whole).last
            XCTAssertNil(snapshotAnswer?.error, why)
            let snapshot = try XCTUnwrap(snapshotAnswer?.results)
            let ids = try (0..<snapshot.count).map { try snapshot.id(at: $0) }
            let batchedAnswer = try fetch(context, request).last
            XCTAssertNil(batchedAnswer?.error, why)
            let batched = try XCTUnwrap(batchedAnswer?.results)
            XCTAssertEqual(batched.count, ids.count, why)

            // The store changes after the fetch: records deleted, changed, stored new...
            var gone = Set<String>()
            for id in ids.shuffled(using: &random).prefix(Int.random(in: 0...8, using: &random)) {
                try backend.deleteItem(id)
                gone.insert(id)
            }
            for id in ids.shuffled(using: &random).prefix(Int.random(in: 0...12, using: &random)) where !gone.contains(id) {
                try put(id)
            }
            for id in pool.shuffled(using: &random).prefix(Int.random(in: 0...10, using: &random)) where !gone.contains(id) {
                try put(id)
            }
            _ = try fetch(context, FetchRequest(entity: "items"))
            // ... and some of those deleted stored again, after the store let them go: new rows.
            for id in gone.sorted().shuffled(using: &random).prefix(Int.random(in: 0...3, using: &random)) { try put(id) }
            _ = try fetch(context, FetchRequest(entity: "items"))

            // Every row, its batches read in a random order (each read evicts the one held).
            for index in Array(0..<ids.count).shuffled(using: &random) {
                let at = "\(why): row \(index) (\(ids[index]))"
                if gone.contains(ids[index]) {
                    XCTAssertThrowsError(try batched.id(at: index), at) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound, at) }
                    continue
                }
                XCTAssertEqual(try batched.id(at: index), ids[index], at)
                let object = try context.object(entity: "items", id: ids[index])
                if request.resultType == .values {
                    XCTAssertEqual(try batched.value(at: index, column: 0), try object.peek("Title"), at)
                    XCTAssertEqual(try batched.value(at: index, column: 1), try object.peek("Rank"), at)
                } else {
                    let read = try batched.object(at: index)
                    XCTAssertTrue(read === object, "one object per record: \(at)")
                    XCTAssertEqual(try read.peek("Title"), try backend.record(ids[index])?.first { $0.key == "Title" }
                                       .flatMap { $0.value.stringValue }.map(Value.text), at)
                }
            }
        }
    }
}
