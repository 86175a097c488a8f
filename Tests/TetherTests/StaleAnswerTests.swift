import XCTest
@testable import Tether

/// A connection whose answers to reads are held until `release`: an answer
/// read by the server before a save, taken by the core after it.
final class HoldingConnection: WrappingConnection {
    let inner: any Connection
    /// Answers held, and how many were ever held.
    private let held = ConditionLock<(waiting: [@Sendable () -> Void], count: Int)>(([], 0))
    let holding = Lock(false)
    init(_ inner: any Connection) { self.inner = inner }

    private func hold(_ deliver: @escaping @Sendable () -> Void) {
        guard holding.withLock({ $0 }) else { return deliver() }
        held.withLock { $0.waiting.append(deliver); $0.count += 1 }
    }

    /// Waits until `count` answers have been held in all.
    func waitForHeld(_ count: Int) -> Bool {
        held.withLock(when: { $0.count >= count }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { _, timedOut in !timedOut }
    }

    /// Delivers every answer held, and holds no more.
    func release() {
        holding.withLock { $0 = false }
        for deliver in held.withLock({ state -> [@Sendable () -> Void] in defer { state.waiting = [] }; return state.waiting }) { deliver() }
    }

    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.page(request) { [self] result in hold { done(result) } }
    }
    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.records(spec, ids: ids, cursor: cursor) { [self] result in hold { done(result) } }
    }
}

