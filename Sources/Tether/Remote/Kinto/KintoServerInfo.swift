/// The server's info and the bucket's collections as specs, with the
/// operations the caller's permissions allow.
extension KintoConnection {
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
                self.offersHistory.withLock { $0 = info["capabilities"]?["history"] != nil }
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
}
