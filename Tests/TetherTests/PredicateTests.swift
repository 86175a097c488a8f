import XCTest
@testable import Tether

// Foundation has a Predicate of its own.
private typealias Predicate = Tether.Predicate

/// The predicate language: parsing, and one meaning in memory and in SQL.
final class PredicateTests: XCTestCase {
    private let entity: Entity = {
        let spec = Spec(name: "changes", route: "c", idField: "id", versionField: "v",
                        fields: [FieldSpec(name: "User", type: .text), FieldSpec(name: "Change", type: .integer, code: 201),
                                 FieldSpec(name: "Score", type: .real), FieldSpec(name: "Open", type: .boolean),
                                 FieldSpec(name: "Tags", type: .json), FieldSpec(name: "two words", type: .text)],
                        operations: .all)
        return ModelBuilder.build(specs: [spec], previous: nil).entities[0]
    }()

    private func parse(_ text: String, _ arguments: [Value] = []) throws -> Predicate {
        try Predicate.parse(text, entity: entity, arguments: arguments)
    }

    private func index(_ name: String) -> Int { entity.attributeIndex(named: name)! }

    func testTheLanguage() throws {
        XCTAssertEqual(try parse("Change == 5"), .comparison(Comparison(attribute: index("Change"), operator: .equal, options: [], values: [.integer(5)])))
        XCTAssertEqual(try parse("#201 >= $1", [.integer(7)]),
                       .comparison(Comparison(attribute: index("Change"), operator: .greaterOrEqual, options: [], values: [.integer(7)])))
        XCTAssertEqual(try parse("`two words` BEGINSWITH[cd] 'x'"),
                       .comparison(Comparison(attribute: index("two words"), operator: .beginsWith,
                                              options: [.caseInsensitive, .diacriticInsensitive], values: [.text("x")])))
        XCTAssertEqual(try parse("Score BETWEEN {1, 2.5}"),
                       .comparison(Comparison(attribute: index("Score"), operator: .between, options: [], values: [.real(1), .real(2.5)])))
        guard case .or(let parts) = try parse("NOT Open == YES OR (User == nil && Tags != NULL) || TRUEPREDICATE") else {
            return XCTFail("an OR of three")
        }
        XCTAssertEqual(parts.count, 3)
        XCTAssertNoThrow(try parse("user in {'a', \"b\\\"c\"} and change in {}".replacingOccurrences(of: "user", with: "User")
                                     .replacingOccurrences(of: "change", with: "Change")))
        XCTAssertNoThrow(try parse("User LIKE[c] 'a*b?' AND User ENDSWITH $1 AND User CONTAINS $2", [.text("x"), .text("y")]))
    }

    func testErrorsSayWhatAndWhere() {
        let cases: [(String, [Value], String)] = [
            ("Change ==", [], "expected a value at column 10"),
            ("Nope == 1", [], "no attribute \"Nope\" at column 1"),
            ("#999 == 1", [], "no attribute with code 999 at column 1"),
            ("Change == 'five'", [], "Change is integer; text does not compare with it at column 11"),
            ("Change == true", [], "Change is integer; a boolean does not compare with it at column 11"),
            ("Change BEGINSWITH '1'", [], "Change is integer, not text at column 8"),
            ("User LIKE $1", [.text("a\\")], "the LIKE pattern ends in a lone \\ (write \\\\ for a backslash) at column 6"),
            ("Change < nil", [], "nil compares only with == and != at column 8"),
            ("Tags == '[]'", [], "Tags holds JSON: only == nil and != nil test it at column 9"),
            ("Tags < nil", [], "Tags holds JSON: only == nil and != nil test it at column 1"),
            ("Change == $2", [.integer(1), .integer(2)], "argument $1 is given but not used"),
            ("Change == $3", [.integer(1)], "$3 but 1 argument given at column 11"),
            ("Change == 1 OR", [], "expected a key at column 15"),
            ("(Change == 1", [], "expected ) at column 13"),
            ("Change == 1 Change", [], "expected AND, OR or the end at column 13"),
            ("User == 'abc", [], "unterminated text at column 9"),
            ("Score BETWEEN {1}", [], "BETWEEN takes {low, high} at column 7"),
            ("User ==[x] 'a'", [], "unknown option x (c or d) at column 9"),
            (String(repeating: "(", count: 500) + "Change == 1" + String(repeating: ")", count: 500), [], "nested deeper than 200 levels"),
            (String(repeating: "NOT ", count: 500) + "Change == 1", [], "nested deeper than 200 levels"),
        ]
        for (text, arguments, message) in cases {
            XCTAssertThrowsError(try parse(text, arguments), text) { error in
                XCTAssertEqual((error as? TetherError)?.kind, .invalid, text)
                XCTAssertTrue((error as? TetherError)?.message.contains(message) ?? false,
                              "\(text): \((error as? TetherError)?.message ?? "") does not say \(message)")
            }
        }
    }

