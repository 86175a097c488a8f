/// Builds the model from a connection's specs, keeping the codes a previous
/// model gave, so codes stay stable across runs. Server data is hostile until
/// proven otherwise: what cannot be modelled is left out with a diagnostic,
/// and the rest of the model is built.
enum ModelBuilder {
    static let firstAllocatedCode = 100
    /// Codes are C ints at the boundary.
    static let largestCode = Int(Int32.max)

    /// `otherTargets`: entities of other stores that references may name.
    static func build(specs: [Spec], previous: Model?, otherTargets: Set<ExactString> = []) -> Model {
        var diagnostics: [Diagnostic] = []
        var accepted: [Spec] = []
        var names = Set<ExactString>()
        for spec in specs {
            func skip(_ why: String) { diagnostics.append(Diagnostic(entity: spec.name, attribute: nil, message: why)) }
            guard Identifier.isUsableName(spec.name) else { skip("the name is empty, too long or holds U+0000"); continue }
            guard Identifier.isUsableName(spec.idField), Identifier.isUsableName(spec.versionField),
                  ExactString(spec.idField) != ExactString(spec.versionField) else {
                skip("its id and version fields are not two usable names")
                continue
            }
            guard names.insert(ExactString(spec.name)).inserted else { skip("the server describes it twice; the first is kept"); continue }
            accepted.append(spec)
        }
        let sorted = accepted.sorted { Array($0.name.utf8).lexicographicallyPrecedes($1.name.utf8) }
        // What the previous model gave each name, whether it had the entity
        // or remembered it as retired: a returning entity gets its codes back.
        func given(_ name: String) -> (code: Int, attributes: [ExactString: Int], highWater: Int)? {
            if let entity = previous?.entity(named: name) {
                var codes = Dictionary(entity.retiredAttributeCodes.map { (ExactString($0.name), $0.code) }, uniquingKeysWith: { first, _ in first })
                for attribute in entity.attributes { codes[ExactString(attribute.name)] = attribute.code }
                return (entity.code, codes, entity.codeHighWater)
            }
            guard let retired = previous?.retiredEntities.first(where: { ExactString($0.name) == ExactString(name) }) else { return nil }
            return (retired.code, Dictionary(retired.attributeCodes.map { (ExactString($0.name), $0.code) }, uniquingKeysWith: { first, _ in first }),
                    retired.codeHighWater)
        }
        // Entity codes as attribute codes: kept by name, else above every code given.
        var entityCodes: [ExactString: Int] = [:]
        var usedEntityCodes = Set<Int>()
        for spec in sorted {
            if let kept = given(spec.name)?.code, usedEntityCodes.insert(kept).inserted {
                entityCodes[ExactString(spec.name)] = kept
            }
        }
        var nextEntityCode = max(previous?.entityCodeHighWater ?? 0, usedEntityCodes.max() ?? 0) + 1
        for spec in sorted where entityCodes[ExactString(spec.name)] == nil {
            if nextEntityCode > largestCode { nextEntityCode = 1 }  // the range is spent: fill its gaps
            while usedEntityCodes.contains(nextEntityCode) { nextEntityCode += 1 }
            entityCodes[ExactString(spec.name)] = nextEntityCode
            usedEntityCodes.insert(nextEntityCode)
            nextEntityCode += 1
        }
        let entities = sorted.enumerated().map { index, spec in
            let previousCodes = given(spec.name)
            let attributes = buildAttributes(spec, previous: previousCodes.map { ($0.attributes, $0.highWater) },
                                             known: names.union(otherTargets), &diagnostics)
            return Entity(index: index, code: entityCodes[ExactString(spec.name)]!, spec: spec, attributes: attributes.list,
                          codeHighWater: attributes.highWater, retiredAttributeCodes: attributes.retired)
        }
        // Entities that left (now or before) are remembered, unless their code went to another.
        var retired: [RetiredEntity] = []
        var retiredNames = Set<ExactString>()
        for entity in previous?.entities ?? [] where !names.contains(ExactString(entity.name)) && !usedEntityCodes.contains(entity.code) {
            guard retiredNames.insert(ExactString(entity.name)).inserted else { continue }
            let codes = given(entity.name)!.attributes.map { RetiredCode(name: $0.key.string, code: $0.value) }.sorted { $0.code < $1.code }
            retired.append(RetiredEntity(name: entity.name, code: entity.code, attributeCodes: codes, codeHighWater: entity.codeHighWater))
        }
        for entity in previous?.retiredEntities ?? []
            where !names.contains(ExactString(entity.name)) && !usedEntityCodes.contains(entity.code) {
            guard retiredNames.insert(ExactString(entity.name)).inserted else { continue }
            retired.append(entity)
        }
        let highWater = max(previous?.entityCodeHighWater ?? 0, usedEntityCodes.max() ?? 0)
        return Model(entities: entities, entityCodeHighWater: highWater, retiredEntities: retired, diagnostics: diagnostics)
    }

