/// A save's answers applied, one object at a time: the server's record
/// stored and the change dropped, or a conflict resolved by the merge policy.

/// What applying one write's answer came to.
enum AppliedAnswer {
    case saved, discarded
    case failed(SaveFailure)
    /// A merge policy writes the change again, now as `change`.
    case again(PendingChange, RecordWrite)
}

extension Context {
    /// Applies one write's answer: to the store and the outbox in one
    /// transaction, then to the object. A change edited since it was sent
    /// stays pending, rebased on the server's new version.
    func applyAnswer(_ object: ManagedObject, sent: PendingChange, _ write: RecordWrite, _ outcome: WriteOutcome,
                policy: MergePolicy) -> AppliedAnswer {
        let entity = object.entity
        do {
            switch outcome {
            case .written(let fields):
                try confirm(object, sent, server: Record(entity: entity, fields: fields))
                return .saved
            case .deleted(let version):
                try confirm(object, sent, server: nil, deletedAt: version)
                return .saved
            case .failed(let error):
                return .failed(SaveFailure(object: object, error: error, conflict: nil))
            case .conflict(let fields):
                let current = try fields.map { try Record(entity: entity, fields: $0) }
                // The server holding what was sent means it was applied
                // (an answer lost, a save killed): confirmed, not sent twice.
                if write.kind != .delete, let current, Self.holds(current, write.fields, entity) {
                    try confirm(object, sent, server: current)
                    return .saved
                }
                // The committed row, read if it is not in memory (the edit
                // came from an earlier run): the policies build on it, and
                // without it every key not edited would seem null.
                try withCommittedRow(object) { _ in }
                // The server holding exactly the record an earlier write of
                // this change made holds our own write (a save killed, an
                // answer lost): the change is rebased on it and sent again,
                // not a conflict. A record changed by anyone since is not that.
                if let current, sent.sentWrites.contains(where: { Self.caused(current, by: $0, entity) }) {
                    let applied = PendingChange(kind: .update, values: [:], baseVersion: nil, revision: -1)
                    try confirm(object, applied, server: current)
                    guard let remaining = object.state.withLock({ $0.pending }) else { return .saved }
                    return .again(remaining, SaveTask.write(for: remaining, of: object))
                }
                return try resolve(object, sent, write, current: current, policy: policy)
            }
        } catch {
            return .failed(SaveFailure(object: object, error: TetherError.wrap(error), conflict: nil))
        }
    }

    /// Whether `record` is the one a write made (`made`: its values, by
    /// attribute index; a key missing is null), whatever its version.
    static func caused(_ record: Record, by made: [Int: Value], _ entity: Entity) -> Bool {
        entity.attributes.indices.allSatisfy { index in
            index == entity.versionIndex || index == entity.idIndex || record.values[index] == (made[index] ?? .null)
        }
    }

    /// Whether `record` has each of `fields` as sent.
    static func holds(_ record: Record, _ fields: RecordFields, _ entity: Entity) -> Bool {
        fields.allSatisfy { field in
            guard let index = entity.attributeIndex(named: field.key) else { return false }
            return record.values[index] == Value(json: field.value, type: entity.attributes[index].type)
        }
    }

    /// Stores the server's answer (nil: gone) with what remains pending,
    /// its sent writes answered, and takes both into the object's state.
    private func takeAnswer(_ server: Record?, remaining: PendingChange?, of object: ManagedObject,
                            into state: inout ManagedObject.State, at now: Int64, deletedAt: Int64? = nil) throws {
        var remaining = remaining
        remaining?.sentWrites = []  // answered: settled
        try store(for: object.entity).storeAnswer(outboxOwner, object.entity, id: object.id, server: server, fetchedAt: now,
                                                  remaining: remaining, deletedAt: deletedAt)
        state.record = server
        state.loaded = true
        state.fetchedAt = now
        state.deletedOnServer = server == nil
        state.pending = remaining
    }

    /// The server's answer taken: the record stored (nil: gone), the
    /// change dropped, or kept and rebased if edited since it was sent.
    /// `deletedAt`: for a delete, the version the server says it took (see `WriteOutcome.deleted`).
    func confirm(_ object: ManagedObject, _ sent: PendingChange, server record: Record?, deletedAt: Int64? = nil) throws {
        let entity = object.entity
        let now = wallClockMilliseconds()
        let observers = try object.state.withLock { state -> [KeyObserver] in
            let before = state.observedValues
            var remaining: PendingChange?
            if var pending = state.pending, pending.revision != sent.revision {
                // Edited while on the wire: what is new stays, against the new version.
                switch (pending.kind, record) {
                case (.delete, _?): pending.baseVersion = Self.version(of: record, entity)
                case (.delete, nil): pending = PendingChange(kind: .delete, values: [:], baseVersion: nil, revision: pending.revision)
                case (_, _?): pending.kind = .update; pending.baseVersion = Self.version(of: record, entity)
                case (_, nil): pending.kind = .insert; pending.baseVersion = nil
                }
                remaining = pending
            }
            try takeAnswer(record, remaining: remaining, of: object, into: &state, at: now, deletedAt: deletedAt)
            state.conflict = nil
            return state.observers(changedSince: before)
        }
        afterAnswer(object, observers)
    }

    static func version(of record: Record?, _ entity: Entity) -> Int64? {
        if case .integer(let version)? = record?.values[entity.versionIndex] { return version }
        return nil
    }

