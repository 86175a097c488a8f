import Synchronization

/// How to reach one bucket of a Kinto server.
public struct KintoOptions: Sendable {
    public var serverURL: String
    public var bucket: String
    public var username: String?
    public var password: String?
    public var timeoutMilliseconds: Int64 = 30_000

    public init(serverURL: String, bucket: String) {
        self.serverURL = serverURL
        self.bucket = bucket
    }
}

/// Kinto's HTTP API behind the connection interface: its routes, query
/// language, version field and schema shape are known here and nowhere else.
/// Each collection of the bucket is a spec; its JSON schema gives the fields.
public final class KintoConnection: Connection, ReachabilityReporting {
    static let idField = "id"
    static let versionField = "last_modified"
    /// Bytes of ids in one `in_id` listing: the ids go in the URL, and Kinto
    /// repeats them in its Next-Page header.
    static let idBytesPerRequest = 4_000
    /// A batch cursor's mark: its token is the subrequests' Next-Page URLs.
    private static let batchCursorPrefix = "batch\n"

    let root: String
    let bucket: String
    let engine: HTTPEngine
    /// The server's `Backoff`, shared by every exchange with it.
    let backoff = ServerBackoff()
    public let identity: String
    public let formerIdentities: [String]
    /// Subrequests one `POST /v1/batch` may carry, from the server info
    /// (`batch_max_requests`); 1 until it is known: plain requests only.
    private let batchLimit = Lock(1)

    public init(_ options: KintoOptions) throws {
        var root = options.serverURL
        while root.hasSuffix("/") { root.removeLast() }
        guard root.hasPrefix("http://") || root.hasPrefix("https://"), root.utf8.count > 8 else {
            throw TetherError(.invalid, "server URL must start with http:// or https://")
        }
        guard Self.isKintoID(options.bucket) else {
            throw TetherError(.invalid, "bucket \(options.bucket.debugDescription) is not a valid Kinto id")
        }
        guard options.timeoutMilliseconds > 0 else { throw TetherError(.invalid, "timeout must be positive") }
        let credentials: HTTPCredentials?
        switch (options.username, options.password) {
        case (nil, nil): credentials = nil
        case let (user?, password?): credentials = HTTPCredentials(username: user, password: password)
        default: throw TetherError(.invalid, "give both username and password, or neither")
        }
        self.root = root
        bucket = options.bucket
        // User info in the URL is a credential: never in the identity, which
        // the store keeps. Before 0.2 it was, and such stores still open.
        identity = "server \(Log.redacted(root)), bucket \(options.bucket)"
        let unredacted = "server \(root), bucket \(options.bucket)"
        formerIdentities = unredacted == identity ? [] : [unredacted]
        engine = try HTTPEngine(credentials: credentials, timeoutMilliseconds: options.timeoutMilliseconds)
    }

    public func shutdown() { engine.shutdown() }

    public var reachability: Reachability { engine.reachability }

    private var bucketPath: String { "/buckets/\(Self.escape(bucket))" }

    // MARK: server and specs

