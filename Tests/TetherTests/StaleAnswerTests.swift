import XCTest
@testable import Tether

/// A connection whose answers to reads are held until `release`: an answer
/// read by the server before a save, taken by the core after it.
final class HoldingConnection: WrappingConnection {
    let inner: any Connection
    /// Answers held, and how many were ever held.
    private let held = ConditionLock<(waiting: [@Sendable () -> Void], count: Int)>(([], 0))
    let holding = Lock(false)
    /// Whether answers by id (a get's refresh) are held too, and listings'.
    let holdingByID = Lock(true)
    let holdingPages = Lock(true)

    /// Whether a delete's answer keeps from saying the deletion's version, as Kinto's 404 for a record already gone.
    let vagueDeletes = Lock(false)
    init(_ inner: any Connection) { self.inner = inner }

    private func hold(_ deliver: @escaping @Sendable () -> Void) {
        guard holding.withLock({ $0 }) else { return deliver() }
        held.withLock { $0.waiting.append(deliver); $0.count += 1 }
    }

    /// Waits until `count` answers have been held in all.
    func waitForHeld(_ count: Int) -> Bool {
        held.withLock(when: { $0.count >= count }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { _, timedOut in !timedOut }
    }

    /// Delivers a random few of the answers held, in a random order; holds on.
    func releaseSome<G: RandomNumberGenerator>(using random: inout G) {
        let chosen = held.withLock { state -> [@Sendable () -> Void] in
            state.waiting.shuffle(using: &random)
            let count = Int.random(in: 0...state.waiting.count, using: &random)
            defer { state.waiting.removeFirst(count) }
            return Array(state.waiting.prefix(count))
        }
        for deliver in chosen { deliver() }
    }

    /// Delivers every answer held, and holds no more.
    func release() {
        holding.withLock { $0 = false }
        for deliver in held.withLock({ state -> [@Sendable () -> Void] in defer { state.waiting = [] }; return state.waiting }) { deliver() }
    }

    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.page(request) { [self] result in holdingPages.withLock { $0 } ? hold { done(result) } : done(result) }
    }
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        let vague = vagueDeletes.withLock { $0 }
        return inner.write(writes) { outcomes in
            answered(outcomes.map { outcome in
                if vague, case .deleted = outcome { return .deleted(version: nil) }
                return outcome
            })
        }
    }

    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.records(spec, ids: ids, cursor: cursor) { [self] result in
            holdingByID.withLock { $0 } ? hold { done(result) } : done(result)
        }
    }
}

/// A context on `backend` through a connection that holds answers (none
/// yet), its items fetched whole.
func openSynced(_ backend: Backend) throws -> (Context, HoldingConnection) {
    var holding: HoldingConnection!
    let context = try backend.open { holding = HoldingConnection($0); return holding }
    _ = try fetch(context, FetchRequest(entity: "items"))
    return (context, holding)
}

/// The ids of the items the store holds.
func cachedIDs(_ context: Context) throws -> Set<String> {
    var cached = FetchRequest(entity: "items")
    cached.policy = .cacheOnly
    return Set(try fetch(context, cached).last?.objects.map(\.id) ?? [])
}

/// Answers older than what the context has learned since (a read the
/// server answered before our save deleted the record, taken after the
/// save's answer) must not bring the deleted record back.
enum StaleAnswerContract {
    static func staleRefreshAfterOwnDelete(_ backend: Backend) throws {
        var (context, holding) = try openSynced(backend)
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
        XCTAssertFalse(try cachedIDs(context).contains("i3"), "nor into the store")
        try context.close()
        context = try backend.open()
        defer { try? context.close() }
        XCTAssertEqual(try cachedIDs(context).count, itemCount - 1, "after a reopen too")
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
        XCTAssertFalse(try cachedIDs(context).contains("i4"))
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
        let (context, holding) = try openSynced(backend)
        defer { try? context.close() }
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
        XCTAssertTrue(try cachedIDs(context).contains("fresh"), "and in the store")
    }
}

