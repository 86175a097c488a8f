import Foundation
import XCTest
@testable import Tether

/// The differential test's data set in PostgreSQL (TETHER_PG_CONNINFO): a
/// schema of its own with the table things(id text PRIMARY KEY, t text,
/// u text, n int8, r float8, b bool, j jsonb). A typed column holds only
/// values of its type, so a misfit is left out (NULL), as is text holding
/// U+0000, which PostgreSQL cannot store. Text columns (the key too) are
/// in ICU's root collation where the server has it; `stored`, the reference's
/// records, is then read back as the connection decodes rows (jsonb's key
/// order and numbers, float8's text), so the predicates and sorts are what
/// the test checks, not the decoding. The schema is dropped with the object.
final class PostgresSeeded: Seeded {
    let storePath: String
    let conninfo: String
    let schema: String
    let stored: [RecordFields]?

    static var isAvailable: Bool { ProcessInfo.processInfo.environment["TETHER_PG_CONNINFO"] != nil }

    static func requireServer() throws {
        guard isAvailable else {
            throw XCTSkip("TETHER_PG_CONNINFO is not set: run under scripts/with-postgres (scripts/run-tests postgres)")
        }
    }

    init(_ records: [RecordFields], _ directory: String) throws {
        try Self.requireServer()
        conninfo = ProcessInfo.processInfo.environment["TETHER_PG_CONNINFO"]!
        schema = "diff_" + UUID().uuidString.prefix(8).lowercased()
        storePath = directory + ".sqlite"
        let admin = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 10_000)
        defer { admin.close() }
        _ = try admin.query("CREATE SCHEMA \(schema)")
        // Text columns in a linguistic collation, as most databases' are: the
        // connection must compare them bytewise itself (the test cluster's default is C).
        let collation = try admin.query("""
            SELECT collname FROM pg_collation WHERE collname IN ('und-x-icu', 'en_US.utf8', 'en_US')
            ORDER BY collname = 'und-x-icu' DESC LIMIT 1
            """).first?.first ?? nil
        let text = collation.map { "text COLLATE \"\($0)\"" } ?? "text"
        _ = try admin.query("""
            CREATE TABLE \(schema).things (id \(text) PRIMARY KEY, t \(text), u \(text), n int8, r float8, b bool, j jsonb)
            """)
        for fields in records {
            var columns = ["id"], values = [Self.id(fields)]
            for (name, value) in fields where name != "id" {
                guard let text = Self.storable(name, value) else { continue }
                columns.append(name)
                values.append(text)
            }
            let placeholders = values.indices.map { "$\($0 + 1)" }.joined(separator: ", ")
            _ = try admin.query("INSERT INTO \(schema).things (\(columns.joined(separator: ", "))) VALUES (\(placeholders))", values)
        }
        // Read back through the connection's own decoding of rows.
        let table = try XCTUnwrap(PostgresCatalog.tables(admin, schema: schema).first { $0.spec.name == "things" })
        let select = ([table.id.expression, PostgresTable.version.expression + "::text"] + table.columns.map(\.expression))
            .joined(separator: ", ")
        let rows = try admin.query("SELECT \(select) FROM \(table.sqlName) t")
        stored = PostgresQuery.content(table, rows).records.map { $0.filter { $0.key != table.spec.versionField } }
    }

    deinit {
        if let admin = try? PostgresSession(conninfo: conninfo, timeoutMilliseconds: 10_000) {
            _ = try? admin.query("SET client_min_messages = warning")  // no NOTICE per dropped table
            _ = try? admin.query("DROP SCHEMA \(schema) CASCADE")
            admin.close()
        }
    }

    static func id(_ fields: RecordFields) -> String { fields.first { $0.key == "id" }?.value.stringValue ?? "" }

    /// The value as the column's text input, or nil: the column cannot hold it.
    static func storable(_ column: String, _ value: JSON) -> String? {
        switch (column, value) {
        case (_, .null): return nil
        case ("t", .string(let s)), ("u", .string(let s)): return s.utf8.contains(0) ? nil : s
        case ("n", .integer(let i)): return String(i)
        case ("r", .real(let d)): return "\(d)"
        case ("r", .integer(let i)): return String(i)  // float8 rounds it, as a double would
        case ("r", .number(let digits)): return digits
        case ("b", .bool(let b)): return b ? "true" : "false"
        case ("j", _):
            let text = value.serialized()
            return text.contains("\\u0000") ? nil : text  // jsonb refuses U+0000
        default: return nil
        }
    }

    func connection() throws -> any Connection {
        var options = PostgresOptions(conninfo: conninfo, schema: schema)
        options.timeoutMilliseconds = 10_000
        return try PostgresConnection(options)
    }
}
