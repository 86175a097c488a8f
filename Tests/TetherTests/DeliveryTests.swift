import XCTest
@testable import Tether

/// Callbacks run under no lock an API call waits on.
final class DeliveryTests: XCTestCase {
    /// Each context's callback cancels the other's task while the other's
    /// callback is running: with a callback lock held across callbacks this
    /// deadlocked (0.1); now a cancel from inside a callback does not wait.
    func testCallbacksCancellingEachOthersTasksDoNotDeadlock() throws {
        let directory = try makeTemporaryDirectory("delivery")
        defer { removeDirectory(directory) }
        let left = try MemoryBackend(directory: directory + "/l", latencyMilliseconds: 300).openCreatingDirectory()
        let right = try MemoryBackend(directory: directory + "/r", latencyMilliseconds: 300).openCreatingDirectory()
        defer {
            try? left.close()
            try? right.close()
        }
        let finals = ConditionLock<[String: TetherError.Kind?]>([:])
        func record(_ name: String) -> @Sendable (FetchResult) -> Void {
            { result in if result.phase == .final { finals.withLock { $0[name] = result.error?.kind } } }
        }
        // Long fetches, each to be cancelled from the other context's callback.
        let leftSlow = try left.makeFetch(FetchRequest(entity: "items"))
        try leftSlow.start(record("leftSlow"))
        let rightSlow = try right.makeFetch(FetchRequest(entity: "items"))
        try rightSlow.start(record("rightSlow"))
        // Both arrive in their cached phase at once; each waits for the other
        // to be inside its callback, then cancels the other's slow fetch.
        let inside = ConditionLock(0)
        func crossing(_ other: FetchTask) -> @Sendable (FetchResult) -> Void {
            { result in
                guard result.phase == .cached else { return }
                inside.withLock { $0 += 1 }
                _ = inside.withLock(when: { $0 >= 2 }, until: MonotonicTime.now().adding(milliseconds: 2_000)) { _, _ in }
                try? other.cancel()
            }
        }
        try left.makeFetch(FetchRequest(entity: "items")).start(crossing(rightSlow))
        try right.makeFetch(FetchRequest(entity: "items")).start(crossing(leftSlow))
        let both = finals.withLock(when: { $0.count == 2 }, until: MonotonicTime.now().adding(milliseconds: 5_000)) { value, _ in value }
        XCTAssertEqual(both["leftSlow"], .some(.cancelled))
        XCTAssertEqual(both["rightSlow"], .some(.cancelled))
    }

    /// A fetch's final (OK, with its answer) is being delivered on the
    /// library's thread as another thread closes the context: the callback
    /// still reads the answer's objects, made as it reads them. They were
    /// refused as "the context is closed" (ctsan's test_lifetimes caught one
    /// such cycle in 250, under load).
    func testAFinalBeingDeliveredAsTheContextClosesReadsItsAnswer() throws {
        let directory = try makeTemporaryDirectory("close-final")
        defer { removeDirectory(directory) }
        let context = try MemoryBackend(directory: directory, latencyMilliseconds: 0).openCreatingDirectory(.thread)
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        let inside = ConditionLock(false)
        let read = Lock<[String]>([])
        try context.makeFetch(request).start { result in
            guard result.phase == .final, result.error == nil else { return }
            inside.withLock { $0 = true }
            // Reads once the close has begun (it waits for this callback to end).
            _ = eventually { context.isClosed }
            for index in 0..<result.results.count {
                read.withLock { $0.append((try? result.results.object(at: index).id) ?? "refused") }
            }
        }
        XCTAssertTrue(inside.withLock(when: { $0 }, until: MonotonicTime.now().adding(milliseconds: 5_000)) { value, _ in value })
        try context.close()
        let ids = read.withLock { $0 }
        XCTAssertFalse(ids.isEmpty)
        XCTAssertFalse(ids.contains("refused"), "\(ids)")
    }

    /// A thread blocked in poll returns when another thread closes the
    /// context, and the closer delivers the finals.
    func testCloseWakesABlockedPoller() throws {
        let directory = try makeTemporaryDirectory("poll")
        defer { removeDirectory(directory) }
        let context = try MemoryBackend(directory: directory, latencyMilliseconds: 1_000).openCreatingDirectory(.poll)
        var request = FetchRequest(entity: "items")
        request.policy = .serverOnly
        let final = ConditionLock<TetherError.Kind??>(nil)
        try context.makeFetch(request).start { result in final.withLock { $0 = .some(result.error?.kind) } }
        let returned = ConditionLock(false)
        let poller = Thread {
            _ = try? context.poll(timeoutMilliseconds: -1)
            returned.withLock { $0 = true }
        }
        poller.start()
        usleep(100_000)
        try context.close()
        XCTAssertTrue(returned.withLock(when: { $0 }, until: MonotonicTime.now().adding(milliseconds: 3_000)) { value, _ in value })
        XCTAssertEqual(final.withLock { $0 }, .some(.cancelled))
        XCTAssertThrowsError(try context.poll(timeoutMilliseconds: 0)) { XCTAssertEqual(($0 as? TetherError)?.kind, .closed) }
    }

    /// Closes racing each other: the second returned at once while the first
    /// was still delivering finals, so callbacks ran after it returned, and
    /// the C boundary freed the observers' key strings under them (the C
    /// stress test's find). Now one closes; the others wait, then fail.
    func testClosesRacingEachOtherWaitForTheOne() throws {
        for mode in [DeliveryMode.thread, .poll] {
            let directory = try makeTemporaryDirectory("closes")
            defer { removeDirectory(directory) }
            let context = try MemoryBackend(directory: directory, latencyMilliseconds: 200).openCreatingDirectory(mode)
            // Finals that take a while, so a close is long under way.
            let lastCallback = ConditionLock<MonotonicTime?>(nil)
            for _ in 0..<20 {
                try context.makeFetch(FetchRequest(entity: "items")).start { result in
                    guard result.phase == .final else { return }
                    usleep(5_000)
                    lastCallback.withLock { $0 = MonotonicTime.now() }
                }
            }
            usleep(50_000)
            let outcomes = ConditionLock<[(ok: Bool, kind: TetherError.Kind?, returned: MonotonicTime)]>([])
            let threads = (0..<4).map { _ in
                Thread {
                    let outcome: (Bool, TetherError.Kind?)
                    do { try context.close(); outcome = (true, nil) } catch { outcome = (false, (error as? TetherError)?.kind) }
                    outcomes.withLock { $0.append((outcome.0, outcome.1, MonotonicTime.now())) }
                }
            }
            threads.forEach { $0.start() }
            let all = outcomes.withLock(when: { $0.count == 4 }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { value, _ in value }
            XCTAssertEqual(all.count, 4, "\(mode): every close returned")
            XCTAssertEqual(all.filter(\.ok).count, 1, "\(mode): one close did the work")
            XCTAssertEqual(all.filter { !$0.ok }.map(\.kind), [.closed, .closed, .closed], "\(mode)")
            let last = try XCTUnwrap(lastCallback.withLock { $0 }, "\(mode): the finals came")
            XCTAssertTrue(all.allSatisfy { last < $0.returned }, "\(mode): no callback after any close returned")
        }
    }
}

extension MemoryBackend {
    func openCreatingDirectory(_ mode: DeliveryMode = .thread) throws -> Context {
        let directory = String(storePath.dropLast("/memory.sqlite".count))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return try open(mode)
    }
}
