import Synchronization

/// A connection the host writes: each request is handed to the host as a
/// `HostRequest`, which it reads and answers once, from any thread, at once
/// or later. Everything above the connection (store, uniquing, peek/get,
/// coalescing, observers, outbox, save, conflicts) stays the core's.
///
/// Every request ends exactly once for the core: with the host's answer,
/// or `.cancelled` when the core cancels it or the connection shuts down,
/// whatever the host does after. A host that never answers delays nothing
/// but that request, and that one only until its time-out: it then ends
/// with a network error (the host is told as of a cancel); one that answers
/// twice, or after a cancel, is told so.
public final class HostConnection: Connection, ReachabilityReporting {
    /// How the host is reached. `send` and `cancel` run on the connection's
    /// own thread, in order (a request is sent before its cancel); they must
    /// not block: they hand the request on (or answer it if the answer is
    /// at hand). The core's completions run on that thread too, after.
    public struct Handlers: Sendable {
        /// A new request for the host.
        public var send: @Sendable (HostRequest) -> Void
        /// The core no longer wants this request's answer (the host still
        /// completes it, to release it).
        public var cancel: (@Sendable (HostRequest) -> Void)?
        /// The request is over for the host too: completed, or dropped at
        /// shutdown. Nothing may be asked of it afterwards.
        public var ended: (@Sendable (HostRequest) -> Void)?
        /// Once, at shutdown, after every request has ended.
        public var release: (@Sendable () -> Void)?

        public init(send: @escaping @Sendable (HostRequest) -> Void, cancel: (@Sendable (HostRequest) -> Void)? = nil,
                    ended: (@Sendable (HostRequest) -> Void)? = nil, release: (@Sendable () -> Void)? = nil) {
            self.send = send
            self.cancel = cancel
            self.ended = ended
            self.release = release
        }
    }

    public let identity: String
    /// Whether the host's server answers, as its completions say.
    public let reachability = Reachability()
    private let handlers: Handlers
    /// How long the host may take to complete a request.
    let timeoutMilliseconds: Int64
    /// The core's completions run here, never inside a host's call.
    private let queue = WorkQueue()
    private struct State {
        var requests: [ObjectIdentifier: HostRequest] = [:]
        var stopped = false
        /// How the records of an entity come from the host when not in its
        /// spec's shape, by entity (`addSpec(_:foldingRecords:)`).
        var foldings: [String: RecordFolding] = [:]
    }
    private let state = Lock(State())

    /// `identity` names the server and the data set: a store is tied to it.
    /// `timeoutMilliseconds` bounds each request's answer.
    public init(identity: String, timeoutMilliseconds: Int64 = 30_000, handlers: Handlers) throws {
        guard Identifier.isUsableName(identity) else {
            throw TetherError(.invalid, "a host connection needs an identity (non-empty, without U+0000)")
        }
        guard timeoutMilliseconds > 0 else { throw TetherError(.invalid, "timeout must be positive") }
        self.identity = identity
        self.timeoutMilliseconds = timeoutMilliseconds
        self.handlers = handlers
    }

