/// A save's delete rules: before deletes are sent, the records the server
/// holds that refer to them are learned and the rules applied; the changes
/// a rule made wait for their target's delete to be confirmed.
extension SaveTask {
    /// Before deletes are sent: the records the server holds that refer to
    /// them (one filtered listing per inverse), stored, and the delete rules
    /// applied to those not cached before, so that deny refuses and cascade
    /// and nullify reach them. `done` gets the deletes refused (a deny, or
    /// the referrers not learned), by object, with why.
    func survey(_ done: @escaping @Sendable ([ObjectIdentifier: TetherError]) -> Void) {
        let deletes = context.changedObjects.filter { $0.changeKind == .delete && !$0.entity.isLocal }
        var asks: [(inverse: Inverse, targets: [ManagedObject], filter: Filter)] = []
        var entities: [Entity] = []
        for object in deletes where !entities.contains(where: { $0 === object.entity }) { entities.append(object.entity) }
        for entity in entities {
          for inverse in context.model.inverses(of: entity) where !inverse.source.isLocal && inverse.source.operations.contains(.fetch) {
            let targets = deletes.filter { $0.entity === entity }
            let attribute = inverse.source.attributes[inverse.attribute]
            let field = attribute.name
            let oneOf = Filter(field: field, .oneOf, targets.map { JSON.string($0.id) }, type: attribute.type)
            if targets.count > 1, context.connection.supports(oneOf) {
                asks.append((inverse, targets, oneOf))
            } else {
                for target in targets {
                    let equal = Filter(field: field, .equal, [.string(target.id)], type: attribute.type)
                    // A connection that cannot filter so: the rules see the cache only.
                    if context.connection.supports(equal) { asks.append((inverse, [target], equal)) }
                }
            }
          }
        }
        ask(asks[...], cursor: nil, refused: [:], done)
    }

    func ask(_ asks: ArraySlice<(inverse: Inverse, targets: [ManagedObject], filter: Filter)>, cursor: PageCursor?,
                     refused: [ObjectIdentifier: TetherError], _ done: @escaping @Sendable ([ObjectIdentifier: TetherError]) -> Void) {
        guard let (inverse, targets, filter) = asks.first, isRunning else {
            context.worker.async { [self] in
                var refused = refused
                for target in context.changedObjects where target.changeKind == .delete && refused[ObjectIdentifier(target)] == nil {
                    do { try context.applyRules(ofDeleting: target) } catch { refused[ObjectIdentifier(target)] = TetherError.wrap(error) }
                }
                done(refused)
            }
            return
        }
        var request = PageRequest(spec: inverse.source.spec)
        request.filters = [filter]
        request.cursor = cursor
        let askedAt = try? context.store(for: inverse.source).nextWrite()
        let remote = context.connection.page(request) { [self] result in
            context.worker.async { [self] in
                var refused = refused
                var next: PageCursor?
                do {
                    let page = try result.get()
                    _ = try context.absorb(try page.decode(), of: inverse.source, askedAt: askedAt)
                    next = page.next
                } catch {
                    let error = TetherError.wrap(error)
                    for target in targets {
                        refused[ObjectIdentifier(target)] = TetherError(error.kind, "not sent: the \(inverse.source.name) referring to "
                            + "\(target.entity.name)/\(target.id) could not be asked for, for its delete rule: \(error.message)")
                    }
                }
                ask(next == nil ? asks.dropFirst() : asks, cursor: next, refused: refused, done)
            }
        }
        lifecycle.sent(remote)
    }

