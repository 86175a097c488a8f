/// Rows matching a predicate, in order, in a window: its SQL, and the SQL
/// functions that evaluate it as memory does.
extension Store {
    /// The functions predicates use in SQL: the very Swift code that
    /// evaluates them in memory, so the cache answers the same.
    static func definePredicateFunctions(_ database: Database) throws {
        func options(_ value: SQLValue) -> Comparison.Options {
            if case .integer(let raw) = value { return Comparison.Options(rawValue: Int(truncatingIfNeeded: raw)) }
            return []
        }
        // tether_fold(text, options): the text lower-cased and/or without marks.
        try database.define("tether_fold", arity: 2) { arguments in
            guard case .text(let text) = arguments[0] else { return arguments[0] }
            return .text(TextFolding.folded(text, options(arguments[1])))
        }
        // tether_text(text, operator, pattern, options): BEGINSWITH, ENDSWITH, CONTAINS, LIKE.
        try database.define("tether_text", arity: 4) { arguments in
            guard case .text(let text) = arguments[0], case .integer(let code) = arguments[1],
                  case .text(let pattern) = arguments[2],
                  let op = TextMatch.codes.first(where: { $0.1 == code })?.0 else { return .integer(0) }
            return .integer(TextMatch.matches(op, text, pattern, options(arguments[3])) ? 1 : 0)
        }
    }

    /// Rows matching `predicate`, in `sort` order (attribute index,
    /// descending), after the first `offset`, at most `limit` (0: all).
    func query(_ entity: Entity, where predicate: Predicate? = nil, sort: [(index: Int, descending: Bool)],
               limit: Int64, offset: Int64 = 0) throws -> [StoredRecord] {
        let (sql, parameters) = Self.select(sql(entity).select, entity, predicate, sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var records: [StoredRecord] = []
            try database.statement(sql).each(parameters) { records.append(Self.decode($0, entity)) }
            return records
        }
    }

    /// The ids and versions of the rows `query` would give.
    func versions(_ entity: Entity, where predicate: Predicate?, sort: [(index: Int, descending: Bool)],
                  limit: Int64, offset: Int64) throws -> [(id: String, version: Int64?)] {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let versionColumn = Identifier.column(code: entity.attributes[entity.versionIndex].code)
        let (sql, parameters) = Self.select("SELECT \(idColumn), \(versionColumn) FROM \(Self.table(entity))", entity,
                                            predicate, sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var found: [(id: String, version: Int64?)] = []
            try database.statement(sql).each(parameters) { row in
                guard case .text(let id) = row[0] else { return }
                if case .integer(let version) = row[1] { found.append((id, version)) } else { found.append((id, nil)) }
            }
            return found
        }
    }

    /// The ids of the rows `query` would give (nil sort: in no order),
    /// read straight into a compact list.
    func idList(_ entity: Entity, where predicate: Predicate?, sort: [(index: Int, descending: Bool)]?,
                limit: Int64 = 0, offset: Int64 = 0) throws -> IDList {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        let (sql, parameters) = Self.select("SELECT \(idColumn) FROM \(Self.table(entity))", entity, predicate,
                                            sort: sort, limit: limit, offset: offset)
        return try withDatabase { database in
            var list = IDList()
            try database.statement(sql).eachText(parameters) { try list.append($0) }
            list.compact()
            return list
        }
    }

    /// The rowids of the rows `query` would give, in its order: a batched
    /// answer's rows, 4 or 8 bytes each whatever the ids.
    func rowidList(_ entity: Entity, where predicate: Predicate?, sort: [(index: Int, descending: Bool)]?,
                   limit: Int64 = 0, offset: Int64 = 0) throws -> RowIDList {
        let (sql, parameters) = Self.select("SELECT rowid FROM \(Self.table(entity))", entity, predicate,
                                            sort: sort, limit: limit, offset: offset)
        // On the reading connection, where its batches are read: one page
        // cache warmed, not two (committed rows only, as the batches see).
        return try withReader { database in
            var list = RowIDList()
            try database.statement(sql).each(parameters) { row in
                if case .integer(let rowid) = row[0] { list.append(rowid) }
            }
            list.compact()
            return list
        }
    }

    /// The rows at these rowids (distinct), in their order; nil for a row
    /// deleted since (a record deleted and stored again has a new rowid: nil too).
    func rows(_ entity: Entity, rowids: [Int64]) throws -> [StoredRecord?] {
        var found = [StoredRecord?](repeating: nil, count: rowids.count)
        try eachRow(rowids, select: sql(entity).selectWithRowid, rowidColumn: entity.attributes.count + 3) { position, row in
            found[position] = Self.decode(row, entity)
        }
        return found
    }

    /// Attributes `indexes` of the rows at these rowids, with each row's id,
    /// in their order (nil: deleted since): a values answer's batch, reading
    /// those columns only.
    func values(_ entity: Entity, rowids: [Int64], attributes indexes: [Int]) throws -> [(id: String, values: [Value])?] {
        var found = [(id: String, values: [Value])?](repeating: nil, count: rowids.count)
        try eachRow(rowids, select: Self.selectValues(entity, indexes, after: "rowid")) { position, row in
            found[position] = Self.projected(row, from: 1, entity, indexes)
        }
        return found
    }

    /// `SELECT [first,] id, extra, the columns of attributes indexes FROM the table`.
    static func selectValues(_ entity: Entity, _ indexes: [Int], after first: String? = nil) -> String {
        let columns = [Identifier.column(code: entity.attributes[entity.idIndex].code), Identifier.quoted(extraColumn)]
            + indexes.map { Identifier.column(code: entity.attributes[$0].code) }
        return "SELECT \(((first.map { [$0] } ?? []) + columns).joined(separator: ", ")) FROM \(table(entity))"
    }

