import Synchronization

/// A cancellable sequence of transfers: one request's exchanges with the
/// server (a listing's pages, the specs' several calls). Cancel ends the one
/// on the wire and any that would follow.
///
/// Idempotent requests (GET) are retried, at most `maximumRetries` times: on
/// 503 and 429, after the server's Retry-After when it gives one, and on an
/// exchange that broke once the server had been reached, with exponential
/// backoff. A server that cannot be reached at all is not retried: that is
/// "offline", and must be told at once.
final class Exchange: Cancellable {
    static let maximumRetries = 3
    static let firstBackoffMilliseconds: Int64 = 200
    static let longestBackoffMilliseconds: Int64 = 30_000

    private let engine: HTTPEngine
    private let backoff: ServerBackoff
    private let state = Lock<(transfer: HTTPEngine.TransferID?, cancelled: Bool)>((nil, false))

    init(_ engine: HTTPEngine, _ backoff: ServerBackoff) {
        self.engine = engine
        self.backoff = backoff
    }

    /// Sends `request` unless cancelled; `then` runs exactly once either way,
    /// with the last attempt's answer.
    func send(_ request: HTTPRequest, _ then: @escaping HTTPEngine.Completion) {
        send(request, attempt: 0, afterMilliseconds: 0, then)
    }

    private func send(_ request: HTTPRequest, attempt: Int, afterMilliseconds delay: Int64,
                      _ then: @escaping HTTPEngine.Completion) {
        guard !state.withLock({ $0.cancelled }) else { return then(.failure(.cancelled)) }
        let id = engine.start(request, afterMilliseconds: delay) { [self] result in
            if case .success(let response) = result { backoff.heed(response) }
            let retryable = request.method == "GET" || request.repeatable
            if retryable, attempt < Self.maximumRetries, let wait = Self.retryDelay(result, attempt: attempt) {
                Log.info(.http, "\(request.method) \(Log.path(of: request.url)): \(Self.describe(result)); "
                         + "retry \(attempt + 1) of \(Self.maximumRetries) in \(wait) ms")
                send(request, attempt: attempt + 1, afterMilliseconds: wait, then)
            } else {
                if Self.isTrouble(result) {
                    Log.warning(.http, "\(request.method) \(Log.path(of: request.url)): \(Self.describe(result))"
                                + (attempt > 0 ? " after \(attempt + 1) attempts" : ""))
                }
                then(result)
            }
        }
        let cancelledMeanwhile = state.withLock { state -> Bool in
            state.transfer = id
            return state.cancelled
        }
        if cancelledMeanwhile { engine.cancel(id) }
    }

    /// A failure worth a warning: no answer, or the server failing (5xx, 429).
    /// Other statuses (404, 412...) are answers their callers expect.
    private static func isTrouble(_ result: Result<HTTPResponse, TetherError>) -> Bool {
        switch result {
        case .success(let response): return response.status >= 500 || response.status == 429
        case .failure(let error): return error.kind != .cancelled
        }
    }

    /// An answer's status, or why there was none (no server text: it may
    /// quote a record).
    private static func describe(_ result: Result<HTTPResponse, TetherError>) -> String {
        switch result {
        case .success(let response): return "HTTP \(response.status)"
        case .failure(let error): return error.message
        }
    }

    /// How long to wait before trying `result`'s request again; nil: do not.
    static func retryDelay(_ result: Result<HTTPResponse, TetherError>, attempt: Int) -> Int64? {
        let backoff = min(longestBackoffMilliseconds, firstBackoffMilliseconds << Int64(attempt))
        switch result {
        case .success(let response) where response.status == 503 || response.status == 429:
            guard let wait = response.seconds(inHeader: "Retry-After", atMostMilliseconds: longestBackoffMilliseconds) else {
                return backoff
            }
            return max(wait, 1)
        case .failure(let error) where error.kind == .network && !error.isUnreachable:
            return backoff
        default:
            return nil
        }
    }

    func cancel() {
        let transfer = state.withLock { state -> HTTPEngine.TransferID? in
            state.cancelled = true
            return state.transfer
        }
        if let transfer { engine.cancel(transfer) }
    }
}

/// Kinto's `Backoff: N` header, sent on any answer when the server is under
/// load or maintenance, and `Retry-After: N` on a 503 or 429: the context's
/// periodic rounds pause for N seconds (`PeriodicSync`). What the host asks
/// for still goes, as Kinto's own clients do (kinto-http's `ignoreBackoff`,
/// Remote Settings' forced sync): a user who asked waits for no timer. A
/// hostile value is capped at a day.
final class ServerBackoff: Sendable {
    static let longestMilliseconds: Int64 = 86_400_000
    private let until = Lock<MonotonicTime?>(nil)

    func heed(_ response: HTTPResponse) {
        let busy = response.status == 503 || response.status == 429
        let asked = ["Backoff"] + (busy ? ["Retry-After"] : [])
        guard let wait = asked.compactMap({ response.seconds(inHeader: $0, atMostMilliseconds: Self.longestMilliseconds) }).max(),
              wait > 0 else {
            return
        }
        let now = MonotonicTime.now()
        let due = now.adding(milliseconds: wait)
        // Kinto repeats Backoff on every answer while it holds: logged when one begins.
        let begins = until.withLock { until -> Bool in
            guard until.map({ $0 < due }) ?? true else { return false }
            defer { until = due }
            return until.map { $0 <= now } ?? true
        }
        if begins { Log.info(.http, "the server asked to back off: no periodic sync for \(wait) ms") }
    }

    /// How long a request starting now must wait; 0 when not backing off.
    func remainingMilliseconds() -> Int64 {
        guard let due = until.withLock({ $0 }) else { return 0 }
        return max(0, due.milliseconds(since: MonotonicTime.now()))
    }
}

extension HTTPResponse {
    /// A header giving whole seconds (Retry-After, Backoff) in milliseconds,
    /// capped: the value comes from the server and may be anything.
    func seconds(inHeader name: String, atMostMilliseconds longest: Int64) -> Int64? {
        guard let seconds = header(name).flatMap({ Int64($0) }), seconds >= 0 else { return nil }
        return seconds > longest / 1000 ? longest : seconds * 1000
    }
}
