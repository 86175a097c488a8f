import Synchronization

/// What a save does when the server's record is not the version a change
/// was made against (a 412), or is gone while it was edited here.
public enum MergePolicy: Int, Sendable {
    /// Reports the conflict with both sides; the change stays pending.
    case report = 0
    /// The server's record is taken; the local change is dropped.
    case serverWins = 1
    /// The local object, every value, is written over the server's.
    case clientWins = 2
    /// Keys changed here are written over the server's; the rest are the server's.
    case mergeProperties = 3
}

/// A change the server refused because its record moved on.
public struct SaveConflict: Sendable {
    public let object: ManagedObject
    let sides: Sides

    struct Sides: Sendable {
        let localVersion: Int64?
        let serverValues: [Value]?
        let differingAttributes: [Int]
    }

    /// The version the local change was made against; nil for an insert.
    public var localVersion: Int64? { sides.localVersion }
    /// The server's record, one value per attribute; nil: it has none.
    public var serverValues: [Value]? { sides.serverValues }
    public var serverVersion: Int64? {
        if case .integer(let version)? = serverValues?[object.entity.versionIndex] { return version }
        return nil
    }
    /// Attributes (indexes) whose local value differs from the server's.
    public var differingAttributes: [Int] { sides.differingAttributes }
}

/// A change a save did not get confirmed; it stays pending.
public struct SaveFailure: Sendable {
    public let object: ManagedObject
    public let error: TetherError
    public let conflict: SaveConflict?
}

public struct SaveResult: Sendable {
    /// nil: every change was settled.
    public let error: TetherError?
    /// Changes the server confirmed.
    public let saved: Int
    /// Changes dropped for the server's record (`serverWins`).
    public let discarded: Int
    /// Changes still pending, and why.
    public let failures: [SaveFailure]
}

public struct SaveProgress: Sendable, Equatable {
    /// Changes with an answer from the server so far, of `total`.
    public let answered: Int
    public let total: Int
}

/// An asynchronous save of every pending change of a context: sent in the
/// order they were made, each settled as the server answers (the store
/// first, then the object), ending in exactly one final callback. A
/// cancelled save still settles what the server answered.
public final class SaveTask: Sendable {
    let context: Context
    let policy: MergePolicy
    private let machine = Lock(Machine())
    /// Rounds of writes at most: a conflict settled by a policy is sent once more.
    static let rounds = 3

    private struct Machine {
        enum State { case idle, running(remote: (any Cancellable)?), done }
        var state = State.idle
        var subscription: Delivery.SubscriptionID?
        var callback: (@Sendable (SaveResult) -> Void)?
        var progress: (@Sendable (SaveProgress) -> Void)?
        /// Changes a delete rule made, each waiting for its target's delete:
        /// sent once the server has confirmed that.
        var held: [(item: Item, target: ManagedObject)] = []
    }

    /// One change as a round sends it.
    private struct Item {
        let object: ManagedObject
        let change: PendingChange
        let write: RecordWrite
    }

    private struct Tally {
        var saved = 0
        var discarded = 0
        var failures: [SaveFailure] = []
        var total = 0
        var answered = 0
    }

    init(context: Context, policy: MergePolicy) {
        self.context = context
        self.policy = policy
        Live.tasks.add(1, ordering: .relaxed)
    }

    deinit { Live.tasks.subtract(1, ordering: .relaxed) }

    public func start(progress: (@Sendable (SaveProgress) -> Void)? = nil,
                      _ callback: @escaping @Sendable (SaveResult) -> Void) throws {
        try machine.withLock { machine in
            guard case .idle = machine.state else { throw TetherError(.misuse, "the save has already started") }
            machine.callback = callback
            machine.progress = progress
        }
        let id = try context.subscribe(
            cancel: { [self] id in try? cancel(id) },
            deliverCancellation: { [self] in deliver(SaveResult(error: .cancelled, saved: 0, discarded: 0, failures: [])) },
            finished: { [self] in machine.withLock { $0.callback = nil; $0.progress = nil } })
        let started = machine.withLock { machine -> Bool in
            machine.subscription = id
            guard case .idle = machine.state else { return false }
            machine.state = .running(remote: nil)
            return true
        }
        if started { context.worker.async { [self] in begin() } }
    }

