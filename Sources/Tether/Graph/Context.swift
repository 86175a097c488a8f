import Glibc
import Synchronization

/// What a context needs besides its connection.
public struct ContextOptions: Sendable {
    public var storePath: String
    public var delivery: DeliveryMode = .thread
    /// `get` skips its refresh while a value is younger than this.
    public var stalenessMilliseconds: Int64 = 0
    /// Objects nothing holds that the context keeps in memory anyway, most
    /// recently used first; the rest reload from the store on demand.
    public var objectCacheSize = 1024
    /// For saves that do not name one.
    public var mergePolicy = MergePolicy.report
    /// Local-only stores attached beside the server's, each holding the
    /// entities its configuration defines.
    public var localStores: [LocalStoreOptions] = []
    /// While an entity is watched (a live fetch, an observer), its changes
    /// are asked for this often over a server that does not push them
    /// (`PeriodicSync`); 0: never.
    public var syncIntervalMilliseconds: Int64 = ContextOptions.defaultSyncIntervalMilliseconds
    /// A periodic sync ends with the checks of the server's count and its
    /// ids and versions (history rewritten behind a newer change) at most
    /// this often per entity; fetches the host starts always end with them.
    public var fullCheckIntervalMilliseconds: Int64 = ContextOptions.defaultFullCheckIntervalMilliseconds
    /// The store is this process's alone while the context is open: the
    /// open fails (`.busy`) while another process has it open, and so do
    /// other processes' opens meanwhile (`Store/Claims.swift`).
    public var exclusive = false
    public static let defaultSyncIntervalMilliseconds: Int64 = 10_000
    public static let defaultFullCheckIntervalMilliseconds: Int64 = 300_000
    public static let maximumIntervalMilliseconds: Int64 = 7 * 24 * 3_600_000
    /// The cache is allocated up front: a larger size is refused, not attempted.
    public static let maximumObjectCacheSize = 1 << 20

    public init(storePath: String) { self.storePath = storePath }
}

/// The object graph a program works in: the model, the store, the
/// connection, and one object per record among those in memory.
///
/// Threads: the connection's own for the network; `worker` for store
/// writes, merges and timers; `delivery` for host callbacks. A context holds
/// only objects something holds (the host, results, observers, refreshes in
/// flight) plus a bounded cache of recent ones.
public final class Context: Sendable {
    public let model: Model
    /// Whether the server answers: false from an offline open (the model
    /// came from the store) or a request that could not reach it, true again
    /// from any answer. A connection that does not report keeps what open found.
    public var isOnline: Bool { reachability.isOnline ?? openedOnline }
    let openedOnline: Bool
    /// The connection's, shared by siblings.
    let reachability: Reachability
    let options: ContextOptions
    /// Whose changes in the store's outbox are this context's: "" for the
    /// first context on a store, a sibling's name for a sibling.
    public let name: String
    /// Whose rows of the store's outbox are this context's: `name`, or a
    /// guest owner while another process has a context of that name open.
    let outboxOwner: String
    /// This context's claim on each of its stores (`Store/Claims.swift`).
    let claims: [Store.Claim]
    /// The server's store.
    let store: Store
    /// The server's store, then each local store (an entity's `storeIndex`).
    let stores: [Store]
    let connection: any Connection
    /// The contexts sharing this one's store and connection.
    let coordinator: Coordinator
    let worker: WorkQueue
    let delivery: Delivery
    let graph: Lock<Graph>
    /// One object per record among those in memory (its own lock: an
    /// object's deinit takes it, and objects are released under `graph`'s).
    let uniquing: Uniquing
    /// Records the server sent that could not be taken (see `leaveOut`).
    let leftOut = Lock(LeftOutRecords())
    private let closed = Atomic<Bool>(false)
    /// Set once a close has finished, for closes that raced it to wait on.
    private let closeDone = ConditionLock(false)

    struct Graph {
        var closed = false
        /// The recently used objects the context keeps alive: a ring.
        var recent: [ManagedObject?]
        var recentNext = 0
        /// Objects with changes the server has not confirmed: held until it has.
        var changed: [ObjectIdentifier: ManagedObject] = [:]
        /// What each delete made here changed by its rules, until the delete
        /// is settled: undone if it is rolled back or dropped (memory only:
        /// after a reopen, the rules' changes stay as they are).
        var ruleChanges: [ObjectIdentifier: [RuleChange]] = [:]
        /// How to cancel each live task and observer, for close.
        var subscriptions: [Delivery.SubscriptionID: @Sendable () -> Void] = [:]
        var refreshes = RefreshGathering()
        /// Who listens for changed rows of each entity (by entity index).
        var rowListeners: [Int: [ObjectIdentifier: any RowListener]] = [:]
        /// Listings started by the server's change notices (PushedChanges.swift).
        var pushed = PushedRefreshes()
        /// Rounds of syncs of watched entities (PeriodicSync.swift).
        var periodic = PeriodicSync()
        /// Where each store was when last looked at (`OtherProcesses`).
        var storeMarks: [StoreMark?] = []

