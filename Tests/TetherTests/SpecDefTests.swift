import XCTest
@testable import Tether

final class SpecDefTests: XCTestCase {
    private func field(_ fields: [SpecDefField], _ tag: String) throws -> SpecDefField {
        try XCTUnwrap(fields.first { $0.tag == tag }, "no field \(tag)")
    }

    /// The error `body` throws, which must be TetherError .invalid.
    private func invalid(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        do {
            let fields = try SpecDef.parse(text)
            XCTFail("parsed into \(fields.count) fields: \(text.prefix(80))", file: file, line: line)
            return ""
        } catch let error as TetherError {
            XCTAssertEqual(error.kind, .invalid, error.message, file: file, line: line)
            return error.message
        } catch {
            XCTFail("\(error)", file: file, line: line)
            return ""
        }
    }

    // MARK: the real definitions

    func testEveryRealDefinitionParsesWithItsCodesAndOneKey() throws {
        let ids = ["client": ("Client", 301), "label": ("Label", 301), "branch": ("Branch", 301),
                   "change": ("Change", 201), "user": ("User", 651), "group": ("Group", 401),
                   "depot": ("Depot", 251), "stream": ("Stream", 701), "job": ("Job", 101)]
        for (name, specdef) in RealSpecDefs.all {
            let fields = try SpecDef.parse(specdef)
            // One field per ";;", in the server's order.
            XCTAssertEqual(fields.map(\.tag), specdef.split(separator: ";;").map { String($0.prefix { $0 != ";" }) }, name)
            XCTAssertEqual(Set(fields.compactMap(\.code)).count, fields.count, "\(name): every field has its own code")
            XCTAssertEqual(fields.filter(\.key).map(\.tag), [ids[name]!.0], name)
            XCTAssertEqual(fields.first(where: \.key)?.code, ids[name]!.1, name)
            XCTAssertTrue(fields.allSatisfy { SpecDef.types.contains($0.type) && SpecDef.opts.contains($0.opt) }, name)
        }
    }

    func testClientFieldsInOrderInPerforceWords() throws {
        let fields = try SpecDef.parse(RealSpecDefs.client)
        XCTAssertEqual(fields.map(\.tag), ["Client", "Update", "Access", "Owner", "Host", "Description", "Root", "AltRoots",
                                           "Options", "SubmitOptions", "LineEnd", "Stream", "StreamAtChange", "ServerID",
                                           "Type", "Backup", "View", "ChangeView", "LimitView"])
        XCTAssertEqual(fields.map(\.code), [301, 302, 303, 304, 305, 306, 307, 308, 309, 313, 310, 314, 316, 315, 318, 319,
                                            311, 317, 320])
        XCTAssertEqual(fields.map(\.type), ["word", "date", "date", "word", "word", "text", "line", "llist", "line", "select",
                                            "select", "line", "line", "line", "select", "select", "wlist", "llist", "llist"])
        // rq;ro: the key; ro: always (set by the server); rq: required.
        XCTAssertEqual(fields.map(\.opt), ["key", "always", "always", "optional", "optional", "optional", "required",
                                           "optional", "optional", "optional", "optional", "optional", "optional", "always",
                                           "optional", "optional", "optional", "optional", "optional"])
        let client = try field(fields, "Client")
        XCTAssertEqual(client, SpecDefField(tag: "Client", code: 301, type: "word", opt: "key", key: true, len: 32, seq: 1))
        let update = try field(fields, "Update")
        XCTAssertEqual(update.fmt, "L")
        XCTAssertEqual(update.seq, 2)
        XCTAssertEqual(update.len, 20)
        XCTAssertNil(update.words)
        let view = try field(fields, "View")
        XCTAssertEqual(view.words, 2)
        XCTAssertEqual(view.fmt, "C")
        XCTAssertEqual(view.len, 64)
        XCTAssertEqual(try field(fields, "LineEnd").val, ["local", "unix", "mac", "win", "share"])
        XCTAssertEqual(try field(fields, "SubmitOptions").val.count, 6)
        // A line's val keeps Perforce's own shape: comma groups of choices.
        XCTAssertEqual(try field(fields, "Options").val.first, "noallwrite")
        XCTAssertEqual(try field(fields, "Options").val[1], "allwrite,noclobber")
        XCTAssertEqual(try field(fields, "Description").val, [])
        XCTAssertNil(try field(fields, "Description").pre)
    }

