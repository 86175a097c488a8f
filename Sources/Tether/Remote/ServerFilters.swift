/// A predicate as a server's filters, and what a filter means: the
/// connection interface's side of the predicate (Query names no server).
extension Predicate {
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
