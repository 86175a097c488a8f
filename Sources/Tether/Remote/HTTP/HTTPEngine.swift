import CCurl
import Glibc
import Synchronization

struct HTTPRequest: Sendable {
    var method = "GET"
    var url: String
    var headers: [String] = []
    var body: [UInt8]? = nil
    /// Sending it twice does what sending it once does (as a GET).
    var repeatable = false
}

struct HTTPResponse: Sendable {
    let status: Int
    let headers: [(name: String, value: String)]
    let body: [UInt8]

    /// The last header of that name, compared without case.
    func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.last { $0.name.lowercased() == wanted }?.value
    }
}

struct HTTPCredentials: Sendable {
    let username: String
    let password: String
}

/// The libcurl multi handle, shared with other threads only for
/// `curl_multi_wakeup`, which libcurl documents as callable from any thread.
private struct MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
}

/// One thread running a libcurl multi handle: it only moves bytes. Every
/// transfer of a connection shares it (connection reuse, a cap on connections
/// per server), and any transfer can be cancelled from any thread.
///
/// Each transfer is one state machine (`TransferState`): events change it
/// under the lock and return what to do, which runs outside the lock. Every
/// transfer ends exactly once: answered, failed, cancelled, or ended by
/// `shutdown`.
final class HTTPEngine: Sendable {
    typealias Completion = @Sendable (Result<HTTPResponse, TetherError>) -> Void
    typealias TransferID = Int

    /// Bodies larger than this are refused rather than buffered.
    static let maximumBodyBytes = 256 << 20
    /// Connections to one server at once; more transfers wait their turn.
    static let maximumConnectionsPerHost = 6

    private enum TransferState {
        /// Started with a delay (a retry's backoff); queued once due.
        case waiting(due: MonotonicTime, HTTPRequest, Completion)
        /// Started, not yet handed to libcurl.
        case queued(HTTPRequest, Completion)
        /// On the wire (the engine thread owns the easy handle).
        case running(Completion)
        /// Cancel asked; the engine thread ends it.
        case cancelling(Completion)
    }

    private struct State {
        var nextID: TransferID = 1
        var transfers: [TransferID: TransferState] = [:]
        var toStart: [TransferID] = []
        var toCancel: [TransferID] = []
        var stopping = false
    }

    fileprivate let curl: Curl
    fileprivate let multi: MultiHandle
    fileprivate let credentials: HTTPCredentials?
    fileprivate let timeoutMilliseconds: Int64
    /// Whether the server answers: every transfer's end is noted here.
    let reachability = Reachability()
    private let state = Lock(State())
    private let thread = Lock<pthread_t?>(nil)

    init(credentials: HTTPCredentials?, timeoutMilliseconds: Int64) throws {
        let curl = try Curl.load()
        guard let pointer = curl.multi_init() else {
            throw TetherError(.internal, "libcurl could not be initialized")
        }
        _ = tether_curl_multi_set_long(curl.table, pointer, CURLMOPT_MAX_HOST_CONNECTIONS, Self.maximumConnectionsPerHost)
        self.curl = curl
        multi = MultiHandle(pointer: pointer)
        self.credentials = credentials
        self.timeoutMilliseconds = timeoutMilliseconds
        let started = startThread { [self] in EngineLoop(engine: self).run() }
        thread.withLock { $0 = started }
    }

    deinit { _ = curl.multi_cleanup(multi.pointer) }

    /// Starts a transfer, after `delay` milliseconds if positive. `completion`
    /// runs exactly once: on the engine thread, or, if the engine has stopped,
    /// on the caller's thread before `start` returns (with `.cancelled`).
    @discardableResult
    func start(_ request: HTTPRequest, afterMilliseconds delay: Int64 = 0, completion: @escaping Completion) -> TransferID {
        let (id, accepted) = state.withLock { state -> (TransferID, Bool) in
            let id = state.nextID
            state.nextID += 1
            guard !state.stopping else { return (id, false) }
            if delay > 0 {
                state.transfers[id] = .waiting(due: MonotonicTime.now().adding(milliseconds: delay), request, completion)
            } else {
                state.transfers[id] = .queued(request, completion)
                state.toStart.append(id)
            }
            return (id, true)
        }
        if accepted { _ = curl.multi_wakeup(multi.pointer) } else { completion(.failure(.cancelled)) }
        return id
    }

