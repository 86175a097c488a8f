// The C ABI of include/tether.h: each function checks its handles and
// arguments, converts types, and forwards to the core.
import CTetherABI
import Glibc
import Synchronization
import Tether

private let versionText = strdup(TETHER_VERSION)!

@_cdecl("tether_version")
public func tether_version() -> UnsafePointer<CChar> { UnsafePointer(versionText) }

@_cdecl("tether_version_number")
public func tether_version_number() -> Int32 { TETHER_VERSION_NUMBER }

@_cdecl("tether_errmsg")
public func tether_errmsg() -> UnsafePointer<CChar> { lastMessage() }

private let statusNames: [Int32: UnsafeMutablePointer<CChar>] = ([
    TETHER_OK: "TETHER_OK", TETHER_E_ERROR: "TETHER_E_ERROR", TETHER_E_MISUSE: "TETHER_E_MISUSE",
    TETHER_E_HANDLE: "TETHER_E_HANDLE", TETHER_E_NOT_FOUND: "TETHER_E_NOT_FOUND", TETHER_E_TYPE: "TETHER_E_TYPE",
    TETHER_E_INVALID: "TETHER_E_INVALID", TETHER_E_NETWORK: "TETHER_E_NETWORK", TETHER_E_AUTH: "TETHER_E_AUTH",
    TETHER_E_SERVER: "TETHER_E_SERVER", TETHER_E_PROTOCOL: "TETHER_E_PROTOCOL", TETHER_E_STORE: "TETHER_E_STORE",
    TETHER_E_CANCELLED: "TETHER_E_CANCELLED", TETHER_E_NOT_CACHED: "TETHER_E_NOT_CACHED", TETHER_E_BUSY: "TETHER_E_BUSY",
    TETHER_E_CONFLICT: "TETHER_E_CONFLICT",
    TETHER_E_NOT_ALLOWED: "TETHER_E_NOT_ALLOWED", TETHER_E_EXPIRED: "TETHER_E_EXPIRED",
] as [Int32: String]).mapValues { strdup($0)! }
private let unknownStatusName = strdup("TETHER_E_UNKNOWN")!

@_cdecl("tether_errstr")
public func tether_errstr(_ status: Int32) -> UnsafePointer<CChar> {
    UnsafePointer(statusNames[status] ?? unknownStatusName)
}

// MARK: values

@_cdecl("tether_value_clear")
public func tether_value_clear(_ value: UnsafeMutablePointer<tether_value>?) {
    guard let value else { return }
    free(value.pointee.text)
    value.pointee = tether_value()
}

func fill(_ out: UnsafeMutablePointer<tether_value>?, _ value: Value) throws {
    guard let out else { throw misuse("out is NULL") }
    var result = tether_value()
    func setText(_ string: String, _ type: tether_type) {
        var string = string
        string.withUTF8 { bytes in
            let copy = malloc(bytes.count + 1)!.assumingMemoryBound(to: CChar.self)
            if let base = bytes.baseAddress { memcpy(copy, base, bytes.count) }
            copy[bytes.count] = 0
            result.text = copy
            result.length = bytes.count
        }
        result.type = type
    }
    switch value {
    case .null: result.type = TETHER_TYPE_NULL
    case .text(let s): setText(s, TETHER_TYPE_TEXT)
    case .json(let s): setText(s, TETHER_TYPE_JSON)
    case .integer(let i):
        result.type = TETHER_TYPE_INTEGER
        result.integer = i
    case .real(let d):
        result.type = TETHER_TYPE_REAL
        result.real = d
    case .boolean(let b):
        result.type = TETHER_TYPE_BOOLEAN
        result.integer = b ? 1 : 0
    }
    out.pointee = result
}

// MARK: context

@_cdecl("tether_context_options_init")
public func tether_context_options_init(_ opts: UnsafeMutablePointer<tether_context_options>?, _ version: UInt32) -> Int32 {
    call {
        guard (1...UInt32(TETHER_CONTEXT_OPTIONS_VERSION)).contains(version) else { throw misuse("unknown options version \(version)") }
        guard let opts else { throw misuse("opts is NULL") }
        let defaults = defaultContextOptions(version: version)
        // A version-1 struct is shorter: write only its fields.
        withUnsafeBytes(of: defaults) { bytes in
            UnsafeMutableRawPointer(opts).copyMemory(from: bytes.baseAddress!, byteCount: contextOptionsSize(version))
        }
    }
}

