import Glibc
import Synchronization
import Tether
import CTetherABI

// MARK: editing

/// A value from the host, by its type: text by length, so it may hold NUL.
func hostValue(_ pointer: UnsafePointer<tether_value>?) throws -> Value {
    guard let pointer else { throw misuse("value is NULL") }
    let value = pointer.pointee
    func text() throws -> String {
        guard value.text != nil || value.length == 0 else { throw misuse("value is TEXT or JSON with a NULL text") }
        guard let text = String(validating: UnsafeRawBufferPointer(start: value.text, count: value.length), as: UTF8.self) else {
            throw TetherError(.invalid, "the value is not valid UTF-8")
        }
        return text
    }
    switch value.type {
    case TETHER_TYPE_NULL: return .null
    case TETHER_TYPE_INTEGER: return .integer(value.integer)
    case TETHER_TYPE_REAL: return .real(value.real)
    case TETHER_TYPE_BOOLEAN: return .boolean(value.integer != 0)
    case TETHER_TYPE_TEXT: return .text(try text())
    case TETHER_TYPE_JSON: return .json(try text())
    default: throw TetherError(.invalid, "unknown value type \(value.type.rawValue)")
    }
}

func mergePolicy(_ raw: Int32) throws -> MergePolicy {
    guard let policy = MergePolicy(rawValue: Int(raw)) else { throw TetherError(.invalid, "unknown merge policy \(raw)") }
    return policy
}

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

/// An attribute's name as the entity's handle in the context `owner` lends it (valid until close).
private func attributeName(_ entity: Entity, _ index: Int, owner: UInt) throws -> UnsafePointer<CChar> {
    let strings = try Handles.shared.resolveWithOwner(entityHandle(entity, owner: owner), .entity, as: EntityBox.self).strings
    return UnsafePointer(strings[2 + index])
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
        let (source, owner, _) = try object(obj)
        guard out != nil else { throw misuse("out is NULL") }
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
        // The names follow the attribute names among the entity handle's strings.
        outName?.pointee = UnsafePointer(resolved.strings[2 + entity.attributes.count + index])
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
        let mode: DeliveryMode
        switch delivery {
        case TETHER_DELIVER_THREAD: mode = .thread
        case TETHER_DELIVER_POLL: mode = .poll
        default: throw TetherError(.invalid, "unknown delivery mode \(delivery.rawValue)")
        }
        let sibling = try context.openSibling(name: try text(name, "name"), delivery: mode)
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

// MARK: save

@_cdecl("tether_save_options_init")
public func tether_save_options_init(_ opts: UnsafeMutablePointer<tether_save_options>?, _ version: UInt32) -> Int32 {
    call {
        guard version == UInt32(TETHER_SAVE_OPTIONS_VERSION) else { throw misuse("unknown options version \(version)") }
        try output(opts, tether_save_options(version: version, merge_policy: -1, progress: nil), "opts")
    }
}

/// A save's outcome as the host reads it during the callback; the strings
/// it lends live as long as it does.
final class SaveReportBox: @unchecked Sendable {
    // @unchecked: read only on the delivering thread, during the callback.
    let result: SaveResult
    let owner: UInt
    var objectHandles: [Int: OpaquePointer] = [:]
    var messages: [Int: UnsafeMutablePointer<CChar>] = [:]

    init(_ result: SaveResult, owner: UInt) {
        self.result = result
        self.owner = owner
    }

    deinit {
        for handle in objectHandles.values { _ = try? Handles.shared.release(handle, .object) }
        for message in messages.values { free(message) }
    }

    func failure(_ index: Int) throws -> SaveFailure {
        guard index >= 0, index < result.failures.count else { throw TetherError(.notFound, "no failure at \(index)") }
        return result.failures[index]
    }

    func conflict(_ index: Int) throws -> SaveConflict {
        guard let conflict = try failure(index).conflict else { throw TetherError(.notFound, "failure \(index) is not a conflict") }
        return conflict
    }
}

@_cdecl("tether_save_start")
public func tether_save_start(_ ctx: OpaquePointer?, _ opts: UnsafePointer<tether_save_options>?, _ callback: tether_save_cb?,
                              _ userdata: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard let callback else { throw misuse("callback is NULL") }
        var options = tether_save_options(version: UInt32(TETHER_SAVE_OPTIONS_VERSION), merge_policy: -1, progress: nil)
        if let opts {
            guard opts.pointee.version == UInt32(TETHER_SAVE_OPTIONS_VERSION) else {
                throw misuse("unknown options version \(opts.pointee.version): use tether_save_options_init")
            }
            options = opts.pointee
        }
        let policy = options.merge_policy == -1 ? nil : try mergePolicy(options.merge_policy)
        let task = try box.context.makeSave(policy: policy)
        let handle = try Handles.shared.register(task, kind: .task, owner: token).handle
        let host = HostCall(callback, userdata, handle: handle)
        let progress = options.progress.map { function in
            let progressHost = HostCall(function, userdata, handle: handle)
            return { @Sendable (told: SaveProgress) in
                progressHost.function(progressHost.handle, Int64(told.answered), Int64(told.total), progressHost.userdata)
            }
        }
        do {
            try task.start(progress: progress) { result in
                let report = SaveReportBox(result, owner: token)
                // Lives for the callback only: its handle dies after.
                let reportHandle = try? Handles.shared.register(report, kind: .report, owner: token).handle
                let code = result.error.map { status(of: $0.kind) } ?? TETHER_OK
                (result.error?.message ?? "").withCString { message in
                    host.function(host.handle, code, message, reportHandle, host.userdata)
                }
                if let reportHandle { Handles.shared.remove(reportHandle) }
                Handles.shared.remove(host.handle)
            }
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        out?.pointee = handle
    }
}

private func report(_ pointer: OpaquePointer?) throws -> SaveReportBox {
    try Handles.shared.resolve(pointer, .report, as: SaveReportBox.self)
}

@_cdecl("tether_save_report_counts")
public func tether_save_report_counts(_ pointer: OpaquePointer?, _ saved: UnsafeMutablePointer<Int>?,
                                      _ discarded: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let box = try report(pointer)
        saved?.pointee = box.result.saved
        discarded?.pointee = box.result.discarded
    }
}

