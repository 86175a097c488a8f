import Synchronization

/// Process-wide counts of what the core keeps alive, for leak checks in tests
/// and in hosts that run for months.
public enum Live {
    static let contexts = Atomic<Int>(0)
    static let objects = Atomic<Int>(0)
    static let tasks = Atomic<Int>(0)
    static let observers = Atomic<Int>(0)
    static let threads = Atomic<Int>(0)
    /// A running total, not a live count: SQL statements prepared so far.
    static let prepares = Atomic<Int>(0)

    public enum Counter: Sendable { case contexts, objects, tasks, observers, threads, prepares }

    public static func count(_ counter: Counter) -> Int {
        switch counter {
        case .contexts: return contexts.load(ordering: .relaxed)
        case .objects: return objects.load(ordering: .relaxed)
        case .tasks: return tasks.load(ordering: .relaxed)
        case .observers: return observers.load(ordering: .relaxed)
        case .threads: return threads.load(ordering: .relaxed)
        case .prepares: return prepares.load(ordering: .relaxed)
        }
    }
}
