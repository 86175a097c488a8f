/// The saved model and the tables made, migrated and indexed for it.
extension Store {
    /// The model saved for this server and bucket; nil for a new store.
    /// A store saved for another server is an error, not a silent reset.
    /// `formerIdentities`: older names of the same data set, also accepted.
    func savedModel(identity: String, formerIdentities: [String] = []) throws -> Model? {
        try withDatabase { database in
            guard try Self.meta("identity", database) != nil else { return nil }
            try Self.checkOwner(database, identity: identity, formerIdentities: formerIdentities)
            let generation = try Self.meta(Self.generationKey, database).flatMap { Int64($0) } ?? 0
            modelGeneration.withLock { $0 = generation }
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

    static let generationKey = "model generation"

    /// Inside a write transaction: refuses to write rows for a model the
    /// store no longer has. Another process that opened against changed
    /// server specs migrated the tables; rows written here now would lack
    /// its new fields (read there as null) or name columns gone.
    func checkModelUnchanged(_ database: Database) throws {
        guard let mine = modelGeneration.withLock({ $0 }) else { return }
        let current = try Self.meta(Self.generationKey, database).flatMap { Int64($0) } ?? 0
        guard current == mine else {
            throw TetherError(.store, "another process migrated the store to a changed model (the server's specs changed): "
                              + "nothing was written; close this context and open it again")
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
                // Every table but the bookkeeping tables is an entity's: any the model
                // has no entity for (or a 0.1 store's "records:<name>") goes.
                let bookkeeping = Self.bookkeepingTables.map { _ in "?" }.joined(separator: ", ")
                let existing = Set(try database.statement(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN (\(bookkeeping)) AND name NOT LIKE 'sqlite%'")
                    .rows(Self.bookkeepingTables.map { .text($0) }).compactMap { row -> String? in if case .text(let name) = row[0] { return name } else { return nil } })
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
                let encoded = ModelCoding.encode(model)
                var generation = try Self.meta(Self.generationKey, database).flatMap { Int64($0) } ?? 0
                if try Self.meta("model", database) != encoded {
                    generation += 1
                    try Self.setMeta(Self.generationKey, String(generation), database)
                }
                try Self.setMeta("model", encoded, database)
                modelGeneration.withLock { $0 = generation }
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
                try update.run([SQLValue(value), extra.isEmpty ? .null : .text(JSON.object(extra).serialized()), rows[index].id])
                moved += 1
            }
            if moved > 0 { Log.info(.migration, "\(entity.name).\(attribute.name): \(moved) values now of its type moved into its column") }
        }
    }

    private static func declaredType(_ type: AttributeType) -> String {
        switch type {
        case .text, .json: return "TEXT"
        case .integer, .boolean: return "INTEGER"
        case .real: return "REAL"
        }
    }
}
