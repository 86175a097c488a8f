extension ManagedObject {
    /// Sets `key` to `value`, checked against the attribute's type; the
    /// change is in the store when this returns. Setting a value back to the
    /// server's undoes the change of that key.
    public func set(_ key: String, _ value: Value) throws {
        guard let index = entity.attributeIndex(named: key) else {
            throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
        }
        try context.set(self, index, value)
    }

    public func set(code: Int, _ value: Value) throws { try context.set(self, attributeIndex(code: code), value) }

    public func set(attribute index: Int, _ value: Value) throws { try context.set(self, index, value) }

    /// Deletes the record: at once here, on the server at the next save.
    public func delete() throws { try context.delete(self) }

    /// Forgets the object's unsaved change.
    public func rollback() throws { try context.rollback(self) }

    /// The object's unsaved change: nil if none.
    public var changeKind: ChangeKind? { state.withLock { $0.pending?.kind } }

    public var hasChanges: Bool { changeKind != nil }

    /// The attributes an unsaved insert or update sets, in model order.
    public var changedAttributes: [Int] { state.withLock { ($0.pending?.values.keys).map { $0.sorted() } ?? [] } }

    /// The value the server last confirmed, whatever is pending (an insert has none).
    public func committed(_ index: Int) throws -> Value {
        try context.checkOpen()
        return try context.withCommittedRow(self) { state in
            guard let record = state.record, !state.deletedOnServer else {
                throw TetherError(.notCached, "\(entity.name)/\(id) has no value from the server")
            }
            return record.values[index]
        }
    }

    /// The conflict the last save met, until a save or a rollback ends it.
    public var conflict: SaveConflict? {
        state.withLock { $0.conflict }.map { SaveConflict(object: self, sides: $0) }
    }
}

extension Context {
    /// Reads the outbox into the graph at open: each changed object is in
    /// memory, with its change, until the server confirms it.
    /// Changes of an entity or field the server's model no longer has stay
    /// in the outbox, by their codes, for its return; each such is a diagnostic.
    func restoreChanges() throws {
        for (storeIndex, store) in stores.enumerated() {
          var absentFields: [String: (entity: String, field: String, count: Int)] = [:]
          for row in try store.pendingChanges(outboxOwner, model.entities.filter { $0.storeIndex == storeIndex }) {
            for (code, _) in row.values where row.entity.attributeIndex(code: code) == nil {
                guard let field = row.entity.retiredAttributeCodes.first(where: { $0.code == code }) else { continue }
                absentFields[row.entity.name + "\u{0}" + field.name, default: (row.entity.name, field.name, 0)].count += 1
            }
            guard !row.onlyAbsent else { continue }  // nothing to save until the field returns
            let object = uniqueObjects(row.entity, [row.id])[0]
            object.state.withLock { $0.pending = row.change }
            hold(object)
          }
          for (entity, field, count) in absentFields.values.sorted(by: { ($0.entity, $0.field) < ($1.entity, $1.field) }) {
            noteAbsent(entity, field, count)
          }
          guard storeIndex == 0 else { continue }
          let counts = try store.pendingCounts(outboxOwner)
          for retired in model.retiredEntities {
            if let count = counts[retired.code], count > 0 { noteAbsent(retired.name, nil, count) }
          }
        }
    }

    private func noteAbsent(_ entity: String, _ field: String?, _ count: Int) {
        let what = field.map { "field \(entity).\($0)" } ?? "entity \(entity)"
        let message = "the server's model no longer has the \(what): \(count) unsaved change\(count == 1 ? "" : "s") to it "
            + "\(count == 1 ? "is" : "are") kept in the store for its return, and not saved until then"
        Log.warning(.context, message)
        leftOut.withLock { $0.note(Diagnostic(entity: entity, attribute: field, message: message)) }
    }

    private func hold(_ object: ManagedObject) {
        graph.withLock { $0.changed[ObjectIdentifier(object)] = object }
    }

    private func release(_ object: ManagedObject) {
        _ = graph.withLock { $0.changed.removeValue(forKey: ObjectIdentifier(object)) }
    }

    /// The objects with unsaved changes, in the order they were first changed.
    public var changedObjects: [ManagedObject] {
        let objects = graph.withLock { Array($0.changed.values) }
        return objects.map { ($0, $0.state.withLock { $0.pending?.sequence ?? 0 }) }.sorted { $0.1 < $1.1 }.map(\.0)
    }

    public var hasChanges: Bool { graph.withLock { !$0.changed.isEmpty } }

