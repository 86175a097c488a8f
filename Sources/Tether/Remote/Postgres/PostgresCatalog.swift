/// A table of the schema as an entity: its spec, and how each column is
/// read. Built from the catalog (pg_class, pg_attribute, pg_constraint),
/// never from names the core sends: SQL names only what is listed here.
struct PostgresTable: Sendable {
    let spec: Spec
    /// "schema"."table", quoted.
    let sqlName: String
    /// The primary key, read as text: a record's id.
    let id: PostgresColumn
    /// Every column but the key, in the table's order.
    let columns: [PostgresColumn]
    /// The key's own type, for matching it by its index.
    let idIsText: Bool

    func column(named name: String) -> PostgresColumn? {
        if name == id.name { return id }
        if name == spec.versionField { return PostgresTable.version }
        return columns.first { $0.name == name }
    }

    /// The version of a row: the transaction that last wrote it (xmin), which
    /// changes with each update. No user column can be named xmin. xmin is
    /// 32 bits and wraps around (a busy server's within weeks), so it is
    /// widened to the 64-bit id that only grows: of the ids ending in those
    /// 32 bits, the one nearest the next id to be given (the snapshot's
    /// xmax, past this transaction's own). Before the first wrap the two
    /// are the same number.
    static let version = PostgresColumn(name: "xmin", type: .integer, expression: """
        ((t.xmin::text)::int8 + 4294967296 * ((greatest(pg_snapshot_xmax(pg_current_snapshot())::text::int8, \
        coalesce(pg_current_xact_id_if_assigned()::text::int8 + 1, 0)) - (t.xmin::text)::int8 + 2147483648) / 4294967296))
        """, decoding: .integer)
}

/// How a column reaches a record: `expression` reads it as text (the
/// table is `t`), `decoding` turns that text into the field's JSON.
struct PostgresColumn: Sendable {
    enum Decoding: Sendable { case text, integer, number, boolean, json }
    let name: String
    let type: AttributeType
    let expression: String
    let decoding: Decoding

    func decode(_ text: String) -> JSON {
        switch decoding {
        case .text: return .string(text)
        case .integer: return Int64(text).map(JSON.integer) ?? .number(text)
        case .boolean: return .bool(text == "true")
        // numeric and float8 as JSON reads them (Kinto's numbers alike);
        // NaN and Infinity, which JSON has not, as text: a misfit, null in predicates.
        case .number, .json: return (try? JSON.parse(text)) ?? .string(text)
        }
    }
}

enum PostgresCatalog {
    /// Every column of every table of the schema, in order.
    static let columnsSQL = """
        SELECT c.relname, a.attname, a.attnum::text, (a.attnotnull OR coalesce(t.typnotnull, false))::text,
               coalesce(b.typname, t.typname), coalesce(b.typtype, t.typtype)::text, coalesce(b.typcategory, t.typcategory)::text,
               coalesce(b.oid, t.oid)::text, has_table_privilege(c.oid, 'SELECT')::text,
               has_table_privilege(c.oid, 'INSERT')::text, has_table_privilege(c.oid, 'UPDATE')::text,
               has_table_privilege(c.oid, 'DELETE')::text
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
        ORDER BY c.relname COLLATE "C", a.attnum
        """
    /// Primary keys, foreign keys and checks of the schema's tables.
    static let constraintsSQL = """
        SELECT c.relname, k.contype::text, array_to_string(k.conkey, ','), pg_get_constraintdef(k.oid),
               f.relname, fn.nspname, array_to_string(k.confkey, ','), k.confdeltype::text
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_class f ON f.oid = k.confrelid
        LEFT JOIN pg_namespace fn ON fn.oid = f.relnamespace
        WHERE n.nspname = $1 AND k.contype IN ('p', 'f', 'c')
        ORDER BY c.relname COLLATE "C", k.conname COLLATE "C"
        """
    static let enumsSQL = "SELECT enumtypid::text, enumlabel FROM pg_enum ORDER BY enumtypid, enumsortorder"

    private struct RawColumn {
        var name: String, number: String, notNull: Bool, typeName: String, typeType: String, category: String, typeOID: String
    }

