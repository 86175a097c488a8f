// The C ABI, "context" section of include/tether.h: options, open, close,
// online state and delivery; and the "Kinto" section (its options and open),
// which sits between the context's options and its close.
import CTetherABI
import Glibc
import Synchronization
import Tether

@_cdecl("tether_context_options_init")
public func tether_context_options_init(_ opts: UnsafeMutablePointer<tether_context_options>?, _ version: UInt32) -> Int32 {
    call { try initialize(opts, version: version, "opts") }
}

extension tether_context_options: VersionedStruct {
    static var noun: String { "options" }
    static var initializer: String { "tether_context_options_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_CONTEXT_OPTIONS_VERSION) }
    /// 1 to 4 had 0.2's layout (Kinto's fields first), which 0.3 cannot
    /// read as its own.
    static var firstVersion: UInt32 { 5 }
    static var formerVersions: String {
        "0.2's layout, which 0.3 does not read (put Kinto's fields in tether_kinto_options)"
    }
    static var versionEnds: [PartialKeyPath<Self>] { [\.sync_interval_ms, \.exclusive] }
    static var defaults: Self {
        var options = Self()
        options.delivery = TETHER_DELIVER_THREAD
        options.staleness_ms = 0
        options.timeout_ms = 30_000
        options.object_cache_size = 1024
        options.merge_policy = TETHER_MERGE_REPORT
        options.sync_interval_ms = ContextOptions.defaultSyncIntervalMilliseconds
        options.full_check_interval_ms = ContextOptions.defaultFullCheckIntervalMilliseconds
        options.exclusive = 0
        return options
    }
}

@_cdecl("tether_kinto_options_init")
public func tether_kinto_options_init(_ kinto: UnsafeMutablePointer<tether_kinto_options>?, _ version: UInt32) -> Int32 {
    call { try initialize(kinto, version: version, "kinto") }
}

extension tether_kinto_options: VersionedStruct {
    static var noun: String { "Kinto options" }
    static var initializer: String { "tether_kinto_options_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_KINTO_OPTIONS_VERSION) }
    static var defaults: Self { Self() }
}

/// A context and the handles of its model, as the boundary keeps them.
final class ContextBox {
    let context: Context
    var entityHandles: [OpaquePointer] = []
    /// The context's diagnostics as C strings (entity, attribute or nil,
    /// message), copied as they are first read: the list only grows, and
    /// each string lives until the context's handle dies.
    private let copied = Mutex<[(UnsafeMutablePointer<CChar>, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<CChar>)]>([])

    init(_ context: Context) {
        self.context = context
    }

    var diagnostics: [(UnsafeMutablePointer<CChar>, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<CChar>)] {
        let all = context.diagnostics
        return copied.withLock { copied in
            for diagnostic in all.dropFirst(copied.count) {
                copied.append((diagnostic.entity.cDuplicate, diagnostic.attribute?.cDuplicate, diagnostic.message.cDuplicate))
            }
            return copied
        }
    }

    deinit {
        for (entity, attribute, message) in copied.withLock({ $0 }) {
            free(entity)
            free(attribute)
            free(message)
        }
    }
}

extension String {
    /// A malloc'd C copy. Names from a server may not hold U+0000 (the
    /// model leaves such out), so nothing is cut short.
    var cDuplicate: UnsafeMutablePointer<CChar> { strdup(self)! }
}

func contextBox(_ pointer: OpaquePointer?) throws -> (box: ContextBox, token: UInt) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .context, as: ContextBox.self)
    return (resolved.object, resolved.owner)
}

@_cdecl("tether_context_open_kinto")
public func tether_context_open_kinto(_ opts: UnsafePointer<tether_context_options>?,
                                      _ kintoOptions: UnsafePointer<tether_kinto_options>?,
                                      _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let raw = try contextOptions(opts, out)
        guard let kintoOptions else { throw misuse("kinto is NULL") }
        let rawKinto = try read(kintoOptions)
        var kinto = KintoOptions(serverURL: try text(rawKinto.server_url, "server_url"), bucket: try text(rawKinto.bucket, "bucket"))
        kinto.username = try optionalText(rawKinto.username, "username")
        kinto.password = try optionalText(rawKinto.password, "password")
        kinto.timeoutMilliseconds = raw.timeout_ms
        let options = try coreOptions(raw)
        try output(out, try register(Context.open(options, connection: KintoConnection(kinto))))
    }
}

