/// Recursive descent over the predicate language (see `Predicate`), checking
/// keys and value types against the entity as it goes. Nesting is bounded,
/// so a hostile predicate cannot exhaust the stack.
struct PredicateParser {
    static let maximumDepth = 200
    /// Levels of NOT, AND and OR after double negations cancel and nested
    /// ANDs (ORs) merge: SQLite's parser has a fixed stack, and 22 NOTs
    /// already overflowed it (the predicate fuzzer's find).
    static let maximumLogicalDepth = 16

    private let scalars: [Unicode.Scalar]
    private let entity: Entity
    private let arguments: [Value]
    private var position = 0
    private var depth = 0
    private var usedArguments = Set<Int>()
    /// Most values (literals and arguments) the predicate may hold.
    private let maximumValues: Int
    private var valueCount = 0

    init(text: String, entity: Entity, arguments: [Value], maximumValues: Int = .max) {
        scalars = Array(text.unicodeScalars)
        self.entity = entity
        self.arguments = arguments
        self.maximumValues = maximumValues
    }

    mutating func parseAll() throws -> Predicate {
        let predicate = try parseOr()
        skipSpace()
        guard position == scalars.count else { throw failure("expected AND, OR or the end") }
        guard Self.logicalDepth(predicate) <= Self.maximumLogicalDepth else {
            throw TetherError(.invalid, "predicate: nested deeper than \(Self.maximumLogicalDepth) levels of NOT, AND and OR")
        }
        if let unused = arguments.indices.first(where: { !usedArguments.contains($0) }) {
            throw TetherError(.invalid, "predicate: argument $\(unused + 1) is given but not used "
                                        + "(\(arguments.count) given, \(usedArguments.count) used)")
        }
        return predicate
    }

    private func failure(_ what: String, at column: Int? = nil) -> TetherError {
        TetherError(.invalid, "predicate: \(what) at column \((column ?? position) + 1)")
    }

    // MARK: tokens

    private mutating func skipSpace() {
        while position < scalars.count, scalars[position].properties.isWhitespace { position += 1 }
    }

    private var current: Unicode.Scalar? { position < scalars.count ? scalars[position] : nil }

    private static func isWordStart(_ c: Unicode.Scalar) -> Bool { c == "_" || c.properties.isAlphabetic }
    private static func isWordPart(_ c: Unicode.Scalar) -> Bool {
        isWordStart(c) || c == "." || ("0"..."9").contains(c)
    }

    /// The next word, without consuming it.
    private mutating func peekWord() -> String? {
        skipSpace()
        guard let c = current, Self.isWordStart(c) else { return nil }
        var end = position
        while end < scalars.count, Self.isWordPart(scalars[end]) { end += 1 }
        return String(String.UnicodeScalarView(scalars[position..<end]))
    }

    /// Consumes `keyword` (case-insensitive) if it is the next word.
    private mutating func accept(keyword: String) -> Bool {
        guard let word = peekWord(), word.uppercased() == keyword else { return false }
        position += word.unicodeScalars.count
        return true
    }

    /// Consumes `symbol` if it comes next.
    private mutating func accept(_ symbol: String) -> Bool {
        skipSpace()
        let wanted = Array(symbol.unicodeScalars)
        guard scalars.count - position >= wanted.count, Array(scalars[position..<position + wanted.count]) == wanted else {
            return false
        }
        position += wanted.count
        return true
    }

    private mutating func expect(_ symbol: String) throws {
        guard accept(symbol) else { throw failure("expected \(symbol)") }
    }

    // MARK: grammar

    private mutating func nested<T>(_ parse: (inout PredicateParser) throws -> T) throws -> T {
        guard depth < Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        depth += 1
        defer { depth -= 1 }
        return try parse(&self)
    }

