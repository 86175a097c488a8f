/// The life every task (a fetch, a save) shares: started once, cancelled
/// at most once, and ended by exactly one final callback (its answer, or
/// the cancellation), after which nothing of the host's is kept. Every
/// callback is delivered through the context's `Delivery`; a cancel
/// delivers a status too (as c-ares calls every callback exactly once).
///
/// One state machine, changed under one lock by events from the worker,
/// the network and the host: each state carries the data that means
/// something in it (`Running` while the task works, `Watching` while a
/// live task watches; `Never` for a task that never watches), and each
/// event returns what to do, done by the caller outside the lock.
final class TaskLifecycle<Answer: Sendable, Progress: Sendable, Running, Watching>: Sendable {
    enum State {
        case idle
        /// Working: the task's own data, and the server request on the
        /// wire, if any (cancel cancels it).
        case running(Running, remote: (any Cancellable)?)
        /// A live task that has answered: watching, until cancelled.
        case watching(Watching)
        /// The final callback is posted (or the cancellation is).
        case done
    }

    /// What the host gave at start, kept until the final callback is delivered.
    private struct Machine {
        var state = State.idle
        var subscription: Delivery.SubscriptionID?
        var callback: (@Sendable (Answer) -> Void)?
        var progress: (@Sendable (Progress) -> Void)?
        /// The task's clean-up at cancel (given at start; taken by the
        /// cancel, or dropped when the task has ended without one).
        var whenCancelled: (@Sendable (State) -> Void)?
    }

    private let machine = Lock(Machine())
    private let context: Context
    /// "fetch", "save": for messages.
    private let noun: String

    init(context: Context, noun: String) {
        self.context = context
        self.noun = noun
        Live.tasks.add(1, ordering: .relaxed)
    }

    deinit { Live.tasks.subtract(1, ordering: .relaxed) }

    // MARK: events from the host

    /// Event: the host starts the task with `callback` (every answer) and
    /// `progress`. Returns false when a close ended it meanwhile (the
    /// cancellation is its final then); else it is running with `work`.
    /// `cancelled`: the final answer of a cancel. `whenCancelled` runs
    /// after a cancel (by the host or by close) with the state it left.
    func start(progress: (@Sendable (Progress) -> Void)?, _ callback: @escaping @Sendable (Answer) -> Void,
               cancelled: Answer, work: Running, whenCancelled: (@Sendable (State) -> Void)? = nil) throws -> Bool {
        try machine.withLock { machine in
            guard case .idle = machine.state else { throw TetherError(.misuse, "the \(noun) has already started") }
            machine.callback = callback
            machine.progress = progress
            machine.whenCancelled = whenCancelled
        }
        let id: Delivery.SubscriptionID
        do {
            id = try context.subscribe(
                cancel: { [self] id in try? cancel(id) },
                deliverCancellation: { [self] in deliver(cancelled) },
                finished: { [self] in
                    machine.withLock { machine in
                        machine.callback = nil
                        machine.progress = nil
                        // A cancel's clean-up is the cancel's to take: its
                        // final may be delivered (on the dispatcher) before
                        // the cancel has left the delivery.
                        if case .done = machine.state { machine.whenCancelled = nil }
                    }
                })
        } catch {
            // (It may hold the task: a cycle, else.)
            machine.withLock { $0.whenCancelled = nil }
            throw error
        }
        return machine.withLock { machine -> Bool in
            machine.subscription = id
            guard case .idle = machine.state else { return false }
            machine.state = .running(work, remote: nil)
            return true
        }
    }

    /// Event: the host cancels; afterwards only the final cancelled
    /// callback can arrive. Fails with `.closed` if the task was cancelled
    /// or has finished, or has not started.
    func cancel() throws {
        guard let id = machine.withLock({ $0.subscription }) else {
            throw TetherError(.closed, "the \(noun) has not started")
        }
        try cancel(id)
    }

    private func cancel(_ id: Delivery.SubscriptionID) throws {
        try context.delivery.cancel(id)
        let (former, whenCancelled) = machine.withLock { machine in
            defer {
                machine.state = .done
                machine.progress = nil
                machine.whenCancelled = nil
            }
            return (machine.state, machine.whenCancelled)
        }
        if case .running(_, let remote?) = former { remote.cancel() }
        whenCancelled?(former)
    }

