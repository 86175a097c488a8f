import Glibc
import Synchronization

/// State behind a pthread mutex: what the core uses instead of
/// Synchronization's Mutex. The API is the same (the state is reachable only
/// inside `withLock`), but ThreadSanitizer sees a pthread mutex and cannot see
/// the standard library's futex-based Mutex, which is not instrumented: with
/// Mutex, TSan runs of the tests reported accesses that were inside
/// `withLock` on both sides. The sanitizer run in `make test` proves the
/// locking only if it can see it.
final class Lock<State>: @unchecked Sendable {
    // @unchecked: a C mutex forces it; `state` is touched only with it held.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var state: State

    init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}

#if TETHER_PTHREAD_OBJECT_LOCKS
/// `Lock` in one allocation: the mutex lives in the buffer's tail, not in a
/// block of its own. Builds for ThreadSanitizer (`scripts/run-tests`'s tsan
/// lanes define TETHER_PTHREAD_OBJECT_LOCKS) lock each object with it, so
/// the sanitizer sees every object's locking; other builds use `Mutex`.
struct InlineLock<State>: @unchecked Sendable {
    // @unchecked: a C mutex forces it (and ManagedBuffer is not Sendable);
    // the state is touched only with the mutex held.
    private final class Buffer: ManagedBuffer<State, pthread_mutex_t> {
        deinit {
            // The header (the state) is destroyed by ManagedBuffer; the mutex is ours.
            _ = withUnsafeMutablePointerToElements { pthread_mutex_destroy($0) }
        }
    }

    private let buffer: Buffer

    init(_ state: State) {
        buffer = unsafeDowncast(Buffer.create(minimumCapacity: 1) { _ in state }, to: Buffer.self)
        buffer.withUnsafeMutablePointerToElements { _ = pthread_mutex_init($0, nil) }
    }

    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        try buffer.withUnsafeMutablePointers { state, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&state.pointee)
        }
    }
}

#else
/// An object's lock: the standard library's Mutex, stored in the object
/// itself. Objects are made by the million (one per record read): a pthread
/// mutex would cost each one an allocation of its own, its init and destroy,
/// and a free. The calls to it are the same as to `InlineLock` above, which
/// sanitizer builds use instead.
typealias InlineLock<State> = Mutex<State>
#endif

/// State behind a pthread mutex with a condition variable, for the few places
/// where a thread must wait for a change (Synchronization's Mutex has no
/// condition). Every access goes through `withLock`, which broadcasts on the
/// way out, so waiters see each change.
final class ConditionLock<State>: @unchecked Sendable {
    // @unchecked: a C mutex forces it. `state` is touched only with `mutex`
    // held, which is what Mutex would check.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state: State

    init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return try body(&state)
    }

    /// Waits until `ready` holds or the deadline passes (nil: no deadline),
    /// then runs `body` with the lock still held; `timedOut` says which.
    func withLock<R>(when ready: (State) -> Bool, until deadline: MonotonicTime?,
                     _ body: (inout State, _ timedOut: Bool) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        var timedOut = false
        while !ready(state) {
            if let deadline {
                var spec = deadline.timespec
                if pthread_cond_timedwait(condition, mutex, &spec) == ETIMEDOUT {
                    timedOut = !ready(state)
                    break
                }
            } else {
                pthread_cond_wait(condition, mutex)
            }
        }
        return try body(&state, timedOut)
    }
}

/// Runs `body` on a new joinable thread, counted in `Live.threads`.
func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var thread = pthread_t()
    Live.threads.add(1, ordering: .relaxed)
    let status = pthread_create(&thread, nil, { argument in
        let body = Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue()
        body.run()
        Live.threads.subtract(1, ordering: .relaxed)
        return nil
    }, box)
    precondition(status == 0, "pthread_create failed: \(status)")
    return thread
}

private final class ThreadBody: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Whether the current thread is running a host callback of any context, so
/// that cancel can skip waiting for a callback on another thread: two
/// callbacks cancelling each other's work would otherwise wait forever.
let callbackScope = ThreadScope()

/// Whether the calling thread is inside `run` of this scope (nested runs
/// included): a thread-local flag, for code that must not wait on, or
/// re-enter, what it is called from.
final class ThreadScope: Sendable {
    // Made once per scope, for the life of the process (scopes are globals).
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        self.key = key
    }

    var isInside: Bool { pthread_getspecific(key) != nil }

    func run(_ body: () -> Void) {
        let outer = pthread_getspecific(key)
        let depth = Int(bitPattern: outer) + 1
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth))
        defer { pthread_setspecific(key, outer) }
        body()
    }
}
