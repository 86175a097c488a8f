import XCTest
@testable import Tether

/// Editing and saving, whatever the connection: run against Kinto and the
/// memory server.
enum SaveContract {
    /// Runs a save to its final callback.
    static func save(_ context: Context, _ policy: MergePolicy? = nil,
                     progress: (@Sendable (SaveProgress) -> Void)? = nil) throws -> SaveResult {
        let result = ConditionLock<[SaveResult]>([])
        try context.makeSave(policy: policy).start(progress: progress) { outcome in result.withLock { $0.append(outcome) } }
        return result.withLock(when: { !$0.isEmpty }, until: MonotonicTime.now().adding(milliseconds: 20_000)) { value, timedOut in
            XCTAssertFalse(timedOut, "no final callback")
            return value.first ?? SaveResult(error: TetherError(.internal, "no answer"), saved: 0, discarded: 0, failures: [])
        }
    }

    static func field(_ record: RecordFields?, _ key: String) -> JSON? { record?.first { $0.key == key }?.value }

    static func editSaveAndReopen(_ backend: Backend) throws {
        var context = try backend.open()
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i1")
        let version = try object.version()
        let told = ConditionLock(0)
        let observer = try object.makeObserver(key: "Title")
        try observer.activate { error in if error == nil { told.withLock { $0 += 1 } } }

        try object.set("Title", .text("edited"))
        XCTAssertEqual(try object.peek("Title"), .text("edited"), "peek shows the pending value")
        XCTAssertEqual(try object.committed(object.entity.attributeIndex(named: "Title")!), .text("item 1"))
        XCTAssertEqual(object.changeKind, .update)
        XCTAssertTrue(eventually { told.withLock { $0 } == 1 }, "an observer hears a local change")
        try object.set("Rank", .integer(1))  // the server's value: no change of that key
        XCTAssertEqual(object.changedAttributes.map { object.entity.attributes[$0].name }, ["Title"])
        XCTAssertEqual(try object.version(), version, "the version is the server's until it confirms")
        XCTAssertEqual(field(try backend.record("i1"), "Title"), .string("item 1"), "nothing sent before save")

        // A change is in the store as soon as it is made.
        try context.close()
        context = try backend.open()
        defer { try? context.close() }
        XCTAssertTrue(context.hasChanges)
        let reopened = try context.object(entity: "items", id: "i1")
        XCTAssertEqual(try reopened.peek("Title"), .text("edited"))
        XCTAssertEqual(reopened.changeKind, .update)

        let result = try save(context)
        XCTAssertNil(result.error)
        XCTAssertEqual(result.saved, 1)
        let server = try backend.record("i1")
        XCTAssertEqual(field(server, "Title"), .string("edited"))
        XCTAssertEqual(field(server, "Rank"), .integer(1), "an update sends only what changed")
        XCTAssertEqual(try reopened.version(), field(server, "last_modified")?.integerValue, "the server's new version")
        XCTAssertGreaterThan(try reopened.version(), version)
        XCTAssertNil(reopened.changeKind)
        XCTAssertFalse(context.hasChanges)
        XCTAssertEqual(try save(context).saved, 0, "nothing left to send")
    }

