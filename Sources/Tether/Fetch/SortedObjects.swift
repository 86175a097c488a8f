extension SortOrder {
    /// Objects in the order, by the values of their records (none known: all null).
    func sorted(_ objects: [ManagedObject]) -> [ManagedObject] {
        let rows = objects.map { object in (object, object.state.withLock { $0.record?.values }) }
        return rows.sorted { precedes(($0.0.id, $0.1), ($1.0.id, $1.1)) }.map(\.0)
    }
}
