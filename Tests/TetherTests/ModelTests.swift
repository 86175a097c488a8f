import XCTest
@testable import Tether

final class ModelTests: XCTestCase {
    private func collection(_ id: String, _ schema: String) throws -> JSON {
        try JSON.parse("{\"id\": \"\(id)\", \"last_modified\": 1, \"schema\": \(schema)}")
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
        let model = try ModelBuilder.build(bucket: "b", collections: [collection("clients", schema)],
                                           operations: { _ in .all }, previous: nil)
        let clients = try XCTUnwrap(model.entity(named: "clients"))
        XCTAssertEqual(clients.route, "/buckets/b/collections/clients/records")
        XCTAssertEqual(clients.attributes.map(\.name), ["id", "last_modified", "Client", "Update", "Ratio", "Locked", "Options", "Maybe", "Either"])
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
        let first = try ModelBuilder.build(
            bucket: "b", collections: [collection("jobs", #"{"properties": {"A": {"type": "string"}, "B": {"type": "string"}}}"#)],
            operations: { _ in .all }, previous: nil)
        let jobs1 = first.entity(named: "jobs")!
        let codeA = jobs1.attributes[jobs1.attributeIndex(named: "A")!].code
        let codeB = jobs1.attributes[jobs1.attributeIndex(named: "B")!].code
        // B removed, C added before A: A keeps its code, C does not take B's.
        let second = try ModelBuilder.build(
            bucket: "b", collections: [collection("jobs", #"{"properties": {"C": {"type": "string"}, "A": {"type": "string"}}}"#)],
            operations: { _ in .all }, previous: ModelCoding.decode(ModelCoding.encode(first)))
        let jobs2 = second.entity(named: "jobs")!
        XCTAssertEqual(jobs2.attributes[jobs2.attributeIndex(named: "A")!].code, codeA)
        let codeC = jobs2.attributes[jobs2.attributeIndex(named: "C")!].code
        XCTAssertNotEqual(codeC, codeB)
        XCTAssertNotEqual(codeC, codeA)
    }

    func testInvalidCollectionIdIsAProtocolError() throws {
        XCTAssertThrowsError(try ModelBuilder.build(bucket: "b", collections: [collection("x\\\"y", "{}")],
                                                    operations: { _ in .all }, previous: nil)) { error in
            XCTAssertEqual((error as? TetherError)?.kind, .protocol)
        }
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
