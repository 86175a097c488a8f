import Glibc
import Tether

/// The kinds of opaque handle the C ABI hands out.
enum HandleKind {
    case context, entity, object, task, observer
}

/// Handles are registry tokens, not addresses: a stale, forged or
/// wrong-kind handle is looked up, found wanting and reported, never
/// dereferenced. Tokens are never reused.
final class Handles: @unchecked Sendable {
    static let shared = Handles()

    private struct Entry {
        let kind: HandleKind
        let object: AnyObject
        /// The context's token; the context's own entry has 0.
        let owner: UInt
        /// C strings this handle lends out, freed with it.
        let strings: [UnsafeMutablePointer<CChar>]
    }

    private let lock: UnsafeMutablePointer<pthread_mutex_t> = {
        let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(lock, nil)
        return lock
    }()
    private var nextToken: UInt = 1
    private var entries: [UInt: Entry] = [:]
    private var tokenByObject: [ObjectIdentifier: UInt] = [:]

    private init() {}

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body()
    }

    static func pointer(_ token: UInt) -> OpaquePointer { OpaquePointer(bitPattern: token << 4)! }
    static func token(_ pointer: OpaquePointer?) -> UInt { pointer.map { UInt(bitPattern: $0) >> 4 } ?? 0 }

    /// Registers `object` (once: a second call gives the first handle).
    @discardableResult
    func register(_ object: AnyObject, kind: HandleKind, owner: UInt, strings: [String] = [])
        -> (handle: OpaquePointer, strings: [UnsafeMutablePointer<CChar>]) {
        locked {
            if let token = tokenByObject[ObjectIdentifier(object)] { return (Self.pointer(token), entries[token]!.strings) }
            let token = nextToken
            nextToken += 1
            let copies = strings.map { strdup($0)! }
            entries[token] = Entry(kind: kind, object: object, owner: owner, strings: copies)
            tokenByObject[ObjectIdentifier(object)] = token
            return (Self.pointer(token), copies)
        }
    }

    /// The handle already given to `object`, if any.
    func existing(_ object: AnyObject) -> OpaquePointer? {
        locked { tokenByObject[ObjectIdentifier(object)].map(Self.pointer) }
    }

    /// The object behind a handle of `kind`, with its owner token and strings.
    func resolve<T: AnyObject>(_ pointer: OpaquePointer?, _ kind: HandleKind, as type: T.Type) throws
        -> (object: T, owner: UInt, strings: [UnsafeMutablePointer<CChar>]) {
        try locked {
            let token = Self.token(pointer)
            guard token != 0, pointer.map({ UInt(bitPattern: $0) & 15 == 0 }) == true,
                  let entry = entries[token] else {
                throw TetherError(.closed, pointer == nil ? "the \(kind) handle is NULL"
                                           : "the \(kind) handle is not valid (closed, released or never issued)")
            }
            guard entry.kind == kind, let object = entry.object as? T else {
                throw TetherError(.closed, "the handle is a \(entry.kind) handle, not a \(kind) handle")
            }
            return (object, entry.owner == 0 ? token : entry.owner, entry.strings)
        }
    }

    func remove(_ pointer: OpaquePointer) {
        locked { removeLocked(Self.token(pointer)) }
    }

    /// Removes a context's handle and every handle that came from it.
    func removeContext(_ pointer: OpaquePointer) {
        locked {
            let token = Self.token(pointer)
            for (other, entry) in entries where entry.owner == token { removeLocked(other) }
            removeLocked(token)
        }
    }

    private func removeLocked(_ token: UInt) {
        guard let entry = entries.removeValue(forKey: token) else { return }
        tokenByObject[ObjectIdentifier(entry.object)] = nil
        entry.strings.forEach { free($0) }
    }
}
