import XCTest
@testable import Tether

/// To-one relationships by reference, to-many as their inverse, key paths,
/// and the delete rules, over the memory server.
final class RelationshipTests: XCTestCase {
    var directory: String!
    var server: MemoryServer!

    static func field(_ name: String, to target: String? = nil, inverse: String = "", rule: Reference.DeleteRule = .nullify)
        -> FieldSpec {
        var field = FieldSpec(name: name, type: .text)
        field.reference = target.map { Reference(target: $0, inverse: inverse, deleteRule: rule) }
        return field
    }

    static func spec(_ name: String, _ fields: [FieldSpec]) -> Spec {
        Spec(name: name, route: name, idField: "id", versionField: "last_modified", fields: fields, operations: .all)
    }

    override func setUpWithError() throws {
        directory = try makeTemporaryDirectory("rel")
        server = MemoryServer(name: "rel-\(UUID().uuidString.prefix(8))", specs: [
            Self.spec("owners", [Self.field("Name")]),
            Self.spec("pets", [Self.field("Name"), Self.field("Owner", to: "owners", inverse: "pets", rule: .cascade)]),
            Self.spec("notes", [Self.field("Text"), Self.field("Pet", to: "pets", inverse: "notes", rule: .nullify)]),
            Self.spec("licences", [Self.field("Number"), Self.field("Holder", to: "owners", inverse: "licences", rule: .deny)]),
            Self.spec("odd", [FieldSpec(name: "Count", type: .integer), Self.field("Ghost", to: "nowhere")]),
        ], pageSize: 50)
        server.put("owners", id: "o1", [("Name", .string("Ann"))])
        server.put("owners", id: "o2", [("Name", .string("Bob"))])
        server.put("pets", id: "p1", [("Name", .string("Rex")), ("Owner", .string("o1"))])
        server.put("pets", id: "p2", [("Name", .string("Tom")), ("Owner", .string("o1"))])
        server.put("pets", id: "p3", [("Name", .string("Kit")), ("Owner", .string("o2"))])
        server.put("pets", id: "p4", [("Name", .string("Stray"))])
        server.put("notes", id: "n1", [("Text", .string("vaccinated")), ("Pet", .string("p1"))])
        server.put("licences", id: "l1", [("Number", .string("42")), ("Holder", .string("o2"))])
    }

    override func tearDownWithError() throws {
        removeDirectory(directory)
    }

    private func open() throws -> Context {
        let context = try Context.open(ContextOptions(storePath: directory + "/rel.sqlite"), connection: MemoryConnection(server))
        for entity in ["owners", "pets", "notes", "licences"] { _ = try fetch(context, FetchRequest(entity: entity)) }
        return context
    }

    private func names(_ context: Context, _ request: FetchRequest) throws -> [String] {
        let answer = try XCTUnwrap(fetch(context, request).last)
        XCTAssertNil(answer.error)
        return try answer.objects.map { object in
            guard case .text(let name) = try object.peek("Name") else { return "?" }
            return name
        }.sorted()
    }

    func testTheModelDeclaresRelationshipsFromTheSpecs() throws {
        let context = try open()
        defer { try? context.close() }
        let pets = try XCTUnwrap(context.model.entity(named: "pets"))
        XCTAssertEqual(pets.attributes[pets.attributeIndex(named: "Owner")!].reference?.target, "owners")
        let owners = try XCTUnwrap(context.model.entity(named: "owners"))
        XCTAssertEqual(context.model.inverses(of: owners).map(\.name).sorted(), ["licences", "pets"])
        XCTAssertTrue(context.model.diagnostics.contains { $0.entity == "odd" && $0.attribute == "Ghost" },
                      "a reference to an entity the model lacks is a diagnostic")
        let odd = try XCTUnwrap(context.model.entity(named: "odd"))
        XCTAssertNil(odd.attributes[odd.attributeIndex(named: "Ghost")!].reference)

        // Kept with the model in the store: offline, the same relationships.
        try context.close()
        server.isReachable = false
        let offline = try Context.open(ContextOptions(storePath: directory + "/rel.sqlite"), connection: MemoryConnection(server))
        defer { try? offline.close() }
        XCTAssertFalse(offline.isOnline)
        XCTAssertEqual(offline.model.inverses(of: offline.model.entity(named: "owners")!).map(\.name).sorted(), ["licences", "pets"])
        XCTAssertEqual(try offline.object(entity: "pets", id: "p1").peek("Owner.Name"), .text("Ann"))
    }

