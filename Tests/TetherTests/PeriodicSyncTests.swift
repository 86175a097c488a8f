import XCTest
@testable import Tether

/// Issue 40: live data over servers that do not push (Kinto, the memory
/// server): another client's changes reach live fetches and observers by
/// the context's periodic sync, or at once when the host says so.
enum PeriodicSyncContract {
    /// Every request the context sends, by kind.
    final class RequestCounter: @unchecked Sendable {
        enum Kind: Hashable { case changes, listing, versionCheck, count, byID }
        private let counts = Lock<[Kind: Int]>([:])
        func count(_ kind: Kind) -> Int { counts.withLock { $0[kind] ?? 0 } }
        var total: Int { counts.withLock { $0.values.reduce(0, +) } }
        func note(_ kind: Kind) { counts.withLock { $0[kind, default: 0] += 1 } }

        func wrap(_ connection: any Connection) -> any Connection { Counting(inner: connection, counter: self) }

        private final class Counting: WrappingConnection, @unchecked Sendable {
            let inner: any Connection
            let counter: RequestCounter
            init(inner: any Connection, counter: RequestCounter) {
                self.inner = inner
                self.counter = counter
            }
            func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
                counter.note(request.fields != nil ? .versionCheck : request.since != nil ? .changes : .listing)
                return inner.page(request, done)
            }
            func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
                counter.note(.count)
                return inner.count(request, done)
            }
            func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                         _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
                counter.note(.byID)
                return inner.records(spec, ids: ids, cursor: cursor, done)
            }
        }
    }

    static func open(_ backend: Backend, interval: Int64, counter: RequestCounter? = nil) throws -> Context {
        var options = ContextOptions(storePath: backend.storePath)
        options.syncIntervalMilliseconds = interval
        let connection = try backend.connection()
        return try Context.open(options, connection: counter?.wrap(connection) ?? connection)
    }

    static func liveRequest() -> FetchRequest {
        var request = FetchRequest(entity: "items")
        request.predicate = "Rank < 10"
        request.sort = "Rank"
        request.policy = .serverOnly
        request.live = true
        return request
    }

    /// The last answer's ids, once `condition` holds of them (up to `seconds`).
    static func answer(_ watcher: LiveFetchContract.Watcher, within seconds: Double,
                       _ condition: @escaping ([String]) -> Bool) -> [String]? {
        var last: [String] = []
        let held = eventually(seconds) {
            last = LiveFetchContract.ids(watcher.seen.withLock { $0.last })
            return condition(last)
        }
        return held ? last : nil
    }

    static func liveFetchHearsAnotherClient(_ backend: Backend) throws {
        let context = try open(backend, interval: 200)
        defer { try? context.close() }
        let watcher = LiveFetchContract.Watcher()
        try context.makeFetch(liveRequest()).start(watcher.callback)
        XCTAssertEqual(LiveFetchContract.ids(watcher.wait(for: 1).first), (0..<10).map { "i\($0)" })
        try backend.setRank("i50", 5)  // comes in
        try backend.deleteItem("i0")   // goes
        try backend.setTitle("i7", "seven")  // changes in place
        let expected = ["i1", "i2", "i3", "i4", "i5", "i50", "i6", "i7", "i8", "i9"]
        XCTAssertNotNil(answer(watcher, within: 5) { $0 == expected }, "the insert and delete arrive by themselves")
        XCTAssertTrue(eventually(5) {
            let last = watcher.seen.withLock { $0.last }
            return (last?.objects.first { $0.id == "i7" }).map { (try? $0.read(attribute: $0.entity.attributeIndex(named: "Title")!, refresh: false)) == .text("seven") } ?? false
        }, "the update arrives too")
        XCTAssertTrue(watcher.seen.withLock { $0.allSatisfy { $0.phase == .live && $0.error == nil } })
    }

    static func observerHearsAnotherClient(_ backend: Backend) throws {
        let context = try open(backend, interval: 200)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i3")
        let told = Lock(0)
        let observer = try object.makeObserver(key: "Title")
        try observer.activate { error in if error == nil { told.withLock { $0 += 1 } } }
        try backend.setTitle("i3", "three, elsewhere")
        XCTAssertTrue(eventually(5) { told.withLock { $0 } >= 1 }, "the observer is told")
        XCTAssertEqual(try object.read(attribute: object.entity.attributeIndex(named: "Title")!, refresh: false),
                       .text("three, elsewhere"))
    }

    /// With the interval off nothing is asked; `changed` brings the change at once.
    static func intervalOffThenTheHostSays(_ backend: Backend) throws {
        let counter = RequestCounter()
        let context = try open(backend, interval: 0, counter: counter)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))  // synced: later syncs ask what changed
        let watcher = LiveFetchContract.Watcher()
        try context.makeFetch(liveRequest()).start(watcher.callback)
        _ = watcher.wait(for: 1)
        try backend.setRank("i50", 5)
        let before = counter.total
        usleep(600_000)
        XCTAssertEqual(counter.total, before, "interval 0: no request")
        XCTAssertEqual(watcher.seen.withLock { $0.count }, 1)
        try context.changed(entity: "items")
        XCTAssertNotNil(answer(watcher, within: 5) { $0.contains("i50") }, "changed() syncs at once")
        XCTAssertThrowsError(try context.changed(entity: "nope")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        try context.changed(entity: nil)  // every watched entity
    }

    /// An idle round asks what changed only: no count, no listing of ids
    /// and versions until the full-check interval is up. Cancelling the
    /// last live fetch stops the rounds.
    static func idleRoundsAreOneRequestAndStop(_ backend: Backend) throws {
        let counter = RequestCounter()
        let context = try open(backend, interval: 100, counter: counter)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))  // synced, and its full checks done
        let watcher = LiveFetchContract.Watcher()
        let task = try context.makeFetch(liveRequest())
        try task.start(watcher.callback)
        _ = watcher.wait(for: 1)
        // Observers beside the live fetch: its listing brings their changes too, no refresh of theirs.
        let observers = try (0..<3).map { try context.object(entity: "items", id: "i\($0)").makeObserver(key: "Title") }
        for observer in observers { try observer.activate { _ in } }
        XCTAssertTrue(eventually(5) { counter.count(.changes) >= 1 }, "a round asked")
        usleep(700_000)
        let checks = (counter.count(.count), counter.count(.versionCheck), counter.count(.listing), counter.count(.byID))
        XCTAssertGreaterThanOrEqual(counter.count(.changes), 3, "rounds keep asking what changed")
        usleep(500_000)
        XCTAssertTrue((counter.count(.count), counter.count(.versionCheck), counter.count(.listing), counter.count(.byID)) == checks,
                      "idle rounds ask what changed, nothing else")
        XCTAssertEqual(watcher.seen.withLock { $0.count }, 1, "nothing changed: no answer")
        XCTAssertEqual(counter.count(.byID), 0, "the observers' objects came with the listings")
        for observer in observers { try observer.remove() }
        try task.cancel()
        _ = watcher.wait(for: 2)
        usleep(300_000)  // a round already on the wire ends
        let after = counter.total
        usleep(600_000)
        XCTAssertEqual(counter.total, after, "nothing watched: no round")
    }
}