    /// Ends a transfer with `.cancelled`, unless it has already ended.
    func cancel(_ id: TransferID) {
        let wake = state.withLock { state -> Bool in
            switch state.transfers[id] {
            case .waiting(_, _, let completion)?, .queued(_, let completion)?, .running(let completion)?:
                state.transfers[id] = .cancelling(completion)
                state.toCancel.append(id)
                return true
            case .cancelling?, nil:
                return false  // already ending, or ended
            }
        }
        if wake { _ = curl.multi_wakeup(multi.pointer) }
    }

    /// Sends and waits. Must not be called on the engine thread.
    func send(_ request: HTTPRequest) -> Result<HTTPResponse, TetherError> {
        let answer = ConditionLock<Result<HTTPResponse, TetherError>?>(nil)
        start(request) { result in answer.withLock { $0 = result } }
        return answer.withLock(when: { $0 != nil }, until: nil) { value, _ in value! }
    }

    /// Ends every transfer with `.cancelled` (each completion once, on the
    /// engine thread), refuses new ones, and joins the thread.
    func shutdown() {
        state.withLock { $0.stopping = true }
        _ = curl.multi_wakeup(multi.pointer)
        if let running = thread.withLock({ current -> pthread_t? in defer { current = nil }; return current }) {
            pthread_join(running, nil)
        }
    }

    // MARK: events from the engine thread

    fileprivate struct Work {
        var starts: [(TransferID, HTTPRequest)] = []
        var cancels: [(TransferID, Completion)] = []
        var stopping = false
        /// When the next waiting transfer is due, if any.
        var nextDue: MonotonicTime?
    }

    /// Takes what other threads asked for since the last turn, and the
    /// waiting transfers now due.
    fileprivate func takeWork() -> Work {
        state.withLock { state in
            var work = Work(stopping: state.stopping)
            let now = MonotonicTime.now()
            for (id, transfer) in state.transfers {
                guard case .waiting(let due, let request, let completion) = transfer else { continue }
                if due <= now {
                    state.transfers[id] = .queued(request, completion)
                    state.toStart.append(id)
                } else {
                    work.nextDue = min(work.nextDue ?? due, due)
                }
            }
            for id in state.toStart {
                guard case .queued(let request, let completion)? = state.transfers[id] else { continue }
                state.transfers[id] = .running(completion)
                work.starts.append((id, request))
            }
            for id in state.toCancel {
                guard case .cancelling(let completion)? = state.transfers.removeValue(forKey: id) else {
                    continue
                }
                work.cancels.append((id, completion))
            }
            state.toStart = []
            state.toCancel = []
            return work
        }
    }

    /// The transfer ended on the wire: its completion, unless a cancel got there first.
    fileprivate func finished(_ id: TransferID) -> Completion? {
        state.withLock { state in
            switch state.transfers[id] {
            case .running(let completion)?:
                state.transfers[id] = nil
                return completion
            case .cancelling?:
                return nil  // the cancel, already taken or next turn, ends it
            case .waiting?, .queued?, nil:
                assertionFailure("transfer \(id) finished on the wire without running")
                return nil
            }
        }
    }

    /// At shutdown: every transfer not yet ended, to be ended once.
    fileprivate func takeAll() -> [(TransferID, Completion)] {
        state.withLock { state in
            defer {
                state.transfers = [:]
                state.toStart = []
                state.toCancel = []
            }
            return state.transfers.map { id, transfer in
                switch transfer {
                case .waiting(_, _, let completion), .queued(_, let completion), .running(let completion),
                     .cancelling(let completion):
                    return (id, completion)
                }
            }
        }
    }
}

/// What only the engine thread touches: the easy handles on the wire.
private final class EngineLoop {
    let engine: HTTPEngine
    var active: [HTTPEngine.TransferID: Transfer] = [:]
    var byHandle: [UnsafeMutableRawPointer: HTTPEngine.TransferID] = [:]

    init(engine: HTTPEngine) { self.engine = engine }

