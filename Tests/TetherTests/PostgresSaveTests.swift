import Foundation
import XCTest
@testable import Tether

/// Saves over PostgreSQL (PostgresWrites): conditional on the row's xmin,
/// one transaction per batch, a savepoint per record; conflicts reported
/// as over Kinto so merge policies work unchanged.
final class PostgresSaveTests: PostgresTestCase {
    override var schemaPrefix: String { "w" }

    override func schemaStatements(_ schema: String) -> [String] {
        [
            "CREATE TABLE \(schema).items (id int8 PRIMARY KEY, title text NOT NULL, n int4 CHECK (n >= 0))",
            "INSERT INTO \(schema).items VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3)",
        ]
    }

    func open(_ conninfo: String? = nil) throws -> Context {
        var options = PostgresOptions(conninfo: conninfo ?? self.conninfo, schema: schema)
        options.timeoutMilliseconds = 5_000
        let context = try Context.open(ContextOptions(storePath: directory + "/store-\(UUID().uuidString).sqlite"),
                                       connection: PostgresConnection(options))
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        return context
    }

    /// The table's rows as "id:title:n", by id.
    func rows() throws -> [String] {
        try admin.query("SELECT id::text || ':' || title || ':' || coalesce(n::text, '-') FROM \(schema).items ORDER BY id")
            .map { $0[0] ?? "?" }
    }

    func testInsertUpdateDeleteReachTheTable() throws {
        let context = try open()
        defer { try? context.close() }
        let two = try context.object(entity: "items", id: "2")
        let before = try two.version()
        try two.set("title", .text("TWO"))
        let made = try context.insert(entity: "items", id: "4")
        try made.set("title", .text("four"))
        try made.set("n", .integer(4))
        try context.object(entity: "items", id: "3").delete()
        let result = try SaveContract.save(context)
        XCTAssertNil(result.error, "\(result.failures.map { $0.error })")
        XCTAssertEqual(result.saved, 3)
        XCTAssertEqual(try rows(), ["1:one:1", "2:TWO:2", "4:four:4"])
        XCTAssertNotEqual(try two.version(), before, "the version is the row's new xmin")
        let xmin = try admin.query("SELECT xmin::text FROM \(schema).items WHERE id = 2").first?.first ?? nil
        XCTAssertEqual(try two.version(), Int64(xmin ?? ""))
        XCTAssertFalse(context.hasChanges)
    }

    func testAConflictIsReportedAndMergedAsOverKinto() throws {
        let context = try open()
        defer { try? context.close() }
        _ = try admin.query("UPDATE \(schema).items SET title = 'theirs' WHERE id = 1")  // another client
        let one = try context.object(entity: "items", id: "1")
        try one.set("n", .integer(10))
        let reported = try SaveContract.save(context, .report)
        XCTAssertEqual(reported.failures.count, 1)
        XCTAssertNotNil(reported.failures.first?.conflict, "a conflict, with the server's record")
        XCTAssertEqual(try rows()[0], "1:theirs:1", "nothing written")
        XCTAssertTrue(context.hasChanges, "the change stays pending")
        let merged = try SaveContract.save(context, .mergeProperties)
        XCTAssertNil(merged.error, "\(merged.failures.map { $0.error })")
        XCTAssertEqual(try rows()[0], "1:theirs:10", "their title and our n")
    }

    func testRefusedValuesFailTheirRecordOnly() throws {
        let context = try open()
        defer { try? context.close() }
        let bad = try context.object(entity: "items", id: "1")
        try bad.set("n", .integer(-5))  // the check refuses it
        let good = try context.object(entity: "items", id: "2")
        try good.set("title", .text("fine"))
        let result = try SaveContract.save(context)
        XCTAssertEqual(result.failures.count, 1)
        XCTAssertEqual(result.failures.first?.object.id, "1")
        XCTAssertEqual(result.failures.first?.error.kind, .invalid, "\(String(describing: result.failures.first?.error))")
        XCTAssertEqual(try rows(), ["1:one:1", "2:fine:2", "3:three:3"], "the neighbour is saved, the refused one not")
    }