    /// The same predicate over the same rows: SQL over the store and Swift in
    /// memory must agree, row for row, for random predicates over awkward
    /// values (nulls, misfits, case, marks, NUL, wildcards in text).
    func testSQLAndMemoryAgree() throws {
        let directory = try makeTemporaryDirectory("predicates")
        defer { removeDirectory(directory) }
        let store = try Store(path: directory + "/store.sqlite")
        defer { store.close() }
        let model = Model(entities: [entity], entityCodeHighWater: entity.code)
        try store.adopt(model, identity: "test")

        let texts: [JSON] = [.string("alice"), .string("Alice"), .string("ALÏCE"), .string("bob"), .string(""), .string("a*b?"),
                             .string("x\u{0}y"), .string("e\u{301}"), .string("\u{E9}"), .string("%_"), .null, .integer(5)]
        let numbers: [JSON] = [.integer(-1), .integer(0), .integer(5), .integer(1 << 60), .real(2.5), .real(-0.0), .null, .string("5")]
        let booleans: [JSON] = [.bool(true), .bool(false), .null, .integer(1)]
        var generator = SystemRandomNumberGenerator()
        var records: [Record] = []
        for row in 0..<300 {
            let fields: RecordFields = [("id", .string("r\(row)")), ("v", .integer(Int64(row))),
                                        ("User", texts.randomElement(using: &generator)!),
                                        ("Change", numbers.randomElement(using: &generator)!),
                                        ("Score", numbers.randomElement(using: &generator)!),
                                        ("Open", booleans.randomElement(using: &generator)!),
                                        ("Tags", row % 3 == 0 ? .null : .array([.integer(Int64(row))])),
                                        ("two words", texts.randomElement(using: &generator)!)]
            records.append(try Record(entity: entity, fields: fields))
        }
        try store.write(records, of: entity, fetchedAt: 1)

        let textValues = ["'alice'", "'ALICE'", "'alïce'", "'a*'", "'*b?'", "'?'", "''", "'e\u{301}'", "'\u{E9}'", "'%_'", "'x\\0y'", "'b'"]
        let numberValues = ["0", "5", "-1", "2.5", "1152921504606846976", "-0.0"]
        func comparison() -> String {
            let options = ["", "[c]", "[d]", "[cd]"].randomElement(using: &generator)!
            switch Int.random(in: 0..<6, using: &generator) {
            case 0:
                let key = ["User", "`two words`"].randomElement(using: &generator)!
                let op = ["==", "!=", "<", "<=", ">", ">=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE"].randomElement(using: &generator)!
                return "\(key) \(op)\(options) \(textValues.randomElement(using: &generator)!)"
            case 1:
                let key = ["Change", "Score", "#201"].randomElement(using: &generator)!
                let op = ["==", "!=", "<", "<=", ">", ">="].randomElement(using: &generator)!
                let value = key == "Score" ? numberValues.randomElement(using: &generator)! : ["0", "5", "-1", "1152921504606846976"].randomElement(using: &generator)!
                return "\(key) \(op) \(value)"
            case 2: return "Open == \(["true", "false", "nil"].randomElement(using: &generator)!)"
            case 3: return "\(["User", "Change", "Score", "Open", "Tags"].randomElement(using: &generator)!) \(["==", "!="].randomElement(using: &generator)!) nil"
            case 4: return "User IN\(options) {\(textValues.shuffled(using: &generator).prefix(3).joined(separator: ", "))}"
            default: return "Score BETWEEN {\(numberValues.randomElement(using: &generator)!), \(numberValues.randomElement(using: &generator)!)}"
            }
        }
        func predicate(_ depth: Int) -> String {
            guard depth > 0 else { return comparison() }
            switch Int.random(in: 0..<4, using: &generator) {
            case 0: return "NOT (\(predicate(depth - 1)))"
            case 1: return "(\(predicate(depth - 1)) AND \(predicate(depth - 1)))"
            case 2: return "(\(predicate(depth - 1)) OR \(predicate(depth - 1)))"
            default: return comparison()
            }
        }
        for _ in 0..<400 {
            let text = predicate(3)
            let parsed = try parse(text)
            let inSQL = Set(try store.query(entity, where: parsed, sort: [], limit: 0).map(\.record.id))
            let inMemory = Set(records.filter { parsed.matches($0.values) }.map(\.id))
            XCTAssertEqual(inSQL, inMemory, text)
            if inSQL != inMemory { break }
        }

        // And one order: a server's answer is sorted in memory as SQL sorts the cache.
        let sortable = ["User", "Change", "Score", "Open", "two words", "v"].map { entity.attributeIndex(named: $0)! }
        for _ in 0..<100 {
            let keys = sortable.shuffled(using: &generator).prefix(Int.random(in: 1...3, using: &generator))
                .map { (index: $0, descending: Bool.random(using: &generator)) }
            let order = SortOrder(entity: entity, keys: keys)
            let inSQL = try store.query(entity, sort: keys, limit: 0).map(\.record.id)
            let inMemory = records.sorted { order.precedes(($0.id, $0.values), ($1.id, $1.values)) }.map(\.id)
            XCTAssertEqual(inSQL, inMemory, "\(keys)")
            if inSQL != inMemory { break }
        }
    }