    func run() {
        let curl = engine.curl, multi = engine.multi.pointer
        while true {
            let work = engine.takeWork()
            for (id, completion) in work.cancels {
                if let transfer = active[id] { Log.debug(.http, "\(transfer.request.method) \(Log.path(of: transfer.request.url)) cancelled") }
                remove(id)
                completion(.failure(.cancelled))
            }
            if work.stopping {
                for (id, completion) in engine.takeAll() {
                    remove(id)
                    completion(.failure(.cancelled))
                }
                return
            }
            for (id, request) in work.starts { begin(id, request) }
            var running: Int32 = 0
            _ = curl.multi_perform(multi, &running)
            var queued: Int32 = 0
            while let message = curl.multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                      let id = byHandle[handle], let transfer = active[id] else { continue }
                let outcome = transfer.outcome(message.pointee.data.result)
                remove(id)
                Log.debug(.http, transfer.summary(outcome))
                engine.reachability.note(outcome)
                engine.finished(id)?(outcome)
            }
            // Sleep until traffic, a wakeup, or the next waiting transfer's time.
            let wait = work.nextDue.map { max(1, min(1000, $0.milliseconds(since: MonotonicTime.now()) + 1)) } ?? 1000
            _ = curl.multi_poll(multi, nil, 0, Int32(wait), nil)
        }
    }

    private func begin(_ id: HTTPEngine.TransferID, _ request: HTTPRequest) {
        let transfer = Transfer(request: request, curl: engine.curl)
        if Log.isEnabled(.debug) { transfer.started = MonotonicTime.now() }
        do {
            try transfer.configure(credentials: engine.credentials, timeoutMilliseconds: engine.timeoutMilliseconds)
        } catch {
            let failure = error as? TetherError ?? TetherError(.internal, "\(error)")
            engine.finished(id)?(.failure(failure))
            return
        }
        // A transfer libcurl refuses (out of memory) would never complete:
        // its completion runs now, so no caller waits for it forever.
        let added = engine.curl.multi_add_handle(engine.multi.pointer, transfer.easy)
        guard added == CURLM_OK else {
            engine.finished(id)?(.failure(TetherError(.internal, "libcurl refused the request (CURLMcode \(added.rawValue))")))
            return
        }
        active[id] = transfer
        byHandle[transfer.easy] = id
    }

    private func remove(_ id: HTTPEngine.TransferID) {
        guard let transfer = active.removeValue(forKey: id) else { return }
        byHandle[transfer.easy] = nil
        _ = engine.curl.multi_remove_handle(engine.multi.pointer, transfer.easy)
    }
}