extension StaleAnswerContract {
    /// A sync's page naming a deletion (another client's), read before our
    /// save made the record again, taken after it: our record stays.
    static func staleSyncDeletionAfterOwnInsert(_ backend: Backend) throws {
        let (context, holding) = try openSynced(backend)
        defer { try? context.close() }  // synced whole
        try backend.deleteItem("i7")
        holding.holdingByID.withLock { $0 = false }
        holding.holding.withLock { $0 = true }
        let results = ConditionLock<[FetchResult]>([])
        let task = try context.makeFetch(FetchRequest(entity: "items"))  // a sync, naming i7's deletion
        try task.start { result in results.withLock { $0.append(result) } }
        XCTAssertTrue(holding.waitForHeld(1), "the sync's page was answered")
        let gone = try context.object(entity: "items", id: "i7")
        _ = try? gone.get("Title")  // its refresh (not held) says it is gone
        XCTAssertTrue(eventually { context.isKnownGone(gone.entity, id: "i7") }, "the refresh told")
        let made = try context.insert(entity: "items", id: "i7")
        try made.set("Title", .text("ours"))
        try made.set("Rank", .integer(7))
        XCTAssertEqual(try SaveContract.save(context).saved, 1)
        // What the sync does after (a count, Kinto's version check) may
        // mend it; an observer sees it go first.
        let seenGone = ConditionLock(false)
        let observer = try made.makeObserver(key: "Title")
        try observer.activate { [made] _ in
            if (try? made.peek("Title")) == nil { seenGone.withLock { $0 = true } }
        }
        holding.release()
        XCTAssertTrue(eventually { results.withLock { $0.last?.phase == .final } }, "the sync ended")
        XCTAssertFalse(seenGone.withLock { $0 }, "made again by our save, never deleted by an older page")
        XCTAssertEqual(try made.peek("Title"), .text("ours"))
        XCTAssertTrue(results.withLock { $0.last?.objects.contains { $0.id == "i7" } ?? false }, "and in the answer")
        XCTAssertTrue(try cachedIDs(context).contains("i7"), "and in the store")
    }
}

