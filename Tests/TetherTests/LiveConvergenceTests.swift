import XCTest
@testable import Tether

/// A connection whose first listing page is held (its answer already read
/// from the server) until `release()`: a live fetch's own listing then lands
/// after other writes, as on a slow network.
final class HeldPageConnection: Connection, @unchecked Sendable {
    let inner: any Connection
    private let state = ConditionLock<(held: (@Sendable () -> Void)?, answered: Bool, released: Bool, first: Bool)>(
        (nil, false, false, true))
    init(_ inner: any Connection) { self.inner = inner }

    /// Waits until the held page's answer has come from the server.
    func waitUntilAnswered() -> Bool {
        state.withLock(when: { $0.answered }, until: MonotonicTime.now().adding(milliseconds: 10_000)) { v, _ in v.answered }
    }

    func release() {
        let held = state.withLock { state -> (@Sendable () -> Void)? in
            state.released = true
            defer { state.held = nil }
            return state.held
        }
        if let held { Thread.detachNewThread { held() } }
    }

    var identity: String { inner.identity }
    var formerIdentities: [String] { inner.formerIdentities }
    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        inner.serverInfo(done)
    }
    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable { inner.specs(done) }
    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let holds = state.withLock { state -> Bool in
            defer { state.first = false }
            return state.first
        }
        guard holds else { return inner.page(request, done) }
        return inner.page(request) { [self] result in
            let now = state.withLock { state -> Bool in
                state.answered = true
                if state.released { return true }
                state.held = { done(result) }
                return false
            }
            if now { done(result) }
        }
    }
    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        inner.count(request, done)
    }
    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.records(spec, ids: ids, cursor: cursor, done)
    }
    func idBatches(_ ids: [String]) -> [[String]] { inner.idBatches(ids) }
    func supports(_ filter: Filter) -> Bool { inner.supports(filter) }
    func filtersExactly(_ filter: Filter) -> Bool { inner.filtersExactly(filter) }
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        inner.write(writes, answered)
    }
    func shutdown() { inner.shutdown() }
}

/// Delays each page's answer by up to `maxMilliseconds`, on a thread of its
/// own: fetches running together land their pages in varied orders.
final class JitterConnection: Connection, @unchecked Sendable {
    let inner: any Connection
    let maxMilliseconds: UInt32
    init(_ inner: any Connection, maxMilliseconds: UInt32) {
        self.inner = inner
        self.maxMilliseconds = maxMilliseconds
    }

    private func later<T>(_ done: @escaping @Sendable (T) -> Void) -> @Sendable (T) -> Void {
        { [maxMilliseconds] value in
            let box = UncheckedBox(value)
            Thread.detachNewThread {
                usleep(UInt32.random(in: 0...maxMilliseconds) * 1000)
                done(box.value)
            }
        }
    }

    var identity: String { inner.identity }
    var formerIdentities: [String] { inner.formerIdentities }
    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        inner.serverInfo(done)
    }
    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable { inner.specs(done) }
    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.page(request, later(done))
    }
    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        inner.count(request, done)
    }
    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        inner.records(spec, ids: ids, cursor: cursor, later(done))
    }
    func idBatches(_ ids: [String]) -> [[String]] { inner.idBatches(ids) }
    func supports(_ filter: Filter) -> Bool { inner.supports(filter) }
    func filtersExactly(_ filter: Filter) -> Bool { inner.filtersExactly(filter) }
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        inner.write(writes, answered)
    }
    func shutdown() { inner.shutdown() }
}

private struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// Live fetches converge on the query over the store; one meaning per live
/// fetch; CACHE_ELSE_SERVER answers from the cache only where it can.
enum LiveConvergenceContract {
    typealias Watcher = LiveFetchContract.Watcher

