extension KintoConnection {
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
            if write.kind == .delete {
                // The tombstone's version, which any version of the record it deleted precedes.
                let tombstone = (try? JSON.parse(response.body))?["data"]?[write.spec.versionField]?.integerValue
                return .deleted(version: tombstone)
            }
            guard let data = try body(of: response, what: what)["data"]?.objectValue else {
                return .failed(TetherError(.protocol, "the server's answer for \(what) has no record"))
            }
            return .written(data)
        case 412:
            // Kinto names the record it has; none when it has none.
            let existing = (try? JSON.parse(response.body))?["details"]?["existing"]?.objectValue
            return .conflict(current: existing)
        case 404 where write.kind == .delete:
            return .deleted(version: nil)
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
}
