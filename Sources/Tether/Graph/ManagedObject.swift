import Synchronization

/// One record in one context: while it is in memory, the same object every
/// time for the same record. Its state is its own, behind its own lock, so
/// reading one object never waits for another.
public final class ManagedObject: Sendable {
    public let entity: Entity
    public let id: String
    /// Its uniquing entry's hash (see `HashedID`).
    let idHash: Int
    /// Strong: an object a host still holds after close reports "closed"
    /// rather than touching freed memory. Close breaks the cycle.
    let context: Context
    let state = InlineLock(State())
    /// The C boundary's handle token for this object (0: none), touched only
    /// under its registry's lock: found without hashing the object.
    public let handleToken = Atomic<UInt>(0)

    struct State {
        var record: Record?
        /// The store was asked (it may have had nothing).
        var loaded = false
        var fetchedAt: Int64 = 0
        var deletedOnServer = false
        /// With deletedOnServer: the server had no such record when asked, and
        /// none was ever cached here (a wrong id, not a deletion).
        var neverOnServer = false
        var refreshInFlight = false
        var refreshAgain = false
        var observers: [KeyObserver] = []
        /// The local change the server has not confirmed (kept in the outbox too).
        var pending: PendingChange?
        /// The last save's conflict, until a save or rollback ends it.
        /// Without the object: an object holding itself would never go.
        var conflict: SaveConflict.Sides?
        /// An insert dropped before it was ever sent: the record never existed.
        var discarded = false

        enum Read { case value(Value), deleted, absent, notCached, needsLoad }

        /// What a read of attribute `index` finds now: a pending value first.
        func read(_ index: Int) -> Read {
            if let pending {
                if let value = pending.values[index] { return .value(value) }
                if pending.kind == .insert { return .value(.null) }
            }
            if deletedOnServer || discarded { return neverOnServer && !discarded ? .absent : .deleted }
            if let record { return .value(record.values[index]) }
            return loaded ? .notCached : .needsLoad
        }

        /// The value the host sees, if known without the store.
        func visible(_ index: Int) -> Value? {
            if case .value(let value) = read(index) { return value }
            return nil
        }

        /// What each observer's key reads now, to compare after a change.
        var observedValues: [Value?] { observers.map { visible($0.attributeIndex) } }

        /// The observers whose key reads otherwise than in `before` (from `observedValues`).
        func observers(changedSince before: [Value?]) -> [KeyObserver] {
            zip(observers, before).filter { $1 != visible($0.attributeIndex) }.map(\.0)
        }
    }

    init(context: Context, entity: Entity, id: HashedID) {
        self.context = context
        self.entity = entity
        self.id = id.id
        idHash = id.idHash
        Live.objects.add(1, ordering: .relaxed)
    }

    deinit {
        // The context's uniquing holds this object unretained: its entry goes first.
        context.uniquing.remove(Unmanaged.passUnretained(self), entity: entity.index, id: HashedID(id: id, hash: idHash))
        Live.objects.subtract(1, ordering: .relaxed)
    }

    /// The cached value; never touches the network.
    /// `key` is an attribute's name, or a key path through to-one
    /// relationships ("Client.Owner"): null when a reference on the way is.
    public func peek(_ key: String) throws -> Value { try context.read(self, key: key, refresh: false) }
    public func peek(code: Int) throws -> Value { try context.read(self, attributeIndex(code: code), refresh: false) }

    /// The cached value, and a background refresh of the object.
    public func get(_ key: String) throws -> Value { try context.read(self, key: key, refresh: true) }
    public func get(code: Int) throws -> Value { try context.read(self, attributeIndex(code: code), refresh: true) }

    /// The cached server version.
    public func version() throws -> Int64 {
        guard case .integer(let version) = try context.read(self, entity.versionIndex, refresh: false) else {
            throw TetherError(.notCached, "\(entity.name)/\(id) has no cached version")
        }
        return version
    }

    /// An observer of `key` (an attribute name, or its peek form "<name>Peek"),
    /// inactive until `activate`.
    public func makeObserver(key: String) throws -> KeyObserver {
        let index: Int
        if let exact = entity.attributeIndex(named: key) {
            index = exact
        } else if key.hasSuffix("Peek"), let base = entity.attributeIndex(named: String(key.dropLast(4))) {
            index = base
        } else {
            throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
        }
        return KeyObserver(object: self, key: key, attributeIndex: index)
    }

    /// The cached value of attribute `index` (see `attributeIndex`); with
    /// `refresh`, as `get`, a background refresh too.
    public func read(attribute index: Int, refresh: Bool) throws -> Value {
        try context.read(self, index, refresh: refresh)
    }

