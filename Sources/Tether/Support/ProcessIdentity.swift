import Glibc

/// A process as the processes sharing a store tell each other apart: its
/// pid, when it started (so a pid reused by a later process is not it), the
/// boot it started in (after a reboot no claim holds) and its PID namespace
/// (a pid means nothing in another: such a process is never judged ended).
/// One host: a store shared across hosts is not told apart.
struct ProcessIdentity: Sendable, Equatable {
    let pid: Int32
    /// Clock ticks after boot (`/proc/PID/stat`'s starttime); 0 where unknown.
    let started: Int64
    /// The boot id, "/", the PID namespace's inode.
    let boot: String

    /// This process (read again after a fork: the pid differs).
    static var current: ProcessIdentity {
        let pid = getpid()
        if let cached = cached.withLock({ $0 }), cached.pid == pid { return cached }
        let identity = ProcessIdentity(pid: pid, started: startTime(of: pid) ?? 0, boot: bootID + "/" + namespace)
        cached.withLock { $0 = identity }
        return identity
    }

    private static let cached = Lock<ProcessIdentity?>(nil)

    private static let bootID: String = {
        (try? readFile("/proc/sys/kernel/random/boot_id")).map { String($0.filter { !$0.isWhitespace }) } ?? ""
    }()

    private static var namespace: String {
        var info = stat()
        return stat("/proc/self/ns/pid", &info) == 0 ? String(info.st_ino) : ""
    }

    /// The same process as this one (the start time aside: the same pid in
    /// the same boot and namespace is one process at a time).
    func isProcess(_ other: ProcessIdentity) -> Bool { pid == other.pid && boot == other.boot }

    /// Whether this process may still run. Only what proves it ended says
    /// no: another boot, its /proc entry gone, another process with its
    /// pid, or a zombie with no thread left. What cannot be read (no file
    /// descriptor left, /proc hiding other users' processes, another PID
    /// namespace) says yes: its changes are then never taken over.
    var mayBeAlive: Bool {
        let me = Self.current
        if self == me { return true }
        let (myBoot, myNamespace) = Self.split(me.boot)
        let (boot, namespace) = Self.split(self.boot)
        guard boot == myBoot else { return false }
        guard namespace == myNamespace else { return true }
        guard let stat = Self.read("/proc/\(pid)/stat") else { return !Self.hasEnded(pid) }
        let fields = Self.fieldsAfterName(stat)
        if started != 0, let start = Self.startTime(fields), start != started { return false }
        guard fields.first == "Z" || fields.first == "X" else { return true }
        // A zombie main thread may lead live threads (it called pthread_exit).
        guard let status = Self.read("/proc/\(pid)/status"),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Threads:") }),
              let threads = Int(String(line.dropFirst("Threads:".count).filter { !$0.isWhitespace })) else { return false }
        return threads > 1
    }

    /// Whether no process has `pid` (kill(2) says so: ESRCH).
    private static func hasEnded(_ pid: Int32) -> Bool { kill(pid, 0) != 0 && errno == ESRCH }

    private static func split(_ boot: String) -> (Substring, Substring) {
        let parts = boot.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        return (parts.first ?? "", parts.count > 1 ? parts[1] : "")
    }

    /// Fields 3 on of `/proc/PID/stat` (after the name, which may hold spaces and parentheses).
    private static func fieldsAfterName(_ stat: String) -> [Substring] {
        guard let close = stat.lastIndex(of: ")") else { return [] }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    private static func startTime(_ fields: [Substring]) -> Int64? { fields.count > 19 ? Int64(fields[19]) : nil }

    private static func startTime(of pid: Int32) -> Int64? { read("/proc/\(pid)/stat").flatMap { startTime(fieldsAfterName($0)) } }

    private static func read(_ path: String) -> String? { try? readFile(path) }

    private static func readFile(_ path: String) throws -> String {
        guard let file = fopen(path, "re") else { throw TetherError(.store, "cannot read \(path)") }
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