    /// Issue 29, case 1: the live fetch's own listing lands after another
    /// fetch stored the records it misses; its last answer still holds them.
    static func liveFetchSeesWritesMadeDuringItsListing(_ backend: Backend) throws {
        var held: HeldPageConnection?
        let context = try backend.open(wrapping: { connection in
            let wrapped = HeldPageConnection(connection)
            held = wrapped
            return wrapped
        })
        defer { try? context.close() }
        let gate = try XCTUnwrap(held)
        var request = FetchRequest(entity: "items")
        // Filtered by the server: the listing is one page, read before the PUTs.
        request.predicate = "Rank >= 1000"
        request.sort = "Rank"
        request.policy = .serverOnly
        request.live = true
        let watcher = Watcher()
        let task = try context.makeFetch(request)
        try task.start(watcher.callback)
        XCTAssertTrue(gate.waitUntilAnswered(), "the live fetch's listing was answered (and held)")
        for index in 0..<3 { try backend.putItem("r\(index)", #"{"Title": "a\#(index)", "Rank": \#(1000 + index)}"#) }
        let full = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertNil(full.last?.error)
        gate.release()
        let want = ["r0", "r1", "r2"]
        XCTAssertTrue(eventually { LiveFetchContract.ids(watcher.seen.withLock { $0.last }) == want },
                      "the live fetch's last answer: \(LiveFetchContract.ids(watcher.seen.withLock { $0.last }))")
        // Each answer's changes take the one before to it.
        let answers = watcher.seen.withLock { $0 }
        for (old, new) in zip(answers, answers.dropFirst()) {
            let changes = try XCTUnwrap(new.results.changes)
            XCTAssertEqual(LiveConvergence.apply(changes, LiveFetchContract.ids(old), LiveFetchContract.ids(new)),
                           LiveFetchContract.ids(new))
        }
        try task.cancel()
    }

    /// Issue 29, case 7: a live fetch follows the cache, so a server query,
    /// which only the server can answer, is refused for it.
    static func liveFetchRefusesAServerQuery(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        var request = FetchRequest(entity: "items")
        request.predicate = "Rank < 3"
        request.serverQuery = "in_Rank=5,6"
        request.live = true
        XCTAssertThrowsError(try context.makeFetch(request)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .invalid)
            XCTAssertTrue("\(error)".contains("server query"), "\(error)")
        }
        request.live = false
        XCTAssertNoThrow(try context.makeFetch(request), "a one-shot fetch takes it")
    }

    /// Issue 29, case 9: before the entity is synced, the cache holds what
    /// earlier answers brought: CACHE_ELSE_SERVER asks the server.
    static func cacheElseServerAsksUntilSynced(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        var one = FetchRequest(entity: "items")
        one.predicate = "Rank >= 100"
        one.sort = "Rank"
        one.limit = 1
        one.policy = .serverOnly
        XCTAssertEqual(try fetch(context, one).last?.objects.map(\.id), ["i100"])

        var request = FetchRequest(entity: "items")
        request.predicate = "Rank >= 100"
        request.sort = "Rank"
        request.policy = .cacheElseServer
        XCTAssertEqual(try fetch(context, request).last?.objects.map(\.id), (100..<itemCount).map { "i\($0)" })
        request.resultType = .count
        XCTAssertEqual(try fetch(context, request).last?.results.count, itemCount - 100)
        var whole = FetchRequest(entity: "items")
        whole.policy = .cacheElseServer
        XCTAssertEqual(try fetch(context, whole).last?.objects.count, itemCount, "the whole collection, not the cached part")

        // Synced: the cache answers, without the server.
        try backend.setRank("i5", 5000)
        XCTAssertEqual(try fetch(context, request).last?.results.count, itemCount - 100, "from the cache")
        request.policy = .serverOnly
        XCTAssertEqual(try fetch(context, request).last?.results.count, itemCount - 99, "the server's")
    }
}

/// The model-based random test: seeded server changes through the
/// server's API, fetches under every policy, live fetches kept open and
/// reopens; every answer is checked against a model of the server.
enum LiveConvergence {
    /// `old` with `changes` applied (deletions descending, then insertions
    /// ascending; a move is both), taking inserted ids from `new`.
    static func apply(_ changes: ResultChanges, _ old: [String], _ new: [String]) -> [String] {
        var rows = old
        for index in (changes.deleted + changes.moved.map(\.from)).sorted(by: >) where index < rows.count {
            rows.remove(at: index)
        }
        for (index, id) in (changes.inserted.map { ($0, new[$0]) } + changes.moved.map { ($0.to, new[$0.to]) })
            .sorted(by: { $0.0 < $1.0 }) where index <= rows.count {
            rows.insert(id, at: index)
        }
        return rows
    }

    struct Item: Equatable {
        var title: String
        var rank: Int64
    }

    /// The live queries kept open: a predicate over the model, its text, and a sort.
    struct Query {
        let text: String?
        let matches: (Item) -> Bool
        let limit: Int64
    }

    static let queries: [Query] = [
        Query(text: nil, matches: { _ in true }, limit: 0),
        Query(text: "Title BEGINSWITH 'a'", matches: { $0.title.hasPrefix("a") }, limit: 0),
        Query(text: "Rank < 20", matches: { $0.rank < 20 }, limit: 0),
        Query(text: "Rank >= 10", matches: { $0.rank >= 10 }, limit: 5),
    ]