extension PeriodicSyncContract {
    /// An interval no timer can hold is refused at open (it trapped a clock's addition).
    static func hugeIntervalsAreRefused(_ backend: Backend) throws {
        for interval in [Int64.max, ContextOptions.maximumIntervalMilliseconds + 1, -1] {
            XCTAssertThrowsError(try open(backend, interval: interval), "\(interval)") {
                XCTAssertEqual(($0 as? TetherError)?.kind, .invalid)
            }
        }
        XCTAssertEqual(MonotonicTime.now().adding(milliseconds: .max).nanoseconds, .max, "a clock's addition saturates")
    }

    /// A live fetch that answers from the cache only never makes the context ask the server.
    static func cacheOnlyLiveFetchAsksNothing(_ backend: Backend) throws {
        let counter = RequestCounter()
        let context = try open(backend, interval: 100, counter: counter)
        defer { try? context.close() }
        var request = liveRequest()
        request.policy = .cacheOnly
        let watcher = LiveFetchContract.Watcher()
        try context.makeFetch(request).start(watcher.callback)
        _ = watcher.wait(for: 1)
        try context.changed(entity: "items")
        usleep(700_000)
        XCTAssertEqual(counter.total, 0, "cache only: no request")
    }
}

final class KintoPeriodicSyncTests: KintoTestCase {
    func testCacheOnlyLiveFetchAsksNothing() throws { try PeriodicSyncContract.cacheOnlyLiveFetchAsksNothing(backend) }
    func testLiveFetchHearsAnotherClient() throws { try PeriodicSyncContract.liveFetchHearsAnotherClient(backend) }
    func testObserverHearsAnotherClient() throws { try PeriodicSyncContract.observerHearsAnotherClient(backend) }
    func testIntervalOffThenTheHostSays() throws { try PeriodicSyncContract.intervalOffThenTheHostSays(backend) }
    func testIdleRoundsAreOneRequestAndStop() throws { try PeriodicSyncContract.idleRoundsAreOneRequestAndStop(backend) }
}

final class MemoryPeriodicSyncTests: MemoryTestCase {
    func testHugeIntervalsAreRefused() throws { try PeriodicSyncContract.hugeIntervalsAreRefused(backend) }
    func testCacheOnlyLiveFetchAsksNothing() throws { try PeriodicSyncContract.cacheOnlyLiveFetchAsksNothing(backend) }
    func testLiveFetchHearsAnotherClient() throws { try PeriodicSyncContract.liveFetchHearsAnotherClient(backend) }
    func testObserverHearsAnotherClient() throws { try PeriodicSyncContract.observerHearsAnotherClient(backend) }
    func testIntervalOffThenTheHostSays() throws { try PeriodicSyncContract.intervalOffThenTheHostSays(backend) }
    func testIdleRoundsAreOneRequestAndStop() throws { try PeriodicSyncContract.idleRoundsAreOneRequestAndStop(backend) }
}
