import Glibc
import Synchronization
import Tether
import CTetherABI

// MARK: editing

@_cdecl("tether_object_set")
public func tether_object_set(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ value: UnsafePointer<tether_value>?) -> Int32 {
    call {
        let target = try object(obj).object
        let index = try target.attributeIndex(bytes: try keyBytes(key))
        try target.set(attribute: index, try hostValue(value))
    }
}

@_cdecl("tether_object_set_code")
public func tether_object_set_code(_ obj: OpaquePointer?, _ code: Int32, _ value: UnsafePointer<tether_value>?) -> Int32 {
    call {
        let target = try object(obj).object
        try target.set(attribute: try target.attributeIndex(code: Int(code)), try hostValue(value))
    }
}

@_cdecl("tether_context_insert")
public func tether_context_insert(_ ctx: OpaquePointer?, _ entity: UnsafePointer<CChar>?, _ id: UnsafePointer<CChar>?,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard out != nil else { throw misuse("out is NULL") }
        let inserted = try box.context.insert(entity: try text(entity, "entity"), id: try optionalText(id, "id"))
        try output(out, try objectHandle(inserted, owner: token))
    }
}

@_cdecl("tether_context_insert_values")
public func tether_context_insert_values(_ ctx: OpaquePointer?, _ entity: UnsafePointer<CChar>?, _ id: UnsafePointer<CChar>?,
                                         _ keys: UnsafePointer<UnsafePointer<CChar>?>?, _ values: UnsafePointer<tether_value>?,
                                         _ count: Int, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard out != nil else { throw misuse("out is NULL") }
        guard count == 0 || (keys != nil && values != nil) else { throw misuse("keys or values is NULL") }
        let pairs = try (0..<count).map { (key: try text(keys![$0], "key"), value: try hostValue(values! + $0)) }
        let inserted = try box.context.insert(entity: try text(entity, "entity"), id: try optionalText(id, "id"), values: pairs)
        try output(out, try objectHandle(inserted, owner: token))
    }
}

@_cdecl("tether_object_delete")
public func tether_object_delete(_ obj: OpaquePointer?) -> Int32 {
    call { try object(obj).object.delete() }
}

@_cdecl("tether_object_rollback")
public func tether_object_rollback(_ obj: OpaquePointer?) -> Int32 {
    call { try object(obj).object.rollback() }
}

@_cdecl("tether_context_rollback")
public func tether_context_rollback(_ ctx: OpaquePointer?) -> Int32 {
    call { try contextBox(ctx).box.context.rollback() }
}

@_cdecl("tether_object_pending")
public func tether_object_pending(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<tether_pending>?) -> Int32 {
    call {
        let kind = try object(obj).object.changeKind
        switch kind {
        case nil: try output(out, TETHER_PENDING_NONE)
        case .insert?: try output(out, TETHER_PENDING_INSERT)
        case .update?: try output(out, TETHER_PENDING_UPDATE)
        case .delete?: try output(out, TETHER_PENDING_DELETE)
        }
    }
}

@_cdecl("tether_object_changed_key_count")
public func tether_object_changed_key_count(_ obj: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try object(obj).object.changedAttributes.count) }
}

@_cdecl("tether_object_changed_key_at")
public func tether_object_changed_key_at(_ obj: OpaquePointer?, _ index: Int, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let target = try object(obj).object
        let changed = target.changedAttributes
        guard index >= 0, index < changed.count else { throw TetherError(.notFound, "no changed key at \(index)") }
        try output(out, try attributeName(target.entity, changed[index], owner: object(obj).owner))
    }
}

@_cdecl("tether_object_committed")
public func tether_object_committed(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        let target = try object(obj).object
        guard out != nil else { throw misuse("out is NULL") }
        try fill(out, try target.committed(try target.attributeIndex(bytes: try keyBytes(key))))
    }
}

