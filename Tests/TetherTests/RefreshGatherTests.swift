import Foundation
import XCTest
@testable import Tether

/// The clock that tells when a burst of gets has ended (Graph/Refresh.swift):
/// a thread's own time, which leaves out its waits for a CPU.
final class RefreshGatherTests: XCTestCase {
    /// A thread blocked the whole time between two samples: all of that time
    /// is its own (a pause of its burst), and it is not runnable.
    func testABlockedThreadsTimeIsItsOwn() throws {
        let clock = Lock<ThreadTime?>(nil)
        let release = DispatchSemaphore(value: 0)
        let thread = Thread {
            clock.withLock { $0 = ThreadTime.current() }
            release.wait()
        }
        thread.start()
        defer { release.signal() }
        var time: ThreadTime?
        for _ in 0..<10_000 where time == nil {
            time = clock.withLock { $0 }
            if time == nil { usleep(1000) }
        }
        let blocked = try XCTUnwrap(time)
        XCTAssertNotNil(blocked.task, "no /proc/thread-self")
        // Until it is seen blocked in its wait (a loaded machine may keep it from a CPU a while).
        var before = blocked.sample()
        for _ in 0..<10_000 where before.runnable {
            usleep(1000)
            before = blocked.sample()
        }
        XCTAssertFalse(before.runnable)
        usleep(30_000)
        let after = blocked.sample()
        XCTAssertFalse(after.runnable)
        XCTAssertNotNil(after.ran)
        XCTAssertGreaterThanOrEqual(after.ownMilliseconds(since: before), 30)
    }

    /// Without /proc (a thread not known), the wall clock.
    func testAnUnknownThreadCountsTheWallClock() {
        let unknown = ThreadTime(task: nil)
        let before = unknown.sample()
        usleep(10_000)
        let after = unknown.sample()
        XCTAssertNil(after.ran)
        XCTAssertGreaterThanOrEqual(after.ownMilliseconds(since: before), 10)
    }
}
