/// A JSON schema's properties as fields of a spec: the shape Kinto gives a
/// collection's schema, and the one hosts use to define local entities.
/// Each property's `type` gives the attribute type (one JSON type besides
/// "null", else json); `required` lists required fields; `enum` the allowed
/// values; Tether's own keywords give a stable code and relationships.
enum SchemaFields {
    /// The keyword that gives a property a stable code.
    static let codeKeyword = "x-tether-code"
    /// The keywords of a relationship: a text property naming a record of
    /// another entity (`x-tether-to`: the entity), its inverse's name on that
    /// entity (`x-tether-inverse`, default this entity's name) and what
    /// deleting the target does to the records referring to it
    /// (`x-tether-delete`: nullify, cascade, deny).
    static let referenceKeywords = (to: "x-tether-to", inverse: "x-tether-inverse", delete: "x-tether-delete")

    /// The fields of the entity `entity` that `schema` describes, in its order.
    static func fields(of schema: JSON?, entity: String) -> [FieldSpec] {
        let required = Set((schema?["required"]?.arrayValue ?? []).compactMap(\.stringValue))
        return (schema?["properties"]?.objectValue ?? []).map { field, property in
            var spec = FieldSpec(name: field, type: attributeType(of: property),
                                 code: property[codeKeyword].map(explicitCode), isRequired: required.contains(field),
                                 allowedValues: property["enum"]?.arrayValue.map { values in
                                     values.map { Value(json: $0, type: attributeType(of: property)) }
                                 })
            if let target = property[referenceKeywords.to]?.stringValue {
                // Words in any case ("Cascade" means cascade); another word
                // is reported and taken as deny, which loses nothing.
                var rule = Reference.DeleteRule.nullify
                if let word = property[referenceKeywords.delete] {
                    switch word.stringValue.map(asciiLowercased) {
                    case "nullify": rule = .nullify
                    case "cascade": rule = .cascade
                    case "deny": rule = .deny
                    default:
                        rule = .deny
                        spec.unknownDeleteRule = word.stringValue ?? word.serialized()
                    }
                }
                spec.reference = Reference(target: target, inverse: property[referenceKeywords.inverse]?.stringValue ?? entity,
                                           deleteRule: rule)
            }
            return spec
        }
    }

    private static func asciiLowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// A schema's `x-tether-code` as the model builder takes it: a value that
    /// is not a code in range stays out of range, so that it is refused with
    /// a diagnostic rather than dropped without a word.
    static func explicitCode(_ value: JSON) -> Int64 {
        switch value {
        case .integer(let code): return code
        case .number(let text): return text.hasPrefix("-") ? .min : .max
        case .real(let real) where real.rounded() == real:
            return real >= 0x1p63 ? .max : real < -0x1p63 ? .min : Int64(real)
        default: return 0
        }
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
