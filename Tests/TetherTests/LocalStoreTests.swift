import XCTest
@testable import Tether

/// Local-only stores beside the server's: entities a host defines, saved to
/// their own file, with relationships to server records by object URI that
/// are cleaned up when the target goes. Run against Kinto and the memory server.
enum LocalStoreContract {
    static let specs = """
        {"notes": {"type": "object", "required": ["Text"], "properties": {
            "Text": {"type": "string", "x-tether-code": 10},
            "Pinned": {"type": "boolean"},
            "Item": {"type": "string", "x-tether-to": "items", "x-tether-inverse": "notes"}}},
         "tags": {"type": "object", "properties": {
            "Label": {"type": "string"},
            "Item": {"type": "string", "x-tether-to": "items", "x-tether-inverse": "tags", "x-tether-delete": "cascade"},
            "Note": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "tags"}}}}
        """

    static func local(_ backend: Backend) -> LocalStoreOptions {
        LocalStoreOptions(configuration: "private", path: backend.storePath + ".private", specs: specs)
    }

    static func open(_ backend: Backend, attached: Bool = true) throws -> Context {
        try backend.open(localStores: attached ? [local(backend)] : [])
    }

    static func note(_ context: Context, _ text: String, on item: String?) throws -> ManagedObject {
        let note = try context.insert(entity: "notes")
        try note.set("Text", .text(text))
        if let item { try note.setRelated("Item", context.object(entity: "items", id: item)) }
        return note
    }

    /// The model, editing, saving to the local file and to the server in one
    /// save, reading across stores, and reopening.
    static func editSaveAndReopen(_ backend: Backend) throws {
        var context = try open(backend)
        _ = try fetch(context, FetchRequest(entity: "items"))
        let notes = try XCTUnwrap(context.model.entity(named: "notes"))
        let items = try XCTUnwrap(context.model.entity(named: "items"))
        XCTAssertEqual(notes.configuration, "private")
        XCTAssertTrue(notes.isLocal)
        XCTAssertEqual(items.configuration, "")
        XCTAssertEqual(notes.attributes[notes.attributeIndex(named: "Text")!].code, 10)
        let inverses = context.model.inverses(of: items)
        XCTAssertEqual(inverses.map(\.name).sorted(), ["notes", "tags"])
        XCTAssertTrue(inverses.allSatisfy(\.crossesStores))
        XCTAssertFalse(context.model.inverses(of: notes).contains(where: \.crossesStores), "tags and notes share a store")

        let note = try Self.note(context, "check the title", on: "i1")
        XCTAssertEqual(try note.peek("Item"), .text("tether://server/items/i1"), "a reference across stores holds a URI")
        XCTAssertEqual(try note.related("Item")?.id, "i1")
        XCTAssertEqual(try note.peek("Item.Title"), .text("item 1"))
        let tag = try context.insert(entity: "tags")
        try tag.set("Label", .text("todo"))
        try tag.setRelated("Note", note)
        XCTAssertEqual(try tag.peek("Note"), .text(note.id), "a reference within a store holds an id")
        try context.object(entity: "items", id: "i1").set("Title", .text("annotated"))

        let result = try SaveContract.save(context)
        XCTAssertNil(result.error, result.error?.message ?? "")
        XCTAssertEqual(result.saved, 3, "the local changes and the server's in one save")
        XCTAssertEqual(SaveContract.field(try backend.record("i1"), "Title"), .string("annotated"))
        XCTAssertNil(try backend.record(note.id), "a local record never goes to the server")
        let version = try note.version()
        XCTAssertGreaterThan(version, 0)
        XCTAssertFalse(context.hasChanges)
        let uri = note.uri
        XCTAssertEqual(uri, "tether://private/notes/" + note.id)
        XCTAssertTrue(try context.object(uri: uri) === note)

        // An edit of a saved note is conditional on its version, as a server's.
        try note.set("Pinned", .boolean(true))
        XCTAssertNil(try SaveContract.save(context).error)
        XCTAssertGreaterThan(try note.version(), version)

        try context.close()
        context = try open(backend)
        defer { try? context.close() }
        let answers = try fetch(context, FetchRequest(entity: "notes"))
        XCTAssertEqual(answers.map(\.phase), [.final], "a local entity's store is its truth: one answer")
        XCTAssertEqual(answers.last?.objects.map(\.id), [note.id])
        var pinned = FetchRequest(entity: "notes")
        pinned.predicate = "Pinned == true"
        XCTAssertEqual(try fetch(context, pinned).last?.objects.count, 1)
        let reopened = try context.object(entity: "notes", id: note.id)
        XCTAssertEqual(try reopened.get("Text"), .text("check the title"))
        XCTAssertEqual(try reopened.peek("Item.Title"), .text("annotated"))
        var related = FetchRequest(entity: "")
        related.related = (try context.object(entity: "items", id: "i1"), "notes")
        XCTAssertEqual(try fetch(context, related).last?.objects.map(\.id), [note.id], "the inverse across stores")
    }

