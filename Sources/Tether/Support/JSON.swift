/// A JSON document as Swift values. Objects keep their key order, so a spec's
/// properties are seen in the order the server wrote them.
///
/// Nothing a server sends is lost on the way in: a number that fits neither
/// `Int64` nor a finite `Double` keeps its text (`.number`), and keys and
/// strings may hold any character, U+0000 included.
public enum JSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    /// A number kept as the server wrote it (an integer of 2^63 or more,
    /// say); always valid JSON number syntax.
    case number(String)
    case string(String)
    case array([JSON])
    case object([(key: String, value: JSON)])

    /// Keys and strings compare by their UTF-8 bytes: JSON does not unify
    /// canonically equivalent text, and neither may a lookup by key.
    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.integer(a), .integer(b)): return a == b
        case let (.real(a), .real(b)): return a == b
        case let (.number(a), .number(b)): return a.hasSameBytes(as: b)
        case let (.string(a), .string(b)): return a.hasSameBytes(as: b)
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count
                && zip(a, b).allSatisfy { $0.key.hasSameBytes(as: $1.key) && $0.value == $1.value }
        default: return false
        }
    }

    public subscript(key: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key.hasSameBytes(as: key) }?.value
    }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var integerValue: Int64? { if case .integer(let i) = self { return i } else { return nil } }
    public var arrayValue: [JSON]? { if case .array(let a) = self { return a } else { return nil } }
    public var objectValue: [(key: String, value: JSON)]? { if case .object(let o) = self { return o } else { return nil } }

    /// Parses a complete JSON text; anything else is a `.protocol` error
    /// saying where. See `JSONReader` for what is tolerated.
    public static func parse(_ bytes: [UInt8]) throws -> JSON {
        try bytes.withUnsafeBufferPointer { try JSONReader.parse($0) }
    }

    public static func parse(_ text: String) throws -> JSON {
        var text = text
        return try text.withUTF8 { try JSONReader.parse($0) }
    }

    /// Compact text; object keys sorted by their bytes when `sortKeys`, so
    /// equal values serialize equally.
    public func serialized(sortKeys: Bool = false) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(64)  // most are short: no growth from empty, step by step
        write(to: &output, sortKeys: sortKeys)
        return String(decoding: output, as: UTF8.self)
    }

    private func write(to output: inout [UInt8], sortKeys: Bool) {
        switch self {
        case .null: output += "null".utf8
        case .bool(let b): output += (b ? "true" : "false").utf8
        case .integer(let i): output += String(i).utf8
        // Shortest text that reads back as the same Double; never inf or nan.
        case .real(let d): output += (d.isFinite ? d.description : "null").utf8
        case .number(let text): output += text.utf8
        case .string(let s): Self.writeString(s, to: &output)
        case .array(let items):
            output.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                item.write(to: &output, sortKeys: sortKeys)
            }
            output.append(UInt8(ascii: "]"))
        case .object(var members):
            if sortKeys { members.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) } }
            output.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output, sortKeys: sortKeys)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ string: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { bytes in
            // Most strings need no escape: their bytes go in at once.
            guard bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                output.append(contentsOf: bytes)
                return
            }
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "\""): output += #"\""#.utf8
                case UInt8(ascii: "\\"): output += #"\\"#.utf8
                case UInt8(ascii: "\n"): output += #"\n"#.utf8
                case UInt8(ascii: "\r"): output += #"\r"#.utf8
                case UInt8(ascii: "\t"): output += #"\t"#.utf8
                case 0..<0x20: output += [UInt8(ascii: "\\"), UInt8(ascii: "u"), 0x30, 0x30, hexDigit(byte >> 4), hexDigit(byte & 15)]
                default: output.append(byte)
                }
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : UInt8(ascii: "a") + nibble - 10 }
}