    /// A row of `selectValues` whose id is column `start`: its id and values.
    static func projected(_ row: Statement.Row, from start: Int, _ entity: Entity, _ indexes: [Int])
        -> (id: String, values: [Value]) {
        var extra: [(key: String, value: JSON)]?
        let values = indexes.indices.map { column in
            value(row[start + 2 + column], of: entity, indexes[column]) {
                if extra == nil { extra = extraFields(row[start + 1]) }
                return extra!
            }
        }
        guard case .text(let id) = row[start] else { return ("", values) }
        return (id, values)
    }

    /// The ids at these rowids (distinct), in their order (nil: deleted since).
    func ids(_ entity: Entity, rowids: [Int64]) throws -> [String?] {
        let idColumn = Identifier.column(code: entity.attributes[entity.idIndex].code)
        var found = [String?](repeating: nil, count: rowids.count)
        try eachRow(rowids, select: "SELECT rowid, \(idColumn) FROM \(Self.table(entity))") { position, row in
            if case .text(let id) = row[1] { found[position] = id }
        }
        return found
    }

    /// `select` (a SELECT without WHERE) of the rows at these rowids, on the
    /// reading connection (the rowid in column `rowidColumn`): `body` gets
    /// each row found with its position in `rowids`, in no particular order.
    /// Rowids close together (a batch of a fetch in about the store's order)
    /// are read as one range, stepping past the rows between: one walk of
    /// the table's b-tree, not a search per row. Others are read by lists of
    /// one fixed size, so two statements serve.
    private func eachRow(_ rowids: [Int64], select: String, rowidColumn: Int = 0,
                         _ body: (_ position: Int, Statement.Row) throws -> Void) throws {
        try withReader { database in
            if rowids.count > 1, rowids.count < 1 << 30, let low = rowids.min(), let high = rowids.max(),
               high - low < Int64(rowids.count) * 2 {
                // The positions in rowid order, walked beside the rows as they come.
                let order = Self.positionsByRowid(rowids, low: low)
                var next = 0
                try database.statement(select + " WHERE rowid BETWEEN ? AND ?").each([.integer(low), .integer(high)]) { row in
                    guard case .integer(let rowid) = row[rowidColumn] else { return }
                    while next < order.count && rowids[order[next]] < rowid { next += 1 }
                    while next < order.count && rowids[order[next]] == rowid {
                        try body(order[next], row)
                        next += 1
                    }
                }
                return
            }
            for start in stride(from: 0, to: rowids.count, by: Self.rowidsPerStatement) {
                let chunk = rowids[start..<min(rowids.count, start + Self.rowidsPerStatement)]
                let positions = Dictionary(zip(chunk, chunk.indices), uniquingKeysWith: { first, _ in first })
                let size = chunk.count == Self.rowidsPerStatement ? chunk.count : 1
                let statement = try database.statement(select + (size == 1 ? " WHERE rowid IN (?)" : Self.rowidList))
                let each: (Statement.Row) throws -> Void = { row in
                    if case .integer(let rowid) = row[rowidColumn], let position = positions[rowid] { try body(position, row) }
                }
                if size == chunk.count {
                    try statement.each(chunk.map { .integer($0) }, each)
                } else {
                    for rowid in chunk { try statement.each([.integer(rowid)], each) }
                }
            }
        }
    }

    /// The indexes of `rowids` (at least `low`, spanning less than 2^31) in
    /// the order of their rowids: offset and index packed in one integer
    /// each, so the sort compares integers, not through a closure.
    private static func positionsByRowid(_ rowids: [Int64], low: Int64) -> [Int] {
        var packed = rowids.indices.map { (rowids[$0] - low) << 32 | Int64($0) }
        packed.sort()
        return packed.map { Int($0 & 0xFFFF_FFFF) }
    }

    private static let rowidsPerStatement = 100
    /// Its WHERE, made once (not per chunk).
    private static let rowidList = " WHERE rowid IN (" + Array(repeating: "?", count: rowidsPerStatement).joined(separator: ", ") + ")"

    /// How many rows `query` would give.
    func count(_ entity: Entity, where predicate: Predicate?, limit: Int64 = 0, offset: Int64 = 0) throws -> Int64 {
        let (inner, parameters) = Self.select("SELECT 1 FROM \(Self.table(entity))", entity, predicate,
                                              sort: nil, limit: limit, offset: offset)
        return try withDatabase { database in
            let row = try database.statement("SELECT count(*) FROM (\(inner))").rows(parameters).first
            if case .integer(let count)? = row?.first { return count }
            return 0
        }
    }

    /// `base` with the predicate's WHERE, the order (`sort`, ties by id; nil:
    /// none) and the window of `limit` (0: none) after `offset`.
    static func select(_ base: String, _ entity: Entity, _ predicate: Predicate?,
                               sort: [(index: Int, descending: Bool)]?, limit: Int64, offset: Int64) -> (String, [SQLValue]) {
        var sql = base
        var parameters: [SQLValue] = []
        if let predicate {
            let clause = predicate.sql(entity)
            sql += " WHERE " + clause.text
            parameters = clause.parameters
        }
        if let sort {
            let order = sort.map { Identifier.column(code: entity.attributes[$0.index].code) + ($0.descending ? " DESC" : " ASC") }
                + [Identifier.column(code: entity.attributes[entity.idIndex].code) + " ASC"]
            sql += " ORDER BY " + order.joined(separator: ", ")
        }
        if limit > 0 || offset > 0 {
            sql += " LIMIT ? OFFSET ?"  // a negative limit is none
            parameters += [.integer(limit > 0 ? limit : -1), .integer(offset)]
        }
        return (sql, parameters)
    }
}