    private mutating func parseOr() throws -> Predicate {
        var parts: [Predicate] = []
        repeat {
            let part = try parseAnd()
            if case .or(let inner) = part { parts += inner } else { parts.append(part) }
        } while accept(keyword: "OR") || accept("||")
        return parts.count == 1 ? parts[0] : .or(parts)
    }

    private mutating func parseAnd() throws -> Predicate {
        var parts: [Predicate] = []
        repeat {
            let part = try parseNot()
            if case .and(let inner) = part { parts += inner } else { parts.append(part) }
        } while accept(keyword: "AND") || accept("&&")
        return parts.count == 1 ? parts[0] : .and(parts)
    }

    private mutating func parseNot() throws -> Predicate {
        if accept(keyword: "NOT") || (!accept("!=") && accept("!")) {
            // Two-valued logic: NOT NOT p is p.
            let inner = try nested { try $0.parseNot() }
            if case .not(let twice) = inner { return twice }
            return .not(inner)
        }
        return try parsePrimary()
    }

    private static func logicalDepth(_ predicate: Predicate) -> Int {
        switch predicate {
        case .always, .comparison: return 0
        case .not(let inner): return 1 + logicalDepth(inner)
        case .and(let parts), .or(let parts): return 1 + (parts.map(logicalDepth).max() ?? 0)
        }
    }

    private mutating func parsePrimary() throws -> Predicate {
        if accept("(") {
            let inner = try nested { try $0.parseOr() }
            try expect(")")
            return inner
        }
        if accept(keyword: "TRUEPREDICATE") { return .always(true) }
        if accept(keyword: "FALSEPREDICATE") { return .always(false) }
        return try parseComparison()
    }

    private mutating func parseKey() throws -> Int {
        skipSpace()
        let start = position
        if accept("#") {
            var digits = ""
            while let c = current, ("0"..."9").contains(c), digits.count < 10 {
                digits.unicodeScalars.append(c)
                position += 1
            }
            guard let code = Int(digits), let index = entity.attributeIndex(code: code) else {
                throw failure(digits.isEmpty ? "expected a code after #" : "\(entity.name) has no attribute with code \(digits)",
                              at: start)
            }
            return index
        }
        let name: String
        if accept("`") {
            var text = String.UnicodeScalarView()
            while true {
                guard let c = current else { throw failure("unterminated `key`", at: start) }
                position += 1
                if c == "`" {
                    if current == "`" { position += 1 } else { break }
                }
                text.append(c)
            }
            name = String(text)
        } else if let word = peekWord() {
            position += word.unicodeScalars.count
            name = word
        } else {
            throw failure("expected a key")
        }
        guard let index = entity.attributeIndex(named: name) else {
            let unknown = failure("\(entity.name) has no attribute \(name.debugDescription)", at: start)
            // A key path (Client.Owner) reads through relationships in peek and get only.
            guard name.contains(".") else { throw unknown }
            throw TetherError(.invalid, unknown.message + " (key paths work in peek and get, not yet in predicates)")
        }
        return index
    }

