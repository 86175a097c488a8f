/// One record in one context: the same object every time for the same record.
/// Its state is guarded by the context's lock.
public final class ManagedObject: @unchecked Sendable {
    public let entity: Entity
    public let id: String
    unowned let context: Context

    var record: Record?
    var loadedFromStore = false
    var fetchedAt: Int64 = 0
    var deletedOnServer = false
    var refreshInFlight = false
    var refreshAgain = false
    var observers: [KeyObserver] = []

    init(context: Context, entity: Entity, id: String) {
        self.context = context
        self.entity = entity
        self.id = id
    }

    /// The cached value; never touches the network.
    public func peek(_ key: String) throws -> Value { try context.read(self, attributeIndex(key), refresh: false) }
    public func peek(code: Int) throws -> Value { try context.read(self, attributeIndex(code: code), refresh: false) }

    /// The cached value, and a background refresh of the object.
    public func get(_ key: String) throws -> Value { try context.read(self, attributeIndex(key), refresh: true) }
    public func get(code: Int) throws -> Value { try context.read(self, attributeIndex(code: code), refresh: true) }

    /// The cached server version.
    public func version() throws -> Int64 {
        guard case .integer(let version) = try peek(code: entity.attributes[entity.versionIndex].code) else {
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

    private func attributeIndex(_ key: String) throws -> Int {
        guard let index = entity.attributeIndex(named: key) else {
            throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
        }
        return index
    }

    private func attributeIndex(code: Int) throws -> Int {
        guard let index = entity.attributeIndex(code: code) else {
            throw TetherError(.notFound, "\(entity.name) has no attribute with code \(code)")
        }
        return index
    }
}

/// Watches one key of one object. Told on each change of the value, then
/// exactly once more, with `.cancelled`, when removed or when the context closes.
public final class KeyObserver: Subscription, @unchecked Sendable {
    public unowned let object: ManagedObject
    public let key: String
    let attributeIndex: Int
    private var callback: ((TetherError?) -> Void)?

    init(object: ManagedObject, key: String, attributeIndex: Int) {
        self.object = object
        self.key = key
        self.attributeIndex = attributeIndex
        super.init(delivery: object.context.delivery)
    }

    /// Starts observing; `callback(nil)` for a change, `callback(.cancelled)` last.
    public func activate(_ callback: @escaping (TetherError?) -> Void) throws {
        self.callback = callback
        try object.context.register(self)
    }

    public func remove() throws { try cancelSubscription() }

    func notifyChanged() {
        delivery.post(update: self) { [self] in callback?(nil) }
    }

    override func deliverCancellation() { callback?(.cancelled) }
}