    public func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        exchange.send(HTTPRequest(url: root + "/")) { result in
            done(.tether {
                // Kinto redirects a root without its API version to /v1/.
                // Refused, not followed: the store is keyed by the URL given,
                // and an offline open cannot ask where it would lead.
                if case .success(let response) = result, (300..<400).contains(response.status) {
                    let target = response.header("Location").map { " to \(Log.redacted($0))" } ?? ""
                    throw TetherError(.invalid, "\(Log.redacted(self.root))/ redirects\(target) (HTTP \(response.status)):"
                                      + " the server URL must be Kinto's API root; add /v1")
                }
                let info = try Self.body(of: Self.checked(result, what: "server info"), what: "server info")
                guard info["http_api_version"] != nil || info["project_name"] != nil else {
                    throw TetherError(.protocol, "\(Log.redacted(self.root))/ does not answer like a Kinto server")
                }
                if case .integer(let limit)? = info["settings"]?["batch_max_requests"], limit > 0 {
                    self.batchLimit.withLock { $0 = Int(min(limit, Int64(Int32.max))) }
                }
                return ServerInfo(name: info["project_name"]?.stringValue ?? "kinto",
                                  version: info["project_version"]?.stringValue ?? "")
            })
        }
        return exchange
    }

    /// The bucket (to tell a missing bucket from a forbidden one: Kinto
    /// answers a missing bucket's collection listing with 401/403, the bucket
    /// itself with 404), then its collections, then the user's permissions.
    public func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        exchange.send(HTTPRequest(url: root + bucketPath)) { [self] result in
            do {
                _ = try Self.body(of: Self.checked(result, what: "bucket \(bucket)"), what: "bucket \(bucket)")
            } catch {
                return done(.failure(TetherError.wrap(error)))
            }
            listAll(exchange, root + bucketPath + "/collections", what: "collections of \(bucket)") { [self] collections in
                switch collections {
                case .failure(let error): done(.failure(error))
                case .success(let collections):
                    permissions(exchange) { [self] grants in
                        done(grants.map { grants in makeSpecs(collections, grants) })
                    }
                }
            }
        }
        return exchange
    }

    private func makeSpecs(_ collections: [JSON], _ grants: [String: Set<String>]?) -> [Spec] {
        collections.map { collection in
            let name = collection["id"]?.stringValue ?? ""
            return Self.spec(from: collection, bucket: bucket, operations: operations(of: name, grants))
        }
    }

    /// A collection of Kinto's listing as a spec: its JSON schema's properties
    /// are the fields (see `SchemaFields`).
    static func spec(from collection: JSON, bucket: String, operations: Operations) -> Spec {
        // A collection without a text id becomes a spec without a name, which
        // the model builder leaves out with a diagnostic.
        let name = collection["id"]?.stringValue ?? ""
        let fields = SchemaFields.fields(of: collection["schema"], entity: name)
        // Escaped: the id comes from the server and goes into URLs.
        return Spec(name: name, route: "/buckets/\(escape(bucket))/collections/\(escape(name))/records",
                    idField: idField, versionField: versionField, fields: fields, operations: operations)
    }

    /// What the current user may do, by object URI ("/buckets/b/collections/c"),
    /// from Kinto's permissions endpoint; nil when the server does not offer it.
    /// It lists only grants that name the user's principals, not inherited ones.
    private func permissions(_ exchange: Exchange, _ done: @escaping @Sendable (Result<[String: Set<String>]?, TetherError>) -> Void) {
        // Only the bucket's and collections' grants: unfiltered, Kinto lists
        // every record's too, page by page, and opening grew with the bucket.
        let url = root + "/permissions?bucket_id=" + Self.escape(bucket) + "&in_resource_name=bucket,collection"
        listAll(exchange, url, what: "permissions") { entries in
            switch entries {
            case .failure(let error) where error.kind == .notFound || error.kind == .auth:
                done(.success(nil))
            case .failure(let error):
                done(.failure(error))
            case .success(let entries):
                var grants: [String: Set<String>] = [:]
                for entry in entries {
                    guard let uri = entry["uri"]?.stringValue else { continue }
                    grants[uri, default: []].formUnion((entry["permissions"]?.arrayValue ?? []).compactMap(\.stringValue))
                }
                done(.success(grants))
            }
        }
    }

    /// The operations a collection allows the user: its own grants and its
    /// bucket's. Listing it worked, so fetch is always allowed; without the
    /// permissions endpoint the server is left to refuse what it refuses.
    private func operations(of collection: String, _ grants: [String: Set<String>]?) -> Operations {
        guard let grants else { return .all }
        let bucketURI = "/buckets/\(bucket)"
        let granted = grants[bucketURI, default: []].union(grants[bucketURI + "/collections/\(collection)", default: []])
        var operations: Operations = .fetch
        if granted.contains("write") { operations.formUnion([.insert, .update, .delete]) }
        if granted.contains("record:create") { operations.insert(.insert) }
        return operations
    }

    /// Every item of a paginated listing, following Next-Page (each URL
    /// once: a server that names one again would be listed forever).
    private func listAll(_ exchange: Exchange, _ url: String, what: String, collected: [JSON] = [], visited: Set<String> = [],
                         _ done: @escaping @Sendable (Result<[JSON], TetherError>) -> Void) {
        exchange.send(HTTPRequest(url: url)) { [self] result in
            do {
                let response = try Self.checked(result, what: what)
                let items = collected + (try Self.records(in: Self.body(of: response, what: what), what: what))
                if let next = try nextPage(response) {
                    var visited = visited
                    guard visited.insert(url).inserted, !visited.contains(next) else {
                        throw TetherError(.protocol, "the server named the Next-Page \(Log.redacted(next).debugDescription) "
                                                     + "again in the listing of \(what): it would never end")
                    }
                    listAll(exchange, next, what: what, collected: items, visited: visited, done)
                } else {
                    done(.success(items))
                }
            } catch {
                done(.failure(TetherError.wrap(error)))
            }
        }
    }

    // MARK: records

    public func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void)
        -> any Cancellable {
        var headers: [String] = []
        if request.cursor == nil, let since = request.since {
            // Nothing at all (304) while the collection is still at that version.
            headers.append("If-None-Match: \"\(since)\"")
        }
        // A cursor carries the first page's query, _since included.
        let url = request.cursor?.token ?? listingURL(request, sorted: true)
        return listing(HTTPRequest(url: url, headers: headers), since: request.since, what: request.spec.route,
                       firstOfChanges: request.cursor == nil && request.since != nil, done)
    }

    /// Kinto answers a HEAD of a listing with its size in Total-Records.
    public func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void)
        -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        let what = request.spec.route
        exchange.send(HTTPRequest(method: "HEAD", url: listingURL(request, sorted: false))) { result in
            done(.tether {
                let response = try Self.checked(result, what: what)
                guard let total = response.header("Total-Records").flatMap({ Int64($0) }), total >= 0 else {
                    throw TetherError(.protocol, "the server did not say how many records \(what) holds")
                }
                return total
            })
        }
        return exchange
    }

    /// The first page's URL: filters, sort, limit, `_since`, `_fields`, then the raw query.
    private func listingURL(_ request: PageRequest, sorted: Bool) -> String {
        var query: [String] = request.filters.map(Self.queryParameter)
        if sorted, !request.sort.isEmpty {
            query.append("_sort=" + request.sort.map { ($0.descending ? "-" : "") + Self.escape($0.field) }
                .joined(separator: ","))
        }
        if sorted, request.limit > 0 { query.append("_limit=\(request.limit)") }
        if let since = request.since { query.append("_since=\(since)") }  // changes and tombstones after it
        if let fields = request.fields { query.append("_fields=" + fields.map(Self.escape).joined(separator: ",")) }
        if let raw = request.rawQuery, !raw.isEmpty { query.append(raw) }
        return root + request.spec.route + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
    }

    /// The ids go as `in_id` listings of at most `idBytesPerRequest` of ids
    /// each (long URLs are refused by proxies). Several listings go as one
    /// `POST /v1/batch` of up to `batchLimit`; listings still to send, and
    /// those with further pages, wait in the cursor, so any number of ids
    /// works and none is sent twice.
    public func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                        _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let urls: [String]
        if let token = cursor?.token {
            urls = token.hasPrefix(Self.batchCursorPrefix)
                ? token.dropFirst(Self.batchCursorPrefix.count).split(separator: "\n").map(String.init) : [token]
        } else {
            let path = root + spec.route + "?in_id="
            urls = Self.groups(ids, bytesEach: Self.idBytesPerRequest).map { path + $0.map(Self.escape).joined(separator: ",") }
        }
        guard let first = urls.first else { return listing(HTTPRequest(url: root + spec.route + "?in_id="), since: nil, what: spec.route, done) }
        // Kinto refuses a batch holding a path with "/batch" in it.
        let limit = spec.route.contains("/batch") ? 1 : listingsPerBatch
        guard urls.count > 1, limit > 1 else {
            let waiting = Array(urls.dropFirst())
            return listing(HTTPRequest(url: first), since: nil, what: spec.route) { result in
                done(result.map { page in
                    Page(next: Self.cursor([page.next?.token].compactMap { $0 } + waiting), version: page.version,
                         total: page.total) { try page.decode() }
                })
            }
        }
        return batchListing(Array(urls.prefix(limit)), waiting: Array(urls.dropFirst(limit)), what: spec.route, done)
    }

    /// A cursor for these listings, in order; nil for none.
    private static func cursor(_ urls: [String]) -> PageCursor? {
        switch urls.count {
        case 0: return nil
        case 1: return PageCursor(urls[0])
        default: return PageCursor(batchCursorPrefix + urls.joined(separator: "\n"))
        }
    }

    /// These listings (URLs under `root`) as one batch; the page holds every
    /// answer's records, and its cursor the listings that have more, then
    /// those `waiting` to be sent.
    private func batchListing(_ urls: [String], waiting: [String], what: String,
                              _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        let requests: [JSON] = urls.map { url in
            .object([("method", .string("GET")), ("path", .string(String(url.dropFirst(root.count))))])
        }
        let body = Array(JSON.object([("requests", .array(requests))]).serialized().utf8)
        // Reads only, so a failed batch may be sent again like a GET.
        exchange.send(HTTPRequest(method: "POST", url: root + "/batch", body: body, repeatable: true)) { [self] result in
            done(.tether {
                guard let responses = try Self.body(of: Self.checked(result, what: what), what: what)["responses"]?.arrayValue,
                      responses.count == urls.count else {
                    throw TetherError(.protocol, "the server's batch answer for \(what) does not answer each listing")
                }
                var next: [String] = []
                var bodies: [JSON] = []
                for response in responses {
                    // Each answer is checked as if it had come alone.
                    var headers: [(String, String)] = []
                    if case .object(let members)? = response["headers"] {
                        for (name, value) in members { if let text = value.stringValue { headers.append((name, text)) } }
                    }
                    guard case .integer(let status)? = response["status"], let answer = response["body"] else {
                        throw TetherError(.protocol, "a batch answer for \(what) has no status or body")
                    }
                    let alone = HTTPResponse(status: Int(status), headers: headers,
                                             body: status == 200 ? [] : Array(answer.serialized().utf8))
                    _ = try Self.checked(.success(alone), what: what)
                    if let url = try subrequestNextPage(alone) { next.append(url) }
                    bodies.append(answer)
                }
                return Page(next: Self.cursor(next + waiting)) { [bodies] in
                    var content = PageContent(records: [])
                    for body in bodies { try Self.collect(Self.records(in: body, what: what), into: &content, what: what) }
                    return content
                }
            })
        }
        return exchange
    }

    /// What Kinto evaluates (memory and PostgreSQL backends alike) so that
    /// its answer holds every record the filter matches: text `==` and `IN`
    /// (its string equality is exact), boolean `==`, and integers by every
    /// comparison but `!=` (it also selects records holding `5.0` for 5, or
    /// null or text for `<`: more, never fewer). Never reals (PostgreSQL
    /// compares the decimals a record holds, Tether their doubles), text
    /// order (a collation's), `!=` (PostgreSQL leaves missing fields out)
    /// or JSON. Only names Kinto reads as a plain field (`fieldName`); only
    /// scalars; `in_` splits its values at commas, so no text holding one;
    /// Kinto refuses control characters in a query (400), so none.
    public func supports(_ filter: Filter) -> Bool {
        guard Self.isPlainField(filter.field), Self.queryParameter(filter).utf8.count <= Self.filterBytes else { return false }
        let scalars = filter.values.allSatisfy { value in
            switch value {
            case .string(let text):
                return !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
                    && (filter.operator != .oneOf || !text.contains(","))
            case .integer, .bool: return true
            default: return false
            }
        }
        guard scalars else { return false }
        switch (filter.type, filter.operator) {
        case (.text, .equal), (.text, .oneOf): return filter.values.allSatisfy { $0.stringValue != nil }
        case (.boolean, .equal), (.boolean, .oneOf): return filter.values.allSatisfy { if case .bool = $0 { true } else { false } }
        case (.integer, .notEqual): return false
        case (.integer, _): return filter.values.allSatisfy { $0.integerValue != nil }
        default: return false
        }
    }

    /// Exact: text `==` and `IN`, and boolean `==` (a boolean's `in_` also
    /// takes 1 for true in the memory backend). Kinto compares integers with
    /// reals and orders types among each other, which Tether does not.
    public func filtersExactly(_ filter: Filter) -> Bool {
        guard supports(filter) else { return false }
        switch (filter.type, filter.operator) {
        case (.text, .equal), (.text, .oneOf), (.boolean, .equal): return true
        default: return false
        }
    }

    /// A name Kinto reads as the record field it is, after an operator
    /// prefix (`eq_min_age` is `min_age`; alone, `min_age` would be the
    /// operator `min_` on `age`): Kinto takes `[\w.]+` after the prefix
    /// (Python's \w is any Unicode letter or digit), reads a dot as a path
    /// into an object, and `last_modified` as its own timestamp. ASCII
    /// letters, digits and `_` only.
    static func isPlainField(_ name: String) -> Bool {
        !name.isEmpty && name != versionField && name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }

    /// Longest query parameter one filter may take: URLs stay short enough
    /// for proxies (longer `IN` lists are filtered here instead).
    static let filterBytes = 2_048

    /// A filter as Kinto's query parameter, always with its operator's
    /// prefix, so that no field name reads as another operator: `eq_`,
    /// `not_`, `lt_`, `gt_`, `max_`, `min_`, `in_` (values comma-separated).
    /// Kinto reads each value as JSON where it can, so text is sent quoted:
    /// `5` is the number 5, `"5"` the text.
    static func queryParameter(_ filter: Filter) -> String {
        let prefix: String
        switch filter.operator {
        case .equal: prefix = "eq_"
        case .notEqual: prefix = "not_"
        case .lessThan: prefix = "lt_"
        case .greaterThan: prefix = "gt_"
        case .atMost: prefix = "max_"
        case .atLeast: prefix = "min_"
        case .oneOf: prefix = "in_"
        }
        let values = filter.values.map { escape($0.serialized()) }
        return prefix + escape(filter.field) + "=" + values.joined(separator: ",")
    }

    /// As many ids as one batch of listings carries: `batchLimit` listings'
    /// worth, split as `records` splits them.
    public func idBatches(_ ids: [String]) -> [[String]] {
        let groups = Self.groups(ids, bytesEach: Self.idBytesPerRequest)
        let limit = listingsPerBatch
        return stride(from: 0, to: groups.count, by: limit).map { groups[$0..<min(groups.count, $0 + limit)].flatMap { $0 } }
    }

    /// Most listings in one batch, whatever the server allows: an answer
    /// holds every one of their pages. (Writes go as many as it allows.)
    static let maximumListingsPerBatch = 25

    private var listingsPerBatch: Int { min(batchLimit.withLock { $0 }, Self.maximumListingsPerBatch) }

    /// `ids` in order, split into lists whose escaped ids (comma-separated)
    /// take at most `bytesEach`.
    private static func groups(_ ids: [String], bytesEach: Int) -> [[String]] {
        var groups: [[String]] = []
        var current: [String] = []
        var bytes = 0
        for id in ids {
            let cost = escape(id).utf8.count + 1
            if !current.isEmpty && bytes + cost > bytesEach {
                groups.append(current)
                current = []
                bytes = 0
            }
            current.append(id)
            bytes += cost
        }
        if !current.isEmpty { groups.append(current) }
        return groups
    }

    /// One page: the cursor comes from the Next-Page header, so the next
    /// request can leave before this body is decoded (by the caller, later).
    /// `firstOfChanges`: the first page of what changed since `since`, newest
    /// first (Kinto's default order), so it holds the change at the
    /// collection's version, unless one was undone (see `decode`).
    private func listing(_ request: HTTPRequest, since: Int64?, what: String, firstOfChanges: Bool = false,
                         _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        exchange.send(request) { [self] result in
            done(.tether {
                if let since, case .success(let answer) = result {
                    if answer.status == 304 { return Page(next: nil, version: since) { PageContent(records: []) } }
                    // Kinto refuses a _since beyond what it knows of the collection.
                    if answer.status == 400, String(decoding: answer.body, as: UTF8.self).contains("_since") {
                        throw TetherError(.expired, "the server does not know version \(since) of \(what)")
                    }
                }
                let response = try Self.checked(result, what: what)
                let version = Self.version(of: response)
                if let since, let version, version < since {
                    // Older than what we hold: the collection was flushed or restored.
                    throw TetherError(.expired, "\(what) is at version \(version), older than \(since)")
                }
                let next = try nextPage(response).map(PageCursor.init)
                let total = response.header("Total-Records").flatMap { Int64($0) }  // older Kintos send it
                // A server query's `_fields` (kept on every next page's URL) leaves the others out.
                let partial = request.url.split(separator: "?", maxSplits: 1).dropFirst().first?
                    .split(separator: "&").contains { $0.hasPrefix("_fields=") } ?? false
                return Page(next: next, version: version, total: total) {
                    var content = PageContent(records: [])
                    content.partial = partial
                    let items = try Self.records(in: Self.body(of: response, what: what), what: what)
                    if firstOfChanges, let since, let version, version > since,
                       !items.contains(where: { $0[Self.versionField]?.integerValue.map { $0 >= version } ?? true }) {
                        // The collection moved on, but no change reaches its
                        // version: what made it was undone (a record put back
                        // with an older version, a collection recreated empty).
                        throw TetherError(.expired, "\(what) is at version \(version) but names no change "
                                                    + "that recent since \(since): its history was rewritten")
                    }
                    try Self.collect(items, into: &content, what: what)
                    return content
                }
            })
        }
        return exchange
    }

    /// A listing's ETag: the collection's timestamp, quoted.
    private static func version(of response: HTTPResponse) -> Int64? {
        guard var tag = response.header("ETag") else { return nil }
        if tag.hasPrefix("W/") { tag.removeFirst(2) }
        guard tag.count >= 2, tag.hasPrefix("\""), tag.hasSuffix("\"") else { return nil }
        return Int64(tag.dropFirst().dropLast())
    }

    // MARK: writes

    /// Each write is a subrequest of `POST /v1/batch`, as many per batch as
    /// the server allows (`batch_max_requests`), batches one after another (in order: a later
    /// write may depend on an earlier one). A batch is not a transaction:
    /// each subrequest has its own outcome. The batch may be sent again after
    /// a cut connection, as every write in it is conditional.
    public func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        let exchange = Exchange(engine, backoff)
        // Kinto refuses a batch holding a path with "/batch" in it.
        let limit = writes.contains { $0.spec.route.contains("/batch") } ? 1 : batchLimit.withLock { $0 }
        if writes.isEmpty { answered([]) } else { sendWrites(writes[...], limit: limit, exchange, answered) }
        return exchange
    }

    private func sendWrites(_ remaining: ArraySlice<RecordWrite>, limit: Int, _ exchange: Exchange,
                            _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) {
        guard !remaining.isEmpty else { return }
        // A patch that nulls a field goes alone: a batch ignores a
        // subrequest's content type, and merge-patch is what removes it.
        let alone = { (write: RecordWrite) in write.kind == .patch && write.fields.contains { $0.value == .null } }
        let chunk = alone(remaining.first!) ? remaining.prefix(1) : remaining.prefix(limit).prefix { !alone($0) }
        let rest = remaining.dropFirst(chunk.count)
        let request: HTTPRequest
        if chunk.count == 1 {
            let write = chunk.first!
            request = HTTPRequest(method: Self.method(write), url: recordURL(write.spec, write.id), headers: Self.conditions(write),
                                  body: Self.body(write).map { Array($0.serialized().utf8) }, repeatable: true)
        } else {
            let subrequests: [JSON] = chunk.map { write in
                var members: [(key: String, value: JSON)] = [
                    ("method", .string(Self.method(write))),
                    ("path", .string(String(recordURL(write.spec, write.id).dropFirst(root.count)))),
                    ("headers", .object(Self.conditions(write).map { header in
                        let parts = header.split(separator: ":", maxSplits: 1)
                        return (String(parts[0]), .string(String(parts[1].dropFirst())))
                    })),
                ]
                if let body = Self.body(write) { members.append(("body", body)) }
                return .object(members)
            }
            request = HTTPRequest(method: "POST", url: root + "/batch",
                                  body: Array(JSON.object([("requests", .array(subrequests))]).serialized().utf8), repeatable: true)
        }
        exchange.send(request) { [self] result in
            let outcomes: [WriteOutcome]
            do {
                outcomes = try chunk.count == 1 ? [Self.outcome(of: result, chunk.first!)] : Self.outcomes(of: result, chunk)
            } catch {
                // Nothing known of this batch; the rest is not sent.
                return answered(Array(repeating: .failed(TetherError.wrap(error)), count: remaining.count))
            }
            answered(outcomes)
            sendWrites(rest, limit: limit, exchange, answered)
        }
    }

    private static func method(_ write: RecordWrite) -> String {
        switch write.kind {
        case .create, .replace: return "PUT"
        case .patch: return "PATCH"
        case .delete: return "DELETE"
        }
    }

    /// The preconditions, and for a patch that nulls a field the JSON
    /// merge-patch type: Kinto then removes the field, as a schema that
    /// types it (as text, say) refuses a null; a field absent reads null.
    private static func conditions(_ write: RecordWrite) -> [String] {
        var headers: [String]
        switch (write.kind, write.ifVersion) {
        case (.create, _): headers = ["If-None-Match: *"]
        case (_, let version?): headers = ["If-Match: \"\(version)\""]
        case (_, nil): headers = []
        }
        if write.kind == .patch, write.fields.contains(where: { $0.value == .null }) {
            headers.append("Content-Type: application/merge-patch+json")
        }
        return headers
    }

    /// A create or replace leaves null fields out (absent reads null).
    private static func body(_ write: RecordWrite) -> JSON? {
        guard write.kind != .delete else { return nil }
        let fields = write.fields.filter { $0.key != idField && $0.key != versionField && (write.kind == .patch || $0.value != .null) }
        return .object([("data", .object(fields))])
    }

    /// The outcomes of a batch's answer, one per write.
    private static func outcomes(of result: Result<HTTPResponse, TetherError>, _ writes: ArraySlice<RecordWrite>) throws
        -> [WriteOutcome] {
        let what = "a batch of \(writes.count) writes"
        guard let responses = try body(of: checked(result, what: what), what: what)["responses"]?.arrayValue,
              responses.count == writes.count else {
            throw TetherError(.protocol, "the server's answer to \(what) does not answer each write")
        }
        return zip(responses, writes).map { response, write in
            guard case .integer(let status)? = response["status"] else {
                return .failed(TetherError(.protocol, "a batch answer for \(write.spec.name)/\(write.id) has no status"))
            }
            let body = response["body"].map { Array($0.serialized().utf8) } ?? []
            return (try? outcome(of: .success(HTTPResponse(status: Int(status), headers: [], body: body)), write))
                ?? .failed(TetherError(.protocol, "the server's answer for \(write.spec.name)/\(write.id) is not JSON"))
        }
    }

    /// One write's outcome from its answer; throws only when nothing is
    /// known (no answer at all).
    private static func outcome(of result: Result<HTTPResponse, TetherError>, _ write: RecordWrite) throws -> WriteOutcome {
        let response = try result.get()
        let what = "\(write.spec.name)/\(write.id)"
        switch response.status {
        case 200..<300:
            if write.kind == .delete { return .deleted }
            guard let data = try body(of: response, what: what)["data"]?.objectValue else {
                return .failed(TetherError(.protocol, "the server's answer for \(what) has no record"))
            }
            return .written(data)
        case 412:
            // Kinto names the record it has; none when it has none.
            let existing = (try? JSON.parse(response.body))?["details"]?["existing"]?.objectValue
            return .conflict(current: existing)
        case 404 where write.kind == .delete:
            return .deleted
        case 404 where write.kind != .create:
            return .conflict(current: nil)
        case 400:
            // The record itself was refused (Kinto: its schema, an id it does not take).
            return .failed(TetherError(.invalid, "the server refused \(what) (HTTP 400)\(refusal(response.body))"))
        default:
            do {
                _ = try checked(.success(response), what: what)
                return .failed(TetherError(.protocol, "the server answered \(what) with HTTP \(response.status)"))
            } catch {
                return .failed(TetherError.wrap(error))
            }
        }
    }

    private func recordURL(_ spec: Spec, _ id: String) -> String { root + spec.route + "/" + Self.escape(id) }

    // MARK: answers

    /// Turns transport failures and error statuses into errors, with Kinto's
    /// own message when it sent one.
    private static func checked(_ result: Result<HTTPResponse, TetherError>, what: String) throws -> HTTPResponse {
        let response = try result.get()
        guard !(200..<300).contains(response.status) else { return response }
        let serverMessage = (try? JSON.parse(response.body))?["message"]?.stringValue
        let detail = serverMessage.map { ": \($0)" } ?? ""
        switch response.status {
        case 401, 403:
            throw TetherError(.auth, "the server refused access to \(what) (HTTP \(response.status))\(detail)")
        case 404:
            throw TetherError(.notFound, "the server has no \(what) (HTTP 404)\(detail)")
        case 412:
            throw TetherError(.conflict, "\(what) changed on the server (HTTP 412)\(detail)")
        default:
            throw TetherError(.server, "the server failed on \(what) (HTTP \(response.status))\(detail)")
        }
    }

    /// Why Kinto refused a record, naming the fields it names: its
    /// `details` list each field (`name`) with what is wrong with it
    /// (`description`); its `message` holds only the first, and not always
    /// with its field.
    static func refusal(_ body: [UInt8]) -> String {
        guard let answer = try? JSON.parse(body) else { return "" }
        let named = (answer["details"]?.arrayValue ?? []).compactMap { detail -> String? in
            guard let name = detail["name"]?.stringValue, !name.isEmpty else { return nil }
            let description = detail["description"]?.stringValue ?? "refused"
            return "\(name): \(description)"
        }
        if !named.isEmpty { return ": " + named.joined(separator: "; ") }
        return answer["message"]?.stringValue.map { ": \($0)" } ?? ""
    }

    private static func body(of response: HTTPResponse, what: String) throws -> JSON {
        do {
            return try JSON.parse(response.body)
        } catch let error as TetherError {
            throw TetherError(.protocol, "the server's answer for \(what) is not JSON: \(error.message)")
        }
    }

    private static func records(in body: JSON, what: String) throws -> [JSON] {
        guard let data = body["data"]?.arrayValue else {
            throw TetherError(.protocol, "the server's answer for \(what) has no data list")
        }
        return data
    }

    /// A listing's records and tombstones.
    /// An item that is neither is left out, named in `unreadable`.
    private static func collect(_ records: [JSON], into content: inout PageContent, what: String) throws {
        let offset = content.records.count + content.deletedIDs.count + content.unreadable.count
        for (index, record) in records.enumerated() {
            guard let fields = record.objectValue else {
                content.unreadable.append(UnreadableItem(position: offset + index, reason: "it is not a JSON object"))
                continue
            }
            if record["deleted"] == .bool(true) {
                guard let id = record[idField]?.stringValue, !id.isEmpty else {
                    content.unreadable.append(UnreadableItem(
                        position: offset + index, reason: "a deletion without a usable id: " + Record.idProblem(record[idField], field: idField)))
                    continue
                }
                content.deletedIDs.append(id)
            } else {
                content.records.append(fields)
            }
        }
    }

    /// The next page's URL. It must stay on this server: credentials go with it.
    private func nextPage(_ response: HTTPResponse) throws -> String? {
        guard let next = response.header("Next-Page"), !next.isEmpty else { return nil }
        // A root with user info: the server names itself without it.
        let plain = Log.redacted(root)
        guard next.hasPrefix(plain + "/") else {
            throw TetherError(.protocol, "the server sent a Next-Page outside \(plain)")
        }
        return root + next.dropFirst(plain.count)
    }

    /// A batch answer's Next-Page. Kinto builds a subrequest's URLs itself,
    /// and behind a TLS proxy it may say http for https: only the path and
    /// query are taken, and only under the root's path, so the request
    /// still goes to the root (as do the credentials).
    private func subrequestNextPage(_ response: HTTPResponse) throws -> String? {
        guard let next = response.header("Next-Page"), !next.isEmpty else { return nil }
        func pathAndQuery(_ url: String) -> String? {  // scheme://host/path?query -> /path?query
            let parts = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
            guard parts.count >= 3, parts[0].hasSuffix(":"), parts[1].isEmpty, !parts[2].isEmpty else { return nil }
            return parts.count == 4 ? "/" + parts[3] : ""
        }
        guard let path = pathAndQuery(next), let rootPath = pathAndQuery(root), path.hasPrefix(rootPath + "/") else {
            throw TetherError(.protocol, "the server sent a Next-Page outside \(Log.redacted(root))")
        }
        return root + path.dropFirst(rootPath.count)
    }

    /// The shape Kinto gives bucket and collection ids.
    static func isKintoID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 256 && text.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }

    static func escape(_ text: String) -> String {
        var escaped = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                 UInt8(ascii: "~"):
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF")
                escaped += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
            }
        }
        return escaped
    }
}

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
        let serverWait = backoff.remainingMilliseconds()
        if serverWait > delay {
            Log.debug(.http, "\(request.method) \(Log.path(of: request.url)) waits \(serverWait) ms: the server asked to back off")
        }
        let id = engine.start(request, afterMilliseconds: max(delay, serverWait)) { [self] result in
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
/// load or maintenance: no new request until N seconds after it. Requests
/// already on the wire are not affected; a hostile value is capped.
final class ServerBackoff: Sendable {
    static let longestMilliseconds: Int64 = 30_000
    private let until = Lock<MonotonicTime?>(nil)

    func heed(_ response: HTTPResponse) {
        guard let wait = response.seconds(inHeader: "Backoff", atMostMilliseconds: Self.longestMilliseconds), wait > 0 else {
            return
        }
        let due = MonotonicTime.now().adding(milliseconds: wait)
        let later = until.withLock { until -> Bool in
            guard until.map({ $0 < due }) ?? true else { return false }
            until = due
            return true
        }
        if later { Log.info(.http, "the server asked to back off: no new request for \(wait) ms") }
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