    /// Hands `request` to the host, unless shut down (then it ends cancelled).
    private func issue(_ request: HostRequest) -> any Cancellable {
        let accepted = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.requests[ObjectIdentifier(request)] = request
            return true
        }
        let queued = accepted && queue.async { [self] in
            if request.markSent() { handlers.send(request) } else { ended(request) }  // cancelled before the host saw it
        }
        if !queued { request.end(by: .shutdown) }
        if queued {
            // Weak: a request completed in time is not held for the timer's sake.
            queue.async(afterMilliseconds: timeoutMilliseconds) { [weak request, self] in
                if let request, request.end(by: .timeout(timeoutMilliseconds)) { cancelled(request) }
            }
        }
        return request
    }

    /// Runs a core completion on the connection's thread, off the host's call.
    func deliver(_ job: @escaping @Sendable () -> Void) {
        if !queue.async(job) { job() }
    }

    func noteFolding(_ entity: String, _ folding: @escaping RecordFolding) {
        state.withLock { $0.foldings[entity] = folding }
    }

    func folding(_ entity: String) -> RecordFolding? { state.withLock { $0.foldings[entity] } }

    func cancelled(_ request: HostRequest) {
        guard let cancel = handlers.cancel else { return }
        // After its send, if it was sent (a request cancelled before it
        // reached the host is never shown to it).
        queue.async { if request.wasSent { cancel(request) } }
    }

    func ended(_ request: HostRequest) {
        _ = state.withLock { $0.requests.removeValue(forKey: ObjectIdentifier(request)) }
        handlers.ended?(request)
    }

    public func shutdown() {
        let open = state.withLock { state -> [HostRequest]? in
            guard !state.stopped else { return nil }
            state.stopped = true
            return Array(state.requests.values)
        }
        guard let open else { return }
        let told = open.filter { $0.end(by: .shutdown) }
        queue.shutdown()  // every send, cancel and completion queued has run
        for request in told where request.wasSent { handlers.cancel?(request) }
        for request in open { ended(request) }
        handlers.release?()
    }

    // MARK: requests

    public func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        issue(HostRequest(self, .serverInfo) { done($0.flatMap { $0.serverInfo() }) })
    }

    public func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        issue(HostRequest(self, .specs) { done($0.flatMap { $0.specList() }) })
    }

    public func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        issue(HostRequest(self, .page, page: request) { done($0.flatMap { $0.page() }) })
    }

    public func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        issue(HostRequest(self, .count, page: request) { done($0.flatMap { $0.count() }) })
    }

    public func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                        _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        var request = PageRequest(spec: spec)
        request.cursor = cursor
        return issue(HostRequest(self, .records, page: request, ids: ids) { done($0.flatMap { $0.page() }) })
    }

    /// Ids a host request carries at once.
    static let idsPerRequest = 500

    public func idBatches(_ ids: [String]) -> [[String]] {
        stride(from: 0, to: ids.count, by: Self.idsPerRequest).map { Array(ids[$0..<min(ids.count, $0 + Self.idsPerRequest)]) }
    }

    /// The core filters what a host lists: a host is asked only for an
    /// entity's records, in an order, up to a limit.
    public func supports(_ filter: Filter) -> Bool { false }
    public func filtersExactly(_ filter: Filter) -> Bool { false }
    /// The host's `since` listing names every change after the version (the
    /// header's contract), so a sync is not listed again to check it.
    public var changeListingsCanMissRewrites: Bool { false }

    /// The query is in the host's own language: its pages end its answer.
    public func limit(ofServerQuery query: String) -> Int64? { nil }

    public func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        issue(HostRequest(self, .write, writes: writes) { result in
            switch result.flatMap({ $0.writeOutcomes() }) {
            case .success(let outcomes): answered(outcomes)
            case .failure(let error): answered(Array(repeating: .failed(error), count: writes.count))
            }
        })
    }
}

/// Turns a record as a host gives it into its spec's shape.
public typealias RecordFolding = @Sendable (RecordFields) -> RecordFields

/// One request to a host connection: what is asked (read it), and the answer
/// the host builds, then completes, exactly once.
public final class HostRequest: Cancellable, Sendable {
    public enum Kind: Int, Sendable {
        case serverInfo = 0, specs, page, count, records, write
    }

    /// What a write came to, as the host says it.
    public enum Outcome: Sendable {
        /// Applied: the record as the host now has it (JSON object text).
        case written(String)
        /// Applied, or the record was already gone.
        case deleted
        /// Not applied: the record is another version, or exists (for a
        /// create); the host's record (JSON object text), nil if none.
        case conflict(String?)
        case failed(TetherError)
    }

    public let kind: Kind
    /// For page, count and records: the entity, order, limit, cursor...
    public let pageRequest: PageRequest?
    /// For records: the ids wanted.
    public let ids: [String]
    /// For write: the writes, in order.
    public let writes: [RecordWrite]
    private let done: @Sendable (Result<Answer, TetherError>) -> Void
    private let state = Lock(State())
    /// Held until the request ends (the connection holds it till then too).
    private let connection: HostConnection

    private enum Phase { case open, cancelled, ended }

    private struct State {
        var phase = Phase.open
        var sent = false
        /// Cancelled by its time-out, not by the core.
        var timedOut = false
        var answer = Answer()
    }

    /// What the host has said so far.
    struct Answer: Sendable {
        var info: ServerInfo?
        var specs: [Spec] = []
        var records: [RecordFields] = []
        var deleted: [String] = []
        var next: String?
        var version: Int64?
        var total: Int64?
        var outcomes: [Int: WriteOutcome] = [:]
        var writeCount = 0

        func serverInfo() -> Result<ServerInfo, TetherError> {
            info.map { .success($0) } ?? .failure(TetherError(.protocol, "the host connection answered no server info"))
        }
        func specList() -> Result<[Spec], TetherError> { .success(specs) }
        func page() -> Result<Page, TetherError> {
            let content = PageContent(records: records, deletedIDs: deleted)
            return .success(Page(next: next.map(PageCursor.init), version: version, total: total) { content })
        }
        func count() -> Result<Int64, TetherError> {
            total.map { .success($0) } ?? .failure(TetherError(.protocol, "the host connection answered no count"))
        }
        func writeOutcomes() -> Result<[WriteOutcome], TetherError> {
            .success((0..<writeCount).map {
                outcomes[$0] ?? .failed(TetherError(.protocol, "the host connection gave write \($0) no outcome"))
            })
        }
    }