    static func insertAndDelete(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let made = try context.insert(entity: "items")
        XCTAssertEqual(made.id.count, 36, "a UUID made here")
        try made.set("Title", .text("made here"))
        try made.set("Rank", .integer(1000))
        XCTAssertEqual(try made.peek("Title"), .text("made here"))
        XCTAssertEqual(try made.peek("Rank"), .integer(1000))
        let named = try context.insert(entity: "items", id: "named")
        XCTAssertThrowsError(try context.insert(entity: "items", id: "named")) { XCTAssertEqual(($0 as? TetherError)?.kind, .conflict) }
        XCTAssertThrowsError(try context.insert(entity: "items", id: "i2")) { XCTAssertEqual(($0 as? TetherError)?.kind, .conflict) }
        try named.set("Title", .text("named"))
        let dropped = try context.insert(entity: "items")
        try dropped.delete()
        XCTAssertThrowsError(try dropped.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        let doomed = try context.object(entity: "items", id: "i2")
        try doomed.delete()
        XCTAssertEqual(doomed.changeKind, .delete)
        XCTAssertThrowsError(try doomed.set("Title", .text("x"))) { XCTAssertEqual(($0 as? TetherError)?.kind, .misuse) }
        XCTAssertEqual(context.changedObjects.map(\.id), [made.id, "named", "i2"], "in the order first changed")

        let result = try save(context)
        XCTAssertNil(result.error, "\(result.error?.message ?? "")")
        XCTAssertEqual(result.saved, 3)
        XCTAssertEqual(field(try backend.record(made.id), "Title"), .string("made here"))
        XCTAssertEqual(field(try backend.record(made.id), "Rank"), .integer(1000))
        XCTAssertEqual(field(try backend.record("named"), "Title"), .string("named"))
        XCTAssertNil(try backend.record(dropped.id), "an insert deleted before it was sent never reaches the server")
        XCTAssertNil(try backend.record("i2"))
        XCTAssertThrowsError(try doomed.peek("Title")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertNotNil(try made.version())
        XCTAssertFalse(context.hasChanges)
    }

    static func badEditsAreRefused(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        let uncached = try context.object(entity: "items", id: "i3")
        XCTAssertThrowsError(try uncached.set("Title", .text("x"))) { XCTAssertEqual(($0 as? TetherError)?.kind, .notCached) }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i3")
        func kind(_ body: () throws -> Void) -> TetherError.Kind? {
            do { try body(); return nil } catch { return (error as? TetherError)?.kind }
        }
        XCTAssertEqual(kind { try object.set("Title", .integer(3)) }, .type)
        XCTAssertEqual(kind { try object.set("Rank", .text("3")) }, .type)
        XCTAssertEqual(kind { try object.set("Rank", .real(3.5)) }, .type)
        XCTAssertEqual(kind { try object.set("Nope", .text("x")) }, .notFound)
        XCTAssertEqual(kind { try object.set("id", .text("other")) }, .invalid)
        XCTAssertEqual(kind { try object.set("last_modified", .integer(1)) }, .invalid)
        XCTAssertNil(object.changeKind, "a refused edit changes nothing")
        try object.set("Title", .null)
        XCTAssertEqual(try object.peek("Title"), .null)
        try object.rollback()
        XCTAssertEqual(try object.peek("Title"), .text("item 3"))
        XCTAssertFalse(context.hasChanges)
    }

    /// A 412: reported with both sides, kept; then each policy.
    static func conflictsAndPolicies(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "i5")
        let base = try object.version()
        try object.set("Title", .text("mine"))
        try backend.setTitle("i5", "theirs")

        let reported = try save(context)
        XCTAssertEqual(reported.error?.kind, .conflict)
        XCTAssertEqual(reported.failures.count, 1)
        let conflict = try XCTUnwrap(reported.failures.first?.conflict)
        XCTAssertTrue(conflict.object === object)
        XCTAssertEqual(conflict.localVersion, base)
        XCTAssertEqual(conflict.serverVersion, field(try backend.record("i5"), "last_modified")?.integerValue)
        XCTAssertEqual(conflict.serverValues?[object.entity.attributeIndex(named: "Title")!], .text("theirs"))
        XCTAssertEqual(conflict.differingAttributes.map { object.entity.attributes[$0].name }, ["Title"])
        XCTAssertEqual(try object.peek("Title"), .text("mine"), "the local change stays")
        XCTAssertEqual(object.changeKind, .update)
        XCTAssertEqual(field(try backend.record("i5"), "Title"), .string("theirs"))
        XCTAssertEqual(try save(context).error?.kind, .conflict, "reported again, not lost")
        XCTAssertEqual(object.conflict?.serverValues?[object.entity.attributeIndex(named: "Title")!], .text("theirs"),
                       "the object keeps its conflict until settled")

        let serverWins = try save(context, .serverWins)
        XCTAssertNil(serverWins.error)
        XCTAssertEqual(serverWins.discarded, 1)
        XCTAssertEqual(try object.peek("Title"), .text("theirs"))
        XCTAssertNil(object.changeKind)

        // Per property: a key changed only here is kept, the rest is the server's.
        let six = try context.object(entity: "items", id: "i6")
        try six.set("Rank", .integer(600))
        try backend.setTitle("i6", "theirs 6")
        XCTAssertNil(try save(context, .mergeProperties).error)
        XCTAssertEqual(field(try backend.record("i6"), "Rank"), .integer(600))
        XCTAssertEqual(field(try backend.record("i6"), "Title"), .string("theirs 6"))
        XCTAssertEqual(try six.peek("Title"), .text("theirs 6"))

        // Client wins: the whole local object.
        let seven = try context.object(entity: "items", id: "i7")
        try seven.set("Rank", .integer(700))
        try backend.setTitle("i7", "theirs 7")
        XCTAssertNil(try save(context, .clientWins).error)
        XCTAssertEqual(field(try backend.record("i7"), "Rank"), .integer(700))
        XCTAssertEqual(field(try backend.record("i7"), "Title"), .string("item 7"))

        // Deleted on the server while edited here: a conflict; merging makes it again.
        let eight = try context.object(entity: "items", id: "i8")
        try eight.set("Rank", .integer(800))
        try backend.deleteItem("i8")
        let gone = try save(context)
        XCTAssertEqual(gone.error?.kind, .conflict)
        XCTAssertNil(try XCTUnwrap(gone.failures.first?.conflict).serverValues)
        XCTAssertNil(try save(context, .mergeProperties).error)
        XCTAssertEqual(field(try backend.record("i8"), "Rank"), .integer(800))
        XCTAssertEqual(field(try backend.record("i8"), "Title"), .string("item 8"))
        XCTAssertFalse(context.hasChanges)
    }

    /// A conflict met by a later context than the edit's (the edit made,
    /// the program restarted, then the save): the object's row is not in
    /// memory then, and the conflict and the policies must still see it, not
    /// nulls: only the keys that differ are reported, and client-wins writes
    /// the row as it was, with the edit, not an object of nulls.
    static func conflictAfterReopen(_ backend: Backend) throws {
        var context = try backend.open()
        _ = try fetch(context, FetchRequest(entity: "items"))
        try context.object(entity: "items", id: "i9").set("Title", .text("mine 9"))
        try context.object(entity: "items", id: "i10").set("Title", .text("mine 10"))
        try context.close()
        try backend.setTitle("i9", "theirs 9")
        try backend.setTitle("i10", "theirs 10")

        context = try backend.open()
        defer { try? context.close() }
        let reported = try save(context)
        XCTAssertEqual(reported.error?.kind, .conflict)
        XCTAssertEqual(reported.failures.count, 2)
        for failure in reported.failures {
            let conflict = try XCTUnwrap(failure.conflict)
            XCTAssertEqual(conflict.differingAttributes.map { conflict.object.entity.attributes[$0].name }, ["Title"],
                           "\(conflict.object.id): only Title differs")
        }
        XCTAssertNil(try save(context, .clientWins).error)
        XCTAssertEqual(field(try backend.record("i9"), "Title"), .string("mine 9"))
        XCTAssertEqual(field(try backend.record("i9"), "Rank"), .integer(9), "the rest of the row, not a null")
        XCTAssertEqual(field(try backend.record("i10"), "Rank"), .integer(10))
    }

    /// A change the server already holds (its answer lost) is confirmed,
    /// not sent twice and not reported as a conflict.
    static func aChangeAlreadyAppliedIsConfirmed(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let made = try context.insert(entity: "items", id: "landed")
        try made.set("Title", .text("landed"))
        let object = try context.object(entity: "items", id: "i9")
        try object.set("Title", .text("nine"))
        // As if a save had sent them and died before hearing back.
        try backend.putItem("landed", #"{"Title": "landed"}"#)
        try backend.setTitle("i9", "nine")
        let result = try save(context)
        XCTAssertNil(result.error, result.error?.message ?? "")
        XCTAssertEqual(result.saved, 2)
        XCTAssertEqual(field(try backend.record("landed"), "Title"), .string("landed"))
        XCTAssertFalse(context.hasChanges)
    }

    /// More changes than one request carries, with progress.
    static func manyChangesWithProgress(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        var ids: [String] = []
        for rank in 0..<60 {
            let object = try context.insert(entity: "items")
            try object.set("Rank", .integer(Int64(10_000 + rank)))
            ids.append(object.id)
        }
        let told = ConditionLock<[SaveProgress]>([])
        let result = try save(context, progress: { progress in told.withLock { $0.append(progress) } })
        XCTAssertNil(result.error)
        XCTAssertEqual(result.saved, 60)
        for (rank, id) in ids.enumerated() {
            XCTAssertEqual(field(try backend.record(id), "Rank"), .integer(Int64(10_000 + rank)))
        }
        let answered = told.withLock { $0 }.map(\.answered)
        XCTAssertEqual(answered.last, 60)
        XCTAssertEqual(answered, answered.sorted())
    }

    static func cancelEndsOnceAndLosesNothing(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        for _ in 0..<30 { try context.insert(entity: "items").set("Title", .text("cancelled save")) }
        let finals = ConditionLock<[TetherError.Kind?]>([])
        let task = try context.makeSave()
        try task.start { result in finals.withLock { $0.append(result.error?.kind) } }
        // A quick server (memory, no latency) may finish the save first: then
        // the cancel is refused and the final is the save's own.
        var cancelled = true
        do { try task.cancel() } catch let error as TetherError where error.kind == .closed { cancelled = false }
        XCTAssertTrue(eventually { finals.withLock { $0 }.count == 1 })
        usleep(200_000)
        XCTAssertEqual(finals.withLock { $0 }, [cancelled ? .cancelled : nil], "exactly one final")
        // What the server took before the cancel is settled; the rest is pending.
        let result = try save(context)
        XCTAssertNil(result.error)
        XCTAssertFalse(context.hasChanges)
    }
}

extension SaveContract {
    /// An object that met a conflict does not outlive its context (it held
    /// itself through its conflict).
    static func aConflictedObjectGoesWithItsContext(_ backend: Backend) throws {
        let objectsBefore = Live.objects.load(ordering: .relaxed)
        let contextsBefore = Live.contexts.load(ordering: .relaxed)
        do {
            let context = try backend.open()
            _ = try fetch(context, FetchRequest(entity: "items"))
            try context.object(entity: "items", id: "i4").set("Title", .text("mine"))
            try backend.setTitle("i4", "theirs")
            XCTAssertEqual(try save(context).error?.kind, .conflict)
            try context.close()
        }
        XCTAssertTrue(eventually { Live.contexts.load(ordering: .relaxed) == contextsBefore },
                      "contexts: \(Live.contexts.load(ordering: .relaxed)), before \(contextsBefore)")
        XCTAssertEqual(Live.objects.load(ordering: .relaxed), objectsBefore)
    }
}

extension SaveContract {
    /// A value set to null is saved as null, among other changes (Kinto:
    /// the field removed, as its schema types it as text).
    static func nullsAreSaved(_ backend: Backend) throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        try context.object(entity: "items", id: "i10").set("Rank", .integer(-10))
        try context.object(entity: "items", id: "i11").set("Title", .null)
        try context.object(entity: "items", id: "i12").set("Rank", .integer(-12))
        let made = try context.insert(entity: "items")
        try made.set("Title", .null)
        try made.set("Rank", .integer(5))
        let result = try save(context)
        XCTAssertNil(result.error, result.error?.message ?? "")
        XCTAssertEqual(result.saved, 4)
        XCTAssertEqual(field(try backend.record("i11"), "Title") ?? .null, .null)
        XCTAssertEqual(field(try backend.record("i12"), "Rank"), .integer(-12))
        XCTAssertEqual(try context.object(entity: "items", id: "i11").peek("Title"), .null)
        XCTAssertEqual(field(try backend.record(made.id), "Rank"), .integer(5))
    }
}

final class KintoSaveTests: KintoTestCase {
    func testNullsAreSaved() throws { try SaveContract.nullsAreSaved(backend) }
    func testAConflictedObjectGoesWithItsContext() throws { try SaveContract.aConflictedObjectGoesWithItsContext(backend) }
    func testEditSaveAndReopen() throws { try SaveContract.editSaveAndReopen(backend) }
    func testInsertAndDelete() throws { try SaveContract.insertAndDelete(backend) }
    func testBadEditsAreRefused() throws { try SaveContract.badEditsAreRefused(backend) }
    func testConflictsAndPolicies() throws { try SaveContract.conflictsAndPolicies(backend) }
    func testConflictAfterReopen() throws { try SaveContract.conflictAfterReopen(backend) }
    func testAChangeAlreadyAppliedIsConfirmed() throws { try SaveContract.aChangeAlreadyAppliedIsConfirmed(backend) }
    func testManyChangesWithProgress() throws { try SaveContract.manyChangesWithProgress(backend) }
    func testCancelEndsOnceAndLosesNothing() throws { try SaveContract.cancelEndsOnceAndLosesNothing(backend) }
}

final class MemorySaveTests: MemoryTestCase {
    func testNullsAreSaved() throws { try SaveContract.nullsAreSaved(backend) }
    func testAConflictedObjectGoesWithItsContext() throws { try SaveContract.aConflictedObjectGoesWithItsContext(backend) }
    func testEditSaveAndReopen() throws { try SaveContract.editSaveAndReopen(backend) }
    func testInsertAndDelete() throws { try SaveContract.insertAndDelete(backend) }
    func testBadEditsAreRefused() throws { try SaveContract.badEditsAreRefused(backend) }
    func testConflictsAndPolicies() throws { try SaveContract.conflictsAndPolicies(backend) }
    func testConflictAfterReopen() throws { try SaveContract.conflictAfterReopen(backend) }
    func testAChangeAlreadyAppliedIsConfirmed() throws { try SaveContract.aChangeAlreadyAppliedIsConfirmed(backend) }
    func testManyChangesWithProgress() throws { try SaveContract.manyChangesWithProgress(backend) }
    func testCancelEndsOnceAndLosesNothing() throws { try SaveContract.cancelEndsOnceAndLosesNothing(backend) }

