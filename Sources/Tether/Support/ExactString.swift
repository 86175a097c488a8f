import Glibc

/// A string that equals another only byte for byte. Swift's `String` equality
/// is canonical equivalence ("é" precomposed equals "e" + U+0301), but names
/// and ids from a server are distinct when their bytes are, as they are in
/// SQLite and on the server: keyed by `String`, two fields would share one
/// attribute and one record's value would be lost.
struct ExactString: Hashable, Sendable {
    let string: String

    init(_ string: String) { self.string = string }

    static func == (lhs: ExactString, rhs: ExactString) -> Bool { lhs.string.hasSameBytes(as: rhs.string) }

    func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

extension String {
    /// Byte-for-byte equality (see `ExactString`), by memcmp rather than
    /// `utf8.elementsEqual`, whose iterator showed in profiles of decoding.
    /// The lengths are compared inline, where the caller is: most strings
    /// compared (keys, ids) differ in length, and the call cost more than that test.
    func hasSameBytes(as other: String) -> Bool {
        utf8.count == other.utf8.count && hasSameBytes(ofLength: other)
    }

    /// `hasSameBytes` for strings of one length.
    private func hasSameBytes(ofLength other: String) -> Bool {
        var left = self
        var right = other
        return left.withUTF8 { a in
            right.withUTF8 { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }
}
