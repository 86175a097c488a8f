import Glibc

/// What a context needs to open.
public struct ContextOptions: Sendable {
    public var serverURL: String
    public var bucket: String
    public var username: String?
    public var password: String?
    public var storePath: String
    public var delivery: DeliveryMode = .thread
    /// `get` skips its refresh while a value is younger than this.
    public var stalenessMilliseconds: Int64 = 0
    public var timeoutMilliseconds: Int64 = 30_000

    public init(serverURL: String, bucket: String, storePath: String) {
        self.serverURL = serverURL
        self.bucket = bucket
        self.storePath = storePath
    }
}

/// The object graph a program works in: the model, the store, the server, and
/// one object per record.
public final class Context: @unchecked Sendable {
    public let model: Model
    /// False when the server was unreachable at open and the model came from the store.
    public let isOnline: Bool
    let options: ContextOptions
    let store: Store
    let client: KintoClient
    let engine: HTTPEngine
    let delivery: Delivery

    /// Guards the graph: objects, their state, live subscriptions.
    let lock = Lock()
    private var closed = false
    private var objects: [String: [String: ManagedObject]] = [:]
    private var live: [ObjectIdentifier: Subscription] = [:]
    var pendingRefreshes: [String: [ManagedObject]] = [:]
    var refreshScheduled = false
    var refreshGatherStart = MonotonicTime.now()
    var lastRefreshRequest = MonotonicTime.now()

    private init(model: Model, isOnline: Bool, options: ContextOptions, store: Store, client: KintoClient,
                 engine: HTTPEngine, delivery: Delivery) {
        self.model = model
        self.isOnline = isOnline
        self.options = options
        self.store = store
        self.client = client
        self.engine = engine
        self.delivery = delivery
    }

    /// Opens the store, reads the bucket's specs and builds the model; opens
    /// offline from the store when the server cannot be reached.
    public static func open(_ options: ContextOptions) throws -> Context {
        var root = options.serverURL
        while root.hasSuffix("/") { root.removeLast() }
        guard root.hasPrefix("http://") || root.hasPrefix("https://"), root.utf8.count > 8 else {
            throw TetherError(.invalid, "server URL must start with http:// or https://")
        }
        guard Identifier.isValidEntityName(options.bucket) else {
            throw TetherError(.invalid, "bucket \(options.bucket.debugDescription) is not a valid Kinto id")
        }
        guard !options.storePath.isEmpty else { throw TetherError(.invalid, "store path is empty") }
        guard options.timeoutMilliseconds > 0, options.stalenessMilliseconds >= 0 else {
            throw TetherError(.invalid, "timeout must be positive and staleness not negative")
        }
        let credentials: HTTPCredentials?
        switch (options.username, options.password) {
        case (nil, nil): credentials = nil
        case let (user?, password?): credentials = HTTPCredentials(username: user, password: password)
        default: throw TetherError(.invalid, "give both username and password, or neither")
        }

        // A failed open leaves no new file behind: the store is as it was.
        let storeExisted = access(options.storePath, F_OK) == 0
        func discardNewStore() {
            guard !storeExisted else { return }
            for suffix in ["", "-wal", "-shm", "-journal"] { unlink(options.storePath + suffix) }
        }
        let store = try Store(path: options.storePath)
        let identity = "server \(root), bucket \(options.bucket)"
        let engine: HTTPEngine
        do {
            engine = try HTTPEngine(credentials: credentials, timeoutMilliseconds: options.timeoutMilliseconds)
        } catch {
            store.close()
            discardNewStore()
            throw error
        }
        let client = KintoClient(root: root, bucket: options.bucket, engine: engine)
        do {
            let saved = try store.savedModel(identity: identity)
            let (model, online) = try connect(client, saved: saved, store: store, identity: identity)
            let delivery = try Delivery(mode: options.delivery)
            return Context(model: model, isOnline: online, options: options, store: store, client: client,
                           engine: engine, delivery: delivery)
        } catch {
            engine.shutdown()
            store.close()
            discardNewStore()
            throw error
        }
    }

    /// Builds the model from the server, or takes the saved one when the
    /// server cannot be reached.
    private static func connect(_ client: KintoClient, saved: Model?, store: Store, identity: String) throws
        -> (Model, Bool) {
        do {
            _ = try client.serverInfo()
            let collections = try client.collections()
            let grants = try client.permissions()
            let model = try ModelBuilder.build(bucket: client.bucket, collections: collections,
                                               operations: { operations(of: $0, grants, bucket: client.bucket) },
                                               previous: saved)
            try store.adopt(model, identity: identity)
            return (model, true)
        } catch let error as TetherError where error.isUnreachable {
            guard let saved else {
                throw TetherError(.network, "\(error.message); and the store has no model to open offline")
            }
            return (saved, false)
        }
    }

    /// The operations a collection allows the user: its own grants and its
    /// bucket's. Listing it worked, so fetch is always allowed; without the
    /// permissions endpoint the server is left to refuse what it refuses.
    private static func operations(of collection: String, _ grants: [String: Set<String>]?, bucket: String) -> Operations {
        guard let grants else { return .all }
        let bucketURI = "/buckets/\(bucket)"
        let granted = grants[bucketURI, default: []].union(grants[bucketURI + "/collections/\(collection)", default: []])
        var operations: Operations = .fetch
        if granted.contains("write") { operations.formUnion([.insert, .update, .delete]) }
        if granted.contains("record:create") { operations.insert(.insert) }
        return operations
    }