    /// SQLite's parser has a fixed stack: 22 NOTs in a row overflowed it (the
    /// predicate fuzzer's find). NOT NOT cancels, nested ANDs and ORs merge,
    /// and what is still deeper is refused before any work.
    func testDeepLogicIsFlattenedOrRefusedNotASQLiteError() throws {
        let store = try Store(path: ":memory:")
        defer { store.close() }
        try store.adopt(Model(entities: [entity], entityCodeHighWater: entity.code), identity: "test")
        let nots = String(repeating: "!", count: 35) + " User CONTAINS[d] 'e'"
        guard case .not = try parse(nots) else { return XCTFail("35 NOTs are one") }
        XCTAssertNoThrow(try store.query(entity, where: try parse("Change IN {5, -1} || " + nots), sort: [], limit: 0))
        let merged = String(repeating: "(Change == 1 AND ", count: 60) + "Change == 2" + String(repeating: ")", count: 60)
        guard case .and(let parts) = try parse(merged) else { return XCTFail("nested ANDs are one AND") }
        XCTAssertEqual(parts.count, 61)
        func alternating(_ levels: Int) -> String {
            String(repeating: "Change == 1 AND (Change == 2 OR (", count: levels) + "Change == 3" + String(repeating: "))", count: levels)
        }
        XCTAssertNoThrow(try store.query(entity, where: try parse(alternating(8)), sort: [], limit: 0))
        XCTAssertThrowsError(try parse(alternating(9))) { error in
            XCTAssertEqual((error as? TetherError)?.message, "predicate: nested deeper than 16 levels of NOT, AND and OR")
        }
    }

