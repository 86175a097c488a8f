/// Rows the server deleted, remembered so a reopened store tells "gone"
/// from "not fetched".
extension Store {
    /// Deletes these rows, leaving a tombstone for each the table held.
    func deleteRows(_ ids: [String], of entity: Entity, _ database: Database) throws {
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
    func forgetTombstones(_ ids: [String], of entity: Entity, _ database: Database) throws {
        guard !ids.isEmpty else { return }
        let entityCode = SQLValue.integer(Int64(entity.code))
        guard try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? LIMIT 1", pinned: true).first([entityCode], { _ in true }) != nil
        else { return }
        let forget = try database.statement("DELETE FROM tether_deleted WHERE entity = ? AND id = ?")
        for id in ids { try forget.run([entityCode, .text(id)]) }
    }

    /// `records` less those the server sent before deleting them: a
    /// tombstone's version (the row's when it was deleted) at or past the
    /// record's. Such an answer (a refresh or page read before our own
    /// save's delete, taken after it) would bring a deleted record back; a
    /// record made again has a newer version and is taken.
    func withoutStaleAfterDeletion(_ records: [Record], of entity: Entity, _ database: Database) throws -> [Record] {
        guard !records.isEmpty else { return records }
        let entityCode = SQLValue.integer(Int64(entity.code))
        guard try database.statement("SELECT 1 FROM tether_deleted WHERE entity = ? AND version IS NOT NULL LIMIT 1", pinned: true)
            .first([entityCode], { _ in true }) != nil else { return records }
        let buried = try database.statement("SELECT version FROM tether_deleted WHERE entity = ? AND id = ?", pinned: true)
        let versionIndex = entity.versionIndex
        return try records.filter { record in
            guard case .integer(let sent) = record.values[versionIndex],
                  let deleted = try buried.first([entityCode, .text(record.id)], { row -> Int64? in
                      if case .integer(let version) = row[0] { return version } else { return nil }
                  }) ?? nil else { return true }
            if sent > deleted { return true }
            Log.debug(.sync, "\(entity.name)/\(record.id): version \(sent), sent before its deletion (at \(deleted)): not taken")
            return false
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
}