    /// Cancels; afterwards only the final cancelled callback can arrive.
    /// Answers already on their way are still settled.
    public func cancel() throws {
        guard let id = machine.withLock({ $0.subscription }) else { throw TetherError(.closed, "the save has not started") }
        try cancel(id)
    }

    private func cancel(_ id: Delivery.SubscriptionID) throws {
        try context.delivery.cancel(id)
        let remote = machine.withLock { machine -> (any Cancellable)? in
            defer { machine.state = .done; machine.progress = nil }
            if case .running(let remote) = machine.state { return remote }
            return nil
        }
        remote?.cancel()
    }

    private func deliver(_ result: SaveResult) {
        let callback = machine.withLock { $0.callback }
        callback?(result)
    }

    private var isRunning: Bool {
        machine.withLock { if case .running = $0.state { return true } else { return false } }
    }

    // MARK: rounds

    private func begin() {
        survey { [self] refused in context.worker.async { [self] in prepare(refused) } }
    }

    /// Before deletes are sent: the records the server holds that refer to
    /// them (one filtered listing per inverse), stored, and the delete rules
    /// applied to those not cached before, so that deny refuses and cascade
    /// and nullify reach them. `done` gets the deletes refused (a deny, or
    /// the referrers not learned), by object, with why.
    private func survey(_ done: @escaping @Sendable ([ObjectIdentifier: TetherError]) -> Void) {
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

    private func ask(_ asks: ArraySlice<(inverse: Inverse, targets: [ManagedObject], filter: Filter)>, cursor: PageCursor?,
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
        let remote = context.connection.page(request) { [self] result in
            context.worker.async { [self] in
                var refused = refused
                var next: PageCursor?
                do {
                    let page = try result.get()
                    _ = try context.absorb(try page.decode(), of: inverse.source)
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
        let cancelledMeanwhile = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return true }
            machine.state = .running(remote: remote)
            return false
        }
        if cancelledMeanwhile { remote.cancel() }
    }

    private func prepare(_ refused: [ObjectIdentifier: TetherError]) {
        var tally = Tally()
        var items: [Item] = []
        for object in context.changedObjects {
            guard let change = object.state.withLock({ $0.pending }) else { continue }
            let entity = object.entity
            let needed: Operations = change.kind == .insert ? .insert : change.kind == .update ? .update : .delete
            guard entity.operations.contains(needed) else {
                tally.failures.append(SaveFailure(object: object, error: TetherError(
                    .notAllowed, "the server does not allow \(change.kind) on \(entity.name)"), conflict: nil))
                continue
            }
            // A reference to a target known gone is not written: its rule's
            // clean-up has run, and the server would keep it dangling.
            if change.kind != .delete, let gone = context.goneTarget(in: change.values, of: entity) {
                tally.failures.append(SaveFailure(object: object, error: TetherError(
                    .invalid, "\(entity.name)/\(object.id) not sent: its \(gone.attribute.name) refers to "
                        + "\(gone.target.name)/\(gone.id), which was deleted"), conflict: nil))
                continue
            }
            items.append(Item(object: object, change: change, write: Self.write(for: change, of: object)))
        }
        tally.total = items.count + tally.failures.count
        guard !items.isEmpty else { return finish(tally) }
        // An insert the server would refuse for a missing field stops the
        // save before anything is sent, naming it (the server's answer would
        // name one field of one record, and the rest would be sent).
        let missing = items.compactMap { item in Self.missingRequired(item.change, of: item.object).map { (item, $0) } }
        if let (first, _) = missing.first {
            for (item, attribute) in missing {
                tally.failures.append(SaveFailure(object: item.object, error: TetherError(
                    .invalid, "\(item.object.entity.name)/\(item.object.id) has no value for the required field "
                        + "\(attribute.name.debugDescription): nothing was sent"), conflict: nil))
            }
            for item in items where !missing.contains(where: { $0.0.object === item.object }) {
                tally.failures.append(SaveFailure(object: item.object, error: TetherError(
                    .invalid, "not sent: \(first.object.entity.name)/\(first.object.id) lacks a required field"), conflict: nil))
            }
            return finish(tally)
        }
        do {
            let unsent = items.filter { $0.change.kind == .insert && !$0.change.sent }.map { ($0.object.entity, $0.object.id) }
            for (storeIndex, store) in context.stores.enumerated() {
                try store.markSent(context.name, unsent.filter { $0.0.storeIndex == storeIndex })
            }
        } catch {
            for item in items { tally.failures.append(SaveFailure(object: item.object, error: TetherError.wrap(error), conflict: nil)) }
            return finish(tally)
        }
        for item in items where item.change.kind == .insert {
            item.object.state.withLock { $0.pending?.sent = true }
        }
        let targets = waitingFor(items)
        machine.withLock { machine in
            machine.held = items.compactMap { item in targets[ObjectIdentifier(item.object)].map { (item, $0) } }
        }
        for item in items {
            if let error = refused[ObjectIdentifier(item.object)] {
                tally.failures.append(SaveFailure(object: item.object, error: error, conflict: nil))
                tally.answered += 1
            }
        }
        let first = items.filter { targets[ObjectIdentifier($0.object)] == nil && refused[ObjectIdentifier($0.object)] == nil }
        guard !first.isEmpty else { return sendHeld(tally) }
        send(first, round: 1, tally)
    }

    /// The items a delete rule made (a cascade's delete, a nullify's
    /// clearing) whose target's delete is in this save: each with the
    /// target it waits for. Sent with the target, they would stay done
    /// on the server when its delete fails. Found from the committed
    /// references, so that changes restored from the outbox wait too.
    private func waitingFor(_ items: [Item]) -> [ObjectIdentifier: ManagedObject] {
        var deleted: [Int: [ExactString: ManagedObject]] = [:]
        for item in items where item.change.kind == .delete {
            deleted[item.object.entity.index, default: [:]][ExactString(item.object.id)] = item.object
        }
        guard !deleted.isEmpty else { return [:] }
        var waiting: [ObjectIdentifier: ManagedObject] = [:]
        for item in items {
            let entity = item.object.entity
            guard let committed = try? context.withCommittedRow(item.object, { $0.record }) else { continue }
            for index in entity.attributes.indices {
                guard let target = context.model.target(of: entity.attributes[index]),
                      item.change.kind == .delete || (item.change.values[index] == .null && committed.values[index] != .null),
                      let id = try? context.referencedID(committed.values[index], entity.attributes[index], of: entity, to: target),
                      let object = deleted[target.index]?[ExactString(id)], object !== item.object else { continue }
                waiting[ObjectIdentifier(item.object)] = object
                break
            }
        }
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
        return waiting
    }

    /// The writes sent so far are settled: the held changes whose target's
    /// delete the server confirmed go next; those whose target's delete
    /// was dropped are undone with it; the rest wait, reported.
    private func sendHeld(_ tally: Tally) {
        var tally = tally
        let held = machine.withLock { machine in
            defer { machine.held = [] }
            return machine.held
        }
        let confirmed = { (target: ManagedObject) in target.state.withLock { $0.pending == nil && $0.deletedOnServer } }
        let ready = held.filter { confirmed($0.target) }.map(\.item)
        let waiting = held.filter { !confirmed($0.target) }
        guard !isRunning || ready.isEmpty else {
            machine.withLock { $0.held = waiting }
            return send(ready, round: 1, tally)
        }
        guard isRunning else { return finish(tally) }
        for (item, target) in waiting {
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

    /// The first required attribute an insert leaves without a value.
    private static func missingRequired(_ change: PendingChange, of object: ManagedObject) -> Attribute? {
        guard change.kind == .insert else { return nil }  // an update cannot set one to null
        return object.entity.attributes.indices.first { index in
            let attribute = object.entity.attributes[index]
            return attribute.isRequired && !attribute.isID && !attribute.isVersion && (change.values[index] ?? .null) == .null
        }.map { object.entity.attributes[$0] }
    }

    /// The values, by attribute index, of the record `write` makes of
    /// `committed` (nil: none, as for an insert); the version left out.
    private static func record(made write: RecordWrite, over committed: Record?, _ entity: Entity) -> [Int: Value] {
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
    private final class Round: @unchecked Sendable {
        let items: [Item]
        let number: Int
        var tally: Tally
        var settled = 0
        var again: [Item] = []

        init(_ items: [Item], number: Int, _ tally: Tally) {
            self.items = items
            self.number = number
            self.tally = tally
        }
    }

    private func send(_ items: [Item], round number: Int, _ tally: Tally) {
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
                try store.noteSending(context.name, writes.filter { $0.entity.storeIndex == storeIndex })
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
            context.worker.async { [self] in settle(outcomes, of: round) }
        }
        let cancelledMeanwhile = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return true }
            machine.state = .running(remote: remote)
            return false
        }
        if cancelledMeanwhile { remote.cancel() }
    }

    private func tell(_ progress: SaveProgress) {
        let told = machine.withLock { machine -> (Delivery.SubscriptionID, @Sendable (SaveProgress) -> Void)? in
            guard case .running = machine.state, let id = machine.subscription, let callback = machine.progress else { return nil }
            return (id, callback)
        }
        guard let (id, callback) = told else { return }
        context.delivery.post(.update, to: id) { callback(progress) }
    }

    /// Settles a run of answers (even after a cancel: the server has them);
    /// at the round's end, sends what a merge policy writes again, or ends.
    private func settle(_ outcomes: [WriteOutcome], of round: Round) {
        let items = round.items[round.settled..<min(round.items.count, round.settled + outcomes.count)]
        round.settled += items.count
        for (item, outcome) in zip(items, outcomes) {
            switch context.settle(item.object, sent: item.change, item.write, outcome,
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
        guard round.settled == round.items.count else { return }
        var tally = round.tally
        if !round.again.isEmpty && isRunning { return send(round.again, round: round.number + 1, tally) }
        for item in round.again {
            tally.failures.append(SaveFailure(object: item.object, error: .cancelled, conflict: nil))
        }
        sendHeld(tally)
    }

    private func finish(_ tally: Tally) {
        let ended = machine.withLock { machine -> Bool in
            guard case .running = machine.state else { return false }
            machine.state = .done
            return true
        }
        guard ended, let id = machine.withLock({ $0.subscription }) else { return }
        Self.log(tally)
        let result = SaveResult(error: Self.error(tally), saved: tally.saved, discarded: tally.discarded, failures: tally.failures)
        context.delivery.post(.final, to: id) { [self] in deliver(result) }
    }

    /// The outcome at INFO (counts only: a failure reaches the host anyway);
    /// each failure at DEBUG, with its
    /// record's id and the error (whose server text may quote a value).
    private static func log(_ tally: Tally) {
        Log.info(.save, {
            let conflicts = tally.failures.filter { $0.conflict != nil }.count
            return "save of \(tally.total) changes: \(tally.saved) saved, \(tally.discarded) discarded, "
                + "\(tally.failures.count) not saved (\(conflicts) in conflict)"
        }())
        guard Log.isEnabled(.debug) else { return }
        for failure in tally.failures {
            Log.debug(.save, "not saved: \(failure.object.entity.name)/\(failure.object.id)"
                      + (failure.conflict != nil ? " (conflict)" : "") + ": \(failure.error.message)")
        }
    }

    /// The save's status: the conflicts first, as the failure a host most
    /// often acts on; otherwise the first failure's.
    private static func error(_ tally: Tally) -> TetherError? {
        guard let first = tally.failures.first(where: { $0.conflict != nil }) ?? tally.failures.first else { return nil }
        let unsaved = tally.failures.count
        let conflicts = tally.failures.filter { $0.conflict != nil }.count
        var message = "\(unsaved) of \(tally.total) changes not saved"
        if conflicts > 0 { message += " (\(conflicts) in conflict)" }
        message += "; first: \(first.object.entity.name)/\(first.object.id): \(first.error.message)"
        return TetherError(first.error.kind, message)
    }
}

// MARK: settling answers

enum Settled {
    case saved, discarded
    case failed(SaveFailure)
    /// A merge policy writes the change again, now as `change`.
    case again(PendingChange, RecordWrite)
}

extension Context {
    /// Applies one write's answer: to the store and the outbox in one
    /// transaction, then to the object. A change edited since it was sent
    /// stays pending, rebased on the server's new version.
    func settle(_ object: ManagedObject, sent: PendingChange, _ write: RecordWrite, _ outcome: WriteOutcome,
                policy: MergePolicy) -> Settled {
        let entity = object.entity
        do {
            switch outcome {
            case .written(let fields):
                try confirm(object, sent, server: Record(entity: entity, fields: fields))
                return .saved
            case .deleted:
                try confirm(object, sent, server: nil)
                return .saved
            case .failed(let error):
                return .failed(SaveFailure(object: object, error: error, conflict: nil))
            case .conflict(let fields):
                let current = try fields.map { try Record(entity: entity, fields: $0) }
                // The server holding what was sent means it was applied
                // (an answer lost, a save killed): confirmed, not sent twice.
                if write.kind != .delete, let current, Self.holds(current, write.fields, entity) {
                    try confirm(object, sent, server: current)
                    return .saved
                }
                // The committed row, read if it is not in memory (the edit
                // came from an earlier run): the policies build on it, and
                // without it every key not edited would seem null.
                try withCommittedRow(object) { _ in }
                // The server holding exactly the record an earlier write of
                // this change made holds our own write (a save killed, an
                // answer lost): the change is rebased on it and sent again,
                // not a conflict. A record changed by anyone since is not that.
                if let current, sent.sentWrites.contains(where: { Self.caused(current, by: $0, entity) }) {
                    let applied = PendingChange(kind: .update, values: [:], baseVersion: nil, revision: -1)
                    try confirm(object, applied, server: current)
                    guard let remaining = object.state.withLock({ $0.pending }) else { return .saved }
                    return .again(remaining, SaveTask.write(for: remaining, of: object))
                }
                return try resolve(object, sent, write, current: current, policy: policy)
            }
        } catch {
            return .failed(SaveFailure(object: object, error: TetherError.wrap(error), conflict: nil))
        }
    }

    /// Whether `record` is the one a write made (`made`: its values, by
    /// attribute index; a key missing is null), whatever its version.
    static func caused(_ record: Record, by made: [Int: Value], _ entity: Entity) -> Bool {
        entity.attributes.indices.allSatisfy { index in
            index == entity.versionIndex || index == entity.idIndex || record.values[index] == (made[index] ?? .null)
        }
    }

    /// Whether `record` has each of `fields` as sent.
    static func holds(_ record: Record, _ fields: RecordFields, _ entity: Entity) -> Bool {
        fields.allSatisfy { field in
            guard let index = entity.attributeIndex(named: field.key) else { return false }
            return record.values[index] == Value(json: field.value, type: entity.attributes[index].type)
        }
    }

    /// The server's answer taken: the record stored (nil: gone), the
    /// change dropped, or kept and rebased if edited since it was sent.
    private func confirm(_ object: ManagedObject, _ sent: PendingChange, server record: Record?) throws {
        let entity = object.entity
        let now = wallClockMilliseconds()
        let observers = try object.state.withLock { state -> [KeyObserver] in
            let before = state.observedValues
            var remaining: PendingChange?
            if var pending = state.pending, pending.revision != sent.revision {
                // Edited while on the wire: what is new stays, against the new version.
                switch (pending.kind, record) {
                case (.delete, _?): pending.baseVersion = Self.version(of: record, entity)
                case (.delete, nil): pending = PendingChange(kind: .delete, values: [:], baseVersion: nil, revision: pending.revision)
                case (_, _?): pending.kind = .update; pending.baseVersion = Self.version(of: record, entity)
                case (_, nil): pending.kind = .insert; pending.baseVersion = nil
                }
                remaining = pending
            }
            remaining?.sentWrites = []  // answered: settled
            try store(for: entity).settle(name, entity, id: object.id, server: record, fetchedAt: now, remaining: remaining)
            state.record = record
            state.loaded = true
            state.fetchedAt = now
            state.deletedOnServer = record == nil
            state.pending = remaining
            state.conflict = nil
            return state.observers(changedSince: before)
        }
        afterSettling(object, observers)
    }

    private static func version(of record: Record?, _ entity: Entity) -> Int64? {
        if case .integer(let version)? = record?.values[entity.versionIndex] { return version }
        return nil
    }

    /// A conflict, as `policy` settles it.
    private func resolve(_ object: ManagedObject, _ sent: PendingChange, _ write: RecordWrite, current: Record?,
                         policy: MergePolicy) throws -> Settled {
        let entity = object.entity
        let now = wallClockMilliseconds()
        var outcome = Settled.saved
        let observers = try object.state.withLock { state -> [KeyObserver] in
            let before = state.observedValues
            guard var pending = state.pending else { return [] }  // rolled back meanwhile
            // Edited while on the wire: the conflict is reported, the edit kept as it is.
            var policy = pending.revision == sent.revision ? policy : .report
            // The local object as it stood, for a policy that writes all of it.
            var local = state.record?.values ?? Array(repeating: .null, count: entity.attributes.count)
            for (index, value) in pending.values { local[index] = value }
            // A policy writing the local object must not write a reference
            // to a target gone (whose clean-up has run): reported instead.
            var gone: (attribute: Attribute, target: Entity, id: String)?
            if pending.kind != .delete, policy == .clientWins || policy == .mergeProperties {
                let written = policy == .clientWins || current == nil
                    ? Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) }) : pending.values
                gone = goneTarget(in: written, of: entity)
                if gone != nil { policy = .report }
            }
            let serverVersion = Self.version(of: current, entity)
            var remaining: PendingChange? = pending
            switch policy {
            case .report:
                let differing = entity.attributes.indices.filter { index in
                    index != entity.versionIndex && current?.values[index] != local[index]
                }
                let sides = SaveConflict.Sides(localVersion: sent.baseVersion, serverValues: current?.values,
                                               differingAttributes: differing)
                state.conflict = sides
                let conflict = SaveConflict(object: object, sides: sides)
                var message = current == nil ? "\(entity.name)/\(object.id) was deleted on the server"
                    : "\(entity.name)/\(object.id) changed on the server (version \(serverVersion ?? 0), edited here from \(sent.baseVersion.map(String.init) ?? "none"))"
                if let gone {
                    message += "; not written again: its \(gone.attribute.name) refers to \(gone.target.name)/\(gone.id), which was deleted"
                }
                outcome = .failed(SaveFailure(object: object, error: TetherError(.conflict, message), conflict: conflict))
            case .serverWins:
                remaining = nil
                outcome = .discarded
            case .clientWins, .mergeProperties:
                if pending.kind == .delete {
                    pending.baseVersion = serverVersion
                    if current == nil { remaining = nil } else {
                        outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: .delete, ifVersion: serverVersion))
                    }
                } else if current == nil {
                    // Gone on the server: made again from the local object.
                    pending = PendingChange(kind: .insert, values: Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) }),
                                            baseVersion: nil, revision: pending.revision, sequence: pending.sequence, sent: true)
                    outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: .create,
                                                         fields: SaveTask.fields(pending.values, entity)))
                } else {
                    pending.kind = .update
                    pending.baseVersion = serverVersion
                    let whole = policy == .clientWins
                    let values = whole ? Dictionary(uniqueKeysWithValues: local.enumerated().map { ($0, $1) }) : pending.values
                    outcome = .again(pending, RecordWrite(spec: entity.spec, id: object.id, kind: whole ? .replace : .patch,
                                                         fields: SaveTask.fields(values, entity), ifVersion: serverVersion))
                }
                if remaining != nil { remaining = pending }
            }
            if current == nil, remaining != nil {
                // Gone on the server, still wanted here: the last values the
                // server sent are kept, as a policy may make the record again.
                try store(for: entity).recordChange(name, entity, id: object.id, remaining!)
                state.deletedOnServer = true
            } else {
                remaining?.sentWrites = []  // answered: settled
                try store(for: entity).settle(name, entity, id: object.id, server: current, fetchedAt: now, remaining: remaining)
                state.record = current
                state.loaded = true
                state.fetchedAt = now
                state.deletedOnServer = current == nil
            }
            state.pending = remaining
            return state.observers(changedSince: before)
        }
        afterSettling(object, observers)
        return outcome
    }

    private func afterSettling(_ object: ManagedObject, _ observers: [KeyObserver]) {
        let (record, gone) = object.state.withLock { ($0.record, $0.deletedOnServer) }
        for sibling in coordinator.others(than: self) { sibling.takeSaved(gone ? nil : record, id: object.id, of: object.entity) }
        if object.state.withLock({ $0.pending == nil }) {
            _ = graph.withLock { $0.changed.removeValue(forKey: ObjectIdentifier(object)) }
            // Gone for good: references from other stores follow their delete rule.
            if gone {
                takeRuleChanges(of: object)  // settled: its rules' changes stand
                cleanUpReferences(to: [object.id], of: object.entity)
            }
        }
        for observer in observers { observer.notify() }
        tellLiveFetches(object.entity, [object.id])
    }
}

extension Context {
    /// A save of every pending change; `policy` nil: the context's.
    public func makeSave(policy: MergePolicy? = nil) throws -> SaveTask {
        try checkOpen()
        return SaveTask(context: self, policy: policy ?? options.mergePolicy)
    }
}