    /// A cross-store reference takes only its target's URI.
    static func badReferencesAreRefused(_ backend: Backend) throws {
        let context = try open(backend)
        defer { try? context.close() }
        let note = try Self.note(context, "x", on: nil)
        // A URI spelled otherwise than its target's (i%31 for i1) is refused too: one spelling, which rules can find.
        for bad in ["i1", "tether://server/notes/i1", "tether://private/items/i1", "tether://server/items/", "tether://server/items/%zz",
                    "tether://server/items/i%31"] {
            XCTAssertThrowsError(try note.set("Item", .text(bad)), bad) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid, bad) }
        }
        try note.set("Item", .text("tether://server/items/i1"))
        XCTAssertEqual(try note.related("Item")?.id, "i1")
        XCTAssertThrowsError(try note.setRelated("Item", note)) { XCTAssertEqual(($0 as? TetherError)?.kind, .type) }
        XCTAssertThrowsError(try note.setRelated("Text", nil)) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        XCTAssertThrowsError(try context.object(uri: "tether://elsewhere/notes/n")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        XCTAssertThrowsError(try context.object(uri: "http://x")) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
    }

    /// A server record deleted by another writer: the notes referring to it
    /// lose the reference (nullify), the tags go with it (cascade).
    static func referencesFollowAServerDeletion(_ backend: Backend) throws {
        let context = try open(backend)
        defer { try? context.close() }
        _ = try fetch(context, FetchRequest(entity: "items"))
        let note = try Self.note(context, "about i3", on: "i3")
        let tag = try context.insert(entity: "tags")
        try tag.setRelated("Item", context.object(entity: "items", id: "i3"))
        let keep = try Self.note(context, "about i4", on: "i4")
        XCTAssertNil(try SaveContract.save(context).error)
        try note.set("Pinned", .boolean(true))  // unsaved: it stays, on the new version

        try backend.deleteItem("i3")
        _ = try fetch(context, FetchRequest(entity: "items"))
        XCTAssertTrue(eventually { (try? note.peek("Item")) == .null }, "nullified")
        XCTAssertEqual(try note.peek("Pinned"), .boolean(true), "the unsaved edit stays")
        XCTAssertEqual(try keep.related("Item")?.id, "i4")
        XCTAssertEqual(try fetch(context, FetchRequest(entity: "tags")).last?.objects.count, 0, "cascaded")
        XCTAssertThrowsError(try tag.peek("Label")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
        let result = try SaveContract.save(context)
        XCTAssertNil(result.error, "the clean-up is no conflict: \(result.error?.message ?? "")")
        XCTAssertEqual(try note.peek("Item"), .null)

        // Edited here, deleted there: once the server's side wins, the record is gone for good.
        let edited = try Self.note(context, "about i8", on: "i8")
        XCTAssertNil(try SaveContract.save(context).error)
        try context.object(entity: "items", id: "i8").set("Title", .text("mine"))
        try backend.deleteItem("i8")
        XCTAssertEqual(try SaveContract.save(context).error?.kind, .conflict)
        XCTAssertEqual(try edited.related("Item")?.id, "i8", "kept while the edit may make it again")
        XCTAssertNil(try SaveContract.save(context, .serverWins).error)
        XCTAssertEqual(try edited.peek("Item"), .null)

        // Deleted here: the note's reference goes with the save, in the same save.
        let mine = try Self.note(context, "about i9", on: "i9")
        XCTAssertNil(try SaveContract.save(context).error)
        try context.object(entity: "items", id: "i9").delete()
        XCTAssertEqual(try mine.peek("Item"), .null, "the delete rule, planned at once")
        XCTAssertEqual(try SaveContract.save(context).saved, 2)
        XCTAssertNil(try backend.record("i9"))
        XCTAssertEqual(try mine.peek("Item"), .null)
        XCTAssertFalse(context.hasChanges)
    }

    /// Targets deleted while the local store was not attached are found at
    /// the next open that attaches it; references into a store not attached
    /// are kept, not read.
    static func aStoreNotAttachedIsCleanedUpWhenAttached(_ backend: Backend) throws {
        var context = try open(backend)
        _ = try fetch(context, FetchRequest(entity: "items"))
        let noteID = try Self.note(context, "about i5", on: "i5").id
        let keptID = try Self.note(context, "about i6", on: "i6").id
        XCTAssertNil(try SaveContract.save(context).error)
        try context.close()

        context = try open(backend, attached: false)
        XCTAssertNil(context.model.entity(named: "notes"))
        try backend.deleteItem("i5")
        _ = try fetch(context, FetchRequest(entity: "items"))  // the row goes from the cache, unseen by the notes
        try context.close()

        context = try open(backend)
        defer { try? context.close() }
        let note = try context.object(entity: "notes", id: noteID)
        XCTAssertTrue(eventually { (try? note.peek("Item")) == .null }, "cleaned up at attach")
        XCTAssertEqual(try context.object(entity: "notes", id: keptID).peek("Item.Title"), .text("item 6"))
    }

    /// Two contexts on the local store edit one note: the later save meets
    /// a conflict, as on a server, and a merge policy settles it.
    static func siblingsConflictOnALocalRecord(_ backend: Backend) throws {
        let main = try open(backend)
        defer { try? main.close() }
        let note = try Self.note(main, "first", on: nil)
        XCTAssertNil(try SaveContract.save(main).error)
        let sibling = try main.openSibling(name: "import")
        defer { try? sibling.close() }
        let theirs = try sibling.localInstance(of: note)
        try theirs.set("Text", .text("theirs"))
        try note.set("Text", .text("mine"))
        XCTAssertNil(try SaveContract.save(sibling).error)
        XCTAssertTrue(eventually { (try? note.committed(note.entity.attributeIndex(named: "Text")!)) == .text("theirs") },
                      "a save in one context reaches the other's objects")
        let conflicted = try SaveContract.save(main)
        XCTAssertEqual(conflicted.error?.kind, .conflict)
        XCTAssertEqual(try note.peek("Text"), .text("mine"), "the local change stays pending")
        XCTAssertNil(try SaveContract.save(main, .clientWins).error)
        XCTAssertEqual(try theirs.peek("Text"), .text("mine"))
    }
}