private func defaultContextOptions(version: UInt32) -> tether_context_options {
    var options = tether_context_options()
    options.version = version
    options.delivery = TETHER_DELIVER_THREAD
    options.staleness_ms = 0
    options.timeout_ms = 30_000
    options.object_cache_size = 1024
    options.merge_policy = TETHER_MERGE_REPORT
    return options
}

/// The bytes of a context options struct of `version`.
private func fetchOptionsSize(_ version: UInt32) -> Int {
    switch version {
    case 1: return MemoryLayout<tether_fetch_options>.offset(of: \tether_fetch_options.predicate)!
    case 2: return MemoryLayout<tether_fetch_options>.offset(of: \tether_fetch_options.offset)!
    case 3: return MemoryLayout<tether_fetch_options>.offset(of: \tether_fetch_options.result_type)!
    case 4: return MemoryLayout<tether_fetch_options>.offset(of: \tether_fetch_options.live)!
    case 5: return MemoryLayout<tether_fetch_options>.offset(of: \tether_fetch_options.related_owner)!
    default: return MemoryLayout<tether_fetch_options>.size
    }
}

/// A predicate argument from the host: text by length, so it may hold NUL.
func argument(_ value: tether_value, number: Int) throws -> Value {
    switch value.type {
    case TETHER_TYPE_NULL: return .null
    case TETHER_TYPE_INTEGER: return .integer(value.integer)
    case TETHER_TYPE_REAL: return .real(value.real)
    case TETHER_TYPE_BOOLEAN: return .boolean(value.integer != 0)
    case TETHER_TYPE_TEXT:
        guard value.text != nil || value.length == 0 else { throw misuse("argument $\(number) is TEXT with a NULL text") }
        let bytes = UnsafeRawBufferPointer(start: value.text, count: value.length)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw TetherError(.invalid, "argument $\(number) is not valid UTF-8")
        }
        return .text(text)
    default: throw TetherError(.invalid, "argument $\(number) has type \(value.type.rawValue): give TEXT, INTEGER, REAL, BOOLEAN or NULL")
    }
}

private func contextOptionsSize(_ version: UInt32) -> Int {
    switch version {
    case 1: return MemoryLayout<tether_context_options>.offset(of: \tether_context_options.object_cache_size)!
    case 2: return MemoryLayout<tether_context_options>.offset(of: \tether_context_options.merge_policy)!
    case 3: return MemoryLayout<tether_context_options>.offset(of: \tether_context_options.local_stores)!
    default: return MemoryLayout<tether_context_options>.size
    }
}

/// An entity as one context's handle holds it.
final class EntityBox {
    let entity: Entity
    init(_ entity: Entity) { self.entity = entity }
}

/// The handle of `entity` in the context whose token is `owner`.
func entityHandle(_ entity: Entity, owner: UInt) throws -> OpaquePointer {
    let box = try Handles.shared.resolve(Handles.pointer(owner), .context, as: ContextBox.self)
    return box.entityHandles[entity.index]
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

@_cdecl("tether_context_diagnostic_count")
public func tether_context_diagnostic_count(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try contextBox(ctx).box.diagnostics.count) }
}

@_cdecl("tether_context_diagnostic_at")
public func tether_context_diagnostic_at(_ ctx: OpaquePointer?, _ index: Int,
                                         _ outEntity: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                         _ outAttribute: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                         _ outMessage: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let diagnostics = try contextBox(ctx).box.diagnostics
        guard index >= 0, index < diagnostics.count else { throw TetherError(.notFound, "no diagnostic at index \(index)") }
        let (entity, attribute, message) = diagnostics[index]
        outEntity?.pointee = UnsafePointer(entity)
        outAttribute?.pointee = attribute.map { UnsafePointer($0) }
        outMessage?.pointee = UnsafePointer(message)
    }
}

func contextBox(_ pointer: OpaquePointer?) throws -> (box: ContextBox, token: UInt) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .context, as: ContextBox.self)
    return (resolved.object, resolved.owner)
}

@_cdecl("tether_context_open")
public func tether_context_open(_ opts: UnsafePointer<tether_context_options>?,
                                _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let raw = try contextOptions(opts, out)
        var kinto = KintoOptions(serverURL: try text(raw.server_url, "server_url"), bucket: try text(raw.bucket, "bucket"))
        kinto.username = try optionalText(raw.username, "username")
        kinto.password = try optionalText(raw.password, "password")
        kinto.timeoutMilliseconds = raw.timeout_ms
        try output(out, try register(Context.open(try coreOptions(raw), kinto: kinto)))
    }
}

