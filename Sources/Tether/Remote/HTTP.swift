import CCurl
import Glibc

struct HTTPRequest {
    var method = "GET"
    var url: String
    var headers: [String] = []
    var body: [UInt8]? = nil
}

struct HTTPResponse {
    let status: Int
    let headers: [(name: String, value: String)]
    let body: [UInt8]

    /// The last header of that name, compared without case.
    func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.last { $0.name.lowercased() == wanted }?.value
    }
}

struct HTTPCredentials {
    let username: String
    let password: String
}

private let curlInitialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

/// One thread running a libcurl multi handle: all transfers of a context share
/// it, with connection reuse, and any of them can be cancelled. The same
/// thread runs jobs posted with `perform`, so work on the answers (parsing,
/// writing the store) stays off the host's threads.
final class HTTPEngine: @unchecked Sendable {
    typealias Completion = (Result<HTTPResponse, TetherError>) -> Void
    typealias TransferID = Int

    /// Bodies larger than this are refused rather than buffered.
    static let maximumBodyBytes = 256 << 20

    private let multi: UnsafeMutableRawPointer
    private let credentials: HTTPCredentials?
    private let timeoutMilliseconds: Int64
    private let lock = Lock()
    private var nextID: TransferID = 1
    private var pendingStarts: [Transfer] = []
    private var pendingCancels: [TransferID] = []
    private var pendingJobs: [() -> Void] = []
    private var timers: [(due: MonotonicTime, job: () -> Void)] = []
    private var stopping = false
    private var thread: pthread_t?
    // Touched by the engine thread only.
    private var active: [TransferID: Transfer] = [:]
    private var activeByHandle: [UnsafeMutableRawPointer: TransferID] = [:]

    init(credentials: HTTPCredentials?, timeoutMilliseconds: Int64) throws {
        guard curlInitialized, let multi = curl_multi_init() else {
            throw TetherError(.internal, "libcurl could not be initialized")
        }
        self.multi = multi
        self.credentials = credentials
        self.timeoutMilliseconds = timeoutMilliseconds
        thread = startThread { [unowned self] in self.run() }
    }

    deinit { curl_multi_cleanup(multi) }

    /// Starts a transfer; `completion` runs on the engine thread exactly once,
    /// with `.cancelled` if the transfer is cancelled or the engine stops.
    @discardableResult
    func start(_ request: HTTPRequest, completion: @escaping Completion) -> TransferID {
        lock.withLock {
            let id = nextID
            nextID += 1
            if stopping {
                pendingJobs.append { completion(.failure(.cancelled)) }
            } else {
                pendingStarts.append(Transfer(id: id, request: request, completion: completion))
            }
            curl_multi_wakeup(multi)
            return id
        }
    }

    func cancel(_ id: TransferID) {
        lock.withLock {
            pendingCancels.append(id)
            curl_multi_wakeup(multi)
        }
    }

    /// Runs `job` on the engine thread, after `delay` milliseconds if given.
    func perform(afterMilliseconds delay: Int64 = 0, _ job: @escaping () -> Void) {
        lock.withLock {
            guard !stopping else { return }
            if delay > 0 {
                timers.append((MonotonicTime.now().adding(milliseconds: delay), job))
            } else {
                pendingJobs.append(job)
            }
            curl_multi_wakeup(multi)
        }
    }

    /// Sends and waits. Must not be called on the engine thread.
    func send(_ request: HTTPRequest) -> Result<HTTPResponse, TetherError> {
        let done = Lock()
        var outcome: Result<HTTPResponse, TetherError>?
        start(request) { result in
            done.withLock {
                outcome = result
                done.broadcast()
            }
        }
        return done.withLock {
            while outcome == nil { done.wait(until: nil) }
            return outcome!
        }
    }

    /// Cancels every transfer, drops pending jobs and joins the thread.
    func shutdown() {
        let thread: pthread_t? = lock.withLock {
            stopping = true
            curl_multi_wakeup(multi)
            defer { self.thread = nil }
            return self.thread
        }
        if let thread { pthread_join(thread, nil) }
    }

    private func run() {
        while true {
            let (starts, cancels, jobs, dueTimers, stop) = lock.withLock { () -> ([Transfer], [TransferID], [() -> Void], [() -> Void], Bool) in
                defer {
                    pendingStarts = []
                    pendingCancels = []
                    pendingJobs = []
                }
                let now = MonotonicTime.now()
                let due = timers.filter { $0.due <= now }.map(\.job)
                timers.removeAll { $0.due <= now }
                return (pendingStarts, pendingCancels, pendingJobs, due, stopping)
            }
            for transfer in starts { begin(transfer) }
            for id in cancels { finish(id, .failure(.cancelled)) }
            for job in jobs + dueTimers { job() }
            if stop {
                for id in Array(active.keys) { finish(id, .failure(.cancelled)) }
                // Transfers started by the completions above.
                let late = lock.withLock { () -> [Transfer] in defer { pendingStarts = [] }; return pendingStarts }
                for transfer in late { transfer.completion(.failure(.cancelled)) }
                return
            }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                      let id = activeByHandle[handle], let transfer = active[id] else { continue }
                finish(id, transfer.outcome(message.pointee.data.result))
            }
            let wait = lock.withLock { () -> Int32 in
                guard pendingJobs.isEmpty, pendingStarts.isEmpty, pendingCancels.isEmpty else { return 0 }
                let next = timers.map(\.due).min().map { max(0, $0.milliseconds(since: MonotonicTime.now())) } ?? 1000
                return Int32(min(next, 1000))
            }
            if wait > 0 { curl_multi_poll(multi, nil, 0, wait, nil) }
        }
    }

    private func begin(_ transfer: Transfer) {
        do {
            try transfer.configure(credentials: credentials, timeoutMilliseconds: timeoutMilliseconds)
        } catch let error as TetherError {
            transfer.completion(.failure(error))
            return
        } catch {
            transfer.completion(.failure(TetherError(.internal, "\(error)")))
            return
        }
        active[transfer.id] = transfer
        activeByHandle[transfer.easy] = transfer.id
        curl_multi_add_handle(multi, transfer.easy)
    }

    private func finish(_ id: TransferID, _ outcome: Result<HTTPResponse, TetherError>) {
        guard let transfer = active.removeValue(forKey: id) else { return }
        activeByHandle[transfer.easy] = nil
        curl_multi_remove_handle(multi, transfer.easy)
        transfer.completion(outcome)
    }
}

