/// The prepared statements of one connection, by SQL text.
///
/// Two kinds: pinned statements (each entity's upsert and load, BEGIN and
/// COMMIT, the bookkeeping every write does) are never evicted, as their
/// number is bounded by the model and the code; the others (SQL built from
/// predicates and sort keys, which can vary without bound) are kept up to
/// `capacity`, the least recently used one evicted to make room. A statement
/// is finalized when nothing holds it any more: when it is evicted, dropped
/// or cleared (or the cache goes) and the caller using it is done with it.
/// Not thread-safe: its Database's owner serializes every use.
final class StatementCache {
    /// Unpinned statements kept at most.
    let capacity: Int

    private var pinned: [String: Statement] = [:]
    private var recent: [String: (statement: Statement, lastUse: UInt64)] = [:]
    /// Counts uses: a statement's last use orders it for eviction.
    private var clock: UInt64 = 0
    /// The pinned statement used last (one of `pinned`).
    private var lastPinned: Statement?

    init(capacity: Int) {
        precondition(capacity > 0, "a statement cache holds at least one statement")
        self.capacity = capacity
    }

    /// Statements kept, pinned or not.
    var count: Int { pinned.count + recent.count }

    /// The statement kept for `sql`, noted as just used; `pin` moves it
    /// (or keeps it) among the pinned.
    func use(_ sql: String, pin: Bool) -> Statement? {
        // The last pinned statement used, without hashing its text: a
        // first read runs the same load again and again.
        if let last = lastPinned, last.sql == sql { return last }
        if let statement = pinned[sql] {
            lastPinned = statement
            return statement
        }
        guard let entry = recent[sql] else { return nil }
        if pin {
            recent[sql] = nil
            pinned[sql] = entry.statement
            lastPinned = entry.statement
        } else {
            clock += 1
            recent[sql]!.lastUse = clock
        }
        return entry.statement
    }

    /// The statement kept for `sql`, without counting as a use.
    func peek(_ sql: String) -> Statement? { pinned[sql] ?? recent[sql]?.statement }

    /// Keeps `statement` for `sql` (not kept yet), evicting the least
    /// recently used unpinned statement if there is no room.
    func insert(_ statement: Statement, for sql: String, pin: Bool) {
        if pin {
            pinned[sql] = statement
            lastPinned = statement
            return
        }
        if recent.count >= capacity {
            // A linear scan: it runs only when a statement is prepared,
            // which costs far more than looking at `capacity` entries.
            if let oldest = recent.min(by: { $0.value.lastUse < $1.value.lastUse })?.key { recent[oldest] = nil }
        }
        clock += 1
        recent[sql] = (statement, clock)
    }

    /// Forgets `statement` if it is the one kept for `sql`: the next use of
    /// `sql` prepares it anew.
    func remove(_ statement: Statement, for sql: String) {
        if pinned[sql] === statement { pinned[sql] = nil }
        if lastPinned === statement { lastPinned = nil }
        if recent[sql]?.statement === statement { recent[sql] = nil }
    }

    /// Forgets every statement, pinned ones included (the schema changed,
    /// or the connection closes).
    func removeAll() {
        pinned = [:]
        recent = [:]
        lastPinned = nil
    }
}