/// The host's options struct, read no further than its version goes (later
/// fields keep their defaults).
func contextOptions(_ opts: UnsafePointer<tether_context_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) throws
    -> tether_context_options {
    guard let opts else { throw misuse("opts is NULL") }
    guard out != nil else { throw misuse("out is NULL") }
    let version = UnsafeRawPointer(opts).load(as: UInt32.self)
    guard (1...UInt32(TETHER_CONTEXT_OPTIONS_VERSION)).contains(version) else {
        throw misuse("unknown options version \(version): use tether_context_options_init")
    }
    var raw = defaultContextOptions(version: version)
    withUnsafeMutableBytes(of: &raw) { bytes in
        bytes.baseAddress!.copyMemory(from: UnsafeRawPointer(opts), byteCount: contextOptionsSize(version))
    }
    return raw
}

/// The options every context takes, whatever its connection.
func coreOptions(_ raw: tether_context_options) throws -> ContextOptions {
    var options = ContextOptions(storePath: try text(raw.store_path, "store_path"))
    switch raw.delivery {
    case TETHER_DELIVER_THREAD: options.delivery = .thread
    case TETHER_DELIVER_POLL: options.delivery = .poll
    default: throw TetherError(.invalid, "unknown delivery mode \(raw.delivery.rawValue)")
    }
    options.stalenessMilliseconds = raw.staleness_ms
    options.objectCacheSize = raw.object_cache_size  // size_t arrives as Int: SIZE_MAX is -1, refused by open
    options.mergePolicy = try mergePolicy(Int32(bitPattern: raw.merge_policy.rawValue))
    options.localStores = try localStores(raw.local_stores, count: raw.local_store_count)
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
        try Handles.shared.register(EntityBox(entity), kind: .entity, owner: token,
                                    strings: [entity.name, entity.route] + entity.attributes.map(\.name)
                                        + context.model.inverses(of: entity).map(\.name) + [entity.configuration]).handle
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

// MARK: model

@_cdecl("tether_context_entity_count")
public func tether_context_entity_count(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try contextBox(ctx).box.entityHandles.count) }
}

@_cdecl("tether_context_entity_at")
public func tether_context_entity_at(_ ctx: OpaquePointer?, _ index: Int, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let handles = try contextBox(ctx).box.entityHandles
        guard index >= 0, index < handles.count else { throw TetherError(.notFound, "no entity at index \(index)") }
        try output(out, handles[index])
    }
}

@_cdecl("tether_context_entity")
public func tether_context_entity(_ ctx: OpaquePointer?, _ name: UnsafePointer<CChar>?,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let box = try contextBox(ctx).box
        let name = try text(name, "name")
        guard let entity = box.context.model.entity(named: name) else {
            throw TetherError(.notFound, "the model has no entity \(name.debugDescription)")
        }
        try output(out, box.entityHandles[entity.index])
    }
}

private func entity(_ pointer: OpaquePointer?) throws -> (Entity, [UnsafeMutablePointer<CChar>]) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .entity, as: EntityBox.self)
    return (resolved.object.entity, resolved.strings)
}

@_cdecl("tether_entity_name")
public func tether_entity_name(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entity(e).1[0])) }
}

@_cdecl("tether_entity_route")
public func tether_entity_route(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entity(e).1[1])) }
}

@_cdecl("tether_entity_configuration")
public func tether_entity_configuration(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entity(e).1.last!)) }
}

@_cdecl("tether_entity_code")
public func tether_entity_code(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    call { try output(out, Int32(clamping: try entity(e).0.code)) }
}

@_cdecl("tether_entity_operations")
public func tether_entity_operations(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UInt32>?) -> Int32 {
    call { try output(out, try entity(e).0.operations.rawValue) }
}

@_cdecl("tether_entity_attribute_count")
public func tether_entity_attribute_count(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try entity(e).0.attributes.count) }
}

