import Foundation
import XCTest
@testable import Tether

/// The PostgreSQL connection against the real server scripts/with-postgres
/// starts (TETHER_PG_CONNINFO): the catalog as specs, listings, exact
/// filters, fetches compared with the same query run in SQL, peek/get,
/// offline, bad options. Each test makes a schema of its own.
final class PostgresTests: PostgresTestCase {
    override var schemaPrefix: String { "t" }

    override func schemaStatements(_ s: String) -> [String] {
        [
            "CREATE TYPE \(s).mood AS ENUM ('sad', 'ok', 'happy')",
            "CREATE DOMAIN \(s).short AS varchar(10) NOT NULL",
            "CREATE TABLE \(s).owners (id int8 PRIMARY KEY, name text NOT NULL)",
            """
            CREATE TABLE \(s).things (id text PRIMARY KEY, title varchar(40) NOT NULL, rank int4, small int2,
              price numeric(10, 2), ratio float8, done bool NOT NULL DEFAULT false, at timestamptz, day date,
              doc jsonb, tags text[], status text CHECK (status IN ('open', 'closed')), mood \(s).mood,
              code \(s).short, uid uuid, "Odd Name" text,
              owner int8 REFERENCES \(s).owners (id) ON DELETE CASCADE,
              helper int8 REFERENCES \(s).owners (id) ON DELETE SET NULL)
            """,
            "CREATE TABLE \(s).nokey (a int)",
            "CREATE TABLE \(s).pair (a int, b int, PRIMARY KEY (a, b))",
            "CREATE TABLE \(s).many (id int8 PRIMARY KEY, n int4)",
            "INSERT INTO \(s).owners VALUES (1, 'ann'), (2, 'bob')",
            """
            INSERT INTO \(s).things SELECT (ARRAY['a', 'B', 'é', 'z', 'Ä'])[i % 5 + 1] || i,
              (ARRAY['apple', 'Banana', 'éclair', 'zeta', 'Äpfel', 'apple pie'])[i % 6 + 1],
              CASE WHEN i % 7 = 0 THEN NULL ELSE (i * 37) % 23 - 5 END, i % 3, i * 1.25,
              CASE WHEN i % 4 = 0 THEN NULL ELSE i / 8.0 END, i % 2 = 0,
              timestamptz '2026-01-01 00:00:00+00' + i * interval '1 hour 1 second', date '2026-01-01' + i,
              jsonb_build_object('n', i), ARRAY['x', 'y' || i],
              CASE WHEN i % 5 = 0 THEN NULL WHEN i % 2 = 0 THEN 'open' ELSE 'closed' END,
              ((ARRAY['sad', 'ok', 'happy'])[i % 3 + 1])::\(s).mood, 'c' || i, md5(i::text)::uuid,
              CASE WHEN i % 4 = 0 THEN 'q' ELSE NULL END,
              CASE WHEN i % 3 = 0 THEN NULL ELSE 1 + i % 2 END, NULL
            FROM generate_series(0, 39) i
            """,
            "INSERT INTO \(s).many SELECT i, i % 10 FROM generate_series(1, 2500) i",
        ]
    }

    func connection(schema: String? = nil) throws -> PostgresConnection {
        var options = PostgresOptions(conninfo: conninfo, schema: schema ?? self.schema)
        options.timeoutMilliseconds = 5_000
        return try PostgresConnection(options)
    }

    func open(_ name: String = "store.sqlite") throws -> Context {
        try Context.open(ContextOptions(storePath: directory + "/" + name), connection: connection())
    }

