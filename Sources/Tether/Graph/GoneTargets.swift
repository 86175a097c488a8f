/// Targets known gone, and what the references to them do: a save does not
/// write one, `related` says so, and a referrer back from a rollback follows
/// its gone target's delete rule at once.
extension Context {
    /// True if record `id` of `target` is known gone: deleted on the server
    /// (as some context here learned, none wanting it again; or, not in
    /// memory, as the store's tombstones remember) or, in a local store,
    /// absent from its file.
    func isKnownGone(_ target: Entity, id: String) -> Bool {
        // An object never loaded (a fault `related` just made) knows nothing yet.
        let known = ([self] + coordinator.others(than: self)).flatMap { $0.objectsInMemory(target, [id]) }
            .filter { $0.state.withLock { $0.loaded || $0.record != nil || $0.pending != nil || $0.deletedOnServer } }
        if !known.isEmpty {
            // Gone only if every context knows it deleted and none wants it again.
            return known.allSatisfy { $0.state.withLock { $0.deletedOnServer && ($0.pending == nil || $0.pending?.kind == .delete) } }
        }
        if target.isLocal {
            guard let held = try? store(for: target).rows(target, ids: [id]) else { return false }
            return held[ExactString(id)] == nil
        }
        return (try? store(for: target).isDeleted(target, id: id)) ?? false
    }

    /// A reference among `values` (of a record of `entity`) to a target
    /// known gone. A save must not write it (the clean-up that would follow
    /// its rule has already run). Nil when none is known gone.
    func goneTarget(in values: [Int: Value], of entity: Entity) -> (attribute: Attribute, target: Entity, id: String)? {
        for (index, value) in values.sorted(by: { $0.key < $1.key }) {
            let attribute = entity.attributes[index]
            guard let target = model.target(of: attribute),
                  let id = try? referencedID(value, attribute, of: entity, to: target) else { continue }
            if isKnownGone(target, id: id) { return (attribute, target, id) }
        }
        return nil
    }

    /// `object`, back from a rollback, may refer to a target whose deletion
    /// its own change kept its rule from (a pending delete is left to
    /// itself by clean-ups and by rules): that rule applies now, as an
    /// unsaved change, so nothing refers to a deleted record until the next
    /// open. Cascade deletes `object` (its own referrers following their
    /// rules); nullify and deny (which cannot refuse a deletion made) clear
    /// the reference. A rule that cannot apply (a required reference, a
    /// delete refused) leaves it, logged; reads through it say the target
    /// was deleted.
    func followRulesOfGoneTargets(_ object: ManagedObject) {
        let entity = object.entity
        guard object.changeKind != .delete, object.state.withLock({ !$0.discarded && !$0.deletedOnServer }) else { return }
        for (index, attribute) in entity.attributes.enumerated() {
            guard let target = model.target(of: attribute),
                  let inverse = model.inverses(of: target).first(where: { $0.source === entity && $0.attribute == index }),
                  let value = try? read(object, index, refresh: false),
                  let id = try? referencedID(value, attribute, of: entity, to: target),
                  isKnownGone(target, id: id) else { continue }
            do {
                if inverse.deleteRule == .cascade {
                    try delete(object)
                    return
                }
                try set(object, index, .null)
            } catch {
                Log.warning(.save, "\(entity.name)/\(object.id) still refers to \(target.name)/\(id), which was deleted: "
                            + "its rule (\(inverse.deleteRule)) could not apply: \(TetherError.wrap(error).message)")
            }
        }
    }
}