        init(entities: Int, cacheSize: Int) {
            recent = Array(repeating: nil, count: cacheSize)
        }

        mutating func remember(_ object: ManagedObject) {
            guard !recent.isEmpty else { return }
            recent[recentNext] = object
            recentNext = (recentNext + 1) % recent.count
        }
    }

    init(model: Model, isOnline: Bool, options: ContextOptions, stores: [Store], connection: any Connection,
                 reachability: Reachability, delivery: Delivery, name: String = "", claims: [Store.Claim] = [],
                 coordinator: Coordinator = Coordinator()) {
        self.model = model
        openedOnline = isOnline
        self.reachability = reachability
        self.options = options
        self.name = name
        self.outboxOwner = claims.first?.owner ?? name
        self.claims = claims
        self.coordinator = coordinator
        self.stores = stores
        store = stores[0]
        self.connection = connection
        self.delivery = delivery
        worker = WorkQueue()
        graph = Lock(Graph(entities: model.entities.count, cacheSize: options.objectCacheSize))
        uniquing = Uniquing(entities: model.entities.count)
        Live.contexts.add(1, ordering: .relaxed)
    }

    deinit { Live.contexts.subtract(1, ordering: .relaxed) }

    /// Opens the store, reads the connection's specs and builds the model;
    /// opens offline from the store when the server cannot be reached. The
    /// context owns `connection` from here on, and shuts it down at close
    /// (or now, if opening fails).
    public static func open(_ options: ContextOptions, connection: any Connection) throws -> Context {
        do {
            guard !options.storePath.isEmpty else { throw TetherError(.invalid, "store path is empty") }
            guard options.stalenessMilliseconds >= 0 else { throw TetherError(.invalid, "staleness cannot be negative") }
            guard (0...ContextOptions.maximumIntervalMilliseconds).contains(options.syncIntervalMilliseconds) else {
                throw TetherError(.invalid, "the sync interval must be 0 to \(ContextOptions.maximumIntervalMilliseconds) ms (a week)")
            }
            guard (0...ContextOptions.maximumIntervalMilliseconds).contains(options.fullCheckIntervalMilliseconds) else {
                throw TetherError(.invalid, "the full check interval must be 0 to \(ContextOptions.maximumIntervalMilliseconds) ms (a week)")
            }
            guard (0...ContextOptions.maximumObjectCacheSize).contains(options.objectCacheSize) else {
                throw TetherError(.invalid, "the object cache size must be 0 to \(ContextOptions.maximumObjectCacheSize)")
            }
        } catch {
            connection.shutdown()
            throw error
        }
        // A failed open leaves no new file behind: each store is as it was.
        let paths = [options.storePath] + options.localStores.map(\.path)
        let existed = paths.map { access($0, F_OK) == 0 }
        var stores: [Store] = []
        var claimed: [Store.Claim] = []
        var routed: (any Connection)?
        do {
            try LocalStoreOptions.validate(options.localStores)
            // Each store's owner is checked before anything writes to its file.
            let owners = [(connection.identity, connection.formerIdentities)]
                + options.localStores.map { (LocalStoreOptions.identity(of: $0.configuration), [String]()) }
            for (path, owner) in zip(paths, owners) {
                let opened = try Store(path: path, identity: owner.0, formerIdentities: owner.1)
                stores.append(opened)
                try opened.claim()
            }
            claimed = try claim(stores, name: "", exclusive: options.exclusive)
            let saved = try stores[0].savedModel(identity: connection.identity,
                                                 formerIdentities: connection.formerIdentities)
            let (serverModel, online) = try connect(connection, saved: saved, store: stores[0])
            let model = try attachLocalStores(options.localStores, stores: Array(stores.dropFirst()), to: serverModel,
                                              beside: connection)
            let routing = model.entities.contains(where: \.isLocal)
                ? RoutedConnection(server: connection, local: LocalConnection(model: model, stores: stores)) : connection
            routed = routing
            let delivery = try Delivery(mode: options.delivery)
            // Taken from the server's connection: the routed one wraps it.
            let reachability = (connection as? any ReachabilityReporting)?.reachability ?? Reachability()
            let context = Context(model: model, isOnline: online, options: options, stores: stores,
                                  connection: routing, reachability: reachability, delivery: delivery, claims: claimed)
            try context.coordinator.join(context)
            context.takeStoreBaseline()
            do {
                try context.restoreChanges()
                try context.adoptOrphanedChanges()
            } catch {
                try? context.close()
                throw error
            }
            if online { context.checkCrossStoreReferences() }
            context.startPeriodicSync()
            context.startStoreWatch()
            Log.info(.context, "context opened \(online ? "online" : "offline"): \(model.entities.count) entities, store \(options.storePath)")
            return context
        } catch {
            (routed ?? connection).shutdown()
            for (opened, claim) in zip(stores, claimed) { try? opened.release(claim) }
            for opened in stores { opened.close() }
            for (path, existed) in zip(paths, existed) where !existed {
                for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
            }
            throw error
        }
    }