    /// A new object of `entity`, saved as an insert at the next save. `id`
    /// nil: a random UUID, made here, so that an insert sent again can never
    /// make a second record. `values` (by attribute name; a later one of a
    /// name wins) are all checked, as `set` checks one, before anything
    /// changes: an insert refused for one of them leaves nothing behind.
    public func insert(entity entityName: String, id: String? = nil,
                       values: [(key: String, value: Value)] = []) throws -> ManagedObject {
        let entity = try model.existingEntity(named: entityName)
        guard entity.operations.contains(.insert) else {
            throw TetherError(.notAllowed, "the server does not allow inserting into \(entity.name)")
        }
        let id = id ?? Self.randomID()
        guard !id.isEmpty else { throw TetherError(.invalid, "a record id cannot be empty") }
        var checkedValues: [Int: Value] = [:]
        for (key, value) in values {
            guard let index = entity.attributeIndex(named: key) else {
                throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
            }
            checkedValues[index] = try checkedForEdit(value, index, of: entity)
        }
        try checkOpen()
        if try store(for: entity).load(entity, id: id) != nil {
            throw TetherError(.conflict, "\(entity.name)/\(id) already exists")
        }
        let object = uniqueObjects(entity, [id])[0]
        try object.state.withLock { state in
            guard state.pending == nil, state.record == nil || state.deletedOnServer else {
                throw TetherError(.conflict, "\(entity.name)/\(id) already exists")
            }
            checkedValues[entity.idIndex] = .text(id)
            var change = PendingChange(kind: .insert, values: checkedValues, baseVersion: nil, revision: 1)
            change.sequence = try store(for: entity).recordChange(outboxOwner, entity, id: id, change)
            state.pending = change
            state.discarded = false
            state.loaded = true
        }
        hold(object)
        return object
    }