    /// The items a delete rule made (a cascade's delete, a nullify's
    /// clearing) whose target's delete is in this save: each with the
    /// target it waits for. Sent with the target, they would stay done
    /// on the server when its delete fails. Found from the committed
    /// references, so that changes restored from the outbox wait too.
    func waitingFor(_ items: [Item]) -> [ObjectIdentifier: ManagedObject] {
        var deleted: [Int: [ExactString: ManagedObject]] = [:]
        for item in items where item.change.kind == .delete {
            deleted[item.object.entity.index, default: [:]][ExactString(item.object.id)] = item.object
        }
        guard !deleted.isEmpty else { return [:] }
        var targets: [ObjectIdentifier: [ManagedObject]] = [:]
        for item in items {
            let entity = item.object.entity
            guard let committed = try? context.withCommittedRow(item.object, { $0.record }) else { continue }
            for index in entity.attributes.indices {
                guard let target = context.model.target(of: entity.attributes[index]),
                      item.change.kind == .delete || (item.change.values[index] == .null && committed.values[index] != .null),
                      let id = try? context.referencedID(committed.values[index], entity.attributes[index], of: entity, to: target),
                      let object = deleted[target.index]?[ExactString(id)], object !== item.object else { continue }
                targets[ObjectIdentifier(item.object), default: []].append(object)
            }
        }
        var waiting = targets.compactMapValues(\.first)
        // Deletes referring to each other in a cycle would each wait for
        // the next for ever: one of the cycle goes first, the delete asked
        // for when it is one (no rule made it), and the rest follow it.
        let madeByRules = context.objectsChangedByRules()
        for item in items {
            var chain: [ObjectIdentifier] = []
            var current = ObjectIdentifier(item.object)
            while let next = waiting[current], !chain.contains(current) {
                chain.append(current)
                current = ObjectIdentifier(next)
            }
            guard let start = chain.firstIndex(of: current) else { continue }
            let cycle = chain[start...]
            waiting[cycle.first { !madeByRules.contains($0) } ?? current] = nil
        }
        // A change following the rules of several targets waits for the one
        // whose delete goes last: the clean-ups of the others have run by
        // then (sent after one of them only, it met the next one's clean-up
        // of the record it clears as a conflict).
        func depth(_ target: ManagedObject, from start: ObjectIdentifier) -> Int? {
            var count = 0
            var current = ObjectIdentifier(target)
            while current != start {
                guard let next = waiting[current] else { return count }
                count += 1
                current = ObjectIdentifier(next)
                if count > waiting.count { return nil }
            }
            return nil  // waiting for it would close a cycle
        }
        for item in items {
            let id = ObjectIdentifier(item.object)
            guard waiting[id] != nil, let candidates = targets[id], candidates.count > 1 else { continue }
            let ranked = candidates.compactMap { target in depth(target, from: id).map { (target, $0) } }
            if let last = ranked.max(by: { $0.1 < $1.1 }) { waiting[id] = last.0 }
        }
        return waiting
    }

    /// The writes sent so far are settled: the held changes whose target's
    /// delete the server confirmed go next; those whose target's delete
    /// was dropped are undone with it; the rest wait, reported.
    func sendHeld(_ tally: Tally) {
        var tally = tally
        let held = lifecycle.withRunning { work -> [(item: Item, target: ManagedObject)] in
            defer { work.held = [] }
            return work.held
        } ?? []
        let confirmed = { (target: ManagedObject) in target.state.withLock { $0.pending == nil && $0.deletedOnServer } }
        let ready = held.filter { confirmed($0.target) }.map(\.item)
        let waiting = held.filter { !confirmed($0.target) }
        guard !isRunning || ready.isEmpty else {
            lifecycle.withRunning { $0.held = waiting }
            return send(ready, round: 1, tally)
        }
        guard isRunning else { return finish(tally) }
        // A target's own held change first: a change waiting for a cascade's
        // delete sees that delete already dropped, and its rules undone.
        let heldTarget = Dictionary(held.map { (ObjectIdentifier($0.item.object), $0.target) }, uniquingKeysWith: { first, _ in first })
        func hops(_ object: ManagedObject) -> Int {
            var count = 0
            var current = object
            while let next = heldTarget[ObjectIdentifier(current)], count <= held.count {
                count += 1
                current = next
            }
            return count
        }
        for (item, target) in waiting.sorted(by: { hops($0.item.object) < hops($1.item.object) }) {
            tally.answered += 1
            if target.changeKind != .delete && !target.state.withLock({ $0.deletedOnServer }) {
                // The target's delete was dropped (server wins): so are its rules.
                context.undoRules(context.takeRuleChanges(of: target))
                if !item.object.hasChanges || item.object.state.withLock({ $0.pending?.revision }) != item.change.revision {
                    tally.discarded += 1
                    continue
                }
            }
            let failure = tally.failures.first { $0.object === target }
            let kind = failure?.error.kind == .conflict ? TetherError.Kind.conflict : failure?.error.kind ?? .cancelled
            tally.failures.append(SaveFailure(object: item.object, error: TetherError(
                kind, "not sent: it follows the delete rule of \(target.entity.name)/\(target.id), whose delete was not saved"),
                conflict: nil))
        }
        finish(tally)
    }
}
