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
    private let reader: Lock<Database?>
    /// Each entity's SQL, built once: reads look statements up by it.
    private let statements = Lock<[ObjectIdentifier: EntitySQL]>([:])

    /// The text of one entity's statements, identifiers made from codes.
    private struct EntitySQL {
        let entity: Entity
        let select: String
        let load: String
        let upsert: String
        let deleteByID: String
        let idsWrittenBefore: String
        let tombstone: String

        init(_ entity: Entity) {
            self.entity = entity
            let table = Store.table(entity)
            let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
            let written = Identifier.quoted(Store.writeColumn)
            let columns = Store.columnList(entity)
            select = "SELECT \(columns) FROM \(table)"
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
                + [Identifier.quoted(Store.extraColumn), Identifier.quoted(Store.fetchedColumn)])
                .map { "\($0) = CASE WHEN \(newer) THEN excluded.\($0) ELSE \(table).\($0) END" }
                + ["\(written) = excluded.\(written)"]
            upsert = "INSERT INTO \(table) (\(columns)) VALUES (\(placeholders)) ON CONFLICT (\(idColumn)) DO UPDATE SET "
                + assignments.joined(separator: ", ")
            deleteByID = "DELETE FROM \(table) WHERE \(idColumn) = ?"
            idsWrittenBefore = "SELECT \(idColumn) FROM \(table) WHERE \(written) < ?"
            // Only for a row held: an id the store never had is no deletion it saw.
            tombstone = "INSERT OR REPLACE INTO tether_deleted (entity, id) SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM \(table) WHERE \(idColumn) = ?2)"
        }
    }

    private func sql(_ entity: Entity) -> EntitySQL {
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
    private let indexes = Lock<[Int: Set<Int>]>([:])
    static let indexesPerTable = 8
    private static let extraColumn = "tether_extra"
    private static let fetchedColumn = "tether_fetched_at"
    /// The store's write serial when the server last sent the row.
    private static let writeColumn = "tether_write"
    private static let bookkeepingColumns: Set<String> = [extraColumn, fetchedColumn, writeColumn]

    /// The store files contexts have open in this process (device, inode):
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
            reader = Lock(database.fileName.isEmpty ? nil : try Database(path: database.fileName, readOnly: true))
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
    private static func checkOwner(_ database: Database, identity: String, formerIdentities: [String]) throws {
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
            let id = [UInt64(info.st_dev), UInt64(info.st_ino)]
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
        try database.execute("CREATE TABLE IF NOT EXISTS tether_deleted (entity INTEGER NOT NULL, id TEXT NOT NULL, PRIMARY KEY (entity, id))")
        try database.execute(Self.outboxSchema)
        try migrateOutbox(database)
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
    private func withReader<T>(_ body: (Database) throws -> T) throws -> T {
        let read = try reader.withLock { database -> T? in
            guard let database else { return nil }
            return try body(database)
        }
        if let read { return read }
        return try withDatabase(body)
    }

    // MARK: model

    /// The model saved for this server and bucket; nil for a new store.
    /// A store saved for another server is an error, not a silent reset.
    /// `formerIdentities`: older names of the same data set, also accepted.
    func savedModel(identity: String, formerIdentities: [String] = []) throws -> Model? {
        try withDatabase { database in
            guard try Self.meta("identity", database) != nil else { return nil }
            try Self.checkOwner(database, identity: identity, formerIdentities: formerIdentities)
            return try Self.meta("model", database).flatMap(ModelCoding.decode)
        }
    }

    /// A local store's server: the identity of the server and bucket it
    /// was first attached beside, whose records its references name. The
    /// first call records `identity`; a later one with another (not among
    /// `formerIdentities`) is `.store`.
    func attach(beside identity: String, formerIdentities: [String], as name: String) throws {
        try withDatabase { database in
            guard let saved = try Self.meta("beside", database) else { return try Self.setMeta("beside", identity, database) }
            guard saved == identity || formerIdentities.contains(saved) else {
                throw TetherError(.store, "\(name) was attached beside \(Log.redacted(saved)), not \(Log.redacted(identity)): "
                                  + "its references name records there")
            }
        }
    }

    /// Migrates the tables to `model` and saves it, in one transaction.
    func adopt(_ model: Model, identity: String) throws {
        indexes.withLock { $0 = [:] }
        reader.withLock { $0?.clearStatements() }  // made for the tables as they were
        try withDatabase { database in
            database.clearStatements()
            defer { database.clearStatements() }
            try database.transaction {
                // Every table but the meta table is an entity's: any the model
                // has no entity for (or a 0.1 store's "records:<name>") goes.
                let existing = Set(try database.statement(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('tether_meta', 'tether_sync', 'tether_outbox', 'tether_deleted') AND name NOT LIKE 'sqlite%'")
                    .rows().compactMap { row -> String? in if case .text(let name) = row[0] { return name } else { return nil } })
                let wanted = Set(model.entities.map { "e\($0.code)" })
                for table in existing.subtracting(wanted) {
                    Log.info(.migration, "table \(table) dropped: its entity is gone")
                    try database.execute("DROP TABLE \(Identifier.quoted(table))")
                }
                // A table made or changed lacks what earlier syncs brought: its
                // entity syncs from scratch. So does any entity no longer there.
                var synced: [Int] = []
                for entity in model.entities
                    where try !migrateTable(of: entity, exists: existing.contains("e\(entity.code)"), database) {
                    synced.append(entity.code)
                }
                let recorded = try database.statement("SELECT entity FROM tether_sync").rows()
                    .compactMap { row -> Int64? in if case .integer(let code) = row[0] { return code } else { return nil } }
                for code in recorded where !synced.contains(Int(truncatingIfNeeded: code)) {
                    try database.statement("DELETE FROM tether_sync WHERE entity = ?").run([.integer(code)])
                }
                // An entity gone takes its tombstones.
                let kept = Set(model.entities.map { Int64($0.code) })
                let tombstoned = try database.statement("SELECT DISTINCT entity FROM tether_deleted").rows()
                    .compactMap { row -> Int64? in if case .integer(let code) = row[0] { return code } else { return nil } }
                for code in tombstoned where !kept.contains(code) {
                    try database.statement("DELETE FROM tether_deleted WHERE entity = ?").run([.integer(code)])
                }
                try Self.setMeta("identity", identity, database)
                try Self.setMeta("model", ModelCoding.encode(model), database)
            }
        }
    }

    /// What adopting `model` would drop that holds data, named as `saved`
    /// names it: the table of an entity `model` lacks, with its rows; the
    /// column of an attribute gone or given another type, with its values.
    /// A local store is its records' only copy: this must be empty.
    func dataLost(adopting model: Model, saved: Model) throws -> [String] {
        try withDatabase { database in
            var lost: [String] = []
            for old in saved.entities {
                let table = Identifier.table(code: old.code)
                let columns = Set(try database.statement("SELECT name FROM pragma_table_info(?)").rows([.text("e\(old.code)")])
                    .compactMap { row -> String? in if case .text(let name) = row[0] { return name } else { return nil } })
                guard !columns.isEmpty else { continue }
                guard let new = model.entities.first(where: { $0.code == old.code }) else {
                    if case .integer(let rows)? = try database.statement("SELECT count(*) FROM \(table)").rows().first?[0], rows > 0 {
                        lost.append("\(old.name) (\(rows) record\(rows == 1 ? "" : "s"))")
                    }
                    continue
                }
                for attribute in old.attributes where !attribute.isID && columns.contains("a\(attribute.code)") {
                    if let kept = new.attributeIndex(code: attribute.code),
                       Self.declaredType(new.attributes[kept].type) == Self.declaredType(attribute.type) { continue }
                    let column = Identifier.column(code: attribute.code)
                    if case .integer(let values)? = try database.statement("SELECT count(*) FROM \(table) WHERE \(column) IS NOT NULL")
                        .rows().first?[0], values > 0 {
                        lost.append("\(old.name).\(attribute.name) (\(values) value\(values == 1 ? "" : "s"))")
                    }
                }
            }
            return lost
        }
    }

    /// Indexes the columns of these attributes (once each, up to the limit):
    /// the first fetch that filters or sorts by an attribute builds it.
    func ensureIndexes(_ entity: Entity, on attributes: [Int]) throws {
        let codes = attributes.map { entity.attributes[$0].code }
        guard let wanted = indexes.withLock({ known -> [Int]? in
            let made = known[entity.code] ?? []
            let missing = Array(Set(codes).subtracting(made)).sorted()
            return missing.isEmpty || made.count >= Self.indexesPerTable ? nil : missing
        }) else { return }
        try withDatabase { database in
            var made = Set(try database.statement("SELECT name FROM pragma_index_list(?)").rows([.text("e\(entity.code)")])
                .compactMap { row -> Int? in
                    guard case .text(let name) = row[0], name.hasPrefix("x\(entity.code)_") else { return nil }
                    return Int(name.dropFirst("x\(entity.code)_".count))
                })
            for code in wanted where !made.contains(code) && made.count < Self.indexesPerTable {
                try database.execute("CREATE INDEX IF NOT EXISTS \(Identifier.index(entity: entity.code, attribute: code)) "
                                     + "ON \(Identifier.table(code: entity.code)) (\(Identifier.column(code: code)))")
                made.insert(code)
            }
            indexes.withLock { $0[entity.code] = made }
        }
    }

    /// Creates or alters the entity's table; true if it did either.
    private func migrateTable(of entity: Entity, exists: Bool, _ database: Database) throws -> Bool {
        let table = Identifier.table(code: entity.code)
        guard exists else {
            let columns = entity.attributes.map { attribute in
                Identifier.column(code: attribute.code) + " " + Self.declaredType(attribute.type)
                    + (attribute.isID ? " PRIMARY KEY NOT NULL" : "")
            } + ["\(Identifier.quoted(Self.extraColumn)) TEXT", "\(Identifier.quoted(Self.fetchedColumn)) INTEGER NOT NULL",
                 "\(Identifier.quoted(Self.writeColumn)) INTEGER NOT NULL DEFAULT 0"]
            try database.execute("CREATE TABLE \(table) (\(columns.joined(separator: ", ")))")
            Log.info(.migration, "\(entity.name): table \(table) created, \(entity.attributes.count) attributes")
            return true
        }
        let current = try database.statement("SELECT name, type FROM pragma_table_info(?)")
            .rows([.text("e\(entity.code)")])
            .reduce(into: [String: String]()) { result, row in
                if case .text(let name) = row[0], case .text(let type) = row[1] { result[name] = type }
            }
        var changed = false
        var dropped = 0, added = 0
        var retyped: [Attribute] = []
        defer {
            if dropped + added > 0 {
                Log.info(.migration, "\(entity.name): table \(table) migrated, \(dropped) columns dropped, \(added) added; its rows will be fetched again")
            }
        }
        if current[Self.writeColumn] == nil {  // a store from before reconciling by write
            try database.execute("ALTER TABLE \(table) ADD COLUMN \(Identifier.quoted(Self.writeColumn)) INTEGER NOT NULL DEFAULT 0")
        }
        for (name, type) in current where !Self.bookkeepingColumns.contains(name) {
            let attribute = Int(name.dropFirst()).flatMap(entity.attributeIndex(code:)).map { entity.attributes[$0] }
            if attribute == nil || (!attribute!.isID && Self.declaredType(attribute!.type) != type) {
                if let attribute { retyped.append(attribute) }
                // SQLite will not drop an indexed column.
                if let code = Int(name.dropFirst()) {
                    try database.execute("DROP INDEX IF EXISTS \(Identifier.index(entity: entity.code, attribute: code))")
                }
                try database.execute("ALTER TABLE \(table) DROP COLUMN \(Identifier.quoted(name))")
                changed = true
                dropped += 1
            }
        }
        for attribute in entity.attributes where current["a\(attribute.code)"] != Self.declaredType(attribute.type) {
            guard !attribute.isID else { continue }
            try database.execute("ALTER TABLE \(table) ADD COLUMN \(Identifier.column(code: attribute.code)) \(Self.declaredType(attribute.type))")
            changed = true
            added += 1
        }
        if changed {
            // Rows lack the new columns' values until fetched again: mark them stale.
            try database.execute("UPDATE \(table) SET \(Identifier.quoted(Self.fetchedColumn)) = 0")
        }
        try retype(retyped, of: entity, database)
        return changed
    }

    /// A column given another type starts empty, but a value that did not
    /// fit the old type is in the extra JSON: one that fits the new type
    /// moves into the column, so predicates (SQL, on the column) and peek
    /// (the column, else the extra) read it alike.
    private func retype(_ attributes: [Attribute], of entity: Entity, _ database: Database) throws {
        guard !attributes.isEmpty else { return }
        let table = Identifier.table(code: entity.code)
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let extraColumn = Identifier.quoted(Self.extraColumn)
        var rows: [(id: SQLValue, extra: [(key: String, value: JSON)])] = []
        try database.statement("SELECT \(idColumn), \(extraColumn) FROM \(table) WHERE \(extraColumn) IS NOT NULL").each { row in
            if case .text(let text) = row[1], let extra = try? JSON.parse(text).objectValue { rows.append((row[0], extra)) }
        }
        for attribute in attributes {
            let update = try database.statement(
                "UPDATE \(table) SET \(Identifier.column(code: attribute.code)) = ?, \(extraColumn) = ? WHERE \(idColumn) = ?")
            var moved = 0
            for index in rows.indices {
                guard let position = rows[index].extra.firstIndex(where: { $0.key.hasSameBytes(as: attribute.name) }) else { continue }
                let value = Value(json: rows[index].extra[position].value, type: attribute.type)
                guard !Record.isMisfit(value, attribute.type) else { continue }
                rows[index].extra.remove(at: position)
                let extra = rows[index].extra
                try update.run([Self.sqlValue(value), extra.isEmpty ? .null : .text(JSON.object(extra).serialized()), rows[index].id])
                moved += 1
            }
            if moved > 0 { Log.info(.migration, "\(entity.name).\(attribute.name): \(moved) values now of its type moved into its column") }
        }
    }

    // MARK: records

    /// Writes what the server sent in one transaction: inserts or replaces
    /// `records` (not by older versions unless `acceptingOlder`), deletes the
    /// rows of `deletedIDs`.
    func write(_ records: [Record], deleting deletedIDs: [String] = [], of entity: Entity, fetchedAt: Int64,
               acceptingOlder: Bool = false) throws {
        guard !records.isEmpty || !deletedIDs.isEmpty else { return }
        try withDatabase { database in
            try database.transaction {
                try writeRows(records, deleting: deletedIDs, of: entity, fetchedAt: fetchedAt, acceptingOlder: acceptingOlder, database)
            }
        }
    }

    /// `write`'s work, inside a transaction the caller holds.
    func writeRows(_ records: [Record], deleting deletedIDs: [String] = [], of entity: Entity, fetchedAt: Int64,
                   acceptingOlder: Bool = false, _ database: Database) throws {
        let sql = sql(entity)
        // Counted in the file, so contexts sharing it agree.
        let serial = try Self.lastWrite(database) + 1
        let insert = try database.statement(sql.upsert, pinned: true)
        for record in records {
            var parameters = zip(record.values, entity.attributes).map { value, attribute in
                Record.isMisfit(value, attribute.type) ? .null : Self.sqlValue(value)
            }
            parameters.append(record.extra.isEmpty ? .null : .text(JSON.object(record.extra).serialized()))
            parameters.append(.integer(fetchedAt))
            parameters.append(.integer(serial))
            parameters.append(.integer(acceptingOlder ? 1 : 0))
            try insert.run(parameters)
        }
        try forgetTombstones(records.map(\.id), of: entity, database)
        try deleteRows(deletedIDs, of: entity, database)
        try Self.setMeta("write", String(serial), database)
    }

    /// Deletes these rows, leaving a tombstone for each the table held.
    private func deleteRows(_ ids: [String], of entity: Entity, _ database: Database) throws {
        guard !ids.isEmpty else { return }
        let sql = sql(entity)
        let entityCode = SQLValue.integer(Int64(entity.code))
        let bury = try database.statement(sql.tombstone, pinned: true)
        let delete = try database.statement(sql.deleteByID, pinned: true)
        for id in ids {
            try bury.run([entityCode, .text(id)])
            try delete.run([.text(id)])
        }
        // The newest `tombstonesPerEntity` are kept: past them an old
        // deletion reads as never fetched (NOT_CACHED), as before any.
        try database.statement("""
            DELETE FROM tether_deleted WHERE entity = ?1 AND rowid NOT IN
                (SELECT rowid FROM tether_deleted WHERE entity = ?1 ORDER BY rowid DESC LIMIT ?2)
            """).run([entityCode, .integer(Int64(Self.tombstonesPerEntity))])
    }

    /// Records the server sent again (re-created, restored) are no longer deleted.
    private func forgetTombstones(_ ids: [String], of entity: Entity, _ database: Database) throws {
        guard !ids.isEmpty else { return }
        let entityCode = SQLValue.integer(Int64(entity.code))
        guard try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? LIMIT 1", pinned: true).first([entityCode], { _ in true }) != nil
        else { return }
        let forget = try database.statement("DELETE FROM tether_deleted WHERE entity = ? AND id = ?")
        for id in ids { try forget.run([entityCode, .text(id)]) }
    }

    /// How many deleted records' tombstones a table keeps (see tether.h).
    static let tombstonesPerEntity = 10_000

    /// True if the server deleted this record after the store held it
    /// (among the newest tombstones), and no later answer brought it back.
    func isDeleted(_ entity: Entity, id: String) throws -> Bool {
        try withReader { database in
            try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? AND id = ?")
                .first([.integer(Int64(entity.code)), .text(id)]) { _ in true } ?? false
        }
    }

    /// The serial the next write will take: rows written from now on have
    /// it or a later one.
    func nextWrite() throws -> Int64 { try withDatabase { try Self.lastWrite($0) + 1 } }

    /// The serial of the newest write of server records (meta "write").
    private static func lastWrite(_ database: Database) throws -> Int64 {
        try meta("write", database).flatMap { Int64($0) } ?? 0
    }

    /// Up to which version of the server's collection every change of
    /// `entity` is in its table; nil: never synced (or the table changed).
    func syncVersion(_ entity: Entity) throws -> Int64? {
        try withDatabase { database in
            let row = try database.statement("SELECT version FROM tether_sync WHERE entity = ?").rows([.integer(Int64(entity.code))]).first
            if case .integer(let version)? = row?.first { return version }
            return nil
        }
    }

    /// Records that the table holds every change up to `version`; an older
    /// version than the one recorded leaves it (both syncs completed).
    func setSyncVersion(_ entity: Entity, _ version: Int64) throws {
        try withDatabase { database in
            try database.statement("""
                INSERT INTO tether_sync (entity, version) VALUES (?, ?)
                ON CONFLICT (entity) DO UPDATE SET version = max(version, excluded.version)
                """).run([.integer(Int64(entity.code)), .integer(version)])
        }
    }

    /// Forgets the entity's sync: its next fetch lists everything again.
    func clearSyncVersion(_ entity: Entity) throws {
        try withDatabase { database in
            try database.statement("DELETE FROM tether_sync WHERE entity = ?").run([.integer(Int64(entity.code))])
        }
    }

    func load(_ entity: Entity, id: String) throws -> StoredRecord? {
        try withReader { database in try load(entity, id: id, database) }
    }

    /// `load` on `database`: inside a transaction the caller holds on the writing connection.
    func load(_ entity: Entity, id: String, _ database: Database) throws -> StoredRecord? {
        try database.statement(sql(entity).load, pinned: true).first([.text(id)]) { Self.decode($0, entity) }
    }

    /// The distinct non-null texts of one attribute (a reference's targets).
    func distinctValues(_ entity: Entity, attribute index: Int) throws -> [String] {
        let column = Identifier.column(code: entity.attributes[index].code)
        return try withReader { database in
            var values: [String] = []
            try database.statement("SELECT DISTINCT \(column) FROM \(Self.table(entity)) WHERE \(column) IS NOT NULL")
                .each { row in if case .text(let text) = row[0] { values.append(text) } }
            return values
        }
    }

    /// The functions predicates use in SQL: the very Swift code that
    /// evaluates them in memory, so the cache answers the same.
    private static func definePredicateFunctions(_ database: Database) throws {
        func options(_ value: SQLValue) -> Comparison.Options {
            if case .integer(let raw) = value { return Comparison.Options(rawValue: Int(truncatingIfNeeded: raw)) }
            return []
        }
        // tether_fold(text, options): the text lower-cased and/or without marks.
        try database.define("tether_fold", arity: 2) { arguments in
            guard case .text(let text) = arguments[0] else { return arguments[0] }
            return .text(TextFolding.folded(text, options(arguments[1])))
        }
        // tether_text(text, operator, pattern, options): BEGINSWITH, ENDSWITH, CONTAINS, LIKE.
        try database.define("tether_text", arity: 4) { arguments in
            guard case .text(let text) = arguments[0], case .integer(let code) = arguments[1],
                  case .text(let pattern) = arguments[2],
                  let op = TextMatch.codes.first(where: { $0.1 == code })?.0 else { return .integer(0) }
            return .integer(TextMatch.matches(op, text, pattern, options(arguments[3])) ? 1 : 0)
        }
    }

    /// Rows matching `predicate`, in `sort` order (attribute index,
    /// descending), after the first `offset`, at most `limit` (0: all).
    func query(_ entity: Entity, where predicate: Predicate? = nil, sort: [(index: Int, descending: Bool)],
               limit: Int64, offset: Int64 = 0) throws -> [StoredRecord] {
        let (sql, parameters) = Self.select(sql(entity).select, entity, predicate, sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var records: [StoredRecord] = []
            try database.statement(sql).each(parameters) { records.append(Self.decode($0, entity)) }
            return records
        }
    }

    /// The ids and versions of the rows `query` would give.
    func versions(_ entity: Entity, where predicate: Predicate?, sort: [(index: Int, descending: Bool)],
                  limit: Int64, offset: Int64) throws -> [(id: String, version: Int64?)] {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let versionColumn = Identifier.column(code: entity.attributes[entity.versionIndex].code)
        let (sql, parameters) = Self.select("SELECT \(idColumn), \(versionColumn) FROM \(Self.table(entity))", entity,
                                            predicate, sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var found: [(id: String, version: Int64?)] = []
            try database.statement(sql).each(parameters) { row in
                guard case .text(let id) = row[0] else { return }
                if case .integer(let version) = row[1] { found.append((id, version)) } else { found.append((id, nil)) }
            }
            return found
        }
    }

    /// The ids of the rows `query` would give (nil sort: in no order),
    /// read straight into a compact list.
    func idList(_ entity: Entity, where predicate: Predicate?, sort: [(index: Int, descending: Bool)]?,
                limit: Int64 = 0, offset: Int64 = 0) throws -> IDList {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let (sql, parameters) = Self.select("SELECT \(idColumn) FROM \(Self.table(entity))", entity, predicate,
                                            sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var list = IDList()
            try database.statement(sql).eachText(parameters) { try list.append($0) }
            list.compact()
            return list
        }
    }

    /// How many rows `query` would give.
    func count(_ entity: Entity, where predicate: Predicate?, limit: Int64 = 0, offset: Int64 = 0) throws -> Int64 {
        let (inner, parameters) = Self.select("SELECT 1 FROM \(Self.table(entity))", entity, predicate,
                                              sort: nil, limit: limit, offset: offset)
        return try withDatabase { database in
            let row = try database.statement("SELECT count(*) FROM (\(inner))").rows(parameters).first
            if case .integer(let count)? = row?.first { return count }
            return 0
        }
    }

    /// The rows of these ids, by id; those not stored are absent.
    func rows(_ entity: Entity, ids: [String]) throws -> [ExactString: StoredRecord] {
        var found: [ExactString: StoredRecord] = [:]
        try eachRow(entity, ids: ids, select: sql(entity).select, reading: true) { row in
            let stored = Self.decode(row, entity)
            found[ExactString(stored.record.id)] = stored
        }
        return found
    }

    /// The versions of these ids, by id; those not stored or without one are absent.
    func versions(_ entity: Entity, ids: [String]) throws -> [ExactString: Int64] {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let versionColumn = Identifier.column(code: entity.attributes[entity.versionIndex].code)
        var found: [ExactString: Int64] = [:]
        try eachRow(entity, ids: ids, select: "SELECT \(idColumn), \(versionColumn) FROM \(Self.table(entity))") { row in
            if case .text(let id) = row[0], case .integer(let version) = row[1] { found[ExactString(id)] = version }
        }
        return found
    }

    /// `select` (a SELECT without WHERE) of the rows of these ids.
    /// `reading`: on the reading connection (rows for objects; bookkeeping
    /// for writes reads where it writes).
    private func eachRow(_ entity: Entity, ids: [String], select: String, reading: Bool = false,
                         _ body: (Statement.Row) throws -> Void) throws {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        try (reading ? withReader : withDatabase) { database in
            // Lists of one fixed size, so two statements serve every batch.
            for start in stride(from: 0, to: ids.count, by: Self.idsPerStatement) {
                let chunk = ids[start..<min(ids.count, start + Self.idsPerStatement)]
                let size = chunk.count == Self.idsPerStatement ? chunk.count : 1
                let statement = try database.statement(select + " WHERE \(idColumn) IN ("
                    + Array(repeating: "?", count: size).joined(separator: ", ") + ")")
                if size == chunk.count {
                    try statement.each(chunk.map { .text($0) }, body)
                } else {
                    for id in chunk { try statement.each([.text(id)], body) }
                }
            }
        }
    }

    private static let idsPerStatement = 100

    /// `base` with the predicate's WHERE, the order (`sort`, ties by id; nil:
    /// none) and the window of `limit` (0: none) after `offset`.
    private static func select(_ base: String, _ entity: Entity, _ predicate: Predicate?,
                               sort: [(index: Int, descending: Bool)]?, limit: Int64, offset: Int64) -> (String, [SQLValue]) {
        var sql = base
        var parameters: [SQLValue] = []
        if let predicate {
            let clause = predicate.sql(entity)
            sql += " WHERE " + clause.text
            parameters = clause.parameters
        }
        if let sort {
            let order = sort.map { Identifier.column(code: entity.attributes[$0.index].code) + ($0.descending ? " DESC" : " ASC") }
                + [Identifier.column(code: entity.attributes[entity.idIndex].code) + " ASC"]
            sql += " ORDER BY " + order.joined(separator: ", ")
        }
        if limit > 0 || offset > 0 {
            sql += " LIMIT ? OFFSET ?"  // a negative limit is none
            parameters += [.integer(limit > 0 ? limit : -1), .integer(offset)]
        }
        return (sql, parameters)
    }

    func delete(ids: [String], of entity: Entity) throws {
        guard !ids.isEmpty else { return }
        try withDatabase { database in
            try database.transaction { try deleteRows(ids, of: entity, database) }
        }
    }

    /// Deletes the rows not written since write `serial` (a complete
    /// listing that began then did not include them, so the server no longer
    /// has them) and returns their ids.
    func deleteRows(of entity: Entity, writtenBefore serial: Int64) throws -> [String] {
        let sql = sql(entity)
        return try withDatabase { database in
            try database.transaction {
                let ids = try database.statement(sql.idsWrittenBefore)
                    .rows([.integer(serial)])
                    .compactMap { row -> String? in if case .text(let id) = row[0] { return id } else { return nil } }
                try deleteRows(ids, of: entity, database)
                return ids
            }
        }
    }

    // MARK: helpers

    private static func meta(_ key: String, _ database: Database) throws -> String? {
        let row = try database.statement("SELECT value FROM tether_meta WHERE key = ?", pinned: true).rows([.text(key)]).first
        if case .text(let value)? = row?.first { return value }
        return nil
    }

    private static func setMeta(_ key: String, _ value: String, _ database: Database) throws {
        try database.statement("INSERT OR REPLACE INTO tether_meta (key, value) VALUES (?, ?)", pinned: true).run([.text(key), .text(value)])
    }

    private static func table(_ entity: Entity) -> String { Identifier.table(code: entity.code) }

    private static func columnList(_ entity: Entity) -> String {
        (entity.attributes.map { Identifier.column(code: $0.code) }
            + [Identifier.quoted(extraColumn), Identifier.quoted(fetchedColumn), Identifier.quoted(writeColumn)])
            .joined(separator: ", ")
    }

    private static func declaredType(_ type: AttributeType) -> String {
        switch type {
        case .text, .json: return "TEXT"
        case .integer, .boolean: return "INTEGER"
        case .real: return "REAL"
        }
    }

    static func sqlValue(_ value: Value) -> SQLValue {
        switch value {
        case .null: return .null
        case .text(let s), .json(let s): return .text(s)
        case .integer(let i): return .integer(i)
        case .real(let d): return .real(d)
        case .boolean(let b): return .integer(b ? 1 : 0)
        }
    }

    /// Typed columns hold values of the attribute's type; a value that did not
    /// fit its column is in the extra JSON under the attribute's name.
    private static func decode(_ row: Statement.Row, _ entity: Entity) -> StoredRecord {
        var extra: [(key: String, value: JSON)] = []
        if case .text(let text) = row[entity.attributes.count], let parsed = try? JSON.parse(text).objectValue {
            extra = parsed
        }
        var values: [Value] = []
        values.reserveCapacity(entity.attributes.count)
        for (index, attribute) in entity.attributes.enumerated() {
            switch (attribute.type, row[index]) {
            case (.text, .text(let s)): values.append(.text(s))
            case (.integer, .integer(let i)): values.append(.integer(i))
            case (.real, .real(let d)): values.append(.real(d))
            case (.real, .integer(let i)): values.append(.real(Double(i)))
            case (.boolean, .integer(let i)): values.append(.boolean(i != 0))
            case (.json, .text(let s)): values.append(.json(s))
            default:
                let misfit = extra.first { $0.key.hasSameBytes(as: attribute.name) }?.value
                values.append(misfit.map { .json($0.serialized(sortKeys: true)) } ?? .null)
            }
        }
        var fetchedAt: Int64 = 0
        if case .integer(let time) = row[entity.attributes.count + 1] { fetchedAt = time }
        let id: String
        if case .text(let s) = row[entity.idIndex] { id = s } else { id = "" }
        return StoredRecord(record: Record(id: id, values: values, extra: extra), fetchedAt: fetchedAt)
    }
}
