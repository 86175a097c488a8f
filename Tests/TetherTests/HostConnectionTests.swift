import XCTest
@testable import Tether

/// A host-written connection in Swift, as a C or Python host writes one:
/// each request is read, then answered later from a thread of the host's
/// own, records as JSON text, through `HostRequest` alone. Its data is a
/// memory server's, which the host reaches through its own connection.
final class MemoryHost: @unchecked Sendable {
    let upstream: MemoryConnection
    private let queue = DispatchQueue(label: "memory host", attributes: .concurrent)
    /// Requests the host was told were cancelled.
    let cancelled = Lock(0)

    init(_ server: MemoryServer) { upstream = MemoryConnection(server) }

    deinit { upstream.shutdown() }

    func connection() throws -> HostConnection {
        try HostConnection(identity: "memory host \(upstream.server.name)", handlers: .init(
            send: { [self] request in queue.async { self.answer(request) } },
            cancel: { [self] _ in cancelled.withLock { $0 += 1 } }))
    }

    private static func json(_ fields: RecordFields) -> String { JSON.object(fields).serialized() }

    private func answer(_ request: HostRequest) {
        do {
            switch request.kind {
            case .serverInfo:
                try request.setServerInfo(name: "memory host", version: "1")
            case .specs:
                for spec in try upstream.wait(upstream.specs).get() { try request.addSpec(spec) }
            case .page, .records:
                let asked = request.pageRequest!
                let page = try (request.kind == .page
                    ? upstream.wait { self.upstream.page(asked, $0) }
                    : upstream.wait { self.upstream.records(asked.spec, ids: request.ids, cursor: asked.cursor, $0) }).get()
                let content = try page.decode()
                for record in content.records { try request.addRecord(json: Self.json(record)) }
                for id in content.deletedIDs { try request.addDeleted(id: id) }
                try request.setPage(next: page.next?.token, version: page.version, total: page.total)
            case .count:
                try request.setCount(try upstream.wait { self.upstream.count(request.pageRequest!, $0) }.get())
            case .write:
                let outcomes = ConditionLock<[WriteOutcome]>([])
                _ = upstream.write(request.writes) { run in outcomes.withLock { $0 += run } }
                let all = outcomes.withLock(when: { $0.count == request.writes.count }, until: nil) { value, _ in value }
                for (index, outcome) in all.enumerated() {
                    switch outcome {
                    case .written(let fields): try request.setOutcome(index, .written(Self.json(fields)))
                    case .deleted: try request.setOutcome(index, .deleted)
                    case .conflict(let current): try request.setOutcome(index, .conflict(current.map(Self.json)))
                    case .failed(let error): try request.setOutcome(index, .failed(error))
                    }
                }
            }
            try request.complete()
        } catch {
            try? request.complete(TetherError.wrap(error))
        }
    }
}

/// The memory backend's data set, reached through a host-written connection.
final class HostBackend: Backend {
    let memory: MemoryBackend
    let host: MemoryHost
    var storePath: String { memory.storePath + ".host" }

    init(directory: String) {
        memory = MemoryBackend(directory: directory)
        host = MemoryHost(memory.server)
    }

    func connection() throws -> any Connection { try host.connection() }
    func setTitle(_ id: String, _ title: String) throws { try memory.setTitle(id, title) }
    func setRank(_ id: String, _ rank: Int64) throws { try memory.setRank(id, rank) }
    func putItem(_ id: String, _ fields: String) throws { try memory.putItem(id, fields) }
    func deleteItem(_ id: String) throws { try memory.deleteItem(id) }
    func record(_ id: String) throws -> RecordFields? { try memory.record(id) }
    func loseHistory(syncedBy context: Context) throws { try memory.loseHistory(syncedBy: context) }
}

/// A test case with a new memory server behind a host-written connection.
class HostTestCase: DirectoryTestCase {
    var backend: HostBackend!

    override func setUpWithError() throws {
        try super.setUpWithError()
        backend = HostBackend(directory: directory)
    }

    override func tearDownWithError() throws {
        backend = nil
        try super.tearDownWithError()
    }
}

