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
    /// Applied, or the record was already gone. `version`, where the
    /// server says, is one the deletion follows: the record at that
    /// version or an older one is from before it, and a record made again
    /// has a newer one (Kinto: the tombstone's). Nil: not said (a record
    /// already gone).
    case deleted(version: Int64?)
    /// Not applied: the server's record is another version, or exists (for a
    /// create); `current` is the server's record, nil if it has none.
    case conflict(current: RecordFields?)
    /// Not known to be applied.
    case failed(TetherError)
}

extension RecordWrite {
    /// What a server that keeps its own records does with a write, given
    /// whether it holds the record and at which version: the one rule the
    /// memory server and local stores follow, as Kinto does.
    enum Verdict: Equatable {
        /// Refused: the record exists (create) or is another version.
        case conflict
        /// Nothing to do, and this is the outcome (a delete of a record gone
        /// is done; a patch of one is a conflict with nothing).
        case nothingToDo(gone: Bool)
        case apply
    }

    func verdict(holding version: Int64?, exists: Bool) -> Verdict {
        switch (kind, exists) {
        case (.create, true): return .conflict
        case (.delete, false): return .nothingToDo(gone: true)
        case (.patch, false), (.replace, false): return .nothingToDo(gone: false)
        case (_, true) where ifVersion != nil && version != ifVersion: return .conflict
        default: return .apply
        }
    }

    /// The outcome of a write that was not applied, with the record held.
    func outcome(of verdict: Verdict, current: RecordFields?) -> WriteOutcome {
        switch verdict {
        case .nothingToDo(gone: true): return .deleted(version: nil)
        case .nothingToDo(gone: false): return .conflict(current: nil)
        default: return .conflict(current: current)
        }
    }

    /// The fields (without id and version) a record holds after this
    /// create, patch or replace: a patch's over `current`.
    func applied(to current: RecordFields) -> RecordFields {
        var fields = kind == .patch ? current : []
        for (key, value) in self.fields where key != spec.idField && key != spec.versionField {
            if let index = fields.firstIndex(where: { $0.key == key }) { fields[index].value = value }
            else { fields.append((key, value)) }
        }
        return fields
    }
}
