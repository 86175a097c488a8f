import Glibc
import Synchronization

/// The SQLite file behind a context: the saved model, and one table per
/// entity (`e<entity code>`) with a typed column per attribute (`a<code>`)
/// plus the fields outside the spec, the time each row was fetched (for its
/// age) and the write that stored it (for reconciling, which needs no clock).
/// Each entity's sync version says up to which version of the server's
/// collection the table holds every change. Names from the server never
/// become SQL identifiers. Every statement is prepared once and kept.
final class Store: Sendable {
    /// nil once closed.
    private let connection: Lock<Database?>
    /// A second connection for loading rows by id (an object's first read):
    /// WAL lets it read while `connection` writes, so a peek that must load
    /// does not wait for a fetch's page to be stored. nil for a store with
    /// no file (a second connection would open another, empty database)
    /// and once closed.
    let reader: Lock<Database?>
    /// Each entity's SQL, built once: reads look statements up by it.
    private let statements = Lock<[ObjectIdentifier: EntitySQL]>([:])

    /// The text of one entity's statements, identifiers made from codes.
    /// A class: each read takes it with one retain, not one per string.
    final class EntitySQL: Sendable {
        let entity: Entity
        let select: String
        /// `select` with the rowid after the row's columns (for rows read back by rowid).
        let selectWithRowid: String
        let load: String
        let upsert: String
        /// A kept row's write serial, by id.
        let takeWrite: String
        let deleteByID: String
        let idsWrittenBefore: String
        /// A row's write serial, by id.
        let writeOf: String
        /// A row's version and write serial, by id.
        let versionAndWriteOf: String
        let tombstone: String
        let maxRowid: String

        init(_ entity: Entity) {
            self.entity = entity
            let table = Store.table(entity)
            let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
            let written = Identifier.quoted(Store.writeColumn)
            let columns = Store.columnList(entity)
            select = "SELECT \(columns) FROM \(table)"
            selectWithRowid = "SELECT \(columns), rowid FROM \(table)"
            load = "\(select) WHERE \(idColumn) = ?"
            let placeholders = Array(repeating: "?", count: entity.attributes.count + 3).joined(separator: ", ")
            // A row's values never go back to an older version (pages of two
            // listings can arrive in either order) unless the last parameter
            // says to (the server lost its history: its versions are the
            // truth). The write serial is taken either way: the server has it.
            let version = Identifier.column(code: entity.attributes[entity.versionIndex].code)
            let count = entity.attributes.count + 3
            let newer = "(?\(count + 1) OR excluded.\(version) IS NULL OR \(table).\(version) IS NULL "
                + "OR excluded.\(version) >= \(table).\(version))"
            let assignments = (entity.attributes.map { Identifier.column(code: $0.code) }
                + [Identifier.quoted(Store.extraColumn), Identifier.quoted(Store.fetchedColumn), written])
                .map { "\($0) = excluded.\($0)" }
            // No row changed means the row was kept (`takeWrite` then gives
            // it the write serial). Not RETURNING the version: SQLite
            // gathers RETURNING rows in a temporary table, made and dropped
            // per row, a fifth of a fetch's own work.
            // A new row's rowid is given (`Store.nextRowid`), never one a
            // deleted row had; an updated row keeps its own.
            upsert = "INSERT INTO \(table) (\(columns), rowid) VALUES (\(placeholders), ?\(count + 2)) "
                + "ON CONFLICT (\(idColumn)) DO UPDATE SET " + assignments.joined(separator: ", ") + " WHERE \(newer)"
            takeWrite = "UPDATE \(table) SET \(written) = ? WHERE \(idColumn) = ?"
            maxRowid = "SELECT max(rowid) FROM \(table)"
            deleteByID = "DELETE FROM \(table) WHERE \(idColumn) = ?"
            idsWrittenBefore = "SELECT \(idColumn) FROM \(table) WHERE \(written) < ?"
            writeOf = "SELECT \(written) FROM \(table) WHERE \(idColumn) = ?"
            versionAndWriteOf = "SELECT \(version), \(written) FROM \(table) WHERE \(idColumn) = ?"
            // Only for a row held: an id the store never had is no deletion it
            // saw. Its version is kept: an answer read before the deletion
            // holds that version or an older one, and must not bring it back.
            tombstone = "INSERT OR REPLACE INTO tether_deleted (entity, id, version, write, vague) SELECT ?1, ?2, "
                + "max(coalesce(\(version), ?4), coalesce(?4, \(version))), ?3, ?5 FROM \(table) WHERE \(idColumn) = ?2"
        }
    }