    /// The tables of `schema` that are entities; those left out are logged.
    static func tables(_ session: PostgresSession, schema: String) throws -> [PostgresTable] {
        guard try !session.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]).isEmpty else {
            throw TetherError(.notFound, "the PostgreSQL database has no schema \(schema.debugDescription)")
        }
        var columns: [String: [RawColumn]] = [:], order: [String] = [], granted: [String: Operations] = [:]
        for row in try session.query(columnsSQL, [schema]) {
            let table = row[0]!
            if columns[table] == nil { order.append(table) }
            columns[table, default: []].append(RawColumn(name: row[1]!, number: row[2]!, notNull: row[3] == "true", typeName: row[4]!,
                                                          typeType: row[5]!, category: row[6]!, typeOID: row[7]!))
            // The role's privileges on the table are the entity's operations.
            var operations: Operations = []
            for (index, operation) in [(8, Operations.fetch), (9, .insert), (10, .update), (11, .delete)] where row[index] == "true" {
                operations.insert(operation)
            }
            granted[table] = operations
        }
        var enums: [String: [String]] = [:]
        for row in try session.query(enumsSQL) { enums[row[0]!, default: []].append(row[1]!) }
        let constraints = try session.query(constraintsSQL, [schema])
        func name(_ table: String, _ number: String) -> String? { columns[table]?.first { $0.number == number }?.name }

        // Keys first: a reference needs its target's.
        var keys: [String: RawColumn] = [:]
        for row in constraints where row[1] == "p" {
            let table = row[0]!
            guard let key = columns[table]?.first(where: { $0.number == row[2]! }) else {
                Log.warning(.sync, "PostgreSQL table \(table) left out: its primary key has several columns")
                continue
            }
            guard keyTypes.contains(key.typeName) else {
                Log.warning(.sync, "PostgreSQL table \(table) left out: its key \(key.name) is \(key.typeName), not text, an integer or a uuid")
                continue
            }
            keys[table] = key
        }
        for table in order where keys[table] == nil && !constraints.contains(where: { $0[0] == table && $0[1] == "p" }) {
            Log.warning(.sync, "PostgreSQL table \(table) left out: it has no primary key")
        }
        // Single-column foreign keys onto an entity's key: relationships.
        var references: [String: [String: (target: String, rule: Reference.DeleteRule)]] = [:]
        for row in constraints where row[1] == "f" {
            let table = row[0]!, target = row[4] ?? ""
            guard !row[2]!.contains(","), row[5] == schema, let targetKey = keys[target], row[6] == targetKey.number,
                  let column = name(table, row[2]!) else { continue }
            let rule: Reference.DeleteRule
            switch row[7] {
            case "c": rule = .cascade
            case "n": rule = .nullify
            default: rule = .deny  // restrict, no action; set default too, which no rule says
            }
            references[table, default: [:]][column] = (target, rule)
        }
        var allowed: [String: [String: [JSON]]] = [:]
        for row in constraints where row[1] == "c" && !row[2]!.contains(",") {
            let table = row[0]!
            if let column = name(table, row[2]!), let values = CheckConstraint.values(row[3]!, column: column) {
                allowed[table, default: [:]][column] = values
            }
        }

        return order.compactMap { table -> PostgresTable? in
            guard let key = keys[table] else { return nil }
            let sqlName = quote(schema) + "." + quote(table)
            let id = PostgresColumn(name: key.name, type: .text, expression: "(t.\(quote(key.name)))::text", decoding: .text)
            var fields: [FieldSpec] = [], read: [PostgresColumn] = []
            let tableReferences = references[table] ?? [:]
            for raw in columns[table]! where raw.number != key.number {
                var column = Self.column(raw)
                if tableReferences[raw.name] != nil {
                    column = PostgresColumn(name: raw.name, type: .text, expression: "(t.\(quote(raw.name)))::text", decoding: .text)
                }
                var field = FieldSpec(name: raw.name, type: column.type, isRequired: raw.notNull)
                if raw.typeType == "e", let labels = enums[raw.typeOID] {
                    field.allowedValues = labels.map { .text($0) }
                } else if let values = allowed[table]?[raw.name] {
                    let typed = values.map { Value(json: $0, type: column.type) }
                    if !typed.contains(where: { if case .json = $0 { return true } else { return false } }) { field.allowedValues = typed }
                }
                if let (target, rule) = tableReferences[raw.name] {
                    let sameTarget = tableReferences.values.filter { $0.target == target }.count
                    field.reference = Reference(target: target, inverse: sameTarget > 1 ? "\(table)_\(raw.name)" : table, deleteRule: rule)
                }
                fields.append(field)
                read.append(column)
            }
            let operations = granted[table] ?? []
            let spec = Spec(name: table, route: "\(schema).\(table)", idField: key.name, versionField: PostgresTable.version.name,
                            fields: fields, operations: operations)
            return PostgresTable(spec: spec, sqlName: sqlName, id: id, columns: read, idIsText: ["text", "varchar"].contains(key.typeName))
        }
    }

    static let keyTypes: Set<String> = ["text", "varchar", "bpchar", "uuid", "int2", "int4", "int8"]

    /// A column's attribute type and how it is read (see README, "PostgreSQL").
    private static func column(_ raw: RawColumn) -> PostgresColumn {
        let q = "t." + quote(raw.name)
        func make(_ type: AttributeType, _ expression: String, _ decoding: PostgresColumn.Decoding) -> PostgresColumn {
            PostgresColumn(name: raw.name, type: type, expression: expression, decoding: decoding)
        }
        if raw.category == "A" { return make(.json, "to_json(\(q))::text", .json) }
        switch raw.typeName {
        case "int2", "int4", "int8": return make(.integer, "\(q)::text", .integer)
        case "float4", "float8", "numeric": return make(.real, "\(q)::text", .number)
        case "bool": return make(.boolean, "\(q)::text", .boolean)
        case "json", "jsonb": return make(.json, "\(q)::text", .json)
        // Times as ISO 8601 text of one width, so text order is time order.
        case "timestamptz": return make(.text, #"to_char(\#(q) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#, .text)
        case "timestamp": return make(.text, #"to_char(\#(q), 'YYYY-MM-DD"T"HH24:MI:SS.US')"#, .text)
        case "date": return make(.text, "to_char(\(q), 'YYYY-MM-DD')", .text)
        default: return make(.text, "\(q)::text", .text)  // text, varchar, uuid, enums, and any other type's text output
        }
    }

    /// An identifier as SQL names it: quoted, so any name is itself.
    static func quote(_ name: String) -> String {
        "\"" + name.replacingAll("\"", with: "\"\"") + "\""
    }
}

extension String {
    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for character in self { if character == target { out += replacement } else { out.append(character) } }
        return out
    }
}
