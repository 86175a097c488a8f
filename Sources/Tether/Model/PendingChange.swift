/// What a local change does to its record.
public enum ChangeKind: Int, Sendable {
    case insert = 1, update = 2, delete = 3
}

/// An object's change not yet confirmed by the server.
struct PendingChange: Sendable {
    var kind: ChangeKind
    /// Values set here, by attribute index (an insert's: every value set).
    var values: [Int: Value]
    /// The server version the change was made against: updates and deletes
    /// are conditional on it. nil for an insert, and for the delete of an
    /// insert that may have reached the server (deleted whatever its version).
    var baseVersion: Int64?
    /// Bumped by every edit: a save confirms only the revision it sent.
    var revision: Int64
    /// The object's place in the outbox's order.
    var sequence: Int64 = 0
    /// Part of a save once: an insert may exist on the server from then on.
    var sent = false
    /// The records made by the writes sent for this change and never
    /// answered (values by attribute index), oldest first; kept in the outbox too.
    var sentWrites: [[Int: Value]] = []
}
