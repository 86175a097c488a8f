/// Records the server sent, merged into the graph: stored (in one
/// transaction per page), put into their objects, observers and siblings told.
extension Context {
    /// A page from the server, decoded: written to the store in one
    /// transaction (its deletions too), merged into the graph. Returns the
    /// page's objects in page order, or those matching `predicate`; every
    /// record is stored and merged either way.
    /// Older versions than those held are not taken, unless `acceptingOlder`.
    /// Without `makingObjects` only the objects in memory take their records
    /// (the others stay rows, read when asked for) and none is returned.
    /// `askedAt`: the store's next write when the page was asked for; a
    /// deletion it names leaves a row made again or written since (`Store.deletable`).
    func absorb(_ content: PageContent, of entity: Entity, matching predicate: Predicate? = nil,
                acceptingOlder: Bool = false, makingObjects: Bool = true, askedAt: Int64? = nil) throws -> [ManagedObject] {
        try absorbAnswer(content, of: entity, matching: predicate, acceptingOlder: acceptingOlder, makingObjects: makingObjects,
                         askedAt: askedAt).objects
    }

    /// `absorb`, also saying which of the page's deletions were taken.
    func absorbAnswer(_ content: PageContent, of entity: Entity, matching predicate: Predicate? = nil, acceptingOlder: Bool = false,
                      makingObjects: Bool = true, askedAt: Int64? = nil) throws -> (objects: [ManagedObject], deletedIDs: [String]) {
        if content.partial { return try absorbPartial(content, of: entity, matching: predicate, askedAt: askedAt) }
        let now = wallClockMilliseconds()
        // What the store took: not a record sent before its deletion here,
        // nor a deletion of a row written since the page was asked for.
        let written = try store(for: entity).write(takeable(content, of: entity), deleting: content.deletedIDs,
                                                   deletedVersions: content.deletedVersions, of: entity, fetchedAt: now,
                                                   acceptingOlder: acceptingOlder, askedAt: askedAt)
        let records = written.records
        defer { tellRowsChanged(entity, records.map(\.id)) }
        markDeleted(written.deletedIDs, of: entity)
        // The store is shared: a sibling's objects must not keep what it now
        // replaced (its own fetch would find nothing new to give them).
        let objects = makingObjects ? merge(records, of: entity, fetchedAt: now, acceptingOlder: acceptingOlder) : []
        if !makingObjects { _ = mergeHeld(records, of: entity, fetchedAt: now, acceptingOlder: acceptingOlder) }
        for sibling in coordinator.others(than: self) {
            sibling.takeFetched(records, deleting: written.deletedIDs, of: entity, fetchedAt: now, acceptingOlder: acceptingOlder)
        }
        guard let predicate else { return (objects, written.deletedIDs) }
        return (zip(objects, records).filter { predicate.matches($0.1.values) }.map(\.0), written.deletedIDs)
    }

    /// A page of partial records: one whose version is the stored row's is
    /// completed with the row's values for the fields it lacks and taken;
    /// any other leaves its row alone (not made fresh: the next sync or get
    /// brings it whole), as writing the fields it lacks as null would be
    /// wrong. Returns the page's objects in page order, and the deletions
    /// taken, as `absorbAnswer`.
    private func absorbPartial(_ content: PageContent, of entity: Entity, matching predicate: Predicate?,
                               askedAt: Int64?) throws -> (objects: [ManagedObject], deletedIDs: [String]) {
        let idName = entity.attributes[entity.idIndex].name
        let versionName = entity.attributes[entity.versionIndex].name
        func field(_ fields: RecordFields, _ name: String) -> JSON? { fields.first { $0.key.hasSameBytes(as: name) }?.value }
        let ids = content.records.compactMap { fields -> String? in
            if case .string(let id)? = field(fields, idName), !id.isEmpty { return id } else { return nil }
        }
        let stored = try store(for: entity).rows(entity, ids: ids)
        var whole = content
        whole.partial = false
        whole.records = content.records.compactMap { fields in
            guard case .string(let id)? = field(fields, idName), let row = stored[ExactString(id)]?.record,
                  let sent = field(fields, versionName)?.integerValue,
                  case .integer(let held) = row.values[entity.versionIndex], sent == held else { return nil }
            return fields + row.fields(of: entity).filter { kept in !fields.contains { $0.key.hasSameBytes(as: kept.key) } }
        }
        let taken = try absorbAnswer(whole, of: entity, matching: predicate, askedAt: askedAt)
        guard predicate == nil else { return taken }
        // The answer is still the server's: every record it named, in its order.
        return (uniqueObjects(entity, ids), taken.deletedIDs)
    }