    /// A conflict, as `policy` resolves it.
    func resolve(_ object: ManagedObject, _ sent: PendingChange, _ write: RecordWrite, current: Record?,
                         policy: MergePolicy) throws -> AppliedAnswer {
        let entity = object.entity
        let now = wallClockMilliseconds()
        var outcome = AppliedAnswer.saved
        // The values a policy would write, as the state stands: nil when it writes none.
        func written(_ state: ManagedObject.State) -> [Int: Value]? {
            guard let pending = state.pending, pending.kind != .delete, pending.revision == sent.revision,
                  policy == .clientWins || policy == .mergeProperties else { return nil }
            guard policy == .clientWins || current == nil else { return pending.values }
            var local = state.record?.values ?? Array(repeating: .null, count: entity.attributes.count)
            for (index, value) in pending.values { local[index] = value }
            return Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) })
        }
        // A policy writing the local object must not write a reference to a
        // target gone (whose clean-up has run): reported instead. Looked for
        // outside the object's lock: it locks the targets' objects, this one
        // among them when it refers to itself (held, it waited on itself).
        var checked: [Int: Value]?
        var gone: (attribute: Attribute, target: Entity, id: String)?
        var observers: [KeyObserver]?
        while observers == nil {
            observers = try object.state.withLock { state -> [KeyObserver]? in
                let before = state.observedValues
                guard var pending = state.pending else { return [] }  // rolled back meanwhile
                // Changed since the look for a target gone: looked for again.
                guard written(state) == checked else { checked = written(state); return nil }
                // Edited while on the wire: the conflict is reported, the edit kept as it is.
                var policy = pending.revision == sent.revision ? policy : .report
                // The local object as it stood, for a policy that writes all of it.
                var local = state.record?.values ?? Array(repeating: .null, count: entity.attributes.count)
                for (index, value) in pending.values { local[index] = value }
                if gone != nil { policy = .report }
                let serverVersion = Self.version(of: current, entity)
                var remaining: PendingChange? = pending
                switch policy {
                case .report:
                    let differing = entity.attributes.indices.filter { index in
                        index != entity.versionIndex && current?.values[index] != local[index]
                    }
                    let sides = SaveConflict.Sides(localVersion: sent.baseVersion, serverValues: current?.values,
                                                   differingAttributes: differing)
                    state.conflict = sides
                    let conflict = SaveConflict(object: object, sides: sides)
                    var message = current == nil ? "\(entity.name)/\(object.id) was deleted on the server"
                        : "\(entity.name)/\(object.id) changed on the server (version \(serverVersion ?? 0), edited here from \(sent.baseVersion.map(String.init) ?? "none"))"
                    if let gone {
                        message += "; not written again: its \(gone.attribute.name) refers to \(gone.target.name)/\(gone.id), which was deleted"
                    }
                    outcome = .failed(SaveFailure(object: object, error: TetherError(.conflict, message), conflict: conflict))
                case .serverWins:
                    remaining = nil
                    outcome = .discarded
                case .clientWins, .mergeProperties:
                    if pending.kind == .delete {
                        pending.baseVersion = serverVersion
                        if current == nil { remaining = nil } else {
                            outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: .delete, ifVersion: serverVersion))
                        }
                    } else if current == nil {
                        // Gone on the server: made again from the local object.
                        pending = PendingChange(kind: .insert, values: Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) }),
                                                baseVersion: nil, revision: pending.revision, sequence: pending.sequence, sent: true)
                        outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: .create,
                                                             fields: SaveTask.fields(pending.values, entity)))
                    } else {
                        pending.kind = .update
                        pending.baseVersion = serverVersion
                        let whole = policy == .clientWins
                        let values = whole ? Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) }) : pending.values
                        outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: whole ? .replace : .patch,
                                                             fields: SaveTask.fields(values, entity), ifVersion: serverVersion))
                    }
                    if remaining != nil { remaining = pending }
                }
                if current == nil, remaining != nil {
                    // Gone on the server, still wanted here: the last values the
                    // server sent are kept, as a policy may make the record again.
                    try store(for: entity).recordChange(outboxOwner, entity, id: object.id, remaining!)
                    state.deletedOnServer = true
                    state.pending = remaining
                } else {
                    try takeAnswer(current, remaining: remaining, of: object, into: &state, at: now)
                }
                return state.observers(changedSince: before)
            }
            if observers == nil { gone = checked.flatMap { goneTarget(in: $0, of: entity) } }
        }
        afterAnswer(object, observers ?? [])
        return outcome
    }

    func afterAnswer(_ object: ManagedObject, _ observers: [KeyObserver]) {
        let (record, gone) = object.state.withLock { ($0.record, $0.deletedOnServer) }
        for sibling in coordinator.others(than: self) { sibling.takeSaved(gone ? nil : record, id: object.id, of: object.entity) }
        if object.state.withLock({ $0.pending == nil }) {
            _ = graph.withLock { $0.changed.removeValue(forKey: ObjectIdentifier(object)) }
            // Gone for good: references from other stores follow their delete rule.
            if gone {
                takeRuleChanges(of: object)  // settled: its rules' changes stand
                cleanUpReferences(to: [object.id], of: object.entity)
            }
        }
        for observer in observers { observer.notify() }
        tellRowsChanged(object.entity, [object.id])
    }
}
