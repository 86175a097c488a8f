/// Rows the server deleted, remembered so a reopened store tells "gone"
/// from "not fetched".
extension Store {
    /// Deletes these rows, leaving a tombstone for each the table held,
    /// with the row's version (or the deletion's in `versions`, if newer)
    /// and this write's serial. `vague`: our own save's deletion, whose
    /// version the server did not say (see `withoutStale`).
    func deleteRows(_ ids: [String], of entity: Entity, versions: [ExactString: Int64] = [:], vague: Bool = false,
                    _ database: Database) throws {
        guard !ids.isEmpty else { return }
        let sql = sql(entity)
        let entityCode = SQLValue.integer(Int64(entity.code))
        let serial = try Self.lastWrite(database) + 1
        try markRowids(entity, database)
        let bury = try database.statement(sql.tombstone, pinned: true)
        let delete = try database.statement(sql.deleteByID, pinned: true)
        for id in ids {
            let version = versions.isEmpty ? nil : versions[ExactString(id)]
            try bury.run([entityCode, .text(id), .integer(serial), version.map(SQLValue.integer) ?? .null, .integer(vague ? 1 : 0)])
            try delete.run([.text(id)])
        }
        try Self.setMeta("write", String(serial), database)
        // The newest `tombstonesPerEntity` are kept: past them an old
        // deletion reads as never fetched (NOT_CACHED), as before any.
        try database.statement("""
            DELETE FROM tether_deleted WHERE entity = ?1 AND rowid NOT IN
                (SELECT rowid FROM tether_deleted WHERE entity = ?1 ORDER BY rowid DESC LIMIT ?2)
            """).run([entityCode, .integer(Int64(Self.tombstonesPerEntity))])
    }

    /// Records the server sent again (re-created, restored) are no longer deleted.
    func forgetTombstones(_ ids: [String], of entity: Entity, _ database: Database) throws {
        guard !ids.isEmpty else { return }
        let entityCode = SQLValue.integer(Int64(entity.code))
        guard try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? LIMIT 1", pinned: true).first([entityCode], { _ in true }) != nil
        else { return }
        let forget = try database.statement("DELETE FROM tether_deleted WHERE entity = ? AND id = ?")
        for id in ids { try forget.run([entityCode, .text(id)]) }
    }

    /// `records` less those older than what the store learned after they
    /// were read, which would undo it: a record no newer than its deletion
    /// here (a tombstone keeps the deleted row's version, or the server's
    /// for the deletion where it said), such as a refresh or page read
    /// before our own save deleted it. A record made again has a newer
    /// version and is taken. Where the server did not say the version of
    /// our own deletion (the record was already gone), an answer asked for
    /// before it was taken (`askedAt`: the store's next write then) is
    /// not taken either. `acceptingOlder` (the server lost its history:
    /// its older versions are the truth) holds only for what was not
    /// written since `askedAt`: a row or a deletion written since is newer
    /// knowledge than the answer.
    func withoutStale(_ records: [Record], of entity: Entity, acceptingOlder: Bool, askedAt: Int64?,
                      _ database: Database) throws -> [Record] {
        guard !records.isEmpty, !acceptingOlder || askedAt != nil else { return records }
        let entityCode = SQLValue.integer(Int64(entity.code))
        let anyTombstone = try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? AND write IS NOT NULL LIMIT 1",
                                                  pinned: true).first([entityCode], { _ in true }) != nil
        guard anyTombstone || acceptingOlder else { return records }
        let buried = try database.statement("SELECT version, write, vague FROM tether_deleted WHERE entity = ? AND id = ?", pinned: true)
        let held = try heldVersionAndWrite(of: entity, database)
        let versionIndex = entity.versionIndex
        return try records.filter { record in
            guard case .integer(let sent) = record.values[versionIndex] else { return true }
            if anyTombstone, let (deleted, write, vague) = try buried.first([entityCode, .text(record.id)], {
                ($0[0].integerValue, $0[1].integerValue, $0[2].integerValue == 1)
            }) {
                let older = deleted.map { sent <= $0 } ?? false
                let askedBefore = askedAt.map { asked in write.map { $0 >= asked } ?? false } ?? false
                if acceptingOlder ? askedBefore : older || (vague && askedBefore) {
                    Log.debug(.sync, "\(entity.name)/\(record.id): version \(sent), read before its deletion here: not taken")
                    return false
                }
            }
            if acceptingOlder, let askedAt, let (version, write) = try held(record.id),
               let version, let write, sent < version, write >= askedAt {
                Log.debug(.sync, "\(entity.name)/\(record.id): version \(sent), older than \(version) written since it was asked: not taken")
                return false
            }
            return true
        }
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

    /// The rowid a row stored next gets: past every rowid the table has
    /// had. SQLite alone would give a deleted last row's rowid again, and a
    /// batched answer (which holds rowids) would then read another record at
    /// the deleted one's row. Deletions leave their mark first (`markRowids`).
    func nextRowid(_ entity: Entity, _ database: Database) throws -> Int64 {
        let highest = try database.statement(sql(entity).maxRowid, pinned: true).first { $0[0].integerValue } ?? nil
        let marked = try Self.meta(Self.rowidMark(entity), database).flatMap { Int64($0) }
        return max(highest ?? 0, marked ?? 0) + 1
    }

    /// Keeps the highest rowid the table has had, before rows go.
    private func markRowids(_ entity: Entity, _ database: Database) throws {
        try Self.setMeta(Self.rowidMark(entity), String(try nextRowid(entity, database) - 1), database)
    }

    private static func rowidMark(_ entity: Entity) -> String { "rowids \(entity.code)" }
}
