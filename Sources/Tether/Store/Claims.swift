/// Processes sharing a store: which process's context owns which outbox
/// rows (`tether_claims`). A context named N owns the rows under N while
/// no other live process does; a context of that name in a second process
/// gets rows of its own (a guest owner, N U+0001 pid.start), so neither
/// sends the other's unsaved changes. A claim ends with its context's
/// close or its process's death; the rows of an ended claim are an orphan's,
/// taken over by the next context of that name to open or save
/// (`Context.adoptOrphanedChanges`), each exactly once (a row moves to one
/// owner by one UPDATE). Every claim has a random token: whoever ends or
/// takes over a claim names the one it read, never a later one of the same
/// owner. `exclusive` claims refuse every other process.
extension Store {
    static let claimsSchema = """
        CREATE TABLE IF NOT EXISTS tether_claims (
            owner TEXT PRIMARY KEY NOT NULL,
            name TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started INTEGER NOT NULL,
            boot TEXT NOT NULL,
            exclusive INTEGER NOT NULL,
            open INTEGER NOT NULL,
            token INTEGER NOT NULL DEFAULT 0)
        """

    struct Claim: Sendable {
        let owner: String
        let name: String
        let holder: ProcessIdentity
        let exclusive: Bool
        let open: Bool
        let token: Int64
        var isLive: Bool { open && holder.mayBeAlive }
    }

    /// The outbox owner of this process's context named `name`, claimed
    /// (`owner` given: that one, a local store following its main store's);
    /// `.busy` where an exclusive claim stands in the way (either way), or
    /// where `owner` is another live process's.
    func claimOwner(name: String, exclusive: Bool, owner wanted: String? = nil) throws -> Claim {
        try withDatabase { database in
            try database.transaction {
                let me = ProcessIdentity.current
                let others = try Self.claims(database, where: nil).filter { !$0.holder.isProcess(me) && $0.isLive }
                if exclusive, let other = others.first {
                    let more = Set(others.map(\.holder.pid)).count - 1
                    throw TetherError(.busy, "the store \(database.fileName) is open in process \(other.holder.pid)"
                                      + (more > 0 ? " and \(more) other\(more == 1 ? "" : "s")" : "") + ": it cannot be opened exclusively")
                }
                if let holder = others.first(where: \.exclusive) {
                    throw TetherError(.busy, "the store \(database.fileName) is open exclusively in process \(holder.holder.pid)")
                }
                let taken = others.contains { $0.owner == (wanted ?? name) }
                if let wanted, taken {
                    throw TetherError(.busy, "the changes named \(name.debugDescription) in \(database.fileName) belong to another "
                                      + "live process, and those of the main store do not: open them under another name")
                }
                let owner = wanted ?? (taken ? name + "\u{1}\(me.pid).\(me.started)" : name)
                let claim = Claim(owner: owner, name: name, holder: me, exclusive: exclusive, open: true,
                                  token: Int64.random(in: 1...Int64.max))
                try database.statement("""
                    INSERT INTO tether_claims (owner, name, pid, started, boot, exclusive, open, token) VALUES (?, ?, ?, ?, ?, ?, 1, ?)
                    ON CONFLICT (owner) DO UPDATE SET pid = excluded.pid, started = excluded.started, boot = excluded.boot,
                        exclusive = excluded.exclusive, open = 1, token = excluded.token
                    """).run([.text(owner), .text(name), .integer(Int64(me.pid)), .integer(me.started), .text(me.boot),
                              .integer(exclusive ? 1 : 0), .integer(claim.token)])
                return claim
            }
        }
    }

    /// At close: this claim ends (not a later one of the same owner); it is
    /// forgotten if it leaves no rows.
    func release(_ claim: Claim) throws {
        try withDatabase { database in
            try database.transaction {
                try database.statement("UPDATE tether_claims SET open = 0 WHERE owner = ? AND token = ?")
                    .run([.text(claim.owner), .integer(claim.token)])
                try database.statement("""
                    DELETE FROM tether_claims WHERE owner = ? AND token = ? AND NOT EXISTS (SELECT 1 FROM tether_outbox WHERE owner = ?)
                    """).run([.text(claim.owner), .integer(claim.token), .text(claim.owner)])
            }
        }
    }

    /// The ended claims on `name`'s rows, other than `owner`'s; ended
    /// claims that hold no rows are forgotten on the way.
    func orphanedClaims(name: String, except owner: String) throws -> [Claim] {
        try withDatabase { database in
            let ended = try Self.claims(database, where: name).filter { $0.owner != owner && !$0.isLive }
            guard !ended.isEmpty else { return [] }
            return try database.transaction {
                var orphans: [Claim] = []
                for claim in ended {
                    let forgotten = try database.statement("""
                        DELETE FROM tether_claims WHERE owner = ? AND token = ? AND open = ?
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
    /// its), or another process took the row: the row as moved, read in the
    /// same transaction, or nil.
    func adopt(_ entity: Entity, id: String, from orphan: Claim, into owner: String) throws -> OutboxRow? {
        try withDatabase { database in
            try database.transaction {
                let still = try database.statement("SELECT 1 FROM tether_claims WHERE owner = ? AND token = ? AND open = ?")
                    .first(Self.unchanged(orphan)) { $0[0] } != nil
                guard still else { return nil }
                let moved = try database.statement("""
                    UPDATE tether_outbox SET owner = ? WHERE owner = ? AND entity = ? AND id = ?
                        AND NOT EXISTS (SELECT 1 FROM tether_outbox WHERE owner = ? AND entity = ? AND id = ?)
                    RETURNING \(Self.outboxColumns)
                    """).first([.text(owner), .text(orphan.owner), .integer(Int64(entity.code)), .text(id),
                                .text(owner), .integer(Int64(entity.code)), .text(id)]) { Self.outboxRow($0, [entity.code: entity]) }
                return moved ?? nil
            }
        }
    }

    /// A claim's row as read: the key that finds it only if no one claimed it since.
    private static func unchanged(_ claim: Claim) -> [SQLValue] {
        [.text(claim.owner), .integer(claim.token), .integer(claim.open ? 1 : 0)]
    }

    private static func claims(_ database: Database, where name: String?) throws -> [Claim] {
        var claims: [Claim] = []
        let columns = "owner, name, pid, started, boot, exclusive, open, token"
        let statement = try database.statement(name == nil ? "SELECT \(columns) FROM tether_claims"
                                                            : "SELECT \(columns) FROM tether_claims WHERE name = ?")
        try statement.each(name.map { [.text($0)] } ?? []) { row in
            guard case .text(let owner) = row[0], case .text(let name) = row[1], case .integer(let pid) = row[2],
                  case .integer(let started) = row[3], case .text(let boot) = row[4], case .integer(let exclusive) = row[5],
                  case .integer(let open) = row[6], case .integer(let token) = row[7] else { return }
            claims.append(Claim(owner: owner, name: name,
                                holder: ProcessIdentity(pid: Int32(truncatingIfNeeded: pid), started: started, boot: boot),
                                exclusive: exclusive != 0, open: open != 0, token: token))
        }
        return claims
    }
}
