/// Builds the model from a bucket's collections (the server's specs), keeping
/// the codes a previous model gave, so codes stay stable across runs.
enum ModelBuilder {
    static let idAttributeName = "id"
    static let versionAttributeName = "last_modified"
    static let codeKeyword = "x-tether-code"
    static let firstAllocatedCode = 100

    /// `collections` are the objects of Kinto's collection listing.
    static func build(bucket: String, collections: [JSON], operations: (String) -> Operations,
                      previous: Model?) throws -> Model {
        var entities: [Entity] = []
        for collection in collections {
            guard let name = collection["id"]?.stringValue else {
                throw TetherError(.protocol, "a collection of bucket \(bucket) has no id")
            }
            // Kinto enforces this shape for ids; anything else is not a Kinto answer.
            guard Identifier.isValidEntityName(name) else {
                throw TetherError(.protocol, "collection id \(name.debugDescription) is not a valid identifier")
            }
            let route = "/buckets/\(bucket)/collections/\(name)/records"
            let attributes = try buildAttributes(entity: name, schema: collection["schema"],
                                                 previous: previous?.entity(named: name))
            entities.append(Entity(name: name, route: route, operations: operations(name), attributes: attributes.list,
                                   codeHighWater: attributes.highWater))
        }
        return Model(entities: entities)
    }

    private struct Draft {
        let name: String
        let explicitCode: Int?
        let type: AttributeType
        let isID: Bool
        let isVersion: Bool
        let isRequired: Bool
    }

    private static func buildAttributes(entity: String, schema: JSON?, previous: Entity?) throws
        -> (list: [Attribute], highWater: Int) {
        let properties = schema?["properties"]?.objectValue ?? []
        let required = Set((schema?["required"]?.arrayValue ?? []).compactMap(\.stringValue))
        func explicitCode(_ property: JSON?) -> Int? { property?[codeKeyword]?.integerValue.map { Int($0) } }

        var drafts = [
            Draft(name: idAttributeName, explicitCode: explicitCode(schema?["properties"]?[idAttributeName]),
                  type: .text, isID: true, isVersion: false, isRequired: true),
            Draft(name: versionAttributeName, explicitCode: explicitCode(schema?["properties"]?[versionAttributeName]),
                  type: .integer, isID: false, isVersion: true, isRequired: false),
        ]
        for (name, property) in properties where name != idAttributeName && name != versionAttributeName {
            // A name that cannot be a column is left out of the model rather than pasted into SQL.
            guard Identifier.isValidAttributeName(name) else { continue }
            drafts.append(Draft(name: name, explicitCode: explicitCode(property), type: attributeType(of: property),
                                isID: false, isVersion: false, isRequired: required.contains(name)))
        }

        var used = Set<Int>()
        var codes = [Int?](repeating: nil, count: drafts.count)
        for (index, draft) in drafts.enumerated() {
            if let code = draft.explicitCode, code > 0, !used.contains(code) {
                codes[index] = code
                used.insert(code)
            }
        }
        for (index, draft) in drafts.enumerated() where codes[index] == nil {
            let defaultCode = draft.isID ? 1 : draft.isVersion ? 2 : nil
            let kept = previous?.attributeIndex(named: draft.name).map { previous!.attributes[$0].code } ?? defaultCode
            if let kept, !used.contains(kept) {
                codes[index] = kept
                used.insert(kept)
            }
        }
        var next = max(firstAllocatedCode, previous?.codeHighWater ?? 0, used.max() ?? 0) + 1
        for index in drafts.indices where codes[index] == nil {
            while used.contains(next) { next += 1 }
            codes[index] = next
            used.insert(next)
        }
        let highWater = max(previous?.codeHighWater ?? 0, used.max() ?? 0)
        let list = zip(drafts, codes).map { draft, code in
            Attribute(name: draft.name, code: code!, type: draft.type, isID: draft.isID,
                      isVersion: draft.isVersion, isRequired: draft.isRequired)
        }
        return (list, highWater)
    }

    static func attributeType(of property: JSON) -> AttributeType {
        var names: [String] = []
        switch property["type"] {
        case .string(let name)?: names = [name]
        case .array(let items)?: names = items.compactMap(\.stringValue).filter { $0 != "null" }
        default: break
        }
        guard names.count == 1 else { return .json }
        switch names[0] {
        case "string": return .text
        case "integer": return .integer
        case "number": return .real
        case "boolean": return .boolean
        default: return .json
        }
    }
}

/// The model as JSON, so a context can open from the store alone.
enum ModelCoding {
    static let format: Int64 = 1

    static func encode(_ model: Model) -> String {
        let entities: [JSON] = model.entities.map { entity in
            .object([
                ("name", .string(entity.name)),
                ("route", .string(entity.route)),
                ("operations", .integer(Int64(entity.operations.rawValue))),
                ("codeHighWater", .integer(Int64(entity.codeHighWater))),
                ("attributes", .array(entity.attributes.map { attribute in
                    .object([
                        ("name", .string(attribute.name)),
                        ("code", .integer(Int64(attribute.code))),
                        ("type", .integer(Int64(attribute.type.rawValue))),
                        ("id", .bool(attribute.isID)),
                        ("version", .bool(attribute.isVersion)),
                        ("required", .bool(attribute.isRequired)),
                    ])
                })),
            ])
        }
        return JSON.object([("format", .integer(format)), ("entities", .array(entities))]).serialized()
    }

    static func decode(_ text: String) throws -> Model {
        let root = try JSON.parse(text)
        func corrupt() -> TetherError { TetherError(.store, "the model saved in the store is unreadable") }
        guard root["format"]?.integerValue == format, let entities = root["entities"]?.arrayValue else { throw corrupt() }
        return Model(entities: try entities.map { entity in
            guard let name = entity["name"]?.stringValue, Identifier.isValidEntityName(name),
                  let route = entity["route"]?.stringValue,
                  let operations = entity["operations"]?.integerValue,
                  let highWater = entity["codeHighWater"]?.integerValue,
                  let attributes = entity["attributes"]?.arrayValue else { throw corrupt() }
            let decoded: [Attribute] = try attributes.map { attribute in
                guard let name = attribute["name"]?.stringValue,
                      Identifier.isValidAttributeName(name),
                      let code = attribute["code"]?.integerValue,
                      let rawType = attribute["type"]?.integerValue,
                      let type = AttributeType(rawValue: Int(rawType)) else { throw corrupt() }
                return Attribute(name: name, code: Int(code), type: type, isID: attribute["id"] == .bool(true),
                                 isVersion: attribute["version"] == .bool(true),
                                 isRequired: attribute["required"] == .bool(true))
            }
            guard decoded.filter(\.isID).count == 1, decoded.filter(\.isVersion).count == 1,
                  Set(decoded.map(\.code)).count == decoded.count,
                  Set(decoded.map(\.name)).count == decoded.count else { throw corrupt() }
            return Entity(name: name, route: route, operations: Operations(rawValue: UInt32(operations)),
                          attributes: decoded, codeHighWater: Int(highWater))
        })
    }
}
