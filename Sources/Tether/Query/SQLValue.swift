/// A value as SQLite holds it.
enum SQLValue: Equatable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

extension SQLValue {
    /// The integer, nil for any other value.
    var integerValue: Int64? { if case .integer(let n) = self { return n } else { return nil } }

    /// The value as its column holds it: booleans 0 or 1, JSON its text.
    init(_ value: Value) {
        switch value {
        case .null: self = .null
        case .text(let s), .json(let s): self = .text(s)
        case .integer(let i): self = .integer(i)
        case .real(let d): self = .real(d)
        case .boolean(let b): self = .integer(b ? 1 : 0)
        }
    }
}
