/// A fetch request's question, parsed once against an entity into a tree that
/// the cache (SQL), the server (its filters) and memory (pending changes)
/// each answer the same way.
///
/// The language is Core Data's predicate format, in part:
///
///     Status == 'pending' AND (User BEGINSWITH[c] $1 OR #501 IN {3, 5})
///
/// - keys: an attribute name (letters, digits, `_`, `.`; not starting with a
///   digit), any name in backquotes (`` `two words` ``, a backquote doubled),
///   or a code (`#501`);
/// - values: `'text'` or `"text"` (backslash escapes), integers, reals,
///   `true`/`false` (`YES`/`NO`), `nil` (`NULL`), and parameters `$1`, `$2`…
///   bound by the caller with typed values, so that nothing needs quoting;
/// - comparisons `== = != <> < <= > >=`, `IN {…}`, `BETWEEN {low, high}`,
///   and, on text, `BEGINSWITH ENDSWITH CONTAINS LIKE` (`*` any run, `?` one
///   character), each text comparison with `[c]` (case-insensitive), `[d]`
///   (diacritic-insensitive) or `[cd]`;
/// - `AND`/`&&`, `OR`/`||`, `NOT`/`!`, parentheses, `TRUEPREDICATE`,
///   `FALSEPREDICATE`. Keywords are case-insensitive.
///
/// Semantics, the same everywhere (include/tether.h writes them in full):
/// - a comparison with a null value is false, except `== nil` and `!= nil`;
///   `!=` against a value is true for null (Core Data's rule); `NOT` negates
///   that two-valued answer;
/// - numbers compare by exact value, integers with reals (`NumberOrder`);
/// - text compares by Unicode scalar values (UTF-8 byte order, SQLite's
///   BINARY collation); `[c]` compares lower-cased text, `[d]` text without
///   combining marks (after canonical decomposition); on other types they
///   are ignored, as NSPredicate does;
/// - LIKE's `\` makes the next character literal (`LikePattern`);
/// - a value whose type is not the attribute's (kept as JSON) counts as
///   null: it is not a value of the attribute;
/// - attributes of JSON type compare only with `== nil` and `!= nil`.
public indirect enum Predicate: Sendable, Equatable {
    case always(Bool)
    case comparison(Comparison)
    case not(Predicate)
    case and([Predicate])
    case or([Predicate])
}

public struct Comparison: Sendable, Equatable {
    public enum Operator: Sendable, Equatable {
        case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
        case oneOf, between
        case beginsWith, endsWith, contains, like
    }

    public struct Options: OptionSet, Sendable, Hashable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let caseInsensitive = Options(rawValue: 1)
        public static let diacriticInsensitive = Options(rawValue: 2)
        /// Not an option one writes: marks a comparison of a JSON attribute.
        static let jsonAttribute = Options(rawValue: 4)
        /// The options that change how text compares.
        var folding: Options { intersection([.caseInsensitive, .diacriticInsensitive]) }
    }

    /// The attribute's index in its entity.
    public let attribute: Int
    public let `operator`: Operator
    public let options: Options
    /// One value; the candidates of `oneOf`; low and high of `between`.
    /// `.null` only for `==`/`!=`.
    public let values: [Value]
}

extension Predicate {
    /// Parses `text` for `entity`, binding `$n` to `arguments[n - 1]`. Every
    /// error is `.invalid`, says what and where (a 1-based column), and comes
    /// before any work starts. `maximumValues`: the most literals and
    /// arguments it may hold.
    public static func parse(_ text: String, entity: Entity, arguments: [Value] = [],
                             maximumValues: Int = .max) throws -> Predicate {
        var parser = PredicateParser(text: text, entity: entity, arguments: arguments, maximumValues: maximumValues)
        return try parser.parseAll()
    }

    /// Whether a record with these attribute values matches.
    func matches(_ values: [Value]) -> Bool {
        switch self {
        case .always(let answer): return answer
        case .comparison(let comparison): return comparison.matches(values[comparison.attribute])
        case .not(let inner): return !inner.matches(values)
        case .and(let parts): return parts.allSatisfy { $0.matches(values) }
        case .or(let parts): return parts.contains { $0.matches(values) }
        }
    }

