import Glibc

/// Local-only stores: SQLite files attached beside the server's store, each
/// holding the entities its configuration defines (private annotations on
/// server records, say), as Core Data's configurations put entities in
/// stores. Their records never go to a server: a save writes them to their
/// own file, and that file is their only copy. Relationships from them to
/// another store's records hold object URIs, and are cleaned up when the
/// target is deleted.
public struct LocalStoreOptions: Sendable {
    /// Names the store in object URIs: ASCII letters, digits, `-` and `_`,
    /// at most 64 bytes, and not "server" (the server's store).
    public var configuration: String
    /// The SQLite file, created if missing.
    public var path: String
    /// The entities, as a JSON object of entity name to JSON schema (the
    /// shape of a Kinto collection's schema, `x-tether-*` keywords included).
    /// Each also has `id` (text) and `version` (integer, set by each save).
    public var specs: String

    public init(configuration: String, path: String, specs: String) {
        self.configuration = configuration
        self.path = path
        self.specs = specs
    }

    static let idField = "id"
    static let versionField = "version"
    static let routePrefix = "local:"

    /// Whom a local store's file belongs to, as its meta table says.
    static func identity(of configuration: String) -> String { "local store \(configuration)" }

    static func validate(_ stores: [LocalStoreOptions]) throws {
        var seen = Set<String>()
        for store in stores {
            let name = store.configuration
            guard !name.isEmpty, name.utf8.count <= 64, name != ObjectURI.serverAuthority,
                  name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D || $0 == 0x5F })
            else {
                throw TetherError(.invalid, "local store configuration \(name.debugDescription) must be 1 to 64 ASCII letters, "
                                  + "digits, - or _, and not \"server\"")
            }
            guard seen.insert(name).inserted else { throw TetherError(.invalid, "two local stores are named \(name.debugDescription)") }
            guard !store.path.isEmpty else { throw TetherError(.invalid, "local store \(name): the path is empty") }
        }
    }

    /// Drops from the store's file the records of `entity`, or only the
    /// values of its `field`, so that an open whose specs leave them out is
    /// taken. Not while a context has the file open (`.busy`); `.notFound`
    /// if the file, the entity or the field is not there; `.invalid` for
    /// the id and version fields. Unsaved changes of the entity go too.
    public func drop(entity name: String, field: String?) throws {
        try Self.validate([self])
        guard access(path, F_OK) == 0 else { throw TetherError(.notFound, "local store \(configuration): there is no file \(path)") }
        let store = try Store(path: path)
        defer { store.close() }
        try store.claim()
        let identity = "local store \(configuration)"
        guard let saved = try store.savedModel(identity: identity), let old = saved.entity(named: name) else {
            throw TetherError(.notFound, "\(identity) has no entity \(name.debugDescription)")
        }
        var kept = saved.entities
        if let field {
            guard let index = old.attributeIndex(named: field) else {
                throw TetherError(.notFound, "\(identity): \(name) has no field \(field.debugDescription)")
            }
            guard !old.attributes[index].isID, !old.attributes[index].isVersion else {
                throw TetherError(.invalid, "\(identity): \(name).\(field) is the id or the version, which every record has")
            }
            var spec = old.spec
            spec.fields.removeAll { $0.name.hasSameBytes(as: field) }
            kept[old.index] = Entity(index: old.index, code: old.code, spec: spec,
                                     attributes: old.attributes.enumerated().filter { $0.offset != index }.map(\.element),
                                     codeHighWater: old.codeHighWater, retiredAttributeCodes: old.retiredAttributeCodes)
            // Its unsaved values go too: kept, they would wait for a field that never comes back.
            try store.discardValues(of: old, code: old.attributes[index].code)
        } else {
            kept.remove(at: old.index)
            kept = kept.enumerated().map { index, entity in
                Entity(index: index, code: entity.code, spec: entity.spec, attributes: entity.attributes, codeHighWater: entity.codeHighWater,
                       retiredAttributeCodes: entity.retiredAttributeCodes)
            }
            try store.discardChanges(of: old)
        }
        try store.adopt(Model(entities: kept, entityCodeHighWater: saved.entityCodeHighWater, retiredEntities: saved.retiredEntities),
                        identity: identity)
        Log.info(.migration, "\(identity): dropped \(name)\(field.map { "." + $0 } ?? "") on request")
    }

    /// The specs the host wrote, as the model builder takes them.
    func parsedSpecs() throws -> [Spec] {
        let root: JSON
        do { root = try JSON.parse(specs) } catch {
            throw TetherError(.invalid, "local store \(configuration): specs are not JSON: \(TetherError.wrap(error).message)")
        }
        guard let entities = root.objectValue else {
            throw TetherError(.invalid, "local store \(configuration): specs must be a JSON object of entity name to schema")
        }
        return try entities.map { name, schema in
            guard schema.objectValue != nil else {
                throw TetherError(.invalid, "local store \(configuration): the schema of \(name.debugDescription) is not an object")
            }
            return Spec(name: name, route: Self.routePrefix + configuration + "/" + ObjectURI.escape(name),
                        idField: Self.idField, versionField: Self.versionField,
                        fields: SchemaFields.fields(of: schema, entity: name), operations: .all)
        }
    }
}

