/// A predicate's literal: a value, or an integer no attribute's type holds.
///
/// An integer literal no Int64 holds (2^63, -2^63 - 1, 2^64 + 1…) is still
/// an exact value: where a double holds it, it is that real; where none
/// does, it lies strictly between two adjacent doubles, and every value an
/// attribute can hold (an Int64 or a double) is on one side of it. So
/// `x < B` is `x <= below` and `x > B` is `x >= above`, exactly, and no
/// value equals it: the comparison is rewritten without rounding anything.
enum Literal: Equatable {
    case value(Value)
    /// An integer no Int64 or double holds: the doubles just below and above it.
    case inexactInteger(below: Double, above: Double)

    /// A number's text. nil: not a number, or beyond a double's finite range (as `1e309` is).
    init?(number text: String) {
        if let integer = Int64(text) {
            self = .value(.integer(integer))
            return
        }
        guard let nearest = Double(text), nearest.isFinite else { return nil }
        guard let digits = Self.integerDigits(text) else {
            self = .value(.real(nearest))  // a point or an exponent: a real, the nearest double
            return
        }
        let negative = text.hasPrefix("-")
        switch Self.compareMagnitudes(digits, Self.exactDigits(of: nearest.magnitude)) {
        case 0: self = .value(.real(nearest))
        // The literal's magnitude is above the nearest double's: away from zero.
        case 1: self = negative ? .inexactInteger(below: nearest.nextDown, above: nearest)
                                : .inexactInteger(below: nearest, above: nearest.nextUp)
        default: self = negative ? .inexactInteger(below: nearest, above: nearest.nextUp)
                                 : .inexactInteger(below: nearest.nextDown, above: nearest)
        }
        if case .inexactInteger(let below, let above) = self, !below.isFinite || !above.isFinite { return nil }
    }

    /// The decimal digits of an integer literal (`[+-]digits`), leading zeros
    /// dropped; nil for anything else.
    private static func integerDigits(_ text: String) -> [UInt8]? {
        var digits = Array(text.utf8)
        if let sign = digits.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") { digits.removeFirst() }
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let significant = digits.drop { $0 == 0x30 }.map { $0 - 0x30 }
        return significant.isEmpty ? [0] : significant
    }

    /// The exact decimal digits of a non-negative whole double (every double
    /// of 2^53 or more is whole; a literal beyond Int64 rounds to one).
    private static func exactDigits(of value: Double) -> [UInt8] {
        var digits = String(UInt64(value.significandBitPattern | (1 << 52))).utf8.map { $0 - 0x30 }
        for _ in 0..<max(0, Int(value.exponent) - 52) {  // times 2, exponent - 52 times
            var carry: UInt8 = 0
            for index in digits.indices.reversed() {
                let doubled = digits[index] * 2 + carry
                digits[index] = doubled % 10
                carry = doubled / 10
            }
            if carry > 0 { digits.insert(carry, at: 0) }
        }
        return digits
    }

    private static func compareMagnitudes(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.count != b.count { return a.count < b.count ? -1 : 1 }
        return a == b ? 0 : a.lexicographicallyPrecedes(b) ? -1 : 1
    }
}
