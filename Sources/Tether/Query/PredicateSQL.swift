/// A predicate as SQL over an entity's table, values bound, never pasted.
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
                parameters.append(SQLValue(value))
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
            parameters.append(SQLValue(values[0]))
            return "tether_text(\(column), \(code), ?, \(folding.rawValue))"
        }
    }
}
