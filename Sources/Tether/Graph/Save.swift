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
    let lifecycle: TaskLifecycle<SaveResult, SaveProgress, Work, Never>
    /// Rounds of writes at most: a conflict a policy resolves is sent once more.
    static let rounds = 3

    /// While the save works.
    struct Work {
        /// Changes a delete rule made, each waiting for its target's delete:
        /// sent once the server has confirmed that.
        var held: [(item: Item, target: ManagedObject)] = []
    }

    /// One change as a round sends it.
    struct Item {
        let object: ManagedObject
        let change: PendingChange
        let write: RecordWrite
    }

    struct Tally {
        var saved = 0
        var discarded = 0
        var failures: [SaveFailure] = []
        var total = 0
        var answered = 0
    }

    init(context: Context, policy: MergePolicy) {
        self.context = context
        self.policy = policy
        lifecycle = TaskLifecycle(context: context, noun: "save")
    }

    public func start(progress: (@Sendable (SaveProgress) -> Void)? = nil,
                      _ callback: @escaping @Sendable (SaveResult) -> Void) throws {
        let started = try lifecycle.start(progress: progress, callback,
                                          cancelled: SaveResult(error: .cancelled, saved: 0, discarded: 0, failures: []), work: Work())
        if started { context.worker.async { [self] in begin() } }
    }

    /// Cancels; afterwards only the final cancelled callback can arrive.
    /// Answers already on their way are still settled.
    public func cancel() throws {
        try lifecycle.cancel()
    }

    var isRunning: Bool { lifecycle.isRunning }

    // MARK: steps (delete rules: SaveDeleteRules.swift; writes: SaveRounds.swift)

    /// On the worker: the delete rules surveyed, then the changes prepared.
    func begin() {
        // Changes a context of this name left in an ended process go with this save.
        do {
            try context.adoptOrphanedChanges()
        } catch {
            Log.warning(.save, "changes a context of this name left could not be taken over (\(error)); the next save tries again")
        }
        survey { [self] refused in context.worker.async { [self] in prepare(refused) } }
    }

    /// The changes gathered and checked (what cannot be sent is a failure
    /// now), inserts marked sent, then the first round of writes sent.
    func prepare(_ refused: [ObjectIdentifier: TetherError]) {
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
                try store.markSent(context.outboxOwner, unsent.filter { $0.0.storeIndex == storeIndex })
            }
        } catch {
            for item in items { tally.failures.append(SaveFailure(object: item.object, error: TetherError.wrap(error), conflict: nil)) }
            return finish(tally)
        }
        for item in items where item.change.kind == .insert {
            item.object.state.withLock { $0.pending?.sent = true }
        }
        let targets = waitingFor(items)
        lifecycle.withRunning { work in
            work.held = items.compactMap { item in targets[ObjectIdentifier(item.object)].map { (item, $0) } }
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

    /// The first required attribute an insert leaves without a value.
    static func missingRequired(_ change: PendingChange, of object: ManagedObject) -> Attribute? {
        guard change.kind == .insert else { return nil }  // an update cannot set one to null
        return object.entity.attributes.indices.first { index in
            let attribute = object.entity.attributes[index]
            return attribute.isRequired && !attribute.isID && !attribute.isVersion && (change.values[index] ?? .null) == .null
        }.map { object.entity.attributes[$0] }
    }

    func finish(_ tally: Tally) {
        let result = SaveResult(error: Self.error(tally), saved: tally.saved, discarded: tally.discarded, failures: tally.failures)
        // Else cancelled meanwhile: the cancellation is the final.
        guard lifecycle.finish(result) != nil else { return }
        Self.log(tally)
    }

    /// The outcome at INFO (counts only: a failure reaches the host anyway);
    /// each failure at DEBUG, with its
    /// record's id and the error (whose server text may quote a value).
    static func log(_ tally: Tally) {
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
    static func error(_ tally: Tally) -> TetherError? {
        guard let first = tally.failures.first(where: { $0.conflict != nil }) ?? tally.failures.first else { return nil }
        let unsaved = tally.failures.count
        let conflicts = tally.failures.filter { $0.conflict != nil }.count
        var message = "\(unsaved) of \(tally.total) changes not saved"
        if conflicts > 0 { message += " (\(conflicts) in conflict)" }
        message += "; first: \(first.object.entity.name)/\(first.object.id): \(first.error.message)"
        return TetherError(first.error.kind, message)
    }
}

extension Context {
    /// A save of every pending change; `policy` nil: the context's.
    public func makeSave(policy: MergePolicy? = nil) throws -> SaveTask {
        try checkOpen()
        return SaveTask(context: self, policy: policy ?? options.mergePolicy)
    }
}