    func testChangeJobUserGroupStreamDetails() throws {
        let change = try SpecDef.parse(RealSpecDefs.change)
        XCTAssertEqual(try field(change, "Change").opt, "key")
        XCTAssertEqual(try field(change, "Status").code, 205)
        XCTAssertEqual(try field(change, "Client").opt, "always")
        XCTAssertEqual(try field(change, "Description").opt, "required")
        XCTAssertEqual(try field(change, "JobStatus").fmt, "I")
        XCTAssertEqual(try field(change, "JobStatus").val, [], "a select without val: any value")
        XCTAssertEqual(try field(change, "Type").val, ["public", "restricted"])
        XCTAssertEqual(try field(change, "Files").type, "llist")

        // A job has no key: its name, 101 Job, is only required.
        let job = try SpecDef.parse(RealSpecDefs.job)
        XCTAssertEqual(job.map(\.tag), ["Job", "Status", "User", "Date", "Description"])
        XCTAssertEqual(job.map(\.code), [101, 102, 103, 104, 105])
        XCTAssertEqual(try field(job, "Job").opt, "required")
        XCTAssertTrue(try field(job, "Job").key)
        XCTAssertEqual(try field(job, "Status"), SpecDefField(tag: "Status", code: 102, type: "select", opt: "required",
                                                                  len: 10, pre: "open", val: ["open", "suspended", "closed"]))
        XCTAssertEqual(try field(job, "User").pre, "$user")
        XCTAssertEqual(try field(job, "Date").opt, "always")
        XCTAssertEqual(try field(job, "Description").pre, "$blank")

        let user = try SpecDef.parse(RealSpecDefs.user)
        XCTAssertEqual(try field(user, "User").code, 651)
        XCTAssertEqual(try field(user, "Email").opt, "required")
        XCTAssertEqual(try field(user, "Type").opt, "always")
        XCTAssertEqual(try field(user, "AuthMethod").type, "word", "no type: a word")
        XCTAssertEqual(try field(user, "AuthMethod").val, ["perforce", "perforce+2fa", "ldap", "ldap+2fa"])

        let group = try SpecDef.parse(RealSpecDefs.group)
        XCTAssertEqual(try field(group, "Users").opt, "default")
        XCTAssertEqual(try field(group, "MaxResults").type, "word")

        let stream = try SpecDef.parse(RealSpecDefs.stream)
        XCTAssertEqual(try field(stream, "Owner").open, "isolate")
        XCTAssertEqual(try field(stream, "Paths").open, "propagate")
        XCTAssertEqual(try field(stream, "Paths").maxwords, 3)
        XCTAssertEqual(try field(stream, "Paths").opt, "required")
        XCTAssertEqual(try field(stream, "ChangeView").opt, "always")

        let depot = try SpecDef.parse(RealSpecDefs.depot)
        XCTAssertEqual(try field(depot, "Map").opt, "required")
        XCTAssertEqual(try field(depot, "SpecMap").type, "wlist")
    }

    // MARK: into the model

    func testModelFromSpecDefsIsAddressedByPerforceCodes() throws {
        let specs = try RealSpecDefs.all.map { name, specdef in
            SpecDef.spec(name: name, route: "p4 \(name)", fields: try SpecDef.parse(specdef))
        }
        let model = ModelBuilder.build(specs: specs, previous: nil)
        XCTAssertEqual(model.diagnostics, [], "every real definition models without a change")
        XCTAssertEqual(model.entities.count, 9)
        func entity(_ name: String) throws -> Entity { try XCTUnwrap(model.entity(named: name)) }
        func name(_ entity: Entity, _ code: Int) -> String? { entity.attributeIndex(code: code).map { entity.attributes[$0].name } }

        let client = try entity("client")
        XCTAssertEqual(name(client, 301), "Client")
        XCTAssertEqual(name(client, 304), "Owner")
        XCTAssertEqual(name(client, 307), "Root")
        XCTAssertEqual(name(client, 311), "View")
        XCTAssertEqual(client.attributes[client.idIndex].name, "Client")
        XCTAssertEqual(client.attributes[client.idIndex].code, 301)
        XCTAssertEqual(client.attributes[client.versionIndex].name, "tether_version")
        XCTAssertEqual(client.attributes[client.attributeIndex(code: 311)!].type, .json, "View0, View1, ...: one list")
        XCTAssertEqual(client.attributes[client.attributeIndex(code: 308)!].type, .json)
        XCTAssertEqual(client.attributes[client.attributeIndex(code: 306)!].type, .text)
        XCTAssertTrue(client.attributes[client.attributeIndex(code: 307)!].isRequired)
        XCTAssertFalse(client.attributes[client.attributeIndex(code: 304)!].isRequired)
        XCTAssertEqual(client.attributes[client.attributeIndex(code: 310)!].allowedValues,
                       ["local", "unix", "mac", "win", "share"].map(Value.text))
        XCTAssertNil(client.attributes[client.attributeIndex(code: 309)!].allowedValues, "a line's val is not checked")

        // Codes repeat across spec types: each entity has its own.
        XCTAssertEqual(name(try entity("label"), 301), "Label")
        XCTAssertEqual(name(try entity("branch"), 301), "Branch")
        let change = try entity("change")
        XCTAssertEqual(name(change, 201), "Change")
        XCTAssertEqual(name(change, 205), "Status")
        XCTAssertNil(change.attributes[change.attributeIndex(code: 207)!].allowedValues, "JobStatus: a select without val")
        XCTAssertEqual(name(try entity("user"), 651), "User")
        XCTAssertEqual(name(try entity("group"), 401), "Group")
        XCTAssertEqual(name(try entity("depot"), 251), "Depot")
        XCTAssertEqual(name(try entity("stream"), 701), "Stream")
        let job = try entity("job")
        XCTAssertEqual(name(job, 101), "Job")
        XCTAssertEqual(job.attributes[job.idIndex].code, 101)
        XCTAssertEqual(job.attributes[job.attributeIndex(code: 102)!].allowedValues, ["open", "suspended", "closed"].map(Value.text))

        // Every field keeps its Perforce code.
        for (specName, specdef) in RealSpecDefs.all {
            let entity = try entity(specName)
            for field in try SpecDef.parse(specdef) {
                XCTAssertEqual(entity.attributeIndex(code: field.code!), entity.attributeIndex(named: field.tag), "\(specName).\(field.tag)")
            }
        }
    }

