// The C ABI, "model" section of include/tether.h: entities, attributes and
// the model's diagnostics.
import CTetherABI
import Glibc
import Tether

/// An entity as one context's handle holds it, with the names it lends as
/// C strings (valid while the handle is, that is until the context closes).
final class EntityBox {
    let entity: Entity
    let name: UnsafeMutablePointer<CChar>
    let route: UnsafeMutablePointer<CChar>
    let configuration: UnsafeMutablePointer<CChar>
    /// By attribute index.
    let attributeNames: [UnsafeMutablePointer<CChar>]
    /// The to-many relationships' names, in the model's order of inverses.
    let relationshipNames: [UnsafeMutablePointer<CChar>]
    /// By attribute index: the allowed values as a JSON array, nil for any.
    let allowedValues: [UnsafeMutablePointer<CChar>?]

    init(_ entity: Entity, model: Model) {
        self.entity = entity
        name = entity.name.cDuplicate
        route = entity.route.cDuplicate
        configuration = entity.configuration.cDuplicate
        attributeNames = entity.attributes.map(\.name.cDuplicate)
        relationshipNames = model.inverses(of: entity).map(\.name.cDuplicate)
        allowedValues = entity.attributes.map { attribute in
            attribute.allowedValues.map { JSON.array($0.map(\.json)).serialized().cDuplicate }
        }
    }

    deinit {
        for string in [name, route, configuration] + attributeNames + relationshipNames { free(string) }
        for string in allowedValues { free(string) }
    }
}

/// The handle of `entity` in the context whose token is `owner`.
func entityHandle(_ entity: Entity, owner: UInt) throws -> OpaquePointer {
    let box = try Handles.shared.resolve(Handles.pointer(owner), .context, as: ContextBox.self)
    return box.entityHandles[entity.index]
}

/// An attribute's name as the entity's handle in the context `owner` lends it (valid until close).
func attributeName(_ entity: Entity, _ index: Int, owner: UInt) throws -> UnsafePointer<CChar> {
    UnsafePointer(try Handles.shared.resolve(entityHandle(entity, owner: owner), .entity, as: EntityBox.self).attributeNames[index])
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

private func entityBox(_ pointer: OpaquePointer?) throws -> EntityBox {
    try Handles.shared.resolve(pointer, .entity, as: EntityBox.self)
}

private func entity(_ pointer: OpaquePointer?) throws -> Entity { try entityBox(pointer).entity }

@_cdecl("tether_entity_name")
public func tether_entity_name(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entityBox(e).name)) }
}

@_cdecl("tether_entity_route")
public func tether_entity_route(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entityBox(e).route)) }
}

@_cdecl("tether_entity_configuration")
public func tether_entity_configuration(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try entityBox(e).configuration)) }
}

@_cdecl("tether_entity_code")
public func tether_entity_code(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    call { try output(out, Int32(clamping: try entity(e).code)) }
}

@_cdecl("tether_entity_operations")
public func tether_entity_operations(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<UInt32>?) -> Int32 {
    call { try output(out, try entity(e).operations.rawValue) }
}

@_cdecl("tether_entity_attribute_count")
public func tether_entity_attribute_count(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try entity(e).attributes.count) }
}

@_cdecl("tether_entity_attribute_at")
public func tether_entity_attribute_at(_ e: OpaquePointer?, _ index: Int,
                                       _ outName: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                       _ outCode: UnsafeMutablePointer<Int32>?,
                                       _ outType: UnsafeMutablePointer<tether_type>?,
                                       _ outFlags: UnsafeMutablePointer<UInt32>?) -> Int32 {
    call {
        let box = try entityBox(e)
        let entity = box.entity
        guard index >= 0, index < entity.attributes.count else {
            throw TetherError(.notFound, "\(entity.name) has no attribute at index \(index)")
        }
        let attribute = entity.attributes[index]
        outName?.pointee = UnsafePointer(box.attributeNames[index])
        outCode?.pointee = Int32(clamping: attribute.code)
        outType?.pointee = tether_type(rawValue: UInt32(attribute.type.rawValue))
        var flags: UInt32 = 0
        if attribute.isID { flags |= TETHER_ATTR_ID }
        if attribute.isVersion { flags |= TETHER_ATTR_VERSION }
        if attribute.isRequired { flags |= TETHER_ATTR_REQUIRED }
        outFlags?.pointee = flags
    }
}

@_cdecl("tether_entity_attribute_allowed")
public func tether_entity_attribute_allowed(_ e: OpaquePointer?, _ index: Int,
                                            _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let box = try entityBox(e)
        guard index >= 0, index < box.entity.attributes.count else {
            throw TetherError(.notFound, "\(box.entity.name) has no attribute at index \(index)")
        }
        try output(out, box.allowedValues[index].map { UnsafePointer($0) })
    }
}

@_cdecl("tether_entity_attribute_index")
public func tether_entity_attribute_index(_ e: OpaquePointer?, _ name: UnsafePointer<CChar>?,
                                          _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let entity = try entity(e)
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
        let entity = try entity(e)
        guard let index = entity.attributeIndex(code: Int(code)) else {
            throw TetherError(.notFound, "\(entity.name) has no attribute with code \(code)")
        }
        try output(out, index)
    }
}
