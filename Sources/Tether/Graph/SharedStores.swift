/// Several processes on one store (`Store/Claims.swift`): each context's
/// unsaved changes are its process's own while the claim holds; the changes
/// a context of the same name left (its process died, or it closed) are
/// taken over at the next open or save, each by one context only.
extension Context {
    /// A context named `name`'s claims on these stores: the main store
    /// decides its outbox owner (the name itself, or a guest owner when
    /// another live process holds it); the local stores take the same one.
    static func claim(_ stores: [Store], name: String, exclusive: Bool) throws -> [Store.Claim] {
        var claims = [try stores[0].claimOwner(name: name, exclusive: exclusive)]
        do {
            for store in stores.dropFirst() {
                claims.append(try store.claimOwner(name: name, exclusive: exclusive, owner: claims[0].owner))
            }
        } catch {
            for (store, claim) in zip(stores, claims) { try? store.release(claim) }
            throw error
        }
        return claims
    }

    /// At close: this context's claims end (its unsaved rows stay, for the
    /// next context of its name). Only its own: a context of its name
    /// opened since holds a claim of its own.
    func releaseClaims() {
        for (store, claim) in zip(stores, claims) {
            do {
                try store.release(claim)
            } catch {
                Log.warning(.store, "context \(name.debugDescription): its claim on the store could not be ended (\(error)); "
                                    + "other processes take its unsaved changes over once this process has ended")
            }
        }
    }

    /// Takes over the unsaved changes of ended claims on this context's
    /// name: each becomes this context's, as if made here, unless an object
    /// has a change here already (then the orphan's waits for that one's
    /// save, and comes after it). On the worker (a save's start), or at open.
    func adoptOrphanedChanges() throws {
        for (storeIndex, store) in stores.enumerated() {
            let orphans = try store.orphanedClaims(name: name, except: outboxOwner)
            guard !orphans.isEmpty else { continue }
            let entities = model.entities.filter { $0.storeIndex == storeIndex }
            var adopted = 0
            for orphan in orphans {
                for row in try store.pendingChanges(orphan.owner, entities) {
                    if row.onlyAbsent {
                        if try store.adopt(row.entity, id: row.id, from: orphan, into: outboxOwner) != nil { adopted += 1 }
                        continue
                    }
                    if try adopt(row, from: orphan, store: store) { adopted += 1 }
                }
            }
            if adopted > 0 {
                Log.info(.context, "context \(name.debugDescription) took over \(adopted) unsaved change\(adopted == 1 ? "" : "s") "
                                   + "of a context of its name that ended (in process \(orphans.map { String($0.holder.pid) }.joined(separator: ", ")))")
            }
        }
    }

    /// One orphaned change, under its object's lock (an edit here either
    /// comes first, and the orphan's waits, or comes after, on top of it).
    private func adopt(_ row: Store.OutboxRow, from orphan: Store.Claim, store: Store) throws -> Bool {
        let object = uniqueObjects(row.entity, [row.id])[0]
        let observers = try object.state.withLock { state -> [KeyObserver]? in
            // The row as moved, not as first read: its process may have edited it since (a close and a reopen).
            guard state.pending == nil, let moved = try store.adopt(row.entity, id: row.id, from: orphan, into: outboxOwner)
            else { return nil }
            let before = state.observedValues
            state.pending = moved.change
            return state.observers(changedSince: before)
        }
        guard let observers else { return false }
        graph.withLock { $0.changed[ObjectIdentifier(object)] = object }
        for observer in observers { observer.notify() }
        tellRowsChanged(row.entity, [row.id])
        return true
    }
}