    func testServerFiltersNeverNarrowerAndExactOnlyWhenSo() throws {
        let connection = MemoryConnection(MemoryServer(name: "m", specs: [entity.spec]))
        let exact = try parse("Change == 5 AND User == 'a' AND Open == true AND Score < 1").serverFilters(entity, connection)
        XCTAssertEqual(exact.filters.count, 4)
        XCTAssertTrue(exact.isExact, "the memory server evaluates every filter as Filter.matches")
        let partial = try parse("Change <= 5 AND User BEGINSWITH 'a' AND User ==[c] 'b' AND Score < 1").serverFilters(entity, connection)
        XCTAssertEqual(partial.filters.map(\.operator), [.atMost, .lessThan])
        XCTAssertFalse(partial.isExact, "text prefixes and folded text are the core's to check")
        XCTAssertEqual(try parse("Change == 1 OR Change == 2").serverFilters(entity, connection).filters, [])
        XCTAssertEqual(try parse("User < 'b'").serverFilters(entity, connection).filters.count, 1)

        // One filter per field: sets intersect; other conditions stay here.
        let sets = try parse("Change IN {1, 2} AND Change IN {2, 3} AND User == 'a' AND User IN {'a', 'b'}").serverFilters(entity, connection)
        XCTAssertEqual(sets.filters, [Filter(field: "Change", .equal, [.integer(2)], type: .integer),
                                      Filter(field: "User", .equal, [.string("a")], type: .text)])
        XCTAssertTrue(sets.isExact)
        // A to-many's fetch ANDs its owner's condition with the predicate: one list.
        let nested = Predicate.and([try parse("User == 'a'"), try parse("Change == 1 AND Open == true")])
        XCTAssertEqual(nested.serverFilters(entity, connection).filters.count, 3)
        XCTAssertTrue(nested.serverFilters(entity, connection).isExact)
        let ranges = try parse("Change > 0 AND Change > 1").serverFilters(entity, connection)
        XCTAssertEqual(ranges.filters.count, 1)
        XCTAssertFalse(ranges.isExact)

        // Kinto: exact only for text and boolean equality; names it reads as
        // they are; values it takes in a query.
        let kinto = try KintoConnection(KintoOptions(serverURL: "http://127.0.0.1:9/v1", bucket: "b"))
        defer { kinto.shutdown() }
        func text(_ field: String, _ op: FilterOperator, _ values: [String]) -> Filter {
            Filter(field: field, op, values.map { .string($0) }, type: .text)
        }
        XCTAssertFalse(kinto.supports(text("User", .equal, ["a\u{0}b"])))
        XCTAssertFalse(kinto.supports(text("User", .equal, ["line\n"])))
        XCTAssertTrue(kinto.filtersExactly(text("User", .equal, ["a,b"])))
        XCTAssertFalse(kinto.supports(text("User", .oneOf, ["a,b"])))
        XCTAssertTrue(kinto.filtersExactly(text("User", .oneOf, ["a", "é😀"])))
        XCTAssertFalse(kinto.supports(text("User", .lessThan, ["a"])), "a collation orders text")
        XCTAssertFalse(kinto.supports(text("User", .notEqual, ["a"])), "PostgreSQL leaves missing fields out of not_")
        for name in ["unit-price", "two words", "a.b", "last_modified", "prénom", ""] {
            XCTAssertFalse(kinto.supports(text(name, .equal, ["a"])), name)
        }
        for name in ["min_age", "in_stock", "_flag", "has_x", "contains_any_x", "eq_x"] {
            XCTAssertTrue(kinto.supports(text(name, .equal, ["a"])), name)
            XCTAssertTrue(KintoConnection.queryParameter(text(name, .equal, ["a"])).hasPrefix("eq_\(name)="), name)
        }
        let integer = Filter(field: "Change", .greaterThan, [.integer(1)], type: .integer)
        XCTAssertTrue(kinto.supports(integer))
        XCTAssertFalse(kinto.filtersExactly(integer), "Kinto takes 5.0 for 5, null and text as less than numbers")
        XCTAssertFalse(kinto.supports(Filter(field: "Score", .lessThan, [.real(1)], type: .real)), "PostgreSQL compares decimals")
        XCTAssertTrue(kinto.filtersExactly(Filter(field: "Open", .equal, [.bool(true)], type: .boolean)))
        XCTAssertFalse(kinto.filtersExactly(Filter(field: "Open", .oneOf, [.bool(true)], type: .boolean)), "1 is in {true} for Python")
        XCTAssertFalse(kinto.supports(text("User", .oneOf, (0..<1000).map { "value \($0)" })), "URLs stay short")
    }

    // MARK: the language's decisions, as tether.h writes them (issue 21, cases 7 and 8)

    /// Ids matching `text` over these records, in SQL over a store and in
    /// memory; fails if the two differ.
    private func matching(_ text: String, _ arguments: [Value] = [], in rows: [RecordFields],
                          file: StaticString = #filePath, line: UInt = #line) throws -> Set<String> {
        let store = try Store(path: ":memory:")
        defer { store.close() }
        try store.adopt(Model(entities: [entity], entityCodeHighWater: entity.code), identity: "test")
        let records = try rows.enumerated().map { index, fields in
            try Record(entity: entity, fields: [("id", .string("r\(index)")), ("v", .integer(1))] + fields)
        }
        try store.write(records, of: entity, fetchedAt: 1)
        let predicate = try parse(text, arguments)
        let inSQL = Set(try store.query(entity, where: predicate, sort: [], limit: 0).map(\.record.id))
        let inMemory = Set(records.filter { predicate.matches($0.values) }.map(\.id))
        XCTAssertEqual(inSQL, inMemory, "\(text): SQL and memory differ", file: file, line: line)
        return inSQL
    }

