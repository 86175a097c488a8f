import Glibc
import Synchronization

/// How much a log message matters; a sink asks for messages up to a level.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case off = 0, error = 1, warning = 2, info = 3, debug = 4

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// What part of the library a message comes from.
public enum LogCategory: String, Sendable, CaseIterable {
    /// Requests to the server: each one (DEBUG), retries and backoff (INFO),
    /// failures (WARNING).
    case http
    /// Fetches, refreshes and their pages.
    case sync
    /// The SQLite store: opened, slow statements.
    case store
    /// Saves: their outcome, conflicts.
    case save
    /// Models built from the server's specs and the store's tables changed to match.
    case migration
    /// Contexts: opened (online or offline), closed.
    case context
}

/// The library's log: process-wide, off until a sink is installed, and free
/// when off. Every call site passes its message as an autoclosure, and
/// `Log.at` reads one atomic level before anything else: a message above
/// the level is never built (no string formatting, no allocation).
///
/// Calls to the sink are serialized (never two at once), and `install`
/// holds the same lock while it swaps the sink: once it returns, the sink
/// it replaced is not running and will not run again, so a host may free
/// what that sink used. A message logged by the sink's own thread while
/// the sink runs (the sink called into the library) is dropped rather than
/// deadlock, and `install` from inside the sink fails with `.busy`.
///
/// What goes in a message: never credentials (no Authorization header, no
/// password, no URL with user info: requests are logged by path), and no
/// record values above DEBUG.
public enum Log {
    /// Level, category, message. Called with the log's lock held.
    public typealias Sink = @Sendable (LogLevel, LogCategory, String) -> Void

    /// The installed sink's level (0 when none): the one load a disabled
    /// message costs. Relaxed: a stale read only builds a message that the
    /// locked check below then drops, or misses one logged as a sink is
    /// installed.
    private static let threshold = Atomic<Int>(0)
    private static let sink = Lock<(level: LogLevel, sink: Sink?)>((.off, nil))

    /// SQL statements that take longer than this (milliseconds) are logged
    /// at WARNING.
    public static let slowStatementMilliseconds: Int64 = 100

    /// Whether a message of `level` would reach the sink now.
    @inline(__always)
    public static func isEnabled(_ level: LogLevel) -> Bool {
        level.rawValue <= threshold.load(ordering: .relaxed) && level != .off
    }

    /// Installs `sink` for messages up to `level`, replacing any other; `.off`
    /// or a nil sink removes it. When this returns the previous sink is not
    /// running and never runs again. Throws `.busy` from inside the sink.
    public static func install(_ level: LogLevel, _ sink: Sink?) throws {
        guard !sinkScope.isInside else {
            throw TetherError(.busy, "the log hook cannot be changed from inside the log callback")
        }
        let installed = sink == nil ? LogLevel.off : level
        // Lowered before the swap and raised after it: no message is built
        // for a level no sink wants for long, and none is lost.
        if installed.rawValue < threshold.load(ordering: .relaxed) { threshold.store(installed.rawValue, ordering: .relaxed) }
        let old = self.sink.withLock { state -> Sink? in
            defer { state = (installed, installed == .off ? nil : sink) }
            return state.sink
        }
        threshold.store(installed.rawValue, ordering: .relaxed)
        _ = old  // released here, outside the lock
    }

    /// The level of the installed sink (`.off` without one).
    public static var level: LogLevel { LogLevel(rawValue: threshold.load(ordering: .relaxed)) ?? .off }

    @inline(__always)
    static func error(_ category: LogCategory, _ message: @autoclosure () -> String) {
        if isEnabled(.error) { emit(.error, category, message()) }
    }

    @inline(__always)
    static func warning(_ category: LogCategory, _ message: @autoclosure () -> String) {
        if isEnabled(.warning) { emit(.warning, category, message()) }
    }

    @inline(__always)
    static func info(_ category: LogCategory, _ message: @autoclosure () -> String) {
        if isEnabled(.info) { emit(.info, category, message()) }
    }

    @inline(__always)
    static func debug(_ category: LogCategory, _ message: @autoclosure () -> String) {
        if isEnabled(.debug) { emit(.debug, category, message()) }
    }

    /// For call sites whose level is computed.
    @inline(__always)
    static func at(_ level: LogLevel, _ category: LogCategory, _ message: @autoclosure () -> String) {
        if isEnabled(level) { emit(level, category, message()) }
    }

    /// Hands a built message to the sink, under the lock, unless this thread
    /// is already inside the sink or the sink no longer wants its level.
    @inline(never)
    private static func emit(_ level: LogLevel, _ category: LogCategory, _ message: String) {
        guard !sinkScope.isInside else { return }
        sink.withLock { state in
            guard let sink = state.sink, level <= state.level else { return }
            sinkScope.run { sink(level, category, message) }
        }
    }

    // MARK: what messages may say

    /// A URL as a log names it: its path and query, without scheme, user
    /// info or host (the user info may hold a password). Long queries (the
    /// ids of a batch of records) are cut.
    static func path(of url: String) -> String {
        var rest = Substring(url)
        if let scheme = rest.firstRange(of: "://") {
            rest = rest[scheme.upperBound...]
            rest = rest.firstIndex(where: { $0 == "/" || $0 == "?" }).map { rest[$0...] } ?? "/"
        }
        let limit = 200
        guard rest.utf8.count > limit else { return String(rest) }
        return String(rest.prefix(limit)) + "… (\(rest.utf8.count) bytes)"
    }

    /// `url` without user info: "http://user:secret@host/v1" → "http://host/v1".
    static func redacted(_ url: String) -> String {
        guard let scheme = url.firstRange(of: "://") else { return url }
        let authorityEnd = url[scheme.upperBound...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? url.endIndex
        guard let at = url[scheme.upperBound..<authorityEnd].lastIndex(of: "@") else { return url }
        return String(url[..<scheme.upperBound]) + url[url.index(after: at)...]
    }
}

/// Whether this thread is running the log sink, so that a message the sink
/// causes (it called into the library) is dropped instead of deadlocking on
/// the log's lock.
private let sinkScope = ThreadScope()
