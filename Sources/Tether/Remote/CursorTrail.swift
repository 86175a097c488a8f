/// The cursors of one listing so far. A server that names a cursor it named
/// before (the same page again, or a cycle) would be paged forever: the
/// listing ends instead, with `.protocol` naming the cursor.
struct CursorTrail: Sendable {
    private var tokens = Set<String>()

    /// Takes `next`, the cursor a page named for the rest of `what`.
    mutating func advance(to next: PageCursor, of what: String) throws {
        guard tokens.insert(next.token).inserted else {
            throw TetherError(.protocol, "the server named the cursor \(Self.name(next)) again in the listing of \(what): "
                                         + "it would never end")
        }
    }

    /// A cursor as a message shows it: no credentials (Kinto's are URLs), not too long.
    static func name(_ cursor: PageCursor) -> String {
        let text = Log.redacted(cursor.token)
        return (text.count > 200 ? String(text.prefix(200)) + "…" : text).debugDescription
    }
}