    func testIntegersAndRealsCompareByExactValue() throws {
        let rows: [RecordFields] = [[("Score", .real(9007199254740992.0)), ("Change", .integer(9007199254740993))],
                                    [("Score", .real(40.5)), ("Change", .integer(40))],
                                    [("Score", .real(-9.5e18)), ("Change", .integer(Int64.max))]]
        XCTAssertEqual(try matching("Score == 9007199254740993", in: rows), [], "2^53 + 1 is not 2^53")
        XCTAssertEqual(try matching("Score == $1", [.integer(9007199254740993)], in: rows), [])
        XCTAssertEqual(try matching("Score < 9007199254740993", in: rows), ["r0", "r1", "r2"])
        XCTAssertEqual(try matching("Score IN {9007199254740993, 40.5}", in: rows), ["r1"])
        XCTAssertEqual(try matching("Score BETWEEN {9007199254740993, 9007199254740994}", in: rows), [])
        XCTAssertEqual(try matching("Score == 9007199254740992", in: rows), ["r0"])
        XCTAssertEqual(try matching("Change == 9007199254740992.0", in: rows), [])
        XCTAssertEqual(try matching("Change > 9007199254740992.0", in: rows), ["r0", "r2"])
        XCTAssertEqual(try matching("Change < 9.2e18", in: rows), ["r0", "r1"], "2^63 - 1 is above 9.2e18")
        XCTAssertEqual(try matching("Change < 40.5", in: rows), ["r1"], "a real against an integer: accepted, exact")
        XCTAssertEqual(try matching("Change == 40.5", in: rows), [])
        XCTAssertEqual(try matching("Change != 40.5", in: rows), ["r0", "r1", "r2"])
        XCTAssertEqual(try matching("Change <= $1", [.real(40.0)], in: rows), ["r1"])
        XCTAssertEqual(try matching("Change > 1e300", in: rows), [])
        XCTAssertEqual(NumberOrder.compare(.integer(Int64.max), .real(9223372036854775807.0)), -1, "2^63 as a double")
        XCTAssertEqual(NumberOrder.compare(.integer(Int64.min), .real(-9223372036854775808.0)), 0)
        XCTAssertEqual(NumberOrder.compare(.real(-0.5), .integer(0)), -1)
    }

