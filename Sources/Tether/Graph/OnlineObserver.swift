/// An observer of a context's `isOnline`: told each time the server stops
/// or starts answering (see `Reachability`), through the context's delivery
/// as key observers are, and last, once, with `.cancelled` when removed or
/// when the context closes.
public final class OnlineObserver: Sendable {
    public let context: Context
    private struct State {
        var subscription: Delivery.SubscriptionID?
        var callback: (@Sendable (_ online: Bool, _ final: TetherError?) -> Void)?
        var listener: UInt64?
    }
    private let state = Lock(State())

    public init(context: Context) {
        self.context = context
        Live.observers.add(1, ordering: .relaxed)
    }

    deinit { Live.observers.subtract(1, ordering: .relaxed) }

    /// Starts observing: `callback(online, nil)` for each change,
    /// `callback(online, .cancelled)` last.
    public func activate(_ callback: @escaping @Sendable (_ online: Bool, _ final: TetherError?) -> Void) throws {
        try context.checkOpen()
        // Listening before the subscription exists: a close racing this call
        // may finish the subscription at once, and its end must find the
        // listener to remove (else the reachability would keep this, and its
        // context, alive).
        let listener = context.reachability.listen { [self] online in notify(online) }
        state.withLock {
            $0.callback = callback
            $0.listener = listener
        }
        let id: Delivery.SubscriptionID
        do {
            id = try context.subscribe(
                cancel: { [context] id in try? context.delivery.cancel(id) },
                deliverCancellation: { [self] in fire(context.isOnline, .cancelled) },
                finished: { [self] in stop() })
        } catch {
            stop()
            throw error
        }
        // Unless it has already finished (the callback is gone then).
        state.withLock { if $0.callback != nil { $0.subscription = id } }
    }

    /// Removes the observer; fails with `.closed` if it was already removed.
    public func remove() throws {
        guard let id = state.withLock({ $0.subscription }) else {
            throw TetherError(.closed, "the observer was already removed")
        }
        try context.delivery.cancel(id)
    }

    private func stop() {
        let listener = state.withLock { state -> UInt64? in
            defer { state = State() }
            return state.listener
        }
        if let listener { context.reachability.unlisten(listener) }
    }

    /// The state the change led to travels with it: a callback tells the
    /// change it stands for, even when the next has happened already.
    private func notify(_ online: Bool) {
        guard let id = state.withLock({ $0.subscription }) else { return }
        context.delivery.post(.update, to: id) { [self] in fire(online, nil) }
    }

    private func fire(_ online: Bool, _ final: TetherError?) {
        let callback = state.withLock { $0.callback }
        callback?(online, final)
    }
}