    private mutating func parseComparison() throws -> Predicate {
        let keyColumn = position
        let attribute = try parseKey()
        let type = entity.attributes[attribute].type
        skipSpace()
        let operatorColumn = position
        var op: Comparison.Operator
        // =< and => before =, which would take their first character.
        if accept("<=") || accept("=<") { op = .lessOrEqual }
        else if accept(">=") || accept("=>") { op = .greaterOrEqual }
        else if accept("==") || accept("=") { op = .equal }
        else if accept("!=") || accept("<>") { op = .notEqual }
        else if accept("<") { op = .less }
        else if accept(">") { op = .greater }
        else if accept(keyword: "IN") { op = .oneOf }
        else if accept(keyword: "BETWEEN") { op = .between }
        else if accept(keyword: "BEGINSWITH") { op = .beginsWith }
        else if accept(keyword: "ENDSWITH") { op = .endsWith }
        else if accept(keyword: "CONTAINS") { op = .contains }
        else if accept(keyword: "LIKE") { op = .like }
        else { throw failure("expected a comparison (==, !=, <, <=, >, >=, IN, BETWEEN, BEGINSWITH, ENDSWITH, CONTAINS, LIKE)") }
        var options = try parseOptions()
        let name = entity.attributes[attribute].name
        // As NSPredicate: [c] and [d] change how text compares; on other
        // types there is nothing to fold, and they are ignored.
        if type != .text { options = [] }
        if [.beginsWith, .endsWith, .contains, .like].contains(op), type != .text {
            throw failure("\(name) is \(type.name), not text", at: operatorColumn)
        }
        let allowsNull = op == .equal || op == .notEqual
        if type == .json, !allowsNull {
            throw failure("\(name) holds JSON: only == nil and != nil test it", at: keyColumn)
        }

        var literals: [Literal]
        switch op {
        case .oneOf, .between:
            try expect("{")
            literals = []
            if !accept("}") {
                repeat { literals.append(try parseValue(for: attribute, isPattern: false)) } while accept(",")
                try expect("}")
            }
            if op == .between, literals.count != 2 {
                throw failure("BETWEEN takes {low, high}", at: operatorColumn)
            }
        default:
            literals = [try parseValue(for: attribute, isPattern: op == .like)]
        }
        guard let exact = try Self.exactly(op, literals, converting: { try converted($0, for: attribute, at: keyColumn) }) else {
            return .always(op == .notEqual)  // no value equals an integer no attribute's type holds
        }
        let values = exact.values
        op = exact.op
        if op == .like, case .text(let pattern) = values[0], LikePattern.hasDanglingEscape(pattern) {
            throw failure("the LIKE pattern ends in a lone \\ (write \\\\ for a backslash)", at: operatorColumn)
        }
        if values.contains(.null), !(allowsNull && values.count == 1) {
            throw failure("nil compares only with == and !=", at: operatorColumn)
        }
        if type == .json { options.insert(.jsonAttribute) }
        return .comparison(Comparison(attribute: attribute, operator: op, options: options, values: values))
    }

    /// The comparison with every literal an attribute's value can be
    /// compared with exactly: an integer no Int64 or double holds becomes
    /// the adjacent double on its side (`x < B` is `x <= below`), drops out
    /// of IN, and makes == false and != true. nil: that constant answer.
    private static func exactly(_ op: Comparison.Operator, _ literals: [Literal],
                                converting convert: (Value) throws -> Value) throws -> (op: Comparison.Operator, values: [Value])? {
        var op = op
        var values: [Value] = []
        for (index, literal) in literals.enumerated() {
            switch literal {
            case .value(let value): values.append(value)
            case .inexactInteger(let below, let above):
                switch op {
                case .equal, .notEqual: return nil
                case .less, .lessOrEqual: op = .lessOrEqual; values.append(try convert(.real(below)))
                case .greater, .greaterOrEqual: op = .greaterOrEqual; values.append(try convert(.real(above)))
                case .oneOf: continue
                case .between: values.append(try convert(.real(index == 0 ? above : below)))
                case .beginsWith, .endsWith, .contains, .like: values.append(.real(below))  // refused: not text
                }
            }
        }
        return (op, values)
    }

    private mutating func parseOptions() throws -> Comparison.Options {
        guard accept("[") else { return [] }
        var options: Comparison.Options = []
        while let c = current, c != "]" {
            switch c {
            case "c", "C": options.insert(.caseInsensitive)
            case "d", "D": options.insert(.diacriticInsensitive)
            default: throw failure("unknown option \(c) (c or d)")
            }
            position += 1
        }
        try expect("]")
        return options
    }

