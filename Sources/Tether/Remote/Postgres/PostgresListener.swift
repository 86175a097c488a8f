import Glibc
import Synchronization

/// LISTEN on a connection of its own, for the tracked tables' triggers'
/// `pg_notify('tether_changes', '<schema>.<table>')`: a thread waits on the
/// connection's socket (poll, no timer) and tells the subscribers which of
/// their tables changed. One per process and database (`PostgresListeners`):
/// every context's connection to it shares it, whatever its schema, so a
/// process holds one listening connection however many contexts it opens.
/// It runs only while someone subscribes; a lost
/// connection is opened again with backoff (0.1 s doubling to 5 s), and once
/// back every subscriber hears of all its tables (notifications sent while
/// it was away are lost). Stopping never waits for the server: the thread is
/// woken through a pipe and closes its connection itself.
final class PostgresListener: Sendable {
    static let channel = "tether_changes"
    /// What the server's pg_stat_activity names the listening connection.
    static let applicationName = "tether listen"
    static let firstBackoffMilliseconds: Int32 = 100
    static let lastBackoffMilliseconds: Int32 = 5_000

    private struct Subscriber {
        /// Its tables by the payloads that name them: the triggers send
        /// format('%I.%I'), which quotes a name only where it must ("Sales",
        /// a keyword), so both spellings of each part are taken.
        var tables: [[UInt8]: String]
        var entities: Set<String>
        var changed: @Sendable (Set<String>) -> Void

        init(schema: String, entities: Set<String>, changed: @escaping @Sendable (Set<String>) -> Void) {
            func spellings(_ name: String) -> [String] {
                [name, "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""]
            }
            var tables: [[UInt8]: String] = [:]
            for entity in entities {
                for s in spellings(schema) { for t in spellings(entity) { tables[Array((s + "." + t).utf8)] = entity } }
            }
            self.tables = tables
            self.entities = entities
            self.changed = changed
        }
    }
    /// A context through one connection: contexts of several connections
    /// share the listener, and a context's address may serve another later.
    struct Key: Hashable {
        let connection: ObjectIdentifier
        let context: ObjectIdentifier
    }
    private struct State {
        var subscribers: [Key: Subscriber] = [:]
        /// The thread listening now, if any.
        var runner: Runner?
        var closed = false
    }
    private let state = Lock(State())
    private let conninfo: String
    private let timeoutMilliseconds: Int64