final class KintoLocalStoreTests: KintoTestCase {
    func testEditSaveAndReopen() throws { try LocalStoreContract.editSaveAndReopen(backend) }
    func testBadReferencesAreRefused() throws { try LocalStoreContract.badReferencesAreRefused(backend) }
    func testReferencesFollowAServerDeletion() throws { try LocalStoreContract.referencesFollowAServerDeletion(backend) }
    func testAStoreNotAttachedIsCleanedUpWhenAttached() throws { try LocalStoreContract.aStoreNotAttachedIsCleanedUpWhenAttached(backend) }
    func testSiblingsConflictOnALocalRecord() throws { try LocalStoreContract.siblingsConflictOnALocalRecord(backend) }
}

final class MemoryLocalStoreTests: MemoryTestCase {
    func testEditSaveAndReopen() throws { try LocalStoreContract.editSaveAndReopen(backend) }
    func testBadReferencesAreRefused() throws { try LocalStoreContract.badReferencesAreRefused(backend) }
    func testReferencesFollowAServerDeletion() throws { try LocalStoreContract.referencesFollowAServerDeletion(backend) }
    func testAStoreNotAttachedIsCleanedUpWhenAttached() throws { try LocalStoreContract.aStoreNotAttachedIsCleanedUpWhenAttached(backend) }
    func testSiblingsConflictOnALocalRecord() throws { try LocalStoreContract.siblingsConflictOnALocalRecord(backend) }

