import XCTest
@testable import Tether

/// The differential property test (issue 21): seeded random records with
/// awkward values and random requests, run under every policy through Kinto,
/// the memory server, a host connection and PostgreSQL (when
/// TETHER_PG_CONNINFO names one: scripts/run-tests postgres; its records as
/// its typed table holds them, see DifferentialPostgres.swift), each answer
/// compared with a reference written here from tether.h's words alone (it
/// never calls the core's evaluator). A failure is shrunk to the smallest request and records
/// that still fail, and printed as a line for DifferentialCorpus.jsonl, whose
/// cases are replayed on every run.
///
/// Environment: TETHER_DIFF_SECONDS (the budget per connection; default 4),
/// TETHER_DIFF_SEED (the first round's seed; default random, printed),
/// TETHER_DIFF_SERVER=0 leaves out the server path (fetches of an entity not
/// synced yet, answered through the server's filters), to look at the cache alone.
final class DifferentialTests: DirectoryTestCase {
    func testKinto() throws { try run(.kinto) }
    func testMemory() throws { try run(.memory) }
    func testHost() throws { try run(.host) }
    /// PostgreSQL (TETHER_PG_CONNINFO, scripts/run-tests postgres); skipped without it.
    func testPostgres() throws { try run(.postgres) }

    /// The corpus replayed over PostgreSQL: each case's records as a table
    /// stores them (see PostgresSeeded), whatever connection it was found on.
    func testPostgresCorpus() throws {
        try PostgresSeeded.requireServer()
        try replayCorpus(as: .postgres)
    }

    func testCorpus() throws { try replayCorpus(as: nil) }

