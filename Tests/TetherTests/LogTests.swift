import XCTest
import Synchronization
@testable import Tether

/// The core's log: levels, the autoclosure that is never run when off, the
/// swap of sinks, what messages may say, and the messages of a real session.
final class LogTests: XCTestCase {
    /// What a sink was given.
    final class Recorder: @unchecked Sendable {
        let lines = Lock<[(level: LogLevel, category: LogCategory, message: String)]>([])
        var sink: Log.Sink { { [self] level, category, message in lines.withLock { $0.append((level, category, message)) } } }
        var all: [(level: LogLevel, category: LogCategory, message: String)] { lines.withLock { $0 } }
        func messages(_ category: LogCategory) -> [String] { all.filter { $0.category == category }.map(\.message) }
    }

    override func tearDown() {
        try? Log.install(.off, nil)
    }

    func testOffByDefaultAndNothingBuiltWhenOff() throws {
        try Log.install(.off, nil)
        XCTAssertEqual(Log.level, .off)
        for level in LogLevel.allCases where level != .off { XCTAssertFalse(Log.isEnabled(level)) }
        Log.error(.http, built("an error with no sink"))
        Log.debug(.http, built("a debug message with no sink"))

        let recorder = Recorder()
        try Log.install(.warning, recorder.sink)
        Log.info(.store, built("an info message under a warning sink"))
        Log.debug(.store, built("a debug message under a warning sink"))
        XCTAssertTrue(recorder.all.isEmpty)

        // A sink given with the level off is no sink.
        try Log.install(.off, recorder.sink)
        XCTAssertEqual(Log.level, .off)
        Log.error(.store, built("an error with the level off"))
        XCTAssertTrue(recorder.all.isEmpty)
    }

    /// A message that fails the test if it is ever built.
    private func built(_ what: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        XCTFail("message built although its level is off: \(what)", file: file, line: line)
        return what
    }

    /// Issue 39: an SQL-style LIKE ('Fix%') matched nothing, silently. It
    /// is logged at WARNING, naming * and ?, once per predicate text, and
    /// the message holds no value (the pattern may be one).
    func testSQLStyleLikeIsWarnedOncePerText() throws {
        let spec = Spec(name: "changes", route: "c", idField: "id", versionField: "v",
                        fields: [FieldSpec(name: "Description", type: .text)], operations: .all)
        let entity = ModelBuilder.build(specs: [spec], previous: nil).entities[0]
        let recorder = Recorder()
        try Log.install(.warning, recorder.sink)
        let unique = String(UInt64.random(in: 0..<UInt64.max))  // the memory of texts is process-wide
        let sqlStyle = ["Description LIKE 'Fix\(unique)%'", "Description LIKE[c] 'a_\(unique)'",
                        "NOT (Description == 'x' OR Description LIKE 'a\\*\(unique)%')",
                        "Description LIKE $1"]
        for text in sqlStyle + sqlStyle {
            _ = try Predicate.parse(text, entity: entity, arguments: text.contains("$1") ? [.text("\(unique)%")] : [])
        }
        let warnings = recorder.all.filter { $0.level == .warning }.map(\.message)
        XCTAssertEqual(warnings.count, sqlStyle.count, "once per text: \(warnings)")
        for message in warnings {
            XCTAssertTrue(message.contains("LIKE on changes.Description") && message.contains("* (any run) and ? (one character)"),
                          message)
            XCTAssertFalse(message.contains(unique), "no value in the message: \(message)")
        }
        for text in ["Description LIKE 'Fix*\(unique)%'", "Description LIKE '\(unique)?_'", "Description LIKE 'plain\(unique)'",
                     "Description BEGINSWITH 'Fix\(unique)%'"] {
            _ = try Predicate.parse(text, entity: entity)
        }
        XCTAssertEqual(recorder.all.count, sqlStyle.count, "a pattern with * or ?, or no LIKE, is not warned of")
    }

    /// Kinto repeats Backoff on every answer while it holds: logged at INFO
    /// when a backoff begins, not once per answer (the header says so).
    func testBackoffIsLoggedWhenItBegins() throws {
        let recorder = Recorder()
        try Log.install(.info, recorder.sink)
        let backoff = ServerBackoff()
        let answer = HTTPResponse(status: 200, headers: [("Backoff", "5")], body: [])
        for _ in 0..<4 { backoff.heed(answer) }
        XCTAssertEqual(recorder.messages(.http).filter { $0.contains("back off") }.count, 1, "\(recorder.messages(.http))")
        XCTAssertGreaterThan(backoff.remainingMilliseconds(), 4_000, "each answer moves the end on")
    }