@_cdecl("tether_entity_attribute_at")
public func tether_entity_attribute_at(_ e: OpaquePointer?, _ index: Int,
                                       _ outName: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                       _ outCode: UnsafeMutablePointer<Int32>?,
                                       _ outType: UnsafeMutablePointer<tether_type>?,
                                       _ outFlags: UnsafeMutablePointer<UInt32>?) -> Int32 {
    call {
        let (entity, strings) = try entity(e)
        guard index >= 0, index < entity.attributes.count else {
            throw TetherError(.notFound, "\(entity.name) has no attribute at index \(index)")
        }
        let attribute = entity.attributes[index]
        outName?.pointee = UnsafePointer(strings[2 + index])
        outCode?.pointee = Int32(clamping: attribute.code)
        outType?.pointee = tether_type(rawValue: UInt32(attribute.type.rawValue))
        var flags: UInt32 = 0
        if attribute.isID { flags |= TETHER_ATTR_ID }
        if attribute.isVersion { flags |= TETHER_ATTR_VERSION }
        if attribute.isRequired { flags |= TETHER_ATTR_REQUIRED }
        outFlags?.pointee = flags
    }
}

@_cdecl("tether_entity_attribute_index")
public func tether_entity_attribute_index(_ e: OpaquePointer?, _ name: UnsafePointer<CChar>?,
                                          _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let entity = try entity(e).0
        let name = try text(name, "name")
        guard let index = entity.attributeIndex(named: name) else {
            throw TetherError(.notFound, "\(entity.name) has no attribute \(name.debugDescription)")
        }
        try output(out, index)
    }
}

@_cdecl("tether_entity_attribute_index_by_code")
public func tether_entity_attribute_index_by_code(_ e: OpaquePointer?, _ code: Int32,
                                                  _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let entity = try entity(e).0
        guard let index = entity.attributeIndex(code: Int(code)) else {
            throw TetherError(.notFound, "\(entity.name) has no attribute with code \(code)")
        }
        try output(out, index)
    }
}

// MARK: objects

func objectHandle(_ object: ManagedObject, owner: UInt) throws -> OpaquePointer {
    try Handles.shared.register(object, kind: .object, owner: owner, strings: [object.id]).handle
}

func object(_ pointer: OpaquePointer?) throws -> (object: ManagedObject, owner: UInt, id: UnsafeMutablePointer<CChar>) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .object, as: ManagedObject.self)
    return (resolved.object, resolved.owner, resolved.strings[0])
}

@_cdecl("tether_context_object")
public func tether_context_object(_ ctx: OpaquePointer?, _ entityName: UnsafePointer<CChar>?, _ id: UnsafePointer<CChar>?,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard out != nil else { throw misuse("out is NULL") }
        let object = try box.context.object(entity: try text(entityName, "entity"), id: try text(id, "id"))
        try output(out, try objectHandle(object, owner: token))
    }
}

@_cdecl("tether_object_retain")
public func tether_object_retain(_ obj: OpaquePointer?) -> Int32 {
    call { try Handles.shared.retain(obj, .object) }
}

@_cdecl("tether_object_release")
public func tether_object_release(_ obj: OpaquePointer?) -> Int32 {
    call {
        guard let obj else { return }
        try Handles.shared.release(obj, .object)
    }
}

@_cdecl("tether_object_entity")
public func tether_object_entity(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (target, owner, _) = try object(obj)
        try output(out, try entityHandle(target.entity, owner: owner))
    }
}

@_cdecl("tether_object_id")
public func tether_object_id(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try object(obj).id)) }
}

@_cdecl("tether_object_version")
public func tether_object_version(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    call {
        let object = try Handles.shared.resolve(obj, .object, as: ManagedObject.self)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try object.version())
    }
}

/// The four reads share their checks: the handle, then `out`, then the key.
/// A value in memory is read with the handle borrowed (the common, fast
/// case); one that must be loaded from the store, with it retained.
private func readValue(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<tether_value>?, refresh: Bool,
                       _ attribute: (ManagedObject) throws -> Int) -> Int32 {
    call {
        let inMemory = try Handles.shared.borrow(obj, .object, as: ManagedObject.self) { object -> Value? in
            guard out != nil else { throw misuse("out is NULL") }
            return try object.readInMemory(attribute: try attribute(object), refresh: refresh)
        }
        if let inMemory { return try fill(out, inMemory) }
        let object = try Handles.shared.resolve(obj, .object, as: ManagedObject.self)
        try fill(out, try object.read(attribute: try attribute(object), refresh: refresh))
    }
}