    /// The reference: ids of the model's matches, by Rank then id.
    static func reference(_ model: [String: Item], _ query: Query) -> [String] {
        let sorted = model.filter { query.matches($0.value) }
            .sorted { $0.value.rank != $1.value.rank ? $0.value.rank < $1.value.rank
                                                     : Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
            .map(\.key)
        return query.limit > 0 ? Array(sorted.prefix(Int(query.limit))) : sorted
    }

    /// A seeded generator (SplitMix64): a failing seed replays.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A live fetch kept open, its answers checked as they come.
    final class Live: Sendable {
        let query: Int
        let task: FetchTask
        let problems = Lock<[String]>([])
        let last = ConditionLock<(ids: [String], answers: Int)>(([], 0))

        init(_ context: Context, query: Int, policy: CachePolicy) throws {
            self.query = query
            var request = FetchRequest(entity: "items")
            request.predicate = LiveConvergence.queries[query].text
            request.sort = "Rank"
            request.limit = LiveConvergence.queries[query].limit
            request.policy = policy
            request.live = true
            task = try context.makeFetch(request)
            try task.start { [self] result in
                guard result.phase != .final else { return }
                let ids = result.objects.map(\.id)
                last.withLock { last in
                    if result.phase == .live, let changes = result.results.changes {
                        let applied = LiveConvergence.apply(changes, last.ids, ids)
                        if applied != ids {
                            problems.withLock { $0.append("query \(query): \(last.ids) + \(changes) gave \(applied), not \(ids)") }
                        }
                    }
                    last.ids = ids
                    last.answers += 1
                }
            }
        }
    }

    /// Runs seeded steps for `seconds`; returns the failures (with the seed and step).
    static func run(_ backend: KintoBackend, seed: UInt64, steps maxSteps: Int, seconds: Double) throws -> [String] {
        var random = Seeded(state: seed)
        var model: [String: Item] = [:]
        for rank in 0..<itemCount { model["i\(rank)"] = Item(title: "item \(rank)", rank: Int64(rank)) }
        var deleted: [String] = []
        let jitter = { (connection: any Connection) -> any Connection in JitterConnection(connection, maxMilliseconds: 15) }
        var context = try backend.open(wrapping: jitter)
        defer { try? context.close() }
        var lives = try (0..<queries.count).map { try Live(context, query: $0, policy: [.serverOnly, .cacheThenServer][$0 % 2]) }
        let policies: [CachePolicy] = [.cacheOnly, .serverOnly, .cacheThenServer, .cacheElseServer]
        var failures: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        var step = 0
        var log: [String] = []
        while step < maxSteps && Date() < deadline && failures.isEmpty {
            step += 1
            switch Int.random(in: 0..<11, using: &random) {
            case 0, 1:  // create or update
                let id = "r\(Int.random(in: 0..<30, using: &random))"
                let item = Item(title: ["a", "b", "ab"].randomElement(using: &random)! + "\(step)", rank: Int64.random(in: 0..<40, using: &random))
                try backend.putItem(id, #"{"Title": "\#(item.title)", "Rank": \#(item.rank)}"#)
                model[id] = item
                log.append("put \(id) \(item)")
            case 2:  // delete
                guard let id = model.keys.sorted().randomElement(using: &random) else { continue }
                try backend.deleteItem(id)
                model[id] = nil
                deleted.append(id)
                log.append("delete \(id)")
            case 3:  // re-create a deleted id
                guard let id = deleted.randomElement(using: &random) else { continue }
                let item = Item(title: "a again \(step)", rank: Int64.random(in: 0..<40, using: &random))
                try backend.putItem(id, #"{"Title": "\#(item.title)", "Rank": \#(item.rank)}"#)
                model[id] = item
                deleted.removeAll { $0 == id }
                log.append("re-create \(id)")
            case 4:  // a batch
                var requests: [String] = []
                for _ in 0..<Int.random(in: 2...6, using: &random) {
                    let id = "b\(Int.random(in: 0..<15, using: &random))"
                    if Bool.random(using: &random), model[id] != nil {
                        requests.append(#"{"method": "DELETE", "path": "/buckets/\#(backend.bucket)/collections/items/records/\#(id)"}"#)
                        model[id] = nil
                    } else {
                        let item = Item(title: "ab\(step)", rank: Int64.random(in: 0..<40, using: &random))
                        requests.append(#"{"method": "PUT", "path": "/buckets/\#(backend.bucket)/collections/items/records/\#(id)", "body": {"data": {"Title": "\#(item.title)", "Rank": \#(item.rank)}}}"#)
                        model[id] = item
                    }
                }
                try backend.send("POST", "/batch", #"{"requests": [\#(requests.joined(separator: ","))]}"#)
                log.append("batch of \(requests.count)")
            case 5, 6, 7:  // a fetch under a random policy and query
                let query = queries.randomElement(using: &random)!
                var request = FetchRequest(entity: "items")
                request.predicate = query.text
                request.sort = "Rank"
                request.limit = query.limit
                request.policy = policies.randomElement(using: &random)!
                let answers = try fetch(context, request)
                log.append("fetch \(query.text ?? "all") \(request.policy)")
                // Only the server's answers are whole (the cache's are checked
                // after a sync); with a limit, the server's order of ties makes the cut.
                if request.policy == .serverOnly || request.policy == .cacheThenServer, query.limit == 0,
                   answers.last?.error == nil {
                    let got = answers.last?.objects.map(\.id) ?? []
                    if got != reference(model, query) {
                        failures.append("step \(step): \(query.text ?? "all") \(request.policy): \(got), want \(reference(model, query))")
                    }
                }
            case 8:  // reopen: live fetches end, and start again
                for live in lives { try? live.task.cancel() }
                try context.close()
                context = try backend.open(wrapping: jitter)
                lives = try (0..<queries.count).map { try Live(context, query: $0, policy: [.serverOnly, .cacheThenServer][$0 % 2]) }
                log.append("reopen")
            case 9:  // a live fetch starts again, its listing racing the next steps' writes
                let index = Int.random(in: 0..<lives.count, using: &random)
                try? lives[index].task.cancel()
                lives[index] = try Live(context, query: index, policy: policies.randomElement(using: &random)!)
                log.append("restart live \(index)")
                if Bool.random(using: &random) {  // and a sync while its listing runs
                    _ = try fetch(context, FetchRequest(entity: "items"))
                    log.append("sync")
                }
            default:  // a sync: every live fetch converges on the server's state
                let answers = try fetch(context, FetchRequest(entity: "items"))
                log.append("sync")
                guard answers.last?.error == nil else { failures.append("step \(step): sync failed \(answers.last!.error!)"); break }
                for live in lives {
                    let want = reference(model, queries[live.query])
                    let converged = eventually(5) { live.last.withLock { $0.ids } == want }
                    if !converged {
                        failures.append("step \(step): live query \(queries[live.query].text ?? "all") stopped at "
                                        + "\(live.last.withLock { $0.ids }), want \(want)")
                    }
                }
            }
            for live in lives { failures += live.problems.withLock { $0 } }
        }
        if !failures.isEmpty { failures.append("seed \(seed), steps: " + log.joined(separator: "; ")) }
        print("live convergence: seed \(seed), \(step) steps, \(failures.isEmpty ? "converged" : "FAILED")")
        fflush(stdout)
        return failures
    }
}

final class KintoLiveConvergenceTests: KintoTestCase {
    func testLiveFetchSeesWritesMadeDuringItsListing() throws {
        try LiveConvergenceContract.liveFetchSeesWritesMadeDuringItsListing(backend)
    }
    func testLiveFetchRefusesAServerQuery() throws { try LiveConvergenceContract.liveFetchRefusesAServerQuery(backend) }
    func testCacheElseServerAsksUntilSynced() throws { try LiveConvergenceContract.cacheElseServerAsksUntilSynced(backend) }

    /// A few seconds in `make test`; TETHER_LIVE_SECONDS (scripts/fuzz live) for longer.
    func testRandomChangesConverge() throws {
        let seconds = Double(ProcessInfo.processInfo.environment["TETHER_LIVE_SECONDS"] ?? "") ?? 8
        let seed = UInt64(ProcessInfo.processInfo.environment["TETHER_LIVE_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        let failures = try LiveConvergence.run(backend, seed: seed, steps: .max, seconds: seconds)
        guard !failures.isEmpty else { return }
        // The smallest failing run of this seed: fewer steps, each on a fresh bucket.
        var shortest = failures
        let failedAt = failures.compactMap { $0.split(separator: " ").dropFirst().first.flatMap { Int($0.dropLast()) } }.min() ?? 0
        var low = 1, high = failedAt
        while low < high {
            let middle = (low + high) / 2
            let attempt = try LiveConvergence.run(try KintoBackend(directory: try makeTemporaryDirectory("live-shrink")),
                                                  seed: seed, steps: middle, seconds: 600)
            if attempt.isEmpty { low = middle + 1 } else { high = middle; shortest = attempt }
        }
        XCTFail("live fetches diverged (replay: TETHER_LIVE_SEED=\(seed)):\n" + shortest.joined(separator: "\n"))
    }
}

final class MemoryLiveConvergenceTests: MemoryTestCase {
    func testLiveFetchSeesWritesMadeDuringItsListing() throws {
        try LiveConvergenceContract.liveFetchSeesWritesMadeDuringItsListing(backend)
    }
    func testCacheElseServerAsksUntilSynced() throws { try LiveConvergenceContract.cacheElseServerAsksUntilSynced(backend) }
}