    private struct Draft {
        let name: String
        let explicitCode: Int?
        let type: AttributeType
        let isID: Bool
        let isVersion: Bool
        let isRequired: Bool
        var allowedValues: [Value]? = nil
        var reference: Reference? = nil
    }

    /// `previous`: the codes given before, by name, and the highest given.
    private static func buildAttributes(_ spec: Spec, previous: (codes: [ExactString: Int], highWater: Int)?, known: Set<ExactString>,
                                        _ diagnostics: inout [Diagnostic])
        -> (list: [Attribute], highWater: Int, retired: [RetiredCode]) {
        func note(_ attribute: String, _ message: String) {
            diagnostics.append(Diagnostic(entity: spec.name, attribute: attribute, message: message))
        }
        /// A field's reference, if it can be one: text, to an entity of the model.
        func reference(_ field: FieldSpec, _ note: (String, String) -> Void) -> Reference? {
            guard let reference = field.reference else { return nil }
            guard field.type == .text else {
                note(field.name, "refers to \(reference.target) but is not text (a record id); kept as a plain attribute")
                return nil
            }
            guard known.contains(ExactString(reference.target)) else {
                note(field.name, "refers to \(reference.target), which the model does not have; kept as a plain attribute")
                return nil
            }
            guard Identifier.isUsableName(reference.inverse) else {
                note(field.name, "its inverse name is empty, too long or holds U+0000; kept as a plain attribute")
                return nil
            }
            if let word = field.unknownDeleteRule {
                note(field.name, "x-tether-delete \(word.debugDescription) is not nullify, cascade or deny; deny is used, "
                     + "which deletes and clears nothing")
            }
            return reference
        }
        func explicitCode(_ field: FieldSpec?) -> Int? {
            guard let field, let code = field.code else { return nil }
            guard code > 0, code <= Int64(largestCode) else {
                note(field.name, "code \(code) is outside 1...\(largestCode); another is given")
                return nil
            }
            return Int(code)
        }
        func field(_ name: String) -> FieldSpec? { spec.fields.first { $0.name.hasSameBytes(as: name) } }

        var drafts = [
            Draft(name: spec.idField, explicitCode: explicitCode(field(spec.idField)),
                  type: .text, isID: true, isVersion: false, isRequired: true),
            Draft(name: spec.versionField, explicitCode: explicitCode(field(spec.versionField)),
                  type: .integer, isID: false, isVersion: true, isRequired: false),
        ]
        let idAndVersion: Set<ExactString> = [ExactString(spec.idField), ExactString(spec.versionField)]
        var seen = idAndVersion
        for field in spec.fields where !idAndVersion.contains(ExactString(field.name)) {
            guard Identifier.isUsableName(field.name) else {
                note(field.name, "the name is empty, too long or holds U+0000; the field is kept only in each record's extra fields")
                continue
            }
            guard seen.insert(ExactString(field.name)).inserted else { note(field.name, "described twice; the first is kept"); continue }
            drafts.append(Draft(name: field.name, explicitCode: explicitCode(field), type: field.type,
                                isID: false, isVersion: false, isRequired: field.isRequired,
                                allowedValues: field.allowedValues, reference: reference(field, note)))
        }

        // Codes are promises: a code given before is kept first, whatever the
        // spec says now; then the spec's explicit codes, where free; then the
        // id's and version's usual 1 and 2; then new ones.
        var used = Set<Int>()
        var codes = [Int?](repeating: nil, count: drafts.count)
        func claim(_ index: Int, _ code: Int?) -> Bool {
            guard codes[index] == nil, let code, !used.contains(code) else { return false }
            codes[index] = code
            used.insert(code)
            return true
        }
        for (index, draft) in drafts.enumerated() {
            _ = claim(index, previous?.codes[ExactString(draft.name)])
        }
        for (index, draft) in drafts.enumerated() {
            guard let wanted = draft.explicitCode, !claim(index, wanted), codes[index] != wanted else { continue }
            note(draft.name, codes[index] != nil
                 ? "keeps code \(codes[index]!), given before; the spec now asks for \(wanted)"
                 : "code \(wanted) is taken by another attribute; another is given")
        }
        for (index, draft) in drafts.enumerated() { _ = claim(index, draft.isID ? 1 : draft.isVersion ? 2 : nil) }
        // New codes go above every code given so far, so a removed
        // attribute's code is not handed out again.
        var next = max(firstAllocatedCode, previous?.highWater ?? 0, used.max() ?? 0) + 1
        for index in drafts.indices where codes[index] == nil {
            if next > largestCode { next = firstAllocatedCode + 1 }  // the range is spent: fill its gaps
            while used.contains(next) { next += 1 }
            codes[index] = next
            used.insert(next)
        }
        let highWater = max(previous?.highWater ?? 0, used.max() ?? 0)
        // Names that left keep their codes for their return, unless another took the code.
        let present = Set(drafts.map { ExactString($0.name) })
        let retired = (previous?.codes ?? [:]).filter { !present.contains($0.key) && !used.contains($0.value) }
            .map { RetiredCode(name: $0.key.string, code: $0.value) }.sorted { $0.code < $1.code }
        let list = zip(drafts, codes).map { draft, code in
            Attribute(name: draft.name, code: code!, type: draft.type, isID: draft.isID,
                      isVersion: draft.isVersion, isRequired: draft.isRequired, allowedValues: draft.allowedValues,
                      reference: draft.reference)
        }
        return (list, highWater, retired)
    }
}