    /// The parts of the predicate the connection can filter by, so that the
    /// server's answer holds every matching record (and maybe more, which
    /// `matches` then removes). `isExact`: the filters say all of it, and the
    /// connection evaluates each exactly as `matches` would, so the server's
    /// answer is the answer (its count, its cut at a limit).
    ///
    /// At most one filter per field (a field given twice reaches a server as
    /// a list): an attribute's `==` and `IN` conditions become the one
    /// filter of their common values; of other conditions on one attribute,
    /// the first goes to the server and the rest are checked here.
    func serverFilters(_ entity: Entity, _ connection: any Connection) -> (filters: [Filter], isExact: Bool) {
        // A to-many's fetch is AND(refers, predicate): one list of conditions.
        func conjuncts(of predicate: Predicate) -> [Predicate] {
            switch predicate {
            case .and(let parts): return parts.flatMap(conjuncts)
            case .always(true): return []
            default: return [predicate]
            }
        }
        let conjuncts = conjuncts(of: self)
        var isExact = true
        var groups: [(attribute: Int, comparisons: [Comparison])] = []
        for conjunct in conjuncts {
            guard case .comparison(let comparison) = conjunct, comparison.filter(entity) != nil else {
                isExact = false
                continue
            }
            if let index = groups.firstIndex(where: { $0.attribute == comparison.attribute }) {
                groups[index].comparisons.append(comparison)
            } else {
                groups.append((comparison.attribute, [comparison]))
            }
        }
        var filters: [Filter] = []
        for (_, comparisons) in groups {
            let sets = comparisons.allSatisfy { $0.operator == .equal || $0.operator == .oneOf }
            // The candidates every condition accepts, by the same comparison as `matches`.
            let common = comparisons[0].values.filter { value in comparisons.allSatisfy { $0.matches(value) } }
            if comparisons.count > 1, sets, !common.isEmpty {
                let first = comparisons[0]
                let combined = Comparison(attribute: first.attribute, operator: common.count == 1 ? .equal : .oneOf,
                                          options: first.options, values: common)
                if let filter = combined.filter(entity), connection.supports(filter) {
                    filters.append(filter)
                    if !connection.filtersExactly(filter) { isExact = false }
                    continue
                }
            }
            if comparisons.count > 1 { isExact = false }
            guard let filter = comparisons.lazy.compactMap({ $0.filter(entity) }).first(where: connection.supports) else {
                isExact = false
                continue
            }
            filters.append(filter)
            if !connection.filtersExactly(filter) { isExact = false }
        }
        return (filters, isExact)
    }
}

// MARK: - matching in memory

extension Comparison {
    func matches(_ value: Value) -> Bool {
        let isNull = value == .null || (value.isJSON && !isOnJSON)
        if case .null = values.first { return (self.operator == .equal) == isNull }
        if isNull { return self.operator == .notEqual }
        switch self.operator {
        case .equal: return order(value, values[0]) == 0
        case .notEqual: return order(value, values[0]) != 0
        case .less: return order(value, values[0]) < 0
        case .lessOrEqual: return order(value, values[0]) <= 0
        case .greater: return order(value, values[0]) > 0
        case .greaterOrEqual: return order(value, values[0]) >= 0
        case .oneOf: return values.contains { order(value, $0) == 0 }
        case .between: return order(value, values[0]) >= 0 && order(value, values[1]) <= 0
        case .beginsWith, .endsWith, .contains, .like:
            guard case .text(let text) = value, case .text(let pattern) = values[0] else { return false }
            return TextMatch.matches(self.operator, text, pattern, options)
        }
    }

    /// Set by the parser: the attribute is of JSON type (only nil tests).
    var isOnJSON: Bool { options.contains(.jsonAttribute) }

    /// -1, 0, 1 as SQLite orders two values of the attribute's type; 2:
    /// not comparable (unequal, unordered).
    private func order(_ a: Value, _ b: Value) -> Int {
        switch (a, b) {
        case let (.text(x), .text(y)):
            let left = TextFolding.fold(x, options.folding), right = TextFolding.fold(y, options.folding)
            return left == right ? 0 : left.lexicographicallyPrecedes(right) ? -1 : 1
        case let (.boolean(x), .boolean(y)): return x == y ? 0 : !x ? -1 : 1
        default: return NumberOrder.compare(a, b) ?? 2
        }
    }
}