    /// Unreachable: every change stays pending, and the save says why.
    func testUnreachableServerKeepsEverything() throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        try context.object(entity: "items", id: "i1").set("Title", .text("offline edit"))
        backend.server.isReachable = false
        let result = try SaveContract.save(context)
        XCTAssertEqual(result.error?.kind, .network)
        XCTAssertEqual(result.failures.count, 1)
        XCTAssertTrue(context.hasChanges)
        backend.server.isReachable = true
        XCTAssertNil(try SaveContract.save(context).error)
        XCTAssertEqual(SaveContract.field(try backend.record("i1"), "Title"), .string("offline edit"))
    }

    /// A spec's allowed values (a JSON schema's enum) are checked on set,
    /// and kept with the model in the store.
    func testAllowedValuesAreChecked() throws {
        let collection = try JSON.parse(#"{"id": "tasks", "schema": {"properties": {"Status": {"type": "string", "enum": ["open", "done"]}, "Size": {"type": "integer", "enum": [1, 2, 3]}}}}"#)
        let spec = KintoConnection.spec(from: collection, bucket: "b", operations: .all)
        XCTAssertEqual(spec.fields.first { $0.name == "Status" }?.allowedValues, [.text("open"), .text("done")])
        XCTAssertEqual(spec.fields.first { $0.name == "Size" }?.allowedValues, [.integer(1), .integer(2), .integer(3)])
        let tasks = Spec(name: "tasks", route: "tasks", idField: "id", versionField: "last_modified", fields: spec.fields,
                         operations: .all)
        let server = MemoryServer(name: "enum-\(UUID().uuidString.prefix(8))", specs: [tasks], pageSize: 50)
        server.put("tasks", id: "t1", [("Status", .string("open")), ("Size", .integer(1))])
        for round in 0..<2 {  // the second time, the model comes from the store (offline)
            server.isReachable = round == 0
            let context = try Context.open(ContextOptions(storePath: directory + "/enum.sqlite"), connection: MemoryConnection(server))
            defer { try? context.close() }
            if round == 0 { _ = try fetch(context, FetchRequest(entity: "tasks")) }
            let task = try context.object(entity: "tasks", id: "t1")
            XCTAssertThrowsError(try task.set("Status", .text("closed"))) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
            XCTAssertThrowsError(try task.set("Size", .integer(4))) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
            try task.set("Status", .text("done"))
            try task.set("Size", .null)
            try task.rollback()
        }
    }

    /// An operation the spec does not allow is refused at the edit.
    func testOperationsTheSpecForbidsAreRefused() throws {
        let readOnly = Spec(name: "items", route: "items", idField: "id", versionField: "last_modified",
                            fields: MemoryBackend.itemsSpec.fields, operations: .fetch)
        let server = MemoryServer(name: "ro-\(UUID().uuidString.prefix(8))", specs: [readOnly], pageSize: 50)
        server.put("items", id: "r1", [("Title", .string("read only"))])
        let context = try Context.open(ContextOptions(storePath: directory + "/ro.sqlite"), connection: MemoryConnection(server))
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let object = try context.object(entity: "items", id: "r1")
        XCTAssertThrowsError(try object.set("Title", .text("x"))) { XCTAssertEqual(($0 as? TetherError)?.kind, .notAllowed) }
        XCTAssertThrowsError(try object.delete()) { XCTAssertEqual(($0 as? TetherError)?.kind, .notAllowed) }
        XCTAssertThrowsError(try context.insert(entity: "items")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notAllowed) }
    }
}