extension StaleAnswerContract {
    /// A refresh read a newer version than ours before another client
    /// deleted the record; a sync learned the deletion; the refresh, taken
    /// after, must not bring it back (the deletion's own version, which the
    /// server gives, is newer than any the record had).
    static func staleRefreshAfterOthersDeletion(_ backend: Backend) throws {
        let (context, holding) = try openSynced(backend)
        defer { try? context.close() }
        let doomed = try context.object(entity: "items", id: "i8")
        try backend.setTitle("i8", "newer")
        holding.holdingPages.withLock { $0 = false }
        holding.holding.withLock { $0 = true }
        _ = try doomed.get("Title")  // a refresh, answered "newer" and held
        XCTAssertTrue(holding.waitForHeld(1), "the refresh was answered")
        try backend.deleteItem("i8")
        _ = try fetch(context, FetchRequest(entity: "items"))  // the sync learns the deletion
        XCTAssertThrowsError(try doomed.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        holding.release()
        XCTAssertTrue(eventually { !doomed.state.withLock { $0.refreshInFlight } }, "the held refresh was taken")
        XCTAssertThrowsError(try doomed.peek("Title"), "deleted, not brought back by an answer read before") {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
        }
    }
}

extension StaleAnswerContract {
    /// Another client updated the record, then deleted it; a refresh read
    /// the update (held); our delete, made on the version we knew, finds
    /// it gone and is done (client_wins). The refresh, taken after, holds
    /// a version newer than our row's yet older than the deletion, whose
    /// version the server says (the memory server) or not (Kinto's 404,
    /// and `vague`): either way it is not taken.
    static func staleRefreshAfterOwnDeleteOverOthersUpdate(_ backend: Backend, vague: Bool) throws {
        let id = vague ? "i5" : "i6"
        let (context, holding) = try openSynced(backend)
        defer { try? context.close() }
        let doomed = try context.object(entity: "items", id: id)
        try backend.setTitle(id, "other")
        holding.vagueDeletes.withLock { $0 = vague }
        holding.holdingPages.withLock { $0 = false }
        holding.holding.withLock { $0 = true }
        _ = try doomed.get("Title")  // a refresh, answered "other" (newer than ours) and held
        XCTAssertTrue(holding.waitForHeld(1), "the refresh was answered")
        try backend.deleteItem(id)
        try doomed.delete()
        let result = try SaveContract.save(context, .clientWins)
        XCTAssertNil(result.error)
        XCTAssertNil(try backend.record(id), "deleted on the server")
        holding.release()
        XCTAssertTrue(eventually { !doomed.state.withLock { $0.refreshInFlight } }, "the held refresh was taken")
        XCTAssertThrowsError(try doomed.peek("Title"), "deleted by our save, not brought back by the other client's older version") {
            XCTAssertEqual(($0 as? TetherError)?.kind, .notFound)
        }
        XCTAssertFalse(try cachedIDs(context).contains(id))
    }
}

extension StaleAnswerContract {
    /// A listing read before another client's update, taken after a newer
    /// listing stored that update: the store keeps the newer row, and the
    /// older listing's answer and objects must show it too, not the values
    /// it read (its objects were not in memory, so none held a version to
    /// compare with).
    static func olderListingAfterNewer(_ backend: Backend) throws {
        var holding: HoldingConnection!
        // No cache of recent objects: what no one holds is not in memory.
        let context = try backend.open(cacheSize: 0) { holding = HoldingConnection($0); return holding }
        defer { try? context.close() }
        // Filtered listings only: each is a listing (not changes since a sync).
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        request.predicate = "Rank < 10"
        XCTAssertEqual(try fetch(context, request).last?.objects.count, 10)
        holding.holding.withLock { $0 = true }
        let older = ConditionLock<[FetchResult]>([])
        try context.makeFetch(request).start { result in older.withLock { $0.append(result) } }
        XCTAssertTrue(holding.waitForHeld(1), "the older listing was answered")
        try backend.setTitle("i2", "newer")
        holding.holding.withLock { $0 = false }
        do {  // its objects go with it
            let newer = try fetch(context, request).last
            XCTAssertNil(newer?.error)
            XCTAssertEqual(try newer?.objects.first { $0.id == "i2" }?.peek("Title"), .text("newer"))
        }
        XCTAssertTrue(eventually { context.objectsInMemory(context.model.entity(named: "items")!, ["i2"]).isEmpty }, "i2 is not in memory")
        holding.release()
        XCTAssertTrue(eventually { older.withLock { $0.last?.phase == .final } }, "the older listing ended")
        let answer = older.withLock { $0.last }
        XCTAssertEqual(try answer?.objects.first { $0.id == "i2" }?.peek("Title"), .text("newer"),
                       "the older listing's answer shows what the store holds, not the values it read")
        XCTAssertEqual(try context.object(entity: "items", id: "i2").peek("Title"), .text("newer"))
    }
}

extension KintoStaleAnswerTests {
    func testOlderListingAfterNewer() throws { try StaleAnswerContract.olderListingAfterNewer(backend) }
    func testStaleRefreshAfterOwnDeleteOverOthersUpdate() throws {
        try StaleAnswerContract.staleRefreshAfterOwnDeleteOverOthersUpdate(backend, vague: false)
        try StaleAnswerContract.staleRefreshAfterOwnDeleteOverOthersUpdate(backend, vague: true)
    }
    func testStaleRefreshAfterOthersDeletion() throws { try StaleAnswerContract.staleRefreshAfterOthersDeletion(backend) }
    func testStaleSyncDeletionAfterOwnInsert() throws { try StaleAnswerContract.staleSyncDeletionAfterOwnInsert(backend) }
}

extension PostgresStaleAnswerTests {
    func testOlderListingAfterNewer() throws { try StaleAnswerContract.olderListingAfterNewer(Items(self)) }
    func testStaleRefreshAfterOwnDeleteOverOthersUpdate() throws {
        try StaleAnswerContract.staleRefreshAfterOwnDeleteOverOthersUpdate(Items(self), vague: false)
    }
    func testStaleRefreshAfterOthersDeletion() throws {
        XCTAssertEqual(try PostgresConnection.install(options), 1, "items tracked: a sync names deletions")
        try StaleAnswerContract.staleRefreshAfterOthersDeletion(Items(self))
    }
    func testStaleSyncDeletionAfterOwnInsert() throws {
        XCTAssertEqual(try PostgresConnection.install(options), 1, "items tracked: a fetch syncs what changed")
        try StaleAnswerContract.staleSyncDeletionAfterOwnInsert(Items(self))
    }
}

extension MemoryStaleAnswerTests {
    func testOlderListingAfterNewer() throws { try StaleAnswerContract.olderListingAfterNewer(backend) }
    func testStaleRefreshAfterOwnDeleteOverOthersUpdate() throws {
        try StaleAnswerContract.staleRefreshAfterOwnDeleteOverOthersUpdate(backend, vague: false)
        try StaleAnswerContract.staleRefreshAfterOwnDeleteOverOthersUpdate(backend, vague: true)
    }
    func testStaleRefreshAfterOthersDeletion() throws { try StaleAnswerContract.staleRefreshAfterOthersDeletion(backend) }
    func testStaleSyncDeletionAfterOwnInsert() throws { try StaleAnswerContract.staleSyncDeletionAfterOwnInsert(backend) }
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

/// Answers taken in any order against saves, gets, syncs and other
/// clients' writes (a seeded walk). After every step, a record last written
/// by our own save (and by no one since) reads as that save left it: an
/// answer read before the save must not undo it. At the end, once every
/// answer is in and one more sync is done, the cache is the server's.
final class StaleAnswerFuzzTests: XCTestCase {
    func testAnswersInAnyOrderNeverUndoOurSaves() throws {
        // STALE_FUZZ_SEEDS=N walks more (a failing seed replays).
        let seeds = ProcessInfo.processInfo.environment["STALE_FUZZ_SEEDS"].flatMap { UInt64($0) } ?? 32
        for seed in UInt64(1)...max(1, seeds) { try walk(seed: seed, steps: 80) }
    }

