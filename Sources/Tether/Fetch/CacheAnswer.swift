/// The cache's answer to a fetch, unsaved changes counted, as its result
/// type wants it; and the server's objects made into an answer alike.
extension FetchTask {
    /// The cache's answer, reading only what the result type needs.
    func readCache() throws -> FetchedResults {

        let keys = (predicate?.indexableAttributes ?? []) + sort.prefix(1).map(\.index)
        try store.ensureIndexes(entity, on: keys.filter { $0 != entity.idIndex })  // the id has its own
        let pending = context.pendingRows(entity)
        if !pending.isEmpty {
            return try readCache(with: PendingResults(entity: entity, rows: pending, predicate: predicate, sort: sort))
        }
        switch request.resultType {
        case .count:
            return .counted(Int(try store.count(entity, where: predicate, limit: request.limit, offset: request.offset)))
        case .objects where request.batchSize > 0, .values where request.batchSize > 0:
            // Rowids, not ids: 4 or 8 bytes a row however long the ids.
            let rowids = try store.rowidList(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .rowids(rowids, type: request.resultType, properties: properties, context: context, entity: entity,
                           batchSize: request.batchSize)
        case .ids:
            let ids = try store.idList(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .ids(ids, type: request.resultType, context: context, entity: entity, batchSize: request.batchSize)
        case .values:
            let rows = try store.query(entity, where: predicate, sort: sort, limit: request.limit, offset: request.offset)
            return .values(rows.map(\.record.id), rows.map { row in properties.map { row.record.values[$0] } },
                           properties: properties, context: context, entity: entity)
        case .objects:
            return .objects(context.adopt(try store.query(entity, where: predicate, sort: sort, limit: request.limit,
                                                          offset: request.offset), of: entity))
        }
    }

    /// The cache's answer with unsaved changes in it.
    func readCache(with pending: PendingResults) throws -> FetchedResults {

        if request.resultType == .count {
            let total = try store.count(entity, where: predicate)
            return .counted(Int(pending.count(stored: total, offset: request.offset, limit: request.limit)))
        }
        let window = request.limit > 0 ? request.limit.addingReportingOverflow(request.offset + pending.extraRows).partialValue : 0
        let stored = try store.idList(entity, where: predicate, sort: sort, limit: max(0, window))
        let ids = pending.ids(stored: (0..<stored.count).map { stored[$0] }, offset: request.offset, limit: request.limit,
                              inServerOrder: false) { [entity] id in try? store.rows(entity, ids: [id])[ExactString(id)]?.record.values }
        return try answer(ids: ids, pending)
    }

    /// An answer of these ids, changed objects showing their pending values.
    func answer(ids: [String], _ pending: PendingResults) throws -> FetchedResults {
        switch request.resultType {
        case .count:
            return .counted(ids.count)
        case .objects where request.batchSize > 0, .ids:
            return .ids(IDList(ids), type: request.resultType, context: context, entity: entity, batchSize: request.batchSize)
        case .values where request.batchSize > 0:
            return .batchedValues(IDList(ids), properties: properties, context: context, entity: entity, batchSize: request.batchSize)
        case .values:
            let visible = pending.visibleByID
            let stored = try store.rows(entity, ids: ids.filter { visible[ExactString($0)] == nil })
            let present = ids.filter { visible[ExactString($0)] != nil || stored[ExactString($0)] != nil }
            return .values(present, present.map { id in
                let values = visible[ExactString(id)] ?? stored[ExactString(id)]!.record.values
                return properties.map { values[$0] }
            }, properties: properties, context: context, entity: entity)
        case .objects:
            let stored = try store.rows(entity, ids: ids)
            let objects = context.uniqueObjects(entity, ids)
            _ = context.adopt(objects.compactMap { stored[ExactString($0.id)] }, of: entity)
            return .objects(objects)
        }
    }

    /// The server's answer, as the result type wants it.
    func answer(_ objects: [ManagedObject]) -> FetchedResults {
        switch request.resultType {
        case .count:
            return .counted(objects.count)
        case .objects where request.batchSize > 0, .ids:
            return .ids(IDList(objects.map(\.id)), type: request.resultType, context: context, entity: entity,
                        batchSize: request.batchSize)
        case .values:
            let values = objects.map { object in
                let record = object.state.withLock { $0.record }
                return properties.map { record?.values[$0] ?? .null }
            }
            return .values(objects.map(\.id), values, properties: properties, context: context, entity: entity)
        case .objects:
            return .objects(objects)
        }
    }
}
