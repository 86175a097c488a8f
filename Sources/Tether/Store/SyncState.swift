/// How far each entity's table follows the server: write serials and
/// sync versions.
extension Store {
    /// The serial the next write will take: rows written from now on have
    /// it or a later one.
    func nextWrite() throws -> Int64 { try withDatabase { try Self.lastWrite($0) + 1 } }

    /// The serial of the newest write of server records.
    func lastWrite() throws -> Int64 { try withDatabase { try Self.lastWrite($0) } }

    /// The serial of the newest write of server records (meta "write").
    static func lastWrite(_ database: Database) throws -> Int64 {
        try meta("write", database).flatMap { Int64($0) } ?? 0
    }

    /// SQLite's count of commits by other connections (`PRAGMA data_version`):
    /// it moves when another process wrote to the file. No I/O.
    func dataVersion() throws -> Int64 {
        try withDatabase { database in
            guard case .integer(let version)? = try database.statement("PRAGMA data_version").rows().first?.first else {
                throw TetherError(.store, "store: PRAGMA data_version gave no number")
            }
            return version
        }
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
}

extension Store {
    /// Whether a page the server answered at `version` is older than what
    /// the store holds of `entity` in whole (its sync version): another
    /// fetch's newer listing has landed, and this page (read before a
    /// deletion or a restore, say) must not bring back what it replaced.
    func isOlderThanSync(_ version: Int64?, of entity: Entity) throws -> Bool {
        guard let version, let synced = try syncVersion(entity) else { return false }
        return version < synced
    }
}
