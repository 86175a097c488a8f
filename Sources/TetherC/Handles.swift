import Glibc
import Synchronization
import Tether

/// The kinds of opaque handle the C ABI hands out.
enum HandleKind: Int, CaseIterable {
    case context, entity, object, task, observer, results, report, request, specdef
}

/// Handles are registry tokens, not addresses: a stale, forged or
/// wrong-kind handle is looked up, found wanting and reported, never
/// dereferenced. Tokens are never reused.
///
/// Object handles are counted references: registering an object that has a
/// handle gives the same handle and one more reference; the handle dies with
/// its last release. Every handle dies when its context closes.
///
/// Reads (every peek resolves a handle) share a reader lock and index a slot
/// array: a token is a slot and that slot's generation, bumped each time the
/// slot is freed, so a dead token never finds the slot's next tenant. A slot
/// whose generation runs out is retired rather than reused.
final class Handles: @unchecked Sendable {
    // @unchecked: a C rwlock forces it; every field is touched with it held.
    static let shared = Handles()

    private struct Entry {
        let kind: HandleKind
        let object: AnyObject
        /// The context's token; the context's own entry has 0.
        let owner: UInt
        /// C strings this handle lends out, freed with it.
        var strings: [UnsafeMutablePointer<CChar>]
        var references = 1
    }

    private struct Slot {
        var generation: UInt = 1
        var entry: Entry?
        /// The entry's object and kind again, plain values: `borrow` reads
        /// them without copying the entry (no reference counting).
        var kind: HandleKind?
        var object: Unmanaged<AnyObject>?
    }

    /// Bits of a token that name the slot; the generation takes the rest
    /// (of 60: handles are tokens shifted left 4 bits, so never aligned
    /// pointers of real objects).
    private static let slotBits: UInt = 28
    private static let slotMask: UInt = (1 << slotBits) - 1
    private static let lastGeneration: UInt = (1 << (60 - slotBits)) - 1

    private let lock: UnsafeMutablePointer<pthread_rwlock_t> = {
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        return lock
    }()
    private var slots: [Slot] = []
    private var freeSlots: [Int] = []
    private var tokenByObject: [ObjectIdentifier: UInt] = [:]
    /// By kind's raw value: an array, not a dictionary hashing the kind twice per object handle.
    private var countByKind = [Int](repeating: 0, count: HandleKind.allCases.count)

    private init() {}

