/// Saves over PostgreSQL: a batch of writes in one transaction, a savepoint
/// per record so that one record's refused values (NOT NULL, a check, a
/// foreign key, a unique index, a value its column's type cannot hold) fail
/// that record only. Each write is conditional on the row's version (xmin),
/// as Kinto's are on its timestamps, so a write sent again after a lost
/// answer finds another version and is a conflict, never applied twice.
enum PostgresWrites {
    /// The outcomes of `writes`, in order. A connection lost before the
    /// COMMIT's answer leaves every write of the batch `.failed(.network)`:
    /// not known to be applied.
    static func apply(_ writes: [RecordWrite], _ session: PostgresSession,
                      table: (Spec) throws -> PostgresTable) throws -> [WriteOutcome] {
        let tables = try writes.map { try table($0.spec) }
        _ = try session.execute("BEGIN")
        var outcomes: [WriteOutcome] = []
        do {
            for (write, table) in zip(writes, tables) {
                _ = try session.execute("SAVEPOINT tether_write")
                do {
                    outcomes.append(try apply(write, table, session))
                    _ = try session.execute("RELEASE SAVEPOINT tether_write")
                } catch let error as TetherError where error.kind != .network {
                    _ = try session.execute("ROLLBACK TO SAVEPOINT tether_write")
                    outcomes.append(.failed(error))
                }
            }
            _ = try session.execute("COMMIT")
        } catch let error as TetherError {
            _ = try? session.execute("ROLLBACK")
            return Array(repeating: .failed(error), count: writes.count)
        }
        return outcomes
    }

    private static func apply(_ write: RecordWrite, _ table: PostgresTable, _ session: PostgresSession) throws -> WriteOutcome {
        let key = "t." + PostgresCatalog.quote(table.id.name)
        var parameters: [String?] = [write.id]
        func placeholder(_ value: String?) -> String {
            parameters.append(value)
            return "$\(parameters.count)"
        }
        var condition = "\(key) = $1"
        if let version = write.ifVersion, write.kind != .create {
            condition += " AND \(PostgresTable.version.expression) = \(placeholder(String(version)))::int8"
        }
        // The row as a listing reads it, from the write itself: no second
        // round trip. No row: the condition or the key refused the write.
        func written(by sql: String) throws -> WriteOutcome {
            let rows = try session.execute(sql + " RETURNING " + PostgresQuery.columns(table), parameters)
            guard !rows.isEmpty else { return .conflict(current: try current(write.id, table, session)) }
            guard let record = PostgresQuery.content(table, rows).records.first else {
                throw TetherError(.protocol, "PostgreSQL wrote \(table.spec.name) \(write.id) but did not return it readably")
            }
            return .written(record)
        }
        switch write.kind {
        case .create:
            let assigned = try assignments(write, table, replace: false)
            let names = [PostgresCatalog.quote(table.id.name)] + assigned.map { PostgresCatalog.quote($0.column.name) }
            let values = ["$1"] + assigned.map { placeholder($0.value) }
            return try written(by: "INSERT INTO \(table.sqlName) AS t (\(names.joined(separator: ", "))) VALUES (\(values.joined(separator: ", ")))"
                + " ON CONFLICT (\(PostgresCatalog.quote(table.id.name))) DO NOTHING")
        case .patch, .replace:
            let assigned = try assignments(write, table, replace: write.kind == .replace)
            // Nothing to set still writes the row: its version moves, as Kinto's does.
            let sets = assigned.isEmpty ? ["\(PostgresCatalog.quote(table.id.name)) = t.\(PostgresCatalog.quote(table.id.name))"]
                : assigned.map { "\(PostgresCatalog.quote($0.column.name)) = \(placeholder($0.value))" }
            return try written(by: "UPDATE \(table.sqlName) AS t SET \(sets.joined(separator: ", ")) WHERE \(condition)")
        case .delete:
            // The row's last version: a re-made row's is newer.
            let sql = "DELETE FROM \(table.sqlName) AS t WHERE \(condition) RETURNING \(PostgresTable.version.expression)"
            guard let deleted = try session.execute(sql, parameters).first else {
                guard let current = try current(write.id, table, session) else { return .deleted(version: nil) }  // gone already
                return .conflict(current: current)
            }
            return .deleted(version: deleted.first.flatMap { $0.flatMap { Int64($0) } })
        }
    }

    /// The row of `id` as a listing gives it (this transaction's view), or nil.
    private static func current(_ id: String, _ table: PostgresTable, _ session: PostgresSession) throws -> RecordFields? {
        let (sql, parameters) = PostgresQuery.recordsSQL(table, ids: [id])
        return PostgresQuery.content(table, try session.execute(sql, parameters.map { $0 })).records.first
    }

    /// Each written column with its value as PostgreSQL's text input (nil:
    /// NULL). A replace sets every column, those not given to NULL. A field
    /// the table has no column for is refused, as the cache would not keep it.
    private static func assignments(_ write: RecordWrite, _ table: PostgresTable, replace: Bool)
        throws -> [(column: PostgresColumn, value: String?)] {
        var given: [String: JSON] = [:]
        for (name, value) in write.fields {
            guard table.columns.contains(where: { $0.name == name }) else {
                throw TetherError(.invalid, "PostgreSQL table \(table.spec.name) has no column \(name.debugDescription)")
            }
            given[name] = value
        }
        return table.columns.compactMap { column in
            guard let value = given[column.name] else { return replace ? (column, nil) : nil }
            return (column, text(value, column))
        }
    }

    /// A value as the column's text input: JSON text for json columns, the
    /// string itself for a string, JSON's spelling of numbers and booleans.
    static func text(_ value: JSON, _ column: PostgresColumn) -> String? {
        if case .null = value { return nil }
        if column.decoding == .json { return value.serialized() }
        switch value {
        case .string(let text): return text
        case .bool(let flag): return flag ? "true" : "false"
        default: return value.serialized()
        }
    }
}
