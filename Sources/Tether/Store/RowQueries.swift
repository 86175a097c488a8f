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
            try database.statement(sql).eachInteger(parameters) { list.append($0) }
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
    /// in their order (no id: deleted since): a values answer's batch,
    /// reading those columns only, into one block.
    func values(_ entity: Entity, rowids: [Int64], attributes indexes: [Int]) throws -> ValuesBlock {
        var block = ValuesBlock(rows: rowids.count, width: indexes.count)
        try eachRow(rowids, select: Self.selectValues(entity, indexes, after: "rowid")) { position, row in
            let id = Self.project(row, from: 1, entity, indexes) { block[position, $0] = $1 }
            block.ids[position] = id
        }
        return block
    }

    /// `SELECT [first,] id, extra, the columns of attributes indexes FROM the table`.
    static func selectValues(_ entity: Entity, _ indexes: [Int], after first: String? = nil) -> String {
        let columns = [Identifier.column(code: entity.attributes[entity.idIndex].code), Identifier.quoted(extraColumn)]
            + indexes.map { Identifier.column(code: entity.attributes[$0].code) }
        return "SELECT \(((first.map { [$0] } ?? []) + columns).joined(separator: ", ")) FROM \(table(entity))"
    }

    /// A row of `selectValues` whose id is column `start`: each value given
    /// to `put` with its column, then its id returned.
    static func project(_ row: Statement.Row, from start: Int, _ entity: Entity, _ indexes: [Int],
                        _ put: (_ column: Int, Value) -> Void) -> String {
        var extra: [(key: String, value: JSON)]?
        for column in indexes.indices {
            put(column, value(row[start + 2 + column], of: entity, indexes[column]) {
                if extra == nil { extra = extraFields(row[start + 1]) }
                return extra!
            })
        }
        guard case .text(let id) = row[start] else { return "" }
        return id
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
    /// The rowids are walked in order. Each run of them close together (a
    /// stretch of a fetch in about the store's order) is read as one range,
    /// stepping past the few rows between: one walk of the table's b-tree,
    /// not a search per row. The rest are read by lists of one fixed size,
    /// so two statements serve.
    private func eachRow(_ rowids: [Int64], select: String, rowidColumn: Int = 0,
                         _ body: (_ position: Int, Statement.Row) throws -> Void) throws {
        // Rows come in rowid order (ORDER BY rowid, which costs SQLite no
        // sort here): each goes to `body` with every position of its rowid.
        @inline(__always) func take(_ row: Statement.Row, _ walk: inout RowidWalk) throws {
            guard case .integer(let rowid) = row[rowidColumn] else { return }
            for index in walk.matching(rowid) { try body(walk.positions[index], row) }
        }
        try withReader { database in
            let order = Self.positionsByRowid(rowids)
            var scattered: [Int] = []
            var start = 0
            while start < order.count {
                var end = start + 1
                while end < order.count && rowids[order[end]] - rowids[order[end - 1]] <= Self.rangeGap { end += 1 }
                if end - start < Self.rangeRun {
                    scattered += order[start..<end]
                } else {
                    var walk = RowidWalk(rowids: rowids, positions: order[start..<end])
                    let range: [SQLValue] = [.integer(rowids[order[start]]), .integer(rowids[order[end - 1]])]
                    try database.statement(select + " WHERE rowid BETWEEN ? AND ? ORDER BY rowid").each(range) { try take($0, &walk) }
                }
                start = end
            }
            for first in stride(from: 0, to: scattered.count, by: Self.rowidsPerStatement) {
                let chunk = scattered[first..<min(scattered.count, first + Self.rowidsPerStatement)]
                var walk = RowidWalk(rowids: rowids, positions: chunk)
                if chunk.count == Self.rowidsPerStatement {
                    try database.statement(select + Self.rowidList).each(chunk.map { .integer(rowids[$0]) }) { try take($0, &walk) }
                    continue
                }
                let statement = try database.statement(select + " WHERE rowid = ?")
                var index = chunk.startIndex
                while index < chunk.endIndex {
                    let rowid = rowids[chunk[index]]
                    try statement.each([.integer(rowid)]) { try take($0, &walk) }
                    while index < chunk.endIndex && rowids[chunk[index]] == rowid { index += 1 }  // and its twins
                }
            }
        }
    }

    /// The indexes of `rowids` in the order of their rowids. Where they span
    /// less than 2^31, offset and index are packed in one integer each, so
    /// the sort compares integers, not through a closure.
    private static func positionsByRowid(_ rowids: [Int64]) -> [Int] {
        guard let low = rowids.min(), let high = rowids.max() else { return [] }
        guard high - low < 1 << 31, rowids.count < 1 << 32 else {
            return rowids.indices.sorted { (rowids[$0], $0) < (rowids[$1], $1) }
        }
        var packed = rowids.indices.map { (rowids[$0] - low) << 32 | Int64($0) }
        packed.sort()
        return packed.map { Int($0 & 0xFFFF_FFFF) }
    }

    /// Rowids at most this far apart share a range: it steps past at most
    /// one row between, about what a search for one row costs.
    private static let rangeGap: Int64 = 2
    /// The fewest rows a range is read for; fewer go in the lists.
    private static let rangeRun = 8
    private static let rowidsPerStatement = 100
    /// Its WHERE, made once (not per chunk).
    private static let rowidList = " WHERE rowid IN (" + Array(repeating: "?", count: rowidsPerStatement).joined(separator: ", ") + ") ORDER BY rowid"

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

/// Positions of a batch (indexes into its rowids), in rowid order, walked
/// beside rows that come in rowid order.
private struct RowidWalk {
    let rowids: [Int64]
    let positions: ArraySlice<Int>
    private var next: Int

    init(rowids: [Int64], positions: ArraySlice<Int>) {
        self.rowids = rowids
        self.positions = positions
        next = positions.startIndex
    }

    /// The indexes in `positions` of `rowid` (twins together), none if the
    /// batch does not hold it; rowids asked for must not go down.
    @inline(__always)
    mutating func matching(_ rowid: Int64) -> Range<Int> {
        while next < positions.endIndex && rowids[positions[next]] < rowid { next += 1 }
        let first = next
        while next < positions.endIndex && rowids[positions[next]] == rowid { next += 1 }
        return first..<next
    }
}

/// A batch of values rows in one block, not an array per row: row `i`'s
/// values are `values[i * width ..< (i + 1) * width]`; its id nil if the row
/// is gone.
struct ValuesBlock: Sendable {
    let width: Int
    var ids: [String?]
    var values: [Value]

    init(rows: Int = 0, width: Int = 0) {
        self.width = width
        ids = [String?](repeating: nil, count: rows)
        values = [Value](repeating: .null, count: rows * width)
    }

    var count: Int { ids.count }

    subscript(row: Int, column: Int) -> Value {
        get { values[row * width + column] }
        set { values[row * width + column] = newValue }
    }

    /// Row `row` given `values` (one per column), or gone (nil).
    mutating func replace(_ row: Int, with values: [Value]?) {
        guard let values else { ids[row] = nil; return }
        self.values.replaceSubrange(row * width..<(row + 1) * width, with: values)
    }
}
