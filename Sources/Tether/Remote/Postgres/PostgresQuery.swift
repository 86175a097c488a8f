/// A listing as one parameterized SELECT per page. Names come from the
/// catalog (PostgresTable), values only as parameters. A filter is sent
/// only where PostgreSQL selects exactly what `Filter.matches` does:
/// each column is compared as the text, integer or boolean the record
/// holds (text in the "C" collation: by bytes of UTF-8, which is by Unicode
/// scalars), so the comparison is the cache's by construction.
struct PostgresQuery {
    let table: PostgresTable
    let request: PageRequest
    /// Pages by the key (the core's listings: by id), or by offset (any other sort).
    private let byKey: Bool
    /// A listing by key whose caller reads every page (and orders the answer
    /// itself) pages by the key in its own type and collation, so that each
    /// page is a range of the primary key's index; one the caller may stop
    /// early (a limit it cuts) compares ids as text, bytewise, as the cache does.
    private let byIndex: Bool
    private let order: [String]
    private var conditions: [String] = []
    private var parameters: [String] = []
    /// Records sent by earlier pages, and the last id (by key).
    private var delivered: Int64 = 0
    private var after: String?

    init(_ table: PostgresTable, _ request: PageRequest) throws {
        self.table = table
        self.request = request
        guard request.rawQuery == nil else {
            throw TetherError(.invalid, "a PostgreSQL connection takes no server query (no raw SQL)")
        }
        if request.since != nil {
            throw TetherError(.expired, "this PostgreSQL connection keeps no history of changes: everything is listed again")
        }
        for filter in request.filters {
            guard Self.isExact(filter), let column = table.column(named: filter.field), column.type == filter.type else {
                throw TetherError(.invalid, "\(table.spec.name): no exact PostgreSQL filter on \(filter.field.debugDescription)")
            }
            let left = Self.compared(column)
            let cast = filter.type == .text ? "text" : filter.type == .integer ? "int8" : "bool"
            var placeholders: [String] = []
            for value in filter.values {
                parameters.append(Self.parameter(value))
                placeholders.append("$\(parameters.count)::\(cast)")
            }
            switch filter.operator {
            case .equal: conditions.append("\(left) = \(placeholders[0])")
            case .notEqual: conditions.append("\(left) IS DISTINCT FROM \(placeholders[0])")  // null matches
            case .lessThan: conditions.append("\(left) < \(placeholders[0])")
            case .greaterThan: conditions.append("\(left) > \(placeholders[0])")
            case .atMost: conditions.append("\(left) <= \(placeholders[0])")
            case .atLeast: conditions.append("\(left) >= \(placeholders[0])")
            case .oneOf: conditions.append("\(left) IN (\(placeholders.joined(separator: ", ")))")
            }
        }
        let idOrder = Self.compared(table.id)
        byKey = request.sort.isEmpty || request.sort == [SortKey(field: table.id.name, descending: false)]
        // The core asks every listing by id, and says when it reads them all.
        byIndex = byKey && request.limit == 0 && request.readsEveryPage
        order = try request.sort.map { key in
            guard let column = table.column(named: key.field), column.type != .json else {
                throw TetherError(.invalid, "\(table.spec.name): cannot sort by \(key.field.debugDescription) on the server")
            }
            return Self.compared(column) + (key.descending ? " DESC NULLS LAST" : " ASC NULLS FIRST")
        } + [idOrder + " ASC"]
        if let token = request.cursor?.token {
            let parts = token.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            guard let count = Int64(parts[0]), count >= 0, parts.count == (byKey ? 2 : 1) else {
                throw TetherError(.invalid, "not a cursor of this PostgreSQL listing")
            }
            delivered = count
            after = byKey ? String(parts[1]) : nil
        }
    }

    /// What a filter's operand means to PostgreSQL, as text.
    private static func parameter(_ value: JSON) -> String {
        switch value {
        case .string(let text): return text
        case .integer(let number): return String(number)
        case .bool(let flag): return flag ? "true" : "false"
        default: return ""  // isExact took none
        }
    }