    /// Issue 39: integer literals no Int64 holds were rounded through a
    /// double (-2^63 - 1 matched -2^63). They compare exactly: with an
    /// integer attribute, and with a real one whether a double holds them
    /// (2^64) or not (2^64 + 1, between two doubles).
    func testIntegersBeyond64BitsCompareExactly() throws {
        let rows: [RecordFields] = [[("Change", .integer(Int64.min))], [("Change", .integer(Int64.max))],
                                    [("Score", .real(18446744073709551616.0))]]
        XCTAssertEqual(try matching("Change == -9223372036854775809", in: rows), [])
        XCTAssertEqual(try matching("Change > -9223372036854775809", in: rows), ["r0", "r1"])
        XCTAssertEqual(try matching("Change >= -9223372036854775809", in: rows), ["r0", "r1"])
        XCTAssertEqual(try matching("Change < -9223372036854775809", in: rows), [])
        XCTAssertEqual(try matching("Change != -9223372036854775809", in: rows), ["r0", "r1", "r2"], "!= holds for null too")
        XCTAssertEqual(try matching("NOT (Change == -9223372036854775809)", in: rows), ["r0", "r1", "r2"])
        XCTAssertEqual(try matching("Change < 9223372036854775808", in: rows), ["r0", "r1"], "2^63, a double")
        XCTAssertEqual(try matching("Change == 9223372036854775808", in: rows), [])
        XCTAssertEqual(try matching("Change <= +09223372036854775809", in: rows), ["r0", "r1"])
        XCTAssertEqual(try matching("Change IN {-9223372036854775809, 9223372036854775807}", in: rows), ["r1"])
        XCTAssertEqual(try matching("Change IN {-9223372036854775809}", in: rows), [])
        XCTAssertEqual(try matching("Change BETWEEN {-9223372036854775809, -9223372036854775808}", in: rows), ["r0"])
        XCTAssertEqual(try matching("Score == 18446744073709551617", in: rows), [])
        XCTAssertEqual(try matching("Score < 18446744073709551617", in: rows), ["r2"])
        XCTAssertEqual(try matching("Score <= 18446744073709551617", in: rows), ["r2"])
        XCTAssertEqual(try matching("Score > 18446744073709551615", in: rows), ["r2"], "2^64 - 1: no double holds it")
        XCTAssertEqual(try matching("Score >= 18446744073709551617", in: rows), [])
        XCTAssertEqual(try matching("Score == 18446744073709551616", in: rows), ["r2"], "2^64: a double holds it")
        XCTAssertEqual(try matching("Score BETWEEN {18446744073709551615, 18446744073709551617}", in: rows), ["r2"])
        XCTAssertEqual(try matching("Score BETWEEN {18446744073709551617, 18446744073709551618}", in: rows), [])
        XCTAssertEqual(try matching("Score < 123456789012345678901234567890", in: rows), ["r2"])
        XCTAssertEqual(try matching("Score > -123456789012345678901234567890", in: rows), ["r2"])
        XCTAssertEqual(try parse("Change > -9223372036854775809"),
                       .comparison(Comparison(attribute: index("Change"), operator: .greaterOrEqual, options: [], values: [.integer(.min)])))
        XCTAssertEqual(try parse("Score != 18446744073709551617"), .always(true))
        for text in ["Score < 1" + String(repeating: "0", count: 400), "Score < 1e309"] {
            XCTAssertThrowsError(try parse(text), text) { error in
                XCTAssertTrue((error as? TetherError)?.message.contains("is not a number a real holds") ?? false, "\(error)")
            }
        }
        XCTAssertThrowsError(try parse("User == 18446744073709551617")) { error in
            XCTAssertTrue((error as? TetherError)?.message.contains("User is text; an integer does not compare with it at column 9") ?? false,
                          "\(error)")
        }
    }

    /// Issue 39: a key path in a predicate says where key paths work.
    func testKeyPathsSayTheyWorkInPeekAndGet() {
        XCTAssertThrowsError(try parse("Client.Owner == 'alice'")) { error in
            XCTAssertEqual((error as? TetherError)?.message,
                           "predicate: changes has no attribute \"Client.Owner\" at column 1 "
                           + "(key paths work in peek and get, not yet in predicates)")
        }
    }

    func testLikeEscapesAndNSPredicateSpellings() throws {
        let rows: [RecordFields] = [[("User", .string("a*b"))], [("User", .string("a?b"))], [("User", .string("a\\b"))],
                                    [("User", .string("axb"))], [("User", .string(""))], [("Change", .integer(41))],
                                    [("Change", .integer(3))]]
        XCTAssertEqual(try matching("User LIKE 'a\\*b'", in: rows), ["r0"])
        XCTAssertEqual(try matching("User LIKE 'a\\?b'", in: rows), ["r1"])
        XCTAssertEqual(try matching("User LIKE 'a\\\\b'", in: rows), ["r2"], "\\\\ in a pattern's literal is one backslash")
        XCTAssertEqual(try matching("User LIKE 'a?b'", in: rows), ["r0", "r1", "r2", "r3"])
        XCTAssertEqual(try matching("User LIKE $1", [.text("a\\*b")], in: rows), ["r0"], "an argument is a pattern too")
        XCTAssertEqual(try matching("User LIKE[c] 'A\\*B'", in: rows), ["r0"])
        XCTAssertEqual(try matching("User == 'a\\*b'", in: rows), ["r0"], "outside LIKE, \\* is *")
        XCTAssertEqual(try matching("User LIKE ''", in: rows), ["r4"])
        XCTAssertEqual(try matching("User CONTAINS ''", in: rows), ["r0", "r1", "r2", "r3", "r4"], "every text, no null")
        XCTAssertEqual(try matching("User BEGINSWITH '' AND User ENDSWITH ''", in: rows), ["r0", "r1", "r2", "r3", "r4"])
        XCTAssertEqual(try parse("Change =< 5"), try parse("Change <= 5"))
        XCTAssertEqual(try parse("Change => 5"), try parse("Change >= 5"))
        XCTAssertEqual(try matching("Change =< 3", in: rows), ["r6"])
        XCTAssertEqual(try matching("Change =>41", in: rows), ["r5"])
        XCTAssertEqual(try parse("Change ==[c] 41"), try parse("Change == 41"), "[c] and [d] on a number are ignored")
        XCTAssertEqual(try parse("Score <[cd] 2"), try parse("Score < 2"))
        XCTAssertEqual(try parse("Tags ==[c] nil"), try parse("Tags == nil"))
        XCTAssertEqual(try matching("Change ==[c] 41", in: rows), ["r5"])
        XCTAssertEqual(try matching("Change IN {}", in: rows), [])
        XCTAssertEqual(try matching("NOT Change IN {}", in: rows).count, rows.count, "nulls too")
        XCTAssertEqual(try matching("Change BETWEEN {41, 3}", in: rows), [], "low > high: nothing")
        XCTAssertEqual(try matching("Change BETWEEN {3, 41}", in: rows), ["r5", "r6"])
    }

