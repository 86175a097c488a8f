/// Relationships: a to-one is a text attribute holding another record's id
/// (a `Reference`); its inverse, a to-many, is found by a fetch. Reading one
/// gives objects, faults until read; key paths read through them.
extension ManagedObject {
    /// The object the to-one relationship `key` refers to, a fault until
    /// read; nil when the reference is null.
    /// `.invalid` for a key that is no relationship, unknown ones too;
    /// `.notFound` when its target is known gone (deleted on the server, or
    /// absent from its local store): never an object for a deleted record.
    public func related(_ key: String) throws -> ManagedObject? {
        guard entity.attributeIndex(named: key) != nil else {
            throw TetherError(.invalid, "\(entity.name) has no key \(key.debugDescription), so no relationship of that name")
        }
        guard let target = try context.related(self, key, refresh: false) else { return nil }
        if context.isKnownGone(target.entity, id: target.id) {
            throw TetherError(.notFound, "\(entity.name)/\(id).\(key) refers to \(target.entity.name)/\(target.id), which was deleted")
        }
        return target
    }
}

extension Context {
    func related(_ object: ManagedObject, _ key: String, refresh: Bool) throws -> ManagedObject? {
        let entity = object.entity
        guard let index = entity.attributeIndex(named: key) else {
            throw TetherError(.notFound, "\(entity.name) has no key \(key.debugDescription)")
        }
        let attribute = entity.attributes[index]
        guard let target = model.target(of: attribute) else {
            if let field = entity.spec.fields.first(where: { $0.name.hasSameBytes(as: key) }), let reference = field.reference {
                throw TetherError(.notFound, "\(entity.name).\(key) refers to \(reference.target), which is in no store attached to this context")
            }
            throw TetherError(.invalid, "\(entity.name).\(key) is not a relationship")
        }
        guard let id = try referencedID(read(object, index, refresh: refresh), attribute, of: entity, to: target) else { return nil }
        return uniqueObjects(target, [id])[0]
    }

    /// A key: an attribute's name, else a path through to-one relationships.
    func read(_ object: ManagedObject, key: String, refresh: Bool) throws -> Value {
        if let index = object.entity.attributeIndex(named: key) { return try read(object, index, refresh: refresh) }
        return try read(object, path: key, refresh: refresh)
    }

    /// "Client.Owner": each key but the last a to-one relationship; null
    /// when a reference on the way is null.
    func read(_ object: ManagedObject, path: String, refresh: Bool) throws -> Value {
        var keys = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let last = keys.removeLast()
        guard !keys.isEmpty else { throw TetherError(.notFound, "\(object.entity.name) has no key \(path.debugDescription)") }
        var current = object
        for key in keys {
            guard let next = try related(current, key, refresh: refresh) else { return .null }
            current = next
        }
        guard let index = current.entity.attributeIndex(named: last) else {
            throw TetherError(.notFound, "\(current.entity.name) has no key \(last.debugDescription) (in \(path.debugDescription))")
        }
        return try read(current, index, refresh: refresh)
    }

    /// The to-many relationship `name` of `owner`'s entity.
    func inverse(of owner: ManagedObject, named name: String) throws -> Inverse {
        guard owner.context === self else { throw TetherError(.invalid, "the owner belongs to another context") }
        guard let inverse = model.inverses(of: owner.entity).first(where: { $0.name == name }) else {
            throw TetherError(.notFound, "\(owner.entity.name) has no to-many relationship \(name.debugDescription)")
        }
        return inverse
    }

    /// Records of `inverse.source` whose reference names `target`.
    func refers(_ inverse: Inverse, to target: ManagedObject) -> Predicate {
        .comparison(Comparison(attribute: inverse.attribute, operator: .equal, options: [],
                               values: [referenceValue(of: inverse.source, to: target.entity, id: target.id)]))
    }

    /// The objects referring to `target` through `inverse`, unsaved changes counted.
    func referrers(_ inverse: Inverse, of target: ManagedObject) throws -> [ManagedObject] {
        let refers = refers(inverse, to: target)
        let stored = try store(for: inverse.source).idList(inverse.source, where: refers, sort: nil)
        let ids = PendingResults(entity: inverse.source, rows: pendingRows(inverse.source), predicate: refers, sort: [])
            .ids(stored: (0..<stored.count).map { stored[$0] }, offset: 0, limit: 0, inServerOrder: true) { _ in nil }
        return uniqueObjects(inverse.source, ids)
    }

    /// What deleting `target` does to the records referring to it, as each
    /// inverse's delete rule says, worked out before anything changes: first
    /// every record the cascades take along, then the rules of the referrers
    /// outside them (a deny anywhere refuses the whole delete; a referrer
    /// the delete takes along refuses nothing, whatever order the rules are
    /// visited in).
    func deletePlan(_ target: ManagedObject) throws -> (nullify: [(ManagedObject, Int)], delete: [ManagedObject]) {
        var delete: [ManagedObject] = []
        var taken: Set<ObjectIdentifier> = [ObjectIdentifier(target)]
        var referring: [(inverse: Inverse, of: ManagedObject, sources: [ManagedObject])] = []
        var queue = [target]
        while let next = queue.popLast() {
            for inverse in model.inverses(of: next.entity) {
                let sources = try referrers(inverse, of: next)
                guard !sources.isEmpty else { continue }
                referring.append((inverse, next, sources))
                guard inverse.deleteRule == .cascade else { continue }
                let fresh = sources.filter { taken.insert(ObjectIdentifier($0)).inserted }
                if !fresh.isEmpty, !inverse.source.operations.contains(.delete) {
                    throw TetherError(.notAllowed, "\(next.entity.name)/\(next.id) cannot be deleted: \(fresh.count) "
                                      + "\(inverse.source.name) refer to it, and the server does not allow deleting them")
                }
                delete += fresh
                queue += fresh
            }
        }
        var nullify: [(ManagedObject, Int)] = []
        for (inverse, next, sources) in referring where inverse.deleteRule != .cascade {
            let outside = sources.filter { !taken.contains(ObjectIdentifier($0)) }
            guard !outside.isEmpty else { continue }
            guard inverse.deleteRule == .nullify else {
                throw TetherError(.notAllowed, "\(next.entity.name)/\(next.id) cannot be deleted: \(outside.count) "
                                  + "\(inverse.source.name) refer to it (delete rule deny)")
            }
            guard inverse.source.operations.contains(.update) else {
                throw TetherError(.notAllowed, "\(next.entity.name)/\(next.id) cannot be deleted: \(outside.count) "
                                  + "\(inverse.source.name) refer to it, and the server does not allow updating them")
            }
            nullify += outside.map { ($0, inverse.attribute) }
        }
        return (nullify, delete)
    }
}
