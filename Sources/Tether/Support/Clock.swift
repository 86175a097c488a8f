import Glibc

/// Wall-clock milliseconds since the epoch, the unit Kinto versions use.
func wallClockMilliseconds() -> Int64 {
    var spec = Glibc.timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
}

/// A point on the monotonic clock, for deadlines that must not jump.
struct MonotonicTime: Comparable {
    let nanoseconds: Int64

    static func now() -> MonotonicTime {
        var spec = Glibc.timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return MonotonicTime(nanoseconds: Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec))
    }

    /// Saturating: a delay a host or a server gives may be anything (a
    /// deadline past the clock's end is never reached, never a trap).
    func adding(milliseconds: Int64) -> MonotonicTime {
        let (delay, overflow) = milliseconds.multipliedReportingOverflow(by: 1_000_000)
        if overflow { return MonotonicTime(nanoseconds: milliseconds < 0 ? .min : .max) }
        let (sum, beyond) = nanoseconds.addingReportingOverflow(delay)
        return MonotonicTime(nanoseconds: beyond ? (delay < 0 ? .min : .max) : sum)
    }

    func milliseconds(since other: MonotonicTime) -> Int64 { (nanoseconds - other.nanoseconds) / 1_000_000 }

    var timespec: Glibc.timespec {
        Glibc.timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    }

    static func < (lhs: MonotonicTime, rhs: MonotonicTime) -> Bool { lhs.nanoseconds < rhs.nanoseconds }
}