    func testSpecsFromTheCatalog() throws {
        let context = try open()
        defer { try? context.close() }
        let model = context.model
        XCTAssertEqual(model.entities.map(\.name), ["many", "owners", "things"], "no key, or a key of two columns: left out")
        let things = try XCTUnwrap(model.entity(named: "things"))
        XCTAssertEqual(things.spec.idField, "id")
        XCTAssertEqual(things.spec.versionField, "xmin")
        XCTAssertEqual(things.spec.operations, .all, "the role's privileges: an owner's are all")
        func attribute(_ name: String) throws -> Attribute { try XCTUnwrap(things.attributes.first { $0.name == name }, name) }
        let types: [(String, AttributeType)] = [
            ("title", .text), ("rank", .integer), ("small", .integer), ("price", .real), ("ratio", .real), ("done", .boolean),
            ("at", .text), ("day", .text), ("doc", .json), ("tags", .json), ("status", .text), ("mood", .text), ("code", .text),
            ("uid", .text), ("Odd Name", .text), ("owner", .text), ("helper", .text),
        ]
        for (name, type) in types { XCTAssertEqual(try attribute(name).type, type, name) }
        XCTAssertEqual(try types.map(\.0).filter { try attribute($0).isRequired }, ["title", "done", "code"],
                       "NOT NULL, of the column or its domain")
        XCTAssertEqual(try attribute("status").allowedValues, [.text("open"), .text("closed")], "CHECK (status IN (...))")
        XCTAssertEqual(try attribute("mood").allowedValues, [.text("sad"), .text("ok"), .text("happy")], "the enum's labels")
        XCTAssertNil(try attribute("title").allowedValues)
        XCTAssertEqual(try attribute("owner").reference, Reference(target: "owners", inverse: "things_owner", deleteRule: .cascade))
        XCTAssertEqual(try attribute("helper").reference, Reference(target: "owners", inverse: "things_helper", deleteRule: .nullify))
        XCTAssertEqual(context.model.diagnostics.filter { $0.entity == "things" }.map(\.message), [])
    }