/// The model as JSON, so a context can open from the store alone.
enum ModelCoding {
    static let format: Int64 = 3

    static func encode(_ model: Model) -> String {
        let entities: [JSON] = model.entities.map { entity in
            .object([
                ("name", .string(entity.name)),
                ("code", .integer(Int64(entity.code))),
                ("route", .string(entity.route)),
                ("idField", .string(entity.spec.idField)),
                ("versionField", .string(entity.spec.versionField)),
                ("operations", .integer(Int64(entity.operations.rawValue))),
                ("codeHighWater", .integer(Int64(entity.codeHighWater))),
                ("retiredAttributes", retiredCodes(entity.retiredAttributeCodes)),
                ("attributes", .array(entity.attributes.map { attribute in
                    .object([
                        ("name", .string(attribute.name)),
                        ("code", .integer(Int64(attribute.code))),
                        ("type", .integer(Int64(attribute.type.rawValue))),
                        ("id", .bool(attribute.isID)),
                        ("version", .bool(attribute.isVersion)),
                        ("required", .bool(attribute.isRequired)),
                    ] + (attribute.allowedValues.map { [("allowed", .array($0.map(\.json)))] } ?? [])
                      + (attribute.reference.map { reference in
                          [("reference", .object([("target", .string(reference.target)), ("inverse", .string(reference.inverse)),
                                                  ("delete", .integer(Int64(reference.deleteRule.rawValue)))]))]
                      } ?? []))
                })),
            ])
        }
        let retired: [JSON] = model.retiredEntities.map { entity in
            .object([("name", .string(entity.name)), ("code", .integer(Int64(entity.code))),
                     ("codeHighWater", .integer(Int64(entity.codeHighWater))), ("attributes", retiredCodes(entity.attributeCodes))])
        }
        return JSON.object([("format", .integer(format)), ("entityCodeHighWater", .integer(Int64(model.entityCodeHighWater))),
                            ("entities", .array(entities)), ("retired", .array(retired))]).serialized()
    }

    private static func retiredCodes(_ codes: [RetiredCode]) -> JSON {
        .array(codes.map { .object([("name", .string($0.name)), ("code", .integer(Int64($0.code)))]) })
    }

    /// Retired codes as saved (absent in a model saved before they were kept); each within 1...highWater.
    private static func retiredCodes(_ json: JSON?, highWater: Int64, _ corrupt: () -> TetherError) throws -> [RetiredCode] {
        guard let json else { return [] }
        guard let list = json.arrayValue else { throw corrupt() }
        return try list.map { item in
            guard let name = item["name"]?.stringValue, Identifier.isUsableName(name),
                  let code = item["code"]?.integerValue, highWater >= 1, (1...highWater).contains(code) else { throw corrupt() }
            return RetiredCode(name: name, code: Int(code))
        }
    }