@_cdecl("tether_save_report_failure_count")
public func tether_save_report_failure_count(_ pointer: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try report(pointer).result.failures.count) }
}

@_cdecl("tether_save_report_failure_at")
public func tether_save_report_failure_at(_ pointer: OpaquePointer?, _ index: Int, _ outObject: UnsafeMutablePointer<OpaquePointer?>?,
                                          _ outStatus: UnsafeMutablePointer<Int32>?,
                                          _ outMessage: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let box = try report(pointer)
        let failure = try box.failure(index)
        if let outObject {
            if box.objectHandles[index] == nil { box.objectHandles[index] = try objectHandle(failure.object, owner: box.owner) }
            outObject.pointee = box.objectHandles[index]
        }
        outStatus?.pointee = status(of: failure.error.kind)
        if let outMessage {
            if box.messages[index] == nil { box.messages[index] = strdup(failure.error.message) }
            outMessage.pointee = UnsafePointer(box.messages[index])
        }
    }
}

@_cdecl("tether_save_report_conflict_at")
public func tether_save_report_conflict_at(_ pointer: OpaquePointer?, _ index: Int, _ outLocal: UnsafeMutablePointer<Int64>?,
                                           _ outServer: UnsafeMutablePointer<Int64>?, _ outKeys: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        outLocal?.pointee = conflict.localVersion ?? -1
        outServer?.pointee = conflict.serverValues == nil ? -1 : conflict.serverVersion ?? -1
        outKeys?.pointee = conflict.differingAttributes.count
    }
}

@_cdecl("tether_save_report_conflict_key_at")
public func tether_save_report_conflict_key_at(_ pointer: OpaquePointer?, _ index: Int, _ keyIndex: Int,
                                               _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        guard keyIndex >= 0, keyIndex < conflict.differingAttributes.count else {
            throw TetherError(.notFound, "the conflict has no key at \(keyIndex)")
        }
        let box = try report(pointer)
        try output(out, try attributeName(conflict.object.entity, conflict.differingAttributes[keyIndex], owner: box.owner))
    }
}

@_cdecl("tether_save_report_server_value")
public func tether_save_report_server_value(_ pointer: OpaquePointer?, _ index: Int, _ key: UnsafePointer<CChar>?,
                                            _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        let attribute = try conflict.object.attributeIndex(bytes: try keyBytes(key))
        guard out != nil else { throw misuse("out is NULL") }
        guard let values = conflict.serverValues else {
            throw TetherError(.notFound, "the server has no record \(conflict.object.entity.name)/\(conflict.object.id)")
        }
        try fill(out, values[attribute])
    }
}