    /// Cancels every task and observer, delivers their final callbacks, and
    /// closes the store. Not allowed from inside one of this context's callbacks.
    public func close() throws {
        guard !delivery.isInsideCallback else {
            throw TetherError(.busy, "a context cannot be closed from inside its own callback")
        }
        let subscriptions: [Subscription]? = lock.withLock {
            guard !closed else { return nil }
            closed = true
            return Array(live.values)
        }
        guard let subscriptions else { return }
        for subscription in subscriptions { try? subscription.cancelSubscription() }
        engine.shutdown()
        delivery.shutdown()
        store.close()
        lock.withLock {
            live = [:]
            objects = [:]
        }
    }

    public var isClosed: Bool { lock.withLock { closed } }
    var isClosedLocked: Bool { closed }

    // MARK: objects

    /// The one object for a record of `entity`; it need not be cached yet.
    public func object(entity name: String, id: String) throws -> ManagedObject {
        guard let entity = model.entity(named: name) else {
            throw TetherError(.notFound, "the model has no entity \(name.debugDescription)")
        }
        guard !id.isEmpty else { throw TetherError(.invalid, "a record id cannot be empty") }
        return try lock.withLock {
            try checkOpen()
            return uniqueObject(entity, id)
        }
    }

    /// With the lock held.
    func uniqueObject(_ entity: Entity, _ id: String) -> ManagedObject {
        if let existing = objects[entity.name]?[id] { return existing }
        let object = ManagedObject(context: self, entity: entity, id: id)
        objects[entity.name, default: [:]][id] = object
        return object
    }

    func checkOpen() throws {
        if closed { throw TetherError.contextClosed }
    }

    func read(_ object: ManagedObject, _ index: Int, refresh: Bool) throws -> Value {
        try lock.withLock {
            try checkOpen()
            if object.record == nil && !object.loadedFromStore && !object.deletedOnServer {
                object.loadedFromStore = true
                if let stored = try store.load(object.entity, id: object.id) {
                    object.record = stored.record
                    object.fetchedAt = stored.fetchedAt
                }
            }
            if refresh { scheduleRefreshLocked(object) }
            if object.deletedOnServer {
                throw TetherError(.notFound, "\(object.entity.name)/\(object.id) was deleted on the server")
            }
            guard let record = object.record else {
                throw TetherError(.notCached, "\(object.entity.name)/\(object.id) is not cached yet")
            }
            return record.values[index]
        }
    }

    // MARK: subscriptions

    func register(_ subscription: Subscription) throws {
        try lock.withLock {
            try checkOpen()
            let key = ObjectIdentifier(subscription)
            live[key] = subscription
            if let observer = subscription as? KeyObserver { observer.object.observers.append(observer) }
        }
        subscription.onFinished = { [unowned self] in
            lock.withLock {
                live[ObjectIdentifier(subscription)] = nil
                if let observer = subscription as? KeyObserver {
                    observer.object.observers.removeAll { $0 === observer }
                }
            }
        }
    }

    // MARK: merging server answers

    /// Puts records the server sent (already in the store) into their objects
    /// and tells observers of values that changed. Returns the objects.
    func merge(_ records: [Record], of entity: Entity, fetchedAt: Int64) -> [ManagedObject] {
        lock.withLock {
            records.map { record in
                let object = uniqueObject(entity, record.id)
                let old = object.record
                object.record = record
                object.loadedFromStore = true
                object.fetchedAt = fetchedAt
                object.deletedOnServer = false
                for observer in object.observers {
                    let index = observer.attributeIndex
                    if old == nil || old!.values[index] != record.values[index] { observer.notifyChanged() }
                }
                return object
            }
        }
    }

    /// Objects for rows read from the store; objects already in memory keep
    /// their state (the store is written through, so they agree).
    func adopt(_ stored: [StoredRecord], of entity: Entity) -> [ManagedObject] {
        lock.withLock {
            stored.map { row in
                let object = uniqueObject(entity, row.record.id)
                if object.record == nil && !object.deletedOnServer {
                    object.record = row.record
                    object.fetchedAt = row.fetchedAt
                    object.loadedFromStore = true
                }
                return object
            }
        }
    }

    /// Records the server no longer has (already removed from the store).
    func markDeleted(_ ids: [String], of entity: Entity) {
        guard !ids.isEmpty else { return }
        lock.withLock {
            for id in ids {
                let object = uniqueObject(entity, id)
                let wasKnown = object.record != nil
                object.record = nil
                object.deletedOnServer = true
                if wasKnown { object.observers.forEach { $0.notifyChanged() } }
            }
        }
    }

    // MARK: host-thread delivery

    public var deliveryMode: DeliveryMode { delivery.mode }

    /// POLL mode: the descriptor that is readable while callbacks wait.
    public var eventDescriptor: Int32 { delivery.descriptor }

    /// POLL mode: waits up to `timeoutMilliseconds` (negative: no limit), then
    /// runs the callbacks waiting on this thread; returns how many ran.
    public func poll(timeoutMilliseconds: Int32) throws -> Int {
        guard delivery.mode == .poll else { throw TetherError(.misuse, "poll is for contexts opened in poll mode") }
        guard !delivery.isInsideCallback else { throw TetherError(.busy, "poll cannot run inside a callback") }
        try lock.withLock { try checkOpen() }
        return delivery.poll(timeoutMilliseconds: timeoutMilliseconds)
    }
}
