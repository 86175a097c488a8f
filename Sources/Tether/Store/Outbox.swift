/// The outbox: each object's changes the server has not confirmed, one row
/// per object, written when the change is made (the row is the object's
/// local state), so a process killed at any instant loses none. Rows are
/// in the order objects were first changed; a save sends them in that order.
/// Values are keyed by attribute code, which outlives renames. Each
/// context on the store has its own rows (`owner`: its name; "" for the
/// first), so a context saves only its own changes, and finds them again
/// when it is opened again under that name. `sent_writes` keeps, for each
/// write sent for the change whose answer was never settled, the record it
/// makes (a JSON array of objects by attribute code, the latest last): a
/// server found holding exactly one of them holds a write of ours (a save
/// killed, an answer lost), not someone else's.
extension Store {
    static let outboxSchema = """
        CREATE TABLE IF NOT EXISTS tether_outbox (
            sequence INTEGER PRIMARY KEY,
            owner TEXT NOT NULL,
            entity INTEGER NOT NULL,
            id TEXT NOT NULL,
            kind INTEGER NOT NULL,
            base_version INTEGER,
            ivalues TEXT NOT NULL,
            revision INTEGER NOT NULL,
            sent INTEGER NOT NULL DEFAULT 0,
            sent_writes TEXT,
            UNIQUE (owner, entity, id))
        """

    /// Unsettled writes kept per change: each is a kill or a lost answer.
    static let sentWritesKept = 8

    /// A column a table made by an earlier version lacks, added (bookkeeping
    /// tables only: `table` and `column` are the library's own names).
    static func addColumnIfMissing(_ table: String, _ column: String, _ declaration: String, _ database: Database) throws {
        let known = try database.statement("SELECT 1 FROM pragma_table_info(?) WHERE name = ?").rows([.text(table), .text(column)])
        if known.isEmpty { try database.execute("ALTER TABLE \(table) ADD COLUMN \(column) \(declaration)") }
    }

    struct OutboxRow: Sendable {
        let sequence: Int64
        let entity: Entity
        let id: String
        let change: PendingChange
        /// Values by attribute code, as stored.
        let values: [(code: Int, value: JSON)]
        /// An update holding values only for fields the model no longer has:
        /// kept for their return, no change of the object until then.
        var onlyAbsent: Bool { change.kind == .update && change.values.isEmpty && !values.isEmpty }
    }

    /// Writes an object's change (a new row keeps its place in the order);
    /// returns the row's sequence.
    @discardableResult
    func recordChange(_ owner: String, _ entity: Entity, id: String, _ change: PendingChange) throws -> Int64 {
        try withDatabase { database in try Self.recordChange(owner, entity, id: id, change, database) }
    }

    private static func recordChange(_ owner: String, _ entity: Entity, id: String, _ change: PendingChange,
                                     _ database: Database) throws -> Int64 {
        // Values of fields the model no longer has outlive the rewrite, for
        // their field's return (a delete needs them no more).
        let absent = change.kind == .delete ? [] : try absentValues(owner, entity, id: id, database)
        let values = JSON.object(change.values.sorted { $0.key < $1.key }.map { index, value in
            (String(entity.attributes[index].code), value.json)
        } + absent)
        let row = try database.statement("""
            INSERT INTO tether_outbox (owner, entity, id, kind, base_version, ivalues, revision, sent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (owner, entity, id) DO UPDATE SET kind = excluded.kind, base_version = excluded.base_version,
                ivalues = excluded.ivalues, revision = excluded.revision, sent = excluded.sent
            RETURNING sequence
            """).first([.text(owner), .integer(Int64(entity.code)), .text(id), .integer(Int64(change.kind.rawValue)),
                        change.baseVersion.map { .integer($0) } ?? .null, .text(values.serialized()),
                        .integer(change.revision), .integer(change.sent ? 1 : 0)]) { $0[0] }
        guard case .integer(let sequence)? = row else { throw TetherError(.store, "store: the outbox gave no sequence") }
        return sequence
    }

    /// Drops an object's change.
    func discardChange(_ owner: String, _ entity: Entity, id: String) throws {
        try withDatabase { database in try Self.discardChange(owner, entity, id: id, database) }
    }

    /// Drops every context's changes to `entity` (a local entity dropped on request).
    func discardChanges(of entity: Entity) throws {
        try withDatabase { database in
            try database.statement("DELETE FROM tether_outbox WHERE entity = ?").run([.integer(Int64(entity.code))])
        }
    }