    func testLevelsFilter() throws {
        let recorder = Recorder()
        try Log.install(.info, recorder.sink)
        XCTAssertEqual(Log.level, .info)
        Log.error(.http, "e")
        Log.warning(.sync, "w")
        Log.info(.save, "i")
        Log.debug(.store, "d")
        Log.at(.info, .migration, "at info")
        Log.at(.debug, .migration, "at debug")
        XCTAssertEqual(recorder.all.map(\.message), ["e", "w", "i", "at info"])
        XCTAssertEqual(recorder.all.map(\.level), [.error, .warning, .info, .info])
        XCTAssertEqual(recorder.all.map(\.category), [.http, .sync, .save, .migration])

        try Log.install(.debug, recorder.sink)
        Log.debug(.store, "d")
        XCTAssertEqual(recorder.all.last?.message, "d")
        try Log.install(.error, recorder.sink)
        Log.warning(.store, "not this")
        XCTAssertEqual(recorder.all.last?.message, "d")
    }

    /// The sink cannot change the log (that would wait for itself), and a
    /// message it causes on its own thread is dropped, not a deadlock.
    func testInsideTheSink() throws {
        let outcome = Lock<(installError: TetherError.Kind?, nested: Int, calls: Int)>((nil, 0, 0))
        try Log.install(.debug) { _, _, message in
            outcome.withLock { $0.calls += 1 }
            if message == "nested" { outcome.withLock { $0.nested += 1 }; return }
            Log.info(.http, "nested")
            do { try Log.install(.off, nil) } catch { outcome.withLock { $0.installError = (error as? TetherError)?.kind } }
        }
        Log.info(.http, "outer")
        let seen = outcome.withLock { $0 }
        XCTAssertEqual(seen.installError, .busy)
        XCTAssertEqual(seen.nested, 0, "a message logged inside the sink is dropped")
        XCTAssertEqual(seen.calls, 1)
        XCTAssertEqual(Log.level, .debug, "the failed install changed nothing")
    }

    /// Threads log all along while sinks are swapped: once install returns,
    /// the sink it replaced is never called again.
    func testReplacedSinkIsNeverCalledAfterInstallReturns() throws {
        final class Sink: @unchecked Sendable {
            let retired = Atomic<Bool>(false)
            let lateCalls = Atomic<Int>(0)
            let calls = Atomic<Int>(0)
            func call() {
                calls.add(1, ordering: .relaxed)
                if retired.load(ordering: .sequentiallyConsistent) { lateCalls.add(1, ordering: .relaxed) }
            }
        }
        let stop = Atomic<Bool>(false)
        let threads = (0..<4).map { n in
            startThread {
                while !stop.load(ordering: .relaxed) { Log.at(n % 2 == 0 ? .info : .debug, .sync, "thread \(n)") }
            }
        }
        var sinks: [Sink] = []
        let end = MonotonicTime.now().adding(milliseconds: 300)
        var round = 0
        while round < 500 || MonotonicTime.now() < end {
            defer { round += 1 }
            if round % 20 == 1 { usleep(500) }  // a DEBUG sink: every thread is heard
            let sink = Sink()
            sinks.append(sink)
            try Log.install(round % 3 == 0 ? .info : .debug) { _, _, _ in sink.call() }
            // The one before is retired: it must not run from here on.
            sinks.dropLast().last?.retired.store(true, ordering: .sequentiallyConsistent)
            if round % 50 == 49 {
                try Log.install(.off, nil)
                sink.retired.store(true, ordering: .sequentiallyConsistent)
            }
        }
        try Log.install(.off, nil)
        sinks.last?.retired.store(true, ordering: .sequentiallyConsistent)
        usleep(20_000)
        stop.store(true, ordering: .relaxed)
        for thread in threads { pthread_join(thread, nil) }
        XCTAssertEqual(sinks.map { $0.lateCalls.load(ordering: .relaxed) }.reduce(0, +), 0)
        XCTAssertGreaterThan(sinks.map { $0.calls.load(ordering: .relaxed) }.reduce(0, +), 0, "the threads were heard")
    }

    func testURLsLoseTheirCredentials() {
        XCTAssertEqual(Log.path(of: "http://user:s3cret@127.0.0.1:8888/v1/buckets/b?_limit=5"), "/v1/buckets/b?_limit=5")
        XCTAssertEqual(Log.path(of: "https://host"), "/")
        XCTAssertEqual(Log.path(of: "https://host?x=1"), "?x=1")
        XCTAssertTrue(Log.path(of: "http://h/v1/r?in_id=" + String(repeating: "a,", count: 500)).hasSuffix("… (1012 bytes)"))
        XCTAssertEqual(Log.redacted("http://user:s3cret@127.0.0.1:8888/v1"), "http://127.0.0.1:8888/v1")
        XCTAssertEqual(Log.redacted("http://a@b:c@host/v1?x=@y"), "http://host/v1?x=@y")
        XCTAssertEqual(Log.redacted("http://127.0.0.1:8888/v1/x@y"), "http://127.0.0.1:8888/v1/x@y")
    }

