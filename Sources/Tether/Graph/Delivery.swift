import Glibc

public enum DeliveryMode: Sendable {
    /// Callbacks run on the library's own dispatcher thread.
    case thread
    /// Callbacks run inside `Context.poll` on the host's thread.
    case poll
}

/// The queue between the library's threads and the host's callbacks, for one
/// context. One callback runs at a time. Each subscription (a fetch or an
/// observer) ends with exactly one final callback; once cancelled it gets no
/// other, even if some were already queued.
///
/// No host callback runs with `state` held: cancel and close wait for a
/// callback to return, never for a lock a callback could be holding.
final class Delivery: Sendable {
    typealias SubscriptionID = UInt64
    typealias Run = @Sendable () -> Void

    let mode: DeliveryMode
    /// Readable while events wait (the read end of a pipe); closed by `shutdown`.
    let descriptor: Int32
    private let wakeDescriptor: Int32

    enum Kind: Sendable { case update, final, cancellation }

    private struct Event {
        let subscription: SubscriptionID
        let kind: Kind
        let run: Run
    }

    private struct Subscription {
        var cancelled = false
        var finished = false
        /// The thread running this subscription's callback, if one is.
        var runningOn: pthread_t?
        /// Delivers the final cancelled callback.
        let deliverCancellation: Run
        /// Runs once after the final callback: the owner drops its references.
        let onFinished: @Sendable (SubscriptionID) -> Void
    }

    private struct State {
        var queue: [Event] = []
        var head = 0
        var subscriptions: [SubscriptionID: Subscription] = [:]
        var nextID: SubscriptionID = 1
        /// The thread running a callback of this context, if any.
        var delivering: pthread_t?
        var pollers = 0
        /// Close has begun: pollers stop taking events (the closer delivers them).
        var closing = false
        var stopping = false
        var descriptorsClosed = false

        var waiting: Int { queue.count - head }

