/// A save's rounds of writes: each change as a record write, sent in one
/// batch, its answers taken a run at a time; what a merge policy writes
/// again goes in the next round.
extension SaveTask {
    /// The values, by attribute index, of the record `write` makes of
    /// `committed` (nil: none, as for an insert); the version left out.
    static func record(made write: RecordWrite, over committed: Record?, _ entity: Entity) -> [Int: Value] {
        var values: [Int: Value] = [:]
        if write.kind != .create && write.kind != .replace, let committed {
            for (index, value) in committed.values.enumerated() where index != entity.versionIndex { values[index] = value }
        }
        values[entity.idIndex] = .text(write.id)
        for (name, json) in write.fields {
            guard let index = entity.attributeIndex(named: name) else { continue }
            values[index] = Value(json: json, type: entity.attributes[index].type)
        }
        return values
    }

    /// The write that carries `change` the first time.
    static func write(for change: PendingChange, of object: ManagedObject) -> RecordWrite {
        let spec = object.entity.spec
        switch change.kind {
        case .insert:
            return RecordWrite(spec: spec, id: object.id, kind: .create, fields: fields(change.values, object.entity))
        case .update:
            return RecordWrite(spec: spec, id: object.id, kind: .patch, fields: fields(change.values, object.entity),
                               ifVersion: change.baseVersion)
        case .delete:
            return RecordWrite(spec: spec, id: object.id, kind: .delete, ifVersion: change.baseVersion)
        }
    }

    /// Values as record fields by name, in model order, without id and version.
    static func fields(_ values: [Int: Value], _ entity: Entity) -> RecordFields {
        values.keys.sorted().filter { $0 != entity.idIndex && $0 != entity.versionIndex }
            .map { (entity.attributes[$0].name, values[$0]!.json) }
    }

    /// One round's writes as their answers come: settled a run at a time on
    /// the worker (while the next run is on the wire); the round ends when
    /// every write has its outcome. Touched on the worker only.
    final class Round: @unchecked Sendable {
        let items: [Item]
        let number: Int
        var tally: Tally
        var taken = 0
        var again: [Item] = []

        init(_ items: [Item], number: Int, _ tally: Tally) {
            self.items = items
            self.number = number
            self.tally = tally
        }
    }

    func send(_ items: [Item], round number: Int, _ tally: Tally) {
        guard isRunning else { return }  // cancelled: nothing more is sent
        // The record each write makes (the committed row it applies to, with
        // what it carries), in the outbox before it goes: a later run finding
        // the server holding exactly that knows the write for its own.
        let writes: [(entity: Entity, id: String, values: [Int: Value])]
        do {
            writes = try items.filter { $0.write.kind != .delete }.map { item in
                let committed = try context.withCommittedRow(item.object) { $0.deletedOnServer ? nil : $0.record }
                return (item.object.entity, item.object.id, Self.record(made: item.write, over: committed, item.object.entity))
            }
            for (storeIndex, store) in context.stores.enumerated() {
                try store.noteSending(context.outboxOwner, writes.filter { $0.entity.storeIndex == storeIndex })
            }
        } catch {
            var tally = tally
            for item in items { tally.failures.append(SaveFailure(object: item.object, error: TetherError.wrap(error), conflict: nil)) }
            return finish(tally)
        }
        for (item, write) in zip(items.filter { $0.write.kind != .delete }, writes) {
            item.object.state.withLock { state in
                state.pending?.sentWrites.append(write.values)
                if let count = state.pending?.sentWrites.count, count > Store.sentWritesKept {
                    state.pending?.sentWrites.removeFirst(count - Store.sentWritesKept)
                }
            }
        }
        let round = Round(items, number: number, tally)
        let remote = context.connection.write(items.map(\.write)) { [self] outcomes in
            context.worker.async { [self] in takeAnswers(outcomes, of: round) }
        }
        lifecycle.sent(remote)
    }

    func tell(_ progress: SaveProgress) { lifecycle.tell(progress) }

    /// Takes a run of answers (even after a cancel: the server has them);
    /// at the round's end, sends what a merge policy writes again, or ends.
    func takeAnswers(_ outcomes: [WriteOutcome], of round: Round) {
        let items = round.items[round.taken..<min(round.items.count, round.taken + outcomes.count)]
        round.taken += items.count
        for (item, outcome) in zip(items, outcomes) {
            switch context.applyAnswer(item.object, sent: item.change, item.write, outcome,
                                  policy: round.number < Self.rounds ? policy : .report) {
            case .saved:
                round.tally.saved += 1
                round.tally.answered += 1
            case .discarded:
                round.tally.discarded += 1
                round.tally.answered += 1
            case .failed(let failure):
                round.tally.failures.append(failure)
                round.tally.answered += 1
            case .again(let change, let write):
                round.again.append(Item(object: item.object, change: change, write: write))
            }
        }
        tell(SaveProgress(answered: round.tally.answered, total: round.tally.total))
        guard round.taken == round.items.count else { return }
        var tally = round.tally
        if !round.again.isEmpty && isRunning { return send(round.again, round: round.number + 1, tally) }
        for item in round.again {
            tally.failures.append(SaveFailure(object: item.object, error: .cancelled, conflict: nil))
        }
        sendHeld(tally)
    }
}