    // MARK: events from the work

    var isRunning: Bool {
        machine.withLock { if case .running = $0.state { return true } else { return false } }
    }

    /// Runs `running` or `watching` on the task's data in that state, in
    /// one hold of the lock; nil (neither run) in any other state.
    func withWork<T>(running: (inout Running) throws -> T, watching: (inout Watching) throws -> T) rethrows -> T? {
        try machine.withLock { machine -> T? in
            switch machine.state {
            case .running(var work, let remote):
                // Left empty meanwhile, so that `work` is changed in place, not copied.
                machine.state = .done
                defer { machine.state = .running(work, remote: remote) }
                return try running(&work)
            case .watching(var watched):
                machine.state = .done
                defer { machine.state = .watching(watched) }
                return try watching(&watched)
            case .idle, .done:
                return nil
            }
        }
    }

    /// Runs `body` on the running task's data; nil (not run) in any other state.
    func withRunning<T>(_ body: (inout Running) throws -> T) rethrows -> T? {
        try withWork(running: { try Optional(body(&$0)) }, watching: { _ in nil }) ?? nil
    }

    /// Runs `body` on the watching task's data; nil (not run) in any other state.
    func withWatching<T>(_ body: (inout Watching) throws -> T) rethrows -> T? {
        try withWork(running: { _ in nil }, watching: { try Optional(body(&$0)) }) ?? nil
    }

    /// Event: a server request left; remembered for cancel, or cancelled
    /// at once if the task ended meanwhile.
    func sent(_ remote: any Cancellable) {
        let endedMeanwhile = machine.withLock { machine -> Bool in
            guard case .running(let work, _) = machine.state else { return true }
            machine.state = .running(work, remote: remote)
            return false
        }
        if endedMeanwhile { remote.cancel() }
    }

    /// Event: the task ends with `answer`. Only the first end counts: it
    /// returns the running data it ended (for the task to let go of what
    /// it still has on the wire), nil when the task had ended already
    /// (a cancel meanwhile: the cancellation is the final).
    @discardableResult
    func finish(_ answer: Answer) -> Running? {
        let ended = machine.withLock { machine -> (Running, Delivery.SubscriptionID?)? in
            switch machine.state {
            case .running(let work, _):
                machine.state = .done
                machine.progress = nil
                return (work, machine.subscription)
            case .done, .watching:
                return nil
            case .idle:
                assertionFailure("a \(noun) finished before it started")
                return nil
            }
        }
        guard let (work, id) = ended else { return nil }
        if let id { context.delivery.post(.final, to: id) { [self] in deliver(answer) } }
        return work
    }

    /// Event: a live task has its first answer; it watches from now on
    /// with what `watching` makes of its running data. Returns that data
    /// (for the task to let go of what it has on the wire); nil (nothing
    /// done) unless it was running.
    func beginWatching(_ watching: (Running) -> Watching) -> Running? {
        machine.withLock { machine -> Running? in
            guard case .running(let work, _) = machine.state else { return nil }
            machine.state = .watching(watching(work))
            return work
        }
    }

    // MARK: callbacks

    /// Posts an answer that is not the final; `then` runs after it is delivered.
    func post(update answer: Answer, then: (@Sendable () -> Void)? = nil) {
        guard let id = machine.withLock({ $0.subscription }) else { return }
        context.delivery.post(.update, to: id) { [self] in
            deliver(answer)
            then?()
        }
    }

    /// Whether the host asked for progress.
    var wantsProgress: Bool { machine.withLock { $0.progress != nil } }

    /// Tells progress, while running. The callback is taken now: by
    /// delivery time the task may have ended (its final queued behind
    /// this) and let it go.
    func tell(_ progress: Progress) {
        let told = machine.withLock { machine -> (Delivery.SubscriptionID, @Sendable (Progress) -> Void)? in
            guard case .running = machine.state, let id = machine.subscription, let callback = machine.progress else { return nil }
            return (id, callback)
        }
        guard let (id, callback) = told else { return }
        context.delivery.post(.update, to: id) { callback(progress) }
    }

    private func deliver(_ answer: Answer) {
        let callback = machine.withLock { $0.callback }
        callback?(answer)
    }
}