private extension Value {
    var isJSON: Bool { if case .json = self { return true } else { return false } }
}

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

/// `[c]` and `[d]` as one function, used for values in memory and, through
/// SQLite, for rows: the same folding both ways.
enum TextFolding {
    /// The text's scalars, lower-cased and/or without combining marks.
    static func fold(_ text: String, _ options: Comparison.Options) -> [Unicode.Scalar] {
        guard !options.isEmpty else { return Array(text.unicodeScalars) }
        var folded = options.contains(.caseInsensitive) ? text.lowercased() : text
        if options.contains(.diacriticInsensitive) {
            folded = String(String.UnicodeScalarView(folded.canonicalDecomposition.filter {
                $0.properties.canonicalCombiningClass == .notReordered
            }))
        }
        return Array(folded.unicodeScalars)
    }

    static func folded(_ text: String, _ options: Comparison.Options) -> String {
        String(String.UnicodeScalarView(fold(text, options)))
    }
}

/// The text comparisons, the same function for memory and (through SQLite)
/// the cache.
enum TextMatch {
    static func matches(_ operator: Comparison.Operator, _ text: String, _ pattern: String,
                        _ options: Comparison.Options) -> Bool {
        if `operator` == .like { return LikePattern.matches(text, pattern, options.folding) }
        let subject = TextFolding.fold(text, options.folding), wanted = TextFolding.fold(pattern, options.folding)
        switch `operator` {
        case .beginsWith: return subject.starts(with: wanted)
        case .endsWith: return subject.reversed().starts(with: wanted.reversed())
        case .contains:
            return wanted.isEmpty || subject.indices.contains { subject[$0...].starts(with: wanted) }
        default: return false
        }
    }

    /// The operators' numbers in SQL (`tether_text(column, op, pattern, options)`).
    static let codes: [(Comparison.Operator, Int)] = [(.beginsWith, 1), (.endsWith, 2), (.contains, 3), (.like, 4)]
}

/// LIKE's `*` (any run of scalars, none included) and `?` (one scalar) over
/// the folded text; `\` makes the next scalar literal (`\*`, `\?`, `\\`).
enum LikePattern {
    enum Token: Equatable { case anyRun, one, scalar(Unicode.Scalar) }

    /// The pattern's tokens; its literal runs folded as the text is.
    static func tokens(_ pattern: String, _ folding: Comparison.Options) -> [Token] {
        var tokens: [Token] = []
        var run = String.UnicodeScalarView()
        func flush() {
            tokens += TextFolding.fold(String(run), folding).map(Token.scalar)
            run = String.UnicodeScalarView()
        }
        var iterator = pattern.unicodeScalars.makeIterator()
        while let c = iterator.next() {
            switch c {
            // A lone \ at the end is refused by the parser; here it is itself.
            case "\\": run.append(iterator.next() ?? "\\")
            case "*": flush(); tokens.append(.anyRun)
            case "?": flush(); tokens.append(.one)
            default: run.append(c)
            }
        }
        flush()
        return tokens
    }

    /// Whether the pattern ends in a lone `\` (escaping nothing).
    static func hasDanglingEscape(_ pattern: String) -> Bool {
        var escaped = false
        for c in pattern.unicodeScalars { escaped = !escaped && c == "\\" }
        return escaped
    }

    static func matches(_ text: String, _ pattern: String, _ folding: Comparison.Options) -> Bool {
        matches(TextFolding.fold(text, folding), tokens(pattern, folding))
    }

