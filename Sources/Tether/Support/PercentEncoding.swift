/// RFC 3986's percent-encoding (`%XX`), undone: one reading for the store's
/// URIs (strict) and Kinto's query parameters (lenient, as the server reads them).
enum PercentEncoding {
    /// The bytes `text` stands for. A `%` not followed by two hex digits is
    /// kept as written where `lenient`; otherwise the text is refused (nil).
    static func decoded(_ text: Substring, lenient: Bool) -> [UInt8]? {
        let source = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(source.count)
        var index = 0
        while index < source.count {
            if source[index] == UInt8(ascii: "%") {
                if index + 2 < source.count, let high = hexValue(source[index + 1]), let low = hexValue(source[index + 2]) {
                    bytes.append(high << 4 | low)
                    index += 3
                    continue
                }
                guard lenient else { return nil }
            }
            bytes.append(source[index])
            index += 1
        }
        return bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
