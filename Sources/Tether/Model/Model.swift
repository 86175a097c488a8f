import Glibc

/// The type of an attribute's values, from the spec's JSON-schema type.
public enum AttributeType: Int, Sendable {
    case text = 1, integer = 2, real = 3, boolean = 4, json = 5

    public var name: String {
        switch self {
        case .text: return "text"
        case .integer: return "integer"
        case .real: return "real"
        case .boolean: return "boolean"
        case .json: return "json"
        }
    }
}

public struct Operations: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let fetch = Operations(rawValue: 1)
    public static let insert = Operations(rawValue: 2)
    public static let update = Operations(rawValue: 4)
    public static let delete = Operations(rawValue: 8)
    public static let all: Operations = [.fetch, .insert, .update, .delete]
}

public struct Attribute: Sendable, Equatable {
    public let name: String
    /// Stable across runs and model changes; hosts may address keys by it.
    public let code: Int
    public let type: AttributeType
    public let isID: Bool
    public let isVersion: Bool
    public let isRequired: Bool
    /// The only values the spec allows (a JSON schema's `enum`); nil: any of the type.
    public var allowedValues: [Value]? = nil
    /// A to-one relationship: the attribute holds the id of a record of
    /// another entity. nil: a plain attribute.
    public var reference: Reference? = nil
}

/// A to-one relationship, held by a text attribute naming a record of
/// `target` by its id (a foreign key, as ActiveResourceKit resolves them);
/// its inverse, a to-many on the target, is every record referring to one.
public struct Reference: Sendable, Equatable {
    /// What deleting a target does to the records that refer to it (Core
    /// Data's delete rule of the inverse to-many).
    public enum DeleteRule: Int, Sendable {
        /// Their reference becomes null.
        case nullify = 0
        /// They are deleted too.
        case cascade = 1
        /// The delete is refused while any refers to it.
        case deny = 2
    }

    /// The target entity's name.
    public let target: String
    /// The inverse to-many's name, on the target.
    public let inverse: String
    public let deleteRule: DeleteRule

    public init(target: String, inverse: String, deleteRule: DeleteRule) {
        self.target = target
        self.inverse = inverse
        self.deleteRule = deleteRule
    }
}

/// A to-many relationship: the records of `source` whose attribute
/// `attribute` refers to a record of the entity that has it.
public struct Inverse: Sendable {
    public let name: String
    public let source: Entity
    public let attribute: Int
    public let deleteRule: Reference.DeleteRule
    /// The source's records are in another store than the target's: their
    /// references hold object URIs, not ids.
    public let crossesStores: Bool
}

/// A record type, built from its spec.
public final class Entity: Sendable {
    public let name: String
    /// Stable across runs, as attribute codes are; names its table in the store.
    public let code: Int
    /// Its position in the model: the server's entities sorted by name,
    /// then each local store's.
    public let index: Int
    /// The configuration whose store holds its records: "" for the
    /// server's, else the name of a local-only store attached beside it.
    public let configuration: String
    /// Which of the context's stores holds it: 0 for the server's, then
    /// the local stores in the order they were attached.
    let storeIndex: Int
    /// The spec it was built from; what the connection is asked about.
    public let spec: Spec
    /// Records' path under the server root.
    public let route: String
    public let operations: Operations
    public let attributes: [Attribute]
    public let idIndex: Int
    public let versionIndex: Int
    /// The highest code ever given in this entity; removed attributes' codes are not reused.
    let codeHighWater: Int
    /// The codes of attributes the spec no longer has, by name: one that
    /// comes back gets its code back, and with it the unsaved values kept under it.
    let retiredAttributeCodes: [RetiredCode]
    private let indexByName: [ExactString: Int]
    private let indexByCode: [Int: Int]
    /// The names' UTF-8 end to end, and where each lies, for
    /// `attributeIndex(bytes:)`: one flat buffer, so a scan retains nothing.
    private let nameBytes: [UInt8]
    private let nameSpans: [(start: Int, count: Int)]

