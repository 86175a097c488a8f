/// The filters Kinto's query language says, and how exactly.
extension KintoConnection {
    /// What Kinto evaluates (memory and PostgreSQL backends alike) so that
    /// its answer holds every record the filter matches: text `==` and `IN`
    /// (its string equality is exact), boolean `==`, and integers by every
    /// comparison but `!=` (it also selects records holding `5.0` for 5, or
    /// null or text for `<`: more, never fewer). Never reals (PostgreSQL
    /// compares the decimals a record holds, Tether their doubles), text
    /// order (a collation's), `!=` (PostgreSQL leaves missing fields out)
    /// or JSON. Only names Kinto reads as a plain field (`fieldName`); only
    /// scalars; `in_` splits its values at commas, so no text holding one;
    /// Kinto refuses control characters in a query (400), so none.
    public func supports(_ filter: Filter) -> Bool {
        guard Self.isPlainField(filter.field), Self.queryParameter(filter).utf8.count <= Self.filterBytes else { return false }
        let scalars = filter.values.allSatisfy { value in
            switch value {
            case .string(let text):
                return !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
                    && (filter.operator != .oneOf || !text.contains(","))
            case .integer, .bool: return true
            default: return false
            }
        }
        guard scalars else { return false }
        switch (filter.type, filter.operator) {
        case (.text, .equal), (.text, .oneOf): return filter.values.allSatisfy { $0.stringValue != nil }
        case (.boolean, .equal), (.boolean, .oneOf): return filter.values.allSatisfy { if case .bool = $0 { true } else { false } }
        case (.integer, .notEqual): return false
        case (.integer, _): return filter.values.allSatisfy { $0.integerValue != nil }
        default: return false
        }
    }

    /// Exact: text `==` and `IN`, and boolean `==` (a boolean's `in_` also
    /// takes 1 for true in the memory backend). Kinto compares integers with
    /// reals and orders types among each other, which Tether does not.
    /// A PUT keeps the older `last_modified` it sends (a restore), behind the
    /// collection's timestamp: no `_since` listing shows it.
    public var changeListingsCanMissRewrites: Bool { true }
    public var backoffRemainingMilliseconds: Int64 { backoff.remainingMilliseconds() }

    public func filtersExactly(_ filter: Filter) -> Bool {
        guard supports(filter) else { return false }
        switch (filter.type, filter.operator) {
        case (.text, .equal), (.text, .oneOf), (.boolean, .equal): return true
        default: return false
        }
    }

    /// A name Kinto reads as the record field it is, after an operator
    /// prefix (`eq_min_age` is `min_age`; alone, `min_age` would be the
    /// operator `min_` on `age`): Kinto takes `[\w.]+` after the prefix
    /// (Python's \w is any Unicode letter or digit), reads a dot as a path
    /// into an object, and `last_modified` as its own timestamp. ASCII
    /// letters, digits and `_` only.
    static func isPlainField(_ name: String) -> Bool {
        !name.isEmpty && name != versionField && name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }

    /// Longest query parameter one filter may take: URLs stay short enough
    /// for proxies (longer `IN` lists are filtered here instead).
    static let filterBytes = 2_048

    /// A filter as Kinto's query parameter, always with its operator's
    /// prefix, so that no field name reads as another operator: `eq_`,
    /// `not_`, `lt_`, `gt_`, `max_`, `min_`, `in_` (values comma-separated).
    /// Kinto reads each value as JSON where it can, so text is sent quoted:
    /// `5` is the number 5, `"5"` the text.
    static func queryParameter(_ filter: Filter) -> String {
        let prefix: String
        switch filter.operator {
        case .equal: prefix = "eq_"
        case .notEqual: prefix = "not_"
        case .lessThan: prefix = "lt_"
        case .greaterThan: prefix = "gt_"
        case .atMost: prefix = "max_"
        case .atLeast: prefix = "min_"
        case .oneOf: prefix = "in_"
        }
        let values = filter.values.map { escape($0.serialized()) }
        return prefix + escape(filter.field) + "=" + values.joined(separator: ",")
    }
}
