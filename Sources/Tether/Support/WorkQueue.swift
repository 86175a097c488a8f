import Glibc

/// A serial queue on a thread of its own: the context's store reads and
/// writes, merges and timers run here, off the network thread and off the
/// host's threads.
final class WorkQueue: Sendable {
    typealias Job = @Sendable () -> Void

    private struct State {
        var jobs: [Job] = []
        var timers: [(due: MonotonicTime, job: Job)] = []
        var stopping = false
    }

    private let state = ConditionLock(State())
    private let thread: ConditionLock<pthread_t?>

    init() {
        thread = ConditionLock(nil)
        let started = startThread { [state] in Self.run(state) }
        thread.withLock { $0 = started }
    }

    /// Queues `job`; false (and `job` dropped) once the queue has stopped.
    @discardableResult
    func async(_ job: @escaping Job) -> Bool {
        state.withLock { state in
            guard !state.stopping else { return false }
            state.jobs.append(job)
            return true
        }
    }

    /// Queues `job` to run after `milliseconds`; dropped if the queue stops first.
    @discardableResult
    func async(afterMilliseconds milliseconds: Int64, _ job: @escaping Job) -> Bool {
        state.withLock { state in
            guard !state.stopping else { return false }
            state.timers.append((MonotonicTime.now().adding(milliseconds: milliseconds), job))
            return true
        }
    }

    /// Runs the jobs already queued, drops pending timers, and joins the thread.
    func shutdown() {
        state.withLock { $0.stopping = true }
        if let running = thread.withLock({ current -> pthread_t? in defer { current = nil }; return current }) {
            pthread_join(running, nil)
        }
    }

    private static func run(_ state: ConditionLock<State>) {
        while true {
            let (jobs, stop, nextDue, timerCount) = state.withLock { state in
                var jobs = state.jobs
                state.jobs = []
                let now = MonotonicTime.now()
                jobs += state.timers.filter { $0.due <= now }.map(\.job)
                state.timers.removeAll { $0.due <= now }
                if state.stopping { state.timers = [] }
                return (jobs, state.stopping, state.timers.map(\.due).min(), state.timers.count)
            }
            for job in jobs { job() }
            if stop { return }  // nothing can be queued once stopping is set
            guard jobs.isEmpty else { continue }
            // Sleep until work, a new timer, the next timer's time, or stop.
            state.withLock(when: { $0.stopping || !$0.jobs.isEmpty || $0.timers.count != timerCount },
                           until: nextDue) { _, _ in }
        }
    }
}
