import Glibc

/// Where one thread's time has gone, as Linux counts it
/// (/proc/self/task/TID/stat and schedstat): to tell a thread that paused
/// (it ran other code, or slept) from one the scheduler kept waiting for a
/// CPU, which on a loaded machine can be tens of milliseconds at a time.
/// Without /proc it knows only the wall clock.
struct ThreadTime: Sendable {
    /// The calling thread (a readlink of /proc/thread-self, a few µs).
    static func current() -> ThreadTime {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard n > 0 else { return ThreadTime(task: nil) }
        // "PID/task/TID"
        let link = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return ThreadTime(task: link.split(separator: "/").last.flatMap { Int32($0) })
    }

    let task: Int32?

    struct Sample: Sendable {
        let at: MonotonicTime
        /// Nanoseconds on a CPU and waiting for one (finished waits only), nil if unknown.
        let ran: Int64?
        let waited: Int64?
        /// Running or waiting for a CPU at the moment of the sample.
        let runnable: Bool

        /// Milliseconds of its own since `earlier` that the thread spent
        /// running or asleep: not waiting for a CPU. While it is runnable
        /// a wait in progress is not counted yet, so only its time on a
        /// CPU counts then (an underestimate, never an overestimate).
        func ownMilliseconds(since earlier: Sample) -> Int64 {
            let wall = at.nanoseconds - earlier.at.nanoseconds
            guard let ran, let waited, let ranBefore = earlier.ran, let waitedBefore = earlier.waited else {
                return wall / 1_000_000
            }
            let own = runnable ? ran - ranBefore : wall - (waited - waitedBefore)
            return max(0, own) / 1_000_000
        }
    }

    /// Now; from any thread.
    func sample() -> Sample {
        let at = MonotonicTime.now()
        guard let task,
              let times = Self.read("/proc/self/task/\(task)/schedstat"),
              let stat = Self.read("/proc/self/task/\(task)/stat") else {
            return Sample(at: at, ran: nil, waited: nil, runnable: false)
        }
        let fields = times.split(separator: " ")
        // stat: "TID (comm) S ...": the state follows the last ')'.
        guard fields.count >= 2, let ran = Int64(fields[0]), let waited = Int64(fields[1]),
              let close = stat.lastIndex(of: ")") else {
            return Sample(at: at, ran: nil, waited: nil, runnable: false)
        }
        let state = stat[stat.index(after: close)...].first { $0 != " " }
        return Sample(at: at, ran: ran, waited: waited, runnable: state == "R")
    }

    /// A sample, taken again a moment later if the thread was runnable: a
    /// thread that sleeps often (a host polling every millisecond) is seen
    /// runnable just as it wakes, when the timers of both fire together,
    /// and its sleep would then go uncounted each time.
    func settledSample() -> Sample {
        let first = sample()
        guard first.runnable else { return first }
        usleep(200)
        return sample()
    }

    private static func read(_ path: String) -> Substring? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return Substring(String(decoding: buffer[..<n], as: UTF8.self).trimmingSuffixNewline)
    }
}

private extension String {
    var trimmingSuffixNewline: String { hasSuffix("\n") ? String(dropLast()) : self }
}