    init(conninfo: String, timeoutMilliseconds: Int64) {
        self.conninfo = conninfo
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// `subscriber` hears of these tables of `schema` from now on; none: it is gone.
    func subscribe(schema: String, _ entities: Set<String>, _ subscriber: Key,
                   _ changed: @escaping @Sendable (Set<String>) -> Void) {
        let (stop, start) = state.withLock { state -> (Runner?, Runner?) in
            guard !state.closed else { return (nil, nil) }
            state.subscribers[subscriber] = entities.isEmpty ? nil : Subscriber(schema: schema, entities: entities, changed: changed)
            if state.subscribers.isEmpty, let runner = state.runner {
                state.runner = nil
                return (runner, nil)
            }
            guard !state.subscribers.isEmpty, state.runner == nil, let runner = Runner() else { return (nil, nil) }
            state.runner = runner
            return (nil, runner)
        }
        stop?.stop()
        if let start { pthread_detach(startThread { [self] in run(start) }) }
    }

    /// Stops listening for good; returns at once.
    func shutdown() {
        let runner = state.withLock { state -> Runner? in
            state.closed = true
            state.subscribers = [:]
            defer { state.runner = nil }
            return state.runner
        }
        runner?.stop()
    }

    /// On the listening thread: connects, listens, waits, again after a loss, until stopped.
    private func run(_ runner: Runner) {
        guard let pq = try? LibPQ.load() else { return }
        var backoff = Self.firstBackoffMilliseconds
        while !runner.isStopped {
            let session: PostgresSession
            do {
                session = try PostgresSession(conninfo: conninfo, timeoutMilliseconds: timeoutMilliseconds,
                                              applicationName: Self.applicationName)
                _ = try session.query("LISTEN " + Self.channel)
            } catch {
                Log.info(.http, "PostgreSQL: cannot LISTEN (\(error)); again in \(backoff) ms")
                if runner.wait(milliseconds: backoff) { return }
                backoff = min(backoff * 2, Self.lastBackoffMilliseconds)
                continue
            }
            backoff = Self.firstBackoffMilliseconds
            // Changes committed before LISTEN took effect (while connecting,
            // or while the server was away) were told to no one.
            tell(nil, runner)
            listen(session, pq, runner)
            session.close()
        }
    }

    /// Waits on the socket and tells what comes, until the connection is lost or the runner stopped.
    private func listen(_ session: PostgresSession, _ pq: LibPQ, _ runner: Runner) {
        guard let conn = session.conn else { return }
        let socket = pq.socket(conn)
        guard socket >= 0 else { return }
        while !runner.isStopped {
            var fds = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: runner.wakeFD, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if runner.isStopped { return }
            guard fds[0].revents != 0 else { continue }
            guard pq.consumeInput(conn) != 0, pq.status(conn) == LibPQ.connectionOK else {
                Log.info(.http, "PostgreSQL: the LISTEN connection was lost; connecting again")
                return
            }
            var payloads = Set<[UInt8]>()
            // PGnotify: char *relname; int be_pid; char *extra; (next: libpq's own).
            while let notify = pq.notifies(conn) {
                let extraOffset = 2 * MemoryLayout<UnsafePointer<CChar>?>.stride
                if let extra = notify.load(fromByteOffset: extraOffset, as: UnsafePointer<CChar>?.self) {
                    payloads.insert(Array(String(cString: extra).utf8))
                }
                pq.freemem(notify)
            }
            if !payloads.isEmpty { tell(payloads, runner) }
        }
    }

    /// Tells each subscriber of its tables among the payloads ("<schema>.<table>";
    /// nil: all of them). Whole payloads are compared: names may hold dots.
    private func tell(_ payloads: Set<[UInt8]>?, _ runner: Runner) {
        let subscribers = state.withLock { state -> [Subscriber] in
            state.runner === runner ? Array(state.subscribers.values) : []
        }
        for subscriber in subscribers {
            let changed = payloads.map { Set($0.compactMap { subscriber.tables[$0] }) } ?? subscriber.entities
            if !changed.isEmpty { subscriber.changed(changed) }
        }
    }
}

/// The process's listeners, one per database (its conninfo's parameters, in
/// order), each shared by the connections to it and shut down with the last.
enum PostgresListeners {
    private static let shared = Lock<[String: (listener: PostgresListener, users: Int)]>([:])

    static func acquire(conninfo: String, parameters: [String: String], timeoutMilliseconds: Int64) -> PostgresListener {
        let key = parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "\u{0}")
        return shared.withLock { shared in
            if let entry = shared[key] {
                shared[key] = (entry.listener, entry.users + 1)
                return entry.listener
            }
            let listener = PostgresListener(conninfo: conninfo, timeoutMilliseconds: timeoutMilliseconds)
            shared[key] = (listener, 1)
            return listener
        }
    }

    /// Returns at once: the last user's release stops the thread without waiting for it.
    static func release(_ listener: PostgresListener) {
        let last = shared.withLock { shared -> Bool in
            guard let (key, entry) = shared.first(where: { $0.value.listener === listener }) else { return false }
            if entry.users > 1 {
                shared[key] = (listener, entry.users - 1)
                return false
            }
            shared[key] = nil
            return true
        }
        if last { listener.shutdown() }
    }
}

/// One listening thread's stop signal: a flag and a pipe its poll watches.
/// The pipe is closed when both the thread and the stopper are done with it.
private final class Runner: @unchecked Sendable {  // the descriptors never change; the flag is atomic
    private let stopped = Atomic<Bool>(false)
    private let fds: (read: Int32, write: Int32)

    init?() {
        var pair: [Int32] = [-1, -1]
        guard pipe(&pair) == 0 else { return nil }
        for fd in pair {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)  // a stop never blocks on a full pipe
        }
        fds = (pair[0], pair[1])
    }

    deinit {
        Glibc.close(fds.read)
        Glibc.close(fds.write)
    }

    var wakeFD: Int32 { fds.read }
    var isStopped: Bool { stopped.load(ordering: .acquiring) }

    func stop() {
        stopped.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = write(fds.write, &byte, 1)
    }

    /// Waits `milliseconds` or until stopped; true if stopped.
    func wait(milliseconds: Int32) -> Bool {
        var fd = pollfd(fd: fds.read, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, milliseconds)
        return isStopped
    }
}
