import XCTest
@testable import Tether

/// What the core asked the server for, page by page, and what came back.
final class ListingRecorder: @unchecked Sendable {
    struct Listing {
        let since: Int64?
        let filtered: Bool
        let records: [String]
        let deleted: [String]
    }
    private let listings = Lock<[Listing]>([])
    private let checkPages = Lock(0)

    /// The listings, but for a sync's id+version check (see `VersionCheck`).
    var all: [Listing] { listings.withLock { $0 } }
    /// Pages of the id+version checks that end syncs.
    var versionCheckPages: Int { checkPages.withLock { $0 } }
    func reset() {
        listings.withLock { $0 = [] }
        checkPages.withLock { $0 = 0 }
    }

    /// A whole listing: pages asked without `since`, then at most catch-ups
    /// (what changed since its first page) that bring nothing here.
    var listedEverything: Bool {
        let all = all
        guard let first = all.firstIndex(where: { $0.since == nil }) else { return false }
        return all[..<first].isEmpty && all[first...].allSatisfy { $0.since == nil || ($0.records.isEmpty && $0.deleted.isEmpty) }
    }

    func wrap(_ connection: any Connection) -> any Connection {
        ForwardingConnection(connection) { [self] request, page in
            guard let request else { return page }
            if request.fields != nil {
                checkPages.withLock { $0 += 1 }
                return page
            }
            return Page(next: page.next, version: page.version) { [self] in
                let content = try page.decode()
                let ids = content.records.compactMap { record in record.first { $0.key == "id" }?.value.stringValue }
                listings.withLock {
                    $0.append(Listing(since: request.since, filtered: !request.filters.isEmpty, records: ids,
                                      deleted: content.deletedIDs))
                }
                return content
            }
        }
    }
}

/// Incremental sync, against Kinto and the memory server alike: after one
/// whole listing, fetches ask only for what changed.
enum SyncContract {
    static func ids(_ result: [FetchResult]) -> Set<String> { Set(result.last?.objects.map(\.id) ?? []) }

    static func secondFetchAsksOnlyForChanges(_ backend: Backend) throws {
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        let first = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(first.last?.objects.count, itemCount)
        XCTAssertTrue(recorder.listedEverything, "the first fetch lists everything")
        XCTAssertEqual(recorder.all.reduce(0) { $0 + $1.records.count }, itemCount)

        try backend.setTitle("i3", "changed")
        try backend.deleteItem("i4")
        recorder.reset()
        var request = FetchRequest(entity: "items")
        request.sort = "Rank"
        let second = try fetch(context, request)
        let listings = recorder.all
        XCTAssertEqual(listings.count, 1)
        XCTAssertNotNil(listings.first?.since, "the second fetch asks for changes only")
        XCTAssertEqual(listings.first?.records, ["i3"])
        XCTAssertEqual(listings.first?.deleted, ["i4"])
        XCTAssertEqual(second.last?.error?.kind, nil)
        XCTAssertEqual(second.last?.objects.map(\.id), (0..<itemCount).filter { $0 != 4 }.map { "i\($0)" },
                       "the answer is the synced cache's, in the request's order")
        XCTAssertEqual(try context.object(entity: "items", id: "i3").peek("Title"), .text("changed"))
        XCTAssertThrowsError(try context.object(entity: "items", id: "i4").peek("Title")) {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
        }

        recorder.reset()
        let third = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(third.last?.objects.count, itemCount - 1)
        XCTAssertEqual(recorder.all.map(\.records.count), [0], "nothing changed: nothing comes")
        XCTAssertEqual(recorder.all.map(\.deleted.count), [0])
        XCTAssertGreaterThan(recorder.versionCheckPages, 0, "the sync ends with the id+version check")
    }

    /// A record changed so that it no longer matches a filter leaves that
    /// filter's results, though a filtered listing would not name it.
    static func recordLeavingAFilterLeavesItsResults(_ backend: Backend) throws {
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        var low = FetchRequest(entity: "items")
        low.predicate = "Rank < 5"
        // Before any whole listing: the server filters.
        XCTAssertEqual(ids(try fetch(context, low)), ["i0", "i1", "i2", "i3", "i4"])
        XCTAssertTrue(recorder.all.allSatisfy { $0.filtered && $0.since == nil })
        try backend.setRank("i2", 500)
        XCTAssertEqual(ids(try fetch(context, low)), ["i0", "i1", "i3", "i4"])
        var cacheOnly = low
        cacheOnly.policy = .cacheOnly
        XCTAssertEqual(ids(try fetch(context, cacheOnly)), ["i0", "i1", "i3", "i4"],
                       "the cache knows i2 left, though the filtered listing did not name it")

        // Synced: the changes since, then the cache answers.
        _ = try fetch(context, FetchRequest(entity: "items"))
        try backend.setRank("i3", 600)
        try backend.setRank("i50", 1)
        recorder.reset()
        let synced = try fetch(context, low)
        XCTAssertEqual(synced.first?.phase, .cached)
        XCTAssertEqual(ids([synced[0]]), ["i0", "i1", "i3", "i4"], "the cached phase: as last known")
        XCTAssertEqual(ids(synced), ["i0", "i1", "i4", "i50"])
        XCTAssertEqual(recorder.all.count, 1)
        XCTAssertEqual(recorder.all.first?.filtered, false, "a sync is the whole collection's")
        XCTAssertEqual(Set(recorder.all.first?.records ?? []), ["i3", "i50"])
    }

