/// The one order of a fetch's answers, as the cache's SQL gives it, so that
/// a server's answer is put in the same order: per key, null first (also a
/// value of another type than the attribute's, which the cache holds as
/// null), then numbers and booleans by value, then text by its bytes (its
/// Unicode scalar values); descending reverses a key; ties go by id bytes.
struct SortOrder {
    let entity: Entity
    let keys: [(index: Int, descending: Bool)]

    /// Whether row `a` (its id and values; nil: not known, all null) comes before `b`.
    func precedes(_ a: (id: String, values: [Value]?), _ b: (id: String, values: [Value]?)) -> Bool {
        for key in keys {
            let type = entity.attributes[key.index].type
            let order = Self.compare(a.values?[key.index] ?? .null, b.values?[key.index] ?? .null, type)
            if order != 0 { return key.descending ? order > 0 : order < 0 }
        }
        return a.id.utf8.lexicographicallyPrecedes(b.id.utf8)
    }

    /// -1, 0 or 1, as SQLite orders the stored values.
    static func compare(_ a: Value, _ b: Value, _ type: AttributeType) -> Int {
        let (x, y) = (stored(a, type), stored(b, type))
        switch (x, y) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case let (.integer(i), .integer(j)): return i < j ? -1 : (i > j ? 1 : 0)
        case let (.text(s), .text(t)):
            if s.hasSameBytes(as: t) { return 0 }
            return s.utf8.lexicographicallyPrecedes(t.utf8) ? -1 : 1
        case (.text, _): return 1
        case (_, .text): return -1
        default: return NumberOrder.compare(x, y) ?? 0
        }
    }

    /// The value as its column holds it: misfits are null, booleans 0 or 1,
    /// JSON its text.
    private static func stored(_ value: Value, _ type: AttributeType) -> Value {
        if Record.isMisfit(value, type) { return .null }
        switch value {
        case .boolean(let b): return .integer(b ? 1 : 0)
        case .json(let text): return .text(text)
        default: return value
        }
    }
}
