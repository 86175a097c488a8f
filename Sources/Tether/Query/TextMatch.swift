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
        if let answer = asciiMatches(`operator`, text, pattern, options.folding) { return answer }
        let subject = TextFolding.fold(text, options.folding), wanted = TextFolding.fold(pattern, options.folding)
        switch `operator` {
        case .beginsWith: return subject.starts(with: wanted)
        case .endsWith: return subject.reversed().starts(with: wanted.reversed())
        case .contains:
            return wanted.isEmpty || subject.indices.contains { subject[$0...].starts(with: wanted) }
        default: return false
        }
    }

    /// When both texts are ASCII, folding them is lower-casing A-Z (no ASCII
    /// scalar has a mark, or a lower case outside ASCII), so their bytes
    /// compare as their folded scalars would, with no copy made: the cache
    /// calls this once per row a text comparison reaches. nil: not both ASCII.
    private static func asciiMatches(_ operator: Comparison.Operator, _ text: String, _ pattern: String,
                                     _ folding: Comparison.Options) -> Bool? {
        let lower = folding.contains(.caseInsensitive)
        func fold(_ byte: UInt8) -> UInt8 { lower && byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        return text.utf8.withContiguousStorageIfAvailable { subject -> Bool? in
            pattern.utf8.withContiguousStorageIfAvailable { wanted -> Bool? in
                guard !subject.contains(where: { $0 >= 0x80 }), !wanted.contains(where: { $0 >= 0x80 }) else { return nil }
                func equal(at start: Int) -> Bool {
                    for index in 0..<wanted.count where fold(subject[start + index]) != fold(wanted[index]) { return false }
                    return true
                }
                guard wanted.count <= subject.count else { return false }
                switch `operator` {
                case .beginsWith: return equal(at: 0)
                case .endsWith: return equal(at: subject.count - wanted.count)
                case .contains: return (0...(subject.count - wanted.count)).contains(where: equal)
                default: return nil
                }
            } ?? nil
        } ?? nil
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

/// An SQL-style LIKE (`'Fix%'`) matches nothing here, silently: the
/// wildcards are `*` and `?`. A pattern holding `%` or `_` and no wildcard
/// of ours is logged at WARNING, once per predicate text.
enum SQLStyleLike {
    /// Texts already warned of; cleared when full, so a host that builds
    /// predicates forever holds a bounded set (a warning may then repeat).
    private static let warned = Lock(Set<String>())
    private static let mostRemembered = 256

    /// The message names the attribute, not the pattern: predicates may
    /// hold values, and the log holds none above DEBUG.
    static func warnIfAny(in predicate: Predicate, text: String, entity: Entity) {
        guard Log.isEnabled(.warning), let attribute = predicate.sqlStyleLikeAttribute else { return }
        let isNew = warned.withLock { texts -> Bool in
            if texts.count >= mostRemembered { texts.removeAll() }
            return texts.insert(text).inserted
        }
        guard isNew else { return }
        Log.warning(.sync, "a LIKE on \(entity.name).\(entity.attributes[attribute].name) holds % or _ and no * or ?: "
                           + "LIKE's wildcards are * (any run) and ? (one character); % and _ match only themselves")
    }

    /// Whether the pattern holds % or _ and no unescaped * or ?.
    static func looksLikeSQL(_ pattern: String) -> Bool {
        let tokens = LikePattern.tokens(pattern, [])
        guard !tokens.contains(.anyRun), !tokens.contains(.one) else { return false }
        return tokens.contains(.scalar("%")) || tokens.contains(.scalar("_"))
    }
}

private extension Predicate {
    /// The attribute of the first LIKE whose pattern looks like SQL's.
    var sqlStyleLikeAttribute: Int? {
        switch self {
        case .always: return nil
        case .comparison(let comparison):
            guard comparison.operator == .like, case .text(let pattern)? = comparison.values.first,
                  SQLStyleLike.looksLikeSQL(pattern) else { return nil }
            return comparison.attribute
        case .not(let inner): return inner.sqlStyleLikeAttribute
        case .and(let parts), .or(let parts): return parts.lazy.compactMap(\.sqlStyleLikeAttribute).first
        }
    }
}