    /// As `read`, if that needs nothing from the store (the record is in
    /// memory, or known absent); else nil, having done nothing.
    public func readInMemory(attribute index: Int, refresh: Bool) throws -> Value? {
        try context.readInMemory(self, index, refresh: refresh)
    }

    /// The attribute whose name has these UTF-8 bytes (a C string's),
    /// found without making a String; not valid UTF-8: `.invalid`.
    public func attributeIndex(bytes key: UnsafeBufferPointer<UInt8>) throws -> Int {
        if let index = entity.attributeIndex(bytes: key) { return index }
        guard let name = String(validating: key, as: UTF8.self) else { throw TetherError(.invalid, "key is not valid UTF-8") }
        return try attributeIndex(name)
    }

    private func attributeIndex(_ key: String) throws -> Int {
        guard let index = entity.attributeIndex(named: key) else {
            throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
        }
        return index
    }

    public func attributeIndex(code: Int) throws -> Int {
        guard let index = entity.attributeIndex(code: code) else {
            throw TetherError(.notFound, "\(entity.name) has no attribute with code \(code)")
        }
        return index
    }
}

/// Watches one key of one object. Told on each change of the value (nil),
/// on each failed refresh of the object (the error), then exactly once more,
/// with `.cancelled`, when removed or when the context closes; after that the
/// library holds no reference to it or its callback.
public final class KeyObserver: Sendable {
    public let object: ManagedObject
    public let key: String
    let attributeIndex: Int
    private let state = Lock<(subscription: Delivery.SubscriptionID?, callback: (@Sendable (TetherError?) -> Void)?)>((nil, nil))

    init(object: ManagedObject, key: String, attributeIndex: Int) {
        self.object = object
        self.key = key
        self.attributeIndex = attributeIndex
        Live.observers.add(1, ordering: .relaxed)
    }

    deinit { Live.observers.subtract(1, ordering: .relaxed) }

    /// Starts observing; `callback(nil)` for a change, an error for a failed
    /// refresh, `callback(.cancelled)` last.
    public func activate(_ callback: @escaping @Sendable (TetherError?) -> Void) throws {
        let context = object.context
        try context.checkOpen()
        // Changes are judged against what the key reads now: an object never
        // read knows nothing of its row or tombstone, and would take a cached
        // record's deletion for one never cached (NOT_FOUND), a record sent
        // unchanged for a change, a sibling's deletion for none. Loaded before
        // it joins the list, so no change is judged against the unknown.
        try context.withCommittedRow(object) { _ in }
        state.withLock { $0.callback = callback }
        // On the object's list before the subscription exists: a close racing
        // this call may finish the subscription at once, and its removal must
        // find the observer there (appended after, the observer and its
        // object kept each other, and the context, alive for good).
        object.state.withLock { $0.observers.append(self) }
        let id: Delivery.SubscriptionID
        do {
            id = try context.subscribe(
                cancel: { [context] id in try? context.delivery.cancel(id) },
                deliverCancellation: { [self] in fire(.cancelled) },
                finished: { [self] in
                    object.context.stopListening(self, to: object.entity)
                    object.state.withLock { $0.observers.removeAll { $0 === self } }
                    state.withLock { $0 = (nil, nil) }
                })
        } catch {
            object.state.withLock { $0.observers.removeAll { $0 === self } }
            state.withLock { $0 = (nil, nil) }
            throw error
        }
        // Unless it has already finished (the callback is gone then).
        let active = state.withLock { state -> Bool in
            if state.callback != nil { state.subscription = id }
            return state.callback != nil
        }
        // Changes the server pushes refresh the object (PushedChanges.swift).
        if active { context.listen(self, to: object.entity) }
        if state.withLock({ $0.callback == nil }) { context.stopListening(self, to: object.entity) }
    }

    /// Removes the observer; fails with `.closed` if it was already removed.
    public func remove() throws {
        guard let id = state.withLock({ $0.subscription }) else {
            throw TetherError(.closed, "the observer was already removed")
        }
        try object.context.delivery.cancel(id)
    }

    /// The value changed (nil), or a refresh of the object failed (the
    /// error); never the final call.
    func notify(_ error: TetherError? = nil) {
        guard let id = state.withLock({ $0.subscription }) else { return }
        object.context.delivery.post(.update, to: id) { [self] in fire(error) }
    }

    private func fire(_ error: TetherError?) {
        let callback = state.withLock { $0.callback }
        callback?(error)
    }
}