    func testAWriteSentAgainAfterALostAnswerIsNotAppliedTwice() throws {
        let connection = try PostgresConnection(options)
        defer { connection.shutdown() }
        let specs: [Spec] = wait { connection.specs($0) }
        let spec = try XCTUnwrap(specs.first { $0.name == "items" })
        let xminText = try admin.query("SELECT xmin::text FROM \(schema).items WHERE id = 1").first?.first ?? nil
        let xmin = try XCTUnwrap(Int64(xminText ?? ""))
        let write = RecordWrite(spec: spec, id: "1", kind: .patch, fields: [("n", .integer(7))], ifVersion: xmin)
        let first: [WriteOutcome] = wait { done in connection.write([write]) { done(.success($0)) } }
        guard case .written = first.first else { return XCTFail("first: \(first)") }
        let again: [WriteOutcome] = wait { done in connection.write([write]) { done(.success($0)) } }
        guard case .conflict(let current) = again.first else { return XCTFail("again: \(again)") }
        XCTAssertEqual(SaveContract.field(current, "n"), .integer(7), "the server's record is the first write's")
        let created = RecordWrite(spec: spec, id: "9", kind: .create, fields: [("title", .string("nine"))])
        let made: [WriteOutcome] = wait { done in connection.write([created]) { done(.success($0)) } }
        guard case .written = made.first else { return XCTFail("a create: \(made)") }
        let madeAgain: [WriteOutcome] = wait { done in connection.write([created]) { done(.success($0)) } }
        guard case .conflict = madeAgain.first else {
            return XCTFail("a create sent again finds the record")
        }
        XCTAssertEqual(try rows(), ["1:one:7", "2:two:2", "3:three:3", "9:nine:-"])
    }

    func testATableTheRoleMayNotWriteRefusesTheSave() throws {
        // The owner gives up its own write privileges: the role may SELECT only.
        _ = try admin.query("REVOKE INSERT, UPDATE, DELETE ON \(schema).items FROM CURRENT_USER")
        let context = try open()
        defer { try? context.close() }
        let entity = try XCTUnwrap(context.model.entity(named: "items"))
        XCTAssertEqual(entity.operations, [.fetch], "SELECT only")
        let one = try context.object(entity: "items", id: "1")
        do {
            try one.set("title", .text("mine"))
            let result = try SaveContract.save(context)
            XCTAssertEqual(result.failures.first?.error.kind, .notAllowed, "\(String(describing: result.error))")
        } catch let error as TetherError {
            XCTAssertEqual(error.kind, .notAllowed)
        }
        XCTAssertEqual(try rows()[0], "1:one:1")
    }

    func testAServerStoppedMidSaveLosesNothing() throws {
        let dir = try XCTUnwrap(ProcessInfo.processInfo.environment["TETHER_PG_DIR"])
        let context = try open()
        defer { try? context.close() }
        try context.object(entity: "items", id: "1").set("title", .text("kept"))
        admin.close()
        try runScript("pg-stop", dir)
        let failed = try SaveContract.save(context)
        XCTAssertNotNil(failed.error ?? failed.failures.first?.error, "a save with the server stopped fails")
        XCTAssertTrue(context.hasChanges, "and keeps the change")
        try runScript("pg-start", dir)
        let saved = try SaveContract.save(context)
        XCTAssertNil(saved.error, "\(saved.failures.map { $0.error })")
        XCTAssertEqual(try rows()[0], "1:kept:1")
        XCTAssertFalse(context.hasChanges)
    }

    /// A connection call's answer, waited for.
    private func wait<T: Sendable>(_ call: (@escaping @Sendable (Result<T, TetherError>) -> Void) -> any Cancellable) -> T {
        let answer = ConditionLock<Result<T, TetherError>?>(nil)
        _ = call { result in answer.withLock { $0 = result } }
        let result = answer.withLock(when: { $0 != nil }, until: MonotonicTime.now().adding(milliseconds: 20_000)) { value, _ in value }
        switch result {
        case .success(let value)?: return value
        case .failure(let error)?: XCTFail("\(error)"); fatalError("\(error)")
        case nil: XCTFail("no answer"); fatalError("no answer")
        }
    }
}