/// Unsaved changes count in fetches: pending inserts that match are in the
/// answer, pending deletes are not, pending updates are placed by their values.
final class PendingFetchTests: MemoryTestCase {
    private func ranks(_ context: Context, _ predicate: String? = nil, sort: String? = "Rank", limit: Int64 = 0,
                       offset: Int64 = 0, type: ResultType = .objects, batchSize: Int = 0,
                       policy: CachePolicy = .cacheOnly) throws -> [Int64] {
        var request = FetchRequest(entity: "items")
        request.predicate = predicate
        request.sort = sort
        request.limit = limit
        request.offset = offset
        request.resultType = type
        request.batchSize = batchSize
        request.policy = policy
        let results = try XCTUnwrap(fetch(context, request).last)
        XCTAssertNil(results.error)
        if type == .count { return [Int64(results.results.count)] }
        if type == .values {
            let column = try XCTUnwrap(results.results.column(named: "Rank"))
            return try (0..<results.results.count).map { index in
                guard case .integer(let rank) = try results.results.value(at: index, column: column) else { return -1 }
                return rank
            }
        }
        return try results.results.objects.map { object in
            guard case .integer(let rank) = try object.peek("Rank") else { return -1 }
            return rank
        }
    }

    func testPendingChangesShowInEveryKindOfAnswer() throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        try context.insert(entity: "items").set("Rank", .integer(5_000))      // matches "Rank >= 110", sorts last
        let low = try context.insert(entity: "items")
        try low.set("Rank", .integer(-1))                                     // does not match; sorts first
        try context.object(entity: "items", id: "i115").delete()
        try context.object(entity: "items", id: "i3").set("Rank", .integer(113))  // moves into the range
        try context.object(entity: "items", id: "i111").set("Rank", .integer(7))  // moves out of it
        let expected: [Int64] = [110, 112, 113, 113, 114, 116, 117, 118, 119, 5_000]
        for policy in [CachePolicy.cacheOnly, .serverOnly, .cacheThenServer] {
            XCTAssertEqual(try ranks(context, "Rank >= 110", policy: policy), expected, "\(policy)")
        }
        XCTAssertEqual(try ranks(context, "Rank >= 110", type: .values), expected)
        XCTAssertEqual(try ranks(context, "Rank >= 110", type: .values, batchSize: 3), expected)
        XCTAssertEqual(try ranks(context, "Rank >= 110", type: .ids), expected)
        XCTAssertEqual(try ranks(context, "Rank >= 110", batchSize: 4), expected)
        XCTAssertEqual(try ranks(context, "Rank >= 110", type: .count), [10])
        XCTAssertEqual(try ranks(context, "Rank >= 110", limit: 3, offset: 2), [113, 113, 114])
        XCTAssertEqual(try ranks(context, "Rank >= 110", limit: 3, offset: 8, type: .count), [2])
        XCTAssertEqual(try ranks(context, sort: "-Rank", limit: 2), [5_000, 119])
        XCTAssertEqual(try ranks(context, limit: 3), [-1, 0, 1])
        XCTAssertEqual(try ranks(context, type: .count), [Int64(itemCount) + 1])
        try context.rollback()
        XCTAssertEqual(try ranks(context, "Rank >= 110"), Array(110..<Int64(itemCount)))
    }

    func testALiveFetchHearsLocalChanges() throws {
        let context = try backend.open()
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        var request = FetchRequest(entity: "items")
        request.predicate = "Rank >= 118"
        request.sort = "Rank"
        request.live = true
        request.policy = .cacheOnly
        let answers = ConditionLock<[Int]>([])
        let task = try context.makeFetch(request)
        try task.start { result in answers.withLock { $0.append(result.results.count) } }
        XCTAssertTrue(eventually { answers.withLock { $0 } == [2] })
        try context.insert(entity: "items").set("Rank", .integer(200))
        XCTAssertTrue(eventually { answers.withLock { $0 }.last == 3 }, "\(answers.withLock { $0 })")
        try context.object(entity: "items", id: "i119").delete()
        XCTAssertTrue(eventually { answers.withLock { $0 }.last == 2 }, "\(answers.withLock { $0 })")
        try task.cancel()
    }
}

