/// Incremental sync over the change tracking sql/tether-postgres.sql
/// installs (schema tether: versions, tombstones, tracked tables; see the
/// file). A listing's version, the sync cursor, is a transaction horizon:
/// the oldest transaction running when the listing began (every older one
/// has ended, so its changes are in what was read). A listing since a
/// cursor sends the rows changed by transactions from it on, and the keys
/// deleted; "nothing changed" is answered from the tracking tables' index,
/// without reading the table. Tables not tracked are listed whole, as
/// before, and the connection says so once (log, category "sync").
final class PostgresChanges: Sendable {
    /// Whether the schema was found installed (nil: look again next time).
    private let installed = Lock<Bool?>(nil)
    /// What was already said about tracking ("" for the schema as a whole).
    private let told = Lock<Set<String>>([])
    /// Tables the last look found tracked (their triggers push changes).
    private let tracked = Lock<Set<String>>([])
    /// Rows listed from tables, all listings together: a sync that finds
    /// nothing new adds none (tests count them).
    let rowsListed = Lock<Int>(0)
    let schema: String

    init(schema: String) { self.schema = schema }

    struct Tracking {
        /// The oldest transaction running now: the next cursor.
        let horizon: Int64
        /// Changes are recorded from this transaction on.
        let since: Int64
        let relation: String
        /// The key column's type, as SQL names it.
        let keyType: String
        /// Whether a change or deletion is recorded from the cursor asked on.
        let changed: Bool
    }

    /// How `table` is tracked now, or nil where it is not (said once).
    func tracking(_ table: PostgresTable, cursor: Int64?, _ session: PostgresSession) throws -> Tracking? {
        guard try isInstalled(session) else { return nil }
        let rows: [[String?]]
        do {
            rows = try session.query("""
                SELECT pg_snapshot_xmin(pg_current_snapshot())::text, r.since::text, r.relation,
                       format_type(a.atttypid, a.atttypmod),
                       (EXISTS (SELECT 1 FROM tether.versions v WHERE v.relation = r.relation AND v.xid >= $3::text::xid8)
                        OR EXISTS (SELECT 1 FROM tether.tombstones d WHERE d.relation = r.relation AND d.xid >= $3::text::xid8))::text
                FROM tether.tracked r
                JOIN pg_attribute a ON a.attrelid = to_regclass(r.relation) AND a.attname = $2 AND NOT a.attisdropped
                WHERE r.relation = format('%I.%I', $1::text, $4::text)
                  AND (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = a.attrelid AND g.tgenabled <> 'D' AND g.tgname IN
                       ('tether_track_insert', 'tether_track_update', 'tether_track_delete', 'tether_track_truncate')) = 4
                """, [schema, table.id.name, String(max(0, cursor ?? 0)), table.spec.name])
        } catch let error as TetherError where error.kind == .notFound {
            installed.withLock { $0 = nil }  // dropped meanwhile?
            guard try isInstalled(session) else { return nil }
            throw error
        }
        guard let row = rows.first, let horizon = row[0].flatMap({ Int64($0) }), let since = row[1].flatMap({ Int64($0) }),
              let relation = row[2], let keyType = row[3] else {
            tracked.withLock { _ = $0.remove(table.spec.name) }
            tell(table.spec.name, "PostgreSQL table \(schema).\(table.spec.name) is not tracked (SELECT tether.track('\(schema)')):"
                 + " each refresh lists it whole")
            return nil
        }
        tracked.withLock { _ = $0.insert(table.spec.name) }
        return Tracking(horizon: horizon, since: since, relation: relation, keyType: keyType, changed: row[4] == "true")
    }

    /// Whether the last listing of `table` found it tracked (never listed:
    /// not known to be, so its live fetches poll until a listing says).
    func isTracked(_ table: String) -> Bool { tracked.withLock { $0.contains(table) } }

    private func isInstalled(_ session: PostgresSession) throws -> Bool {
        if installed.withLock({ $0 }) == true { return true }
        let found = try session.query("""
            SELECT (to_regclass('tether.tracked') IS NOT NULL AND to_regclass('tether.versions') IS NOT NULL
                    AND to_regclass('tether.tombstones') IS NOT NULL)::text
            """).first?.first == "true"
        if found {
            installed.withLock { $0 = true }
        } else {
            tell("", "PostgreSQL: Tether's change tracking is not installed in this database (sql/tether-postgres.sql,"
                 + " tether_postgres_install): each refresh of schema \(schema) lists its tables whole")
        }
        return found
    }

