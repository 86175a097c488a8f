/// Reads JSON text (RFC 8259) from a server, which may be broken or hostile.
///
/// Strict about structure, since a document whose structure is wrong has no
/// trustworthy records in it; tolerant within a value, so that one odd record
/// does not fail a whole page:
/// - integers beyond `Int64` and numbers beyond `Double` keep their text;
/// - keys and strings may hold U+0000 (escaped) and raw control characters;
/// - invalid UTF-8 and lone surrogate escapes become U+FFFD, as a decoder
///   that replaces errors does;
/// - a key given twice keeps its first position and its last value.
/// Nesting deeper than `maximumDepth` is refused rather than risking the
/// host's stack.
struct JSONReader {
    static let maximumDepth = 512
    /// Objects with more members than this find duplicate keys through a
    /// table instead of a scan.
    private static let scanLimit = 16

    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0
    private var depth = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws -> JSON {
        var reader = JSONReader(bytes)
        reader.skipWhitespace()
        let value = try reader.readValue()
        reader.skipWhitespace()
        guard reader.position == bytes.count else { throw reader.failure("text after the end of the document") }
        return value
    }

    private func failure(_ what: String) -> TetherError {
        TetherError(.protocol, "malformed JSON at byte \(position): \(what)")
    }

    private var current: UInt8? { position < bytes.count ? bytes[position] : nil }

    private mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { position += 1 }
    }

    private mutating func expect(_ literal: StaticString, _ value: JSON) throws -> JSON {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - position >= count,
              UnsafeBufferPointer(rebasing: bytes[position..<position + count])
                .elementsEqual(UnsafeBufferPointer(start: literal.utf8Start, count: count)) else {
            throw failure("expected \(literal)")
        }
        position += count
        return value
    }

    private mutating func readValue() throws -> JSON {
        guard let byte = current else { throw failure("unexpected end of the document") }
        switch byte {
        case UInt8(ascii: "{"): return try nested { try $0.readObject() }
        case UInt8(ascii: "["): return try nested { try $0.readArray() }
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try readNumber()
        default: throw failure("unexpected character")
        }
    }

    private mutating func nested(_ read: (inout JSONReader) throws -> JSON) throws -> JSON {
        guard depth < Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        depth += 1
        defer { depth -= 1 }
        position += 1  // the opening bracket
        return try read(&self)
    }

    private mutating func readArray() throws -> JSON {
        var items: [JSON] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            position += 1
            return .array(items)
        }
        items.reserveCapacity(4)  // grown from empty, a short array is made four times over
        while true {
            skipWhitespace()
            items.append(try readValue())
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"):
                position += 1
                return .array(items)
            default: throw failure("expected , or ] in an array")
            }
        }
    }

    private mutating func readObject() throws -> JSON {
        var members: [(key: String, value: JSON)] = []
        var indexByKey: [[UInt8]: Int] = [:]
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        members.reserveCapacity(8)  // a record's fields: one or two allocations, not five
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw failure("expected a key in an object") }
            let key = try readString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw failure("expected : after a key") }
            position += 1
            skipWhitespace()
            let value = try readValue()
            if let earlier = Self.index(of: key, in: members, table: &indexByKey) {
                members[earlier].value = value
            } else {
                members.append((key, value))
            }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                return .object(members)
            default: throw failure("expected , or } in an object")
            }
        }
    }

    /// Where `key` already is among `members` (by bytes); registers it in
    /// `table` once the object is large enough to need one.
    private static func index(of key: String, in members: [(key: String, value: JSON)],
                              table: inout [[UInt8]: Int]) -> Int? {
        if members.count < scanLimit {
            // By index: each key read in place, no (key, value) pair copied (and retained).
            for index in members.indices where members[index].key.hasSameBytes(as: key) { return index }
            return nil
        }
        if table.isEmpty {
            for (index, member) in members.enumerated() { table[Array(member.key.utf8)] = index }
        }
        let bytes = Array(key.utf8)
        if let index = table[bytes] { return index }
        table[bytes] = members.count
        return nil
    }

    private mutating func readString() throws -> String {
        position += 1  // the opening quote
        let start = position
        // The common case: no escapes, so the bytes are the string.
        while let byte = current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") { position += 1 }
        guard let stop = current else { throw failure("unterminated string") }
        if stop == UInt8(ascii: "\"") {
            position += 1
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position - 1]), as: UTF8.self)
        }
        var decoded = Array(bytes[start..<position])
        while let byte = current {
            position += 1
            switch byte {
            case UInt8(ascii: "\""): return String(decoding: decoded, as: UTF8.self)
            case UInt8(ascii: "\\"): try readEscape(into: &decoded)
            default: decoded.append(byte)
            }
        }
        throw failure("unterminated string")
    }

    private mutating func readEscape(into decoded: inout [UInt8]) throws {
        guard let byte = current else { throw failure("unterminated string") }
        position += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(byte)
        case UInt8(ascii: "b"): decoded.append(0x08)
        case UInt8(ascii: "f"): decoded.append(0x0C)
        case UInt8(ascii: "n"): decoded.append(0x0A)
        case UInt8(ascii: "r"): decoded.append(0x0D)
        case UInt8(ascii: "t"): decoded.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try readHex4())
            if (0xD800..<0xDC00).contains(scalar) {
                // A high surrogate is a scalar only with a low one after it.
                if bytes.count - position >= 6, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") {
                    let resume = position
                    position += 2
                    let low = UInt32(try readHex4())
                    if (0xDC00..<0xE000).contains(low) {
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        position = resume  // read the next escape on its own
                    }
                }
            }
            let character = Unicode.Scalar(scalar) ?? "\u{FFFD}"
            decoded += UTF8.encode(character)!
        default: throw failure("unknown escape \\\(Unicode.Scalar(byte))")
        }
    }

    private mutating func readHex4() throws -> UInt16 {
        guard bytes.count - position >= 4 else { throw failure("short \\u escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("bad hex digit in a \\u escape")
            }
            value = value << 4 | UInt16(digit)
            position += 1
        }
        return value
    }

    private mutating func readNumber() throws -> JSON {
        let start = position
        let negative = current == UInt8(ascii: "-")
        if negative { position += 1 }
        var magnitude: UInt64 = 0
        var fitsInteger = true
        guard let first = current, isDigit(first) else { throw failure("expected a digit") }
        if first == UInt8(ascii: "0") {
            position += 1
        } else {
            while let byte = current, isDigit(byte) {
                let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
                if overflow1 || overflow2 { fitsInteger = false }
                magnitude = sum
                position += 1
            }
        }
        var isInteger = true
        if current == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            try readDigits()
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
            try readDigits()
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        if isInteger && fitsInteger {
            if !negative, magnitude <= UInt64(Int64.max) { return .integer(Int64(magnitude)) }
            if negative, magnitude <= UInt64(Int64.max) + 1 { return .integer(magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)) }
        }
        if !isInteger, let real = Double(text), real.isFinite { return .real(real) }
        return .number(text)
    }

    private mutating func readDigits() throws {
        guard let first = current, isDigit(first) else { throw failure("expected a digit") }
        while let byte = current, isDigit(byte) { position += 1 }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
