import Glibc
import Tether
import CTetherABI

// MARK: local stores and object URIs

@_cdecl("tether_local_store_init")
public func tether_local_store_init(_ store: UnsafeMutablePointer<tether_local_store>?, _ version: UInt32) -> Int32 {
    call { try initialize(store, version: version, "store") }
}

extension tether_local_store: VersionedStruct {
    static var noun: String { "local store" }
    static var initializer: String { "tether_local_store_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_LOCAL_STORE_VERSION) }
    static var defaults: Self { Self() }
}

/// The host's array of local stores, read during open.
func localStores(_ stores: UnsafePointer<tether_local_store>?, count: Int) throws -> [LocalStoreOptions] {
    guard count > 0 else { return [] }
    guard let stores else { throw misuse("local_stores is NULL with local_store_count \(count)") }
    return try (0..<count).map { index in
        let store = try read(stores + index, "local_stores[\(index)]")
        return LocalStoreOptions(configuration: try text(store.configuration, "local_stores[\(index)].configuration"),
                                 path: try text(store.path, "local_stores[\(index)].path"),
                                 specs: try text(store.specs_json, "local_stores[\(index)].specs_json"))
    }
}

@_cdecl("tether_local_store_drop")
public func tether_local_store_drop(_ store: UnsafePointer<tether_local_store>?, _ entity: UnsafePointer<CChar>?,
                                    _ field: UnsafePointer<CChar>?) -> Int32 {
    call {
        guard let store else { throw misuse("store is NULL") }
        let raw = try read(store)
        let local = LocalStoreOptions(configuration: try text(raw.configuration, "configuration"),
                                      path: try text(raw.path, "path"), specs: "")
        try local.drop(entity: try text(entity, "entity"), field: try optionalText(field, "field"))
    }
}

@_cdecl("tether_object_set_related")
public func tether_object_set_related(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ target: OpaquePointer?) -> Int32 {
    call {
        let source = try object(obj).object
        try source.setRelated(try text(key, "key"), try target.map { try object($0).object })
    }
}

@_cdecl("tether_object_uri")
public func tether_object_uri(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        try fill(out, .text(try object(obj).object.uri))
    }
}

@_cdecl("tether_context_object_for_uri")
public func tether_context_object_for_uri(_ ctx: OpaquePointer?, _ uri: UnsafePointer<CChar>?,
                                          _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try objectHandle(try box.context.object(uri: try text(uri, "uri")), owner: token))
    }
}