/// The host's options struct, as far as its version goes.
func contextOptions(_ opts: UnsafePointer<tether_context_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) throws
    -> tether_context_options {
    guard let opts else { throw misuse("opts is NULL") }
    guard out != nil else { throw misuse("out is NULL") }
    return try read(opts)
}

/// The options every context takes, whatever its connection.
func coreOptions(_ raw: tether_context_options) throws -> ContextOptions {
    var options = ContextOptions(storePath: try text(raw.store_path, "store_path"))
    options.delivery = try deliveryMode(raw.delivery)
    options.stalenessMilliseconds = raw.staleness_ms
    options.objectCacheSize = raw.object_cache_size  // size_t arrives as Int: SIZE_MAX is -1, refused by open
    options.mergePolicy = try mergePolicy(Int32(bitPattern: raw.merge_policy.rawValue))
    options.localStores = try localStores(raw.local_stores, count: raw.local_store_count)
    options.syncIntervalMilliseconds = raw.sync_interval_ms
    options.fullCheckIntervalMilliseconds = raw.full_check_interval_ms
    options.exclusive = raw.exclusive != 0
    return options
}

/// A context's handle, and its entities' (the fuzzer registers contexts on
/// other connections through this too).
func register(_ context: Context) throws -> OpaquePointer {
    let box = ContextBox(context)
    let handle = try Handles.shared.register(box, kind: .context, owner: 0).handle
    let token = Handles.token(handle)
    // Each context's own: siblings share the model's entities, not their handles.
    box.entityHandles = try context.model.entities.map { entity in
        try Handles.shared.register(EntityBox(entity, model: context.model), kind: .entity, owner: token).handle
    }
    return handle
}

@_cdecl("tether_context_close")
public func tether_context_close(_ ctx: OpaquePointer?) -> Int32 {
    call {
        guard let ctx else { return }
        let (box, _) = try contextBox(ctx)
        try box.context.close()
        let held = Handles.shared.removeContext(ctx)
        _ = held  // released here, outside the registry's lock
    }
}

@_cdecl("tether_context_is_online")
public func tether_context_is_online(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    call {
        let context = try openContext(ctx)
        try output(out, context.isOnline ? 1 : 0)
    }
}

@_cdecl("tether_context_changed")
public func tether_context_changed(_ ctx: OpaquePointer?, _ entity: UnsafePointer<CChar>?) -> Int32 {
    call {
        let context = try openContext(ctx)
        try context.changed(entity: try optionalText(entity, "entity"))
    }
}

@_cdecl("tether_context_observe_online")
public func tether_context_observe_online(_ ctx: OpaquePointer?, _ callback: tether_online_cb?, _ userdata: UnsafeMutableRawPointer?,
                                          _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let context = try openContext(ctx)
        guard let callback, let ctx else { throw misuse("callback is NULL") }
        let observer = OnlineObserver(context: context)
        let handle = try Handles.shared.register(observer, kind: .observer, owner: Handles.token(ctx)).handle
        let host = HostCall(callback, userdata, handle: handle, object: ctx)
        do {
            try observer.activate { online, final in
                host.function(host.object, online ? 1 : 0, final.map { status(of: $0.kind) } ?? TETHER_OK, host.userdata)
                if final != nil { Handles.shared.remove(host.handle) }
            }
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        out?.pointee = handle
    }
}

private func openContext(_ pointer: OpaquePointer?) throws -> Context {
    let context = try contextBox(pointer).box.context
    if context.isClosed { throw TetherError(.closed, "the context is closed") }
    return context
}

@_cdecl("tether_context_fd")
public func tether_context_fd(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    call {
        let context = try openContext(ctx)
        guard context.deliveryMode == .poll else { throw misuse("the context delivers on its own thread: no descriptor") }
        try output(out, context.eventDescriptor)
    }
}

@_cdecl("tether_context_poll")
public func tether_context_poll(_ ctx: OpaquePointer?, _ timeout: Int32, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let delivered = try openContext(ctx).poll(timeoutMilliseconds: timeout)
        out?.pointee = delivered
    }
}

func deliveryMode(_ raw: tether_delivery) throws -> DeliveryMode {
    switch raw {
    case TETHER_DELIVER_THREAD: return .thread
    case TETHER_DELIVER_POLL: return .poll
    default: throw TetherError(.invalid, "unknown delivery mode \(raw.rawValue)")
    }
}

func mergePolicy(_ raw: Int32) throws -> MergePolicy {
    guard let policy = MergePolicy(rawValue: Int(raw)) else { throw TetherError(.invalid, "unknown merge policy \(raw)") }
    return policy
}