/// A C string key as its bytes, without copying.
func keyBytes(_ key: UnsafePointer<CChar>?) throws -> UnsafeBufferPointer<UInt8> {
    guard let key else { throw misuse("key is NULL") }
    // Keys are short: counting in place beats a call to strlen.
    var count = 0
    while key[count] != 0 { count += 1 }
    return UnsafeBufferPointer(start: UnsafeRawPointer(key).assumingMemoryBound(to: UInt8.self), count: count)
}

@_cdecl("tether_object_peek")
public func tether_object_peek(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    readByKey(obj, key, out, refresh: false)
}

@_cdecl("tether_object_get")
public func tether_object_get(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    readByKey(obj, key, out, refresh: true)
}

/// A read by name; a name no attribute has may be a key path ("Client.Owner").
private func readByKey(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<tether_value>?,
                       refresh: Bool) -> Int32 {
    let status = readValue(obj, out, refresh: refresh) { try $0.attributeIndex(bytes: try keyBytes(key)) }
    guard status == TETHER_E_NOT_FOUND, let key, strchr(key, Int32(UInt8(ascii: "."))) != nil else { return status }
    return call {
        let object = try Handles.shared.resolve(obj, .object, as: ManagedObject.self)
        guard out != nil else { throw misuse("out is NULL") }
        let path = try text(key, "key")
        try fill(out, try refresh ? object.get(path) : object.peek(path))
    }
}

@_cdecl("tether_object_peek_code")
public func tether_object_peek_code(_ obj: OpaquePointer?, _ code: Int32, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    readValue(obj, out, refresh: false) { try $0.attributeIndex(code: Int(code)) }
}

@_cdecl("tether_object_get_code")
public func tether_object_get_code(_ obj: OpaquePointer?, _ code: Int32, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    readValue(obj, out, refresh: true) { try $0.attributeIndex(code: Int(code)) }
}

// MARK: observers

@_cdecl("tether_object_observe")
public func tether_object_observe(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ callback: tether_observer_cb?,
                                  _ userdata: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (object, owner, _) = try object(obj)
        let key = try text(key, "key")
        guard let callback else { throw misuse("callback is NULL") }
        let observer = try object.makeObserver(key: key)
        let (handle, strings) = try Handles.shared.register(observer, kind: .observer, owner: owner, strings: [key])
        // The observer holds its object's handle, so the callback can lend it.
        let objectPointer: OpaquePointer
        do {
            objectPointer = try objectHandle(object, owner: owner)
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        let host = HostCall(callback, userdata, handle: handle, object: objectPointer, key: strings[0])
        do {
            try observer.activate { error in
                host.function(host.object, host.key, error.map { status(of: $0.kind) } ?? TETHER_OK, host.userdata)
                guard error?.kind == .cancelled else { return }  // the final call; failed refreshes are not
                Handles.shared.remove(host.handle)
                _ = try? Handles.shared.release(host.object, .object)
            }
        } catch {
            Handles.shared.remove(handle)
            _ = try? Handles.shared.release(objectPointer, .object)
            throw error
        }
        out?.pointee = handle
    }
}

@_cdecl("tether_observer_remove")
public func tether_observer_remove(_ observer: OpaquePointer?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolve(observer, .observer, as: AnyObject.self)
        if let online = resolved as? OnlineObserver { try online.remove() } else { try (resolved as! KeyObserver).remove() }
    }
}

// MARK: fetch

@_cdecl("tether_fetch_options_init")
public func tether_fetch_options_init(_ opts: UnsafeMutablePointer<tether_fetch_options>?, _ version: UInt32) -> Int32 {
    call {
        guard (1...UInt32(TETHER_FETCH_OPTIONS_VERSION)).contains(version) else {
            throw misuse("unknown options version \(version)")
        }
        guard let opts else { throw misuse("opts is NULL") }
        var options = tether_fetch_options()
        options.version = version
        options.policy = TETHER_POLICY_CACHE_THEN_SERVER
        // A version 1 host's struct ends before the version 2 fields.
        withUnsafeBytes(of: &options) { bytes in
            UnsafeMutableRawPointer(opts).copyMemory(from: bytes.baseAddress!, byteCount: fetchOptionsSize(version))
        }
    }
}