/// Everything above the connection is the core's, unchanged: the graph,
/// save and local store contracts hold over a host-written connection.
final class HostGraphTests: HostTestCase {
    func testFetchPagingAndUniquing() throws { try GraphContract.fetchPagingAndUniquing(backend) }
    func testPredicates() throws { try GraphContract.predicatesAnswerAlikeFromServerAndCache(backend) }
    func testGetRefreshesAndTellsObservers() throws { try GraphContract.getRefreshesAndTellsObserversOfBothForms(backend) }
    func testDeletedOnServerLeavesTheCache() throws { try GraphContract.deletedOnServerLeavesTheCache(backend) }
    func testGetOfARecordTheServerLacks() throws { try GraphContract.getOfARecordTheServerLacksTellsObservers(backend) }
    func testCancelDeliversOneFinalCancelled() throws { try GraphContract.cancelDeliversOneFinalCancelled(backend) }
    func testLifetimesFollowWhatIsHeld() throws { try GraphContract.lifetimesFollowWhatIsHeld(backend) }
    func testCloseEndsEveryRequestOnce() throws { try GraphContract.closeEndsEveryRequestOnce(backend) }
    func testObserverOfARecordDeletedBeforeHearsNothing() throws { try GraphContract.observerOfARecordDeletedBeforeHearsNothing(backend) }
    func testObserverWithoutAPeekJudgesByTheStore() throws { try GraphContract.observerWithoutAPeekJudgesByTheStore(backend) }
    func testEditSaveAndReopen() throws { try SaveContract.editSaveAndReopen(backend) }
    func testInsertAndDelete() throws { try SaveContract.insertAndDelete(backend) }
    func testConflictsAndPolicies() throws { try SaveContract.conflictsAndPolicies(backend) }
    func testConflictAfterReopen() throws { try SaveContract.conflictAfterReopen(backend) }
    func testAChangeAlreadyAppliedIsConfirmed() throws { try SaveContract.aChangeAlreadyAppliedIsConfirmed(backend) }
    func testCancelEndsOnceAndLosesNothing() throws { try SaveContract.cancelEndsOnceAndLosesNothing(backend) }
    func testLocalStores() throws { try LocalStoreContract.referencesFollowAServerDeletion(backend) }
}

/// A host that answers badly: never, twice, after a cancel, with records
/// that are not JSON objects, or not at all once the connection is gone.
final class HostMisbehaviourTests: XCTestCase {
    /// Keeps every request; answers only when told.
    final class Holder: @unchecked Sendable {
        let requests = ConditionLock<[HostRequest]>([])
        let cancels = Lock(0)
        let released = Lock(0)
        let ended = Lock(0)

        func connection() throws -> HostConnection {
            try HostConnection(identity: "holder", handlers: .init(
                send: { [self] request in requests.withLock { $0.append(request) } },
                cancel: { [self] _ in cancels.withLock { $0 += 1 } },
                ended: { [self] _ in ended.withLock { $0 += 1 } },
                release: { [self] in released.withLock { $0 += 1 } }))
        }

        func next(_ count: Int) -> HostRequest? {
            requests.withLock(when: { $0.count >= count }, until: MonotonicTime.now().adding(milliseconds: 5_000)) { value, _ in
                value.count >= count ? value[count - 1] : nil
            }
        }
    }

    static let spec = Spec(name: "items", route: "items", idField: "id", versionField: "v", fields: [], operations: .all)

