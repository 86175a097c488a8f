import XCTest
@testable import Tether

final class ModelTests: XCTestCase {
    private func collection(_ id: String, _ schema: String) throws -> JSON {
        try JSON.parse("{\"id\": \"\(id)\", \"last_modified\": 1, \"schema\": \(schema)}")
    }

    /// The model of Kinto collections, through the Kinto adapter's specs.
    private func model(_ collections: [JSON], previous: Model? = nil) throws -> Model {
        ModelBuilder.build(specs: collections.map { KintoConnection.spec(from: $0, bucket: "b", operations: .all) },
                           previous: previous)
    }

    func testTypesFlagsAndExplicitCodes() throws {
        let schema = """
        {"type": "object", "required": ["Client"], "properties": {
          "Client": {"type": "string", "x-tether-code": 301},
          "Update": {"type": "integer", "x-tether-code": 302},
          "Ratio": {"type": "number"},
          "Locked": {"type": "boolean"},
          "Options": {"type": "array", "items": {"type": "string"}},
          "Maybe": {"type": ["string", "null"]},
          "Either": {"type": ["string", "integer"]},
          "bad name": {"type": "string"},
          "Robert\\"); DROP TABLE x;--": {"type": "string"}
        }}
        """
        let model = try model([collection("clients", schema)])
        let clients = try XCTUnwrap(model.entity(named: "clients"))
        XCTAssertEqual(clients.route, "/buckets/b/collections/clients/records")
        // Names are kept whatever their shape: they never become SQL (0.1 dropped these silently).
        XCTAssertEqual(clients.attributes.map(\.name), ["id", "last_modified", "Client", "Update", "Ratio", "Locked", "Options",
                                                        "Maybe", "Either", "bad name", "Robert\"); DROP TABLE x;--"])
        func attribute(_ name: String) -> Attribute { clients.attributes[clients.attributeIndex(named: name)!] }
        XCTAssertEqual(attribute("Client").code, 301)
        XCTAssertTrue(attribute("Client").isRequired)
        XCTAssertEqual(attribute("Update").code, 302)
        XCTAssertEqual(attribute("id").code, 1)
        XCTAssertTrue(attribute("id").isID)
        XCTAssertEqual(attribute("last_modified").code, 2)
        XCTAssertTrue(attribute("last_modified").isVersion)
        XCTAssertEqual(attribute("Ratio").type, .real)
        XCTAssertEqual(attribute("Locked").type, .boolean)
        XCTAssertEqual(attribute("Options").type, .json)
        XCTAssertEqual(attribute("Maybe").type, .text)
        XCTAssertEqual(attribute("Either").type, .json)
        XCTAssertEqual(Set(clients.attributes.map(\.code)).count, clients.attributes.count)
        XCTAssertEqual(clients.attributeIndex(code: 301), clients.attributeIndex(named: "Client"))
    }