    func testTheVersionFieldNeverTakesAPerforceTag() throws {
        let fields = try SpecDef.parse("Name;code:1;rq;ro;;tether_version;code:2;;")
        let spec = SpecDef.spec(name: "odd", route: "r", fields: fields)
        XCTAssertEqual(spec.idField, "Name")
        XCTAssertEqual(spec.versionField, "tether_version_")
        let model = ModelBuilder.build(specs: [spec], previous: nil)
        XCTAssertEqual(model.diagnostics, [])
    }

    // MARK: tolerated quirks

    func testToleratedQuirks() throws {
        // The typemap's unknown `z` flag (p4python's table); unknown attributes too.
        let typemap = try SpecDef.parse(RealSpecDefs.typemap)
        XCTAssertEqual(typemap, [SpecDefField(tag: "TypeMap", code: 601, type: "wlist", opt: "default", key: true, len: 64,
                                              words: 2, fmt: "C")])
        XCTAssertEqual(try SpecDef.parse("A;code:7;future:thing;zz;;").first?.code, 7)
        // Extra ";;" at the end or between fields, line ends around the text.
        let plain = try SpecDef.parse(RealSpecDefs.job)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job + ";;"), plain)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job + ";;;;"), plain)
        XCTAssertEqual(try SpecDef.parse("\n " + RealSpecDefs.job + "\r\n"), plain)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job.replacingOccurrences(of: ";;User", with: ";;;;User")), plain)
        // No type: a word. No opt: optional. Values may hold ':'.
        let one = try SpecDef.parse("Thing;code:9;pre:a:b;;")
        XCTAssertEqual(one, [SpecDefField(tag: "Thing", code: 9, key: true, pre: "a:b")])
        // fmt is a display hint, kept as the server wrote it.
        XCTAssertEqual(try SpecDef.parse("A;code:1;fmt:L:len:128;;").first?.fmt, "L:len:128")
    }

    func testOldFlagsAndOpt() throws {
        func opt(_ attributes: String) throws -> String { try SpecDef.parse("A;code:1;\(attributes);;")[0].opt }
        XCTAssertEqual(try opt("rq"), "required")
        XCTAssertEqual(try opt("ro"), "always")
        XCTAssertEqual(try opt("ro;rq"), "key")
        XCTAssertEqual(try opt("rq;ro"), "key")
        XCTAssertEqual(try opt("len:3"), "optional")
        for word in ["optional", "default", "required", "once", "always", "empty", "key"] {
            XCTAssertEqual(try opt("opt:\(word)"), word)
        }
        XCTAssertEqual(try opt("rq;opt:once"), "once", "the explicit opt wins")
        // The key flag: opt key first, else the first required field, else the first field.
        XCTAssertEqual(try SpecDef.parse("A;code:1;;B;code:2;rq;;C;code:3;rq;ro;;").map(\.key), [false, false, true])
        XCTAssertEqual(try SpecDef.parse("A;code:1;;B;code:2;rq;;C;code:3;rq;;").map(\.key), [false, true, false])
        XCTAssertEqual(try SpecDef.parse("A;code:1;;B;code:2;;").map(\.key), [true, false])
    }

    // MARK: refused

    func testMalformedDefinitionsAreInvalidAndSaySo() throws {
        XCTAssertTrue(invalid("").contains("empty"))
        XCTAssertTrue(invalid(" \n").contains("empty"))
        XCTAssertTrue(invalid(";;;;").contains("no fields"))
        // A field without a tag.
        XCTAssertTrue(invalid(";code:1;;").contains("no tag"))
        XCTAssertTrue(invalid("Client;code:301;;code:302;type:date;;").contains("no tag"))
        XCTAssertTrue(invalid("Bad Tag;code:1;;").contains("Bad Tag"))
        // Missing codes: P4Win's tables from before codes.
        XCTAssertTrue(invalid(RealSpecDefs.clientWithoutCodes).contains("'Client': no code"))
        XCTAssertTrue(invalid("Client;code:301;;Owner;len:32;;").contains("'Owner': no code"))
        // Duplicate codes, tags, attributes.
        let duplicate = invalid("Client;code:301;;Owner;code:301;;")
        XCTAssertTrue(duplicate.contains("'Owner'") && duplicate.contains("'Client'") && duplicate.contains("301"), duplicate)
        XCTAssertTrue(invalid("Client;code:301;;Client;code:302;;").contains("repeats the tag 'Client'"))
        XCTAssertTrue(invalid("Client;code:301;code:302;;").contains("given twice"))
        XCTAssertTrue(invalid("Client;code:301;len:1;len:2;;").contains("given twice"))
        // Codes that are not numbers, or out of range.
        XCTAssertTrue(invalid("Client;code:abc;;").contains("'Client': code 'abc'"))
        for code in ["", "0", "-1", "+5", "3.0", " 301", "2147483648", "99999999999999999999999"] {
            XCTAssertTrue(invalid("Client;code:\(code);;").contains("'Client': code"), code)
        }
        XCTAssertNoThrow(try SpecDef.parse("Client;code:2147483647;;"))
        XCTAssertTrue(invalid("Client;code;;").contains("no value"))
        // p4python's tables carry the NNN placeholder: refused, naming the field.
        let placeholder = invalid(RealSpecDefs.groupWithPlaceholders)
        XCTAssertTrue(placeholder.contains("'Description'") && placeholder.contains("NNN"), placeholder)
        XCTAssertTrue(invalid(RealSpecDefs.streamWithPlaceholders).contains("'ParentView'"))
        // Unknown type or opt; numbers that are not.
        XCTAssertTrue(invalid("Client;code:301;type:wordy;;").contains("'Client': unknown type 'wordy'"))
        XCTAssertTrue(invalid("Client;code:301;type:;;").contains("unknown type"))
        XCTAssertTrue(invalid("Client;code:301;opt:sometimes;;").contains("unknown opt 'sometimes'"))
        for attribute in ["len", "words", "maxwords", "seq"] {
            XCTAssertTrue(invalid("Client;code:301;\(attribute):x;;").contains("\(attribute) 'x'"), attribute)
        }
        XCTAssertTrue(invalid("Client;code:301;;Owner;code:304;pre:a\u{0}b;;").contains("U+0000"))
    }

    func testEveryCutOfARealDefinitionIsRefusedOrWhole() throws {
        // A truncated string: every prefix not ending in ";;" is refused; one
        // ending there is the first fields.
        let text = RealSpecDefs.client
        let whole = try SpecDef.parse(text)
        let bytes = Array(text.utf8)
        for length in 0..<bytes.count {
            let prefix = String(decoding: bytes[..<length], as: UTF8.self)
            if prefix.hasSuffix(";;") && !prefix.hasSuffix(";;;") || length == 0 {
                if length > 0 {
                    let fields = try SpecDef.parse(prefix)
                    XCTAssertEqual(fields.map(\.tag), Array(whole.prefix(fields.count)).map(\.tag))
                }
                continue
            }
            let message = invalid(prefix)
            if prefix.hasSuffix(";;;") { continue }
            XCTAssertTrue(message.contains("cut short") || message.contains("empty") || message.contains("code"),
                          "\(length): \(message)")
        }
        XCTAssertTrue(invalid("Client;code:301;;Update;code:302;ty").contains("'Update;code:302;ty'"))
    }

    func testNeverCrashesOnOddBytes() {
        // Multi-byte characters and separators side by side.
        for text in ["é;;", "é;code:1;;", ";\u{301};;", "A;code:1;val:é/\u{301};;", "A\u{301};code:1;;", ";", ":", ";:;;",
                     "A;code:1;;;", String(repeating: ";", count: 1001), "A;code:1;val:///;;"] {
            _ = try? SpecDef.parse(text)
        }
        XCTAssertEqual(try SpecDef.parse("A;code:1;val:///;;")[0].val, ["", "", "", ""])
        XCTAssertEqual(try SpecDef.parse("Ünïcode;code:1;;")[0].tag, "Ünïcode")
        // Tags are told apart by their bytes, as the model names attributes.
        XCTAssertEqual(try SpecDef.parse("e\u{301};code:1;;\u{E9};code:2;;").count, 2)
    }
}
