import Glibc

/// A process as the processes sharing a store tell each other apart: its
/// pid, when it started (so a pid reused by a later process is not it), and
/// the boot it started in (after a reboot no claim holds). One host, one
/// PID namespace: a store shared across containers or hosts is not told apart.
struct ProcessIdentity: Sendable, Equatable {
    let pid: Int32
    /// Clock ticks after boot (`/proc/PID/stat`'s starttime); 0 where unknown.
    let started: Int64
    let boot: String

    /// This process (read again after a fork: the pid differs).
    static var current: ProcessIdentity {
        let pid = getpid()
        return cached.withLock { cached in
            if let cached, cached.pid == pid { return cached }
            let identity = ProcessIdentity(pid: pid, started: startTime(of: pid) ?? 0, boot: bootID)
            cached = identity
            return identity
        }
    }

    private static let cached = Lock<ProcessIdentity?>(nil)

    private static let bootID: String = {
        (try? readFile("/proc/sys/kernel/random/boot_id")).map { String($0.filter { !$0.isWhitespace }) } ?? ""
    }()

    /// Whether this process still runs (a zombie does not).
    var isAlive: Bool {
        if self == Self.current { return true }
        guard boot == Self.bootID else { return false }
        guard let stat = try? Self.readFile("/proc/\(pid)/stat") else {
            // Its /proc entry gone: ended. No /proc at all: the pid alone says.
            if access("/proc/self/stat", F_OK) == 0 { return false }
            return kill(pid, 0) == 0 || errno == EPERM
        }
        let fields = Self.fieldsAfterName(stat)
        guard fields.first != "Z" else { return false }
        return started == 0 || Self.startTime(fields) == started
    }

    /// Fields 3 on of `/proc/PID/stat` (after the name, which may hold spaces and parentheses).
    private static func fieldsAfterName(_ stat: String) -> [Substring] {
        guard let close = stat.lastIndex(of: ")") else { return [] }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    private static func startTime(_ fields: [Substring]) -> Int64? { fields.count > 19 ? Int64(fields[19]) : nil }

    private static func startTime(of pid: Int32) -> Int64? {
        (try? readFile("/proc/\(pid)/stat")).flatMap { startTime(fieldsAfterName($0)) }
    }

    private static func readFile(_ path: String) throws -> String {
        guard let file = fopen(path, "r") else { throw TetherError(.store, "cannot read \(path)") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count == 0 { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
