/// Numbers by exact value, as SQLite compares INTEGER with REAL: an integer
/// is never rounded to a double (2^53 + 1 > 2^53 as a real).
enum NumberOrder {
    /// -1, 0 or 1; nil if either is not a number.
    static func compare(_ a: Value, _ b: Value) -> Int? {
        switch (a, b) {
        case let (.integer(x), .integer(y)): return x == y ? 0 : x < y ? -1 : 1
        case let (.real(x), .real(y)): return x == y ? 0 : x < y ? -1 : (x > y ? 1 : nil)
        case let (.integer(x), .real(y)): return compare(x, y)
        case let (.real(x), .integer(y)): return compare(y, x).map { -$0 }
        default: return nil
        }
    }

    /// An integer against a double, exactly: by the double's integer part,
    /// then its fraction.
    static func compare(_ integer: Int64, _ real: Double) -> Int? {
        if real.isNaN { return nil }
        if real >= 9_223_372_036_854_775_808.0 { return -1 }  // 2^63: above every Int64
        if real < -9_223_372_036_854_775_808.0 { return 1 }
        let whole = real.rounded(.towardZero)
        let wholeInteger = Int64(whole)
        if integer != wholeInteger { return integer < wholeInteger ? -1 : 1 }
        let fraction = real - whole
        return fraction == 0 ? 0 : fraction > 0 ? -1 : 1
    }
}