/// One request's easy handle and buffers; lives on the engine thread only.
private final class Transfer {
    let request: HTTPRequest
    let curl: Curl
    let easy: UnsafeMutableRawPointer
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    var tooLarge = false
    /// When it went on the wire, taken only when requests are logged.
    var started: MonotonicTime?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)

    init(request: HTTPRequest, curl: Curl) {
        self.request = request
        self.curl = curl
        easy = curl.easy_init()!  // NULL only when out of memory
        errorBuffer[0] = 0
    }

    deinit {
        curl.easy_cleanup(easy)
        curl.slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    func configure(credentials: HTTPCredentials?, timeoutMilliseconds: Int64) throws {
        func check(_ code: CURLcode) throws {
            guard code == CURLE_OK else {
                throw TetherError(.invalid, "cannot set up the request: \(String(cString: curl.easy_strerror(code)!))")
            }
        }
        let this = Unmanaged.passUnretained(self).toOpaque()
        try check(tether_curl_set_string(curl.table, easy, CURLOPT_URL, request.url))
        try check(tether_curl_set_string(curl.table, easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_NOSIGNAL, 1))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_SSL_VERIFYPEER, 1))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_SSL_VERIFYHOST, 2))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_FOLLOWLOCATION, 0))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_TIMEOUT_MS, Int(timeoutMilliseconds)))
        try check(tether_curl_set_long(curl.table, easy, CURLOPT_CONNECTTIMEOUT_MS, Int(min(timeoutMilliseconds, 10_000))))
        try check(tether_curl_set_string(curl.table, easy, CURLOPT_ACCEPT_ENCODING, ""))
        try check(tether_curl_set_pointer(curl.table, easy, CURLOPT_ERRORBUFFER, errorBuffer))
        if request.method == "HEAD" {
            try check(tether_curl_set_long(curl.table, easy, CURLOPT_NOBODY, 1))  // else curl waits for a body that never comes
        } else {
            try check(tether_curl_set_string(curl.table, easy, CURLOPT_CUSTOMREQUEST, request.method))
        }
        try check(tether_curl_set_write_function(curl.table, easy, CURLOPT_WRITEFUNCTION, receiveBody))
        try check(tether_curl_set_pointer(curl.table, easy, CURLOPT_WRITEDATA, this))
        try check(tether_curl_set_write_function(curl.table, easy, CURLOPT_HEADERFUNCTION, receiveHeader))
        try check(tether_curl_set_pointer(curl.table, easy, CURLOPT_HEADERDATA, this))
        if let credentials {
            try check(tether_curl_set_long(curl.table, easy, CURLOPT_HTTPAUTH, 1 /* CURLAUTH_BASIC, a macro Swift cannot import */))
            try check(tether_curl_set_string(curl.table, easy, CURLOPT_USERNAME, credentials.username))
            try check(tether_curl_set_string(curl.table, easy, CURLOPT_PASSWORD, credentials.password))
        }
        var lines = request.headers + ["Accept: application/json"]
        if let body = request.body {
            // A request that names its own content type keeps it.
            if !request.headers.contains(where: { $0.lowercased().hasPrefix("content-type:") }) {
                lines.append("Content-Type: application/json")
            }
            try check(tether_curl_set_long(curl.table, easy, CURLOPT_POSTFIELDSIZE, body.count))
            try body.withUnsafeBytes { bytes in
                try check(tether_curl_set_pointer(curl.table, easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress)))
            }
        }
        for line in lines { headerList = curl.slist_append(headerList, line) }
        try check(tether_curl_set_slist(curl.table, easy, CURLOPT_HTTPHEADER, headerList))
    }

    /// The request's log line: method, path (never the host, user info or
    /// headers: no credentials), status or failure, size and time.
    func summary(_ outcome: Result<HTTPResponse, TetherError>) -> String {
        let took = started.map { ", \(MonotonicTime.now().milliseconds(since: $0)) ms" } ?? ""
        let sent = request.body.map { ", sent \($0.count) bytes" } ?? ""
        switch outcome {
        case .success(let response):
            return "\(request.method) \(Log.path(of: request.url)) -> \(response.status) (\(response.body.count) bytes\(sent)\(took))"
        case .failure(let error):
            return "\(request.method) \(Log.path(of: request.url)) failed: \(error.message)\(took.isEmpty ? "" : " (" + took.dropFirst(2) + ")")"
        }
    }

    func outcome(_ code: CURLcode) -> Result<HTTPResponse, TetherError> {
        guard code == CURLE_OK else {
            if tooLarge {
                return .failure(TetherError(.protocol, "the server's answer is larger than \(HTTPEngine.maximumBodyBytes) bytes"))
            }
            let detail = errorBuffer[0] != 0 ? String(cString: errorBuffer) : String(cString: curl.easy_strerror(code)!)
            // No answer at all: refused, unknown, timed out, or closed before a byte came back.
            let unreachable = [CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT,
                               CURLE_OPERATION_TIMEDOUT, CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR]
                .contains(code) && body.isEmpty && headers.isEmpty
            let what = unreachable ? "cannot reach the server" : "the exchange with the server failed"
            return .failure(TetherError(.network, "\(what): \(detail)", unreachable: unreachable))
        }
        var status = 0
        _ = tether_curl_get_long(curl.table, easy, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(status: status, headers: headers, body: body))
    }
}

private let receiveBody: curl_write_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    guard transfer.body.count + length <= HTTPEngine.maximumBodyBytes else {
        transfer.tooLarge = true
        return 0
    }
    if let data { transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length)) }
    return length
}

private let receiveHeader: curl_write_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    guard let data else { return length }
    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    if line.hasPrefix("HTTP/") {
        transfer.headers = []  // a new response (after 100 Continue, say)
    } else if let colon = line.firstIndex(of: ":") {
        let name = String(line[..<colon])
        let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n")
        transfer.headers.append((name, value))
    }
    return length
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        let characters = Set(set)
        var slice = self[...]
        while let first = slice.first, characters.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, characters.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
