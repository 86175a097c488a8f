/// How far the server phase has come: records received (every record the
/// server sent, matching or not) of `total`, when the server tells it.
public struct FetchProgress: Sendable, Equatable {
    public let received: Int64
    public let total: Int64?
}

/// Progress of the server phase: records received, of the total the
/// server tells (with its pages, or a count asked beside them).
extension FetchTask {
    /// Progress is told at most this often (and not after the final).
    static let progressIntervalMilliseconds: Int64 = 100

    /// Event: `count` more records came from the server; `last`: the
    /// listing's last page, whose count is told whatever the interval.
    func received(_ count: Int, total: Int64?, last: Bool) {
        let told = lifecycle.withRunning { work -> FetchProgress? in
            guard work.listing != nil else { return nil }
            work.listing!.sentByServer += Int64(count)
            if work.listing!.total == nil { work.listing!.total = total }
            let now = MonotonicTime.now()
            if !last, let told = work.progressToldAt, now.milliseconds(since: told) < Self.progressIntervalMilliseconds {
                return nil
            }
            work.progressToldAt = now
            return FetchProgress(received: work.listing!.sentByServer, total: work.listing!.total)
        }
        if let told = told ?? nil { lifecycle.tell(told) }
    }

    /// For progress: how many records the listing holds, when the server
    /// does not say with its pages (Kinto's only on HEAD). Holds the task
    /// weakly, so it keeps nothing alive, and is cancelled when the fetch ends.
    func askTotal(_ plan: ServerPlan) {
        var page = PageRequest(spec: entity.spec)
        if case .query = plan {
            page.filters = server.filters
            page.rawQuery = request.serverQuery
        }
        // A cancel's answer may come at once, from inside the cancel.
        let remote = connection.count(page) { [weak self] result in
            guard let self, case .success(let count) = result else { return }
            let total = needed > 0 ? min(count, needed) : count  // the listing stops at the limit
            withListing { listing in
                if listing.plan == plan, listing.total == nil { listing.total = total }
            }
        }
        if lifecycle.withRunning({ $0.totalRequest = remote }) == nil { remote.cancel() }
    }
}
