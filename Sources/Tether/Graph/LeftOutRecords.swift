/// What a context left out of the pages it took: a record without a usable
/// id, an item that is no record. Each is logged at WARNING and becomes a
/// diagnostic, once per entity and message, up to `limit`: a host running
/// for months against a server that keeps sending a bad record holds one
/// diagnostic for it, and at most `limit` in all.
struct LeftOutRecords: Sendable {
    static let limit = 100

    private(set) var diagnostics: [Diagnostic] = []
    private var seen = Set<String>()
    /// Whether the diagnostic saying the limit was reached is in.
    private var full = false

    /// Adds a diagnostic unless it is in already or the list is full.
    mutating func note(_ diagnostic: Diagnostic) {
        guard !full, seen.insert(diagnostic.entity + "\u{0}" + diagnostic.message).inserted else { return }
        if diagnostics.count + 1 == Self.limit {
            full = true
            diagnostics.append(Diagnostic(entity: diagnostic.entity, attribute: nil, message:
                "more records were left out than the \(Self.limit) diagnostics kept: the log (WARNING) names each"))
            return
        }
        diagnostics.append(diagnostic)
    }
}

extension Context {
    /// What the model left out at open, then the records left out of pages since.
    public var diagnostics: [Diagnostic] { model.diagnostics + leftOut.withLock { $0.diagnostics } }

    /// The page's records that can be taken; the others are left out, told.
    func takeable(_ content: PageContent, of entity: Entity) -> [Record] {
        for item in content.unreadable {
            leaveOut(entity, "item \(item.position + 1) of a page of \(entity.name) was left out: \(item.reason)")
        }
        var records: [Record] = []
        records.reserveCapacity(content.records.count)
        for (position, fields) in content.records.enumerated() {
            do {
                records.append(try Record(entity: entity, fields: fields))
            } catch {
                leaveOut(entity, "record \(position + 1) of a page of \(entity.name) was left out: "
                                 + TetherError.wrap(error).message)
            }
        }
        return records
    }

    private func leaveOut(_ entity: Entity, _ message: String) {
        Log.warning(.sync, message)
        leftOut.withLock { $0.note(Diagnostic(entity: entity.name, attribute: nil, message: message)) }
    }
}