    func testPeekAndGetReadRowsAsTheDocumentSays() throws {
        let context = try open()
        defer { try? context.close() }
        let thing = try context.object(entity: "things", id: "a0")
        XCTAssertThrowsError(try thing.peek("title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notCached) }
        // A get answers the cache now (nothing yet) and refreshes in the background.
        XCTAssertThrowsError(try thing.get("title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notCached) }
        XCTAssertTrue(eventually { (try? thing.peek("title")) == .text("apple") })
        XCTAssertEqual(try thing.peek("rank"), .null)
        XCTAssertEqual(try thing.peek("small"), .integer(0))
        XCTAssertEqual(try thing.peek("price"), .real(0))
        XCTAssertEqual(try thing.peek("done"), .boolean(true))
        XCTAssertEqual(try thing.peek("at"), .text("2026-01-01T00:00:00.000000Z"))
        XCTAssertEqual(try thing.peek("day"), .text("2026-01-01"))
        XCTAssertEqual(try thing.peek("doc"), .json(#"{"n":0}"#))
        XCTAssertEqual(try thing.peek("tags"), .json(#"["x","y0"]"#))
        XCTAssertEqual(try thing.peek("mood"), .text("sad"))
        XCTAssertEqual(try thing.peek("uid"), .text("cfcd2084-95d5-65ef-66e7-dff9f98764da"))
        XCTAssertEqual(try thing.peek("Odd Name"), .text("q"))
        let seven = try context.object(entity: "things", id: "é7")
        _ = try? seven.get("price")
        XCTAssertTrue(eventually { (try? seven.peek("price")) == .real(8.75) })
        XCTAssertEqual(try seven.peek("ratio"), .real(0.875))
        XCTAssertEqual(try seven.peek("owner"), .text("2"), "a key as text")
        XCTAssertEqual(try seven.peek("status"), .text("closed"))
        let bob = try context.object(entity: "owners", id: "2")
        _ = try? bob.get("name")
        XCTAssertTrue(eventually { (try? bob.peek("name")) == .text("bob") })
        // A record the server does not have: the refresh says so (NOT_FOUND).
        let nope = try context.object(entity: "things", id: "nope")
        _ = try? nope.get("title")
        XCTAssertTrue(eventually { ((try? nope.peek("title")) == nil) && {
            do { _ = try nope.peek("title"); return false } catch { return (error as? TetherError)?.kind == .notFound }
        }() })
    }

    /// Listings page by key (1,000 rows a page) and give every row once.
    func testWholeListingsPageByKey() throws {
        let context = try open()
        defer { try? context.close() }
        var request = FetchRequest(entity: "many")
        request.resultType = .ids
        request.sort = "id"
        let answer = try XCTUnwrap(fetch(context, request).last)
        XCTAssertNil(answer.error)
        let ids = try (0..<answer.results.count).map { try answer.results.id(at: $0) }
        let expected = try admin.query("SELECT id::text FROM \(schema).many ORDER BY id::text COLLATE \"C\"").map { $0[0]! }
        XCTAssertEqual(ids, expected)
        XCTAssertEqual(ids.count, 2500)
    }

    func testOfflineWhenTheServerIsStopped() throws {
        let dir = try XCTUnwrap(ProcessInfo.processInfo.environment["TETHER_PG_DIR"])
        let first = try open()
        XCTAssertNil(try fetch(first, FetchRequest(entity: "things")).last?.error)
        try first.close()
        try script("pg-stop", dir)
        defer { XCTAssertNoThrow(try script("pg-start", dir)) }
        let offline = try open()
        defer { try? offline.close() }
        XCTAssertFalse(offline.isOnline)
        var request = FetchRequest(entity: "things")
        request.policy = .cacheOnly
        XCTAssertEqual(try fetch(offline, request).last?.results.count, 40)
        request.policy = .serverOnly
        XCTAssertEqual(try fetch(offline, request).last?.error?.kind, .network)
        XCTAssertThrowsError(try open("never-opened.sqlite"), "no store to open offline from") {
            XCTAssertEqual(($0 as? TetherError)?.kind, .network)
        }
    }

    func testBadOptionsAndUnknownNames() throws {
        func kind(_ body: () throws -> Any) -> TetherError.Kind? {
            do { _ = try body() } catch { return (error as? TetherError)?.kind }
            return nil
        }
        XCTAssertEqual(kind { try PostgresConnection(PostgresOptions(conninfo: "host=127.0.0.1 bogus=1")) }, .invalid)
        XCTAssertEqual(kind { try PostgresConnection(PostgresOptions(conninfo: "host='unterminated")) }, .invalid)
        XCTAssertEqual(kind { try self.connection(schema: "") }, .invalid)
        XCTAssertEqual(kind { try self.connection(schema: String(repeating: "x", count: 64)) }, .invalid)
        func openWith(_ conninfo: String, schema: String? = nil) throws -> Context {
            var options = PostgresOptions(conninfo: conninfo, schema: schema ?? self.schema)
            options.timeoutMilliseconds = 3_000
            return try Context.open(ContextOptions(storePath: directory + "/\(UUID()).sqlite"), connection: PostgresConnection(options))
        }
        XCTAssertEqual(kind { try openWith(self.conninfo, schema: "no_such_schema") }, .notFound)
        XCTAssertEqual(kind { try openWith(self.conninfo + " dbname=no_such_db") }, .notFound)
        XCTAssertEqual(kind { try openWith(self.conninfo + " user=no_such_role") }, .auth)
        XCTAssertEqual(kind { try openWith("host=127.0.0.1 port=1 user=kinto dbname=kinto") }, .network)
        let secret = try PostgresConnection(PostgresOptions(conninfo: conninfo + " password=s3cret", schema: schema))
        XCTAssertFalse(secret.identity.contains("s3cret"), secret.identity)
        XCTAssertTrue(secret.identity.contains("dbname=kinto"), secret.identity)
    }

    func script(_ name: String, _ argument: String) throws { try runScript(name, argument) }
}
