/// A string that equals another only byte for byte. Swift's `String` equality
/// is canonical equivalence ("é" precomposed equals "e" + U+0301), but names
/// and ids from a server are distinct when their bytes are, as they are in
/// SQLite and on the server: keyed by `String`, two fields would share one
/// attribute and one record's value would be lost.
struct ExactString: Hashable, Sendable {
    let string: String

    init(_ string: String) { self.string = string }

    static func == (lhs: ExactString, rhs: ExactString) -> Bool { lhs.string.utf8.elementsEqual(rhs.string.utf8) }

    func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}