    /// A model saved by an older format is not an error: the store is then
    /// treated as new for the model (its codes start afresh).
    static func decode(_ text: String) throws -> Model? {
        let root = try JSON.parse(text)
        func corrupt() -> TetherError { TetherError(.store, "the model saved in the store is unreadable") }
        guard let saved = root["format"]?.integerValue else { throw corrupt() }
        guard saved == format else { return nil }
        // Read from a file that anything may have written: every number is checked.
        guard let entities = root["entities"]?.arrayValue, let entityHighWater = root["entityCodeHighWater"]?.integerValue,
              (0...Int64(ModelBuilder.largestCode)).contains(entityHighWater) else {
            throw corrupt()
        }
        let model = Model(entities: try entities.enumerated().map { index, entity in
            guard let name = entity["name"]?.stringValue, Identifier.isUsableName(name),
                  let code = entity["code"]?.integerValue, code > 0, code <= entityHighWater,
                  let route = entity["route"]?.stringValue,
                  let idField = entity["idField"]?.stringValue,
                  let versionField = entity["versionField"]?.stringValue,
                  let operations = entity["operations"]?.integerValue,
                  let highWater = entity["codeHighWater"]?.integerValue, (0...Int64(ModelBuilder.largestCode)).contains(highWater),
                  let attributes = entity["attributes"]?.arrayValue else { throw corrupt() }
            let decoded: [Attribute] = try attributes.map { attribute in
                guard let name = attribute["name"]?.stringValue,
                      Identifier.isUsableName(name),
                      let code = attribute["code"]?.integerValue, (1...highWater).contains(code),
                      let rawType = attribute["type"]?.integerValue,
                      let type = AttributeType(rawValue: Int(rawType)) else { throw corrupt() }
                return Attribute(name: name, code: Int(code), type: type, isID: attribute["id"] == .bool(true),
                                 isVersion: attribute["version"] == .bool(true),
                                 isRequired: attribute["required"] == .bool(true),
                                 allowedValues: attribute["allowed"]?.arrayValue?.map { Value(json: $0, type: type) },
                                 reference: attribute["reference"].flatMap { reference in
                                     guard let target = reference["target"]?.stringValue, let inverse = reference["inverse"]?.stringValue,
                                           let rule = reference["delete"]?.integerValue,
                                           let deleteRule = Reference.DeleteRule(rawValue: Int(truncatingIfNeeded: rule)) else { return nil }
                                     return Reference(target: target, inverse: inverse, deleteRule: deleteRule)
                                 })
            }
            let ids = decoded.filter(\.isID), versions = decoded.filter(\.isVersion)
            guard ids.count == 1, versions.count == 1, !ids[0].isVersion,
                  ExactString(ids[0].name) == ExactString(idField), ExactString(versions[0].name) == ExactString(versionField),
                  Set(decoded.map(\.code)).count == decoded.count,
                  Set(decoded.map { ExactString($0.name) }).count == decoded.count else { throw corrupt() }
            let fields = decoded.map { attribute in
                var field = FieldSpec(name: attribute.name, type: attribute.type, code: Int64(attribute.code),
                                      isRequired: attribute.isRequired, allowedValues: attribute.allowedValues)
                field.reference = attribute.reference
                return field
            }
            let spec = Spec(name: name, route: route, idField: idField, versionField: versionField, fields: fields,
                            operations: Operations(rawValue: UInt32(truncatingIfNeeded: operations)))
            let retired = try retiredCodes(entity["retiredAttributes"], highWater: highWater, corrupt)
                .filter { code in !decoded.contains { $0.code == code.code } }
            return Entity(index: index, code: Int(code), spec: spec, attributes: decoded, codeHighWater: Int(highWater),
                          retiredAttributeCodes: retired)
        }, entityCodeHighWater: Int(entityHighWater), retiredEntities: try (root["retired"].map { json in
            guard let list = json.arrayValue else { throw corrupt() }
            return try list.map { item in
                guard let name = item["name"]?.stringValue, Identifier.isUsableName(name),
                      let code = item["code"]?.integerValue, code > 0, code <= entityHighWater,
                      let highWater = item["codeHighWater"]?.integerValue, (0...Int64(ModelBuilder.largestCode)).contains(highWater)
                else { throw corrupt() }
                return RetiredEntity(name: name, code: Int(code),
                                     attributeCodes: try retiredCodes(item["attributes"], highWater: highWater, corrupt),
                                     codeHighWater: Int(highWater))
            }
        } ?? []).filter { retired in !entities.contains { $0["code"]?.integerValue == Int64(retired.code) } })
        guard Set(model.entities.map(\.code)).count == model.entities.count,
              Set(model.entities.map { ExactString($0.name) }).count == model.entities.count else { throw corrupt() }
        return model
    }
}
