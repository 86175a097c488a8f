import XCTest
@testable import Tether

final class StoreTests: DirectoryTestCase {

    private func model(_ properties: String, previous: Model? = nil) throws -> Model {
        ModelBuilder.build(specs: [KintoConnection.spec(from: try JSON.parse(#"{"id": "users", "schema": {"properties": \#(properties)}}"#),
                                                        bucket: "b", operations: .all)],
                           previous: previous)
    }

    func testRecordsRoundTripWithMisfitsAndExtraFields() throws {
        let store = try Store(path: directory + "/s.sqlite")
        let model = try model(#"{"Name": {"type": "string"}, "Age": {"type": "integer"}, "Tags": {"type": "array"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        let json = try JSON.parse(#"{"id": "u1", "last_modified": 5, "Name": 42, "Age": 7, "Tags": ["a"], "Other": {"x": 1}}"#)
        try store.write([Record(entity: users, fields: json.objectValue!)], of: users, fetchedAt: 10)
        let row = try XCTUnwrap(store.load(users, id: "u1"))
        func value(_ name: String) -> Value { row.record.values[users.attributeIndex(named: name)!] }
        XCTAssertEqual(value("Name"), .json("42"), "a value of another type than the spec's is kept as JSON")
        XCTAssertEqual(value("Age"), .integer(7))
        XCTAssertEqual(value("Tags"), .json(#"["a"]"#))
        XCTAssertEqual(value("last_modified"), .integer(5))
        XCTAssertTrue(row.record.extra.contains { $0.key == "Other" })
        XCTAssertEqual(row.fetchedAt, 10)
    }

    /// Texts are bound through one block a statement keeps (its own copy
    /// for each use, under a size limit; SQLite's above it): every text of a
    /// write and of a lookup must still arrive whole and in its own place,
    /// whatever the mix of sizes, NULs and empties, and use after use as the
    /// block is reused and grown.
    func testBoundTextsArriveWholeWhateverTheirSizes() throws {
        let store = try Store(path: directory + "/texts.sqlite")
        let model = try model(#"{"A": {"type": "string"}, "B": {"type": "string"}, "C": {"type": "string"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        let texts = ["", "a", "nul\u{0}inside", String(repeating: "é", count: 3000), String(repeating: "x", count: 4096),
                     String(repeating: "y", count: 4097), "漢字", String(repeating: "z", count: 70_000)]
        var expected: [String: [String]] = [:]
        for round in 0..<40 {
            let id = "u\(round % 13)-" + texts[round % texts.count].prefix(3)
            let values = (0..<3).map { texts[(round * 7 + $0 * 3) % texts.count] + (round.isMultiple(of: 2) ? "" : "\(round)") }
            expected[id] = values
            try store.write([Record(entity: users, fields: [("id", .string(id)), ("A", .string(values[0])),
                                                            ("B", .string(values[1])), ("C", .string(values[2]))])],
                            of: users, fetchedAt: Int64(round + 1))
            for (known, want) in expected {
                let row = try XCTUnwrap(store.load(users, id: known), "round \(round): \(known.debugDescription)")
                let got = ["A", "B", "C"].map { row.record.values[users.attributeIndex(named: $0)!] }
                XCTAssertEqual(got, want.map(Value.text), "round \(round): \(known.debugDescription)")
            }
        }
        XCTAssertEqual(Set(try store.rows(users, ids: Array(expected.keys)).keys.map(\.string)), Set(expected.keys))
    }

    /// An object's first read loads its row on a connection of its own, so
    /// it does not wait while a write transaction (a fetch's page being
    /// stored) holds the store.
    func testLoadsDoNotWaitForAWriteTransaction() throws {
        let store = try Store(path: directory + "/reader.sqlite")
        let model = try model(#"{"Name": {"type": "string"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        try store.write([Record(entity: users, fields: [("id", .string("u1")), ("Name", .string("Ann"))])], of: users, fetchedAt: 1)
        let loaded = DispatchSemaphore(value: 0)
        let name = Lock<Value?>(nil)
        let waited = try store.holdingWriteTransaction {
            Thread.detachNewThread {
                let row = try? store.load(users, id: "u1")
                name.withLock { $0 = row?.record.values[users.attributeIndex(named: "Name")!] }
                loaded.signal()
            }
            return loaded.wait(timeout: .now() + 10) == .timedOut
        }
        XCTAssertFalse(waited, "the load waited for the write transaction")
        if waited { _ = loaded.wait(timeout: .now() + 10) }
        XCTAssertEqual(name.withLock { $0 }, .text("Ann"))
        XCTAssertEqual(try store.rows(users, ids: ["u1", "u2"]).keys.map(\.string), ["u1"])
    }

    /// A store with no file has no second connection: it reads where it writes.
    func testAStoreInMemoryLoadsFromItsOnlyConnection() throws {
        let store = try Store(path: ":memory:")
        let model = try model(#"{"Name": {"type": "string"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        try store.write([Record(entity: users, fields: [("id", .string("u1")), ("Name", .string("Ann"))])], of: users, fetchedAt: 1)
        XCTAssertEqual(try store.load(users, id: "u1")?.record.values[users.attributeIndex(named: "Name")!], .text("Ann"))
    }

    /// Pages of two listings can land in either order: an older version
    /// never replaces a newer one's values, but still counts as seen by the
    /// listing (so reconciling keeps the row); after lost history it does.
    func testOlderVersionsDoNotReplaceNewerOnes() throws {
        let store = try Store(path: directory + "/versions.sqlite")
        let model = try model(#"{"Name": {"type": "string"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        func record(_ version: Int64, _ name: String) throws -> Record {
            try Record(entity: users, fields: [("id", .string("u1")), ("last_modified", .integer(version)), ("Name", .string(name))])
        }
        func name() throws -> Value { try XCTUnwrap(store.load(users, id: "u1")).record.values[users.attributeIndex(named: "Name")!] }
        try store.write([record(5, "new")], of: users, fetchedAt: 1)
        let listing = try store.nextWrite()
        try store.write([record(3, "old")], of: users, fetchedAt: 2)
        XCTAssertEqual(try name(), .text("new"))
        XCTAssertEqual(try store.deleteRows(of: users, writtenBefore: listing), [], "the listing saw it")
        try store.write([record(5, "same version, sent again")], of: users, fetchedAt: 3)
        XCTAssertEqual(try name(), .text("same version, sent again"))
        try store.write([record(2, "restored")], of: users, fetchedAt: 4, acceptingOlder: true)
        XCTAssertEqual(try name(), .text("restored"))
    }

    /// Fetches index what they filter and sort by; a migration that drops an
    /// indexed column drops its index first (SQLite refuses otherwise).
    func testIndexesAreMadeOnDemandAndSurviveMigrations() throws {
        let path = directory + "/indexes.sqlite"
        let store = try Store(path: path)
        let first = try model(#"{"Name": {"type": "string"}, "Age": {"type": "integer"}, "City": {"type": "string"}}"#)
        try store.adopt(first, identity: "test")
        let users = first.entity(named: "users")!
        let age = users.attributeIndex(named: "Age")!
        let predicate = try Predicate.parse("Age > 30 AND Name BEGINSWITH[c] 'a' AND (City == 'x' OR City == 'y')", entity: users)
        XCTAssertEqual(predicate.indexableAttributes, [age], "only a plain comparison that must hold")
        try store.ensureIndexes(users, on: predicate.indexableAttributes)
        let database = try Database(path: path)
        defer { database.close() }
        let plan = try database.statement("EXPLAIN QUERY PLAN SELECT * FROM e\(users.code) WHERE a\(users.attributes[age].code) > 30")
            .rows().map { row in row.compactMap { if case .text(let s) = $0 { return s } else { return nil } }.joined() }.joined()
        XCTAssertTrue(plan.contains("USING INDEX"), plan)

        // Age becomes text: its column (and index) go, a new one comes.
        let second = try model(#"{"Name": {"type": "string"}, "Age": {"type": "string"}, "City": {"type": "string"}}"#, previous: first)
        XCTAssertNoThrow(try store.adopt(second, identity: "test"))
        let indexes = try database.statement("SELECT name FROM pragma_index_list(?)").rows([.text("e\(users.code)")])
        XCTAssertFalse(indexes.contains { $0.first == .text("x\(users.code)_\(users.attributes[age].code)") })
        store.close()
    }

    func testAnyFieldNameIsStoredAndReadBack() throws {
        let store = try Store(path: directory + "/names.sqlite")
        let model = try model(#"{"Robert\"); DROP TABLE users;--": {"type": "string"}, "Name": {"type": "string"}, "name": {"type": "integer"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        try store.write([Record(entity: users, fields: [("id", .string("u1")), ("Robert\"); DROP TABLE users;--", .string("x")),
                                                         ("Name", .string("N")), ("name", .integer(3))])],
                         of: users, fetchedAt: 1)
        let row = try XCTUnwrap(store.load(users, id: "u1"))
        func value(_ name: String) -> Value { row.record.values[users.attributeIndex(named: name)!] }
        XCTAssertEqual(value("Robert\"); DROP TABLE users;--"), .text("x"))
        XCTAssertEqual(value("Name"), .text("N"), "names differing only in case are two columns")
        XCTAssertEqual(value("name"), .integer(3))
    }

    /// 0.1 bound text by C string and cut it at U+0000 (issue 7, case 6).
    func testTextHoldingNULSurvivesAReopen() throws {
        let path = directory + "/nul.sqlite"
        let model = try model(#"{"Name": {"type": "string"}}"#)
        let users = model.entity(named: "users")!
        do {
            let store = try Store(path: path)
            try store.adopt(model, identity: "test")
            try store.write([Record(entity: users, fields: [("id", .string("u\u{0}1")), ("Name", .string("a\u{0}b"))])],
                             of: users, fetchedAt: 1)
            store.close()
        }
        let reopened = try Store(path: path)
        let row = try XCTUnwrap(reopened.load(users, id: "u\u{0}1"), "an id holding U+0000 finds its row")
        XCTAssertEqual(row.record.values[users.attributeIndex(named: "Name")!], .text("a\u{0}b"))
        XCTAssertNil(try reopened.load(users, id: "u"), "and is not cut short either")
    }

    func testMigrationAddsAndDropsColumnsAndKeepsRows() throws {
        let path = directory + "/m.sqlite"
        let store = try Store(path: path)
        let first = try model(#"{"Name": {"type": "string"}, "Gone": {"type": "string"}}"#)
        try store.adopt(first, identity: "test")
        let users1 = first.entity(named: "users")!
        try store.write([Record(entity: users1, fields: JSON.parse(#"{"id": "u1", "Name": "Ann", "Gone": "x"}"#).objectValue!)],
                         of: users1, fetchedAt: 10)
        let second = try model(#"{"Name": {"type": "string"}, "New": {"type": "integer"}}"#, previous: first)
        try store.adopt(second, identity: "test")
        store.close()

        let reopened = try Store(path: path)
        let saved = try XCTUnwrap(reopened.savedModel(identity: "test"))
        let users = saved.entity(named: "users")!
        XCTAssertNil(users.attributeIndex(named: "Gone"))
        let row = try XCTUnwrap(reopened.load(users, id: "u1"))
        XCTAssertEqual(row.record.values[users.attributeIndex(named: "Name")!], .text("Ann"))
        XCTAssertEqual(row.record.values[users.attributeIndex(named: "New")!], .null)
        XCTAssertEqual(row.fetchedAt, 0, "rows are stale after their table changed")
    }

    func testStoreOfAnotherServerIsRefused() throws {
        let store = try Store(path: directory + "/i.sqlite")
        try store.adopt(try model("{}"), identity: "server A")
        XCTAssertThrowsError(try store.savedModel(identity: "server B")) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .store)
        }
    }

    func testUnopenableStoreIsAStoreError() {
        XCTAssertThrowsError(try Store(path: directory + "/no/such/dir/s.sqlite")) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .store)
        }
    }
}