    /// A literal or a parameter, converted to the attribute's type. A LIKE
    /// pattern's literal keeps its backslash escapes (but `\n \t \r \0`) for
    /// the pattern to read: `'a\*b'` is the pattern `a\*b`, matching `a*b`.
    private mutating func parseValue(for attribute: Int, isPattern: Bool) throws -> Literal {
        skipSpace()
        let start = position
        valueCount += 1
        guard valueCount <= maximumValues else {
            throw failure("more than \(maximumValues) values, the most one query of the store binds", at: start)
        }
        let value: Value
        if accept("$") {
            var digits = ""
            while let c = current, ("0"..."9").contains(c), digits.count < 6 {
                digits.unicodeScalars.append(c)
                position += 1
            }
            guard let number = Int(digits), number >= 1 else { throw failure("expected $1, $2…", at: start) }
            guard number <= arguments.count else {
                throw failure("$\(number) but \(arguments.count) argument\(arguments.count == 1 ? "" : "s") given", at: start)
            }
            usedArguments.insert(number - 1)
            value = arguments[number - 1]
        } else if let c = current, c == "'" || c == "\"" {
            value = .text(try parseString(keepingEscapes: isPattern))
        } else if let c = current, c == "-" || c == "+" || ("0"..."9").contains(c) {
            switch try parseNumber() {
            case .value(let number): value = number
            case let inexact:
                _ = try converted(.integer(0), for: attribute, at: start)  // its type must compare with a number
                return inexact
            }
        } else if let word = peekWord() {
            switch word.uppercased() {
            case "TRUE", "YES": value = .boolean(true)
            case "FALSE", "NO": value = .boolean(false)
            case "NIL", "NULL": value = .null
            default: throw failure("expected a value, not \(word.debugDescription) (quote text)")
            }
            position += word.unicodeScalars.count
        } else {
            throw failure("expected a value")
        }
        return .value(try converted(value, for: attribute, at: start))
    }

    private func converted(_ value: Value, for attribute: Int, at column: Int) throws -> Value {
        let target = entity.attributes[attribute]
        switch (target.type, value) {
        case (_, .null), (.text, .text), (.integer, .integer), (.real, .real), (.boolean, .boolean): return value
        // Numbers compare by exact value: one that has no exact twin of the
        // attribute's type stays as written (2^53 + 1 against a real, 40.5
        // against an integer), never rounded.
        case (.real, .integer(let i)): return Double(exactly: i).map(Value.real) ?? value
        case (.integer, .real(let d)): return Int64(exactly: d).map(Value.integer) ?? value
        case (.json, _): throw failure("\(target.name) holds JSON: only == nil and != nil test it", at: column)
        default:
            throw failure("\(target.name) is \(target.type.name); \(value.typeName) does not compare with it", at: column)
        }
    }

    private mutating func parseString(keepingEscapes: Bool = false) throws -> String {
        let start = position
        let quote = scalars[position]
        position += 1
        var text = String.UnicodeScalarView()
        while true {
            guard let c = current else { throw failure("unterminated text", at: start) }
            position += 1
            if c == quote { return String(text) }
            if c == "\\" {
                guard let escaped = current else { throw failure("unterminated text", at: start) }
                position += 1
                switch escaped {
                case "n": text.append("\n")
                case "t": text.append("\t")
                case "r": text.append("\r")
                case "0": text.append("\u{0}")
                default:
                    if keepingEscapes { text.append("\\") }
                    text.append(escaped)
                }
            } else {
                text.append(c)
            }
        }
    }

    private mutating func parseNumber() throws -> Literal {
        let start = position
        var text = ""
        while let c = current, ("0"..."9").contains(c) || "+-.eE".unicodeScalars.contains(c) {
            text.unicodeScalars.append(c)
            position += 1
        }
        guard let literal = Literal(number: text) else {
            throw failure("\(text.debugDescription) is not a number a real holds", at: start)
        }
        return literal
    }
}

extension Value {
    var typeName: String {
        switch self {
        case .null: return "nil"
        case .text: return "text"
        case .integer: return "an integer"
        case .real: return "a real"
        case .boolean: return "a boolean"
        case .json: return "JSON"
        }
    }
}
