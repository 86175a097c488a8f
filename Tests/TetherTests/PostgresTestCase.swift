import Foundation
import XCTest
@testable import Tether

/// Runs scripts/NAME ARGUMENTS... (pg-stop, pg-start) and waits for it with
/// waitpid (system): Foundation's Process.waitUntilExit never returns once
/// the script has left a daemon (the restarted postgres) holding a
/// descriptor it watches.
func runScript(_ name: String, _ arguments: String...) throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    func quoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
    let command = ([quoted(root.appendingPathComponent("scripts/" + name).path)] + arguments.map(quoted)).joined(separator: " ")
        + " </dev/null >/dev/null 2>&1"
    let status = system(command)
    guard status == 0 else { throw TetherError(.internal, "scripts/\(name) failed (\(status))") }
}

/// A test against the cluster scripts/with-postgres starts: each test gets a
/// schema of its own (made by `schemaStatements`, dropped after, with any
/// change tracking rows it left), a folder for its stores and an admin
/// session; skipped, saying why, without TETHER_PG_CONNINFO.
class PostgresTestCase: XCTestCase {
    var conninfo = ""
    var schema = ""
    var directory = ""
    var admin: PostgresSession!

    /// The test's schema on the cluster, with a 5 s timeout.
    var options: PostgresOptions {
        var options = PostgresOptions(conninfo: conninfo, schema: schema)
        options.timeoutMilliseconds = 5_000
        return options
    }

    /// A context over the test's schema, on a store of that name in the test's folder.
    func openContext(store: String = "store.sqlite") throws -> Context {
        try Context.open(ContextOptions(storePath: directory + "/" + store), connection: PostgresConnection(options))
    }

    /// The schema name's prefix (a letter) and what to run once it exists.
    var schemaPrefix: String { "t" }
    func schemaStatements(_ schema: String) -> [String] { [] }

    override func setUpWithError() throws {
        guard let conninfo = ProcessInfo.processInfo.environment["TETHER_PG_CONNINFO"] else {
            throw XCTSkip("TETHER_PG_CONNINFO is not set: run under scripts/with-postgres (scripts/run-tests postgres)")
        }
        self.conninfo = conninfo
        schema = schemaPrefix + "_" + UUID().uuidString.prefix(8).lowercased()
        directory = try makeTemporaryDirectory("pg-" + schemaPrefix)
        admin = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: 5_000)
        for statement in ["CREATE SCHEMA \(schema)"] + schemaStatements(schema) { _ = try admin.query(statement) }
    }

    override func tearDownWithError() throws {
        if let admin {
            _ = try? admin.query("DROP SCHEMA \(schema) CASCADE")
            for table in ["versions", "tombstones", "tracked"] {  // tracking's rows, where it was installed
                _ = try? admin.query("DELETE FROM tether.\(table) WHERE relation LIKE $1", [schema + ".%"])
            }
            admin.close()
        }
        removeDirectory(directory)
    }
}