    func testKintoSchemasDeclareReferences() throws {
        let collection = try JSON.parse(#"{"id": "changes", "schema": {"properties": {"Client": {"type": "string", "x-tether-to": "clients", "x-tether-inverse": "changelists", "x-tether-delete": "cascade"}, "User": {"type": "string", "x-tether-to": "users"}}}}"#)
        let spec = KintoConnection.spec(from: collection, bucket: "b", operations: .all)
        XCTAssertEqual(spec.fields.first { $0.name == "Client" }?.reference,
                       Reference(target: "clients", inverse: "changelists", deleteRule: .cascade))
        XCTAssertEqual(spec.fields.first { $0.name == "User" }?.reference,
                       Reference(target: "users", inverse: "changes", deleteRule: .nullify), "defaults")
    }

    func testToOneToManyAndKeyPaths() throws {
        let context = try open()
        defer { try? context.close() }
        let rex = try context.object(entity: "pets", id: "p1")
        let ann = try XCTUnwrap(rex.related("Owner"))
        XCTAssertTrue(ann === (try context.object(entity: "owners", id: "o1")), "one object per record")
        XCTAssertEqual(try rex.peek("Owner.Name"), .text("Ann"))
        XCTAssertEqual(try context.object(entity: "notes", id: "n1").peek("Pet.Owner.Name"), .text("Ann"), "through two")
        let stray = try context.object(entity: "pets", id: "p4")
        XCTAssertNil(try stray.related("Owner"))
        XCTAssertEqual(try stray.peek("Owner.Name"), .null, "a null reference on the way reads null")
        XCTAssertThrowsError(try rex.related("Name")) { XCTAssertEqual(($0 as? TetherError)?.kind, .invalid) }
        XCTAssertThrowsError(try rex.peek("Owner.Nope")) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }

        var request = FetchRequest(entity: "")
        request.related = (ann, "pets")
        XCTAssertEqual(try names(context, request), ["Rex", "Tom"])
        request.predicate = "Name BEGINSWITH 'T'"
        XCTAssertEqual(try names(context, request), ["Tom"])
        request.predicate = nil
        // Unsaved changes count: a pet moved to Ann, a new one for her.
        try context.object(entity: "pets", id: "p3").set("Owner", .text("o1"))
        try context.insert(entity: "pets").set("Name", .text("New"))
        let new = try XCTUnwrap(context.changedObjects.last)
        try new.set("Owner", .text("o1"))
        XCTAssertEqual(try names(context, request), ["Kit", "New", "Rex", "Tom"])
        request.related = (ann, "nope")
        XCTAssertThrowsError(try context.makeFetch(request)) { XCTAssertEqual(($0 as? TetherError)?.kind, .notFound) }
    }

    func testDeleteRules() throws {
        let context = try open()
        defer { try? context.close() }
        // Deny: Bob holds a licence; nothing changes.
        let bob = try context.object(entity: "owners", id: "o2")
        XCTAssertThrowsError(try bob.delete()) { XCTAssertEqual(($0 as? TetherError)?.kind, .notAllowed) }
        XCTAssertFalse(context.hasChanges, "a refused delete changes nothing, cascades included")

        // Cascade to Ann's pets, nullify the notes on them.
        let ann = try context.object(entity: "owners", id: "o1")
        try ann.delete()
        XCTAssertEqual(ann.changeKind, .delete)
        XCTAssertEqual(try context.object(entity: "pets", id: "p1").changeKind, .delete)
        XCTAssertEqual(try context.object(entity: "pets", id: "p2").changeKind, .delete)
        XCTAssertNil(try context.object(entity: "pets", id: "p3").changeKind)
        let note = try context.object(entity: "notes", id: "n1")
        XCTAssertEqual(try note.peek("Pet"), .null, "no dangling reference")
        XCTAssertEqual(note.changeKind, .update)
        var pets = FetchRequest(entity: "pets")
        pets.policy = .cacheOnly
        XCTAssertEqual(try names(context, pets), ["Kit", "Stray"])

        XCTAssertNil(try SaveContract.save(context).error)
        // The server's own answers, not the cache's.
        var fromServer = FetchRequest(entity: "owners")
        fromServer.policy = .serverOnly
        XCTAssertEqual(try names(context, fromServer), ["Bob"])
        fromServer = FetchRequest(entity: "pets")
        fromServer.policy = .serverOnly
        XCTAssertEqual(try names(context, fromServer), ["Kit", "Stray"])
        fromServer = FetchRequest(entity: "notes")
        fromServer.policy = .serverOnly
        let notes = try XCTUnwrap(fetch(context, fromServer).last).objects
        XCTAssertEqual(try notes.map { try $0.peek("Pet") }, [.null])
        try licenceCleared(context)
    }

    /// With its licence deleted, Bob can go.
    private func licenceCleared(_ context: Context) throws {
        try context.object(entity: "licences", id: "l1").delete()
        try context.object(entity: "owners", id: "o2").delete()
        XCTAssertEqual(try context.object(entity: "pets", id: "p3").changeKind, .delete)
        XCTAssertNil(try SaveContract.save(context).error)
        XCTAssertFalse(context.hasChanges)
    }
}
