import Synchronization

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
    static let batchCursorPrefix = "batch\n"

    let root: String
    let bucket: String
    let engine: HTTPEngine
    /// The server's `Backoff`, shared by every exchange with it.
    let backoff = ServerBackoff()
    public let identity: String
    public let formerIdentities: [String]
    /// Subrequests one `POST /v1/batch` may carry, from the server info
    /// (`batch_max_requests`); 1 until it is known: plain requests only.
    let batchLimit = Lock(1)
    /// Whether the server info named the history plugin (`KintoHistory`).
    let offersHistory = Lock(false)

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

    var bucketPath: String { "/buckets/\(Self.escape(bucket))" }


    /// Turns transport failures and error statuses into errors, with Kinto's
    /// own message when it sent one.
    static func checked(_ result: Result<HTTPResponse, TetherError>, what: String) throws -> HTTPResponse {
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

    static func body(of response: HTTPResponse, what: String) throws -> JSON {
        do {
            return try JSON.parse(response.body)
        } catch let error as TetherError {
            throw TetherError(.protocol, "the server's answer for \(what) is not JSON: \(error.message)")
        }
    }

    static func records(in body: JSON, what: String) throws -> [JSON] {
        guard let data = body["data"]?.arrayValue else {
            throw TetherError(.protocol, "the server's answer for \(what) has no data list")
        }
        return data
    }

    /// A listing's records and tombstones.
    /// An item that is neither is left out, named in `unreadable`.
    static func collect(_ records: [JSON], into content: inout PageContent, what: String) throws {
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
                content.deletedVersions.append(record[versionField]?.integerValue)
            } else {
                content.records.append(fields)
            }
        }
    }

    /// The next page's URL. It must stay on this server: credentials go with it.
    func nextPage(_ response: HTTPResponse) throws -> String? {
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
    func subrequestNextPage(_ response: HTTPResponse) throws -> String? {
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