/// An object's name across stores: `tether://<store>/<entity>/<id>`, the
/// store being "server" or a local store's configuration, the entity and id
/// percent-encoded. References from one store to another hold it.
struct ObjectURI: Equatable {
    static let scheme = "tether://"
    static let serverAuthority = "server"

    let configuration: String
    let entity: String
    let id: String

    init(configuration: String, entity: String, id: String) {
        self.configuration = configuration
        self.entity = entity
        self.id = id
    }

    init(_ object: ManagedObject) {
        self.init(configuration: object.entity.configuration, entity: object.entity.name, id: object.id)
    }

    /// nil for text that is not one.
    init?(parsing text: String) {
        guard text.hasPrefix(Self.scheme) else { return nil }
        let parts = text.dropFirst(Self.scheme.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, let entity = Self.unescape(parts[1]), let id = Self.unescape(parts[2]),
              !entity.isEmpty, !id.isEmpty else { return nil }
        configuration = parts[0] == Self.serverAuthority ? "" : String(parts[0])
        self.entity = entity
        self.id = id
    }

    var text: String {
        Self.scheme + (configuration.isEmpty ? Self.serverAuthority : configuration) + "/" + Self.escape(entity) + "/" + Self.escape(id)
    }

    /// Every byte but RFC 3986's unreserved ones as %XX.
    static func escape(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: bytes.append(byte)
            default: bytes += [0x25, hex[Int(byte >> 4)], hex[Int(byte & 15)]]
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// nil for bad escapes or bytes that are not UTF-8.
    static func unescape(_ text: Substring) -> String? {
        guard let bytes = PercentEncoding.decoded(text, lenient: false), !bytes.contains(0) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }
}

extension ManagedObject {
    /// The object's name across stores (`tether://server/changes/<id>`).
    public var uri: String { ObjectURI(self).text }

    /// Points the to-one relationship `key` at `target` (nil: none): its id
    /// in the same store, its URI across stores.
    public func setRelated(_ key: String, _ target: ManagedObject?) throws {
        guard let index = entity.attributeIndex(named: key) else {
            throw TetherError(.invalid, "\(entity.name) has no key \(key.debugDescription), so no relationship of that name")
        }
        guard let targetEntity = context.model.target(of: entity.attributes[index]) else {
            throw TetherError(.invalid, "\(entity.name).\(key) is not a relationship")
        }
        guard let target else { return try set(attribute: index, .null) }
        guard target.context === context else { throw TetherError(.invalid, "the target belongs to another context") }
        guard target.entity === targetEntity else {
            throw TetherError(.type, "\(entity.name).\(key) refers to \(targetEntity.name), not \(target.entity.name)")
        }
        try set(attribute: index, .text(entity.storeIndex == targetEntity.storeIndex ? target.id : target.uri))
    }
}

extension Context {
    /// The local stores' models, built from the host's specs (keeping the
    /// codes each store saved), attached after the server's.
    /// A store attached beside another server or bucket than its first is
    /// refused: its references name that one's records. Specs that leave
    /// out what the file holds are refused too: the file is its only copy
    /// (`LocalStoreOptions.drop` drops it on purpose).
    static func attachLocalStores(_ locals: [LocalStoreOptions], stores: [Store], to server: Model,
                                  beside connection: any Connection) throws -> Model {
        guard !locals.isEmpty else { return server }
        let specs = try locals.map { try $0.parsedSpecs() }
        var localNames = Set<ExactString>()
        for (local, specs) in zip(locals, specs) {
            for spec in specs where !localNames.insert(ExactString(spec.name)).inserted {
                throw TetherError(.invalid, "local store \(local.configuration): another local store defines \(spec.name.debugDescription) too")
            }
        }
        let targets = localNames.union(server.entities.map { ExactString($0.name) })
        var built: [(configuration: String, model: Model)] = []
        for (local, (specs, store)) in zip(locals, zip(specs, stores)) {
            let identity = LocalStoreOptions.identity(of: local.configuration)
            let saved = try store.savedModel(identity: identity)
            let model = ModelBuilder.build(specs: specs, previous: saved, otherTargets: targets)
            if let saved {
                let lost = try store.dataLost(adopting: model, saved: saved)
                guard lost.isEmpty else {
                    throw TetherError(.store, "\(identity): the specs leave out what its file, their only copy, holds: "
                                      + lost.joined(separator: ", ") + "; give them back, or drop them with tether_local_store_drop")
                }
            }
            try store.attach(beside: connection.identity, formerIdentities: connection.formerIdentities, as: identity)
            try store.adopt(model, identity: identity)
            built.append((local.configuration, model))
        }
        return server.attaching(built)
    }

    /// The object a URI names; `.notFound` if its store is not attached or
    /// its entity unknown.
    public func object(uri: String) throws -> ManagedObject {
        guard let parsed = ObjectURI(parsing: uri) else { throw TetherError(.invalid, "\(uri.debugDescription) is not an object URI") }
        guard let entity = model.entity(named: parsed.entity), entity.configuration == parsed.configuration else {
            throw TetherError(.notFound, "\(uri) names an entity of a store not attached to this context")
        }
        try checkOpen()
        return uniqueObjects(entity, [parsed.id])[0]
    }

    /// The value a reference attribute holds for the record `id` of its target.
    func referenceValue(of source: Entity, to target: Entity, id: String) -> Value {
        .text(source.storeIndex == target.storeIndex ? id : ObjectURI(configuration: target.configuration, entity: target.name, id: id).text)
    }

    /// The id a reference's value names; nil for null or "".
    func referencedID(_ value: Value, _ attribute: Attribute, of source: Entity, to target: Entity) throws -> String? {
        guard case .text(let text) = value, !text.isEmpty else { return nil }
        guard source.storeIndex != target.storeIndex else { return text }
        guard let uri = ObjectURI(parsing: text), uri.configuration == target.configuration, uri.entity == target.name else {
            throw TetherError(.invalid, "\(source.name).\(attribute.name) holds \(text.debugDescription), not the URI of a \(target.name)")
        }
        return uri.id
    }

    /// A value set on a cross-store reference must be a URI of its target,
    /// spelled as tether_object_uri spells it: to-many fetches and delete
    /// rules compare the text, so another spelling would hide the reference.
    func checkReference(_ value: Value, _ index: Int, of entity: Entity) throws {
        let attribute = entity.attributes[index]
        guard let target = model.target(of: attribute), target.storeIndex != entity.storeIndex else { return }
        guard let id = try referencedID(value, attribute, of: entity, to: target), case .text(let text) = value else { return }
        let canonical = ObjectURI(configuration: target.configuration, entity: target.name, id: id).text
        guard text.hasSameBytes(as: canonical) else {
            throw TetherError(.invalid, "\(entity.name).\(attribute.name): \(text.debugDescription) is not spelled as an object URI is; "
                              + "use \(canonical.debugDescription)")
        }
    }

    /// A get of a local record its store does not hold: it does not exist,
    /// and whoever observes it hears so once (as of a record the server
    /// never had), instead of waiting for a refresh that never comes.
    func noteAbsentLocal(_ object: ManagedObject) {
        let observers = object.state.withLock { state -> [KeyObserver]? in
            guard state.loaded, state.record == nil, state.pending == nil, !state.deletedOnServer, !state.discarded else { return nil }
            state.deletedOnServer = true
            state.neverOnServer = true
            return state.observers
        }
        guard let observers, !observers.isEmpty else { return }
        let missing = TetherError.noRecord(object.entity, object.id)
        for observer in observers { observer.notify(missing) }
    }

    // MARK: cleaning up references across stores

    /// Records of `entity` are gone for good (the server said so, or their
    /// own store): references from other stores to them follow their delete
    /// rule at once, in those stores (cascade deletes the referrers; nullify
    /// and deny, which cannot refuse what has happened, clear the reference).
    /// Targets with unsaved changes here are left: a merge policy may make
    /// them again. Unsaved changes of referrers stay as they are.
    /// `withinStore`: the references from the target's own local store
    /// instead (a cascade here goes on there: no save will carry it).
    func cleanUpReferences(to ids: [String], of entity: Entity, withinStore: Bool = false) {
        if !withinStore && !entity.isLocal { refreshServerReferrers(to: ids, of: entity) }
        let inverses = model.inverses(of: entity).filter { withinStore ? !$0.crossesStores && $0.source.isLocal : $0.crossesStores }
        guard !inverses.isEmpty, !ids.isEmpty else { return }
        let edited = Set(objectsInMemory(entity, ids).filter(\.hasChanges).map { ExactString($0.id) })
        let targets = ids.filter { !edited.contains(ExactString($0)) }
        for inverse in inverses {
            let source = inverse.source
            let sourceStore = store(for: source)
            for start in stride(from: 0, to: targets.count, by: Self.cleanupSlice) {
                let slice = targets[start..<min(targets.count, start + Self.cleanupSlice)]
                let uris = slice.map { referenceValue(of: source, to: entity, id: $0) }
                let refers = Predicate.comparison(Comparison(attribute: inverse.attribute, operator: .oneOf, options: [], values: uris))
                do {
                    try sourceStore.ensureIndexes(source, on: [inverse.attribute])
                    var referrers = try sourceStore.query(source, where: refers, sort: [], limit: 0).map(\.record)
                    // Siblings take what the clean-up did, as they take a save's
                    // answers: their next save of a referrer is no conflict.
                    let siblings = coordinator.others(than: self)
                    // A referrer whose delete is pending (the same delete's
                    // cascade, say; its write may be built already) is left
                    // to it: deleted or rewritten under it, it would meet
                    // the clean-up as a conflict.
                    let deleting = Set(([self] + siblings).flatMap { $0.objectsInMemory(source, referrers.map(\.id)) }
                        .filter { $0.changeKind == .delete }.map { ExactString($0.id) })
                    referrers.removeAll { deleting.contains(ExactString($0.id)) }
                    guard !referrers.isEmpty else { continue }
                    let ids = referrers.map(\.id)
                    if inverse.deleteRule == .cascade {
                        try sourceStore.delete(ids: ids, of: source)
                        markDeleted(ids, of: source)
                        for sibling in siblings { for id in ids { sibling.takeSaved(nil, id: id, of: source) } }
                        cleanUpReferences(to: ids, of: source, withinStore: true)
                    } else {
                        let now = wallClockMilliseconds()
                        let cleared = referrers.map { record -> Record in
                            var values = record.values
                            values[inverse.attribute] = .null
                            values[source.versionIndex] = .integer(LocalConnection.nextVersion(after: record.values[source.versionIndex]))
                            return Record(id: record.id, values: values, extra: record.extra)
                        }
                        try sourceStore.write(cleared, of: source, fetchedAt: now, acceptingOlder: true)
                        try rebaseChanges(of: source, on: cleared)
                        _ = merge(cleared, of: source, fetchedAt: now, acceptingOlder: true)
                        tellRowsChanged(source, ids)
                        for sibling in siblings {
                            try sibling.rebaseChanges(of: source, on: cleared)
                            for record in cleared { sibling.takeSaved(record, id: record.id, of: source) }
                        }
                    }
                } catch {
                    // The references stay; the next deletion seen, or the next open, tries again.
                }
            }
        }
    }

    private static let cleanupSlice = 200

    /// Server records known gone: the cached server records referring to
    /// them are asked for again (gathered, as gets' refreshes are), so the
    /// cache holds what the server made of them by its rules (deleted or
    /// cleared), transitively, instead of a reference to a record gone.
    /// The server's word stands: a referrer it still holds as it was keeps
    /// its reference, and reads through it say the target was deleted.
    /// Referrers with unsaved changes are left to their save.
    private func refreshServerReferrers(to ids: [String], of entity: Entity) {
        for inverse in model.inverses(of: entity) where !inverse.crossesStores && !inverse.source.isLocal {
            let source = inverse.source
            for start in stride(from: 0, to: ids.count, by: Self.cleanupSlice) {
                let slice = ids[start..<min(ids.count, start + Self.cleanupSlice)]
                let refers = Predicate.comparison(Comparison(attribute: inverse.attribute, operator: .oneOf, options: [],
                                                             values: slice.map { referenceValue(of: source, to: entity, id: $0) }))
                guard let referrers = try? store(for: source).idList(source, where: refers, sort: nil) else { continue }
                let objects = uniqueObjects(source, (0..<referrers.count).map { referrers[$0] })
                for object in objects where !object.hasChanges { scheduleRefresh(object, evenIfFresh: true) }
            }
        }
    }

    /// Unsaved updates of records a clean-up changed now apply to the new
    /// version: the clean-up is not another writer to conflict with.
    private func rebaseChanges(of entity: Entity, on records: [Record]) throws {
        let versions = Dictionary(records.map { (ExactString($0.id), $0.values[entity.versionIndex]) }, uniquingKeysWith: { $1 })
        for object in objectsInMemory(entity, records.map(\.id)) {
            try object.state.withLock { state in
                guard var pending = state.pending, pending.kind == .update,
                      case .integer(let version)? = versions[ExactString(object.id)] else { return }
                pending.baseVersion = version
                pending.sequence = try store(for: entity).recordChange(outboxOwner, entity, id: object.id, pending)
                state.pending = pending
            }
        }
    }

    /// At open, on the worker: references from local stores whose targets
    /// were deleted while the store was not attached. A target in a local
    /// store is gone if its table lacks it; a server record not cached is
    /// asked for, and the answer cleans up what the server no longer has.
    func checkCrossStoreReferences() {
        let references = model.entities.filter(\.isLocal).flatMap { source in
            source.attributes.indices.compactMap { index -> (Entity, Int, Entity)? in
                // Within a local store too: a clean-up cut short left them.
                guard let target = model.target(of: source.attributes[index]),
                      target.storeIndex != source.storeIndex || target.isLocal else { return nil }
                return (source, index, target)
            }
        }
        guard !references.isEmpty else { return }
        worker.async { [self] in
            for (source, index, target) in references {
                guard !isClosed,
                      let values = try? store(for: source).distinctValues(source, attribute: index) else { continue }
                let ids = values.compactMap { try? referencedID(.text($0), source.attributes[index], of: source, to: target) }
                guard let held = try? store(for: target).rows(target, ids: ids) else { continue }
                let missing = ids.filter { held[ExactString($0)] == nil }
                guard !missing.isEmpty else { continue }
                if target.isLocal {
                    cleanUpReferences(to: missing, of: target, withinStore: target.storeIndex == source.storeIndex)
                } else {
                    for object in uniqueObjects(target, missing) { scheduleRefresh(object) }
                }
            }
        }
    }
}