    /// Drops every context's unsaved values of the attribute coded `code` of
    /// `entity` (a local field dropped on request); an update left setting
    /// nothing goes.
    func discardValues(of entity: Entity, code: Int) throws {
        let key = String(code)
        try withDatabase { database in
            let entityCode = SQLValue.integer(Int64(entity.code))
            var rows: [(Int64, Int64, String, String?)] = []
            try database.statement("SELECT sequence, kind, ivalues, sent_writes FROM tether_outbox WHERE entity = ?").each([entityCode]) { row in
                guard case .integer(let sequence) = row[0], case .integer(let kind) = row[1], case .text(let text) = row[2] else { return }
                var writes: String?
                if case .text(let text) = row[3] { writes = text }
                rows.append((sequence, kind, text, writes))
            }
            for (sequence, kind, text, writes) in rows {
                guard let values = (try? JSON.parse(text))?.objectValue, values.contains(where: { $0.key == key }) else { continue }
                let kept = values.filter { $0.key != key }
                if kept.isEmpty && kind == Int64(ChangeKind.update.rawValue) {
                    try database.statement("DELETE FROM tether_outbox WHERE sequence = ?").run([.integer(sequence)])
                    continue
                }
                let keptWrites = writes.flatMap { (try? JSON.parse($0))?.arrayValue }.map { writes in
                    JSON.array(writes.map { JSON.object(($0.objectValue ?? []).filter { $0.key != key }) }).serialized()
                }
                try database.statement("UPDATE tether_outbox SET ivalues = ?, sent_writes = coalesce(?, sent_writes) WHERE sequence = ?")
                    .run([.text(JSON.object(kept).serialized()), keptWrites.map { .text($0) } ?? .null, .integer(sequence)])
            }
        }
    }

    /// Drops the change, but for the values it holds of fields the model no
    /// longer has (an update's): those stay, as an update against `version`
    /// (nil: the base it had), for their field's return. `record` gone: all go.
    private static func discardChange(_ owner: String, _ entity: Entity, id: String, _ database: Database,
                                      keepingAbsentAgainst version: Int64? = nil, recordGone: Bool = false) throws {
        let key: [SQLValue] = [.text(owner), .integer(Int64(entity.code)), .text(id)]
        let absent = recordGone ? [] : try absentValues(owner, entity, id: id, database)
        guard !absent.isEmpty else {
            try database.statement("DELETE FROM tether_outbox WHERE owner = ? AND entity = ? AND id = ?").run(key)
            return
        }
        try database.statement("""
            UPDATE tether_outbox SET kind = ?, base_version = coalesce(?, base_version), ivalues = ?, sent = 0, sent_writes = NULL
            WHERE owner = ? AND entity = ? AND id = ?
            """).run([.integer(Int64(ChangeKind.update.rawValue)), version.map { .integer($0) } ?? .null,
                      .text(JSON.object(absent).serialized())] + key)
    }

    /// The values the row of `id` holds by codes `entity` has no attribute
    /// for (a field absent from the server's model now), as stored.
    private static func absentValues(_ owner: String, _ entity: Entity, id: String, _ database: Database) throws -> [(String, JSON)] {
        let stored = try database.statement("SELECT ivalues FROM tether_outbox WHERE owner = ? AND entity = ? AND id = ?")
            .first([.text(owner), .integer(Int64(entity.code)), .text(id)]) { $0[0] }
        guard case .text(let text)? = stored, let values = (try? JSON.parse(text))?.objectValue else { return [] }
        let codes = Set(entity.attributes.map(\.code))
        return values.filter { key, _ in Int(key).map { !codes.contains($0) } ?? true }.map { ($0.key, $0.value) }
    }

    /// Every change to these entities (this store's), in order. Rows of
    /// entities the model no longer has stay in the store, untouched, for a
    /// model that has them again.
    func pendingChanges(_ owner: String, _ entities: [Entity]) throws -> [OutboxRow] {
        let entities = Dictionary(entities.map { ($0.code, $0) }, uniquingKeysWith: { first, _ in first })
        return try withDatabase { database in
            var rows: [OutboxRow] = []
            try database.statement("SELECT \(Self.outboxColumns) FROM tether_outbox WHERE owner = ? ORDER BY sequence")
                .each([.text(owner)]) { row in
                    if let parsed = Self.outboxRow(row, entities) { rows.append(parsed) }
                }
            return rows
        }
    }

    static let outboxColumns = "sequence, entity, id, kind, base_version, ivalues, revision, sent, sent_writes"

