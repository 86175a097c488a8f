// The C ABI, "objects" section of include/tether.h: object handles and reads.
import CTetherABI
import Glibc
import Tether

func objectHandle(_ object: ManagedObject, owner: UInt) throws -> OpaquePointer {
    // Its id's C string is made when first asked for (tether_object_id), not per handle.
    try Handles.shared.register(object, kind: .object, owner: owner).handle
}

func object(_ pointer: OpaquePointer?) throws -> (object: ManagedObject, owner: UInt) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .object, as: ManagedObject.self)
    return (resolved.object, resolved.owner)
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

@_cdecl("tether_object_free")
public func tether_object_free(_ obj: OpaquePointer?) -> Int32 {
    call {
        guard let obj else { return }
        try Handles.shared.release(obj, .object)
    }
}

@_cdecl("tether_object_entity")
public func tether_object_entity(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (target, owner) = try object(obj)
        try output(out, try entityHandle(target.entity, owner: owner))
    }
}

@_cdecl("tether_object_id")
public func tether_object_id(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try Handles.shared.lentString(obj, .object) { unsafeDowncast($0, to: ManagedObject.self).id })) }
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
