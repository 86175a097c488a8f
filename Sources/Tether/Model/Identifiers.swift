/// SQL identifiers are made from codes, never from names (names come from
/// servers, and SQLite compares identifiers without case): an entity's table
/// is `e<code>`, an attribute's column `a<code>`. They are quoted as well.
enum Identifier {
    static func table(code: Int) -> String { quoted("e\(code)") }
    static func column(code: Int) -> String { quoted("a\(code)") }
    /// The index the store makes on one attribute's column.
    static func index(entity: Int, attribute: Int) -> String { quoted("x\(entity)_\(attribute)") }

    /// `"name"`, with embedded quotes doubled.
    static func quoted(_ name: String) -> String {
        "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }

    /// Whether a name from a server can be a name in the model: the C ABI
    /// hands names out as NUL-terminated strings, so U+0000 cannot be in one.
    static func isUsableName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= maximumNameBytes && !name.utf8.contains(0)
    }

    static let maximumNameBytes = 4096
}
