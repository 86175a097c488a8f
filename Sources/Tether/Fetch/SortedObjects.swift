extension SortOrder {
    /// Objects in the order, by the values of their records (none known: all
    /// null). Without keys the order is the ids': pages listed by id are in
    /// it already, which one pass checks (no sort, no values read).
    func sorted(_ objects: [ManagedObject]) -> [ManagedObject] {
        if keys.isEmpty {
            let byID = { (a: ManagedObject, b: ManagedObject) in a.id.utf8.lexicographicallyPrecedes(b.id.utf8) }
            var index = 1
            while index < objects.count, byID(objects[index - 1], objects[index]) { index += 1 }
            return index >= objects.count ? objects : objects.sorted(by: byID)
        }
        let rows = objects.map { object in (object, object.state.withLock { $0.record?.values }) }
        return rows.sorted { precedes(($0.0.id, $0.1), ($1.0.id, $1.1)) }.map(\.0)
    }
}
