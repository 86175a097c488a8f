import CSwiftRuntime

/// Uniquing: one object per record per context among those in memory, kept
/// without weak references. A weak reference gave every object a side table
/// (an allocation, and each retain and release of the object on the slow
/// path) and the table a sweep of dead entries. Here the table holds each
/// object unretained and an object removes its own entry as it goes
/// (`ManagedObject.deinit`). A lookup takes an entry's object only if it is
/// not already being freed (`swift_tryRetain`), under the table's lock,
/// which that removal takes too: an entry is never read once its object's
/// memory is gone.
///
/// Nothing may release an object while holding this lock (its deinit would
/// wait on it): the table's own entries are unretained, and what a lookup
/// returns is released by its caller after.
final class Uniquing: @unchecked Sendable {
    // @unchecked: Unmanaged entries; they are read only with `table`'s lock
    // held, and each is removed (under it) before its object's memory goes.
    private let table: Lock<[[HashedID: Unmanaged<ManagedObject>]]>

    init(entities: Int) {
        table = Lock(Array(repeating: [:], count: entities))
    }

    /// The objects for these ids, made by `make` where none is in memory.
    func objects(_ entity: Entity, _ ids: some Collection<String>, make: (HashedID) -> ManagedObject) -> [ManagedObject] {
        var objects: [ManagedObject] = []
        objects.reserveCapacity(ids.count)
        // A slice at a time: a page of thousands would otherwise hold the
        // table, and every host thread's first read, for its whole length.
        var rest = ids[...]
        while !rest.isEmpty {
            let slice = rest.prefix(Self.slice)
            rest = rest.dropFirst(slice.count)
            table.withLock { table in
                for id in slice {
                    // In place: one hash of the id finds the entry or makes it.
                    let key = HashedID(id)
                    objects.append(Self.liveOrMade(&table[entity.index][key]) { make(key) })
                }
            }
        }
        return objects
    }

    private static let slice = 512

    /// The objects in memory among these ids (none is made).
    func inMemory(_ entity: Entity, _ ids: [String]) -> [ManagedObject] {
        table.withLock { table in ids.compactMap { table[entity.index][HashedID($0)].flatMap(Self.live) } }
    }

    /// Every object of `entity` in memory.
    func allInMemory(_ entity: Entity) -> [ManagedObject] {
        table.withLock { table in table[entity.index].values.compactMap(Self.live) }
    }

    /// From `object`'s deinit: its entry goes, unless another object for its
    /// record has taken the entry since it began to be freed.
    func remove(_ object: Unmanaged<ManagedObject>, entity: Int, id: HashedID) {
        table.withLock { table in Self.clear(&table[entity][id], ifItHolds: object) }
    }

    /// The entry's object if it is live; else (none, or one being freed,
    /// whose deinit removes its entry only if it is still its own) a new
    /// one, made by `make`, now in the entry.
    private static func liveOrMade(_ entry: inout Unmanaged<ManagedObject>?, _ make: () -> ManagedObject) -> ManagedObject {
        if let entry, let existing = live(entry) { return existing }
        let object = make()
        entry = Unmanaged.passUnretained(object)
        return object
    }

    private static func clear(_ entry: inout Unmanaged<ManagedObject>?, ifItHolds object: Unmanaged<ManagedObject>) {
        if entry?.toOpaque() == object.toOpaque() { entry = nil }
    }

    /// The entry's object, retained, unless it is being freed.
    private static func live(_ entry: Unmanaged<ManagedObject>) -> ManagedObject? {
        guard swift_tryRetain(entry.toOpaque()) != nil else { return nil }
        return entry.takeRetainedValue()
    }
}

/// An id with its hash taken once, when its object is made: removing the
/// object's entry, and moving its neighbours when another's goes, hash an
/// integer, not the id's bytes again.
struct HashedID: Hashable, Sendable {
    let id: String
    let idHash: Int

    init(_ id: String) {
        var hasher = Hasher()
        ExactString(id).hash(into: &hasher)
        self.init(id: id, hash: hasher.finalize())
    }

    init(id: String, hash: Int) {
        self.id = id
        idHash = hash
    }

    static func == (lhs: HashedID, rhs: HashedID) -> Bool { lhs.idHash == rhs.idHash && lhs.id.hasSameBytes(as: rhs.id) }

    func hash(into hasher: inout Hasher) { hasher.combine(idHash) }

    /// The table's hash: `idHash` is already a seeded SipHash of the id,
    /// so mixing in the table's seed is all that is left to do. Hashable's
    /// own hook; were it ever gone, `hash(into:)` would serve: slower, never wrong.
    func _rawHashValue(seed: Int) -> Int { idHash ^ seed }
}