    static func matches(_ subject: [Unicode.Scalar], _ pattern: [Token]) -> Bool {
        // Iterative, with one backtracking point: linear for most patterns, never recursive.
        var s = 0, p = 0, starP = -1, starS = 0
        while s < subject.count {
            if p < pattern.count, pattern[p] == .one || pattern[p] == .scalar(subject[s]) {
                s += 1
                p += 1
            } else if p < pattern.count, pattern[p] == .anyRun {
                starP = p
                starS = s
                p += 1
            } else if starP >= 0 {
                p = starP + 1
                starS += 1
                s = starS
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == .anyRun { p += 1 }
        return p == pattern.count
    }
}

// MARK: - the server's filters

extension Comparison {
    /// The same comparison as a server filter (which the connection may
    /// still not support), or nil for one no filter says: folded text, text
    /// matching, BETWEEN, nil, JSON attributes.
    func filter(_ entity: Entity) -> Filter? {
        let attribute = entity.attributes[self.attribute]
        guard options.isEmpty, attribute.type != .json, !values.isEmpty, !values.contains(.null) else { return nil }
        let json = values.map(\.json)
        let filterOperator: FilterOperator
        switch self.operator {
        case .equal: filterOperator = .equal
        case .notEqual: filterOperator = .notEqual
        case .oneOf: filterOperator = .oneOf
        case .less: filterOperator = .lessThan
        case .lessOrEqual: filterOperator = .atMost
        case .greater: filterOperator = .greaterThan
        case .greaterOrEqual: filterOperator = .atLeast
        case .between, .beginsWith, .endsWith, .contains, .like: return nil
        }
        return Filter(field: attribute.name, filterOperator, json, type: attribute.type)
    }
}

extension Filter {
    /// What the filter means: the predicate's comparison of the field's value,
    /// read as an attribute of `type` (a misfit is null). A connection that
    /// says it filters exactly must select exactly these records.
    public func matches(_ field: JSON?) -> Bool {
        let comparisonOperator: Comparison.Operator
        switch self.operator {
        case .equal: comparisonOperator = .equal
        case .notEqual: comparisonOperator = .notEqual
        case .lessThan: comparisonOperator = .less
        case .greaterThan: comparisonOperator = .greater
        case .atMost: comparisonOperator = .lessOrEqual
        case .atLeast: comparisonOperator = .greaterOrEqual
        case .oneOf: comparisonOperator = .oneOf
        }
        guard !values.isEmpty, type != .json else { return false }
        let comparison = Comparison(attribute: 0, operator: comparisonOperator, options: [],
                                    values: values.map { Self.operand($0, type) })
        return comparison.matches(Value(json: field, type: type))
    }

    /// An operand as the predicate holds it: a number stays a number against
    /// a number attribute of the other kind (`n < 0.5` on an integer), and
    /// compares by exact value; it is not a misfit, as such a field would be.
    private static func operand(_ json: JSON, _ type: AttributeType) -> Value {
        switch (type, json) {
        case (.integer, .real(let d)): return .real(d)
        case (.real, .integer(let i)): return .integer(i)
        default: return Value(json: json, type: type)
        }
    }
}

// MARK: - SQL over the cache

extension Predicate {
    /// A WHERE clause over the entity's table, with its parameters: values
    /// are always bound, never pasted.
    func sql(_ entity: Entity) -> (text: String, parameters: [SQLValue]) {
        var parameters: [SQLValue] = []
        let text = sql(entity, &parameters)
        return (text, parameters)
    }

    private func sql(_ entity: Entity, _ parameters: inout [SQLValue]) -> String {
        switch self {
        case .always(let answer): return answer ? "1" : "0"
        // SQL's NULL is a third answer: NOT turns it into the two-valued one.
        case .not(let inner): return "NOT IFNULL(\(inner.sql(entity, &parameters)), 0)"
        case .and(let parts): return Self.balanced(Self.mergingSets(parts, inOR: false)[...], "AND", entity, &parameters)
        case .or(let parts): return Self.balanced(Self.mergingSets(parts, inOR: true)[...], "OR", entity, &parameters)
        case .comparison(let comparison): return comparison.sql(entity, &parameters)
        }
    }

    /// In an OR, the `==` and `IN` of one attribute (and options) as one
    /// `IN`; in an AND, its `!=` as one `NOT IN`: the same answer, and SQLite
    /// prepares a long list of values at once where it takes time that grows
    /// with the square of the number of terms (10,000 terms: a second).
    private static func mergingSets(_ parts: [Predicate], inOR: Bool) -> [Predicate] {
        struct Key: Hashable { let attribute: Int, options: Int }
        var merged: [Predicate] = []
        var sets: [Key: Int] = [:]  // the set's index in `values`
        var values: [(index: Int, values: [Value], count: Int)] = []
        for part in parts {
            guard case .comparison(let comparison) = part, comparison.values.first != .null,
                  inOR ? comparison.operator == .equal || comparison.operator == .oneOf : comparison.operator == .notEqual else {
                merged.append(part)
                continue
            }
            let key = Key(attribute: comparison.attribute, options: comparison.options.rawValue)
            if let set = sets[key] {
                values[set].values.append(contentsOf: comparison.values)
                values[set].count += 1
            } else {
                sets[key] = values.count
                values.append((merged.count, comparison.values, 1))
                merged.append(part)
            }
        }
        for (key, set) in sets where values[set].count > 1 {
            let oneOf = Predicate.comparison(Comparison(attribute: key.attribute, operator: .oneOf,
                                                        options: Comparison.Options(rawValue: key.options), values: values[set].values))
            merged[values[set].index] = inOR ? oneOf : .not(oneOf)
        }
        return merged
    }

    /// `a AND b AND c…` as SQLite parses it is a chain as deep as it is
    /// long, and SQLite refuses trees deeper than 1000: halves nest instead,
    /// so 10,000 terms are 14 levels deep.
    private static func balanced(_ parts: ArraySlice<Predicate>, _ joiner: String, _ entity: Entity,
                                 _ parameters: inout [SQLValue]) -> String {
        if parts.isEmpty { return joiner == "AND" ? "1" : "0" }
        if parts.count <= 8 {
            return "(" + parts.map { $0.sql(entity, &parameters) }.joined(separator: " \(joiner) ") + ")"
        }
        let middle = parts.startIndex + parts.count / 2
        return "(" + balanced(parts[..<middle], joiner, entity, &parameters) + " \(joiner) "
            + balanced(parts[middle...], joiner, entity, &parameters) + ")"
    }
}

extension Predicate {
    /// Attributes an index on their column would help find rows by: those
    /// compared plainly (no folding, no text matching) in a comparison that
    /// must hold, alone or as a part of an AND.
    var indexableAttributes: [Int] {
        switch self {
        case .comparison(let comparison):
            guard comparison.options.folding.isEmpty else { return [] }
            switch comparison.operator {
            case .equal, .less, .lessOrEqual, .greater, .greaterOrEqual, .oneOf, .between: return [comparison.attribute]
            case .notEqual, .beginsWith, .endsWith, .contains, .like: return []
            }
        case .and(let parts): return parts.flatMap(\.indexableAttributes)
        case .always, .not, .or: return []
        }
    }
}

extension Comparison {
    fileprivate func sql(_ entity: Entity, _ parameters: inout [SQLValue]) -> String {
        let attribute = entity.attributes[self.attribute]
        let column = Identifier.column(code: attribute.code)
        if case .null = values.first {
            return column + (self.operator == .equal ? " IS NULL" : " IS NOT NULL")
        }
        // A folded comparison folds the row through the same Swift function.
        let folding = options.folding
        let subject = folding.isEmpty ? column : "tether_fold(\(column), \(folding.rawValue))"
        func bind(_ value: Value) -> String {
            if case .text(let text) = value, !folding.isEmpty {
                parameters.append(.text(TextFolding.folded(text, folding)))
            } else {
                parameters.append(Store.sqlValue(value))
            }
            return "?"
        }
        switch self.operator {
        // Null and misfit rows (NULL in the column) differ from any value.
        case .notEqual: return "(\(subject) IS NOT \(bind(values[0])))"
        case .equal: return "(\(subject) = \(bind(values[0])))"
        case .less: return "(\(subject) < \(bind(values[0])))"
        case .lessOrEqual: return "(\(subject) <= \(bind(values[0])))"
        case .greater: return "(\(subject) > \(bind(values[0])))"
        case .greaterOrEqual: return "(\(subject) >= \(bind(values[0])))"
        case .oneOf: return "(\(subject) IN (\(values.map(bind).joined(separator: ", "))))"
        case .between: return "(\(subject) BETWEEN \(bind(values[0])) AND \(bind(values[1])))"
        case .beginsWith, .endsWith, .contains, .like:
            // Memory's matcher, not SQLite's LIKE (ASCII-only case folding,
            // % and _), so the cache never answers differently.
            let code = TextMatch.codes.first { $0.0 == self.operator }!.1
            parameters.append(Store.sqlValue(values[0]))
            return "tether_text(\(column), \(code), ?, \(folding.rawValue))"
        }
    }
}