/// One request's easy handle and buffers.
private final class Transfer {
    let id: HTTPEngine.TransferID
    let request: HTTPRequest
    let completion: HTTPEngine.Completion
    let easy: UnsafeMutableRawPointer
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    var tooLarge = false
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)

    init(id: HTTPEngine.TransferID, request: HTTPRequest, completion: @escaping HTTPEngine.Completion) {
        self.id = id
        self.request = request
        self.completion = completion
        easy = curl_easy_init()
        errorBuffer[0] = 0
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    func configure(credentials: HTTPCredentials?, timeoutMilliseconds: Int64) throws {
        func check(_ code: CURLcode) throws {
            guard code == CURLE_OK else {
                throw TetherError(.invalid, "cannot set up the request: \(String(cString: curl_easy_strerror(code)))")
            }
        }
        let this = Unmanaged.passUnretained(self).toOpaque()
        try check(tether_curl_set_string(easy, CURLOPT_URL, request.url))
        try check(tether_curl_set_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        try check(tether_curl_set_long(easy, CURLOPT_NOSIGNAL, 1))
        try check(tether_curl_set_long(easy, CURLOPT_SSL_VERIFYPEER, 1))
        try check(tether_curl_set_long(easy, CURLOPT_SSL_VERIFYHOST, 2))
        try check(tether_curl_set_long(easy, CURLOPT_FOLLOWLOCATION, 0))
        try check(tether_curl_set_long(easy, CURLOPT_TIMEOUT_MS, Int(timeoutMilliseconds)))
        try check(tether_curl_set_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(min(timeoutMilliseconds, 10_000))))
        try check(tether_curl_set_string(easy, CURLOPT_ACCEPT_ENCODING, ""))
        try check(tether_curl_set_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer))
        try check(tether_curl_set_string(easy, CURLOPT_CUSTOMREQUEST, request.method))
        try check(tether_curl_set_write_function(easy, CURLOPT_WRITEFUNCTION, receiveBody))
        try check(tether_curl_set_pointer(easy, CURLOPT_WRITEDATA, this))
        try check(tether_curl_set_write_function(easy, CURLOPT_HEADERFUNCTION, receiveHeader))
        try check(tether_curl_set_pointer(easy, CURLOPT_HEADERDATA, this))
        if let credentials {
            try check(tether_curl_set_long(easy, CURLOPT_HTTPAUTH, 1 /* CURLAUTH_BASIC, a macro Swift cannot import */))
            try check(tether_curl_set_string(easy, CURLOPT_USERNAME, credentials.username))
            try check(tether_curl_set_string(easy, CURLOPT_PASSWORD, credentials.password))
        }
        var lines = request.headers + ["Accept: application/json"]
        if let body = request.body {
            lines.append("Content-Type: application/json")
            try check(tether_curl_set_long(easy, CURLOPT_POSTFIELDSIZE, body.count))
            try body.withUnsafeBytes { bytes in
                try check(tether_curl_set_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress)))
            }
        }
        for line in lines { headerList = curl_slist_append(headerList, line) }
        try check(tether_curl_set_slist(easy, CURLOPT_HTTPHEADER, headerList))
    }

    func outcome(_ code: CURLcode) -> Result<HTTPResponse, TetherError> {
        guard code == CURLE_OK else {
            if tooLarge {
                return .failure(TetherError(.protocol, "the server's answer is larger than \(HTTPEngine.maximumBodyBytes) bytes"))
            }
            let detail = errorBuffer[0] != 0 ? String(cString: errorBuffer) : String(cString: curl_easy_strerror(code))
            // No answer at all: refused, unknown, timed out, or closed before a byte came back.
            let unreachable = [CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT,
                               CURLE_OPERATION_TIMEDOUT, CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR]
                .contains(code) && body.isEmpty && headers.isEmpty
            let what = unreachable ? "cannot reach the server" : "the exchange with the server failed"
            return .failure(TetherError(.network, "\(what): \(detail)", unreachable: unreachable))
        }
        var status = 0
        _ = tether_curl_get_long(easy, CURLINFO_RESPONSE_CODE, &status)
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
