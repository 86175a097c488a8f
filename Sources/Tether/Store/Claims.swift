/// Processes sharing a store: which process's context owns which outbox
/// rows (`tether_claims`). A context named N owns the rows under N while
/// no other live process does; a context of that name in a second process
/// gets rows of its own (a guest owner, N U+0001 pid.start), so neither
/// sends the other's unsaved changes. A claim ends with its context's
/// close or its process's death; the rows of an ended claim are an orphan's,
/// taken over by the next context of that name to open or save
/// (`Context.adoptOrphanedChanges`), each exactly once (a row moves to one
/// owner by one UPDATE). `exclusive` claims refuse every other process.
extension Store {
    static let claimsSchema = """
        CREATE TABLE IF NOT EXISTS tether_claims (
            owner TEXT PRIMARY KEY NOT NULL,
            name TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started INTEGER NOT NULL,
            boot TEXT NOT NULL,
            exclusive INTEGER NOT NULL,
            open INTEGER NOT NULL)
        """

    struct Claim {
        let owner: String
        let name: String
        let holder: ProcessIdentity
        let exclusive: Bool
        let open: Bool
        var isLive: Bool { open && holder.isAlive }
    }

    /// The outbox owner of this process's context named `name`, claimed;
    /// `.busy` where an exclusive claim stands in the way (either way).
    func claimOwner(name: String, exclusive: Bool) throws -> String {
        try withDatabase { database in
            try database.transaction {
                let me = ProcessIdentity.current
                let claims = try Self.claims(database, where: nil)
                let others = claims.filter { $0.holder.pid != me.pid && $0.isLive }
                if exclusive, let other = others.first {
                    let more = Set(others.map(\.holder.pid)).count - 1
                    throw TetherError(.busy, "the store \(database.fileName) is open in process \(other.holder.pid)"
                                      + (more > 0 ? " and \(more) other\(more == 1 ? "" : "s")" : "") + ": it cannot be opened exclusively")
                }
                if let holder = others.first(where: \.exclusive) {
                    throw TetherError(.busy, "the store \(database.fileName) is open exclusively in process \(holder.holder.pid)")
                }
                let taken = others.contains { $0.owner == name }
                let owner = taken ? name + "\u{1}\(me.pid).\(me.started)" : name
                try database.statement("""
                    INSERT INTO tether_claims (owner, name, pid, started, boot, exclusive, open) VALUES (?, ?, ?, ?, ?, ?, 1)
                    ON CONFLICT (owner) DO UPDATE SET pid = excluded.pid, started = excluded.started, boot = excluded.boot,
                        exclusive = excluded.exclusive, open = 1
                    """).run([.text(owner), .text(name), .integer(Int64(me.pid)), .integer(me.started), .text(me.boot),
                              .integer(exclusive ? 1 : 0)])
                return owner
            }
        }
    }

    /// At close: the claim ends; it is forgotten if it leaves no rows.
    func releaseOwner(_ owner: String) throws {
        try withDatabase { database in
            try database.transaction {
                try database.statement("UPDATE tether_claims SET open = 0 WHERE owner = ?").run([.text(owner)])
                try database.statement("""
                    DELETE FROM tether_claims WHERE owner = ? AND NOT EXISTS (SELECT 1 FROM tether_outbox WHERE owner = ?)
                    """).run([.text(owner), .text(owner)])
            }
        }
    }

    /// The ended claims on `name`'s rows, other than `owner`'s; ended
    /// claims that hold no rows are forgotten on the way.
    func orphanedClaims(name: String, except owner: String) throws -> [Claim] {
        try withDatabase { database in
            try database.transaction {
                var orphans: [Claim] = []
                for claim in try Self.claims(database, where: name) where claim.owner != owner && !claim.isLive {
                    let forgotten = try database.statement("""
                        DELETE FROM tether_claims WHERE owner = ? AND pid = ? AND started = ? AND open = ?
                            AND NOT EXISTS (SELECT 1 FROM tether_outbox WHERE owner = ?) RETURNING owner
                        """).first(Self.unchanged(claim) + [.text(claim.owner)]) { $0[0] } != nil
                    if !forgotten { orphans.append(claim) }
                }
                return orphans
            }
        }
    }

    /// Moves the orphan's row of (entity, id) to `owner`, unless `owner`
    /// has one (its own change of the object comes first), or the claim
    /// was taken again meanwhile (a context of its name opened: the rows are
    /// its), or another process took the row: whether it moved.
    func adopt(_ entity: Entity, id: String, from orphan: Claim, into owner: String) throws -> Bool {
        try withDatabase { database in
            try database.transaction {
                let still = try database.statement("SELECT 1 FROM tether_claims WHERE owner = ? AND pid = ? AND started = ? AND open = ?")
                    .first(Self.unchanged(orphan)) { $0[0] } != nil
                guard still else { return false }
                return try database.statement("""
                    UPDATE tether_outbox SET owner = ? WHERE owner = ? AND entity = ? AND id = ?
                        AND NOT EXISTS (SELECT 1 FROM tether_outbox WHERE owner = ? AND entity = ? AND id = ?)
                    RETURNING sequence
                    """).first([.text(owner), .text(orphan.owner), .integer(Int64(entity.code)), .text(id),
                                .text(owner), .integer(Int64(entity.code)), .text(id)]) { $0[0] } != nil
            }
        }
    }

    /// A claim's row as read: the key that finds it only if no one claimed it since.
    private static func unchanged(_ claim: Claim) -> [SQLValue] {
        [.text(claim.owner), .integer(Int64(claim.holder.pid)), .integer(claim.holder.started), .integer(claim.open ? 1 : 0)]
    }

    private static func claims(_ database: Database, where name: String?) throws -> [Claim] {
        var claims: [Claim] = []
        let statement = try database.statement(name == nil
            ? "SELECT owner, name, pid, started, boot, exclusive, open FROM tether_claims"
            : "SELECT owner, name, pid, started, boot, exclusive, open FROM tether_claims WHERE name = ?")
        try statement.each(name.map { [.text($0)] } ?? []) { row in
            guard case .text(let owner) = row[0], case .text(let name) = row[1], case .integer(let pid) = row[2],
                  case .integer(let started) = row[3], case .text(let boot) = row[4], case .integer(let exclusive) = row[5],
                  case .integer(let open) = row[6] else { return }
            claims.append(Claim(owner: owner, name: name,
                                holder: ProcessIdentity(pid: Int32(truncatingIfNeeded: pid), started: started, boot: boot),
                                exclusive: exclusive != 0, open: open != 0))
        }
        return claims
    }
}
