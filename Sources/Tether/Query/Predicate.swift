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
///   character; SQL's `%` and `_` are logged, `SQLStyleLike`), each text comparison with `[c]` (case-insensitive), `[d]`
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
        let predicate = try parser.parseAll()
        SQLStyleLike.warnIfAny(in: predicate, text: text, entity: entity)
        return predicate
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