    private func walk(seed: UInt64, steps: Int) throws {
        let directory = try makeTemporaryDirectory("stalefuzz")
        defer { removeDirectory(directory) }
        let backend = MemoryBackend(directory: directory)
        var random = LiveConvergence.Seeded(state: seed)
        let (context, holding) = try openSynced(backend)
        defer { try? context.close() }
        holding.holding.withLock { $0 = true }
        holding.vagueDeletes.withLock { $0 = seed % 2 == 0 }  // half the walks: deletions of unsaid version
        let ids = (0..<10).map { "i\($0)" } + (0..<4).map { "n\($0)" }
        var tasks: [ConditionLock<Bool>] = []
        var trail: [String] = []
        /// What our last save left, by id (nil inside: deleted), while no one else wrote it since.
        var ours: [String: Value?] = [:]
        func save(_ id: String, leaving value: Value?) throws {
            let result = try SaveContract.save(context, .clientWins)  // nothing stays pending
            XCTAssertNil(result.error, "seed \(seed): \(trail.joined(separator: ", "))")
            if result.error == nil { ours[id] = .some(value) }
        }
        for step in 0..<steps {
            let id = ids.randomElement(using: &random)!
            let title = Value.text("s\(seed).\(step)")
            switch Int.random(in: 0..<9, using: &random) {
            case 0:
                trail.append("edit \(id)")
                if (try? context.object(entity: "items", id: id).set("Title", title)) != nil { try save(id, leaving: title) }
            case 1:
                trail.append("delete \(id)")
                if (try? context.object(entity: "items", id: id).delete()) != nil { try save(id, leaving: nil) }
            case 2:
                trail.append("insert \(id)")
                if let made = try? context.insert(entity: "items", id: id) {
                    try made.set("Title", title)
                    try made.set("Rank", Value.integer(Int64(step)))
                    try save(id, leaving: title)
                }
            case 3:
                trail.append("other put \(id)")
                backend.server.put("items", id: id, [("Title", .string("other \(step)")), ("Rank", .integer(Int64(step)))])
                ours[id] = nil
            case 4:
                trail.append("other remove \(id)")
                backend.server.remove("items", id: id)
                ours[id] = nil
            case 5:
                trail.append("get \(id)")
                _ = try? context.object(entity: "items", id: id).get("Title")
            case 6:
                trail.append("sync")
                let ended = ConditionLock(false)
                try context.makeFetch(FetchRequest(entity: "items")).start { result in
                    if result.phase == .final { ended.withLock { $0 = true } }
                }
                tasks.append(ended)
            default:
                trail.append("release some")
                holding.releaseSome(using: &random)
            }
            // Whatever was delivered is taken before the check.
            let drained = ConditionLock(false)
            _ = context.worker.async { drained.withLock { $0 = true } }
            _ = drained.withLock(when: { $0 }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { _, _ in }
            for (id, left) in ours {
                let read = try? context.object(entity: "items", id: id).peek("Title")
                XCTAssertEqual(read, left, "seed \(seed), step \(step), \(id): not what our save left; \(trail.joined(separator: ", "))")
            }
        }
        holding.release()
        for ended in tasks {
            XCTAssertTrue(ended.withLock(when: { $0 }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { _, timedOut in !timedOut })
        }
        XCTAssertTrue(eventually { ids.allSatisfy { id in
            (try? context.object(entity: "items", id: id).state.withLock { !$0.refreshInFlight }) ?? true } })
        XCTAssertFalse(context.hasChanges, "seed \(seed): every save went through")
        _ = try fetch(context, FetchRequest(entity: "items"))  // one more sync
        var cached = FetchRequest(entity: "items")
        cached.policy = .cacheOnly
        let objects = try fetch(context, cached).last?.objects ?? []
        let cache = Dictionary(uniqueKeysWithValues: try objects.map { ($0.id, try $0.peek("Title")) })
        for id in ids {
            let server = SaveContract.field(backend.server.recordForTest("items", id: id), "Title").map { json -> Value in
                if case .string(let text) = json { return .text(text) } else { return .null }
            }
            XCTAssertEqual(cache[id], server, "seed \(seed), \(id): the cache is not the server's; \(trail.joined(separator: ", "))")
        }
    }
}
