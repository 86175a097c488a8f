/// Records in Perforce's tagged output (`p4 -ztag -Mj`): a list field comes
/// one line per key, `View0`, `View1`, ...; the model holds it as one list.
enum TaggedRecords {
    /// `record` with each `<tag><n>` of a list tag folded into `<tag>`, a
    /// JSON list in the order of n. Keys that are fields of their own, and
    /// tags already given whole, are left as they are.
    static func folded(_ record: RecordFields, listTags: Set<String>) -> RecordFields {
        guard !listTags.isEmpty else { return record }
        let given = Set(record.map(\.key))
        var lists: [String: [(Int, JSON)]] = [:]
        var kept: RecordFields = []
        for field in record {
            if let (tag, number) = split(field.key), listTags.contains(tag), !given.contains(tag), !listTags.contains(field.key) {
                lists[tag, default: []].append((number, field.value))
            } else {
                kept.append(field)
            }
        }
        for (tag, items) in lists.sorted(by: { $0.key < $1.key }) {
            kept.append((tag, .array(items.sorted { $0.0 < $1.0 }.map(\.1))))
        }
        return kept
    }

    /// "View12" -> ("View", 12); nil for a key not ending in digits after a name.
    private static func split(_ key: String) -> (String, Int)? {
        let scalars = Array(key.unicodeScalars)
        var end = scalars.count
        while end > 0, ("0"..."9").contains(scalars[end - 1]) { end -= 1 }
        guard end > 0, end < scalars.count, scalars.count - end <= 9,
              let number = Int(String(String.UnicodeScalarView(scalars[end...]))) else { return nil }
        return (String(String.UnicodeScalarView(scalars[..<end])), number)
    }
}

extension SpecDef {
    /// A record type as a Perforce server describes it: a specdef string
    /// (the `specdef` field of `p4 -ztag client -o`), its fields keeping
    /// Perforce's codes; its records then come as tagged output (a list
    /// field's items as `View0`, `View1`, ...), which `folding` folds into
    /// lists. The version field, which Perforce lacks, is `tether_version`:
    /// the host gives each record one.
    public static func taggedSpec(name: String, specdef: String, operations: Operations) throws
        -> (spec: Spec, folding: @Sendable (RecordFields) -> RecordFields) {
        let fields: [SpecDefField]
        do { fields = try parse(specdef) } catch let error as TetherError {
            throw TetherError(error.kind, "\(name): \(error.message)")
        }
        var made = Self.spec(name: name, route: name, fields: fields)
        made.operations = operations
        let listTags = Set(fields.filter { listTypes.contains($0.type) }.map(\.tag))
        return (made, { TaggedRecords.folded($0, listTags: listTags) })
    }
}
