/// Names that come from a server spec end up as SQL identifiers; only these
/// shapes are accepted, and they are quoted as well.
enum Identifier {
    static func isValidEntityName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 128 && name.utf8.allSatisfy { isWordByte($0) || $0 == UInt8(ascii: "-") }
    }

    static func isValidAttributeName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !isDigit(first), name.utf8.count <= 128 else { return false }
        return name.utf8.allSatisfy(isWordByte)
    }

    /// `"name"`, with embedded quotes doubled (validated names have none).
    static func quoted(_ name: String) -> String {
        "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122) || byte == UInt8(ascii: "_")
    }
}