@_cdecl("tether_context_change_count")
public func tether_context_change_count(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let context = try contextBox(ctx).box.context
        guard !context.isClosed else { throw TetherError(.closed, "the context is closed") }
        try output(out, context.changedObjects.count)
    }
}

@_cdecl("tether_context_changes")
public func tether_context_changes(_ ctx: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard !box.context.isClosed else { throw TetherError(.closed, "the context is closed") }
        guard let out else { throw misuse("out is NULL") }
        let results = ResultsBox(box.context.changedObjectsResults, owner: token)
        out.pointee = try Handles.shared.register(results, kind: .results, owner: token).handle
    }
}

// MARK: relationships

@_cdecl("tether_object_related")
public func tether_object_related(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (source, owner) = try object(obj)
        guard let out else { throw misuse("out is NULL") }
        out.pointee = nil  // as the header says: NULL whatever the status
        let target = try source.related(try text(key, "key"))
        try output(out, try target.map { try objectHandle($0, owner: owner) })
    }
}

@_cdecl("tether_entity_attribute_target")
public func tether_entity_attribute_target(_ e: OpaquePointer?, _ index: Int, _ outTarget: UnsafeMutablePointer<OpaquePointer?>?,
                                           _ outRule: UnsafeMutablePointer<tether_delete_rule>?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolveWithOwner(e, .entity, as: EntityBox.self)
        let entity = resolved.object.entity
        guard index >= 0, index < entity.attributes.count, let reference = entity.attributes[index].reference else {
            throw TetherError(.notFound, "\(entity.name) has no reference at attribute \(index)")
        }
        let box = try Handles.shared.resolve(Handles.pointer(resolved.owner), .context, as: ContextBox.self)
        guard let target = box.context.model.entity(named: reference.target) else {
            throw TetherError(.notFound, "the model has no entity \(reference.target)")
        }
        outTarget?.pointee = box.entityHandles[target.index]
        outRule?.pointee = tether_delete_rule(rawValue: UInt32(reference.deleteRule.rawValue))
    }
}

@_cdecl("tether_entity_relationship_count")
public func tether_entity_relationship_count(_ e: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolveWithOwner(e, .entity, as: EntityBox.self)
        let box = try Handles.shared.resolve(Handles.pointer(resolved.owner), .context, as: ContextBox.self)
        try output(out, box.context.model.inverses(of: resolved.object.entity).count)
    }
}

@_cdecl("tether_entity_relationship_at")
public func tether_entity_relationship_at(_ e: OpaquePointer?, _ index: Int, _ outName: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                          _ outSource: UnsafeMutablePointer<OpaquePointer?>?,
                                          _ outAttribute: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolveWithOwner(e, .entity, as: EntityBox.self)
        let entity = resolved.object.entity
        let box = try Handles.shared.resolve(Handles.pointer(resolved.owner), .context, as: ContextBox.self)
        let inverses = box.context.model.inverses(of: entity)
        guard index >= 0, index < inverses.count else { throw TetherError(.notFound, "\(entity.name) has no relationship \(index)") }
        outName?.pointee = UnsafePointer(resolved.object.relationshipNames[index])
        outSource?.pointee = box.entityHandles[inverses[index].source.index]
        outAttribute?.pointee = inverses[index].attribute
    }
}

// MARK: several contexts

@_cdecl("tether_context_open_sibling")
public func tether_context_open_sibling(_ ctx: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ delivery: tether_delivery,
                                        _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let context = try contextBox(ctx).box.context
        guard out != nil else { throw misuse("out is NULL") }
        let sibling = try context.openSibling(name: try text(name, "name"), delivery: try deliveryMode(delivery))
        do {
            try output(out, try register(sibling))
        } catch {
            try? sibling.close()
            throw error
        }
    }
}

@_cdecl("tether_context_local_object")
public func tether_context_local_object(_ ctx: OpaquePointer?, _ obj: OpaquePointer?,
                                        _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        let other = try object(obj).object
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try objectHandle(try box.context.localInstance(of: other), owner: token))
    }
}