    func testCodesStayStableAndRemovedCodesAreNotReused() throws {
        let first = try model([collection("jobs", #"{"properties": {"A": {"type": "string"}, "B": {"type": "string"}}}"#)])
        let jobs1 = first.entity(named: "jobs")!
        let codeA = jobs1.attributes[jobs1.attributeIndex(named: "A")!].code
        let codeB = jobs1.attributes[jobs1.attributeIndex(named: "B")!].code
        // B removed, C added before A: A keeps its code, C does not take B's.
        let second = try model([collection("jobs", #"{"properties": {"C": {"type": "string"}, "A": {"type": "string"}}}"#)],
                               previous: ModelCoding.decode(ModelCoding.encode(first)))
        let jobs2 = second.entity(named: "jobs")!
        XCTAssertEqual(jobs2.attributes[jobs2.attributeIndex(named: "A")!].code, codeA)
        let codeC = jobs2.attributes[jobs2.attributeIndex(named: "C")!].code
        XCTAssertNotEqual(codeC, codeB)
        XCTAssertNotEqual(codeC, codeA)
    }

    /// 0.1 trapped on these (issue 7, case 1): codes are C ints at the
    /// boundary, so one out of range is not taken and a fitting one is chosen.
    func testExplicitCodesOutOfRangeAreNotTaken() throws {
        let schema = """
        {"properties": {"Huge": {"type": "string", "x-tether-code": 9223372036854775807},
                        "Wide": {"type": "string", "x-tether-code": 2147483653},
                        "Top": {"type": "string", "x-tether-code": 2147483647},
                        "Next": {"type": "string"}}}
        """
        let entity = try XCTUnwrap(model([collection("big", schema)]).entity(named: "big"))
        let codes = entity.attributes.map(\.code)
        XCTAssertTrue(codes.allSatisfy { (1...Int(Int32.max)).contains($0) }, "\(codes)")
        XCTAssertEqual(Set(codes).count, codes.count)
        XCTAssertEqual(entity.attributes[entity.attributeIndex(named: "Top")!].code, Int(Int32.max))
    }

    /// 0.1 let a new explicit code take a code already given, and renumbered
    /// the attribute that had it (issue 7, case 9): the id moved from 1 to 102.
    func testCodesGivenBeforeWinOverNewExplicitCodes() throws {
        let first = try model([collection("jobs", #"{"properties": {"A": {"type": "string"}}}"#)])
        let jobs1 = first.entity(named: "jobs")!
        let codeA = jobs1.attributes[jobs1.attributeIndex(named: "A")!].code
        let second = try model([collection("jobs", #"""
            {"properties": {"A": {"type": "string", "x-tether-code": 500},
                            "B": {"type": "string", "x-tether-code": 1},
                            "C": {"type": "string", "x-tether-code": \#(codeA)}}}
            """#)], previous: ModelCoding.decode(ModelCoding.encode(first)))
        let jobs2 = second.entity(named: "jobs")!
        func code(_ name: String) -> Int { jobs2.attributes[jobs2.attributeIndex(named: name)!].code }
        XCTAssertEqual(code("id"), 1, "the id keeps its code")
        XCTAssertEqual(code("last_modified"), 2)
        XCTAssertEqual(code("A"), codeA, "A keeps its code although the spec now asks for 500")
        XCTAssertNotEqual(code("B"), 1)
        XCTAssertNotEqual(code("C"), codeA)
        XCTAssertEqual(Set(jobs2.attributes.map(\.code)).count, jobs2.attributes.count)
        XCTAssertEqual(try ModelCoding.decode(ModelCoding.encode(second))?.entity(named: "jobs")?.attributes.map(\.code),
                       jobs2.attributes.map(\.code), "and the saved model says the same")
    }

    /// What cannot be modelled is left out with a diagnostic; the rest is
    /// built (0.1 failed the whole bucket). Names are not SQL identifiers any
    /// more, so odd ones are fine.
    func testWhatCannotBeModelledIsLeftOutWithADiagnostic() throws {
        let built = try model([
            collection("x\\\"y", #"{"properties": {"bad name": {"type": "string"}, "it's": {"type": "integer"}}}"#),
            JSON.parse(#"{"schema": {}}"#),  // no id
            collection("twice", "{}"), collection("twice", "{}"),
            collection("codes", #"{"properties": {"A": {"type": "string", "x-tether-code": 7}, "B": {"type": "string", "x-tether-code": 7}}}"#),
        ])
        XCTAssertEqual(built.entities.map(\.name), ["codes", "twice", "x\"y"])
        let odd = try XCTUnwrap(built.entity(named: "x\"y"))
        XCTAssertNotNil(odd.attributeIndex(named: "bad name"))
        XCTAssertNotNil(odd.attributeIndex(named: "it's"))
        XCTAssertEqual(Set(built.entities.map(\.code)).count, 3, "each entity its own code")
        let messages = built.diagnostics.map { "\($0.entity)|\($0.attribute ?? "-")" }
        XCTAssertEqual(messages.sorted(), ["codes|B", "twice|-", "|-"], "\(built.diagnostics)")
    }

    /// Swift's String equality is canonical equivalence: keyed by String,
    /// "é" and "e" + U+0301 shared one attribute, and a record holding both
    /// lost one value without a word. Names and ids are distinct by bytes.
    func testNamesEqualOnlyCanonicallyAreDistinct() throws {
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        let spec = Spec(name: "items", route: "items", idField: "id", versionField: "v",
                        fields: [FieldSpec(name: composed, type: .text), FieldSpec(name: decomposed, type: .integer)],
                        operations: .all)
        let twin = Spec(name: "item\u{301}s", route: "x", idField: "id", versionField: "v", fields: [], operations: .all)
        let model = ModelBuilder.build(specs: [spec, twin], previous: nil)
        XCTAssertEqual(model.diagnostics, [])
        XCTAssertEqual(model.entities.count, 2)
        let entity = try XCTUnwrap(model.entity(named: "items"))
        XCTAssertEqual(entity.attributes.count, 4)
        XCTAssertNotEqual(entity.attributeIndex(named: composed), entity.attributeIndex(named: decomposed))
        let record = try Record(entity: entity, fields: [("id", .string("r")), (decomposed, .integer(7)), (composed, .string("t"))])
        XCTAssertEqual(record.values[entity.attributeIndex(named: composed)!], .text("t"))
        XCTAssertEqual(record.values[entity.attributeIndex(named: decomposed)!], .integer(7))
        XCTAssertTrue(record.extra.isEmpty)
        // The fuzzer found the saved model then refused as corrupt: the
        // store would not open again.
        let saved = try XCTUnwrap(try ModelCoding.decode(ModelCoding.encode(model)))
        XCTAssertEqual(saved.entity(named: "items")?.attributes.map(\.code), entity.attributes.map(\.code))
    }

    /// The saved model is read from a file anything may have written: a high
    /// water of Int64.max made the next code overflow (a trap), an entity
    /// code beyond Int32 trapped at the C boundary. Such a model is refused;
    /// a spent code range is filled from its gaps.
    func testOutlandishSavedCodesAreRefusedOrWrappedNotFatal() throws {
        let items = Spec(name: "items", route: "r", idField: "id", versionField: "v", fields: [], operations: .all)
        let text = ModelCoding.encode(ModelBuilder.build(specs: [items], previous: nil))
        XCTAssertTrue(text.contains(#""entityCodeHighWater":1"#) && text.contains(#""code":1,"route""#), text)
        for (from, to) in [(#""entityCodeHighWater":1"#, #""entityCodeHighWater":9223372036854775807"#),
                           (#""codeHighWater":2"#, #""codeHighWater":9223372036854775807"#)] {
            XCTAssertThrowsError(try ModelCoding.decode(text.replacingOccurrences(of: from, with: to)), to) { error in
                XCTAssertEqual((error as? TetherError)?.kind, .store)
            }
        }
        // Found by the fuzzer: one attribute both id and version, and no
        // attribute for the version field; rebuilt, its codes moved.
        let twoInOne = #"{"format": 3, "entityCodeHighWater": 1, "entities": [{"name": "items", "code": 1, "route": "/r", "#
            + #""idField": "id", "versionField": "last_modified", "operations": 15, "codeHighWater": 2, "attributes": "#
            + #"[{"name": "id", "code": 1, "type": 1, "id": true, "version": true, "required": false}]}]}"#
        XCTAssertThrowsError(try ModelCoding.decode(twoInOne))
        // Found by the fuzzer too: a code above its entity's high water, which
        // a new attribute's code could then collide with.
        XCTAssertThrowsError(try ModelCoding.decode(text.replacingOccurrences(of: #""codeHighWater":2"#, with: #""codeHighWater":1"#)))
        let spent = text.replacingOccurrences(of: #""entityCodeHighWater":1"#, with: #""entityCodeHighWater":2147483647"#)
            .replacingOccurrences(of: #""code":1,"route""#, with: #""code":2147483647,"route""#)
        let previous = try XCTUnwrap(try ModelCoding.decode(spent))
        let notes = Spec(name: "notes", route: "n", idField: "id", versionField: "v", fields: [], operations: .all)
        let model = ModelBuilder.build(specs: [items, notes], previous: previous)
        XCTAssertEqual(model.entities.map(\.code), [2147483647, 1], "items keeps its code; notes fills a gap")
    }

    func testMalformedJSONIsAProtocolError() {
        XCTAssertThrowsError(try JSON.parse(#"{"data": [ {"id": "x","#)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .protocol)
        }
    }

    func testJSONRoundTripKeepsOrderAndEscapes() throws {
        let text = #"{"b":1,"a":[true,null,2.5,"q\"\u0000"]}"#
        let parsed = try JSON.parse(text)
        XCTAssertEqual(parsed.objectValue?.map(\.key), ["b", "a"])
        XCTAssertEqual(try JSON.parse(parsed.serialized()), parsed)
    }
}
