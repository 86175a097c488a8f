/// Whether a connection's server answers, as its requests find out: any
/// answer, whatever its status, means online; no answer at all (refused or
/// closed before a byte, unknown name, timed out with nothing back: an
/// error `isUnreachable`) means offline. The same rule as an offline open.
///
/// A connection keeps one, fed where every request ends (the HTTP engine,
/// a host's completion), so no request escapes it and the layers above need
/// not report. Contexts sharing the connection (siblings) share it: one
/// server, one state. Each change is logged at WARNING and told to the
/// listeners; the first state (what open found) is not a change.
public final class Reachability: Sendable {
    public typealias Listener = @Sendable (_ online: Bool) -> Void

    private struct State {
        var online: Bool?
        var listeners: [UInt64: Listener] = [:]
        var nextID: UInt64 = 1
    }
    private let state = Lock(State())
    /// Held while a change is told, so changes are told in the order they
    /// happened. Never taken by a reader: a log hook may read the state.
    private let telling = Lock(())

    public init() {}

    /// nil until a request has ended.
    public var isOnline: Bool? { state.withLock { $0.online } }

    /// A request ended with `result`. Cancellations, and failures of our own
    /// (internal, misuse), say nothing about the server.
    public func note<T>(_ result: Result<T, TetherError>) {
        switch result {
        case .success: note(reached: true)
        case .failure(let error):
            switch error.kind {
            case .cancelled, .internal, .misuse, .closed: return
            default: note(reached: !error.isUnreachable, error.message)
            }
        }
    }

    public func note(reached: Bool, _ why: String = "") {
        // The common case, nothing changed, takes one lock.
        guard state.withLock({ $0.online != reached }) else { return }
        telling.withLock { _ in
            let (changed, listeners) = state.withLock { state -> (Bool, [Listener]) in
                guard state.online != reached else { return (false, []) }
                defer { state.online = reached }
                return (state.online != nil, Array(state.listeners.values))
            }
            guard changed else { return }
            if reached {
                Log.warning(.context, "the server answers again: online")
            } else {
                Log.warning(.context, "the server cannot be reached: offline, answering from the store (\(why))")
            }
            // Listeners only queue a callback: quick, and never into the host.
            for listener in listeners { listener(reached) }
        }
    }

    /// Calls `listener` with each change from now on; returns its token for `unlisten`.
    public func listen(_ listener: @escaping Listener) -> UInt64 {
        state.withLock { state in
            defer { state.nextID += 1 }
            state.listeners[state.nextID] = listener
            return state.nextID
        }
    }

    public func unlisten(_ token: UInt64) {
        let removed = state.withLock { $0.listeners.removeValue(forKey: token) }
        _ = removed  // released here, outside the lock
    }
}

/// A connection that tells how its requests reach its server.
public protocol ReachabilityReporting {
    var reachability: Reachability { get }
}