    func testEachRequestEndsOnceWhateverTheHostDoes() throws {
        let holder = Holder()
        let connection = try holder.connection()
        let answers = Lock<[Result<Page, TetherError>]>([])

        // Answered twice: the second is refused.
        _ = connection.page(PageRequest(spec: Self.spec)) { result in answers.withLock { $0.append(result) } }
        let first = try XCTUnwrap(holder.next(1))
        XCTAssertEqual(first.kind, .page)
        XCTAssertEqual(first.spec?.name, "items")
        XCTAssertThrowsError(try first.addRecord(json: "[1]")) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        XCTAssertThrowsError(try first.addRecord(json: "{")) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        XCTAssertThrowsError(try first.setCount(1)) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        try first.addRecord(json: #"{"id": "a", "v": 1}"#)
        try first.complete()
        XCTAssertThrowsError(try first.complete()) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        XCTAssertThrowsError(try first.addRecord(json: "{}")) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        XCTAssertTrue(eventually { answers.withLock { $0.count } == 1 })
        XCTAssertEqual(try answers.withLock { $0[0] }.get().decode().records.count, 1)

        // Cancelled, then answered: the core has its one .cancelled; the host is told both ways.
        let second = connection.page(PageRequest(spec: Self.spec)) { result in answers.withLock { $0.append(result) } }
        let held = try XCTUnwrap(holder.next(2))
        second.cancel()
        second.cancel()
        XCTAssertTrue(eventually { holder.cancels.withLock { $0 } == 1 }, "the host hears of the cancel once")
        XCTAssertEqual(answers.withLock { $0.count }, 2)
        XCTAssertEqual(answers.withLock { $0[1] }.failureKind, .cancelled)
        XCTAssertThrowsError(try held.addRecord(json: "{}")) { XCTAssertEqual(($0 as? TetherError)?.kind, .cancelled) }
        XCTAssertThrowsError(try held.complete()) { XCTAssertEqual(($0 as? TetherError)?.kind, .cancelled) }
        XCTAssertEqual(holder.ended.withLock { $0 }, 2, "each completed request is over for the host")

        // Never answered: shutdown ends it, tells the host, and releases it once.
        _ = connection.count(PageRequest(spec: Self.spec)) { result in answers.withLock { $0.append(result.map { _ in Page(next: nil) { PageContent(records: []) } }) } }
        let never = try XCTUnwrap(holder.next(3))
        connection.shutdown()
        XCTAssertEqual(answers.withLock { $0.count }, 3)
        XCTAssertEqual(answers.withLock { $0[2] }.failureKind, .cancelled)
        XCTAssertEqual(holder.cancels.withLock { $0 }, 2)
        XCTAssertEqual(holder.ended.withLock { $0 }, 3)
        XCTAssertEqual(holder.released.withLock { $0 }, 1)
        XCTAssertThrowsError(try never.complete()) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        connection.shutdown()
        XCTAssertEqual(holder.released.withLock { $0 }, 1, "released once")

        // After shutdown a request ends cancelled without reaching the host.
        _ = connection.serverInfo { result in answers.withLock { $0.append(.failure(result.failureKind == .cancelled ? .cancelled : TetherError(.internal, "?"))) } }
        XCTAssertEqual(answers.withLock { $0.count }, 4)
        XCTAssertEqual(holder.requests.withLock { $0.count }, 3)
    }

    /// A context over a host that never answers still opens offline from
    /// its store, cancels and closes.
    func testAContextOverASilentHostStillCancelsAndCloses() throws {
        let directory = try makeTemporaryDirectory("silent")
        defer { removeDirectory(directory) }
        let holder = Holder()
        let opened = Lock<Context?>(nil)
        let opening = Thread {
            opened.withLock { $0 = try? Context.open(ContextOptions(storePath: directory + "/s.sqlite"), connection: try! holder.connection()) }
        }
        opening.start()
        let info = try XCTUnwrap(holder.next(1))
        try info.setServerInfo(name: "silent", version: "0")
        try info.complete()
        let specs = try XCTUnwrap(holder.next(2))
        try specs.addSpec(name: "items", idField: "id", versionField: "v", schema: #"{"properties": {"Title": {"type": "string"}}}"#,
                          operations: .all)
        XCTAssertThrowsError(try specs.addSpec(name: "x", idField: "id", versionField: "v", schema: "[]", operations: .all))
        try specs.complete()
        XCTAssertTrue(eventually { opened.withLock { $0 } != nil })
        let context = try XCTUnwrap(opened.withLock { $0 })
        let results = ConditionLock<[FetchResult]>([])
        let task = try context.makeFetch(FetchRequest(entity: "items"))
        try task.start { result in results.withLock { $0.append(result) } }
        XCTAssertNotNil(holder.next(3), "the page request reached the host")
        try task.cancel()
        XCTAssertTrue(eventually { results.withLock { $0.last?.phase == .final } })
        XCTAssertEqual(results.withLock { $0.last?.error?.kind }, .cancelled)
        XCTAssertThrowsError(try context.object(entity: "items", id: "a").get("Title"))  // starts a refresh the host never answers
        XCTAssertNotNil(holder.next(4))
        try context.close()
        XCTAssertEqual(holder.released.withLock { $0 }, 1)
    }
}