    init(index: Int, code: Int, spec: Spec, attributes: [Attribute], codeHighWater: Int,
         retiredAttributeCodes: [RetiredCode] = [], configuration: String = "", storeIndex: Int = 0) {
        name = spec.name
        self.retiredAttributeCodes = retiredAttributeCodes
        self.code = code
        self.index = index
        self.configuration = configuration
        self.storeIndex = storeIndex
        self.spec = spec
        self.codeHighWater = codeHighWater
        route = spec.route
        operations = spec.operations
        self.attributes = attributes
        idIndex = attributes.firstIndex { $0.isID }!
        versionIndex = attributes.firstIndex { $0.isVersion }!
        indexByName = Dictionary(uniqueKeysWithValues: attributes.enumerated().map { (ExactString($1.name), $0) })
        indexByCode = Dictionary(uniqueKeysWithValues: attributes.enumerated().map { ($1.code, $0) })
        var bytes: [UInt8] = []
        nameSpans = attributes.map { attribute in
            defer { bytes += attribute.name.utf8 }
            return (bytes.count, attribute.name.utf8.count)
        }
        nameBytes = bytes
    }

    public func attributeIndex(named name: String) -> Int? { indexByName[ExactString(name)] }

    /// The attribute whose name has exactly these UTF-8 bytes: compared in
    /// place, so a read by name from C hashes nothing and allocates nothing.
    /// nil also for entities too wide for a scan: ask by `named` then.
    public func attributeIndex(bytes name: UnsafeBufferPointer<UInt8>) -> Int? {
        guard name.count > 0, nameSpans.count <= Self.widestScanned else { return nil }
        return nameBytes.withUnsafeBufferPointer { all in
            nameSpans.firstIndex { span in
                // Names are short: a loop in place beats a call to memcmp.
                guard span.count == name.count else { return false }
                var offset = 0
                while offset < span.count && all[span.start + offset] == name[offset] { offset += 1 }
                return offset == span.count
            }
        }
    }
    public func attributeIndex(code: Int) -> Int? { indexByCode[code] }

    private static let widestScanned = 32

    /// Records kept only here, in a local store: its table is their truth.
    public var isLocal: Bool { storeIndex != 0 }

    /// This entity at another place in a combined model; references to
    /// `dropping` are plain attributes there (their target is not the one
    /// the spec meant).
    func placed(at index: Int, configuration: String, storeIndex: Int, dropping: Set<ExactString> = []) -> Entity {
        let kept = attributes.map { attribute in
            var attribute = attribute
            if let target = attribute.reference?.target, dropping.contains(ExactString(target)) { attribute.reference = nil }
            return attribute
        }
        return Entity(index: index, code: code, spec: spec, attributes: kept, codeHighWater: codeHighWater,
                      retiredAttributeCodes: retiredAttributeCodes, configuration: configuration, storeIndex: storeIndex)
    }
}

/// A name that had a code, and keeps it should it come back (codes are stable).
struct RetiredCode: Sendable, Equatable {
    let name: String
    let code: Int
}

/// An entity the server's model had and no longer has, remembered with its
/// attributes' codes: if it comes back it gets them back, and with them its
/// unsaved changes, which the outbox keeps by these codes.
struct RetiredEntity: Sendable, Equatable {
    let name: String
    let code: Int
    let attributeCodes: [RetiredCode]
    let codeHighWater: Int
}

/// What the model builder left out or changed, and why: for the host to read.
public struct Diagnostic: Sendable, Equatable {
    public let entity: String
    /// nil when the whole entity is concerned.
    public let attribute: String?
    public let message: String
}

/// Every entity a connection offers, sorted by name, then those of the
/// local stores attached beside it.
public final class Model: Sendable {
    public let entities: [Entity]
    /// The highest entity code ever given; removed entities' codes are not reused.
    let entityCodeHighWater: Int
    /// Entities that left, with their codes (see RetiredEntity).
    let retiredEntities: [RetiredEntity]
    /// What could not be modelled as the specs asked, from the build that made
    /// this model (none for a model read back from the store).
    public let diagnostics: [Diagnostic]
    private let entityByName: [ExactString: Entity]
    /// Each entity's to-many relationships, by entity index.
    private let inverses: [[Inverse]]

