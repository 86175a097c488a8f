/// Kinto's history plugin (`kinto.plugins.history`, named in the server
/// info's capabilities): one list per bucket of every write to it, each
/// entry with a timestamp of its own, so a record put back with an older
/// `last_modified` (a restore) is a new entry where no `_since` listing of
/// its collection shows it. A round of live data reads it, conditionally,
/// instead of asking each watched collection: unchanged costs one 304.
///
/// Not every write need be there: the server may leave some users' or
/// collections' writes out (`history.exclude_*`) or trim old entries, which
/// is why the context keeps its full checks, further apart (`PeriodicSync`).
extension KintoConnection {
    /// Pages of entries read in one round at most; beyond, the feed says
    /// "anything may have changed" and each watched collection is asked.
    static let historyPagesPerRead = 10

    public func changeFeed(since position: String?,
                           _ done: @escaping @Sendable (Result<ChangeFeed, TetherError>) -> Void) -> (any Cancellable)? {
        guard offersHistory.withLock({ $0 }) else { return nil }
        let exchange = Exchange(engine, backoff)
        let what = "history of bucket \(bucket)"
        let list = root + bucketPath + "/history"
        guard let position else {
            // Where the list ends now: its ETag (one entry asked, its id only).
            exchange.send(HTTPRequest(url: list + "?_limit=1&_fields=id")) { result in
                done(.tether { ChangeFeed(position: try Self.etag(of: Self.checked(result, what: what), what: what), writes: nil) })
            }
            return exchange
        }
        let query = "?_since=\(Self.escape(position))&_sort=last_modified"
                    + "&_fields=resource_name,collection_id,record_id,action,target.data.last_modified"
        // The list's own ETag is the bucket's history timestamp: 304 while no entry came.
        let first = HTTPRequest(url: list + query, headers: ["If-None-Match: \"\(position)\""])
        exchange.send(first) { [self] result in
            do {
                if case .success(let response) = result, response.status == 304 {
                    return done(.success(ChangeFeed(position: position, writes: [])))
                }
                let response = try Self.checked(result, what: what)
                // Entries that land while later pages are read come again next time: harmless.
                let next = try Self.etag(of: response, what: what)
                readEntries(exchange, response, what: what, pages: 1, writes: []) { writes in
                    done(writes.map { ChangeFeed(position: next, writes: $0) })
                }
            } catch {
                done(.failure(TetherError.wrap(error)))
            }
        }
        return exchange
    }

    /// `response`'s entries and those of the pages after it; nil writes
    /// when there are more pages than a round reads.
    private func readEntries(_ exchange: Exchange, _ response: HTTPResponse, what: String, pages: Int, writes: [FeedWrite],
                             _ done: @escaping @Sendable (Result<[FeedWrite]?, TetherError>) -> Void) {
        do {
            let writes = writes + (try Self.records(in: Self.body(of: response, what: what), what: what).compactMap(Self.feedWrite))
            guard let next = try nextPage(response) else { return done(.success(writes)) }
            guard pages < Self.historyPagesPerRead else {
                Log.debug(.sync, "\(what): more than \(pages) pages of writes since the last round: every watched collection is asked")
                return done(.success(nil))
            }
            exchange.send(HTTPRequest(url: next)) { [self] result in
                do {
                    readEntries(exchange, try Self.checked(result, what: what), what: what, pages: pages + 1, writes: writes, done)
                } catch {
                    done(.failure(TetherError.wrap(error)))
                }
            }
        } catch {
            done(.failure(TetherError.wrap(error)))
        }
    }

    /// An entry about a record or a collection; nil for the bucket's own
    /// (its permissions, say) and for what is not an entry.
    static func feedWrite(_ entry: JSON) -> FeedWrite? {
        guard let collection = entry["collection_id"]?.stringValue else { return nil }
        switch entry["resource_name"]?.stringValue {
        case "record":
            guard let id = entry["record_id"]?.stringValue else { return nil }
            return FeedWrite(entity: collection, id: id, version: entry["target"]?["data"]?[versionField]?.integerValue,
                             deleted: entry["action"]?.stringValue == "delete")
        case "collection":
            return FeedWrite(entity: collection, id: nil, version: nil, deleted: entry["action"]?.stringValue == "delete")
        default:
            return nil
        }
    }

    /// A listing's ETag: the quoted timestamp Kinto gives every plural answer.
    static func etag(of response: HTTPResponse, what: String) throws -> String {
        guard let tag = response.header("ETag"), tag.count > 2, tag.hasPrefix("\""), tag.hasSuffix("\""),
              Int64(tag.dropFirst().dropLast()) != nil else {
            throw TetherError(.protocol, "the server's answer for \(what) has no ETag timestamp")
        }
        return String(tag.dropFirst().dropLast())
    }
}