    /// How the entity's records are folded into its spec's shape; nil: they come in it.
    private let folding: RecordFolding?

    init(_ connection: HostConnection, _ kind: Kind, page: PageRequest? = nil, ids: [String] = [], writes: [RecordWrite] = [],
         done: @escaping @Sendable (Result<Answer, TetherError>) -> Void) {
        self.connection = connection
        self.kind = kind
        pageRequest = page
        self.ids = ids
        self.writes = writes
        self.done = done
        // Read once here, not per record: a page may carry thousands.
        folding = page.flatMap { connection.folding($0.spec.name) }
        state.withLock { $0.answer.writeCount = writes.count }
    }

    /// Marks the request handed to the host; false (not to be sent, and
    /// now over for the host too) once the core has dropped it.
    func markSent() -> Bool {
        state.withLock { state in
            guard state.phase == .open else {
                state.phase = .ended
                return false
            }
            state.sent = true
            return true
        }
    }

    var wasSent: Bool { state.withLock { $0.sent } }

    /// The spec the request is about (page, count, records).
    public var spec: Spec? { pageRequest?.spec }

    // MARK: the host's answer

    /// Adds to the answer; `.cancelled` once the core has dropped the
    /// request (the host may stop early, then complete it), `.misuse` if
    /// completed, `.invalid` for an answer of another kind of request.
    private func build(_ kinds: Set<Kind>, _ what: String, _ body: (inout Answer) throws -> Void) throws {
        guard kinds.contains(kind) else { throw TetherError(.misuse, "\(what) answers no \(kind) request") }
        try state.withLock { state in
            switch state.phase {
            case .open: try body(&state.answer)
            case .cancelled:
                throw TetherError(.cancelled, state.timedOut ? "the request timed out: complete it to release it"
                                                              : "the request was cancelled: complete it to release it")
            case .ended: throw TetherError(.misuse, "the request is already completed")
            }
        }
    }

    public func setServerInfo(name: String, version: String) throws {
        try build([.serverInfo], "server info") { $0.info = ServerInfo(name: name, version: version) }
    }

    /// A record type, its fields as a JSON schema (as a Kinto collection's:
    /// types, required, enum, x-tether-code, x-tether-to...). `route` (by
    /// default the name) is the host's own and comes back in requests.
    public func addSpec(name: String, idField: String, versionField: String, schema: String,
                        operations: Operations, route: String? = nil) throws {
        let parsed = try Self.parse(schema, "the schema of \(name)")
        guard parsed.objectValue != nil else { throw TetherError(.invalid, "the schema of \(name) is not a JSON object") }
        try addSpec(Spec(name: name, route: route ?? name, idField: idField, versionField: versionField,
                         fields: SchemaFields.fields(of: parsed, entity: name), operations: operations))
    }

    public func addSpec(_ spec: Spec) throws {
        try build([.specs], "a spec") { $0.specs.append(spec) }
    }

    /// A record type whose records the host gives in a shape of its own
    /// (as Perforce's tagged output, Remote/Perforce): `folding` turns each
    /// record of it, in every later request, into the spec's shape.
    public func addSpec(_ spec: Spec, foldingRecords folding: @escaping RecordFolding) throws {
        try addSpec(spec)
        connection.noteFolding(spec.name, folding)
    }

    /// A record (a JSON object's text) of a page or records answer.
    public func addRecord(json: String) throws { try addRecord(fields: try Self.record(json)) }

    /// A record given field by field, as typed values (a `.json` value's
    /// text is parsed: it must be JSON).
    public func addRecord(values: [(key: String, value: Value)]) throws {
        try addRecord(fields: values.map { key, value in
            if case .json(let text) = value { return (key, try Self.parse(text, "the value of \(key)")) }
            return (key, value.json)
        })
    }

    func addRecord(fields: RecordFields) throws {
        var record = fields
        if spec != nil, let folding {
            record = folding(record)
        }
        try build([.page, .records], "a record") { $0.records.append(record) }
    }

    /// A record deleted since the page request's `since`.
    public func addDeleted(id: String) throws {
        guard !id.isEmpty else { throw TetherError(.invalid, "a deleted id cannot be empty") }
        try build([.page], "a deleted id") { $0.deleted.append(id) }
    }

