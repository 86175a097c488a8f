import CCurl

/// Kinto's HTTP API, as far as the model and the cache need it. Answers are
/// checked for shape; every failure maps to a TetherError kind.
final class KintoClient: @unchecked Sendable {
    let root: String
    let bucket: String
    let engine: HTTPEngine

    init(root: String, bucket: String, engine: HTTPEngine) {
        self.root = root
        self.bucket = bucket
        self.engine = engine
    }

    var bucketPath: String { "/buckets/\(Self.escape(bucket))" }

    // MARK: connect (blocking: used while a context opens)

    func serverInfo() throws -> JSON {
        let info = try decode(engine.send(HTTPRequest(url: root + "/")), what: "server info")
        guard info["http_api_version"] != nil || info["project_name"] != nil else {
            throw TetherError(.protocol, "\(root)/ does not answer like a Kinto server")
        }
        return info
    }

    /// Every collection of the bucket with its metadata (schema included).
    func collections() throws -> [JSON] {
        // The bucket first: for a missing bucket Kinto answers its collection
        // listing with 401/403, but the bucket itself with 404.
        _ = try decode(engine.send(HTTPRequest(url: root + bucketPath)), what: "bucket \(bucket)")
        var collections: [JSON] = []
        var url: String? = root + bucketPath + "/collections"
        while let next = url {
            let response = try checked(engine.send(HTTPRequest(url: next)), what: "collections of \(bucket)")
            collections += try Self.records(in: response, what: "collections of \(bucket)")
            url = try nextPage(response)
        }
        return collections
    }

    /// What the current user may do, by object URI ("/buckets/b/collections/c"),
    /// from Kinto's permissions endpoint; nil when the server does not offer it.
    /// It lists only grants that name the user's principals, not inherited ones.
    func permissions() throws -> [String: Set<String>]? {
        var grants: [String: Set<String>] = [:]
        var url: String? = root + "/permissions?bucket_id=" + Self.escape(bucket)
        while let next = url {
            let response: HTTPResponse
            do {
                response = try checked(engine.send(HTTPRequest(url: next)), what: "permissions")
            } catch let error as TetherError where error.kind == .notFound || error.kind == .auth {
                return nil
            }
            for entry in try Self.records(in: response, what: "permissions") {
                guard let uri = entry["uri"]?.stringValue else { continue }
                grants[uri, default: []].formUnion((entry["permissions"]?.arrayValue ?? []).compactMap(\.stringValue))
            }
            url = try nextPage(response)
        }
        return grants
    }

    // MARK: records (asynchronous)

    /// Lists records of `entity`, following `Next-Page`, calling `page` with each
    /// page's records and `done` once at the end. `maximum` stops paging once
    /// that many records came (0: all). Returns a handle for `cancel`.
    func listRecords(route: String, query: [(String, String)], maximum: Int64,
                     page: @escaping ([JSON]) throws -> Void,
                     done: @escaping (Result<Void, TetherError>) -> Void) -> ListingHandle {
        let handle = ListingHandle()
        var received: Int64 = 0
        func fetch(_ url: String) {
            let id = engine.start(HTTPRequest(url: url)) { [self] result in
                do {
                    let response = try checked(result, what: route)
                    let records = try Self.records(in: response, what: route)
                    received += Int64(records.count)
                    try page(records)
                    if let next = try nextPage(response), maximum == 0 || received < maximum {
                        guard handle.setTransfer(nil) else { return done(.failure(.cancelled)) }
                        fetch(next)
                    } else {
                        done(.success(()))
                    }
                } catch let error as TetherError {
                    done(.failure(error))
                } catch {
                    done(.failure(TetherError(.internal, "\(error)")))
                }
            }
            if !handle.setTransfer(id) { engine.cancel(id) }
        }
        var url = root + route
        if !query.isEmpty { url += "?" + query.map { "\($0)=\(Self.escape($1))" }.joined(separator: "&") }
        fetch(url)
        return handle
    }

    func cancel(_ listing: ListingHandle) {
        if let id = listing.cancel() { engine.cancel(id) }
    }

    // MARK: answers

    private func decode(_ result: Result<HTTPResponse, TetherError>, what: String) throws -> JSON {
        let response = try checked(result, what: what)
        return try Self.body(of: response, what: what)
    }

    /// Turns transport failures and error statuses into errors, with Kinto's
    /// own message when it sent one.
    private func checked(_ result: Result<HTTPResponse, TetherError>, what: String) throws -> HTTPResponse {
        let response = try result.get()
        guard !(200..<300).contains(response.status) else { return response }
        let serverMessage = (try? JSON.parse(response.body))?["message"]?.stringValue
        let detail = serverMessage.map { ": \($0)" } ?? ""
        switch response.status {
        case 401, 403:
            throw TetherError(.auth, "the server refused access to \(what) (HTTP \(response.status))\(detail)")
        case 404:
            throw TetherError(.notFound, "the server has no \(what) (HTTP 404)\(detail)")
        default:
            throw TetherError(.server, "the server failed on \(what) (HTTP \(response.status))\(detail)")
        }
    }

    private static func body(of response: HTTPResponse, what: String) throws -> JSON {
        do {
            return try JSON.parse(response.body)
        } catch let error as TetherError {
            throw TetherError(.protocol, "the server's answer for \(what) is not JSON: \(error.message)")
        }
    }

    private static func records(in response: HTTPResponse, what: String) throws -> [JSON] {
        guard let data = try body(of: response, what: what)["data"]?.arrayValue else {
            throw TetherError(.protocol, "the server's answer for \(what) has no data list")
        }
        return data
    }

    /// The next page's URL. It must stay on this server: credentials go with it.
    private func nextPage(_ response: HTTPResponse) throws -> String? {
        guard let next = response.header("Next-Page"), !next.isEmpty else { return nil }
        guard next.hasPrefix(root + "/") else {
            throw TetherError(.protocol, "the server sent a Next-Page outside \(root)")
        }
        return next
    }

    static func escape(_ text: String) -> String {
        var escaped = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                 UInt8(ascii: "~"), UInt8(ascii: ","):
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF")
                escaped += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
            }
        }
        return escaped
    }
}

/// A listing in progress: its current transfer, and whether it was cancelled.
final class ListingHandle: @unchecked Sendable {
    private let lock = Lock()
    private var transfer: HTTPEngine.TransferID?
    private var cancelled = false

    /// Records the current transfer; false if the listing was cancelled.
    func setTransfer(_ id: HTTPEngine.TransferID?) -> Bool {
        lock.withLock {
            transfer = id
            return !cancelled
        }
    }

    func cancel() -> HTTPEngine.TransferID? {
        lock.withLock {
            cancelled = true
            return transfer
        }
    }
}