    /// A statement over the threshold is logged, with its SQL and not the
    /// values bound to it.
    func testSlowStatementIsLogged() throws {
        let recorder = Recorder()
        try Log.install(.warning, recorder.sink)
        let database = try Database(path: ":memory:")
        defer { database.close() }
        let sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) SELECT count(*), ? FROM c"
        let start = MonotonicTime.now()
        _ = try database.statement(sql).rows([.integer(3_000_000), .text("bound-value-42")])
        let took = MonotonicTime.now().milliseconds(since: start)
        let slow = recorder.messages(.store)
        if took >= Log.slowStatementMilliseconds {
            XCTAssertEqual(slow.count, 1, "\(took) ms")
            XCTAssertTrue(slow.first?.hasPrefix("slow statement (") ?? false, "\(slow)")
            XCTAssertTrue(slow.first?.contains(sql) ?? false, "\(slow)")
        }
        XCTAssertFalse(slow.contains { $0.contains("bound-value-42") })
        XCTAssertEqual(recorder.all.filter { $0.level > .warning }.count, 0)

        // A quick one is not.
        _ = try database.statement("SELECT 1").rows()
        XCTAssertEqual(recorder.messages(.store).count, slow.count)
    }

    /// A real session at DEBUG: the store, the model, each request, a fetch,
    /// a save; the password (given as options and in the URL) never appears.
    func testKintoSessionMessagesHoldNoPassword() throws {
        let directory = NSTemporaryDirectory() + "tether-log-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try KintoBackend(directory: directory)
        let recorder = Recorder()
        try Log.install(.debug, recorder.sink)
        let password = "pw-\(UUID().uuidString)"

        var kinto = KintoOptions(serverURL: backend.server, bucket: backend.bucket)
        kinto.username = "logger"
        kinto.password = password
        var context = try Context.open(ContextOptions(storePath: directory + "/a.sqlite"), connection: KintoConnection(kinto))
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        let object = try context.object(entity: "items", id: "i3")
        try object.set("Title", .text("logged"))
        XCTAssertNil(try SaveContract.save(context).error)
        try context.close()

        // The password in the URL's user info instead.
        let withUserInfo = backend.server.replacingOccurrences(of: "://", with: "://logger:\(password)@")
        context = try Context.open(ContextOptions(storePath: directory + "/b.sqlite"),
                                   connection: KintoConnection(KintoOptions(serverURL: withUserInfo, bucket: backend.bucket)))
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        try context.close()
        try Log.install(.off, nil)

        let all = recorder.all
        XCTAssertFalse(all.contains { $0.message.contains(password) }, "a password in a message")
        XCTAssertFalse(all.contains { $0.message.contains("logger:") || $0.message.lowercased().contains("authorization") })
        let http = recorder.messages(.http)
        XCTAssertTrue(http.contains { $0.hasPrefix("GET /v1/ -> 200") || $0.hasPrefix("GET / -> 200") }, "\(http)")
        XCTAssertTrue(http.contains { $0.hasPrefix("GET ") && $0.contains("/collections/items/records") && $0.contains("-> 200") },
                      "\(http)")
        XCTAssertTrue(http.contains { $0.contains(" ms)") }, "requests are timed")
        XCTAssertTrue(recorder.messages(.store).contains { $0.hasPrefix("store opened") })
        XCTAssertTrue(recorder.messages(.migration).contains { $0.contains("items: table") && $0.contains("created") })
        XCTAssertTrue(recorder.messages(.context).contains { $0.hasPrefix("context opened online") })
        XCTAssertTrue(recorder.messages(.save).contains { $0.hasPrefix("save of 1 changes: 1 saved") }, "\(recorder.messages(.save))")
        XCTAssertTrue(recorder.messages(.sync).contains { $0.hasPrefix("fetch of items") })
        XCTAssertFalse(all.contains { $0.level < .debug && $0.message.contains("logged") }, "a record value above DEBUG")
    }

    /// A server that cannot be reached: a warning for the request, and one
    /// for opening offline.
    func testUnreachableServerWarns() throws {
        let directory = NSTemporaryDirectory() + "tether-log-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recorder = Recorder()
        try Log.install(.warning, recorder.sink)
        var kinto = KintoOptions(serverURL: "http://127.0.0.1:9/v1", bucket: "nowhere")
        kinto.timeoutMilliseconds = 2_000
        XCTAssertThrowsError(try Context.open(ContextOptions(storePath: directory + "/s.sqlite"), connection: KintoConnection(kinto)))
        let warnings = recorder.all.filter { $0.level == .warning && $0.category == .http }
        XCTAssertTrue(warnings.contains { $0.message.hasPrefix("GET /v1/: cannot reach the server") }, "\(recorder.all)")
    }
}