    private func tell(_ what: String, _ message: String) {
        if told.withLock({ $0.insert(what).inserted }) { Log.info(.sync, message) }
    }

    /// One page of what changed in `table` since `cursor` (a horizon an
    /// earlier listing gave): changed rows by change number, the deletions
    /// on the first page. `.expired` where the changes since then are not
    /// all recorded (not tracked, tracked or truncated since): the core then
    /// lists the table whole.
    func page(since cursor: Int64, _ request: PageRequest, _ table: PostgresTable, _ session: PostgresSession,
              pageSize: Int) throws -> Page {
        guard request.filters.isEmpty, request.rawQuery == nil else {
            throw TetherError(.invalid, "a PostgreSQL listing of changes takes no filter")
        }
        guard let tracking = try tracking(table, cursor: cursor, session) else {
            throw TetherError(.expired, "\(schema).\(table.spec.name) is not tracked: everything is listed again")
        }
        guard cursor > tracking.since, cursor <= tracking.horizon else {
            throw TetherError(.expired, "\(schema).\(table.spec.name) has no record of its changes since \(cursor)")
        }
        let version = tracking.horizon
        if !tracking.changed { return Page(next: nil, version: version) { PageContent(records: []) } }
        var after: Int64 = 0
        if let token = request.cursor?.token {
            guard let number = Int64(token) else { throw TetherError(.invalid, "not a cursor of this PostgreSQL listing") }
            after = number
        }
        let key = "t." + PostgresCatalog.quote(table.id.name)
        // The changes first (their keys cast only once they are this table's),
        // then the rows: the same snapshot has both, or neither.
        let changes = try session.query("""
            SELECT v.version::text, \(PostgresQuery.select(table))
            RIGHT JOIN (SELECT key, version FROM tether.versions WHERE relation = $1 AND xid >= $2::text::xid8
                        AND version > $3::int8 ORDER BY version LIMIT \(pageSize)) v ON \(key) = v.key::\(tracking.keyType)
            ORDER BY v.version
            """, [tracking.relation, String(cursor), String(after)])
        let rows = changes.filter { $0[1] != nil }
        rowsListed.withLock { $0 += rows.count }
        // With the deleting transaction: a version (see `PostgresTable.version`) the deletion follows.
        var deleted: [(key: String, xid: Int64?)] = []
        if request.cursor == nil {
            deleted = try session.query("""
                SELECT key, xid::text FROM tether.tombstones WHERE relation = $1 AND xid >= $2::text::xid8 ORDER BY key
                """, [tracking.relation, String(cursor)]).compactMap { row in row[0].map { ($0, row[1].flatMap { Int64($0) }) } }
        }
        let next = changes.count == pageSize ? changes.last?[0].map(PageCursor.init) : nil
        var content = PostgresQuery.content(table, rows.map { Array($0.dropFirst()) })
        content.deletedIDs = deleted.map(\.key)
        content.deletedVersions = deleted.map(\.xid)
        return Page(next: next, version: version) { [content] in content }
    }

    /// Applies sql/tether-postgres.sql (again: harmless) and tracks the
    /// tables of `options.schema`; returns how many it began tracking.
    static func install(_ options: PostgresOptions) throws -> Int {
        let session = try PostgresSession(conninfo: options.conninfo, timeoutMilliseconds: options.timeoutMilliseconds)
        defer { session.close() }
        guard try !session.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [options.schema]).isEmpty else {
            throw TetherError(.notFound, "the PostgreSQL database has no schema \(options.schema.debugDescription)")
        }
        try session.script(PostgresChangeSchema.sql)
        let added = try session.query("SELECT tether.track($1)::text", [options.schema]).first?.first ?? nil
        return added.flatMap { Int($0) } ?? 0
    }
}

extension PostgresConnection {
    /// Installs change tracking (sql/tether-postgres.sql) in the options'
    /// database and tracks the tables of its schema; returns how many it
    /// began tracking (0 the second time).
    @discardableResult
    public static func install(_ options: PostgresOptions) throws -> Int { try PostgresChanges.install(options) }
}