    private func replayCorpus(as kind: ServerKind?) throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("DifferentialCorpus.jsonl").path
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }
        XCTAssertFalse(lines.isEmpty)
        for line in lines {
            var scenario = try Scenario(json: JSON.parse(String(line)))
            if let kind { scenario.kind = kind }
            if scenario.kind == .postgres && !PostgresSeeded.isAvailable { continue }  // the postgres suite replays it
            if scenario.mode == .cold && !Self.serverPath { continue }
            if let failure = try scenario.failure(directory) {
                XCTFail("corpus case \(line) fails again: \(failure)")
            }
        }
    }

    static var environment: [String: String] { ProcessInfo.processInfo.environment }
    /// The server path (an entity never synced) runs unless TETHER_DIFF_SERVER=0, to look at the cache alone.
    static var serverPath: Bool { environment["TETHER_DIFF_SERVER"] != "0" }

    private func run(_ kind: ServerKind) throws {
        let budget = Double(Self.environment["TETHER_DIFF_SECONDS"] ?? "") ?? 4
        var seed = UInt64(Self.environment["TETHER_DIFF_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        let deadline = Date().addingTimeInterval(budget)
        var requests = 0, rounds = 0
        let modes: [Mode] = Self.serverPath ? [.warm, .cold] : [.warm]
        while Date() < deadline || rounds == 0 {
            print("differential \(kind): round seed \(seed)")
            var random = SplitMix(seed)
            let records = Generator.records(&random)
            var setups: [Mode: (server: Seeded, context: Context)] = [:]
            defer { for (_, setup) in setups { try? setup.context.close() } }
            for mode in modes {
                let server = try kind.seed(records, directory + "/\(seed)-\(mode)")
                setups[mode] = (server, try mode.open(server))
            }
            // PostgreSQL's typed columns keep what they can hold: the reference reads what they hold.
            let reference = setups[.warm]!.server.stored ?? records
            for _ in 0..<200 where Date() < deadline || requests == 0 {
                var request = Generator.request(&random)
                for mode in modes {
                    if mode == .cold && request.isWholeListing { request.predicate = .truth(true) }
                    for policy in mode.policies {
                        let scenario = Scenario(kind: kind, mode: mode, policy: policy, records: reference, request: request)
                        guard let failure = try scenario.check(setups[mode]!.context) else { continue }
                        let smallest = try scenario.shrunk(directory)
                        XCTFail("""
                            differential \(kind) \(mode) \(policy), round seed \(seed): \(failure)
                            smallest failing case (add it to DifferentialCorpus.jsonl): \
                            \(smallest.json.serialized()): \(try smallest.failure(directory) ?? "(passes alone)")
                            """)
                        return
                    }
                }
                requests += 1
            }
            rounds += 1
            seed &+= 1
        }
        print("differential \(kind): \(requests) requests in \(rounds) rounds, each under \(modes.flatMap(\.policies).count) policies")
    }
}

// MARK: - the schema and the records

/// The entity: two text attributes, an integer, a real, a boolean, JSON.
private let fieldNames = ["t", "u", "n", "r", "b", "j"]
private enum Kind { case text, integer, real, boolean, json }
private let fieldKinds: [Kind] = [.text, .text, .integer, .real, .boolean, .json]

/// A seeded generator (SplitMix64): a seed gives the same round again.
private struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private enum Generator {
    static let texts = ["", "a", "A", "ab", "aB", "b", "z", "\u{E9}", "e\u{301}", "\u{C9}", "E\u{301}", "stra\u{DF}e", "STRASSE",
                        "\u{39F}\u{394}\u{39F}\u{3A3}", "\u{3BF}\u{3B4}\u{3BF}\u{3C2}", "\u{130}", "i", "a*b", "a?b", "a\\b",
                        "x\u{0}y", "\u{1F600}", "a b", "Z"]
    static let integers: [Int64] = [0, 1, -1, 2, 41, 9_007_199_254_740_992, 9_007_199_254_740_993, -9_007_199_254_740_993,
                                    .max, .min, .max - 1]
    static let reals: [Double] = [0, -0.0, 0.5, 1, 2.5, -1.5, 9_007_199_254_740_992, 9.223372036854776e18, 1e300, -1e-300, 41,
                                  18_446_744_073_709_551_616, -9_223_372_036_854_777_856]
    /// Integers no Int64 holds, written as literals (issue 39: they were
    /// rounded through a double): 2^63 and 2^64, which doubles hold, and
    /// neighbours of theirs and of -2^63 that none does.
    static let bigIntegers = ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "18446744073709551617",
                              "18446744073709551615", "-18446744073709551617", "123456789012345678901234567890",
                              "-9223372036854777857"]
    static let structures: [JSON] = [.array([]), .array([.integer(1)]), .array([.integer(1), .string("a")]), .object([]),
                                     .object([("k", .integer(1))]), .object([("a", .array([.integer(2)]))])]

    static func value(_ kind: Kind, _ random: inout SplitMix) -> JSON {
        switch kind {
        case .text: return .string(texts.randomElement(using: &random)!)
        case .integer: return .integer(integers.randomElement(using: &random)!)
        case .real: return .real(reals.randomElement(using: &random)!)
        case .boolean: return .bool(Bool.random(using: &random))
        case .json: return structures.randomElement(using: &random)!
        }
    }

    static func records(_ random: inout SplitMix) -> [RecordFields] {
        (0..<Int.random(in: 8...40, using: &random)).map { index in
            var fields: RecordFields = [("id", .string(String(format: "r%02d", index)))]
            for (name, kind) in zip(fieldNames, fieldKinds) {
                switch Int.random(in: 0..<20, using: &random) {
                case 0...2: continue  // missing
                case 3...4: fields.append((name, .null))
                case 5...7:  // a misfit: a value of another type, or a number no Int64 holds
                    let other = [Kind.text, .integer, .real, .boolean, .json].randomElement(using: &random)!
                    fields.append((name, Int.random(in: 0..<4, using: &random) == 0
                                   ? .number("9223372036854775808") : value(other, &random)))
                default: fields.append((name, value(kind, &random)))
                }
            }
            return fields
        }
    }

    static func literal(_ kind: Kind, _ random: inout SplitMix) -> Literal {
        switch kind {
        case .text: return .text(texts.randomElement(using: &random)!)
        case .integer, .real:
            if Int.random(in: 0..<6, using: &random) == 0 { return .bigInteger(bigIntegers.randomElement(using: &random)!) }
            return Bool.random(using: &random) ? .integer(integers.randomElement(using: &random)!)
                                                 : .real(reals.randomElement(using: &random)!)
        case .boolean: return .boolean(Bool.random(using: &random))
        case .json: return .null
        }
    }

    static func pattern(_ random: inout SplitMix) -> String {
        let pieces = ["*", "?", "\\*", "\\?", "\\\\", "a", "A", "b", "\u{E9}", "e", "\u{DF}", "s", "\u{3C3}", "x"]
        return (0..<Int.random(in: 0...4, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    static func comparison(_ random: inout SplitMix) -> Pred {
        let field = Int.random(in: 0..<fieldNames.count, using: &random)
        let kind = fieldKinds[field]
        let options = ["", "", "[c]", "[d]", "[cd]"].randomElement(using: &random)!
        if kind == .json || Int.random(in: 0..<8, using: &random) == 0 {
            return .comparison(field, ["==", "!="].randomElement(using: &random)!, options, [Operand(.null, Bool.random(using: &random))])
        }
        var operators = ["==", "!=", "<", "<=", ">", ">=", "=<", "=>", "IN", "BETWEEN"]
        if kind == .text { operators += ["BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "LIKE"] }
        let op = operators.randomElement(using: &random)!
        func operand() -> Operand {
            let literal = op == "LIKE" ? Literal.text(pattern(&random)) : Generator.literal(kind, &random)
            // Text with quotes, backslashes or NUL goes as an argument; an
            // integer no Int64 holds as a literal (no argument holds it); the rest either way.
            var isArgument = Bool.random(using: &random)
            if case .text(let text) = literal, text.contains(where: { "'\"\\\u{0}".contains($0) }) { isArgument = true }
            if case .bigInteger = literal { isArgument = false }
            return Operand(literal, isArgument)
        }
        switch op {
        case "IN": return .comparison(field, op, options, (0..<Int.random(in: 0...3, using: &random)).map { _ in operand() })
        case "BETWEEN": return .comparison(field, op, options, [operand(), operand()])
        default: return .comparison(field, op, options, [operand()])
        }
    }

    static func predicate(_ random: inout SplitMix, _ depth: Int) -> Pred {
        guard depth > 0 else { return comparison(&random) }
        switch Int.random(in: 0..<10, using: &random) {
        case 0: return .not(predicate(&random, depth - 1))
        case 1...2: return .and((0..<Int.random(in: 2...3, using: &random)).map { _ in predicate(&random, depth - 1) })
        case 3...4: return .or((0..<Int.random(in: 2...3, using: &random)).map { _ in predicate(&random, depth - 1) })
        case 5: return .truth(Bool.random(using: &random))
        default: return comparison(&random)
        }
    }

    static func request(_ random: inout SplitMix) -> Request {
        var request = Request()
        if Int.random(in: 0..<8, using: &random) != 0 { request.predicate = predicate(&random, Int.random(in: 0...3, using: &random)) }
        request.sort = (0..<Int.random(in: 0...3, using: &random)).map { _ in
            (Int.random(in: 0..<fieldNames.count, using: &random), Bool.random(using: &random))
        }
        if !request.sort.isEmpty, Bool.random(using: &random) {
            request.limit = Int64.random(in: 0...6, using: &random)
            request.offset = Int64.random(in: 0...3, using: &random)
        }
        request.count = Int.random(in: 0..<4, using: &random) == 0
        return request
    }
}

// MARK: - requests

private enum Literal: Equatable {
    case null, text(String), integer(Int64), real(Double), boolean(Bool)
    /// Decimal digits, signed, of an integer beyond Int64: written, never an argument.
    case bigInteger(String)

    var value: Value {
        switch self {
        case .bigInteger(let digits): preconditionFailure("\(digits) is no argument's value")
        case .null: return .null
        case .text(let s): return .text(s)
        case .integer(let i): return .integer(i)
        case .real(let d): return .real(d)
        case .boolean(let b): return .boolean(b)
        }
    }

    /// As the predicate language writes it. Text here holds no quote, backslash or NUL.
    var written: String {
        switch self {
        case .null: return "nil"
        case .text(let s): return "'\(s)'"
        case .integer(let i): return String(i)
        case .real(let d): return "\(d)"
        case .boolean(let b): return b ? "true" : "false"
        case .bigInteger(let digits): return digits
        }
    }
}

private struct Operand: Equatable {
    let literal: Literal
    let isArgument: Bool
    init(_ literal: Literal, _ isArgument: Bool) {
        self.literal = literal
        self.isArgument = isArgument
    }
}

private indirect enum Pred: Equatable {
    case truth(Bool)
    case comparison(Int, String, String, [Operand])
    case not(Pred)
    case and([Pred])
    case or([Pred])

    func written(_ arguments: inout [Value]) -> String {
        switch self {
        case .truth(let b): return b ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .not(let inner): return "NOT (\(inner.written(&arguments)))"
        case .and(let parts): return "(" + parts.map { $0.written(&arguments) }.joined(separator: " AND ") + ")"
        case .or(let parts): return "(" + parts.map { $0.written(&arguments) }.joined(separator: " OR ") + ")"
        case .comparison(let field, let op, let options, let operands):
            let values = operands.map { operand -> String in
                guard operand.isArgument else { return operand.literal.written }
                arguments.append(operand.literal.value)
                return "$\(arguments.count)"
            }
            let right = op == "IN" || op == "BETWEEN" ? "{" + values.joined(separator: ", ") + "}" : values[0]
            return "\(fieldNames[field]) \(op)\(options) \(right)"
        }
    }

    /// Smaller predicates, for shrinking.
    var smaller: [Pred] {
        switch self {
        case .truth, .comparison: return self == .truth(true) ? [] : [.truth(true)]
        case .not(let inner): return [inner] + inner.smaller.map(Pred.not)
        case .and(let parts), .or(let parts):
            let rebuild: ([Pred]) -> Pred = { if case .and = self { return .and($0) } else { return .or($0) } }
            var out = parts
            for index in parts.indices {
                if parts.count > 2 { out.append(rebuild(parts.enumerated().filter { $0.offset != index }.map(\.element))) }
                for part in parts[index].smaller {
                    var copy = parts
                    copy[index] = part
                    out.append(rebuild(copy))
                }
            }
            return out
        }
    }
}

private struct Request {
    var predicate: Pred?
    var sort: [(field: Int, descending: Bool)] = []
    var limit: Int64 = 0
    var offset: Int64 = 0
    var count = false

    var isWholeListing: Bool { predicate == nil && limit == 0 && offset == 0 }

    func fetchRequest(_ policy: CachePolicy) -> FetchRequest {
        var request = FetchRequest(entity: "things")
        if let predicate {
            var arguments: [Value] = []
            request.predicate = predicate.written(&arguments)
            request.arguments = arguments
        }
        if !sort.isEmpty { request.sort = sort.map { ($0.descending ? "-" : "") + fieldNames[$0.field] }.joined(separator: ",") }
        request.limit = limit
        request.offset = offset
        request.policy = policy
        request.resultType = count ? .count : .ids
        return request
    }
}

// MARK: - the reference: tether.h's semantics, read independently

private enum Reference {
    /// A record's value for an attribute, as the header defines it: null,
    /// missing and a value of another type than the attribute's are null;
    /// an integer is a real attribute's value when a double holds it exactly.
    enum Cell: Equatable {
        case null, text([Unicode.Scalar]), number(Float80), boolean(Bool), json(String)
        /// An integer literal beyond Int64, as its digits: no Float80 holds 2^64 + 1.
        case bigInteger(negative: Bool, digits: [UInt8])
    }

    static func cell(_ fields: RecordFields, _ field: Int) -> Cell {
        guard let json = fields.first(where: { $0.key == fieldNames[field] })?.value else { return .null }
        switch (fieldKinds[field], json) {
        case (_, .null): return .null
        case (.text, .string(let s)): return .text(Array(s.unicodeScalars))
        case (.integer, .integer(let i)): return .number(Float80(i))
        case (.real, .real(let d)): return .number(Float80(d))
        case (.real, .integer(let i)) where Double(exactly: i) != nil: return .number(Float80(i))
        case (.boolean, .bool(let b)): return .boolean(b)
        case (.json, _): return .json(compact(json))
        default: return .null
        }
    }

    /// Compact JSON, object keys sorted: how a JSON attribute sorts.
    static func compact(_ json: JSON) -> String {
        switch json {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .integer(let i): return String(i)
        case .number(let text): return text
        case .real: return json.serialized()
        case .string: return json.serialized()
        case .array(let items): return "[" + items.map(compact).joined(separator: ",") + "]"
        case .object(let members):
            return "{" + members.sorted { Array($0.key.utf8).lexicographicallyPrecedes($1.key.utf8) }
                .map { JSON.string($0.key).serialized() + ":" + compact($0.value) }.joined(separator: ",") + "}"
        }
    }

    /// [c]: each scalar's lowercase mapping; [d]: canonical decomposition,
    /// then no scalar of a nonzero combining class.
    static func fold(_ scalars: [Unicode.Scalar], _ options: String) -> [Unicode.Scalar] {
        var out = scalars
        if options.contains("c") { out = out.flatMap { Array($0.properties.lowercaseMapping.unicodeScalars) } }
        if options.contains("d") {
            let decomposed = String(String.UnicodeScalarView(out)).decomposedStringWithCanonicalMapping
            out = decomposed.unicodeScalars.filter { $0.properties.canonicalCombiningClass.rawValue == 0 }
        }
        return out
    }

    static func literalCell(_ literal: Literal) -> Cell {
        switch literal {
        case .null: return .null
        case .text(let s): return .text(Array(s.unicodeScalars))
        case .integer(let i): return .number(Float80(i))
        case .real(let d): return .number(Float80(d))
        case .boolean(let b): return .boolean(b)
        case .bigInteger(let text):
            let negative = text.hasPrefix("-")
            return .bigInteger(negative: negative, digits: decimalDigits(of: text.drop { $0 == "-" || $0 == "+" || $0 == "0" }))
        }
    }

    static func decimalDigits<S: StringProtocol>(of text: S) -> [UInt8] { text.utf8.map { $0 - 0x30 } }

    /// A number cell against a big integer, exactly: the cell's whole part in
    /// decimal digits (Float80 holds every Int64 and double exactly; it is
    /// halved down to an integer below 2^63, then doubled back in decimal),
    /// and its fraction.
    static func compare(_ x: Float80, bigNegative: Bool, _ big: [UInt8]) -> Int {
        if (x < 0) != bigNegative { return x < 0 ? -1 : 1 }
        let magnitude = abs(x)
        var whole = magnitude.rounded(.towardZero), halvings = 0
        while whole >= 9_223_372_036_854_775_808 { whole /= 2; halvings += 1 }  // exact: a power of two
        var digits = decimalDigits(of: String(UInt64(whole)))
        for _ in 0..<halvings {
            var carry: UInt8 = 0
            for index in digits.indices.reversed() {
                let doubled = digits[index] * 2 + carry
                (digits[index], carry) = (doubled % 10, doubled / 10)
            }
            if carry > 0 { digits.insert(carry, at: 0) }
        }
        if digits == [0] { digits = [] }
        let hasFraction = magnitude != magnitude.rounded(.towardZero)
        var order = digits.count != big.count ? (digits.count < big.count ? -1 : 1)
                  : digits == big ? (hasFraction ? 1 : 0) : (digits.lexicographicallyPrecedes(big) ? -1 : 1)
        if bigNegative { order = -order }
        return order
    }

    /// -1, 0, 1; nil: not comparable.
    static func compare(_ a: Cell, _ b: Cell, _ options: String) -> Int? {
        switch (a, b) {
        case let (.number(x), .bigInteger(negative, digits)): return compare(x, bigNegative: negative, digits)
        case let (.text(x), .text(y)):
            let (l, r) = (fold(x, options), fold(y, options))
            return l == r ? 0 : l.lexicographicallyPrecedes(r) ? -1 : 1
        case let (.number(x), .number(y)): return x == y ? 0 : x < y ? -1 : 1
        case let (.boolean(x), .boolean(y)): return x == y ? 0 : x ? 1 : -1
        default: return nil
        }
    }

    static func like(_ text: [Unicode.Scalar], _ pattern: String, _ options: String) -> Bool {
        enum Token: Equatable { case star, one, char(Unicode.Scalar) }
        var tokens: [Token] = []
        var scalars = pattern.unicodeScalars.makeIterator()
        while let c = scalars.next() {
            if c == "*" { tokens.append(.star) } else if c == "?" { tokens.append(.one) } else {
                let literal = c == "\\" ? (scalars.next() ?? "\\") : c
                tokens += fold([literal], options).map(Token.char)
            }
        }
        // matches[i][j]: text from i matches tokens from j.
        var matches = Array(repeating: Array(repeating: false, count: tokens.count + 1), count: text.count + 1)
        matches[text.count][tokens.count] = true
        for i in stride(from: text.count, through: 0, by: -1) {
            for j in stride(from: tokens.count - 1, through: 0, by: -1) {
                switch tokens[j] {
                case .star: matches[i][j] = matches[i][j + 1] || (i < text.count && matches[i + 1][j])
                case .one: matches[i][j] = i < text.count && matches[i + 1][j + 1]
                case .char(let c): matches[i][j] = i < text.count && text[i] == c && matches[i + 1][j + 1]
                }
            }
        }
        return matches[0][0]
    }

    static func matches(_ predicate: Pred, _ fields: RecordFields) -> Bool {
        switch predicate {
        case .truth(let b): return b
        case .not(let inner): return !matches(inner, fields)
        case .and(let parts): return parts.allSatisfy { matches($0, fields) }
        case .or(let parts): return parts.contains { matches($0, fields) }
        case .comparison(let field, let op, let written, let operands):
            let options = fieldKinds[field] == .text ? written : ""  // ignored on other types
            let value = cell(fields, field)
            if operands.count == 1, operands[0].literal == .null {
                return (op == "==") == (value == .null)
            }
            if value == .null { return op == "!=" }
            let rights = operands.map { literalCell($0.literal) }
            func order(_ index: Int) -> Int? { compare(value, rights[index], options) }
            guard case .text(let text) = value, case .text(let wanted)? = rights.first else {
                return numeric(op, order, rights.count)
            }
            let (subject, folded) = (fold(text, options), fold(wanted, options))
            switch op {
            case "BEGINSWITH": return subject.starts(with: folded)
            case "ENDSWITH": return subject.reversed().starts(with: folded.reversed())
            case "CONTAINS": return folded.isEmpty || (0...subject.count).contains { subject[$0...].starts(with: folded) }
            case "LIKE": if case .text(let pattern) = operands[0].literal { return like(subject, pattern, options) } else { return false }
            default: return numeric(op, order, rights.count)
            }
        }
    }

    static func numeric(_ op: String, _ order: (Int) -> Int?, _ count: Int) -> Bool {
        switch op {
        case "==": return order(0) == 0
        case "!=": return order(0) != 0
        case "<": return order(0).map { $0 < 0 } ?? false
        case "<=", "=<": return order(0).map { $0 <= 0 } ?? false
        case ">": return order(0).map { $0 > 0 } ?? false
        case ">=", "=>": return order(0).map { $0 >= 0 } ?? false
        case "IN": return (0..<count).contains { order($0) == 0 }
        case "BETWEEN": return (order(0).map { $0 >= 0 } ?? false) && (order(1).map { $0 <= 0 } ?? false)
        default: return false
        }
    }

    /// Per key: null first, then numbers and booleans by value, text by
    /// scalars, JSON by its text; descending reverses; ties by id, ascending.
    static func precedes(_ a: RecordFields, _ b: RecordFields, _ sort: [(field: Int, descending: Bool)]) -> Bool {
        for key in sort {
            let order = sortOrder(cell(a, key.field), cell(b, key.field))
            if order != 0 { return key.descending ? order > 0 : order < 0 }
        }
        return Array(id(a).utf8).lexicographicallyPrecedes(id(b).utf8)
    }

    static func sortOrder(_ a: Cell, _ b: Cell) -> Int {
        func rank(_ c: Cell) -> (Int, Float80, [Unicode.Scalar]) {
            switch c {
            case .null: return (0, 0, [])
            case .number(let x): return (1, x, [])
            case .boolean(let b): return (1, b ? 1 : 0, [])
            case .text(let s): return (2, 0, s)
            case .json(let s): return (2, 0, Array(s.unicodeScalars))
            case .bigInteger: preconditionFailure("records hold no literals")
            }
        }
        let (x, y) = (rank(a), rank(b))
        if x.0 != y.0 { return x.0 < y.0 ? -1 : 1 }
        if x.1 != y.1 { return x.1 < y.1 ? -1 : 1 }
        if x.2 == y.2 { return 0 }
        return x.2.lexicographicallyPrecedes(y.2) ? -1 : 1
    }

    static func id(_ fields: RecordFields) -> String { fields.first { $0.key == "id" }?.value.stringValue ?? "" }

    /// The answer: ids in order (sorted by id when there is no sort), or the count.
    static func answer(_ request: Request, _ records: [RecordFields]) -> Answer {
        var matching = records.filter { record in request.predicate.map { matches($0, record) } ?? true }
        matching.sort { precedes($0, $1, request.sort) }
        var ids = matching.map(id).dropFirst(Int(request.offset)).map { $0 }
        if request.limit > 0 { ids = Array(ids.prefix(Int(request.limit))) }
        return request.count ? .count(ids.count) : .ids(ids)
    }
}

private enum Answer: Equatable, CustomStringConvertible {
    case ids([String]), count(Int), error(String)
    var description: String {
        switch self {
        case .ids(let ids): return "ids [" + ids.joined(separator: ", ") + "]"
        case .count(let n): return "count \(n)"
        case .error(let message): return "error \(message)"
        }
    }
}

// MARK: - the servers and the contexts

protocol Seeded: AnyObject {
    var storePath: String { get }
    func connection() throws -> any Connection
    /// The records as the server holds them, when it could not hold them all as given.
    var stored: [RecordFields]? { get }
}

extension Seeded {
    var stored: [RecordFields]? { nil }
}

private final class KintoSeeded: Seeded {
    let storePath: String
    let server: String, bucket: String

    init(_ records: [RecordFields], _ directory: String) throws {
        guard let url = ProcessInfo.processInfo.environment["TETHER_TEST_URL"] else { throw XCTSkip("TETHER_TEST_URL is not set") }
        server = url
        bucket = "diff-\(UUID().uuidString.prefix(8).lowercased())"
        storePath = directory + ".sqlite"
        let admin = try HTTPEngine(credentials: HTTPCredentials(username: "test", password: "test"), timeoutMilliseconds: 10_000)
        defer { admin.shutdown() }
        func send(_ method: String, _ path: String, _ body: String) throws {
            let response = try admin.send(HTTPRequest(method: method, url: server + path, body: Array(body.utf8))).get()
            guard (200..<300).contains(response.status) else {
                throw TetherError(.server, "\(method) \(path): HTTP \(response.status) \(String(decoding: response.body, as: UTF8.self))")
            }
        }
        try send("PUT", "/buckets/\(bucket)", #"{"permissions": {"read": ["system.Everyone"], "write": ["system.Everyone"]}}"#)
        try send("PUT", "/buckets/\(bucket)/collections/things", #"{"data": {}}"#)
        // Records first, the schema after: Kinto validates records against
        // it, and the misfits are the point.
        let requests = records.map { fields -> String in
            let id = Reference.id(fields)
            let data = JSON.object(fields.filter { $0.key != "id" }).serialized()
            return #"{"method": "PUT", "path": "/buckets/\#(bucket)/collections/things/records/\#(id)", "body": {"data": \#(data)}}"#
        }
        for start in stride(from: 0, to: requests.count, by: 25) {
            try send("POST", "/batch", #"{"requests": [\#(requests[start..<min(requests.count, start + 25)].joined(separator: ","))]}"#)
        }
        try send("PUT", "/buckets/\(bucket)/collections/things", """
            {"data": {"schema": {"type": "object", "properties": {"t": {"type": "string"}, "u": {"type": "string"},
              "n": {"type": "integer"}, "r": {"type": "number"}, "b": {"type": "boolean"}, "j": {"type": "array"}}}}}
            """)
    }

    func connection() throws -> any Connection {
        var options = KintoOptions(serverURL: server, bucket: bucket)
        options.timeoutMilliseconds = 10_000
        return try KintoConnection(options)
    }
}

private final class MemorySeeded: Seeded {
    static let spec = Spec(name: "things", route: "things", idField: "id", versionField: "last_modified",
                           fields: [FieldSpec(name: "t", type: .text), FieldSpec(name: "u", type: .text),
                                    FieldSpec(name: "n", type: .integer), FieldSpec(name: "r", type: .real),
                                    FieldSpec(name: "b", type: .boolean), FieldSpec(name: "j", type: .json)],
                           operations: .all)
    let storePath: String
    let server: MemoryServer
    let host: MemoryHost?

    init(_ records: [RecordFields], _ directory: String, host: Bool) {
        storePath = directory + ".sqlite"
        server = MemoryServer(name: "diff-\(UUID().uuidString.prefix(8))", specs: [Self.spec], pageSize: 7)
        for fields in records { server.put("things", id: Reference.id(fields), fields.filter { $0.key != "id" }) }
        self.host = host ? MemoryHost(server) : nil
    }

    func connection() throws -> any Connection {
        if let host { return try host.connection() }
        return MemoryConnection(server)
    }
}

private enum ServerKind: String {
    case kinto, memory, host, postgres

    func seed(_ records: [RecordFields], _ path: String) throws -> Seeded {
        switch self {
        case .kinto: return try KintoSeeded(records, path)
        case .memory: return MemorySeeded(records, path, host: false)
        case .host: return MemorySeeded(records, path, host: true)
        case .postgres: return try PostgresSeeded(records, path)
        }
    }
}

/// warm: the entity synced first (every policy answers through the cache);
/// cold: never synced (the server's filters answer).
private enum Mode: String {
    case warm, cold

    var policies: [CachePolicy] {
        switch self {
        case .warm: return [.cacheOnly, .serverOnly, .cacheThenServer, .cacheElseServer]
        // A cold cache holds what earlier answers brought: only the server's answers are whole.
        case .cold: return [.serverOnly, .cacheThenServer]
        }
    }

    func open(_ server: Seeded) throws -> Context {
        let context = try Context.open(ContextOptions(storePath: server.storePath), connection: server.connection())
        if self == .warm {
            let sync = try fetch(context, FetchRequest(entity: "things"))
            if let error = sync.last?.error { throw error }
            let entity = try XCTUnwrap(context.model.entity(named: "things"))
            if server is PostgresSeeded {
                // No history over PostgreSQL yet: the whole listing fills the cache, with no sync version.
                XCTAssertEqual(try context.store(for: entity).count(entity, where: nil, limit: 0), Int64(server.stored?.count ?? -1),
                               "the warm context holds every row")
            } else {
                XCTAssertNotNil(try context.store(for: entity).syncVersion(entity), "the warm context is synced")
            }
        }
        return context
    }
}

private func policyName(_ policy: CachePolicy) -> String {
    switch policy {
    case .cacheOnly: return "cache_only"
    case .serverOnly: return "server_only"
    case .cacheThenServer: return "cache_then_server"
    case .cacheElseServer: return "cache_else_server"
    }
}

private struct Scenario {
    var kind: ServerKind
    let mode: Mode
    let policy: CachePolicy
    var records: [RecordFields]
    var request: Request

    /// What is wrong with the answer, or nil.
    func check(_ context: Context) throws -> String? {
        let expected = Reference.answer(request, records)
        let fetchRequest = request.fetchRequest(policy)
        let callbacks: [FetchResult]
        do { callbacks = try fetch(context, fetchRequest) } catch { return "fetch_start failed: \(error) for \(describe(fetchRequest))" }
        // cache_then_server's CACHED answer is checked too when the cache is whole.
        let checked = mode == .warm ? callbacks : callbacks.filter { $0.phase == .final }
        for callback in checked {
            let got: Answer
            if let error = callback.error {
                got = .error("\(error)")
            } else if request.count {
                got = .count(callback.results.count)
            } else {
                var ids = try (0..<callback.results.count).map { try callback.results.id(at: $0) }
                if request.sort.isEmpty { ids.sort { Array($0.utf8).lexicographicallyPrecedes($1.utf8) } }
                got = .ids(ids)
            }
            if got != expected {
                return "\(describe(fetchRequest)) \(callback.phase): got \(got), expected \(expected)"
            }
        }
        return nil
    }

    func describe(_ request: FetchRequest) -> String {
        "\(request.predicate ?? "(all)") \(request.arguments) sort \(request.sort ?? "-") limit \(request.limit) offset \(request.offset) \(request.resultType)"
    }

    /// Runs alone, on a new server and store.
    func failure(_ directory: String) throws -> String? {
        let server = try kind.seed(records, directory + "/shrink-\(UUID().uuidString.prefix(8))")
        let context = try mode.open(server)
        defer { try? context.close() }
        var scenario = self
        if let stored = server.stored { scenario.records = stored }
        return try scenario.check(context)
    }

    /// The smallest request, then the fewest records, that still fail.
    func shrunk(_ directory: String) throws -> Scenario {
        var best = self
        var attempts = 0
        func fails(_ candidate: Scenario) throws -> Bool {
            attempts += 1
            return try candidate.failure(directory) != nil
        }
        var changed = true
        while changed && attempts < 400 {
            changed = false
            var candidates: [Scenario] = []
            if let predicate = best.request.predicate {
                for smaller in predicate.smaller {
                    var c = best
                    c.request.predicate = smaller
                    if mode == .cold && c.request.isWholeListing { continue }
                    candidates.append(c)
                }
            }
            for index in best.request.sort.indices {
                var c = best
                c.request.sort.remove(at: index)
                if c.request.sort.isEmpty { c.request.limit = 0; c.request.offset = 0 }
                candidates.append(c)
            }
            if best.request.limit > 0 { var c = best; c.request.limit = 0; candidates.append(c) }
            if best.request.offset > 0 { var c = best; c.request.offset = 0; candidates.append(c) }
            for candidate in candidates where attempts < 400 {
                if try fails(candidate) { best = candidate; changed = true; break }
            }
        }
        var index = 0
        while index < best.records.count && attempts < 400 {
            var c = best
            c.records.remove(at: index)
            if try fails(c) { best = c } else { index += 1 }
        }
        // And the fields of each record that still matter.
        for record in best.records.indices {
            var field = 1
            while field < best.records[record].count && attempts < 400 {
                var c = best
                c.records[record].remove(at: field)
                if try fails(c) { best = c } else { field += 1 }
            }
        }
        return best
    }

    // The corpus line.
    var json: JSON {
        func operand(_ o: Operand) -> JSON {
            let value: (String, JSON)
            switch o.literal {
            case .null: value = ("null", .bool(true))
            case .text(let s): value = ("text", .string(s))
            case .integer(let i): value = ("integer", .integer(i))
            case .real(let d): value = ("real", .real(d))
            case .boolean(let b): value = ("boolean", .bool(b))
            case .bigInteger(let digits): value = ("bigInteger", .string(digits))
            }
            return .object([value, ("argument", .bool(o.isArgument))])
        }
        func pred(_ p: Pred) -> JSON {
            switch p {
            case .truth(let b): return .object([("truth", .bool(b))])
            case .not(let inner): return .object([("not", pred(inner))])
            case .and(let parts): return .object([("and", .array(parts.map(pred)))])
            case .or(let parts): return .object([("or", .array(parts.map(pred)))])
            case .comparison(let field, let op, let options, let operands):
                return .object([("key", .string(fieldNames[field])), ("op", .string(op)), ("options", .string(options)),
                                ("values", .array(operands.map(operand)))])
            }
        }
        var fields: RecordFields = [("connection", .string(kind.rawValue)), ("mode", .string(mode.rawValue)),
                                    ("policy", .string(policyName(policy))), ("records", .array(records.map(JSON.object)))]
        if let predicate = request.predicate { fields.append(("predicate", pred(predicate))) }
        fields += [("sort", .array(request.sort.map { .string(($0.descending ? "-" : "") + fieldNames[$0.field]) })),
                   ("limit", .integer(request.limit)), ("offset", .integer(request.offset)),
                   ("result", .string(request.count ? "count" : "ids"))]
        return .object(fields)
    }

    init(kind: ServerKind, mode: Mode, policy: CachePolicy, records: [RecordFields], request: Request) {
        self.kind = kind
        self.mode = mode
        self.policy = policy
        self.records = records
        self.request = request
    }

    init(json: JSON) throws {
        func string(_ key: String) throws -> String { try XCTUnwrap(json[key]?.stringValue, "corpus: no \(key)") }
        kind = try XCTUnwrap(ServerKind(rawValue: try string("connection")))
        mode = try XCTUnwrap(Mode(rawValue: try string("mode")))
        let policies: [CachePolicy] = [.cacheOnly, .serverOnly, .cacheThenServer, .cacheElseServer]
        let name = try string("policy")
        policy = try XCTUnwrap(policies.first { policyName($0) == name }, "corpus: policy \(name)")
        records = try XCTUnwrap(json["records"]?.arrayValue).map { try XCTUnwrap($0.objectValue) }
        func operand(_ j: JSON) throws -> Operand {
            let isArgument = j["argument"] == .bool(true)
            if case .string(let s)? = j["text"] { return Operand(.text(s), isArgument) }
            if case .integer(let i)? = j["integer"] { return Operand(.integer(i), isArgument) }
            if case .real(let d)? = j["real"] { return Operand(.real(d), isArgument) }
            if case .integer(let i)? = j["real"] { return Operand(.real(Double(i)), isArgument) }
            if case .bool(let b)? = j["boolean"] { return Operand(.boolean(b), isArgument) }
            if case .string(let digits)? = j["bigInteger"] { return Operand(.bigInteger(digits), false) }
            return Operand(.null, isArgument)
        }
        func pred(_ j: JSON) throws -> Pred {
            if case .bool(let b)? = j["truth"] { return .truth(b) }
            if let inner = j["not"] { return .not(try pred(inner)) }
            if let parts = j["and"]?.arrayValue { return .and(try parts.map(pred)) }
            if let parts = j["or"]?.arrayValue { return .or(try parts.map(pred)) }
            let key = try XCTUnwrap(j["key"]?.stringValue)
            return .comparison(try XCTUnwrap(fieldNames.firstIndex(of: key)), try XCTUnwrap(j["op"]?.stringValue),
                               j["options"]?.stringValue ?? "", try (j["values"]?.arrayValue ?? []).map(operand))
        }
        var request = Request()
        request.predicate = try json["predicate"].map(pred)
        request.sort = try (json["sort"]?.arrayValue ?? []).map { key in
            let text = try XCTUnwrap(key.stringValue)
            let name = text.hasPrefix("-") ? String(text.dropFirst()) : text
            return (try XCTUnwrap(fieldNames.firstIndex(of: name)), text.hasPrefix("-"))
        }
        if case .integer(let limit)? = json["limit"] { request.limit = limit }
        if case .integer(let offset)? = json["offset"] { request.offset = offset }
        request.count = json["result"]?.stringValue == "count"
        self.request = request
    }
}
