import XCTest
@testable import Tether

/// The statement cache (StatementCache, through Database and Store): which
/// statements it keeps, and that every one it lets go is finalized.
final class StatementCacheTests: DirectoryTestCase {

    private func model(_ properties: String, previous: Model? = nil) throws -> Model {
        ModelBuilder.build(specs: [KintoConnection.spec(from: try JSON.parse(#"{"id": "users", "schema": {"properties": \#(properties)}}"#),
                                                        bucket: "b", operations: .all)],
                           previous: previous)
    }

    func testTheLeastRecentlyUsedStatementIsEvictedAndFinalized() throws {
        let database = try Database(path: ":memory:", statementCapacity: 3)
        for sql in ["SELECT 'a'", "SELECT 'b'", "SELECT 'c'"] { _ = try database.statement(sql).rows() }
        _ = try database.statement("SELECT 'a'").rows()  // now b is the least recently used
        _ = try database.statement("SELECT 'd'").rows()
        XCTAssertNil(database.cachedStatement("SELECT 'b'"), "b, least recently used, was evicted")
        XCTAssertNotNil(database.cachedStatement("SELECT 'a'"), "a, used again, was kept")
        XCTAssertEqual(database.liveStatementCount, 3, "the evicted statement was finalized")
        _ = try database.statement("SELECT 'c'").rows()
        _ = try database.statement("SELECT 'e'").rows()
        XCTAssertNil(database.cachedStatement("SELECT 'a'"), "a, now least recently used, was evicted")
        XCTAssertEqual(["SELECT 'c'", "SELECT 'd'", "SELECT 'e'"].map { database.cachedStatement($0) != nil }, [true, true, true])
        XCTAssertEqual(database.prepareCount, 5, "kept statements were not prepared again")

        // One in use when evicted stays usable, and goes when its user is done.
        let held = try database.statement("SELECT 'c'")
        for sql in ["SELECT 'f'", "SELECT 'g'", "SELECT 'h'"] { _ = try database.statement(sql).rows() }
        XCTAssertNil(database.cachedStatement("SELECT 'c'"))
        XCTAssertEqual(try held.rows(), [[.text("c")]])
        XCTAssertEqual(database.liveStatementCount, 4, "the cache's 3 and the one held")
        withExtendedLifetime(held) {}
    }

    func testPinnedStatementsAreNeverEvicted() throws {
        let database = try Database(path: ":memory:", statementCapacity: 2)
        let begin = try database.statement("BEGIN IMMEDIATE", pinned: true)
        let commit = try database.statement("COMMIT", pinned: true)
        // Used unpinned first, then pinned: pinned from then on.
        let meta = try database.statement("SELECT 'meta'")
        XCTAssertTrue(try database.statement("SELECT 'meta'", pinned: true) === meta)
        for i in 0..<10 { _ = try database.statement("SELECT \(i)").rows() }
        XCTAssertTrue(database.cachedStatement("BEGIN IMMEDIATE") === begin)
        XCTAssertTrue(database.cachedStatement("COMMIT") === commit)
        XCTAssertTrue(database.cachedStatement("SELECT 'meta'") === meta)
        XCTAssertEqual(database.keptStatementCount, 5, "3 pinned and 2 others")
        // transaction() takes the pinned BEGIN and COMMIT.
        try database.transaction { _ = try database.statement("SELECT 'x'").rows() }
        XCTAssertTrue(database.cachedStatement("BEGIN IMMEDIATE") === begin)
        XCTAssertTrue(database.cachedStatement("COMMIT") === commit)
    }

    /// The statements every write and load run (BEGIN, COMMIT, the entity's
    /// upsert and load) outlast any number of other statements: the whole
    /// cache used to be emptied once it held 128.
    func testAStoresHotStatementsOutlastManyOthers() throws {
        let store = try Store(path: ":memory:")
        let model = try model(#"{"Name": {"type": "string"}}"#)
        try store.adopt(model, identity: "test")
        let users = model.entity(named: "users")!
        try store.write([Record(entity: users, fields: [("id", .string("u1")), ("Name", .string("Ann"))])], of: users, fetchedAt: 1)
        XCTAssertNotNil(try store.load(users, id: "u1"))
        let load = try XCTUnwrap(store.loadStatement(users))
        // In memory: one connection, which both writes and loads.
        let prepared = try store.withDatabase { $0.prepareCount }
        try store.withDatabase { database in
            for i in 0..<(Database.statementCacheLimit * 2) { _ = try database.statement("SELECT \(i)").rows() }
        }
        XCTAssertTrue(store.loadStatement(users) === load, "the load statement was evicted")
        try store.write([Record(entity: users, fields: [("id", .string("u2")), ("Name", .string("Bo"))])], of: users, fetchedAt: 2)
        XCTAssertNotNil(try store.load(users, id: "u2"))
        XCTAssertEqual(try store.withDatabase { $0.prepareCount }, prepared + Database.statementCacheLimit * 2,
                       "a write and a load after them prepared nothing again")
    }

    func testAStatementWhoseStepFailedIsPreparedAnew() throws {
        let database = try Database(path: ":memory:")
        try database.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        let sql = "INSERT INTO t (id) VALUES (?)"
        do {
            let insert = try database.statement(sql)
            try insert.run([.integer(1)])
            XCTAssertThrowsError(try database.statement(sql).run([.integer(1)])) { error in
                XCTAssertTrue("\(error)".contains("UNIQUE"), "\(error)")
            }
            XCTAssertNil(database.cachedStatement(sql), "the failed statement was dropped")
            let again = try database.statement(sql)
            XCTAssertFalse(again === insert)
            try again.run([.integer(2)])
        }
        XCTAssertEqual(try database.statement("SELECT id FROM t ORDER BY id").rows(), [[.integer(1)], [.integer(2)]])
        XCTAssertEqual(database.prepareCount, 3)

        // A pinned one too: BEGIN inside a transaction fails.
        try database.transaction {
            XCTAssertThrowsError(try database.statement("BEGIN IMMEDIATE", pinned: true).run())
            XCTAssertNil(database.cachedStatement("BEGIN IMMEDIATE"))
        }
        try database.transaction {}
        XCTAssertNotNil(database.cachedStatement("BEGIN IMMEDIATE"), "the next transaction prepared it anew")
        XCTAssertEqual(database.liveStatementCount, database.keptStatementCount, "the failed ones were finalized")
    }

    /// Adopting a model (which creates, alters and retypes tables) leaves no
    /// statement prepared for the tables as they were, on either connection.
    func testMigrationClearsTheCache() throws {
        let store = try Store(path: directory + "/migrate.sqlite")
        let before = try model(#"{"Name": {"type": "string"}, "Age": {"type": "string"}}"#)
        try store.adopt(before, identity: "test")
        let users = before.entity(named: "users")!
        try store.write([Record(entity: users, fields: [("id", .string("u1")), ("Name", .string("Ann")), ("Age", .string("7"))])],
                        of: users, fetchedAt: 1)
        XCTAssertNotNil(try store.load(users, id: "u1"))
        XCTAssertNotNil(store.loadStatement(users))
        try store.withDatabase { database in XCTAssertGreaterThan(database.keptStatementCount, 0) }

        // Age retyped: its column is dropped and made again.
        let after = try model(#"{"Name": {"type": "string"}, "Age": {"type": "integer"}}"#, previous: before)
        try store.adopt(after, identity: "test")
        XCTAssertNil(store.loadStatement(users), "the reading connection's statements were cleared")
        try store.withDatabase { database in
            XCTAssertEqual(database.keptStatementCount, 0, "the writing connection's statements were cleared")
            XCTAssertEqual(database.liveStatementCount, 0)
        }
        let retyped = after.entity(named: "users")!
        XCTAssertEqual(try store.load(retyped, id: "u1")?.record.values[retyped.attributeIndex(named: "Name")!], .text("Ann"))
    }

    /// Many more distinct statements than the cache holds, pinned ones used
    /// among them and some held past their eviction: every statement let go
    /// is finalized, and the pinned ones are the same throughout.
    func testManyDistinctStatementsLeakNone() throws {
        let capacity = 16
        let database = try Database(path: ":memory:", statementCapacity: capacity)
        try database.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        let pinnedSQL = ["INSERT OR REPLACE INTO t (id, v) VALUES (?, ?)", "SELECT v FROM t WHERE id = ?", "SELECT count(*) FROM t"]
        let pinned = try pinnedSQL.map { try database.statement($0, pinned: true) }
        var held: [Statement] = []
        for i in 0..<2_000 {
            _ = try database.statement("SELECT v FROM t WHERE id = ? AND \(i) = \(i)").rows([.integer(Int64(i % 50))])
            if i % 7 == 0 { try database.transaction { try database.statement(pinnedSQL[0], pinned: true).run([.integer(Int64(i % 50)), .text("v\(i)")]) } }
            if i % 11 == 0 { _ = try database.statement(pinnedSQL[1], pinned: true).rows([.integer(Int64(i % 50))]) }
            if i % 13 == 0 { _ = try database.statement(pinnedSQL[2], pinned: true).rows() }
            if i % 100 == 0 { held.append(try database.statement("SELECT \(i) FROM t")) }
            if i % 500 == 499 { held.removeAll() }
            XCTAssertLessThanOrEqual(database.keptStatementCount, capacity + pinnedSQL.count + 3)  // + BEGIN, COMMIT, ROLLBACK
        }
        XCTAssertEqual(database.liveStatementCount, database.keptStatementCount, "no statement outlived its last holder")
        XCTAssertEqual(database.keptStatementCount, capacity + pinnedSQL.count + 2, "the unpinned statements, the pinned, BEGIN and COMMIT")
        for (sql, statement) in zip(pinnedSQL, pinned) { XCTAssertTrue(database.cachedStatement(sql) === statement, sql) }
        database.clearStatements()
        XCTAssertEqual(database.liveStatementCount, pinned.count, "only those this test still holds")
        withExtendedLifetime(pinned) {}
    }
}
