import Glibc
import Tether

/// The kinds of opaque handle the C ABI hands out.
enum HandleKind {
    case context, entity, object, task, observer, results
}

/// Handles are registry tokens, not addresses: a stale, forged or
/// wrong-kind handle is looked up, found wanting and reported, never
/// dereferenced. Tokens are never reused.
///
/// Object handles are counted references: registering an object that has a
/// handle gives the same handle and one more reference; the handle dies with
/// its last release. Every handle dies when its context closes.
final class Handles: @unchecked Sendable {
    // @unchecked: a C mutex forces it; every field is touched with it held.
    static let shared = Handles()

    private struct Entry {
        let kind: HandleKind
        let object: AnyObject
        /// The context's token; the context's own entry has 0.
        let owner: UInt
        /// C strings this handle lends out, freed with it.
        let strings: [UnsafeMutablePointer<CChar>]
        var references = 1
    }

    private let lock: UnsafeMutablePointer<pthread_mutex_t> = {
        let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(lock, nil)
        return lock
    }()
    private var nextToken: UInt = 1
    private var entries: [UInt: Entry] = [:]
    private var tokenByObject: [ObjectIdentifier: UInt] = [:]
    private var countByKind: [HandleKind: Int] = [:]

    private init() {}

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body()
    }

    static func pointer(_ token: UInt) -> OpaquePointer { OpaquePointer(bitPattern: token << 4)! }
    static func token(_ pointer: OpaquePointer?) -> UInt { pointer.map { UInt(bitPattern: $0) >> 4 } ?? 0 }

    /// Registers `object`; if it has a handle already, that handle with one
    /// more reference. Fails once the owning context's handle is gone, so a
    /// call racing close cannot leave a handle nothing will remove.
    @discardableResult
    func register(_ object: AnyObject, kind: HandleKind, owner: UInt, strings: [String] = []) throws
        -> (handle: OpaquePointer, strings: [UnsafeMutablePointer<CChar>]) {
        try locked {
            guard owner == 0 || entries[owner] != nil else { throw TetherError(.closed, "the context is closed") }
            if let token = tokenByObject[ObjectIdentifier(object)] {
                entries[token]!.references += 1
                return (Self.pointer(token), entries[token]!.strings)
            }
            let token = nextToken
            nextToken += 1
            let copies = strings.map { strdup($0)! }
            entries[token] = Entry(kind: kind, object: object, owner: owner, strings: copies)
            tokenByObject[ObjectIdentifier(object)] = token
            countByKind[kind, default: 0] += 1
            return (Self.pointer(token), copies)
        }
    }

    /// The handle already given to `object`, if any (no new reference).
    func existing(_ object: AnyObject) -> OpaquePointer? {
        locked { tokenByObject[ObjectIdentifier(object)].map(Self.pointer) }
    }

    /// The object behind a handle of `kind`, with its owner token and strings.
    func resolve<T: AnyObject>(_ pointer: OpaquePointer?, _ kind: HandleKind, as type: T.Type) throws
        -> (object: T, owner: UInt, strings: [UnsafeMutablePointer<CChar>]) {
        try locked {
            let entry = try entryLocked(pointer, kind)
            guard let object = entry.object as? T else {
                throw TetherError(.closed, "the handle is a \(entry.kind) handle, not a \(kind) handle")
            }
            return (object, entry.owner == 0 ? Self.token(pointer) : entry.owner, entry.strings)
        }
    }

    private func entryLocked(_ pointer: OpaquePointer?, _ kind: HandleKind) throws -> Entry {
        let token = Self.token(pointer)
        guard token != 0, pointer.map({ UInt(bitPattern: $0) & 15 == 0 }) == true, let entry = entries[token] else {
            throw TetherError(.closed, pointer == nil ? "the \(kind) handle is NULL"
                                       : "the \(kind) handle is not valid (closed, released or never issued)")
        }
        guard entry.kind == kind else {
            throw TetherError(.closed, "the handle is a \(entry.kind) handle, not a \(kind) handle")
        }
        return entry
    }

    func retain(_ pointer: OpaquePointer?, _ kind: HandleKind) throws {
        try locked {
            _ = try entryLocked(pointer, kind)
            entries[Self.token(pointer)]!.references += 1
        }
    }

    /// Drops one reference; the handle dies with its last. Returns what it
    /// held when it died, to be released outside the lock.
    @discardableResult
    func release(_ pointer: OpaquePointer?, _ kind: HandleKind) throws -> AnyObject? {
        try locked {
            _ = try entryLocked(pointer, kind)
            let token = Self.token(pointer)
            entries[token]!.references -= 1
            guard entries[token]!.references == 0 else { return nil }
            return removeLocked(token)
        }
    }

    /// Removes a handle whatever its references (a task or observer that ended).
    func remove(_ pointer: OpaquePointer) {
        _ = locked { removeLocked(Self.token(pointer)) }
    }

    /// Removes a context's handle and every handle that came from it; returns
    /// what they held, to be released outside the lock.
    func removeContext(_ pointer: OpaquePointer) -> [AnyObject] {
        locked {
            let token = Self.token(pointer)
            var held = entries.filter { $0.value.owner == token }.keys.compactMap { removeLocked($0) }
            if let context = removeLocked(token) { held.append(context) }
            return held
        }
    }

    func count(_ kind: HandleKind) -> Int { locked { countByKind[kind, default: 0] } }

    private func removeLocked(_ token: UInt) -> AnyObject? {
        guard let entry = entries.removeValue(forKey: token) else { return nil }
        tokenByObject[ObjectIdentifier(entry.object)] = nil
        countByKind[entry.kind, default: 1] -= 1
        entry.strings.forEach { free($0) }
        return entry.object
    }
}