    /// A row of `outboxColumns`; nil for an entity not in `entities` (kept for its return).
    static func outboxRow(_ row: Statement.Row, _ entities: [Int: Entity]) -> OutboxRow? {
        guard case .integer(let sequence) = row[0], case .integer(let code) = row[1],
              let entity = entities[Int(truncatingIfNeeded: code)], case .text(let id) = row[2],
              case .integer(let rawKind) = row[3], let kind = ChangeKind(rawValue: Int(truncatingIfNeeded: rawKind)),
              case .text(let text) = row[5], case .integer(let revision) = row[6] else { return nil }
        var base: Int64?
        if case .integer(let version) = row[4] { base = version }
        let stored = (try? JSON.parse(text).objectValue) ?? []
        var values: [Int: Value] = [:]
        var coded: [(code: Int, value: JSON)] = []
        for (key, json) in stored {
            guard let attributeCode = Int(key) else { continue }
            coded.append((attributeCode, json))
            if let index = entity.attributeIndex(code: attributeCode) {
                values[index] = Value(json: json, type: entity.attributes[index].type)
            }
        }
        var sent = false
        if case .integer(let flag) = row[7] { sent = flag != 0 }
        var change = PendingChange(kind: kind, values: values, baseVersion: base, revision: revision,
                                   sequence: sequence, sent: sent)
        if case .text(let text) = row[8], let writes = (try? JSON.parse(text))?.arrayValue {
            change.sentWrites = writes.map { write in
                var values: [Int: Value] = [:]
                for (key, json) in write.objectValue ?? [] {
                    guard let code = Int(key), let index = entity.attributeIndex(code: code) else { continue }
                    values[index] = Value(json: json, type: entity.attributes[index].type)
                }
                return values
            }
        }
        return OutboxRow(sequence: sequence, entity: entity, id: id, change: change, values: coded)
    }

    /// How many rows of `owner` each entity code has, whether or not the model has the entity.
    func pendingCounts(_ owner: String) throws -> [Int: Int] {
        try withDatabase { database in
            var counts: [Int: Int] = [:]
            try database.statement("SELECT entity, count(*) FROM tether_outbox WHERE owner = ? GROUP BY entity").each([.text(owner)]) { row in
                guard case .integer(let code) = row[0], case .integer(let count) = row[1] else { return }
                counts[Int(truncatingIfNeeded: code)] = Int(truncatingIfNeeded: count)
            }
            return counts
        }
    }

    /// Marks changes as sent: an insert sent may exist on the server from
    /// then on, so deleting it locally must delete it there too.
    func markSent(_ owner: String, _ changes: [(entity: Entity, id: String)]) throws {
        guard !changes.isEmpty else { return }
        try withDatabase { database in
            try database.transaction {
                let mark = try database.statement("UPDATE tether_outbox SET sent = 1 WHERE owner = ? AND entity = ? AND id = ?")
                for (entity, id) in changes { try mark.run([.text(owner), .integer(Int64(entity.code)), .text(id)]) }
            }
        }
    }

    /// Notes writes as sent, before they go: each change's `sent_writes`
    /// gets the record its write makes (the oldest dropped past the limit).
    func noteSending(_ owner: String, _ writes: [(entity: Entity, id: String, values: [Int: Value])]) throws {
        guard !writes.isEmpty else { return }
        try withDatabase { database in
            try database.transaction {
                let read = try database.statement("SELECT sent_writes FROM tether_outbox WHERE owner = ? AND entity = ? AND id = ?")
                let write = try database.statement("UPDATE tether_outbox SET sent_writes = ? WHERE owner = ? AND entity = ? AND id = ?")
                for (entity, id, values) in writes {
                    let key: [SQLValue] = [.text(owner), .integer(Int64(entity.code)), .text(id)]
                    var kept: [JSON] = []
                    if case .text(let text)? = try read.first(key, { $0[0] }), let earlier = (try? JSON.parse(text))?.arrayValue {
                        kept = earlier
                    }
                    kept.append(.object(values.sorted { $0.key < $1.key }.map { (String(entity.attributes[$0.key].code), $0.value.json) }))
                    try write.run([.text(JSON.array(Array(kept.suffix(Self.sentWritesKept))).serialized())] + key)
                }
            }
        }
    }

    /// A save's answer for one object, in one transaction: the server's
    /// record stored (nil: the row deleted), and the change dropped
    /// (`remaining` nil) or left as `remaining`.
    func storeAnswer(_ owner: String, _ entity: Entity, id: String, server record: Record?, fetchedAt: Int64,
                remaining: PendingChange?, deletedAt: Int64? = nil) throws {
        try withDatabase { database in
            try database.transaction {
                if let record {
                    try writeRows([record], of: entity, fetchedAt: fetchedAt, acceptingOlder: true, database)
                } else {
                    try writeRows([], deleting: [id], deletedVersions: [deletedAt], of: entity, fetchedAt: fetchedAt, ownDeletion: true, database)
                }
                if let remaining {
                    // Answered: the writes sent for it are settled.
                    _ = try Self.recordChange(owner, entity, id: id, remaining, database)
                    try database.statement("UPDATE tether_outbox SET sent_writes = NULL WHERE owner = ? AND entity = ? AND id = ?")
                        .run([.text(owner), .integer(Int64(entity.code)), .text(id)])
                } else {
                    try Self.discardChange(owner, entity, id: id, database, keepingAbsentAgainst: record.flatMap { record in
                        if case .integer(let version) = record.values[entity.versionIndex] { return version }
                        return nil
                    }, recordGone: record == nil)
                }
            }
        }
    }
}
