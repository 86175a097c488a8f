import Glibc
import Synchronization

/// The thread a connection without a network answers on, one request at a
/// time, as a network connection's answers come: asynchronously, never
/// before the call has returned its handle.
final class RequestQueue: Sendable {
    private let queue = WorkQueue()
    private let stopped = Lock(false)

    /// Runs `work` in turn, after `latencyMilliseconds` (waited out in turn,
    /// as a slow server's would be; not by a request already cancelled, nor
    /// at shutdown); `done` exactly once, `.cancelled` if cancelled first.
    func respond<T: Sendable>(latencyMilliseconds: Int64 = 0, _ done: @escaping @Sendable (Result<T, TetherError>) -> Void,
                              _ work: @escaping @Sendable () throws -> T) -> any Cancellable {
        let request = QueuedRequest()
        let latency = UInt32(clamping: latencyMilliseconds * 1000)
        let queued = queue.async { [self] in
            if latency > 0 && !request.isCancelled && !stopped.withLock({ $0 }) { usleep(latency) }
            let cancelled = request.end() || stopped.withLock { $0 }
            done(cancelled ? .failure(.cancelled) : .tether(work))
        }
        if !queued { done(.failure(.cancelled)) }
        return request
    }

    /// Requests still queued end cancelled; returns when they have.
    func shutdown() {
        stopped.withLock { $0 = true }
        queue.shutdown()
    }
}

/// A queued request: cancel wins if it comes before the answer starts.
private final class QueuedRequest: Cancellable {
    private let ended = Atomic<Bool>(false)
    var isCancelled: Bool { ended.load(ordering: .acquiring) }
    /// Marks the request answered; true if it had been cancelled first.
    func end() -> Bool { ended.exchange(true, ordering: .acquiringAndReleasing) }
    func cancel() { ended.store(true, ordering: .releasing) }
}