@_cdecl("tether_fetch_start")
public func tether_fetch_start(_ ctx: OpaquePointer?, _ opts: UnsafePointer<tether_fetch_options>?,
                               _ callback: tether_fetch_cb?, _ userdata: UnsafeMutableRawPointer?,
                               _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard let opts else { throw misuse("opts is NULL") }
        guard let callback else { throw misuse("callback is NULL") }
        let version = UnsafeRawPointer(opts).load(as: UInt32.self)
        guard (1...UInt32(TETHER_FETCH_OPTIONS_VERSION)).contains(version) else {
            throw misuse("unknown options version \(version): use tether_fetch_options_init")
        }
        // Read no further than the host's struct goes; later fields keep their defaults.
        var raw = tether_fetch_options()
        withUnsafeMutableBytes(of: &raw) { bytes in
            bytes.baseAddress!.copyMemory(from: UnsafeRawPointer(opts), byteCount: fetchOptionsSize(version))
        }
        var request = FetchRequest(entity: raw.related_owner != nil && raw.entity == nil ? "" : try text(raw.entity, "entity"))
        if raw.related_owner != nil || raw.related_name != nil {
            let (owner, ownerContext, _) = try object(raw.related_owner)
            guard ownerContext == token else { throw TetherError(.invalid, "related_owner belongs to another context") }
            request.related = (owner, try text(raw.related_name, "related_name"))
        }
        request.sort = try optionalText(raw.sort, "sort")
        request.limit = raw.limit
        switch raw.policy {
        case TETHER_POLICY_CACHE_THEN_SERVER: request.policy = .cacheThenServer
        case TETHER_POLICY_CACHE_ONLY: request.policy = .cacheOnly
        case TETHER_POLICY_SERVER_ONLY: request.policy = .serverOnly
        case TETHER_POLICY_CACHE_ELSE_SERVER: request.policy = .cacheElseServer
        default: throw TetherError(.invalid, "unknown cache policy \(raw.policy.rawValue)")
        }
        request.predicate = try optionalText(raw.predicate, "predicate")
        request.offset = raw.offset
        request.serverQuery = try optionalText(raw.server_query, "server_query")
        if raw.argument_count > 0 {
            guard let arguments = raw.arguments else { throw misuse("arguments is NULL but argument_count is \(raw.argument_count)") }
            request.arguments = try (0..<raw.argument_count).map { try argument(arguments[$0], number: $0 + 1) }
        }
        switch raw.result_type {
        case TETHER_RESULT_OBJECTS: request.resultType = .objects
        case TETHER_RESULT_IDS: request.resultType = .ids
        case TETHER_RESULT_COUNT: request.resultType = .count
        case TETHER_RESULT_VALUES: request.resultType = .values
        default: throw TetherError(.invalid, "unknown result type \(raw.result_type.rawValue)")
        }
        if let properties = try optionalText(raw.properties, "properties") {
            request.properties = properties.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        request.batchSize = Int(clamping: raw.batch_size)
        request.live = raw.live != 0
        let task = try box.context.makeFetch(request)
        let handle = try Handles.shared.register(task, kind: .task, owner: token).handle
        let host = HostCall(callback, userdata, handle: handle)
        let progress = raw.progress.map { function in
            let progressHost = HostCall(function, userdata, handle: handle)
            return { @Sendable (told: FetchProgress) in
                progressHost.function(progressHost.handle, told.received, told.total ?? -1, progressHost.userdata)
            }
        }
        do {
            try task.start(progress: progress) { result in
                // Owned by the callee. Finals come before close removes the
                // context's handles, so this succeeds.
                let results = ResultsBox(result.results, owner: token)
                guard let resultsHandle = try? Handles.shared.register(results, kind: .results, owner: token).handle else {
                    return
                }
                let phase: tether_phase
                switch result.phase {
                case .cached: phase = TETHER_PHASE_CACHED
                case .live: phase = TETHER_PHASE_LIVE
                case .final: phase = TETHER_PHASE_FINAL
                }
                let code = result.error.map { status(of: $0.kind) } ?? TETHER_OK
                (result.error?.message ?? "").withCString { message in
                    host.function(host.handle, phase, code, message, resultsHandle, host.userdata)
                }
                if result.phase == .final { Handles.shared.remove(host.handle) }
            }
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        out?.pointee = handle
    }
}

@_cdecl("tether_task_cancel")
public func tether_task_cancel(_ task: OpaquePointer?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolve(task, .task, as: AnyObject.self)
        if let save = resolved as? SaveTask { try save.cancel() } else { try (resolved as! FetchTask).cancel() }
    }
}

