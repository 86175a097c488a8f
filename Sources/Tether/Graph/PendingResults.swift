/// Unsaved changes in a fetch's answer, as Core Data counts them: a pending
/// insert that matches is in it, a pending delete is not, and a pending
/// update is placed (or left out) by its values as the host sees them. The
/// store's SQL answers for every other row; only the changed objects of the
/// entity are looked at here, so a context without changes pays nothing.
struct PendingRow {
    let object: ManagedObject
    /// As the host reads it; nil for a pending delete.
    let visible: [Value]?
    /// As the store holds it; nil for an insert.
    let committed: [Value]?
    /// Moves with every edit, as a version does with every server change.
    let revision: Int64
}

extension Context {
    /// The changed objects of `entity`; empty (after one lock) when none.
    func pendingRows(_ entity: Entity) -> [PendingRow] {
        let objects = graph.withLock { graph in graph.changed.values.filter { $0.entity === entity } }
        return objects.compactMap { object in
            // An update's unchanged values come from its row.
            if object.state.withLock({ $0.record == nil && !$0.loaded }) {
                _ = try? read(object, entity.idIndex, refresh: false)
            }
            return object.state.withLock { state -> PendingRow? in
                guard let pending = state.pending else { return nil }
                let committed = state.record?.values
                switch pending.kind {
                case .delete:
                    return PendingRow(object: object, visible: nil, committed: committed, revision: pending.revision)
                case .insert, .update:
                    var values = pending.kind == .insert || committed == nil
                        ? Array(repeating: Value.null, count: entity.attributes.count) : committed!
                    for (index, value) in pending.values { values[index] = value }
                    return PendingRow(object: object, visible: values, committed: pending.kind == .insert ? nil : committed,
                                      revision: pending.revision)
                }
            }
        }
    }
}

struct PendingResults {
    let entity: Entity
    let rows: [PendingRow]
    let predicate: Predicate?
    let sort: [(index: Int, descending: Bool)]

    private var matching: [PendingRow] {
        rows.filter { row in row.visible.map { predicate?.matches($0) ?? true } ?? false }
    }

    /// The count with the changes, from the store's count of the whole answer.
    func count(stored total: Int64, offset: Int64, limit: Int64) -> Int64 {
        let counted = rows.filter { row in row.committed.map { predicate?.matches($0) ?? true } ?? false }.count
        let all = max(0, total - Int64(counted) + Int64(matching.count))
        let after = max(0, all - offset)
        return limit > 0 ? min(after, limit) : after
    }

    /// How many more rows the store must give so that, with the changed
    /// ones taken out, the window is still full.
    var extraRows: Int64 { Int64(rows.count) }

    /// The answer's ids: `stored` (the store's answer from the start, in
    /// order) without the changed objects, with those that match put in
    /// their place, then the window. `storedValues` reads a stored row's
    /// values, for placing by sort keys (a binary search: few reads).
    func ids(stored: [String], offset: Int64, limit: Int64, inServerOrder: Bool,
             storedValues: (String) -> [Value]?) -> [String] {
        let changed = Set(rows.map { ExactString($0.object.id) })
        var ids = stored.filter { !changed.contains(ExactString($0)) }
        let order = SortOrder(entity: entity, keys: sort)
        var placed = matching.map { ($0.object.id, $0.visible!) }
        placed.sort { order.precedes(($0.0, $0.1), ($1.0, $1.1)) }
        if inServerOrder {
            ids += placed.map(\.0)  // a server's own order has no place for them: last
        } else {
            var cache: [ExactString: [Value]?] = [:]
            func values(_ id: String) -> [Value]? {
                if sort.isEmpty { return nil }  // by id only
                if let known = cache[ExactString(id)] { return known }
                let read = storedValues(id)
                cache[ExactString(id)] = read
                return read
            }
            var low = 0
            for (id, rowValues) in placed {  // in order: each goes after the previous
                var high = ids.count
                while low < high {
                    let middle = (low + high) / 2
                    if order.precedes((ids[middle], values(ids[middle])), (id, rowValues)) { low = middle + 1 } else { high = middle }
                }
                ids.insert(id, at: low)
                low += 1
            }
        }
        let start = min(ids.count, Int(clamping: offset))
        let window = ids[start...]
        return limit > 0 ? Array(window.prefix(Int(clamping: limit))) : Array(window)
    }

    /// The values a changed object shows, by id.
    var visibleByID: [ExactString: [Value]] {
        var found: [ExactString: [Value]] = [:]
        for row in rows { if let values = row.visible { found[ExactString(row.object.id)] = values } }
        return found
    }
}