    /// Offline, local records are saved all the same; the server's changes wait.
    func testLocalSavesNeedNoServer() throws {
        var context = try LocalStoreContract.open(backend)
        _ = try fetch(context, FetchRequest(entity: "items"))
        try context.close()
        backend.server.isReachable = false
        context = try LocalStoreContract.open(backend)
        defer { try? context.close() }
        XCTAssertFalse(context.isOnline)
        let note = try LocalStoreContract.note(context, "offline", on: "i7")
        try context.object(entity: "items", id: "i7").set("Title", .text("later"))
        let result = try SaveContract.save(context)
        XCTAssertEqual(result.error?.kind, .network)
        XCTAssertEqual(result.saved, 1)
        XCTAssertNil(note.changeKind, "the note is saved")
        XCTAssertEqual(context.changedObjects.map(\.id), ["i7"], "the server's change waits")
    }

    /// Bad options fail the open and leave no file behind.
    func testBadLocalStoresAreRefused() throws {
        func refused(_ stores: [LocalStoreOptions], _ kind: TetherError.Kind, _ why: String) {
            XCTAssertThrowsError(try backend.open(localStores: stores), why) { XCTAssertEqual(($0 as? TetherError)?.kind, kind, why) }
            XCTAssertFalse(FileManager.default.fileExists(atPath: backend.storePath), why)
            XCTAssertFalse(FileManager.default.fileExists(atPath: backend.storePath + ".l"), why)
        }
        let path = backend.storePath + ".l"
        refused([LocalStoreOptions(configuration: "p", path: path, specs: "{")], .invalid, "specs not JSON")
        refused([LocalStoreOptions(configuration: "p", path: path, specs: "[]")], .invalid, "specs not an object")
        refused([LocalStoreOptions(configuration: "p", path: path, specs: #"{"n": 1}"#)], .invalid, "a schema not an object")
        refused([LocalStoreOptions(configuration: "server", path: path, specs: "{}")], .invalid, "the server's name")
        refused([LocalStoreOptions(configuration: "a b", path: path, specs: "{}")], .invalid, "a space")
        refused([LocalStoreOptions(configuration: "p", path: "", specs: "{}")], .invalid, "no path")
        refused([LocalStoreOptions(configuration: "p", path: path, specs: #"{"n": {}}"#),
                 LocalStoreOptions(configuration: "q", path: path + "2", specs: #"{"n": {}}"#)], .invalid, "one name in two stores")
        refused([LocalStoreOptions(configuration: "p", path: path, specs: "{}"),
                 LocalStoreOptions(configuration: "p", path: path + "2", specs: "{}")], .invalid, "one configuration twice")
        refused([LocalStoreOptions(configuration: "p", path: path, specs: "{}"),
                 LocalStoreOptions(configuration: "q", path: path, specs: "{}")], .busy, "one file twice")
        refused([LocalStoreOptions(configuration: "p", path: backend.storePath, specs: "{}")], .busy, "the server's file")

        // A local entity named as a server one wins, with a diagnostic.
        let context = try backend.open(localStores: [LocalStoreOptions(configuration: "p", path: path, specs: #"{"items": {}}"#)])
        defer { try? context.close() }
        XCTAssertTrue(try XCTUnwrap(context.model.entity(named: "items")).isLocal)
        XCTAssertTrue(context.model.diagnostics.contains { $0.entity == "items" && $0.attribute == nil })
        let local = try context.insert(entity: "items")
        XCTAssertNil(try SaveContract.save(context).error)
        XCTAssertNil(try backend.record(local.id))
    }
}