    func sql(_ entity: Entity) -> EntitySQL {
        statements.withLock { cache in
            // The entity itself is kept, so a reused identifier cannot match.
            if let known = cache[ObjectIdentifier(entity)], known.entity === entity { return known }
            let made = EntitySQL(entity)
            cache[ObjectIdentifier(entity)] = made
            return made
        }
    }
    /// The indexes made so far, by table: made on demand, at most
    /// `indexesPerTable` each, as every one slows writes.
    let indexes = Lock<[Int: Set<Int>]>([:])
    /// The model generation (meta "model generation") this store's tables
    /// were read or migrated for; nil until then. Another process that
    /// migrates the file moves it on (`checkModelUnchanged`).
    let modelGeneration = Lock<Int64?>(nil)
    static let indexesPerTable = 8
    static let extraColumn = "tether_extra"
    static let fetchedColumn = "tether_fetched_at"
    /// The store's write serial when the server last sent the row.
    static let writeColumn = "tether_write"
    static let bookkeepingColumns: Set<String> = [extraColumn, fetchedColumn, writeColumn]
    /// The store's own tables; every other is an entity's.
    static let bookkeepingTables = ["tether_meta", "tether_sync", "tether_outbox", "tether_deleted", "tether_claims"]

    /// The store files contexts have open in this process (device, inode, pid):
    /// an outbox has one writer, so a file is one context's and its
    /// siblings'. Claimed by `claim`, given back by `close`.
    private static let claimedFiles = Lock<Set<[UInt64]>>([])
    private let claimed = Lock<[UInt64]?>(nil)

    /// `identity`: whom the store must belong to if it has an owner already
    /// (as `savedModel` checks), told before anything writes to the file.
    init(path: String, identity: String? = nil, formerIdentities: [String] = []) throws {
        let isStore = try Self.checkOwnable(path)
        let database = try Database(path: path)
        do {
            // On this connection, not a read-only one: its close removes the
            // WAL files reading made, leaving a refused file as it was.
            if isStore, let identity { try Self.checkOwner(database, identity: identity, formerIdentities: formerIdentities) }
            try Self.prepare(database)
            Log.info(.store, "store opened: \(path)")
            connection = Lock(database)
            let readOnly = database.fileName.isEmpty ? nil : try Database(path: database.fileName, readOnly: true)
            // Predicates run there too (a batched answer's rowids are listed there).
            if let readOnly { try Self.definePredicateFunctions(readOnly) }
            reader = Lock(readOnly)
        } catch {
            database.close()
            throw error
        }
    }