    /// Where the listing goes on (nil: this is its last page), the data
    /// set's version when answered, how many records it holds in all.
    public func setPage(next: String?, version: Int64?, total: Int64?) throws {
        try build([.page, .records], "a page's cursor") { answer in
            answer.next = next
            answer.version = version
            answer.total = total
        }
    }

    public func setCount(_ count: Int64) throws {
        guard count >= 0 else { throw TetherError(.invalid, "a count cannot be negative") }
        try build([.count], "a count") { $0.total = count }
    }

    public func setOutcome(_ index: Int, _ outcome: Outcome) throws {
        guard writes.indices.contains(index) else {
            throw TetherError(.notFound, "no write at index \(index) (the request has \(writes.count))")
        }
        let converted: WriteOutcome
        switch outcome {
        case .written(let json): converted = .written(try Self.record(json))
        case .deleted: converted = .deleted(version: nil)
        case .conflict(let json): converted = .conflict(current: try json.map(Self.record))
        case .failed(let error): converted = .failed(error)
        }
        try build([.write], "a write's outcome") { $0.outcomes[index] = converted }
    }

    /// Ends the request: `error` nil delivers what was built, else the
    /// error. `.cancelled` (nothing delivered) if the core dropped it,
    /// `.misuse` if already completed. Either way it is over for the host.
    public func complete(_ error: TetherError? = nil) throws {
        let (previous, answer, timedOut) = state.withLock { state -> (Phase, Answer, Bool) in
            defer { state.phase = .ended }
            return (state.phase, state.answer, state.timedOut)
        }
        switch previous {
        case .ended: throw TetherError(.misuse, "the request is already completed")
        case .cancelled:
            connection.ended(self)
            throw TetherError(.cancelled, timedOut ? "the request timed out before it was completed; its answer is dropped"
                                                   : "the request was cancelled before it was completed; its answer is dropped")
        case .open:
            let result: Result<Answer, TetherError> = error.map { .failure($0) } ?? .success(answer)
            connection.reachability.note(result)
            let done = self.done
            connection.deliver { done(result) }
            connection.ended(self)
        }
    }

    /// Ends the request with a status that is no TETHER_* code (`status`,
    /// as the host gave it): it fails with `.protocol`, logged, as the host
    /// meant it to end; throws `.invalid` to tell the host its status was bad.
    public func complete(badStatus status: Int, _ message: String?) throws {
        let what = "the host completed a \(kind) request with status \(status), which is not TETHER_OK or a TETHER_E_* code"
            + (message.map { $0.isEmpty ? "" : " (\($0))" } ?? "")
        Log.warning(.sync, what)
        try complete(TetherError(.protocol, what))
        throw TetherError(.invalid, "status \(status) is not TETHER_OK or a TETHER_E_* code: the request ended as TETHER_E_PROTOCOL")
    }

    // MARK: the core's side

    enum Ending: Equatable { case cancel, shutdown, timeout(Int64) }

    /// The core's end of an open request: delivers `.cancelled` (a network
    /// error for a time-out); true if it was open. A cancel or time-out
    /// leaves it for the host to complete; a shutdown ends it for the host too.
    @discardableResult
    func end(by ending: Ending) -> Bool {
        let wasOpen = state.withLock { state -> Bool in
            let open = state.phase == .open
            if open || ending == .shutdown { state.phase = ending == .shutdown ? .ended : .cancelled }
            if open, case .timeout = ending { state.timedOut = true }
            return open
        }
        guard wasOpen else { return false }
        let error: TetherError
        if case .timeout(let milliseconds) = ending {
            // As a server that never answers: unreachable, so an open goes offline from its store.
            error = TetherError(.network, "the host connection did not answer the \(kind) request within \(milliseconds) ms",
                                unreachable: true)
            Log.warning(.sync, error.message)
            connection.reachability.note(Result<Void, TetherError>.failure(error))
        } else {
            error = .cancelled
        }
        let done = self.done
        connection.deliver { done(.failure(error)) }
        return true
    }

    public func cancel() {
        if end(by: .cancel) { connection.cancelled(self) }
    }

    private static func parse(_ text: String, _ what: String) throws -> JSON {
        do { return try JSON.parse(text) } catch {
            throw TetherError(.invalid, "\(what) is not JSON: \(TetherError.wrap(error).message)")
        }
    }

    private static func record(_ json: String) throws -> RecordFields {
        guard let fields = try parse(json, "a record").objectValue else { throw TetherError(.invalid, "a record must be a JSON object") }
        return fields
    }
}