    /// A sibling's fetch stored these records and deletions: the objects
    /// held here take them, as they take a sibling's save.
    func takeFetched(_ records: [Record], deleting ids: [String], of entity: Entity, fetchedAt: Int64, acceptingOlder: Bool) {
        let taken = mergeHeld(records, of: entity, fetchedAt: fetchedAt, acceptingOlder: acceptingOlder)
        if !taken.isEmpty { tellRowsChanged(entity, taken) }
        for id in ids { takeSaved(nil, id: id, of: entity) }
    }

    /// `merge` of the records whose objects are in memory (none is made);
    /// returns their ids.
    func mergeHeld(_ records: [Record], of entity: Entity, fetchedAt: Int64, acceptingOlder: Bool) -> [String] {
        let held = Set(objectsInMemory(entity, records.map(\.id)).map { ExactString($0.id) })
        guard !held.isEmpty else { return [] }
        let taken = records.filter { held.contains(ExactString($0.id)) }
        _ = merge(taken, of: entity, fetchedAt: fetchedAt, acceptingOlder: acceptingOlder)
        return taken.map(\.id)
    }

    /// Puts records the server sent (already in the store) into their objects
    /// and tells observers of values that changed. Returns the objects.
    func merge(_ records: [Record], of entity: Entity, fetchedAt: Int64, acceptingOlder: Bool = false) -> [ManagedObject] {
        let objects = uniqueObjects(entity, records.map(\.id))
        var changed: [KeyObserver] = []
        let versionIndex = entity.versionIndex
        for (object, record) in zip(objects, records) {
            object.state.withLock { state in
                // As in the store: an older version than the one held is not taken.
                if !acceptingOlder, case .integer(let held)? = state.record?.values[versionIndex],
                   case .integer(let sent) = record.values[versionIndex], sent < held { return }
                let before = state.observedValues
                state.record = record
                state.loaded = true
                state.fetchedAt = fetchedAt
                state.deletedOnServer = false
                state.neverOnServer = false
                changed += state.observers(changedSince: before)
            }
        }
        for observer in changed { observer.notify() }
        return objects
    }

    /// Objects for rows read from the store; objects already in memory keep
    /// their state (the store is written through, so they agree).
    func adopt(_ stored: [StoredRecord], of entity: Entity) -> [ManagedObject] {
        let objects = uniqueObjects(entity, stored.map(\.record.id))
        for (object, row) in zip(objects, stored) {
            object.state.withLock { state in
                if state.record == nil && !state.deletedOnServer {
                    state.record = row.record
                    state.fetchedAt = row.fetchedAt
                    state.loaded = true
                }
            }
        }
        return objects
    }

    /// Records the server no longer has (already removed from the store).
    func markDeleted(_ ids: [String], of entity: Entity) {
        guard !ids.isEmpty else { return }
        defer {
            tellRowsChanged(entity, ids)
            cleanUpReferences(to: ids, of: entity)
        }
        var changed: [KeyObserver] = []
        var absent: [(id: String, observers: [KeyObserver])] = []
        for object in objectsInMemory(entity, ids) {
            object.state.withLock { state in
                let wasKnown = state.record != nil
                // A record edited here keeps its last values: a merge policy may make it again.
                if state.pending == nil { state.record = nil }
                // Never cached: its value did not change, but whoever waits
                // for it (a get's observer) must hear that none will come.
                if !wasKnown && !state.deletedOnServer {
                    absent.append((object.id, state.observers))
                    // Loaded with nothing: the store never had it either.
                    state.neverOnServer = state.loaded
                }
                state.deletedOnServer = true
                if wasKnown { changed += state.observers }
            }
        }
        for observer in changed { observer.notify() }
        for (id, observers) in absent {
            let missing = TetherError.noRecord(entity, id)
            for observer in observers { observer.notify(missing) }
        }
    }
}