    /// `entities` each at its index, names unique (codes: within a store).
    init(entities: [Entity], entityCodeHighWater: Int, retiredEntities: [RetiredEntity] = [], diagnostics: [Diagnostic] = []) {
        precondition(entities.enumerated().allSatisfy { $0.offset == $0.element.index })
        self.entities = entities
        self.entityCodeHighWater = entityCodeHighWater
        self.retiredEntities = retiredEntities
        let byName = Dictionary(entities.map { (ExactString($0.name), $0) }, uniquingKeysWith: { first, _ in first })
        entityByName = byName
        var inverses = Array(repeating: [Inverse](), count: entities.count)
        for source in entities {
            for (index, attribute) in source.attributes.enumerated() {
                guard let reference = attribute.reference, let target = byName[ExactString(reference.target)] else { continue }
                inverses[target.index].append(Inverse(name: reference.inverse, source: source, attribute: index,
                                                      deleteRule: reference.deleteRule,
                                                      crossesStores: source.storeIndex != target.storeIndex))
            }
        }
        // A name two to-manys of one entity would share is neither's (the
        // fetch by name would find only one): each is "<source>.<attribute>".
        var noted = diagnostics
        for (target, list) in inverses.enumerated() {
            var counts: [ExactString: Int] = [:]
            for inverse in list { counts[ExactString(inverse.name), default: 0] += 1 }
            guard counts.values.contains(where: { $0 > 1 }) else { continue }
            inverses[target] = list.map { inverse in
                guard counts[ExactString(inverse.name)]! > 1 else { return inverse }
                let attribute = inverse.source.attributes[inverse.attribute].name
                let renamed = inverse.source.name + "." + attribute
                let diagnostic = Diagnostic(entity: inverse.source.name, attribute: attribute,
                                            message: "its inverse on \(entities[target].name) would share the name "
                                                + "\(inverse.name.debugDescription) with another; it is named \(renamed.debugDescription)")
                if !noted.contains(diagnostic) { noted.append(diagnostic) }
                return Inverse(name: renamed, source: inverse.source, attribute: inverse.attribute,
                               deleteRule: inverse.deleteRule, crossesStores: inverse.crossesStores)
            }
        }
        self.diagnostics = noted
        self.inverses = inverses
    }

    /// The to-many relationships of `entity`: the records referring to one of its.
    public func inverses(of entity: Entity) -> [Inverse] { inverses[entity.index] }

    public func entity(named name: String) -> Entity? { entityByName[ExactString(name)] }

    /// The entity a caller names; `.notFound` saying so where the model lacks it.
    public func existingEntity(named name: String) throws -> Entity {
        guard let entity = entity(named: name) else {
            throw TetherError(.notFound, "the model has no entity \(name.debugDescription)")
        }
        return entity
    }

    /// The target of a reference attribute, if the model has it.
    func target(of attribute: Attribute) -> Entity? { attribute.reference.flatMap { entity(named: $0.target) } }

    /// This model's entities, then each local store's after them (their
    /// store numbered from 1). A server entity named as a local one is left
    /// out with a diagnostic: the host asked for its own, whose records
    /// exist only here, while the server's stay on the server.
    func attaching(_ locals: [(configuration: String, model: Model)]) -> Model {
        guard !locals.isEmpty else { return self }
        let localNames = Set(locals.flatMap { $0.model.entities.map { ExactString($0.name) } })
        var diagnostics = self.diagnostics
        var placed: [Entity] = []
        for entity in entities {
            guard !localNames.contains(ExactString(entity.name)) else {
                diagnostics.append(Diagnostic(entity: entity.name, attribute: nil,
                                              message: "a local store defines an entity of this name; the server's is left out"))
                continue
            }
            placed.append(entity.placed(at: placed.count, configuration: "", storeIndex: 0, dropping: localNames))
        }
        for (offset, local) in locals.enumerated() {
            diagnostics += local.model.diagnostics
            for entity in local.model.entities {
                placed.append(entity.placed(at: placed.count, configuration: local.configuration, storeIndex: offset + 1))
            }
        }
        return Model(entities: placed, entityCodeHighWater: entityCodeHighWater, retiredEntities: retiredEntities,
                     diagnostics: diagnostics)
    }
}
