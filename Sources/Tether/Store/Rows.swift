/// Writing what the server sent, and reading rows back by id.
extension Store {
    /// What a write took: the records (all but those older than what the
    /// store learned since they were read, `withoutStale`) and the ids deleted.
    struct Written {
        var records: [Record]
        var deletedIDs: [String]
    }

    /// Writes what the server sent in one transaction: inserts or replaces
    /// `records` (not by older versions unless `acceptingOlder`), deletes the
    /// rows of `deletedIDs` (with `askedAt`, the store's next write when the
    /// answer was asked for: see `deletable`).
    @discardableResult
    func write(_ records: [Record], deleting deletedIDs: [String] = [], deletedVersions: [Int64?] = [], of entity: Entity,
               fetchedAt: Int64, acceptingOlder: Bool = false, askedAt: Int64? = nil) throws -> Written {
        guard !records.isEmpty || !deletedIDs.isEmpty else { return Written(records: records, deletedIDs: deletedIDs) }
        return try withDatabase { database in
            try database.transaction {
                try writeRows(records, deleting: deletedIDs, deletedVersions: deletedVersions, of: entity, fetchedAt: fetchedAt,
                              acceptingOlder: acceptingOlder, askedAt: askedAt, database)
            }
        }
    }

    /// `write`'s work, inside a transaction the caller holds.
    /// `deletedVersions`: in the order of `deletedIDs`, the version each
    /// deletion took where the server says it (see `PageContent` and
    /// `WriteOutcome.deleted`); `ownDeletion`: our own save's.
    @discardableResult
    func writeRows(_ records: [Record], deleting deletedIDs: [String] = [], deletedVersions: [Int64?] = [], of entity: Entity,
                   fetchedAt: Int64, acceptingOlder: Bool = false, askedAt: Int64? = nil, ownDeletion: Bool = false,
                   _ database: Database) throws -> Written {
        try checkModelUnchanged(database)
        var versions: [ExactString: Int64] = [:]
        for (id, version) in zip(deletedIDs, deletedVersions) { if let version { versions[ExactString(id)] = version } }
        var records = try withoutStale(records, of: entity, acceptingOlder: acceptingOlder, askedAt: askedAt, database)
        // Judged before this write's own rows are: a page naming an id both
        // ways deletes it. Our own save's deletion is the server's answer to it.
        let deletedIDs = ownDeletion ? deletedIDs : try deletable(deletedIDs, of: entity, versions: versions, askedAt: askedAt, database)
        let sql = sql(entity)
        // Counted in the file, so contexts sharing it agree.
        let serial = try Self.lastWrite(database) + 1
        let insert = try database.statement(sql.upsert, pinned: true)
        var rowid = try nextRowid(entity, database)
        // The types once, not an Attribute (and its strings) copied per value.
        let types = entity.attributes.map(\.type)
        var parameters: [SQLValue] = []
        parameters.reserveCapacity(types.count + 4)
        var kept: [Int] = []
        for (position, record) in records.enumerated() {
            parameters.removeAll(keepingCapacity: true)
            for index in 0..<min(record.values.count, types.count) {
                let value = record.values[index]
                parameters.append(Record.isMisfit(value, types[index]) ? .null : SQLValue(value))
            }
            parameters.append(record.extra.isEmpty ? .null : .text(JSON.object(record.extra).serialized()))
            parameters.append(.integer(fetchedAt))
            parameters.append(.integer(serial))
            parameters.append(.integer(acceptingOlder ? 1 : 0))
            parameters.append(.integer(rowid))
            rowid += 1
            if try insert.runCountingChanges(parameters) == 0 { kept.append(position) }
        }
        // Rows the store kept, being newer: they take the write serial, and
        // what is taken from this answer is the row.
        for position in kept {
            try database.statement(sql.takeWrite).run([.integer(serial), .text(records[position].id)])
            if let row = try load(entity, id: records[position].id, database)?.record { records[position] = row }
        }
        try forgetTombstones(records.map(\.id), of: entity, database)
        try deleteRows(deletedIDs, of: entity, versions: versions, vague: ownDeletion && versions.isEmpty, database)
        try Self.setMeta("write", String(serial), database)
        return Written(records: records, deletedIDs: deletedIDs)
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

    /// The rows of these ids, by id; those not stored are absent.
    func rows(_ entity: Entity, ids: [String]) throws -> [ExactString: StoredRecord] {
        var found: [ExactString: StoredRecord] = [:]
        try eachRow(entity, ids: ids, select: sql(entity).select, reading: true) { row in
            let stored = Self.decode(row, entity)
            found[ExactString(stored.record.id)] = stored
        }
        return found
    }

    /// Attributes `indexes` of the rows of these ids, by id (those not
    /// stored are absent), reading those columns only.
    func values(_ entity: Entity, ids: [String], attributes indexes: [Int]) throws -> [ExactString: [Value]] {
        var found: [ExactString: [Value]] = [:]
        try eachRow(entity, ids: ids, select: Self.selectValues(entity, indexes), reading: true) { row in
            var values = [Value](repeating: .null, count: indexes.count)
            let id = Self.project(row, from: 0, entity, indexes) { values[$0] = $1 }
            found[ExactString(id)] = values
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

    func delete(ids: [String], of entity: Entity) throws {
        guard !ids.isEmpty else { return }
        try withDatabase { database in
            try database.transaction { try deleteRows(ids, of: entity, database) }
        }
    }

    /// Deletes the rows of `ids`, which an answer asked for before write
    /// `serial` says the server lacks, but those written since (see
    /// `deletable`). Returns the ids now known gone.
    func delete(ids: [String], of entity: Entity, unlessWrittenSince serial: Int64) throws -> [String] {
        guard !ids.isEmpty else { return [] }
        return try withDatabase { database in
            try database.transaction {
                let gone = try deletable(ids, of: entity, versions: [:], askedAt: serial, database)
                try deleteRows(gone, of: entity, database)
                return gone
            }
        }
    }

    /// Looks up a row's version and write serial by id (nil: no row).
    func heldVersionAndWrite(of entity: Entity, _ database: Database) throws -> (String) throws -> (version: Int64?, write: Int64?)? {
        let statement = try database.statement(sql(entity).versionAndWriteOf, pinned: true)
        return { id in try statement.first([.text(id)]) { ($0[0].integerValue, $0[1].integerValue) } }
    }

    /// Of `ids`, which an answer says the server deleted, those it may
    /// delete here: ids the store does not hold, and rows older than the
    /// deletion. Where the server says the deletion's version (`versions`),
    /// a row at it or newer is a record made again since (by our own save):
    /// kept. Where it does not, a row written since the answer was asked
    /// for (`askedAt`: the store's `nextWrite` then; a save's answer, a
    /// newer page) is taken to know better, and kept.
    func deletable(_ ids: [String], of entity: Entity, versions: [ExactString: Int64], askedAt: Int64?,
                   _ database: Database) throws -> [String] {
        guard !ids.isEmpty, askedAt != nil || !versions.isEmpty else { return ids }
        let held = try heldVersionAndWrite(of: entity, database)
        return try ids.filter { id in
            guard let (version, write) = try held(id) else { return true }
            if let deletedAt = versions.isEmpty ? nil : versions[ExactString(id)], let version { return version < deletedAt }
            if let askedAt, let write { return write < askedAt }
            return true
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

    /// Typed columns hold values of the attribute's type; a value that did not
    /// fit its column is in the extra JSON under the attribute's name.
    static func decode(_ row: Statement.Row, _ entity: Entity) -> StoredRecord {
        let extra = extraFields(row[entity.attributes.count])
        var values: [Value] = []
        values.reserveCapacity(entity.attributes.count)
        // By index: iterating the attributes copied each one (its strings
        // and arrays retained and released) per row.
        for index in entity.attributes.indices {
            values.append(value(row[index], of: entity, index) { extra })
        }
        var fetchedAt: Int64 = 0
        if case .integer(let time) = row[entity.attributes.count + 1] { fetchedAt = time }
        let id: String
        if case .text(let s) = values[entity.idIndex] { id = s } else { id = "" }  // a text attribute: its column as read
        return StoredRecord(record: Record(id: id, values: values, extra: extra), fetchedAt: fetchedAt)
    }

    /// Attribute `index`'s value from its column. A column that does not
    /// hold the attribute's type reads the field `extra` kept (the server
    /// sent another type), as JSON; `extra` is asked for only then.
    static func value(_ column: SQLValue, of entity: Entity, _ index: Int,
                      extra: () -> [(key: String, value: JSON)]) -> Value {
        switch (entity.attributes[index].type, column) {
        case (.text, .text(let s)): return .text(s)
        case (.integer, .integer(let i)): return .integer(i)
        case (.real, .real(let d)): return .real(d)
        case (.real, .integer(let i)): return .real(Double(i))
        case (.boolean, .integer(let i)): return .boolean(i != 0)
        case (.json, .text(let s)): return .json(s)
        default: return misfit(entity.attributes[index].name, in: extra())
        }
    }

    /// A misfit field as `value` reads it: rare, so kept out of line, and
    /// `value` small enough to be inlined where rows are decoded.
    @inline(never)
    private static func misfit(_ name: String, in extra: [(key: String, value: JSON)]) -> Value {
        extra.first { $0.key.hasSameBytes(as: name) }.map { .json($0.value.serialized(sortKeys: true)) } ?? .null
    }

    /// The extra fields of a row's extra column (see `decode`).
    static func extraFields(_ column: SQLValue) -> [(key: String, value: JSON)] {
        guard case .text(let text) = column, let parsed = try? JSON.parse(text).objectValue else { return [] }
        return parsed
    }
}