    /// The server has lost the history since the store's version: the next
    /// fetch lists everything, and removes what the server no longer has.
    static func lostHistoryListsEverythingAgain(_ backend: Backend) throws {
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        try backend.deleteItem("i5")
        try backend.setTitle("i6", "after")
        try backend.loseHistory(syncedBy: context)
        recorder.reset()
        var request = FetchRequest(entity: "items")
        request.predicate = "Rank < 10"
        let result = try fetch(context, request)
        XCTAssertNil(result.last?.error)
        XCTAssertEqual(ids(result), Set((0..<10).filter { $0 != 5 }.map { "i\($0)" }))
        XCTAssertThrowsError(try context.object(entity: "items", id: "i5").peek("Title")) {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
        }
        XCTAssertEqual(try context.object(entity: "items", id: "i6").peek("Title"), .text("after"))
        XCTAssertEqual(recorder.all.reduce(0) { $0 + $1.records.count }, itemCount - 1, "everything, once")
        XCTAssertTrue(recorder.listedEverything)

        recorder.reset()
        _ = try fetch(context, request)
        XCTAssertEqual(recorder.all.map(\.records.count), [0], "synced again from the new listing")
        XCTAssertNotNil(recorder.all.first?.since)
    }

    /// Sync state lives in the store: a context opened later goes on from it.
    static func syncOutlivesTheContext(_ backend: Backend) throws {
        let first = try backend.open()
        _ = try fetch(first, FetchRequest(entity: "items"))
        try first.close()
        try backend.deleteItem("i9")
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        let result = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(result.last?.objects.count, itemCount - 1)
        XCTAssertEqual(recorder.all.map(\.deleted), [["i9"]])
        XCTAssertEqual(recorder.all.map(\.records.count), [0])
    }
}

/// A whole listing into a new store: no ids-and-versions check (every row
/// is one of its pages); its answer comes from the store by id, and makes
/// no object until one is read. Into a table that holds rows, the check.
enum WholeListingContract {
    static func intoAnEmptyTable(_ backend: Backend) throws {
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        let before = Live.count(.objects)
        let answer = try XCTUnwrap(try fetch(context, FetchRequest(entity: "items")).last?.results)
        XCTAssertLessThanOrEqual(Live.count(.objects), before, "no object is made for a row not read")
        XCTAssertEqual(recorder.versionCheckPages, 0, "no check after a whole listing into an empty table")
        let ids = try (0..<answer.count).map { try answer.id(at: $0) }
        XCTAssertEqual(ids, (0..<itemCount).map { "i\($0)" }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) },
                       "every record, by id")
        XCTAssertEqual(try answer.object(at: 3).peek("Title"), .text("item \(ids[3].dropFirst())"), "read from its row")

        // The store holds rows now: a whole listing (its sync forgotten) ends with the check.
        let entity = try XCTUnwrap(context.model.entity(named: "items"))
        try context.store(for: entity).clearSyncVersion(entity)
        recorder.reset()
        let again = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(again.last?.objects.count, itemCount)
        XCTAssertTrue(recorder.listedEverything)
        XCTAssertGreaterThan(recorder.versionCheckPages, 0, "a whole listing over rows ends with the check")
    }
}

final class KintoSyncTests: KintoTestCase {
    func testWholeListingIntoAnEmptyTable() throws { try WholeListingContract.intoAnEmptyTable(backend) }
    func testSecondFetchAsksOnlyForChanges() throws { try SyncContract.secondFetchAsksOnlyForChanges(backend) }
    func testRecordLeavingAFilterLeavesItsResults() throws { try SyncContract.recordLeavingAFilterLeavesItsResults(backend) }
    func testLostHistoryListsEverythingAgain() throws { try SyncContract.lostHistoryListsEverythingAgain(backend) }
    func testSyncOutlivesTheContext() throws { try SyncContract.syncOutlivesTheContext(backend) }
}

final class MemorySyncTests: MemoryTestCase {
    func testWholeListingIntoAnEmptyTable() throws { try WholeListingContract.intoAnEmptyTable(backend) }
    func testSecondFetchAsksOnlyForChanges() throws { try SyncContract.secondFetchAsksOnlyForChanges(backend) }
    func testRecordLeavingAFilterLeavesItsResults() throws { try SyncContract.recordLeavingAFilterLeavesItsResults(backend) }
    func testLostHistoryListsEverythingAgain() throws { try SyncContract.lostHistoryListsEverythingAgain(backend) }
    func testSyncOutlivesTheContext() throws { try SyncContract.syncOutlivesTheContext(backend) }

    /// A new field in the spec: rows lack its values, so the entity syncs
    /// from scratch.
    func testSchemaChangeStartsTheSyncAgain() throws {
        let first = try backend.open()
        _ = try fetch(first, FetchRequest(entity: "items"))
        try first.close()
        var spec = MemoryBackend.itemsSpec
        spec.fields.append(FieldSpec(name: "Owner", type: .text))
        backend.server.setSpecs([spec])
        let recorder = ListingRecorder()
        let context = try backend.open(wrapping: recorder.wrap)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertTrue(recorder.listedEverything)
        XCTAssertEqual(recorder.all.reduce(0) { $0 + $1.records.count }, itemCount)
    }
}
