import Foundation
import XCTest
@testable import Tether

/// Saves over PostgreSQL that the server refuses or that meet another
/// client's change: server_wins and client_wins settle a conflict as over
/// Kinto; a foreign key and a unique index refuse their record only
/// (TETHER_E_INVALID with PostgreSQL's words), the neighbours saved and the
/// refused change kept; NOT NULL is `required`, refused at the edit, and
/// one added after the catalog was read is refused by the server.
final class PostgresRefusalTests: PostgresTestCase {
    override var schemaPrefix: String { "v" }

    override func schemaStatements(_ schema: String) -> [String] {
        [
            "CREATE TABLE \(schema).owners (id text PRIMARY KEY)",
            "CREATE TABLE \(schema).items (id text PRIMARY KEY, title text NOT NULL, n int4, code text UNIQUE, "
                + "owner text REFERENCES \(schema).owners (id))",
            "INSERT INTO \(schema).owners VALUES ('ann')",
            "INSERT INTO \(schema).items VALUES ('a', 'one', 1, 'taken', 'ann'), ('b', 'two', 2, NULL, NULL), "
                + "('c', 'three', 3, NULL, NULL)",
        ]
    }

    func open() throws -> Context {
        let context = try openContext(store: "store-\(UUID().uuidString).sqlite")
        for entity in ["owners", "items"] { XCTAssertNil(try fetch(context, FetchRequest(entity: entity)).last?.error) }
        return context
    }

    func row(_ id: String) throws -> String? {
        try admin.query("SELECT title || ':' || coalesce(n::text, '-') FROM \(schema).items WHERE id = $1", [id]).first?.first ?? nil
    }

    func text(_ object: ManagedObject, _ key: String) throws -> String? {
        if case .text(let text) = try object.peek(key) { return text }
        return nil
    }

    func testServerWinsTakesTheServersRecordAndClientWinsWritesOurs() throws {
        let context = try open()
        defer { try? context.close() }
        _ = try admin.query("UPDATE \(schema).items SET title = 'theirs' WHERE id IN ('a', 'b')")  // another client
        let a = try context.object(entity: "items", id: "a")
        let b = try context.object(entity: "items", id: "b")
        try a.set("n", .integer(10))
        try b.set("n", .integer(20))

        // Only a's change goes first: server_wins drops it and takes the server's row.
        try b.rollback()
        let dropped = try SaveContract.save(context, .serverWins)
        XCTAssertNil(dropped.error, "\(dropped.failures.map { $0.error })")
        XCTAssertEqual(dropped.discarded, 1)
        XCTAssertEqual(try row("a"), "theirs:1", "the server's row is left as it is")
        XCTAssertEqual(try text(a, "title"), "theirs", "and the object shows it")
        XCTAssertEqual(try a.peek("n"), .integer(1))
        XCTAssertFalse(context.hasChanges)

        // client_wins writes every value of ours over the server's.
        try b.set("n", .integer(20))
        let written = try SaveContract.save(context, .clientWins)
        XCTAssertNil(written.error, "\(written.failures.map { $0.error })")
        XCTAssertEqual(written.saved, 1)
        XCTAssertEqual(try row("b"), "two:20", "our title over theirs, and our n")
        XCTAssertEqual(try text(b, "title"), "two")
        XCTAssertFalse(context.hasChanges)
    }

    func testAForeignKeyAUniqueIndexAndNotNullRefuseTheirRecordOnly() throws {
        let context = try open()
        defer { try? context.close() }
        let orphan = try context.insert(entity: "items", id: "d", values: [("title", .text("orphan")), ("owner", .text("nobody"))])
        let duplicate = try context.object(entity: "items", id: "b")
        try duplicate.set("code", .text("taken"))
        let fine = try context.object(entity: "items", id: "c")
        try fine.set("title", .text("fine"))
        let result = try SaveContract.save(context)
        let failed = Dictionary(uniqueKeysWithValues: result.failures.map { ($0.object.id, $0.error) })
        XCTAssertEqual(Set(failed.keys), ["d", "b"])
        XCTAssertEqual(failed["d"]?.kind, .invalid)
        XCTAssertTrue(failed["d"]?.message.contains("foreign key") ?? false, "PostgreSQL's words: \(String(describing: failed["d"]))")
        XCTAssertEqual(failed["b"]?.kind, .invalid)
        XCTAssertTrue(failed["b"]?.message.contains("unique") ?? false, "PostgreSQL's words: \(String(describing: failed["b"]))")
        XCTAssertEqual(try row("c"), "fine:3", "the neighbour is saved")
        XCTAssertNil(try row("d"))
        XCTAssertTrue(orphan.hasChanges && duplicate.hasChanges, "the refused changes are kept")
        XCTAssertFalse(fine.hasChanges)

        // NOT NULL is the model's `required`: the edit is refused at once (TETHER_E_TYPE, as
        // the header says for null on a required attribute), nothing kept.
        XCTAssertThrowsError(try fine.set("title", .null)) { XCTAssertEqual(($0 as? TetherError)?.kind, .type) }
        XCTAssertFalse(fine.hasChanges)
        XCTAssertEqual(try row("c"), "fine:3")

        // A NOT NULL the model does not know of (added after the context read
        // the catalog): only the server can refuse it, and it fails its record only.
        _ = try admin.query("ALTER TABLE \(schema).items ALTER n SET NOT NULL")
        try fine.set("n", .null)
        let refused = try SaveContract.save(context)
        let notNull = refused.failures.first { $0.object.id == "c" }?.error
        XCTAssertEqual(notNull?.kind, .invalid)
        XCTAssertTrue(notNull?.message.contains("null value") ?? false, "PostgreSQL's words: \(String(describing: notNull))")
        XCTAssertEqual(try row("c"), "fine:3")
        XCTAssertTrue(fine.hasChanges)
        try fine.rollback()
        _ = try admin.query("ALTER TABLE \(schema).items ALTER n DROP NOT NULL")

        // Once the owner exists, the kept insert saves.
        _ = try admin.query("INSERT INTO \(schema).owners VALUES ('nobody')")
        try duplicate.rollback()
        let again = try SaveContract.save(context)
        XCTAssertNil(again.error, "\(again.failures.map { $0.error })")
        XCTAssertEqual(try row("d"), "orphan:-")
    }
}