    /// Builds the model from the server, or takes the saved one when the
    /// server cannot be reached.
    private static func connect(_ connection: any Connection, saved: Model?, store: Store) throws -> (Model, Bool) {
        do {
            _ = try connection.wait(connection.serverInfo).get()
            let specs = try connection.wait(connection.specs).get()
            let model = ModelBuilder.build(specs: specs, previous: saved)
            Log.info(.migration, "model built from \(specs.count) specs: \(model.entities.count) entities"
                     + (saved == nil ? " (new store)" : " (the store had \(saved!.entities.count))"))
            for diagnostic in model.diagnostics {
                Log.warning(.migration, "\(diagnostic.entity)\(diagnostic.attribute.map { "." + $0 } ?? ""): \(diagnostic.message)")
            }
            try store.adopt(model, identity: connection.identity)
            return (model, true)
        } catch let error as TetherError where error.isUnreachable {
            guard let saved else {
                throw TetherError(.network, "\(error.message); and the store has no model to open offline")
            }
            Log.warning(.context, "opening offline, from the store's model: \(error.message)")
            return (saved, false)
        }
    }

    /// Cancels every task and observer, ends every request in flight,
    /// delivers the final callbacks, stops the threads, and closes the store
    /// and the descriptors. Not allowed from inside one of this context's
    /// callbacks. Of closes racing on several threads one does the work; the
    /// others wait for it to be done (so no callback runs after any of them
    /// returns), then fail with `.closed`, as a later close does.
    public func close() throws {
        guard !delivery.isInsideCallback else {
            throw TetherError(.busy, "a context cannot be closed from inside its own callback")
        }
        let closing = graph.withLock { graph -> (cancels: [@Sendable () -> Void], unsaved: Int)? in
            guard !graph.closed else { return nil }
            graph.closed = true
            // Its subscriptions to pushed changes end now: siblings may keep
            // the connection (and its listener) long after.
            updatePushedEntities(&graph)
            return (Array(graph.subscriptions.values), graph.changed.count)
        }
        guard let (cancels, unsaved) = closing else {
            closeDone.withLock(when: { $0 }, until: nil) { _, _ in }
            throw TetherError.contextClosed
        }
        defer { closeDone.withLock { $0 = true } }
        closed.store(true, ordering: .releasing)
        stopPeriodicSync()
        delivery.beginClose()
        for cancel in cancels { cancel() }
        // The store and connection close with the last context sharing them.
        let (joined, last) = coordinator.leave(self)
        if last { connection.shutdown() }
        worker.shutdown()
        delivery.shutdown()
        // One refused for its name (another context of this process has it) claimed nothing of its own.
        if joined { releaseClaims() }
        if last { for store in stores { store.close() } }
        // Objects the host still holds keep their identity and die with their
        // handles. The rest are released here, outside the lock.
        var dropped = Graph(entities: 0, cacheSize: 0)
        dropped.closed = true
        graph.withLock { swap(&$0, &dropped) }
        // Kept, not lost: but a host that meant to save should hear of them.
        if unsaved > 0 {
            Log.info(.context, "context \(name.debugDescription) closed with \(unsaved) unsaved change\(unsaved == 1 ? "" : "s"): "
                     + "they stay in the store's outbox under its name, for the next context opened under it "
                     + "(in any process) to save")
        }
    }

    public var isClosed: Bool { closed.load(ordering: .acquiring) }

    func checkOpen() throws {
        if isClosed { throw TetherError.contextClosed }
    }

    /// Open, or closing and inside one of its callbacks: a fetch that ended
    /// as the close began has its final (OK, with its answer) delivered by
    /// the close, and the answer's objects are made as the callback reads
    /// them; the stores stay open until every final has run.
    func checkReadable() throws {
        if isClosed && !delivery.isInsideCallback { throw TetherError.contextClosed }
    }

    /// The store that holds `entity`'s records.
    func store(for entity: Entity) -> Store { stores[entity.storeIndex] }

    // MARK: objects

    /// The one object in memory for a record of `entity`; it need not be cached yet.
    public func object(entity name: String, id: String) throws -> ManagedObject {
        let entity = try model.existingEntity(named: name)
        guard !id.isEmpty else { throw TetherError(.invalid, "a record id cannot be empty") }
        try checkOpen()
        return uniqueObject(entity, id)
    }