// MARK: results

/// A fetch's answer as the host holds it, and what it has lent out: object
/// handles (one reference each) and id strings, made as rows are read. With
/// a batch size only the last batch's are kept, so lending stays bounded.
final class ResultsBox: @unchecked Sendable {
    let results: FetchedResults
    private let owner: UInt
    private struct Loans {
        var batch = 0
        var objects: [Int: OpaquePointer] = [:]
        var ids: [Int: UnsafeMutablePointer<CChar>] = [:]
    }
    private let lent = Mutex(Loans())

    init(_ results: FetchedResults, owner: UInt) {
        self.results = results
        self.owner = owner
    }

    func object(at index: Int) throws -> OpaquePointer {
        let object = try results.object(at: index)
        var dropped: [OpaquePointer] = []
        let handle = try lent.withLock { lent -> OpaquePointer in
            dropped = enter(index, &lent)
            if let held = lent.objects[index] { return held }
            let handle = try objectHandle(object, owner: owner)
            lent.objects[index] = handle
            return handle
        }
        for handle in dropped { _ = try? Handles.shared.release(handle, .object) }
        return handle
    }

    /// Handles of the objects of rows `range`, one reference each for the
    /// caller (not loans); all or none.
    func objects(_ range: Range<Int>) throws -> [OpaquePointer] {
        let objects = try range.map { try results.object(at: $0) }
        return try Handles.shared.registerObjects(objects, owner: owner) { $0.id }
    }

    func id(at index: Int) throws -> UnsafePointer<CChar> {
        let id = try results.id(at: index)
        var dropped: [OpaquePointer] = []
        let text = lent.withLock { lent -> UnsafeMutablePointer<CChar> in
            dropped = enter(index, &lent)
            if let held = lent.ids[index] { return held }
            let text = strdup(id)!
            lent.ids[index] = text
            return text
        }
        for handle in dropped { _ = try? Handles.shared.release(handle, .object) }
        return UnsafePointer(text)
    }

    /// Reading a row of another batch lets the previous batch's loans go;
    /// returns the object handles to release (outside the lock).
    private func enter(_ index: Int, _ lent: inout Loans) -> [OpaquePointer] {
        guard results.batchSize > 0 else { return [] }
        let batch = index / results.batchSize
        guard batch != lent.batch else { return [] }
        lent.batch = batch
        lent.ids.values.forEach { free($0) }
        lent.ids = [:]
        defer { lent.objects = [:] }
        return Array(lent.objects.values)
    }

    /// Gives back every loan: the handle is released.
    func releaseLoans() {
        let (objects, ids) = lent.withLock { lent in
            defer { lent = Loans() }
            return (Array(lent.objects.values), Array(lent.ids.values))
        }
        ids.forEach { free($0) }
        for handle in objects { _ = try? Handles.shared.release(handle, .object) }
    }
}

private func resultsBox(_ results: OpaquePointer?) throws -> ResultsBox {
    try Handles.shared.resolve(results, .results, as: ResultsBox.self)
}

@_cdecl("tether_results_type")
public func tether_results_type(_ results: OpaquePointer?, _ out: UnsafeMutablePointer<tether_result_type>?) -> Int32 {
    call {
        let type: tether_result_type
        switch try resultsBox(results).results.type {
        case .objects: type = TETHER_RESULT_OBJECTS
        case .ids: type = TETHER_RESULT_IDS
        case .count: type = TETHER_RESULT_COUNT
        case .values: type = TETHER_RESULT_VALUES
        }
        try output(out, type)
    }
}

@_cdecl("tether_results_count")
public func tether_results_count(_ results: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try resultsBox(results).results.count) }
}

@_cdecl("tether_results_object_at")
public func tether_results_object_at(_ results: OpaquePointer?, _ index: Int,
                                     _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try box.object(at: try rowIndex(index, box)))
    }
}

@_cdecl("tether_results_objects")
public func tether_results_objects(_ results: OpaquePointer?, _ start: Int, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                                   _ capacity: Int, _ outCount: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        try requireRows(box)
        guard let out, let outCount else { throw misuse("out or out_count is NULL") }
        guard start >= 0, start <= box.results.count else { throw TetherError(.notFound, "no row at index \(start)") }
        let wanted = capacity < 0 ? Int.max : capacity  // a size_t past Int.max
        let handles = try box.objects(start..<(start + min(wanted, box.results.count - start)))
        for (offset, handle) in handles.enumerated() { out[offset] = handle }
        outCount.pointee = handles.count
    }
}

