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
            XCTAssertEqual(Set(fields.map(\.code)).count, fields.count, "\(name): every field has its own code")
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
        XCTAssertEqual(update.words, 1, "words: 1 unless given")
        XCTAssertEqual(update.maxwords, 0)
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
                XCTAssertEqual(entity.attributeIndex(code: field.code), entity.attributeIndex(named: field.tag), "\(specName).\(field.tag)")
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

    // MARK: Perforce's decoder, case by case (issue 23)

    /// `z` (an empty list allowed; P4Perl 2026.1's protect, triggers,
    /// typemap and hotfiles) makes the opt `empty`, whatever the opt says.
    func testZMakesTheOptEmpty() throws {
        let builtins = Dictionary(uniqueKeysWithValues: RealSpecDefs.p4perl2026.map { ($0.name, $0.specdef) })
        for (name, tag) in [("protect", "Protections"), ("triggers", "Triggers"), ("typemap", "TypeMap"), ("hotfiles", "HotFiles")] {
            XCTAssertEqual(try field(try SpecDef.parse(builtins[name]!), tag).opt, "empty", name)
        }
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.typemap),
                       [SpecDefField(tag: "TypeMap", code: 601, type: "wlist", opt: "empty", key: true, len: 64, words: 2, fmt: "C")])
        XCTAssertEqual(try SpecDef.parse("A;z;opt:required;rq;ro;;")[0].opt, "empty", "z wins, in any order")
        XCTAssertEqual(try SpecDef.parse("A;opt:empty;;")[0].opt, "empty")
    }

    /// `code:NNN` (P4Perl 2026.1's group, stream and repo) is atoi("NNN"),
    /// 0: Perforce's AutoId, which several fields share.
    func testCodeNNNIsZeroAndFieldsMayShareIt() throws {
        let builtins = Dictionary(uniqueKeysWithValues: RealSpecDefs.p4perl2026.map { ($0.name, $0.specdef) })
        let group = try SpecDef.parse(builtins["group"]!)
        XCTAssertEqual(group.filter { $0.code == 0 }.map(\.tag), ["Description", "MaxMemory", "IdleTimeout"])
        XCTAssertEqual(try field(group, "Group").code, 401)
        XCTAssertTrue(try field(group, "Group").key)
        let stream = try SpecDef.parse(builtins["stream"]!)
        XCTAssertEqual(stream.filter { $0.code == 0 }.map(\.tag), ["ParentView", "Components"])
        XCTAssertEqual(try field(stream, "ParentView").opt, "required")
        XCTAssertEqual(try field(stream, "ParentView").pre, "inherit")
        let repo = try SpecDef.parse(builtins["repo"]!)
        XCTAssertEqual(repo.filter { $0.code == 0 }.count, 4)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.groupWithPlaceholders).filter { $0.code == 0 }.count, 3)
        XCTAssertEqual(try SpecDef.parse("A;code:12abc;;B;code:;;C;code:-3;;").map(\.code), [12, 0, -3], "atoi")
        XCTAssertEqual(try SpecDef.parse("A;code:301;;B;code:301;;").map(\.code), [301, 301], "not checked: shared")
    }

    /// Codes 0 (and codes given twice) get codes of their own in the
    /// model, each with a diagnostic; every real code stays exact.
    func testSharedCodesGetCodesOfTheirOwnInTheModel() throws {
        let builtins = Dictionary(uniqueKeysWithValues: RealSpecDefs.p4perl2026.map { ($0.name, $0.specdef) })
        let specs = try ["group", "stream", "repo"].map { SpecDef.spec(name: $0, route: $0, fields: try SpecDef.parse(builtins[$0]!)) }
        let model = ModelBuilder.build(specs: specs, previous: nil)
        XCTAssertEqual(model.entities.count, 3)
        for (name, fields) in try ["group", "stream", "repo"].map({ ($0, try SpecDef.parse(builtins[$0]!)) }) {
            let entity = try XCTUnwrap(model.entity(named: name))
            for field in fields {
                let attribute = entity.attributes[try XCTUnwrap(entity.attributeIndex(named: field.tag))]
                if field.code == 0 {
                    XCTAssertGreaterThan(attribute.code, 0, "\(name).\(field.tag)")
                    XCTAssertTrue(model.diagnostics.contains { $0.entity == name && $0.attribute == field.tag }, "\(name).\(field.tag)")
                } else {
                    XCTAssertEqual(attribute.code, field.code, "\(name).\(field.tag): Perforce's code")
                }
            }
            XCTAssertEqual(Set(entity.attributes.map(\.code)).count, entity.attributes.count, name)
        }
        XCTAssertEqual(model.diagnostics.count, 3 + 2 + 4)
        let group = try XCTUnwrap(model.entity(named: "group"))
        XCTAssertEqual(group.attributes[group.attributeIndex(code: 401)!].name, "Group")
        XCTAssertEqual(group.attributes[group.attributeIndex(code: 406)!].name, "Timeout")

        // A code given twice: the first (the id first) keeps it.
        let twice = SpecDef.spec(name: "t", route: "t", fields: try SpecDef.parse("A;code:5;rq;ro;;B;code:5;;"))
        let entity = try XCTUnwrap(ModelBuilder.build(specs: [twice], previous: nil).entity(named: "t"))
        XCTAssertEqual(entity.attributes[entity.attributeIndex(code: 5)!].name, "A")
    }

    /// A field without `code` has its index (P4Win's 97.3 client).
    func testAFieldWithoutCodeHasItsIndex() throws {
        let fields = try SpecDef.parse(RealSpecDefs.clientWithoutCodes)
        XCTAssertEqual(fields.map(\.tag), ["Client", "Date", "Owner", "Description", "Root", "Options", "View"])
        XCTAssertEqual(fields.map(\.code), Array(0..<7))
        XCTAssertEqual(fields.filter(\.key).map(\.tag), ["Client"])
        XCTAssertEqual(try SpecDef.parse("A;code:301;;B;len:32;;").map(\.code), [301, 1])
        let model = ModelBuilder.build(specs: [SpecDef.spec(name: "client", route: "c", fields: fields)], previous: nil)
        let client = try XCTUnwrap(model.entity(named: "client"))
        XCTAssertEqual(client.attributes[client.attributeIndex(code: 4)!].name, "Root", "index codes are real")
        XCTAssertEqual(model.diagnostics.map(\.attribute), ["Client"], "only code 0 is given another")
    }

    /// The last field may end with a single `;` or nothing (a 2012.1
    /// server's triggers and typemap).
    func testTheLastFieldMayEndWithOneSemicolonOrNothing() throws {
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.triggers2012),
                       [SpecDefField(tag: "Triggers", code: 551, type: "wlist", opt: "default", key: true, len: 64, words: 4)])
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.typemap2012),
                       [SpecDefField(tag: "TypeMap", code: 601, type: "wlist", opt: "default", key: true, len: 64, words: 2)])
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.protect2012)[0].opt, "default")
        let whole = try SpecDef.parse(RealSpecDefs.job)
        XCTAssertEqual(try SpecDef.parse(String(RealSpecDefs.job.dropLast())), whole)
        XCTAssertEqual(try SpecDef.parse(String(RealSpecDefs.job.dropLast(2))), whole)
        XCTAssertEqual(try SpecDef.parse("Job"), [SpecDefField(tag: "Job", code: 0, key: true)])
    }

    /// Keys in any order, a later one winning; unknown keys ignored.
    func testKeysInAnyOrderAndUnknownKeysIgnored() throws {
        let one = try SpecDef.parse("A;len:3;future:thing;zz;type:line;code:7;seq:2;;")[0]
        XCTAssertEqual(one, SpecDefField(tag: "A", code: 7, type: "line", key: true, len: 3, seq: 2))
        XCTAssertEqual(try SpecDef.parse("A;code:1;code:2;len:1;len:9;;")[0].code, 2)
        XCTAssertEqual(try SpecDef.parse("A;code:1;len:1;len:9;;")[0].len, 9)
        XCTAssertEqual(try SpecDef.parse("A;code:1;pre:a:b;;")[0].pre, "a:b", "values may hold ':'")
        XCTAssertNil(try SpecDef.parse("A;code:1;pre:;;")[0].pre)
    }

    /// An unknown `fmt` is ignored (P4Perl's group Description has
    /// `fmt:L:len:128`); `normal` is none.
    func testUnknownFmtIgnored() throws {
        XCTAssertNil(try SpecDef.parse("A;code:1;fmt:L:len:128;;")[0].fmt)
        XCTAssertEqual(try SpecDef.parse("A;code:1;fmt:R;fmt:wide;;")[0].fmt, "R")
        XCTAssertNil(try SpecDef.parse("A;code:1;fmt:normal;;")[0].fmt)
        let group = try SpecDef.parse(RealSpecDefs.groupWithPlaceholders)
        XCTAssertNil(try field(group, "Description").fmt)
        XCTAssertEqual(try field(group, "Description").len, 0)
        for fmt in ["L", "R", "I", "C"] { XCTAssertEqual(try SpecDef.parse("A;fmt:\(fmt);;")[0].fmt, fmt) }
    }

    /// Perforce refuses an unknown type, opt or open: so does Tether, naming the field.
    func testUnknownTypeOptOrOpenIsRefusedNamingTheField() throws {
        XCTAssertTrue(invalid("Client;code:301;type:wordy;;").contains("'Client': unknown type 'wordy'"))
        XCTAssertTrue(invalid("Client;code:301;type:;;").contains("'Client': unknown type ''"))
        XCTAssertTrue(invalid("A;code:1;;Client;code:301;opt:sometimes;;").contains("'Client': unknown opt 'sometimes'"))
        XCTAssertTrue(invalid("Owner;code:704;open:always;;").contains("'Owner': unknown open 'always'"))
        XCTAssertEqual(try SpecDef.parse("A;open:isolate;;B;open:propagate;;C;open:none;;").map(\.open), ["isolate", "propagate", nil])
        XCTAssertTrue(invalid("Client;code:301;type;;").contains("unknown type ''"), "no value: empty")
    }

    /// rq/ro with opt, as SpecElem::Decode resolves them.
    func testRqRoResolveWithOpt() throws {
        func opt(_ attributes: String) throws -> String { try SpecDef.parse("A;code:1;\(attributes);;")[0].opt }
        XCTAssertEqual(try opt("len:3"), "optional")
        XCTAssertEqual(try opt("rq"), "required")
        XCTAssertEqual(try opt("ro"), "always")
        XCTAssertEqual(try opt("ro;rq"), "key")
        XCTAssertEqual(try opt("rq;ro"), "key")
        XCTAssertEqual(try opt("opt:optional;rq;ro"), "key", "opt:optional is no opt")
        XCTAssertEqual(try opt("opt:required;ro"), "key", "pre-2003.1 servers' ro;rq")
        XCTAssertEqual(try opt("opt:required"), "required")
        XCTAssertEqual(try opt("rq;opt:once"), "once", "any other opt as given")
        XCTAssertEqual(try opt("opt:default;rq;ro"), "default")
        XCTAssertEqual(try opt("opt:always;rq"), "always")
        XCTAssertEqual(try opt("opt:default;z"), "empty")
        for word in ["default", "required", "once", "always", "empty", "key"] { XCTAssertEqual(try opt("opt:\(word)"), word) }
    }

    /// words 1 unless given (at most 10); maxwords, len, seq 0; numbers as atoi.
    func testNumberDefaults() throws {
        XCTAssertEqual(try SpecDef.parse("A;;")[0], SpecDefField(tag: "A", code: 0, key: true, len: 0, words: 1, maxwords: 0, seq: 0))
        XCTAssertEqual(try SpecDef.parse("A;words:12;;")[0].words, 10)
        XCTAssertEqual(try SpecDef.parse("A;words:3;maxwords:4;len:x;seq: 7z;;")[0],
                       SpecDefField(tag: "A", code: 0, key: true, len: 0, words: 3, maxwords: 4, seq: 7))
        XCTAssertEqual(try SpecDef.parse("A;len:99999999999999999999;;")[0].len, Int(Int32.max))
    }

    /// The id field: the one resolving to key; in specs without one, the
    /// first required field, else the first field.
    func testTheIdField() throws {
        let builtins = Dictionary(uniqueKeysWithValues: RealSpecDefs.p4perl2026.map { ($0.name, $0.specdef) })
        let ids = ["job": "Job", "protect": "SubPath", "triggers": "Triggers", "typemap": "TypeMap", "spec": "Fields",
                   "license": "License", "hotfiles": "HotFiles", "ldap": "Name", "client": "Client", "change": "Change",
                   "stream": "Stream", "group": "Group", "repo": "Repo", "remote": "RemoteID", "server": "ServerID",
                   "user": "User", "depot": "Depot", "label": "Label", "branch": "Branch"]
        XCTAssertEqual(Set(ids.keys), Set(builtins.keys))
        for (name, specdef) in builtins {
            XCTAssertEqual(try SpecDef.parse(specdef).filter(\.key).map(\.tag), [ids[name]!], name)
        }
    }

    /// Every P4Perl 2026.1 built-in parses, writes back the same, and models.
    func testEveryP4Perl2026BuiltinParsesEncodesAndModels() throws {
        var specs: [Spec] = []
        for (name, specdef) in RealSpecDefs.p4perl2026 + [("triggers2012", RealSpecDefs.triggers2012),
                                                           ("typemap2012", RealSpecDefs.typemap2012),
                                                           ("p4win", RealSpecDefs.clientWithoutCodes)] {
            let fields = try SpecDef.parse(specdef)
            XCTAssertEqual(try SpecDef.parse(SpecDef.encode(fields)), fields, name)
            specs.append(SpecDef.spec(name: name, route: name, fields: fields))
        }
        let model = ModelBuilder.build(specs: specs, previous: nil)
        XCTAssertEqual(model.entities.count, specs.count)
        XCTAssertTrue(model.diagnostics.allSatisfy { $0.message.contains("code 0") }, "\(model.diagnostics)")
        // Perforce's own encoding: codes left out where they are the index, rq;ro for key.
        XCTAssertEqual(SpecDef.encode(try SpecDef.parse("A;code:0;rq;ro;;B;code:1;opt:default;z;;C;code:9;ro;fmt:L;;")),
                       "A;rq;ro;;B;opt:default;z;;C;code:9;opt:always;fmt:L;ro;;")
    }

    // MARK: beyond the decoder: what no form could address

    func testWhatNoFormCouldAddressIsRefused() throws {
        XCTAssertTrue(invalid("").contains("empty"))
        XCTAssertTrue(invalid(" \n").contains("empty"))
        XCTAssertTrue(invalid(";;;;").contains("no fields"))
        XCTAssertTrue(invalid(";code:1;;").contains("no tag"))
        XCTAssertTrue(invalid("Client;code:301;;code:302;type:date;;").contains("no tag"))
        XCTAssertTrue(invalid("Bad Tag;code:1;;").contains("Bad Tag"))
        XCTAssertTrue(invalid("Client;code:301;;Client;code:302;;").contains("repeats the tag 'Client'"))
        XCTAssertTrue(invalid("Client;code:301;;Owner;code:304;pre:a\u{0}b;;").contains("U+0000"))
    }

    func testEmptyFieldsAndWhiteSpaceAreSkipped() throws {
        let plain = try SpecDef.parse(RealSpecDefs.job)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job + ";;"), plain)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job + ";;;;"), plain)
        XCTAssertEqual(try SpecDef.parse("\n " + RealSpecDefs.job + "\r\n"), plain)
        XCTAssertEqual(try SpecDef.parse(RealSpecDefs.job.replacingOccurrences(of: ";;User", with: ";;;;User")), plain)
    }

    func testEveryCutOfARealDefinitionParsesOrNamesAnUnknownValue() throws {
        // Perforce reads a cut text as its first fields: a cut inside a
        // type, opt or open value is an unknown one.
        let whole = try SpecDef.parse(RealSpecDefs.stream)
        let bytes = Array(RealSpecDefs.stream.utf8)
        for length in 1..<bytes.count {
            let prefix = String(decoding: bytes[..<length], as: UTF8.self)
            do {
                let fields = try SpecDef.parse(prefix)
                XCTAssertLessThanOrEqual(fields.count, whole.count)
                XCTAssertEqual(Array(fields.dropLast()).map(\.tag), Array(whole.prefix(fields.count - 1)).map(\.tag), "\(length)")
            } catch let error as TetherError {
                XCTAssertTrue(error.message.contains("unknown"), "\(length): \(error.message)")
            }
        }
    }

    func testNeverCrashesOnOddBytes() {
        for text in ["é;;", "é;code:1;;", ";\u{301};;", "A;code:1;val:é/\u{301};;", "A\u{301};code:1;;", ";", ":", ";:;;",
                     "A;code:1;;;", String(repeating: ";", count: 1001), "A;code:1;val:///;;", "A;code:--1;;", "A;code:+;;"] {
            _ = try? SpecDef.parse(text)
        }
        XCTAssertEqual(try SpecDef.parse("A;code:1;val:///;;")[0].val, ["", "", "", ""])
        XCTAssertEqual(try SpecDef.parse("Ünïcode;code:1;;")[0].tag, "Ünïcode")
        XCTAssertEqual(try SpecDef.parse("e\u{301};code:1;;\u{E9};code:2;;").count, 2)
    }

    // MARK: the spec of specs

    /// `p4 jobspec -o` of a server with the default jobspec and a custom
    /// field, as P4Python's fetch_jobspec() gives it.
    static let jobspecForm: RecordFields = [
        ("Fields", .array(["101 Job word 32 required", "102 Status select 10 required", "103 User word 32 required",
                           "104 Date date 20 always", "105 Description text 0 required", "NNN Severity select 10 optional",
                           "107 Tags wlist 32 default"].map(JSON.string))),
        ("Values", .array(["Status open/suspended/closed", "Severity A/B/C"].map(JSON.string))),
        ("Presets", .array(["Status open", "User $user", "Date $now", "Description \"<enter description here>\""].map(JSON.string))),
        ("Formats", .array(["Status 2 L", "Severity 3 R", "Tags 0 wide"].map(JSON.string))),
        ("Words", .array(["Tags 2"].map(JSON.string))),
        ("Comments", .string("# A Perforce Job Specification.\n")),
    ]

    func testAJobspecFormIntoItsSpecdef() throws {
        let fields = try SpecDef.fromForm(Self.jobspecForm)
        XCTAssertEqual(fields.map(\.tag), ["Job", "Status", "User", "Date", "Description", "Severity", "Tags"])
        XCTAssertEqual(fields.map(\.code), [101, 102, 103, 104, 105, 0, 107])
        XCTAssertEqual(fields[1], SpecDefField(tag: "Status", code: 102, type: "select", opt: "required", len: 10, fmt: "L",
                                               seq: 2, pre: "open", val: ["open", "suspended", "closed"]))
        XCTAssertEqual(fields[4].pre, "<enter description here>")
        XCTAssertEqual(fields[5].fmt, "R")
        XCTAssertEqual(fields[6], SpecDefField(tag: "Tags", code: 107, type: "wlist", opt: "default", len: 32, words: 2))
        XCTAssertEqual(fields.filter(\.key).map(\.tag), ["Job"])
        // The spec built from it models: Severity's AutoId gets a code of its own.
        let model = ModelBuilder.build(specs: [SpecDef.spec(name: "job", route: "job", fields: fields)], previous: nil)
        let job = try XCTUnwrap(model.entity(named: "job"))
        XCTAssertEqual(job.attributes[job.attributeIndex(code: 107)!].name, "Tags")
        XCTAssertEqual(model.diagnostics.map(\.attribute), ["Severity"])
        // The default jobspec's form reads as the built-in job specdef does.
        let builtin: RecordFields = [
            ("Fields0", .string("101 Job word 32 required")), ("Fields1", .string("102 Status select 10 required")),
            ("Fields2", .string("103 User word 32 required")), ("Fields3", .string("104 Date date 20 always")),
            ("Fields4", .string("105 Description text 0 required")),
            ("Values0", .string("Status open/suspended/closed")),
            ("Presets0", .string("Status open")), ("Presets1", .string("User $user")), ("Presets2", .string("Date $now")),
            ("Presets3", .string("Description $blank")),
        ]
        XCTAssertEqual(try SpecDef.fromForm(builtin), try SpecDef.parse(RealSpecDefs.job))
        // A stream spec's form: Openable and Maxwords; lists as one text.
        let stream = try SpecDef.fromForm([
            ("Fields", .string("701 Stream word 64 key\n710 Paths wlist 64 required\n704 Owner word 32 optional\n")),
            ("Openable", .array([.string("Owner isolate"), .string("Paths propagate")])),
            ("Maxwords", .array([.string("Paths 3")])), ("Words", .array([.string("Paths 2")])),
        ])
        XCTAssertEqual(stream.map(\.open), [nil, "propagate", "isolate"])
        XCTAssertEqual(stream[1].maxwords, 3)
        XCTAssertEqual(stream.filter(\.key).map(\.tag), ["Stream"])
    }

    func testAMalformedSpecFormIsRefusedNamingTheLine() throws {
        func refused(_ form: RecordFields) -> String {
            do { _ = try SpecDef.fromForm(form); XCTFail("accepted"); return "" } catch let error as TetherError {
                XCTAssertEqual(error.kind, .invalid)
                return error.message
            } catch { XCTFail("\(error)"); return "" }
        }
        func fields(_ lines: String...) -> (key: String, value: JSON) { ("Fields", .array(lines.map(JSON.string))) }
        XCTAssertTrue(refused([("Comments", .string("# none"))]).contains("no Fields"))
        XCTAssertTrue(refused([fields("101 Job")]).contains("'101 Job'"))
        XCTAssertTrue(refused([fields("101 Job wordy 32 required")]).contains("unknown type 'wordy'"))
        XCTAssertTrue(refused([fields("101 Job word 32 sometimes")]).contains("unknown opt 'sometimes'"))
        XCTAssertTrue(refused([fields("101 Job word 32 required", "102 Job word")]).contains("'Job' twice"))
        XCTAssertTrue(refused([fields("101 Job word"), ("Values", .array([.string("Status a/b")]))]).contains("'Status'"))
        XCTAssertTrue(refused([fields("101 Job word"), ("Presets", .array([.string("Job a;b")]))]).contains("';'"))
        XCTAssertTrue(refused([fields("101 Job word"), ("Openable", .array([.string("Job always")]))]).contains("unknown open"))
        XCTAssertTrue(refused([("Fields", .integer(3))]).contains("not a list"))
        XCTAssertTrue(refused([fields("101 Bad:Tag word")]).contains("no tag"))
        XCTAssertThrowsError(try SpecDef.fromForm(json: "[1]"))
        XCTAssertThrowsError(try SpecDef.fromForm(json: "{"))
    }
}