    /// `uniqueObjects` of one id (a host's first read).
    func uniqueObject(_ entity: Entity, _ id: String) -> ManagedObject {
        uniqueObjects(entity, CollectionOfOne(id))[0]
    }

    /// The objects for these ids, made where none is in memory; each is
    /// remembered among the recently used.
    func uniqueObjects(_ entity: Entity, _ ids: some Collection<String>) -> [ManagedObject] {
        let objects = uniquing.objects(entity, ids) { ManagedObject(context: self, entity: entity, id: $0) }
        // Outside the uniquing lock: remembering releases the object it
        // displaces, whose deinit takes that lock.
        if !objects.isEmpty && options.objectCacheSize > 0 {
            graph.withLock { graph in for object in objects { graph.remember(object) } }
        }
        return objects
    }

    /// The objects in memory among these ids (none is made).
    func objectsInMemory(_ entity: Entity, _ ids: [String]) -> [ManagedObject] {
        uniquing.inMemory(entity, ids)
    }

    func read(_ object: ManagedObject, _ index: Int, refresh: Bool) throws -> Value {
        if let value = try readInMemory(object, index, refresh: refresh) { return value }
        let outcome = try withCommittedRow(object) { $0.read(index) }
        if refresh { scheduleRefresh(object) }
        return try value(outcome, object)
    }

    /// Runs `body` on the object's state with its committed row in memory,
    /// read from the store first if it is not (nil there: not cached). An
    /// object with a pending edit reads its edited keys without the row;
    /// what compares or merges with the server's side needs it.
    func withCommittedRow<T>(_ object: ManagedObject, _ body: (inout ManagedObject.State) throws -> T) throws -> T {
        let loaded = object.state.withLock { $0.record != nil || $0.loaded }
        let stored = loaded ? nil : try store(for: object.entity).load(object.entity, id: object.id)
        // Not stored: a tombstone tells a record the server deleted (before a reopen) from one never fetched.
        let buried = try !loaded && stored == nil && !object.entity.isLocal
            && store(for: object.entity).isDeleted(object.entity, id: object.id)
        return try object.state.withLock { state in
            if state.record == nil && !state.loaded {
                state.loaded = true
                state.record = stored?.record
                state.fetchedAt = stored?.fetchedAt ?? 0
                if buried { state.deletedOnServer = true }
            }
            return try body(&state)
        }
    }

    /// A read that needs nothing from the store; nil (nothing done) when
    /// the row must be loaded first.
    func readInMemory(_ object: ManagedObject, _ index: Int, refresh: Bool) throws -> Value? {
        try checkOpen()
        // The one value is taken under the object's lock, not the whole record.
        let outcome = object.state.withLock { $0.read(index) }
        if case .needsLoad = outcome { return nil }
        if refresh { scheduleRefresh(object) }
        return try value(outcome, object)
    }

    private func value(_ outcome: ManagedObject.State.Read, _ object: ManagedObject) throws -> Value {
        switch outcome {
        case .value(let value): return value
        case .deleted: throw TetherError(.notFound, "\(object.entity.name)/\(object.id) was deleted")
        case .absent: throw TetherError.noRecord(object.entity, object.id)
        // A local store is its records' only copy: what it lacks does not exist.
        case .notCached where object.entity.isLocal: throw TetherError.noRecord(object.entity, object.id)
        case .notCached, .needsLoad: throw TetherError(.notCached, "\(object.entity.name)/\(object.id) is not cached yet")
        }
    }

    // MARK: subscriptions

    /// Registers a task or observer with the delivery and with close.
    func subscribe(cancel: @escaping @Sendable (Delivery.SubscriptionID) -> Void, deliverCancellation: @escaping @Sendable () -> Void,
                   finished: @escaping @Sendable () -> Void) throws -> Delivery.SubscriptionID {
        try graph.withLock { graph in
            guard !graph.closed else { throw TetherError.contextClosed }
            let id = try delivery.register(deliverCancellation: deliverCancellation, finished: { [self] id in
                finished()
                _ = self.graph.withLock { $0.subscriptions.removeValue(forKey: id) }
            })
            graph.subscriptions[id] = { cancel(id) }
            return id
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
        try checkOpen()
        return try delivery.poll(timeoutMilliseconds: timeoutMilliseconds)
    }
}

extension TetherError {
    /// A record the server says it lacks and that was never cached here:
    /// a wrong id, which "was deleted" would misdescribe.
    static func noRecord(_ entity: Entity, _ id: String) -> TetherError {
        TetherError(.notFound, "no record \(entity.name)/\(id) " + (entity.isLocal ? "in local store \(entity.configuration)" : "on the server"))
    }
}
