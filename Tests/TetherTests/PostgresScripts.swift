import Foundation
@testable import Tether

/// Runs scripts/NAME ARGUMENT (pg-stop, pg-start) and waits for it with
/// waitpid (system): Foundation's Process.waitUntilExit never returns once
/// the script has left a daemon (the restarted postgres) holding a
/// descriptor it watches.
func runScript(_ name: String, _ argument: String) throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    func quoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
    let command = quoted(root.appendingPathComponent("scripts/" + name).path) + " " + quoted(argument)
        + " </dev/null >/dev/null 2>&1"
    let status = system(command)
    guard status == 0 else { throw TetherError(.internal, "scripts/\(name) failed (\(status))") }
}
