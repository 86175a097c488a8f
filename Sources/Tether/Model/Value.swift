/// One attribute's value, typed by the model.
public enum Value: Equatable, Sendable {
    case null
    case text(String)
    case integer(Int64)
    case real(Double)
    case boolean(Bool)
    /// Serialized JSON: arrays, objects, or a value whose type is not the spec's.
    case json(String)

    /// Converts a record field to the attribute's type. A value of another
    /// type is kept as JSON rather than dropped.
    init(json: JSON?, type: AttributeType) {
        guard let json, json != .null else {
            self = .null
            return
        }
        switch (type, json) {
        case (.text, .string(let s)): self = .text(s)
        case (.integer, .integer(let i)): self = .integer(i)
        case (.real, .real(let d)): self = .real(d)
        // Only where exact: 2^53 + 1 has no Double, and is kept as JSON.
        case (.real, .integer(let i)) where Int64(exactly: Double(i)) == i: self = .real(Double(i))
        case (.boolean, .bool(let b)): self = .boolean(b)
        default: self = .json(json.serialized(sortKeys: true))
        }
    }
}

extension Value {
    /// The value as a record field (or a server filter's operand, or a
    /// spec's allowed value).
    public var json: JSON {
        switch self {
        case .null: return .null
        case .text(let s): return .string(s)
        case .integer(let i): return .integer(i)
        case .real(let d): return .real(d)
        case .boolean(let b): return .bool(b)
        case .json(let text): return (try? JSON.parse(text)) ?? .string(text)
        }
    }
}

/// A record's fields as the server sent them, in its order.
public typealias RecordFields = [(key: String, value: JSON)]

/// A record as the server sent it, split by the entity's attributes.
struct Record: Sendable {
    let id: String
    /// One value per attribute, in the entity's attribute order.
    let values: [Value]
    /// Fields outside the spec or of another type than the spec's, kept as
    /// JSON so that nothing the server sent is lost.
    let extra: [(key: String, value: JSON)]

    init(entity: Entity, fields: RecordFields) throws {
        // One pass over the fields: each name is looked up once.
        var found = [JSON?](repeating: nil, count: entity.attributes.count)
        let indexes = fields.map { field -> Int? in
            // By its bytes in place (no hashing), else by name (a wide entity, a field outside the spec).
            var key = field.key
            let index = key.withUTF8 { entity.attributeIndex(bytes: $0) } ?? entity.attributeIndex(named: field.key)
            if let index, found[index] == nil { found[index] = field.value }  // as JSON's subscript: the first
            return index
        }
        guard case .string(let id)? = found[entity.idIndex], !id.isEmpty else {
            throw TetherError(.protocol, Self.idProblem(found[entity.idIndex], field: entity.attributes[entity.idIndex].name))
        }
        self.id = id
        let attributes = entity.attributes
        let values = found.indices.map { Value(json: found[$0], type: attributes[$0].type) }  // no Attribute copied
        self.values = values
        // Fields outside the spec, and fields whose value is not of the spec's type.
        extra = zip(fields, indexes).compactMap { field, index in
            guard let index else { return field }
            return Self.isMisfit(values[index], entity.attributes[index].type) ? field : nil
        }
    }

    /// Why `id` (the id field's JSON, nil if absent) identifies no record.
    static func idProblem(_ id: JSON?, field: String) -> String {
        switch id {
        case nil: return "it has no id (no field \(field.debugDescription))"
        case .string?: return "its id is empty"
        case let other?: return "its id \(field.debugDescription) is \(other.serialized().prefix(40)), not text"
        }
    }

    static func isMisfit(_ value: Value, _ type: AttributeType) -> Bool {
        if case .json = value { return type != .json }
        return false
    }

    init(id: String, values: [Value], extra: [(key: String, value: JSON)]) {
        self.id = id
        self.values = values
        self.extra = extra
    }

    /// The record as a server would send it: each value that is not null
    /// (a misfit's as it came, from the extra fields), then the extra fields.
    func fields(of entity: Entity) -> RecordFields {
        var fields: RecordFields = []
        for (value, attribute) in zip(values, entity.attributes) where value != .null && !Self.isMisfit(value, attribute.type) {
            fields.append((attribute.name, value.json))
        }
        return fields + extra
    }
}

/// A record read back from the store.
struct StoredRecord: Sendable {
    let record: Record
    let fetchedAt: Int64
}