@_cdecl("tether_results_id_at")
public func tether_results_id_at(_ results: OpaquePointer?, _ index: Int,
                                 _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try box.id(at: try rowIndex(index, box)))
    }
}

@_cdecl("tether_results_value_at")
public func tether_results_value_at(_ results: OpaquePointer?, _ index: Int, _ key: UnsafePointer<CChar>?,
                                    _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        let fetched = try resultsBox(results).results
        let key = try text(key, "key")
        guard fetched.type == .values else {
            throw misuse("only a TETHER_RESULT_VALUES answer has values: read an object's with tether_object_peek")
        }
        let row = try rowIndex(index, try resultsBox(results))
        guard let column = fetched.column(named: key) else {
            throw TetherError(.notFound, "the fetch did not ask for \(key.debugDescription)")
        }
        try fill(out, try fetched.value(at: row, column: column))
    }
}

/// A row index checked against the answer: a count has none.
private func requireRows(_ box: ResultsBox) throws {
    guard box.results.type != .count else { throw misuse("a count has no rows: read it with tether_results_count") }
}

private func rowIndex(_ index: Int, _ box: ResultsBox) throws -> Int {
    try requireRows(box)
    guard index >= 0, index < box.results.count else { throw TetherError(.notFound, "no row at index \(index)") }
    return index
}

@_cdecl("tether_results_change_count")
public func tether_results_change_count(_ results: OpaquePointer?, _ kind: tether_change,
                                        _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try changes(of: kind, in: results).count) }
}

@_cdecl("tether_results_change_at")
public func tether_results_change_at(_ results: OpaquePointer?, _ kind: tether_change, _ index: Int,
                                     _ outOld: UnsafeMutablePointer<Int>?, _ outNew: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let list = try changes(of: kind, in: results)
        guard index >= 0, index < list.count else { throw TetherError(.notFound, "no change at index \(index)") }
        // SIZE_MAX: no such index (the row was not in that answer).
        outOld?.pointee = list[index].from ?? -1
        outNew?.pointee = list[index].to ?? -1
    }
}

/// The changes of one kind, as (old index, new index) pairs.
private func changes(of kind: tether_change, in results: OpaquePointer?) throws -> [(from: Int?, to: Int?)] {
    let changes = try resultsBox(results).results.changes ?? ResultChanges()
    switch kind {
    case TETHER_CHANGE_DELETE: return changes.deleted.map { (from: $0, to: nil) }
    case TETHER_CHANGE_INSERT: return changes.inserted.map { (from: nil, to: $0) }
    case TETHER_CHANGE_MOVE: return changes.moved.map { ($0.from, $0.to) }
    case TETHER_CHANGE_UPDATE: return changes.updated.map { ($0.from, $0.to) }
    default: throw TetherError(.invalid, "unknown change kind \(kind.rawValue)")
    }
}

@_cdecl("tether_results_release")
public func tether_results_release(_ results: OpaquePointer?) -> Int32 {
    call {
        guard let results else { return }
        guard let box = try Handles.shared.release(results, .results) as? ResultsBox else { return }
        box.releaseLoans()
    }
}

// MARK: diagnostics

@_cdecl("tether_live_count")
public func tether_live_count(_ what: tether_live, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    call {
        let count: Int
        switch what {
        case TETHER_LIVE_CONTEXTS: count = Live.count(.contexts)
        case TETHER_LIVE_OBJECTS: count = Live.count(.objects)
        case TETHER_LIVE_OBJECT_HANDLES: count = Handles.shared.count(.object)
        case TETHER_LIVE_RESULTS: count = Handles.shared.count(.results)
        case TETHER_LIVE_TASKS: count = Live.count(.tasks)
        case TETHER_LIVE_OBSERVERS: count = Live.count(.observers)
        case TETHER_LIVE_THREADS: count = Live.count(.threads)
        case TETHER_LIVE_PREPARED_STATEMENTS: count = Live.count(.prepares)
        case TETHER_LIVE_REQUESTS: count = Handles.shared.count(.request)
        default: throw TetherError(.invalid, "unknown live count \(what.rawValue)")
        }
        try output(out, Int64(count))
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