/// Several contexts on one store: siblings with their own objects and
/// changes; a save in one reaches the objects of the other.
final class SiblingContextTests: MemoryTestCase {
    func testSiblingsKeepTheirOwnChangesAndHearEachOthersSaves() throws {
        let main = try backend.open()
        defer { try? main.close() }
        _ = try fetch(main, FetchRequest(entity: "items"))
        var background: Context? = try main.openSibling(name: "import")
        let threads = Live.threads.load(ordering: .relaxed)
        XCTAssertThrowsError(try main.openSibling(name: "import")) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        XCTAssertEqual(Live.threads.load(ordering: .relaxed), threads, "a sibling refused leaves no thread running")
        XCTAssertThrowsError(try backend.open()) { XCTAssertEqual(($0 as? TetherError)?.kind, .busy, "one context per store file") }

        let shown = try main.object(entity: "items", id: "i1")
        let told = ConditionLock(0)
        try shown.makeObserver(key: "Title").activate { error in if error == nil { told.withLock { $0 += 1 } } }
        let there = try background!.localInstance(of: shown)
        XCTAssertFalse(there === shown, "one object per record per context")
        XCTAssertEqual(there.id, "i1")
        try there.set("Title", .text("imported"))
        XCTAssertEqual(try shown.peek("Title"), .text("item 1"), "unsaved changes are the context's own")
        XCTAssertFalse(main.hasChanges)
        XCTAssertTrue(background!.hasChanges)
        try main.object(entity: "items", id: "i2").set("Title", .text("main's"))

        // The sibling's save sends its change only, and main's object takes it.
        let result = try SaveContract.save(background!)
        XCTAssertNil(result.error)
        XCTAssertEqual(result.saved, 1)
        XCTAssertEqual(try shown.peek("Title"), .text("imported"))
        XCTAssertTrue(eventually { told.withLock { $0 } == 1 }, "main's observer is told")
        XCTAssertEqual(SaveContract.field(try backend.record("i2"), "Title"), .string("item 2"))
        XCTAssertTrue(main.hasChanges)

        // A sibling's unsaved changes wait for a sibling of that name.
        try there.set("Rank", .integer(-5))
        try background!.close()
        background = nil
        XCTAssertEqual(try main.object(entity: "items", id: "i1").peek("Rank"), .integer(1))
        let again = try main.openSibling(name: "import")
        XCTAssertEqual(try again.object(entity: "items", id: "i1").peek("Rank"), .integer(-5))
        XCTAssertNil(try SaveContract.save(again).error)
        try again.close()
        XCTAssertNil(try SaveContract.save(main).error, "main still works after its siblings close")
        XCTAssertEqual(SaveContract.field(try backend.record("i2"), "Title"), .string("main's"))
        XCTAssertEqual(SaveContract.field(try backend.record("i1"), "Rank"), .integer(-5))
    }

    func testTheStoreClosesWithTheLastContext() throws {
        let main = try backend.open()
        let sibling = try main.openSibling(name: "other")
        try main.close()
        _ = try fetch(sibling, FetchRequest(entity: "items"))
        XCTAssertEqual(try sibling.object(entity: "items", id: "i3").peek("Rank"), .integer(3), "the sibling still reads and fetches")
        XCTAssertThrowsError(try backend.open()) { XCTAssertEqual(($0 as? TetherError)?.kind, .busy) }
        try sibling.close()
        let reopened = try backend.open()
        try reopened.close()
    }
}