/// Answers older than what the context has learned since (a read the
/// server answered before our save deleted the record, taken after the
/// save's answer) must not bring the deleted record back.
enum StaleAnswerContract {
    static func staleRefreshAfterOwnDelete(_ backend: Backend) throws {
        var holding: HoldingConnection!
        var context = try backend.open { holding = HoldingConnection($0); return holding }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let doomed = try context.object(entity: "items", id: "i3")
        holding.holding.withLock { $0 = true }
        _ = try doomed.get("Title")  // a refresh, answered "i3 is there" and held
        XCTAssertTrue(holding.waitForHeld(1), "the refresh was answered")
        try doomed.delete()
        let result = try SaveContract.save(context)
        XCTAssertNil(result.error)
        XCTAssertEqual(result.saved, 1)
        XCTAssertNil(try backend.record("i3"), "deleted on the server")
        holding.release()
        XCTAssertTrue(eventually { !doomed.state.withLock { $0.refreshInFlight } }, "the held refresh was taken")
        XCTAssertThrowsError(try doomed.peek("Title"), "deleted by our own save, not brought back by an older answer") {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
        }
        XCTAssertTrue(context.isKnownGone(doomed.entity, id: "i3"))
        var cached = FetchRequest(entity: "items")
        cached.policy = .cacheOnly
        XCTAssertFalse(try fetch(context, cached).last?.objects.contains { $0.id == "i3" } ?? true, "nor into the store")
        try context.close()
        context = try backend.open()
        defer { try? context.close() }
        XCTAssertEqual(try fetch(context, cached).last?.objects.count, itemCount - 1, "after a reopen too")
        // Made again by someone else: a newer version, taken.
        try backend.putItem("i3", #"{"Title": "again", "Rank": 3}"#)
        let again = try context.object(entity: "items", id: "i3")
        _ = try? again.get("Title")
        XCTAssertTrue(eventually { (try? again.peek("Title")) == .text("again") }, "a record made again is taken")
    }

    /// The same for a listing read before the save and taken after it.
    static func staleListingAfterOwnDelete(_ backend: Backend) throws {
        var holding: HoldingConnection!
        let context = try backend.open { holding = HoldingConnection($0); return holding }
        defer { try? context.close() }
        // Filtered listings only: the store never syncs items whole, so the
        // second is a listing again (not changes since a sync) and names i4.
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        request.predicate = "Rank < 10"
        XCTAssertEqual(try fetch(context, request).last?.objects.count, 10)
        let doomed = try context.object(entity: "items", id: "i4")
        holding.holding.withLock { $0 = true }
        let results = ConditionLock<[FetchResult]>([])
        let task = try context.makeFetch(request)
        try task.start { result in results.withLock { $0.append(result) } }
        XCTAssertTrue(holding.waitForHeld(1), "the listing was answered")
        try doomed.delete()
        XCTAssertEqual(try SaveContract.save(context).saved, 1)
        holding.release()
        XCTAssertTrue(eventually { results.withLock { $0.last?.phase == .final } }, "the listing ended")
        XCTAssertThrowsError(try doomed.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertFalse(results.withLock { $0.last?.objects.contains { $0.id == "i4" } ?? true },
                       "the listing's answer has no record our save deleted")
        var cached = FetchRequest(entity: "items")
        cached.policy = .cacheOnly
        XCTAssertFalse(try fetch(context, cached).last?.objects.contains { $0.id == "i4" } ?? true)
    }
}

final class MemoryStaleAnswerTests: XCTestCase {
    private var directory: String!
    private var backend: MemoryBackend!
    override func setUpWithError() throws {
        directory = try makeTemporaryDirectory("stale")
        backend = MemoryBackend(directory: directory)
    }
    override func tearDown() { backend = nil; removeDirectory(directory) }

    func testStaleRefreshAfterOwnDelete() throws { try StaleAnswerContract.staleRefreshAfterOwnDelete(backend) }
    func testStaleListingAfterOwnDelete() throws { try StaleAnswerContract.staleListingAfterOwnDelete(backend) }
}

final class KintoStaleAnswerTests: XCTestCase {
    private var directory: String!
    private var backend: KintoBackend!
    override func setUpWithError() throws {
        directory = try makeTemporaryDirectory("stale")
        backend = try KintoBackend(directory: directory)
    }
    override func tearDown() { backend = nil; removeDirectory(directory) }

    func testStaleRefreshAfterOwnDelete() throws { try StaleAnswerContract.staleRefreshAfterOwnDelete(backend) }
    func testStaleListingAfterOwnDelete() throws { try StaleAnswerContract.staleListingAfterOwnDelete(backend) }
}

/// The same over PostgreSQL: the items table in the test's schema.
final class PostgresStaleAnswerTests: PostgresTestCase {
    override var schemaPrefix: String { "stale" }
    override func schemaStatements(_ schema: String) -> [String] {
        ["CREATE TABLE \(schema).items (id text PRIMARY KEY, \"Title\" text, \"Rank\" int8)",
         "INSERT INTO \(schema).items SELECT 'i' || n, 'item ' || n, n FROM generate_series(0, \(itemCount - 1)) n"]
    }

    /// What the contract asks of a server, over the test's admin session.
    final class Items: Backend {
        let test: PostgresStaleAnswerTests
        init(_ test: PostgresStaleAnswerTests) { self.test = test }
        var storePath: String { test.directory + "/store.sqlite" }
        func connection() throws -> any Connection { try PostgresConnection(test.options) }
        private func run(_ sql: String, _ parameters: [String]) throws { _ = try test.admin.query(sql, parameters) }
        func setTitle(_ id: String, _ title: String) throws { try run("UPDATE \(test.schema).items SET \"Title\" = $2 WHERE id = $1", [id, title]) }
        func setRank(_ id: String, _ rank: Int64) throws { try run("UPDATE \(test.schema).items SET \"Rank\" = $2 WHERE id = $1", [id, String(rank)]) }
        func deleteItem(_ id: String) throws { try run("DELETE FROM \(test.schema).items WHERE id = $1", [id]) }
        func putItem(_ id: String, _ fields: String) throws {
            try run("""
                INSERT INTO \(test.schema).items SELECT $1, j->>'Title', (j->>'Rank')::int8 FROM (SELECT $2::jsonb j) f
                ON CONFLICT (id) DO UPDATE SET "Title" = excluded."Title", "Rank" = excluded."Rank"
                """, [id, fields])
        }
        func record(_ id: String) throws -> RecordFields? {
            guard let row = try test.admin.query("SELECT \"Title\", \"Rank\"::text FROM \(test.schema).items WHERE id = $1", [id]).first
            else { return nil }
            return [("id", .string(id)), ("Title", row[0].map(JSON.string) ?? .null),
                    ("Rank", row[1].flatMap(Int64.init).map(JSON.integer) ?? .null)]
        }
        func loseHistory(syncedBy context: Context) throws { throw XCTSkip("not used here") }
    }

    func testStaleRefreshAfterOwnDelete() throws { try StaleAnswerContract.staleRefreshAfterOwnDelete(Items(self)) }
    func testStaleListingAfterOwnDelete() throws { try StaleAnswerContract.staleListingAfterOwnDelete(Items(self)) }
}

extension StaleAnswerContract {
    /// A refresh answered "not on the server" before our save made the
    /// record, taken after it: the record we saved stays.
    static func staleAbsenceAfterOwnInsert(_ backend: Backend) throws {
        var holding: HoldingConnection!
        let context = try backend.open { holding = HoldingConnection($0); return holding }
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let asked = try context.object(entity: "items", id: "fresh")
        holding.holding.withLock { $0 = true }
        _ = try? asked.get("Title")  // a refresh, answered "no such record" and held
        XCTAssertTrue(holding.waitForHeld(1), "the refresh was answered")
        let made = try context.insert(entity: "items", id: "fresh")
        XCTAssertTrue(made === asked, "one object per record")
        try made.set("Title", .text("made here"))
        try made.set("Rank", .integer(1000))
        let result = try SaveContract.save(context)
        XCTAssertNil(result.error)
        XCTAssertEqual(result.saved, 1)
        XCTAssertNotNil(try backend.record("fresh"), "on the server")
        holding.release()
        XCTAssertTrue(eventually { !made.state.withLock { $0.refreshInFlight } }, "the held refresh was taken")
        XCTAssertEqual(try made.peek("Title"), .text("made here"), "saved by us, not made absent by an older answer")
        var cached = FetchRequest(entity: "items")
        cached.policy = .cacheOnly
        XCTAssertTrue(try fetch(context, cached).last?.objects.contains { $0.id == "fresh" } ?? false, "and in the store")
    }
}

extension MemoryStaleAnswerTests {
    func testStaleAbsenceAfterOwnInsert() throws { try StaleAnswerContract.staleAbsenceAfterOwnInsert(backend) }
}

extension KintoStaleAnswerTests {
    func testStaleAbsenceAfterOwnInsert() throws { try StaleAnswerContract.staleAbsenceAfterOwnInsert(backend) }
}

extension PostgresStaleAnswerTests {
    func testStaleAbsenceAfterOwnInsert() throws { try StaleAnswerContract.staleAbsenceAfterOwnInsert(Items(self)) }
}

extension MemoryStaleAnswerTests {
    /// 0.2's tombstones had no version: such a store opens, its tombstones
    /// still say gone, and judge no answer older.
    func testTombstonesWithoutVersionOpen() throws {
        var context = try backend.open()
        _ = try fetch(context, FetchRequest(entity: "items"))
        try backend.deleteItem("i5")
        _ = try fetch(context, FetchRequest(entity: "items"))  // the sync learns it
        try context.close()
        let database = try Database(path: backend.storePath)
        try database.execute("ALTER TABLE tether_deleted RENAME TO old")
        try database.execute("CREATE TABLE tether_deleted (entity INTEGER NOT NULL, id TEXT NOT NULL, PRIMARY KEY (entity, id))")
        try database.execute("INSERT INTO tether_deleted SELECT entity, id FROM old")
        try database.execute("DROP TABLE old")
        database.close()
        context = try backend.open()
        defer { try? context.close() }
        XCTAssertThrowsError(try context.object(entity: "items", id: "i5").peek("Title")) {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound, "the tombstone still says gone")
        }
        try backend.putItem("i5", #"{"Title": "back", "Rank": 5}"#)
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertEqual(try context.object(entity: "items", id: "i5").peek("Title"), .text("back"))
    }
}
