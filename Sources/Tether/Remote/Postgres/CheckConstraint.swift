/// The values a check constraint allows one column, read from the text
/// PostgreSQL gives it (pg_get_constraintdef), only in the shapes it gives
/// `col IN ('a', 'b')` and `col IN (1, 2)`:
///
///     CHECK ((status = ANY (ARRAY['open'::text, 'closed'::text])))
///     CHECK (((status)::text = ANY ((ARRAY['a'::character varying, 'b'::character varying])::text[])))
///     CHECK ((n = ANY (ARRAY[1, 2, 3])))
///
/// Anything else (other operators, OR, NULL, functions) gives nil: the
/// column then allows any value of its type, which forbids nothing the
/// server accepts.
enum CheckConstraint {
    static func values(_ definition: String, column: String) -> [JSON]? {
        let text = Array(definition.unicodeScalars)
        guard definition.hasPrefix("CHECK ("), let equals = find(" = ANY (", in: text),
              let arrayStart = find("ARRAY[", in: text, from: equals) else { return nil }
        // Left of "=": the column, maybe in parentheses, maybe cast to text.
        var left = String(String.UnicodeScalarView(text[7..<equals]))
        for noise in ["::text", "::character varying"] { left = left.replacingOccurrences(noise) }
        left = String(left.filter { $0 != "(" && $0 != ")" && $0 != " " })
        guard left == column || left == PostgresCatalog.quote(column) else { return nil }
        guard String(String.UnicodeScalarView(text[(equals + 8)..<arrayStart])).allSatisfy({ $0 == "(" }) else { return nil }
        var values: [JSON] = []
        var index = arrayStart + 6
        func skip(_ scalar: Unicode.Scalar) { while index < text.count, text[index] == scalar { index += 1 } }
        while index < text.count {
            if text[index] == "'" {
                var value = String.UnicodeScalarView()
                index += 1
                while true {
                    guard index < text.count else { return nil }
                    if text[index] == "'" {
                        if index + 1 < text.count, text[index + 1] == "'" { value.append("'"); index += 2; continue }
                        index += 1
                        break
                    }
                    value.append(text[index])
                    index += 1
                }
                values.append(.string(String(value)))
                // A cast: ::text, ::character varying.
                if index + 1 < text.count, text[index] == ":", text[index + 1] == ":" {
                    index += 2
                    while index < text.count, text[index] != ",", text[index] != "]" { index += 1 }
                }
            } else {
                var digits = ""
                skip("(")
                if index < text.count, text[index] == "-" { digits = "-"; index += 1 }
                while index < text.count, ("0"..."9").contains(text[index]) { digits.unicodeScalars.append(text[index]); index += 1 }
                skip(")")
                guard let number = Int64(digits) else { return nil }
                values.append(.integer(number))
            }
            guard index < text.count else { return nil }
            if text[index] == "]" { index += 1; break }
            guard text[index] == "," else { return nil }
            index += 1
            skip(" ")
        }
        // After the list: closing parentheses and a cast of the array only.
        var rest = String(String.UnicodeScalarView(text[index...]))
        for noise in ["::text[]", "::character varying[]"] { rest = rest.replacingOccurrences(noise) }
        guard !values.isEmpty, rest.allSatisfy({ $0 == ")" }) else { return nil }
        return values
    }

    private static func find(_ needle: String, in text: [Unicode.Scalar], from start: Int = 0) -> Int? {
        let pattern = Array(needle.unicodeScalars)
        guard text.count >= pattern.count, start <= text.count - pattern.count else { return nil }
        for offset in start...(text.count - pattern.count) where Array(text[offset..<(offset + pattern.count)]) == pattern {
            return offset
        }
        return nil
    }
}

extension String {
    func replacingOccurrences(_ target: String) -> String {
        var out = self
        while let range = out.firstRange(of: target) { out.removeSubrange(range) }
        return out
    }
}
