import Glibc

public enum DeliveryMode: Sendable {
    /// Callbacks run on the library's own dispatcher thread.
    case thread
    /// Callbacks run inside `Context.poll` on the host's thread.
    case poll
}

/// Anything that receives callbacks and ends with exactly one final one:
/// a fetch task or a key observer.
public class Subscription: @unchecked Sendable {
    let delivery: Delivery
    // Guarded by the delivery's state lock.
    fileprivate var cancelled = false
    fileprivate var finished = false
    /// Runs after the final callback returned (or was skipped at close).
    var onFinished: (() -> Void)?

    init(delivery: Delivery) { self.delivery = delivery }

    /// Delivers the final "cancelled" callback. Overridden.
    func deliverCancellation() {}

    /// Cancels; afterwards only the final cancelled callback can arrive.
    /// Fails with `.closed` once the final callback has been delivered.
    func cancelSubscription() throws { try delivery.cancel(self) }

    var isCancelled: Bool { delivery.withState { cancelled } }
}

/// The queue between the library's threads and the host's callbacks. One
/// callback runs at a time; a cancelled subscription gets no callback but
/// its final cancelled one, even if others were already queued.
final class Delivery: @unchecked Sendable {
    let mode: DeliveryMode
    /// Readable while events wait (the read end of a pipe).
    let descriptor: Int32
    private let wakeDescriptor: Int32

    private enum Kind { case update, final, cancellation }
    private struct Event {
        let subscription: Subscription
        let kind: Kind
        let run: () -> Void
    }

    private let state = Lock()
    private let callbackLock = Lock()
    private var queue: [Event] = []
    private var deliveringThread: pthread_t?
    private var dispatcher: pthread_t?
    private var stopping = false

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
            dispatcher = startThread { [unowned self] in self.dispatch() }
        }
    }

    deinit {
        close(descriptor)
        close(wakeDescriptor)
    }

    func withState<T>(_ body: () throws -> T) rethrows -> T { try state.withLock(body) }

    /// True on the thread that is running one of this queue's callbacks.
    var isInsideCallback: Bool {
        state.withLock { deliveringThread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    func post(update subscription: Subscription, _ run: @escaping () -> Void) {
        enqueue(Event(subscription: subscription, kind: .update, run: run))
    }

    func post(final subscription: Subscription, _ run: @escaping () -> Void) {
        enqueue(Event(subscription: subscription, kind: .final, run: run))
    }

    fileprivate func cancel(_ subscription: Subscription) throws {
        // Wait for a callback running on another thread, so that none but the
        // cancellation can start once this returns.
        let inside = isInsideCallback
        if !inside { callbackLock.lock() }
        defer { if !inside { callbackLock.unlock() } }
        try state.withLock {
            guard !subscription.finished else { throw TetherError(.closed, "it has already finished") }
            guard !subscription.cancelled else { return }
            subscription.cancelled = true
            appendLocked(Event(subscription: subscription, kind: .cancellation, run: subscription.deliverCancellation))
        }
    }

    private func enqueue(_ event: Event) {
        state.withLock { appendLocked(event) }
    }

    private func appendLocked(_ event: Event) {
        queue.append(event)
        if queue.count == 1 {
            var one: UInt8 = 1
            _ = write(wakeDescriptor, &one, 1)
        }
        state.broadcast()
    }

    /// POLL mode: waits up to `timeout` ms (negative: forever) for events, then
    /// delivers those waiting. Returns how many callbacks ran.
    func poll(timeoutMilliseconds timeout: Int32) -> Int {
        if timeout != 0 && state.withLock({ queue.isEmpty }) {
            var descriptorSet = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            _ = Glibc.poll(&descriptorSet, 1, timeout)
        }
        var delivered = 0
        let batch = state.withLock { queue.count }
        for _ in 0..<batch where deliverNext() { delivered += 1 }
        return delivered
    }

    /// Stops delivery after running every event still queued: on the
    /// dispatcher in THREAD mode (joined), on the caller in POLL mode.
    func shutdown() {
        if let dispatcher {
            state.withLock {
                stopping = true
                state.broadcast()
            }
            pthread_join(dispatcher, nil)
            self.dispatcher = nil
        } else {
            while state.withLock({ !queue.isEmpty }) { _ = deliverNext() }
        }
    }

    private func dispatch() {
        while true {
            let stop = state.withLock { () -> Bool in
                while queue.isEmpty && !stopping { state.wait(until: nil) }
                return queue.isEmpty && stopping
            }
            if stop { return }
            _ = deliverNext()
        }
    }

    /// Delivers the oldest event; false if it was skipped or none waited.
    private func deliverNext() -> Bool {
        callbackLock.lock()
        defer { callbackLock.unlock() }
        let next = state.withLock { () -> Event? in
            guard !queue.isEmpty else { return nil }
            let event = queue.removeFirst()
            if queue.isEmpty {
                var bytes = (UInt64(0), UInt64(0))
                while read(descriptor, &bytes, 16) > 0 {}
            }
            let subscription = event.subscription
            guard !subscription.finished else { return nil }
            switch event.kind {
            case .update:
                guard !subscription.cancelled else { return nil }
            case .final:
                guard !subscription.cancelled else { return nil }
                subscription.finished = true
            case .cancellation:
                subscription.finished = true
            }
            deliveringThread = pthread_self()
            return event
        }
        guard let event = next else { return false }
        event.run()
        state.withLock { deliveringThread = nil }
        if event.kind != .update { event.subscription.onFinished?() }
        return true
    }
}