    /// Refuses a file Tether may not take, before anything writes to it
    /// (switching to WAL and creating tables both write): a file that is
    /// not empty, not an SQLite database without tables, and not a Tether
    /// store (one with `tether_meta`, the first table a store makes) is the
    /// host's. True if the file is a Tether store already.
    @discardableResult
    static func checkOwnable(_ path: String) throws -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }  // not there (or not readable: opening says why)
        var info = stat()
        var header = [UInt8](repeating: 0, count: 16)
        let read = fstat(descriptor, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
            ? header.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, 16) } : -1
        Glibc.close(descriptor)
        guard read != 0 else { return false }  // zero length: empty, Tether's to take
        guard read == 16, header == Array("SQLite format 3\u{0}".utf8) else {
            throw TetherError(.store, "\(path) is not a Tether store (not an SQLite database): it was left as it is")
        }
        let database = try Database(path: path, readOnly: true)
        defer { database.close() }
        let tables = try database.statement("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").rows()
            .compactMap { row -> String? in if case .text(let name) = row[0] { return name } else { return nil } }
        guard tables.isEmpty || tables.contains("tether_meta") else {
            let shown = tables.prefix(3).map(\.debugDescription).joined(separator: ", ") + (tables.count > 3 ? ", …" : "")
            throw TetherError(.store, "\(path) is not a Tether store (an SQLite database with tables \(shown)): it was left as it is")
        }
        return tables.contains("tether_meta")
    }

    /// A store saved for another server (or local store) is an error, not a
    /// silent reset; told before opening migrates anything (its outbox).
    static func checkOwner(_ database: Database, identity: String, formerIdentities: [String]) throws {
        guard let saved = try meta("identity", database) else { return }
        guard saved == identity || formerIdentities.contains(saved) else {
            throw TetherError(.store, "the store belongs to \(Log.redacted(saved)), not \(identity)")
        }
    }

    /// Makes the file this store's alone in the process; `.busy` if a
    /// context has it open already.
    func claim() throws {
        try withDatabase { database in
            var info = stat()
            guard !database.fileName.isEmpty, stat(database.fileName, &info) == 0 else { return }
            // With the pid: a child of fork inherits the parent's set, and is another process.
            let id = [UInt64(info.st_dev), UInt64(info.st_ino), UInt64(UInt32(bitPattern: getpid()))]
            guard Self.claimedFiles.withLock({ $0.insert(id).inserted }) else {
                throw TetherError(.busy, "the store \(database.fileName) is already open in this process: open a sibling of its context instead")
            }
            claimed.withLock { $0 = id }
        }
    }

    private static func prepare(_ database: Database) throws {
        try database.execute("PRAGMA journal_mode=WAL")
        try database.execute("PRAGMA synchronous=NORMAL")
        try database.execute("CREATE TABLE IF NOT EXISTS tether_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)")
        try database.execute("CREATE TABLE IF NOT EXISTS tether_sync (entity INTEGER PRIMARY KEY NOT NULL, version INTEGER NOT NULL)")
        // Tombstones: rows the server deleted, so a reopened store still
        // tells "gone" from "not fetched". The rowid orders them for the bound.
        // A tombstone keeps the version its deletion follows, the write
        // serial of the deletion, and whether that version is vague (see
        // `withoutStale`).
        try database.execute("""
            CREATE TABLE IF NOT EXISTS tether_deleted (entity INTEGER NOT NULL, id TEXT NOT NULL, version INTEGER, write INTEGER,
                                                       vague INTEGER, PRIMARY KEY (entity, id))
            """)
        // 0.2's tombstones had none of these: theirs stay null (no answer is judged older).
        for column in ["version", "write", "vague"] { try addColumnIfMissing("tether_deleted", column, "INTEGER", database) }
        try database.execute(Self.outboxSchema)
        try database.execute(Self.claimsSchema)
        try addColumnIfMissing("tether_claims", "token", "INTEGER NOT NULL DEFAULT 0", database)
        try addColumnIfMissing("tether_outbox", "sent_writes", "TEXT", database)
        try definePredicateFunctions(database)
    }

    /// Statements prepared on this store so far.
    var prepareCount: Int {
        ((try? withDatabase { $0.prepareCount }) ?? 0) + ((try? withReader { $0.prepareCount }) ?? 0)
    }

    /// The prepared statement that loads one record of `entity`, if it is
    /// kept: the same object across reads means it was prepared once.
    func loadStatement(_ entity: Entity) -> AnyObject? {
        let text = sql(entity).load
        return try? withReader { $0.cachedStatement(text) }
    }

    func close() {
        reader.withLock { database in
            database?.close()
            database = nil
        }
        connection.withLock { database in
            database?.close()
            database = nil
        }
        // Once only: another store may have claimed the file since.
        if let id = claimed.withLock({ id in defer { id = nil }; return id }) {
            _ = Self.claimedFiles.withLock { $0.remove(id) }
        }
    }

    func withDatabase<T>(_ body: (Database) throws -> T) throws -> T {
        try connection.withLock { database in
            guard let database else { throw TetherError(.closed, "the store is closed") }
            return try body(database)
        }
    }

    /// Runs `body` while holding the writing connection in an open write
    /// transaction, as a page being stored does.
    func holdingWriteTransaction<T>(_ body: () throws -> T) throws -> T {
        try withDatabase { database in try database.transaction(body) }
    }

    /// The reading connection if the store has one, else the only one.
    func withReader<T>(_ body: (Database) throws -> T) throws -> T {
        let read = try reader.withLock { database -> T? in
            guard let database else { return nil }
            return try body(database)
        }
        if let read { return read }
        return try withDatabase(body)
    }

    // MARK: helpers

    static func meta(_ key: String, _ database: Database) throws -> String? {
        let row = try database.statement("SELECT value FROM tether_meta WHERE key = ?", pinned: true).rows([.text(key)]).first
        if case .text(let value)? = row?.first { return value }
        return nil
    }

    static func setMeta(_ key: String, _ value: String, _ database: Database) throws {
        try database.statement("INSERT OR REPLACE INTO tether_meta (key, value) VALUES (?, ?)", pinned: true).run([.text(key), .text(value)])
    }

    static func table(_ entity: Entity) -> String { Identifier.table(code: entity.code) }

    private static func columnList(_ entity: Entity) -> String {
        (entity.attributes.map { Identifier.column(code: $0.code) }
            + [Identifier.quoted(extraColumn), Identifier.quoted(fetchedColumn), Identifier.quoted(writeColumn)])
            .joined(separator: ", ")
    }
}
