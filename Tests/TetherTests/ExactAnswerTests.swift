import XCTest
@testable import Tether

/// Issue 21: one answer whatever the policy. Each request is asked of the
/// server (server_only, the FINAL of cache_then_server, cache_else_server
/// over an empty cache, each on an entity not yet synced) and of a synced
/// cache (cache_only); ids, their order and the count must all be the one
/// the documented semantics give.
enum ExactAnswerContract {
    /// The "things" records: awkward names, nulls, missing fields, values of
    /// another type than the schema's (misfits), arrays, objects and U+0000
    /// where text is expected; then 60 fillers, so listings have pages (of 50).
    static let records: [(id: String, fields: String)] = [
        ("a", #"{"k": 0, "n": 1, "s": "a", "min_age": 18, "in_stock": true, "_flag": 1, "unit-price": 3, "two words": "x y", "a.b": "q", "v": "b"}"#),
        ("b", #"{"k": 1, "n": 5, "s": "b", "min_age": 21, "in_stock": false, "_flag": 2, "unit-price": 7, "two words": "z", "v": ["x"]}"#),
        ("c", #"{"k": 2, "n": null, "s": "a", "v": {"a": 1}}"#),
        ("d", #"{"k": 3, "v": "a\u0000b"}"#),
        ("e", #"{"n": "0", "in_stock": 1, "s": 5, "v": null}"#),
        ("f", #"{"n": true, "v": 3}"#),
        ("g", #"{"n": 5.0, "a": {"b": "q"}}"#),
        ("h", #"{"n": 9223372036854775808}"#),
        ("i", #"{"k": [1, 2], "s": ["a"]}"#),
    ] + (0..<60).map { ("p\($0 < 10 ? "0" : "")\($0)", #"{"v": [\#($0)]}"#) }

    static let fields: [(String, String)] = [("k", "integer"), ("n", "integer"), ("s", "string"), ("min_age", "integer"),
                                             ("in_stock", "boolean"), ("_flag", "integer"), ("unit-price", "integer"),
                                             ("two words", "string"), ("a.b", "string"), ("v", "string")]

    static var memorySpec: Spec {
        Spec(name: "things", route: "things", idField: "id", versionField: "last_modified",
             fields: fields.map { FieldSpec(name: $0.0, type: $0.1 == "string" ? .text : $0.1 == "boolean" ? .boolean : .integer) },
             operations: .all)
    }

    /// Asks every policy; fails unless each gives `expected` in that order,
    /// and counts `expected.count`.
    static func check(_ open: (String) throws -> Context, _ directory: String, _ synced: Context,
                      _ predicate: String?, sort: String? = nil, limit: Int64 = 0, _ expected: [String],
                      file: StaticString = #filePath, line: UInt = #line) throws {
        func ask(_ context: Context, _ policy: CachePolicy, _ type: ResultType) throws -> (ids: [String], count: Int) {
            var request = FetchRequest(entity: "things")
            request.predicate = predicate
            request.sort = sort
            request.limit = limit
            request.policy = policy
            request.resultType = type
            let answer = try XCTUnwrap(try fetch(context, request).last, file: file, line: line)
            let what = "\((predicate ?? "all").prefix(80)) sort \(sort ?? "none") limit \(limit), \(policy) \(type)"
            XCTAssertNil(answer.error, "\(what): \(answer.error.map { "\($0.kind): \($0.message)" } ?? "")", file: file, line: line)
            let ids = type == .count ? [] : try (0..<answer.results.count).map { try answer.results.id(at: $0) }
            return (ids, answer.results.count)
        }
        var answers: [(String, (ids: [String], count: Int))] = []
        let fresh = try open(directory + "/\(UUID().uuidString).sqlite")
        defer { try? fresh.close() }
        answers.append(("server_only ids", try ask(fresh, .serverOnly, .ids)))
        answers.append(("server_only count", try ask(fresh, .serverOnly, .count)))
        answers.append(("cache_then_server ids", try ask(fresh, .cacheThenServer, .ids)))
        answers.append(("cache_then_server count", try ask(fresh, .cacheThenServer, .count)))
        for type in [ResultType.ids, .count] {
            let empty = try open(directory + "/\(UUID().uuidString).sqlite")
            defer { try? empty.close() }
            answers.append(("cache_else_server \(type)", try ask(empty, .cacheElseServer, type)))
        }
        answers.append(("cache_only ids", try ask(synced, .cacheOnly, .ids)))
        answers.append(("cache_only count", try ask(synced, .cacheOnly, .count)))
        for (policy, answer) in answers {
            let what = "\((predicate ?? "all").prefix(80)) sort \(sort ?? "none") limit \(limit), \(policy)"
            if !policy.hasSuffix("count") { XCTAssertEqual(answer.ids, expected, what, file: file, line: line) }
            XCTAssertEqual(answer.count, expected.count, what, file: file, line: line)
        }
    }

    /// A context whose cache holds every thing (a whole listing synced it).
    static func synced(_ open: (String) throws -> Context, _ directory: String) throws -> Context {
        let context = try open(directory + "/synced.sqlite")
        let all = try fetch(context, FetchRequest(entity: "things"))
        XCTAssertNil(all.last?.error)
        XCTAssertEqual(all.last?.results.count, records.count)
        return context
    }

    /// Case 1: one attribute with two conditions.
    static func oneAttributeTwice(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        try check(open, directory, synced, "k > 0 AND k > 1", ["c", "d"])
        try check(open, directory, synced, "k == 1 AND k == 1", ["b"])
        try check(open, directory, synced, "s == 'a' AND s == 'a'", ["a", "c"])
        try check(open, directory, synced, "k IN {1, 2} AND k IN {2, 3}", ["c"])
        try check(open, directory, synced, "s IN {'a', 'b'} AND s IN {'b', 'c'}", ["b"])
        try check(open, directory, synced, "s == 'a' AND s == 'b'", [])
        try check(open, directory, synced, "k >= 1 AND k < 3 AND k != 2", ["b"])
    }

    /// Case 2: names Kinto reads as an operator, or ignores.
    static func operatorNames(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        try check(open, directory, synced, "min_age == 18", ["a"])
        try check(open, directory, synced, "min_age > 18", ["b"])
        try check(open, directory, synced, "in_stock == true", ["a"])
        try check(open, directory, synced, "in_stock == false", ["b"])
        try check(open, directory, synced, "_flag == 1", ["a"])
        try check(open, directory, synced, "_flag IN {2, 3}", ["b"])
    }

    /// Case 3: names outside Kinto's field-name characters, and dotted ones.
    static func unusualNames(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        try check(open, directory, synced, "`unit-price` < 5", ["a"])
        try check(open, directory, synced, "`unit-price` == 7", ["b"])
        try check(open, directory, synced, "`two words` IN {'x y'}", ["a"])
        try check(open, directory, synced, "`two words` == 'z'", ["b"])
        try check(open, directory, synced, "a.b == 'q'", ["a"])
    }

    /// Case 4: counts follow Tether's rules (nulls, missing, misfits), not the server's.
    static func countsAreTethers(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        try check(open, directory, synced, "n > 3", ["b"])
        try check(open, directory, synced, "n < 3", ["a"])
        try check(open, directory, synced, "n == 5", ["b"])
        try check(open, directory, synced, "n IN {1}", ["a"])
        try check(open, directory, synced, "n >= 0", ["a", "b"])
        try check(open, directory, synced, "in_stock IN {true}", ["a"])
        try check(open, directory, synced, "s == 'a'", ["a", "c"])
    }

    /// Case 5: a sort over arrays, objects and U+0000, read across pages.
    static func sortOverAwkwardValues(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        let fillers = (0..<60).map { "p\($0 < 10 ? "0" : "")\($0)" }
        // Null first (misfits too), ties by id; then text by scalars.
        let ascending = ["b", "c", "e", "f", "g", "h", "i"] + fillers + ["d", "a"]
        try check(open, directory, synced, nil, sort: "v", ascending)
        // Descending text first; the nulls then by k (an array is null too), ties by id.
        try check(open, directory, synced, "v != 'zz'", sort: "-v,k", ["a", "d", "e", "f", "g", "h", "i"] + fillers + ["b", "c"])
    }

    /// Case 6: with a limit, the cut is the cache's.
    static func limitCutIsTheCaches(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        try check(open, directory, synced, nil, sort: "n", limit: 2, ["c", "d"])
        try check(open, directory, synced, nil, sort: "-n", limit: 2, ["b", "a"])
        try check(open, directory, synced, nil, limit: 2, ["a", "b"])
        try check(open, directory, synced, "k >= 1", limit: 2, ["b", "c"])
        try check(open, directory, synced, "s == 'a'", limit: 1, ["a"])
        try check(open, directory, synced, "k >= 0", sort: "-k", limit: 3, ["d", "c", "b"])
    }

    /// Case 9: flat ORs and ANDs of 1,000 and 10,000 terms (SQLite refuses
    /// expressions deeper than 1,000; the SQL nests halves, and sets of
    /// values go as one IN), and a predicate with more values than SQLite
    /// binds is refused at the start, not by the store.
    static func bigPredicates(_ open: (String) throws -> Context, _ directory: String) throws {
        let synced = try synced(open, directory)
        defer { try? synced.close() }
        for terms in [1_000, 10_000] {
            let or = (0..<terms).map { "k == \($0 + 2)" }.joined(separator: " OR ")
            try check(open, directory, synced, or, ["c", "d"])
            let mixed = (0..<terms).map { $0 % 2 == 0 ? "k == \($0 + 3)" : "s ==[c] 'X\($0)'" }.joined(separator: " OR ")
            try check(open, directory, synced, "s == 'b' OR " + mixed, ["b", "d"])
            let and = (0..<terms).map { "k != \($0 + 2)" }.joined(separator: " AND ")
            try check(open, directory, synced, and + " AND k != nil", ["a", "b"])
            let texts = (0..<terms).map { "s != 'x\($0)'" }.joined(separator: " AND ")
            try check(open, directory, synced, texts + " AND s == 'a'", ["a", "c"])
            // Not one set: each term its own (SQLite takes about a second to prepare 10,000).
            let ranges = (0..<terms).map { "k < \($0 + 1)" }.joined(separator: " AND ")
            try check(open, directory, synced, ranges, ["a"])
        }
        var request = FetchRequest(entity: "things")
        request.predicate = "k IN {" + (0...FetchTask.mostValues).map(String.init).joined(separator: ",") + "}"
        // Refused at the first value past the limit, by its column.
        let column = ("k IN {" + (0..<FetchTask.mostValues).map { "\($0)," }.joined()).unicodeScalars.count + 1
        XCTAssertThrowsError(try synced.makeFetch(request)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .invalid)
            XCTAssertEqual((error as? TetherError)?.message,
                           "predicate: more than \(FetchTask.mostValues) values, the most one query of the store binds at column \(column)")
        }
    }
}

private func kintoThings(_ backend: KintoBackend) throws {
    // Records first, then the schema: Kinto validates writes against it, and
    // a real collection holds what was written before (or by other means).
    try backend.send("PUT", "/buckets/\(backend.bucket)/collections/things", #"{"data": {}}"#)
    let requests = ExactAnswerContract.records.map { record in
        #"{"method": "PUT", "path": "/buckets/\#(backend.bucket)/collections/things/records/\#(record.id)", "body": {"data": \#(record.fields)}}"#
    }
    for start in stride(from: 0, to: requests.count, by: 25) {
        try backend.send("POST", "/batch", #"{"requests": [\#(requests[start..<min(requests.count, start + 25)].joined(separator: ","))]}"#)
    }
    let properties = ExactAnswerContract.fields.map { #""\#($0.0)": {"type": "\#($0.1)"}"# }.joined(separator: ", ")
    try backend.send("PUT", "/buckets/\(backend.bucket)/collections/things",
                     #"{"data": {"schema": {"type": "object", "properties": {\#(properties)}}}}"#)
}

final class KintoExactAnswerTests: KintoTestCase {
    private func open(_ path: String) throws -> Context {
        try Context.open(ContextOptions(storePath: path), connection: backend.connection())
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        try kintoThings(backend)
    }

    func testOneAttributeTwice() throws { try ExactAnswerContract.oneAttributeTwice(open, directory) }
    func testOperatorNames() throws { try ExactAnswerContract.operatorNames(open, directory) }
    func testUnusualNames() throws { try ExactAnswerContract.unusualNames(open, directory) }
    func testCountsAreTethers() throws { try ExactAnswerContract.countsAreTethers(open, directory) }
    func testSortOverAwkwardValues() throws { try ExactAnswerContract.sortOverAwkwardValues(open, directory) }
    func testLimitCutIsTheCaches() throws { try ExactAnswerContract.limitCutIsTheCaches(open, directory) }
    func testBigPredicates() throws { try ExactAnswerContract.bigPredicates(open, directory) }
}

final class MemoryExactAnswerTests: DirectoryTestCase {
    private var server: MemoryServer!

    override func setUpWithError() throws {
        try super.setUpWithError()
        server = MemoryServer(name: "things-\(UUID().uuidString.prefix(8))", specs: [ExactAnswerContract.memorySpec], pageSize: 50)
        for record in ExactAnswerContract.records {
            server.put("things", id: record.id, try XCTUnwrap(JSON.parse(record.fields).objectValue))
        }
    }

    private func open(_ path: String) throws -> Context {
        try Context.open(ContextOptions(storePath: path), connection: MemoryConnection(server))
    }

    func testOneAttributeTwice() throws { try ExactAnswerContract.oneAttributeTwice(open, directory) }
    func testOperatorNames() throws { try ExactAnswerContract.operatorNames(open, directory) }
    func testUnusualNames() throws { try ExactAnswerContract.unusualNames(open, directory) }
    func testCountsAreTethers() throws { try ExactAnswerContract.countsAreTethers(open, directory) }
    func testSortOverAwkwardValues() throws { try ExactAnswerContract.sortOverAwkwardValues(open, directory) }
    func testLimitCutIsTheCaches() throws { try ExactAnswerContract.limitCutIsTheCaches(open, directory) }
    func testBigPredicates() throws { try ExactAnswerContract.bigPredicates(open, directory) }
}