    /// Whether a filter translates exactly: text against text values (none
    /// holding U+0000, which PostgreSQL text cannot), integers against
    /// integers, booleans by (in)equality; not reals (numeric and float8 differ
    /// from the cache's doubles), JSON or mixed operands.
    static func isExact(_ filter: Filter) -> Bool {
        guard !filter.values.isEmpty, filter.operator == .oneOf || filter.values.count == 1 else { return false }
        switch filter.type {
        case .text:
            return filter.values.allSatisfy { if case .string(let s) = $0 { return !s.utf8.contains(0) } else { return false } }
        case .integer:
            return filter.values.allSatisfy { if case .integer = $0 { return true } else { return false } }
        case .boolean:
            return [.equal, .notEqual, .oneOf].contains(filter.operator)
                && filter.values.allSatisfy { if case .bool = $0 { return true } else { return false } }
        case .real, .json:
            return false
        }
    }

    /// The column as the cache compares it: the very text it reads (bytewise),
    /// or that text read back as the integer, boolean or double it decodes to.
    private static func compared(_ column: PostgresColumn) -> String {
        switch column.type {
        case .integer: return "(\(column.expression))::int8"
        case .boolean: return "(\(column.expression))::bool"
        case .real: return "(\(column.expression))::float8"
        case .text, .json: return "(\(column.expression)) COLLATE \"C\""
        }
    }

    static func select(_ table: PostgresTable) -> String {
        columns(table) + " FROM \(table.sqlName) t"
    }

    /// What a listing reads of a row of `t`, in `content`'s order (a write's RETURNING too).
    static func columns(_ table: PostgresTable) -> String {
        ([table.id.expression, PostgresTable.version.expression + "::text"] + table.columns.map(\.expression))
            .joined(separator: ", ")
    }

    func pageSQL(pageSize: Int) -> (String, [String]) {
        var conditions = self.conditions, parameters = self.parameters
        let key = "t." + PostgresCatalog.quote(table.id.name)
        if let after {
            parameters.append(after)
            // By index: the parameter takes the key's type (an int8 key reads "42" as 42).
            conditions.append(byIndex ? "\(key) > $\(parameters.count)" : "\(Self.compared(table.id)) > $\(parameters.count)::text")
        }
        var sql = "SELECT " + Self.select(table)
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        sql += " ORDER BY " + (byIndex ? key : byKey ? Self.compared(table.id) : order.joined(separator: ", "))
        sql += " LIMIT \(pageLimit(pageSize))"
        if !byKey { sql += " OFFSET \(delivered)" }
        return (sql, parameters)
    }

    private func pageLimit(_ pageSize: Int) -> Int64 {
        request.limit > 0 ? max(0, min(Int64(pageSize), request.limit - delivered)) : Int64(pageSize)
    }

    func next(after rows: [[String?]], pageSize: Int) -> PageCursor? {
        let count = delivered + Int64(rows.count)
        guard Int64(rows.count) == pageLimit(pageSize), rows.count > 0, request.limit == 0 || count < request.limit else { return nil }
        return PageCursor(byKey ? "\(count)\n\(rows.last![0] ?? "")" : "\(count)")
    }

    func countSQL() -> (String, [String]) {
        var sql = "SELECT count(*)::text FROM \(table.sqlName) t"
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        return (sql, parameters)
    }

    func content(_ rows: [[String?]]) -> PageContent { Self.content(table, rows) }

    /// Rows as records: id, version, then each column that is not NULL.
    static func content(_ table: PostgresTable, _ rows: [[String?]]) -> PageContent {
        var content = PageContent(records: [])
        for (index, row) in rows.enumerated() {
            guard let id = row[0], !id.isEmpty, let version = row[1].flatMap({ Int64($0) }) else {
                content.unreadable.append(UnreadableItem(position: index, reason: "an empty key"))
                continue
            }
            var fields: RecordFields = [(table.spec.idField, .string(id)), (table.spec.versionField, .integer(version))]
            for (column, text) in zip(table.columns, row.dropFirst(2)) {
                if let text { fields.append((column.name, column.decode(text))) }
            }
            content.records.append(fields)
        }
        return content
    }

    static func recordsSQL(_ table: PostgresTable, ids: [String]) -> (String, [String]) {
        let ids = ids.filter { !$0.utf8.contains(0) }  // no key holds U+0000
        let key = table.idIsText ? "t." + PostgresCatalog.quote(table.id.name) : table.id.expression
        let placeholders = ids.indices.map { "$\($0 + 1)" + (table.idIsText ? "" : "::text") }
        let condition = ids.isEmpty ? "false" : "\(key) IN (\(placeholders.joined(separator: ", ")))"
        return ("SELECT \(select(table)) WHERE \(condition)", ids)
    }
}