    private func reading<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    private func writing<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
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
        try writing {
            guard owner == 0 || slotLocked(owner) != nil else { throw TetherError(.closed, "the context is closed") }
            return registerLocked(object, kind: kind, owner: owner, strings: strings)
        }
    }

    /// Registers many objects under one lock, as `register` does each.
    func registerObjects(_ objects: [ManagedObject], owner: UInt) throws -> [OpaquePointer] {
        try writing {
            guard slotLocked(owner) != nil else { throw TetherError(.closed, "the context is closed") }
            return objects.map { registerLocked($0, kind: .object, owner: owner, strings: []).handle }
        }
    }

    /// The first C string a handle of `kind` lends, made by `make` from its
    /// object on first use (most handles are never asked) and freed with it.
    func lentString(_ pointer: OpaquePointer?, _ kind: HandleKind, make: (AnyObject) -> String) throws
        -> UnsafeMutablePointer<CChar> {
        try writing {
            let index = try indexLocked(pointer, kind)
            if let made = slots[index].entry!.strings.first { return made }
            let made = strdup(make(slots[index].entry!.object))!
            slots[index].entry!.strings = [made]
            return made
        }
    }

    private func registerLocked(_ object: AnyObject, kind: HandleKind, owner: UInt, strings: [String])
        -> (handle: OpaquePointer, strings: [UnsafeMutablePointer<CChar>]) {
        if let token = tokenLocked(object, kind), let index = slotLocked(token) {
            slots[index].entry!.references += 1
            return (Self.pointer(token), slots[index].entry!.strings)
        }
        let index: Int
        if let reused = freeSlots.popLast() {
            index = reused
        } else {
            index = slots.count
            precondition(UInt(index) <= Self.slotMask, "more than 2^28 live handles")
            slots.append(Slot())
        }
        let token = slots[index].generation << Self.slotBits | UInt(index)
        let copies = strings.map { strdup($0)! }
        slots[index].entry = Entry(kind: kind, object: object, owner: owner, strings: copies)
        slots[index].kind = kind
        slots[index].object = Unmanaged.passUnretained(object)
        setTokenLocked(object, kind, token)
        countByKind[kind.rawValue] += 1
        return (Self.pointer(token), copies)
    }

    /// The handle already given to `object` (not an object's), if any (no new reference).
    func existing(_ object: AnyObject) -> OpaquePointer? {
        reading { tokenByObject[ObjectIdentifier(object)].map(Self.pointer) }
    }

    /// An object handle's token is kept in the object (a kind is always
    /// registered with one type: `.object` with ManagedObject), the rest by identity.
    private func tokenLocked(_ object: AnyObject, _ kind: HandleKind) -> UInt? {
        guard kind == .object else { return tokenByObject[ObjectIdentifier(object)] }
        let token = unsafeDowncast(object, to: ManagedObject.self).handleToken.load(ordering: .relaxed)
        return token == 0 ? nil : token
    }

    private func setTokenLocked(_ object: AnyObject, _ kind: HandleKind, _ token: UInt?) {
        guard kind == .object else { tokenByObject[ObjectIdentifier(object)] = token; return }
        unsafeDowncast(object, to: ManagedObject.self).handleToken.store(token ?? 0, ordering: .relaxed)
    }

    /// The object behind a handle of `kind`.
    func resolve<T: AnyObject>(_ pointer: OpaquePointer?, _ kind: HandleKind, as type: T.Type) throws -> T {
        try reading { try Self.cast(entryLocked(pointer, kind).object, kind, as: type) }
    }

    /// Runs `body` with the object behind a handle of `kind`, lent without
    /// a retain: the handle's own reference keeps it alive, since the lock
    /// (shared with other readers) holds off its release meanwhile. For the
    /// hottest reads; `body` must be short and must not block (no I/O) or
    /// touch handles, as every handle's release waits for it.
    func borrow<T: AnyObject, R>(_ pointer: OpaquePointer?, _ kind: HandleKind, as type: T.Type,
                                 _ body: (T) throws -> R) throws -> R {
        try reading {
            let index = try indexLocked(pointer, kind)
            // A kind is always registered with one type, so the kind check is
            // the type check; a checked cast here would cost a retain.
            return try Unmanaged<T>.fromOpaque(slots[index].object!.toOpaque())._withUnsafeGuaranteedRef { object in
                assert(slots[index].entry!.object is T)
                return try body(object)
            }
        }
    }

    /// The object behind a handle of `kind`, with its owner token and strings.
    func resolveWithOwner<T: AnyObject>(_ pointer: OpaquePointer?, _ kind: HandleKind, as type: T.Type) throws
        -> (object: T, owner: UInt, strings: [UnsafeMutablePointer<CChar>]) {
        try reading {
            let entry = try entryLocked(pointer, kind)
            return (try Self.cast(entry.object, kind, as: type), entry.owner == 0 ? Self.token(pointer) : entry.owner, entry.strings)
        }
    }

    private static func cast<T: AnyObject>(_ object: AnyObject, _ kind: HandleKind, as type: T.Type) throws -> T {
        guard let object = object as? T else { throw TetherError(.closed, "the handle is not a \(kind) handle") }
        return object
    }

    /// The live slot of `token`, if it has one.
    private func slotLocked(_ token: UInt) -> Int? {
        let index = Int(token & Self.slotMask)
        guard index < slots.count, slots[index].generation == token >> Self.slotBits, slots[index].entry != nil else { return nil }
        return index
    }

    /// The entry of a live handle of `kind`; its slot index comes with it.
    private func entryLocked(_ pointer: OpaquePointer?, _ kind: HandleKind) throws -> Entry {
        try slots[indexLocked(pointer, kind)].entry!
    }

    private func indexLocked(_ pointer: OpaquePointer?, _ kind: HandleKind) throws -> Int {
        let token = Self.token(pointer)
        let index = Int(token & Self.slotMask)
        guard token != 0, pointer.map({ UInt(bitPattern: $0) & 15 == 0 }) == true, index < slots.count,
              slots[index].generation == token >> Self.slotBits, let found = slots[index].kind else {
            throw TetherError(.closed, pointer == nil ? "the \(kind) handle is NULL"
                                       : "the \(kind) handle is not valid (closed, released or never issued)")
        }
        guard found == kind else {
            throw TetherError(.closed, "the handle is a \(found) handle, not a \(kind) handle")
        }
        return index
    }

    func retain(_ pointer: OpaquePointer?, _ kind: HandleKind) throws {
        try writing { slots[try indexLocked(pointer, kind)].entry!.references += 1 }
    }

    /// Drops one reference; the handle dies with its last. Returns what it
    /// held when it died, to be released outside the lock.
    @discardableResult
    func release(_ pointer: OpaquePointer?, _ kind: HandleKind) throws -> AnyObject? {
        try writing {
            let index = try indexLocked(pointer, kind)
            slots[index].entry!.references -= 1
            guard slots[index].entry!.references == 0 else { return nil }
            return removeLocked(Self.token(pointer))
        }
    }

    /// `release` of each of `pointers` (of `kind`) under one lock; invalid
    /// ones are skipped. What died is released after the lock.
    func release(_ pointers: [OpaquePointer], _ kind: HandleKind) {
        guard !pointers.isEmpty else { return }
        let dead: [AnyObject] = writing {
            pointers.compactMap { pointer in
                guard let index = try? indexLocked(pointer, kind) else { return nil }
                slots[index].entry!.references -= 1
                return slots[index].entry!.references == 0 ? removeLocked(Self.token(pointer)) : nil
            }
        }
        _ = dead
    }

    /// Removes a handle whatever its references (a task or observer that ended).
    func remove(_ pointer: OpaquePointer) {
        _ = writing { removeLocked(Self.token(pointer)) }
    }

    /// Removes a context's handle and every handle that came from it; returns
    /// what they held, to be released outside the lock.
    func removeContext(_ pointer: OpaquePointer) -> [AnyObject] {
        writing {
            let token = Self.token(pointer)
            let owned = slots.indices.compactMap { index -> UInt? in
                guard let entry = slots[index].entry, entry.owner == token else { return nil }
                return slots[index].generation << Self.slotBits | UInt(index)
            }
            var held = owned.compactMap { removeLocked($0) }
            if let context = removeLocked(token) { held.append(context) }
            return held
        }
    }

    func count(_ kind: HandleKind) -> Int { reading { countByKind[kind.rawValue] } }

    private func removeLocked(_ token: UInt) -> AnyObject? {
        guard let index = slotLocked(token), let entry = slots[index].entry else { return nil }
        slots[index].entry = nil
        slots[index].kind = nil
        slots[index].object = nil
        if slots[index].generation < Self.lastGeneration {
            slots[index].generation += 1
            freeSlots.append(index)
        }  // else the slot is retired: its tokens are never given again
        setTokenLocked(entry.object, entry.kind, nil)
        countByKind[entry.kind.rawValue] -= 1
        entry.strings.forEach { free($0) }
        return entry.object
    }
}

/// A host callback with its userdata and the handles it is given, carried to
/// the library's threads. Unchecked because they are C pointers: the header
/// tells hosts that callbacks run there, and the handles are registry tokens,
/// never dereferenced.
struct HostCall<Function>: @unchecked Sendable {
    let function: Function
    let userdata: UnsafeMutableRawPointer?
    let handle: OpaquePointer
    var object: OpaquePointer? = nil
    var key: UnsafeMutablePointer<CChar>? = nil

    init(_ function: Function, _ userdata: UnsafeMutableRawPointer?, handle: OpaquePointer,
         object: OpaquePointer? = nil, key: UnsafeMutablePointer<CChar>? = nil) {
        self.function = function
        self.userdata = userdata
        self.handle = handle
        self.object = object
        self.key = key
    }
}