        /// Takes the oldest event. What was taken is dropped from the array
        /// soon (at once when the queue empties), so a delivered event's
        /// closure does not keep its task or objects alive.
        mutating func popFirst() -> Event? {
            guard head < queue.count else { return nil }
            let event = queue[head]
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: queue.count <= 1024)
                head = 0
            } else if head > 64 && head * 2 > queue.count {
                queue.removeFirst(head)
                head = 0
            }
            return event
        }
    }

    private let state = ConditionLock(State())
    private let dispatcher = ConditionLock<pthread_t?>(nil)

    init(mode: DeliveryMode) throws {
        self.mode = mode
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw TetherError(.internal, "pipe failed: errno \(errno)") }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        descriptor = ends[0]
        wakeDescriptor = ends[1]
        if mode == .thread {
            let thread = startThread { [self] in dispatch() }
            dispatcher.withLock { $0 = thread }
        }
    }

    // MARK: subscriptions

    /// A new subscription; `deliverCancellation` is its final callback when
    /// cancelled, `finished` runs once after its final callback.
    func register(deliverCancellation: @escaping Run,
                  finished: @escaping @Sendable (SubscriptionID) -> Void) throws -> SubscriptionID {
        try state.withLock { state in
            guard !state.stopping else { throw TetherError.contextClosed }
            let id = state.nextID
            state.nextID += 1
            state.subscriptions[id] = Subscription(deliverCancellation: deliverCancellation, onFinished: finished)
            return id
        }
    }

    /// Queues a callback; dropped if the subscription was cancelled or ended.
    func post(_ kind: Kind, to subscription: SubscriptionID, _ run: @escaping Run) {
        state.withLock { state in
            guard let current = state.subscriptions[subscription], !current.cancelled, !current.finished else { return }
            append(Event(subscription: subscription, kind: kind, run: run), &state)
        }
    }

    /// Cancels: afterwards only the final cancelled callback can arrive. Out of
    /// any callback it first waits for one of this subscription's callbacks
    /// running on another thread; inside one it does not, so two callbacks
    /// cancelling each other cannot deadlock. Fails with `.closed` once
    /// cancelled or finished.
    func cancel(_ subscription: SubscriptionID) throws {
        let me = pthread_self()
        let mayWait = !callbackScope.isInside
        try state.withLock { state in
            guard var current = state.subscriptions[subscription], !current.cancelled, !current.finished else {
                throw TetherError(.closed, "it has already been cancelled or finished")
            }
            current.cancelled = true
            state.subscriptions[subscription] = current
            append(Event(subscription: subscription, kind: .cancellation, run: current.deliverCancellation), &state)
        }
        guard mayWait else { return }
        state.withLock(when: { state in
            guard let running = state.subscriptions[subscription]?.runningOn else { return true }
            return pthread_equal(running, me) != 0
        }, until: nil) { _, _ in }
    }

    /// True on the thread that is running one of this context's callbacks.
    var isInsideCallback: Bool {
        let me = pthread_self()
        return state.withLock { state in state.delivering.map { pthread_equal($0, me) != 0 } ?? false }
    }

    private func append(_ event: Event, _ state: inout State) {
        state.queue.append(event)
        if state.waiting == 1 { wake() }
    }

    private func wake() {
        var one: UInt8 = 1
        _ = write(wakeDescriptor, &one, 1)
    }

    // MARK: running callbacks

    /// POLL mode: waits up to `timeout` ms (negative: no limit) for events,
    /// then delivers those waiting. Returns how many callbacks ran; returns at
    /// once, early, when the context closes.
    func poll(timeoutMilliseconds timeout: Int32) throws -> Int {
        let idle = try state.withLock { state -> Bool in
            guard !state.closing else { throw TetherError.contextClosed }
            state.pollers += 1
            return state.waiting == 0
        }
        defer { state.withLock { $0.pollers -= 1 } }
        if timeout != 0 && idle {
            var descriptorSet = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            _ = Glibc.poll(&descriptorSet, 1, timeout)
        }
        var delivered = 0
        var budget = state.withLock { $0.waiting }
        while budget > 0, state.withLock({ !$0.closing }) {
            budget -= 1
            if deliverNext() { delivered += 1 }
        }
        return delivered
    }

    /// Close begins: a poller on another thread returns without taking more
    /// events, so the closer delivers the finals as the header says.
    func beginClose() {
        state.withLock { $0.closing = true }
        wake()
    }

    /// Stops delivery after running every event still queued (the finals of
    /// every cancelled subscription among them): on the dispatcher in THREAD
    /// mode, on the caller in POLL mode, after a poller on another thread has
    /// returned. Then closes the descriptors.
    func shutdown() {
        state.withLock { state in
            state.closing = true
            state.stopping = true
        }
        wake()
        if let thread = dispatcher.withLock({ current -> pthread_t? in defer { current = nil }; return current }) {
            pthread_join(thread, nil)
        } else {
            state.withLock(when: { $0.pollers == 0 }, until: nil) { _, _ in }
            while state.withLock({ $0.waiting > 0 }) { _ = deliverNext() }
        }
        state.withLock { state in
            guard !state.descriptorsClosed else { return }
            state.descriptorsClosed = true
            close(descriptor)
            close(wakeDescriptor)
        }
    }

    private func dispatch() {
        while true {
            let stop = state.withLock(when: { $0.waiting > 0 || $0.stopping }, until: nil) { state, _ in
                state.waiting == 0 && state.stopping
            }
            if stop { return }
            _ = deliverNext()
        }
    }

    /// Delivers the oldest event; false if it was skipped or none waited.
    private func deliverNext() -> Bool {
        let me = pthread_self()
        let next = state.withLock(when: { $0.delivering == nil }, until: nil) { state, _ -> Event? in
            guard let event = state.popFirst() else { return nil }
            // Once closing, the descriptor stays readable, so that every
            // poller wakes and returns (emptying it could strand one).
            if state.waiting == 0 && !state.closing {
                var bytes = (UInt64(0), UInt64(0))
                while read(descriptor, &bytes, 16) > 0 {}
            }
            guard var subscription = state.subscriptions[event.subscription], !subscription.finished else { return nil }
            switch event.kind {
            case .update:
                guard !subscription.cancelled else { return nil }
            case .final:
                guard !subscription.cancelled else { return nil }
                subscription.finished = true
            case .cancellation:
                subscription.finished = true
            }
            subscription.runningOn = me
            state.subscriptions[event.subscription] = subscription
            state.delivering = me
            return event
        }
        guard let event = next else { return false }
        callbackScope.run(event.run)
        let finished = state.withLock { state -> (@Sendable (SubscriptionID) -> Void)? in
            state.delivering = nil
            guard var subscription = state.subscriptions[event.subscription] else { return nil }
            subscription.runningOn = nil
            guard subscription.finished else {
                state.subscriptions[event.subscription] = subscription
                return nil
            }
            state.subscriptions[event.subscription] = nil
            return subscription.onFinished
        }
        finished?(event.subscription)
        return true
    }
}
