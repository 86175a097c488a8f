/// One change sent to a server. Every kind is conditional, so a write sent
/// twice (a retry after a cut connection, a save again after a crash) is
/// never applied twice: the second finds the first's result and conflicts.
public struct RecordWrite: Sendable {
    public enum Kind: Sendable, Equatable {
        /// Only if the server has no record of this id.
        case create
        /// These fields only, only if the server's version is `ifVersion`.
        case patch
        /// Every field, only if the server's version is `ifVersion`.
        case replace
        /// Only if the server's version is `ifVersion`; with none, whatever it is.
        case delete
    }

    public let spec: Spec
    public let id: String
    public let kind: Kind
    /// Fields by name, without the id and version fields; none for a delete.
    public let fields: RecordFields
    public let ifVersion: Int64?

    public init(spec: Spec, id: String, kind: Kind, fields: RecordFields = [], ifVersion: Int64? = nil) {
        self.spec = spec
        self.id = id
        self.kind = kind
        self.fields = fields
        self.ifVersion = ifVersion
    }
}

/// What became of one write.
public enum WriteOutcome: Sendable {
    /// Applied: the record as the server now has it.
    case written(RecordFields)
    /// Applied, or the record was already gone.
    case deleted
    /// Not applied: the server's record is another version, or exists (for a
    /// create); `current` is the server's record, nil if it has none.
    case conflict(current: RecordFields?)
    /// Not known to be applied.
    case failed(TetherError)
}