    static func randomID() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
        bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
        let hex = Array("0123456789abcdef")
        var text = ""
        for (offset, byte) in bytes.enumerated() {
            if [4, 6, 8, 10].contains(offset) { text.append("-") }
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 15)])
        }
        return text
    }

    /// `value` as attribute `index` of `entity` is to hold it, if a host may set it.
    private func checkedForEdit(_ value: Value, _ index: Int, of entity: Entity) throws -> Value {
        let attribute = entity.attributes[index]
        guard !attribute.isID, !attribute.isVersion else {
            throw TetherError(.invalid, "\(entity.name).\(attribute.name) is set by the server")
        }
        let checked = try Self.checked(value, for: attribute, of: entity)
        try checkReference(checked, index, of: entity)
        try checkTargetStays(checked, index, of: entity)
        return checked
    }

    /// A reference may not be made to a target deleted here and not yet
    /// saved: the save would leave it pointing at nothing.
    private func checkTargetStays(_ value: Value, _ index: Int, of entity: Entity) throws {
        let attribute = entity.attributes[index]
        guard let target = model.target(of: attribute),
              let id = try referencedID(value, attribute, of: entity, to: target),
              let object = objectsInMemory(target, [id]).first, object.changeKind == .delete else { return }
        throw TetherError(.invalid, "\(entity.name).\(attribute.name) cannot refer to \(target.name)/\(id): it is deleted here "
                          + "(roll the delete back to refer to it)")
    }

    func set(_ object: ManagedObject, _ index: Int, _ value: Value) throws {
        let entity = object.entity
        let checked = try checkedForEdit(value, index, of: entity)
        try ensureLoaded(object)
        try editing(object) { state in
            var change: PendingChange
            if let pending = state.pending {
                guard pending.kind != .delete else {
                    throw TetherError(.misuse, "\(entity.name)/\(object.id) is deleted; roll it back to edit it")
                }
                change = pending
            } else {
                guard entity.operations.contains(.update) else {
                    throw TetherError(.notAllowed, "the server does not allow updating \(entity.name)")
                }
                guard let record = state.record, !state.deletedOnServer else {
                    throw TetherError(state.deletedOnServer || state.discarded ? .notFound : .notCached,
                                      "\(entity.name)/\(object.id) is not cached: fetch it before editing it")
                }
                guard case .integer(let version) = record.values[entity.versionIndex] else {
                    throw TetherError(.notCached, "\(entity.name)/\(object.id) has no version from the server")
                }
                change = PendingChange(kind: .update, values: [:], baseVersion: version, revision: 0)
            }
            if change.kind == .update, let record = state.record, record.values[index] == checked {
                change.values[index] = nil
            } else {
                change.values[index] = checked
            }
            return change.kind == .update && change.values.isEmpty ? nil : change
        }
    }

    /// Deletes `object`, and applies its entity's delete rules to the
    /// records referring to it (nullify, cascade; deny refuses first). One
    /// unit: a delete refused changes nothing, and rolling it back (or a
    /// save dropping it) undoes what its rules changed.
    func delete(_ object: ManagedObject) throws {
        guard object.entity.operations.contains(.delete) else {
            throw TetherError(.notAllowed, "the server does not allow deleting from \(object.entity.name)")
        }
        try checkOpen()
        guard object.changeKind != .delete else { return }
        try applyRules(ofDeleting: object) { try deleteOne(object) }
    }

    /// Applies the delete rules of `target` to the records referring to it
    /// that do not follow them yet, then runs `delete`; all or nothing.
    /// Returns the referrers changed.
    @discardableResult
    func applyRules(ofDeleting target: ManagedObject, _ delete: () throws -> Void = {}) throws -> [ManagedObject] {
        let plan = try deletePlan(target)
        let nullify = plan.nullify.filter { $0.0.changeKind != .delete }
        for (source, index) in nullify where source.entity.attributes[index].isRequired {
            throw TetherError(.type, "\(target.entity.name)/\(target.id) cannot be deleted: \(source.entity.name)/\(source.id) "
                              + "refers to it by \(source.entity.attributes[index].name), which is required (delete rule nullify)")
        }
        var undo: [RuleChange] = []
        do {
            for (source, index) in nullify {
                let before = try read(source, index, refresh: false)
                try set(source, index, .null)
                undo.append(.nullified(source, index, before))
            }
            for source in plan.delete {
                let before = source.state.withLock { $0.pending }
                try deleteOne(source)
                undo.append(.deleted(source, before))
            }
            try delete()
        } catch {
            undoRules(undo)
            throw error
        }
        graph.withLock { $0.ruleChanges[ObjectIdentifier(target), default: []] += undo }
        return undo.map(\.object)
    }

    /// What a delete rule changed in a referrer, and how to undo it.
    enum RuleChange: Sendable {
        /// The reference at `index` was `before`, now null.
        case nullified(ManagedObject, Int, Value)
        /// Deleted by a cascade; its change before (nil: none).
        case deleted(ManagedObject, PendingChange?)

        var object: ManagedObject {
            switch self { case .nullified(let object, _, _), .deleted(let object, _): return object }
        }
    }

    /// The objects some delete's rules changed here (cascaded or nullified)
    /// and not yet settled.
    func objectsChangedByRules() -> Set<ObjectIdentifier> {
        graph.withLock { Set($0.ruleChanges.values.joined().map { ObjectIdentifier($0.object) }) }
    }

    /// The rule changes of `target`'s delete, forgotten (its delete is settled).
    @discardableResult
    func takeRuleChanges(of target: ManagedObject) -> [RuleChange] {
        graph.withLock { $0.ruleChanges.removeValue(forKey: ObjectIdentifier(target)) } ?? []
    }

    /// Undoes rule changes, the last first: a nullified reference is set
    /// back (edits made since kept), a cascade's delete becomes the change
    /// its referrer had before.
    func undoRules(_ changes: [RuleChange]) {
        for change in changes.reversed() {
            switch change {
            case let .nullified(source, index, before):
                guard source.changeKind != .delete else { continue }
                try? set(source, index, before)
            case let .deleted(source, before):
                try? editing(source) { state in
                    guard state.pending?.kind == .delete || (state.pending == nil && state.discarded) else { return state.pending }
                    if before != nil { state.discarded = false }
                    return before
                }
                undoRules(takeRuleChanges(of: source))
            }
        }
    }

    private func deleteOne(_ object: ManagedObject) throws {
        let entity = object.entity
        guard entity.operations.contains(.delete) else {
            throw TetherError(.notAllowed, "the server does not allow deleting from \(entity.name)")
        }
        try ensureLoaded(object)
        try editing(object) { state in
            switch state.pending {
            case let pending? where pending.kind == .delete:
                return pending
            case let pending? where pending.kind == .insert:
                // Never sent: it never existed. Sent: it may exist; delete it whatever its version.
                guard pending.sent else {
                    state.discarded = true
                    return nil
                }
                var delete = PendingChange(kind: .delete, values: [:], baseVersion: nil, revision: pending.revision)
                delete.sentWrites = pending.sentWrites
                return delete
            default:
                guard let record = state.record, !state.deletedOnServer,
                      case .integer(let version) = record.values[entity.versionIndex] else {
                    throw TetherError(state.deletedOnServer || state.discarded ? .notFound : .notCached,
                                      "\(entity.name)/\(object.id) is not cached: fetch it before deleting it")
                }
                let revision = state.pending?.revision ?? 0
                var delete = PendingChange(kind: .delete, values: [:], baseVersion: state.pending?.baseVersion ?? version,
                                           revision: revision)
                // An edit sent before may be on the server: the delete must know it for ours.
                delete.sentWrites = state.pending?.sentWrites ?? []
                return delete
            }
        }
    }

    func rollback(_ object: ManagedObject) throws {
        try checkOpen()
        let wasDelete = object.changeKind == .delete
        try editing(object) { state in
            state.conflict = nil
            if state.pending?.kind == .insert { state.discarded = true }
            return nil
        }
        if wasDelete { undoRules(takeRuleChanges(of: object)) }
        // Deleted on the server while edited here, the clean-up waited for
        // a merge policy to make it again: none will now.
        if object.state.withLock({ $0.deletedOnServer && $0.pending == nil }) {
            cleanUpReferences(to: [object.id], of: object.entity)
        }
        // Its change kept the rules of targets deleted meanwhile from it.
        followRulesOfGoneTargets(object)
    }

    /// Forgets every unsaved change.
    public func rollback() throws {
        graph.withLock { $0.ruleChanges = [:] }
        for object in changedObjects { try rollback(object) }
    }

    /// Loads the object's row if it is not in memory, so an edit knows the
    /// version it applies to (a record not cached: the edit says so).
    private func ensureLoaded(_ object: ManagedObject) throws {
        try withCommittedRow(object) { _ in }
    }

    /// Runs one edit of `object` under its lock: `body` returns the change
    /// as it is to be (nil: none), which is written to the outbox before the
    /// object takes it, so memory never holds what the store does not.
    /// Observers of the keys whose value changed are told.
    func editing(_ object: ManagedObject, _ body: (inout ManagedObject.State) throws -> PendingChange?) throws {
        try checkOpen()
        let entity = object.entity
        let (observers, held) = try object.state.withLock { state -> ([KeyObserver], Bool) in
            var draft = state
            let before = state.observedValues
            guard var change = try body(&draft) else {
                if state.pending != nil { try store(for: entity).discardChange(outboxOwner, entity, id: object.id) }
                draft.pending = nil
                state = draft
                return (state.observers(changedSince: before), false)
            }
            change.revision = (state.pending?.revision ?? change.revision) + 1
            change.sequence = try store(for: entity).recordChange(outboxOwner, entity, id: object.id, change)
            draft.pending = change
            state = draft
            return (state.observers(changedSince: before), true)
        }
        if held { hold(object) } else { release(object) }
        for observer in observers { observer.notify() }
        tellRowsChanged(entity, [object.id])
    }

    /// `value` as attribute `attribute` holds it; a value of another type is refused.
    static func checked(_ value: Value, for attribute: Attribute, of entity: Entity) throws -> Value {
        let checked = try typed(value, for: attribute, of: entity)
        if let allowed = attribute.allowedValues, checked != .null, !allowed.contains(checked) {
            let names = allowed.map { $0.json.serialized() }.joined(separator: ", ")
            throw TetherError(.invalid, "\(entity.name).\(attribute.name) must be one of \(names)")
        }
        return checked
    }

    private static func typed(_ value: Value, for attribute: Attribute, of entity: Entity) throws -> Value {
        let what = "\(entity.name).\(attribute.name)"
        switch (attribute.type, value) {
        case (_, .null):
            if attribute.isRequired { throw TetherError(.type, "\(what) is required: it cannot be null") }
            return .null
        case (_, .real(let real)) where !real.isFinite:
            throw TetherError(.type, "\(what) cannot hold \(real): JSON has no such number")
        case (.text, .text), (.integer, .integer), (.real, .real), (.boolean, .boolean):
            return value
        case (.real, .integer(let integer)) where Int64(exactly: Double(integer)) == integer:
            return .real(Double(integer))
        case (.json, .json(let text)):
            guard let parsed = try? JSON.parse(text) else { throw TetherError(.type, "\(what): the value is not valid JSON") }
            return .json(parsed.serialized(sortKeys: true))
        case (.json, _):
            return .json(value.json.serialized(sortKeys: true))
        default:
            throw TetherError(.type, "\(what) holds \(attribute.type.name) values, not \(value.typeName)")
        }
    }
}