    /// [c] is each scalar's full lowercase mapping (no locale, no context);
    /// [d] removes the scalars whose canonical combining class is not 0
    /// after canonical decomposition.
    func testCaseAndDiacriticFoldingAsWritten() throws {
        let rows: [RecordFields] = [[("User", .string("STRASSE"))], [("User", .string("straße"))], [("User", .string("ΟΔΟΣ"))],
                                    [("User", .string("İ"))], [("User", .string("e\u{301}"))], [("User", .string("\u{E9}"))],
                                    [("User", .string("ﬀ"))], [("User", .string("Ø"))]]
        XCTAssertEqual(try matching("User ==[c] 'strasse'", in: rows), ["r0"], "lower-casing, not case folding: ß is not ss")
        XCTAssertEqual(try matching("User ==[c] 'οδοσ'", in: rows), ["r2"], "final sigma: no context, Σ is σ")
        XCTAssertEqual(try matching("User ==[c] 'i\u{307}'", in: rows), ["r3"], "İ lower-cases to i and a dot above")
        XCTAssertEqual(try matching("User ==[cd] 'i'", in: rows), ["r3"])
        XCTAssertEqual(try matching("User ==[d] 'e'", in: rows), ["r4", "r5"])
        XCTAssertEqual(try matching("User == 'e\u{301}'", in: rows), ["r4"], "no [d]: scalars as written, no normalization")
        XCTAssertEqual(try matching("User ==[c] 'ff'", in: rows), [], "no compatibility mapping")
        XCTAssertEqual(try matching("User ==[cd] 'o'", in: rows), [], "Ø has no decomposition: it stays")
    }

    /// Descending keys reverse the key's order; ties go by id ascending,
    /// whatever the direction. JSON attributes sort by their JSON text.
    func testSortTieBreakAndJSONOrder() throws {
        let store = try Store(path: ":memory:")
        defer { store.close() }
        try store.adopt(Model(entities: [entity], entityCodeHighWater: entity.code), identity: "test")
        let fields: [(String, JSON?, JSON?)] = [("b", .integer(1), .array([.integer(2)])), ("a", .integer(1), .object([("k", .integer(1))])),
                                                ("c", .integer(2), nil), ("d", .null, .array([.integer(10)]))]
        let records = try fields.map { id, change, tags in
            try Record(entity: entity, fields: [("id", .string(id)), ("v", .integer(1))]
                       + (change.map { [("Change", $0)] } ?? []) + (tags.map { [("Tags", $0)] } ?? []))
        }
        try store.write(records, of: entity, fetchedAt: 1)
        let change = index("Change"), tags = index("Tags")
        for (keys, expected) in [([(change, true)], ["c", "a", "b", "d"]), ([(change, false)], ["d", "a", "b", "c"]),
                                 ([(tags, false)], ["c", "d", "b", "a"]), ([(tags, true)], ["a", "b", "d", "c"])] {
            let keys = keys.map { (index: $0.0, descending: $0.1) }
            XCTAssertEqual(try store.query(entity, sort: keys, limit: 0).map(\.record.id), expected, "\(keys)")
            let order = SortOrder(entity: entity, keys: keys)
            XCTAssertEqual(records.sorted { order.precedes(($0.id, $0.values), ($1.id, $1.values)) }.map(\.id), expected)
        }
    }
}
