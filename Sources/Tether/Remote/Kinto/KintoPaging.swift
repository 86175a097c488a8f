/// Listings: pages of a collection (or of what changed since a version),
/// counts, and records by id, several listings in one batch.
extension KintoConnection {
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
        // A server query's own `_limit` is the one sent: Kinto refuses two.
        if sorted, request.limit > 0, request.rawQuery.flatMap(limit(ofServerQuery:)) == nil {
            query.append("_limit=\(request.limit)")
        }
        if let since = request.since { query.append("_since=\(since)") }  // changes and tombstones after it
        if let fields = request.fields { query.append("_fields=" + fields.map(Self.escape).joined(separator: ",")) }
        if let raw = request.rawQuery, !raw.isEmpty { query.append(raw) }
        return root + request.spec.route + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
    }

    /// A server query's `_limit`, which Kinto takes as a page size (cut to
    /// its `paginate_by`, with a Next-Page) where a host means a limit: the
    /// core makes it one. 0 (Kinto: pages of its largest size) or not a
    /// count: none. (Kinto refuses a `_limit` given twice.)
    public func limit(ofServerQuery query: String) -> Int64? {
        var limit: Int64?
        for parameter in query.split(separator: "&") {
            let pair = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2, Self.unescaped(pair[0]) == "_limit" else { continue }
            limit = Int64(Self.unescaped(pair[1])).flatMap { $0 > 0 ? $0 : nil }
        }
        return limit
    }

    /// Percent-encoding undone, as Kinto reads a query ("%5Flimit" is "_limit").
    private static func unescaped(_ text: Substring) -> String {
        String(decoding: PercentEncoding.decoded(text, lenient: true) ?? [], as: UTF8.self)
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
}
