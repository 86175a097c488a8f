/// One field of a Perforce spec definition, in Perforce's own words, so a
/// parsed specdef can be checked against what `p4 spec -o` shows.
public struct SpecDefField: Sendable, Equatable {
    /// The field's name, as forms and tagged output spell it ("Client").
    public var tag: String
    /// Perforce's numeric code for the field (`Client` is 301). Always set
    /// by `SpecDef.parse`, which refuses a field without one.
    public var code: Int?
    /// word, wlist, select, line, llist, date, text or bulk.
    public var type: String
    /// optional, default, required, once, always, empty or key.
    public var opt: String
    /// True for the one field that names a record: the spec's id field.
    public var key: Bool
    public var len: Int?
    public var words: Int?
    public var maxwords: Int?
    /// L, R, I or C: a display hint, kept as the server wrote it.
    public var fmt: String?
    public var seq: Int?
    public var open: String?
    /// The preset (default) value, such as `$user` or `$now`.
    public var pre: String?
    /// The `val:` list split on `/`; empty when the field has none.
    public var val: [String]

    public init(tag: String, code: Int?, type: String = "word", opt: String = "optional", key: Bool = false,
                len: Int? = nil, words: Int? = nil, maxwords: Int? = nil, fmt: String? = nil, seq: Int? = nil,
                open: String? = nil, pre: String? = nil, val: [String] = []) {
        self.tag = tag
        self.code = code
        self.type = type
        self.opt = opt
        self.key = key
        self.len = len
        self.words = words
        self.maxwords = maxwords
        self.fmt = fmt
        self.seq = seq
        self.open = open
        self.pre = pre
        self.val = val
    }
}

/// Perforce spec definitions ("specdef" strings): `Tag;attr:value;flag;;`
/// for each field, as servers send them in the `specdef` field of tagged
/// output (`p4 -ztag client -o`) and as client libraries keep them.
///
/// What is tolerated, and why:
/// - attributes this parser does not know (`z` in the typemap, triggers and
///   protect specdefs; anything a newer server adds) are ignored, as
///   Perforce's own clients do;
/// - a field without `type:` is a `word`: servers leave the type out for
///   words (`Client;code:301;rq;ro;seq:1;len:32;;`);
/// - a field without `opt:` or the old flags is `optional`;
/// - empty fields (`;;;;`, an extra `;;` at the end) carry nothing and are
///   skipped; white space around the whole text (a line end from a file or a
///   pipe) is dropped;
/// - `fmt:` and `open:` are display and streams hints: kept verbatim.
///
/// What is refused (TetherError .invalid, naming the field): empty text; a
/// text not ending in `;;` (cut short); a field without a tag; a tag given
/// twice; a field without `code:` (servers since 98.2 send a code for every
/// field, and codes are how the model addresses Perforce's fields); a code
/// that is not a number in 1...2^31-1, including the `NNN` placeholder an
/// administrator may type into a jobspec or streamspec (the server numbers
/// such fields when it saves the spec; a specdef carrying NNN never came from
/// a server); a code given to two fields; an unknown `type:` or `opt:`; a
/// number attribute that is not a number; an attribute given twice; U+0000.
public enum SpecDef {
    public static let types: Set<String> = ["word", "wlist", "select", "line", "llist", "date", "text", "bulk"]
    public static let opts: Set<String> = ["optional", "default", "required", "once", "always", "empty", "key"]
    /// The list types: one value per line in forms, `View0`, `View1`, ... in
    /// tagged output; one list value in the model.
    public static let listTypes: Set<String> = ["wlist", "llist"]
    /// The entity's version field. Perforce specs have none; Perforce tags
    /// are CamelCase words, so this name does not clash with a real one (and
    /// `spec` picks another if a specdef ever uses it).
    public static let versionField = "tether_version"

    public static func parse(_ text: String) throws -> [SpecDefField] {
        let bytes = Array(text.utf8)
        guard !bytes.contains(0) else { throw invalid("the specdef holds U+0000") }
        var start = 0, end = bytes.count
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        guard start < end else { throw invalid("the specdef is empty") }

        // Fields end with ";;", read left to right.
        var segments: [Range<Int>] = []
        var segmentStart = start, index = start
        while index + 1 < end {
            if bytes[index] == semicolon, bytes[index + 1] == semicolon {
                segments.append(segmentStart..<index)
                index += 2
                segmentStart = index
            } else {
                index += 1
            }
        }
        if segmentStart < end {
            let rest = string(bytes, segmentStart..<end)
            throw invalid("the specdef ends inside a field (\(quoted(rest, limit: 40))) without its closing ';;': cut short?")
        }

        var fields: [SpecDefField] = []
        var fieldByTag: [ExactString: Int] = [:]  // by bytes, as the model names attributes
        var fieldByCode: [Int: Int] = [:]
        for segment in segments where !segment.isEmpty {
            let field = try parseField(bytes, segment, number: fields.count + 1)
            if let first = fieldByTag[ExactString(field.tag)] {
                throw invalid("field \(fields.count + 1) repeats the tag \(quoted(field.tag)) of field \(first + 1)")
            }
            if let code = field.code, let first = fieldByCode[code] {
                throw invalid("field \(quoted(field.tag)) has code \(code), as field \(quoted(fields[first].tag)) does")
            }
            fieldByTag[ExactString(field.tag)] = fields.count
            if let code = field.code { fieldByCode[code] = fields.count }
            fields.append(field)
        }
        guard !fields.isEmpty else { throw invalid("the specdef has no fields") }
        fields[idFieldIndex(fields)].key = true
        return fields
    }

    /// The field that names a record. Perforce marks it `rq;ro` (opt key):
    /// `p4 spec -o` lists it as `key` (`Client`, `Change`, `User`, `Stream`).
    /// A jobspec has no key: Perforce reserves field 101 for the job's name
    /// and marks it only `required` (a new job's name may be left as `new`
    /// for the server to number), and lists it first; so without a key the
    /// first required field names the record, else the first field.
    public static func idFieldIndex(_ fields: [SpecDefField]) -> Int {
        fields.firstIndex { $0.opt == "key" } ?? fields.firstIndex { $0.opt == "required" } ?? 0
    }

    /// A parsed specdef as the core's Spec: each field keeps its Perforce
    /// code, list types become one JSON list value, other types text; a
    /// select's values become its allowed values (a select without `val:`,
    /// such as a change's JobStatus, accepts any); `required` and `key`
    /// fields are required. The model makes the id field text whatever its
    /// type: specs that name no record (typemap, triggers, protect) get
    /// their first field, a list, as a stand-in.
    public static func spec(name: String, route: String, fields: [SpecDefField]) -> Spec {
        let idField = fields.first(where: \.key)?.tag ?? (fields.isEmpty ? "" : fields[idFieldIndex(fields)].tag)
        var version = versionField
        while fields.contains(where: { $0.tag.hasSameBytes(as: version) }) { version += "_" }
        let fieldSpecs = fields.map { field in
            FieldSpec(name: field.tag, type: listTypes.contains(field.type) ? .json : .text,
                      code: field.code.map(Int64.init), isRequired: field.opt == "required" || field.opt == "key",
                      allowedValues: field.type == "select" && !field.val.isEmpty ? field.val.map(Value.text) : nil)
        }
        return Spec(name: name, route: route, idField: idField, versionField: version, fields: fieldSpecs,
                    operations: .all)
    }

    // MARK: one field

    private static func parseField(_ bytes: [UInt8], _ range: Range<Int>, number: Int) throws -> SpecDefField {
        var parts: [Range<Int>] = []
        var partStart = range.lowerBound
        for index in range where bytes[index] == semicolon {
            parts.append(partStart..<index)
            partStart = index + 1
        }
        parts.append(partStart..<range.upperBound)

        let tag = string(bytes, parts[0])
        guard !tag.isEmpty else { throw invalid("field \(number) has no tag (\(quoted(string(bytes, range), limit: 40)))") }
        guard !bytes[parts[0]].contains(colon) else {
            throw invalid("field \(number) has no tag: it begins with the attribute \(quoted(tag, limit: 40))")
        }
        guard !bytes[parts[0]].contains(where: { $0 <= 0x20 || $0 == 0x7F }) else {
            throw invalid("field \(number): the tag \(quoted(tag, limit: 40)) holds a space or a control character")
        }
        func fail(_ message: String) -> TetherError { invalid("field \(quoted(tag)): \(message)") }

        var field = SpecDefField(tag: tag, code: nil)
        var seen = Set<String>()
        var explicitOpt: String?
        var required = false, readOnly = false
        for part in parts.dropFirst() where !part.isEmpty {
            let separator = bytes[part].firstIndex(of: colon)
            let name = string(bytes, part.lowerBound..<(separator ?? part.upperBound))
            guard let separator else {
                switch name {
                case "rq": required = true
                case "ro": readOnly = true
                case _ where valued.contains(name): throw fail("the attribute '\(name)' has no value")
                default: break  // an unknown flag, such as the typemap's `z`
                }
                continue
            }
            guard valued.contains(name) else { continue }  // an attribute this parser does not know
            guard seen.insert(name).inserted else { throw fail("the attribute '\(name)' is given twice") }
            let value = string(bytes, (separator + 1)..<part.upperBound)
            func number() throws -> Int {
                guard let number = parseNumber(bytes[(separator + 1)..<part.upperBound]) else {
                    throw fail("\(name) \(quoted(value, limit: 20)) is not a number from 0 to \(Int32.max)")
                }
                return number
            }
            switch name {
            case "code":
                guard let code = parseNumber(bytes[(separator + 1)..<part.upperBound]), code > 0 else {
                    throw fail(value == "NNN"
                        ? "code NNN is the placeholder for a code the server gives when the spec is saved"
                        : "code \(quoted(value, limit: 20)) is not a number from 1 to \(Int32.max)")
                }
                field.code = code
            case "type":
                guard types.contains(value) else {
                    throw fail("unknown type \(quoted(value, limit: 20)) (Perforce's types: word, wlist, select, line, llist, date, text, bulk)")
                }
                field.type = value
            case "opt":
                guard opts.contains(value) else {
                    throw fail("unknown opt \(quoted(value, limit: 20)) (optional, default, required, once, always, empty or key)")
                }
                explicitOpt = value
            case "len": field.len = try number()
            case "words": field.words = try number()
            case "maxwords": field.maxwords = try number()
            case "seq": field.seq = try number()
            case "fmt": field.fmt = value
            case "open": field.open = value
            case "pre": field.pre = value
            case "val": field.val = value.isEmpty ? [] : value.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            default: break
            }
        }
        guard field.code != nil else { throw fail("no code (every field of a server's specdef has one)") }
        // The old flags: `rq` required, `ro` read-only (set by the server:
        // `always`), both together the record's name, required and never
        // changed once made: what `p4 spec -o` calls `key`. An explicit
        // `opt:` is the newer, exact word and wins.
        field.opt = explicitOpt ?? (required && readOnly ? "key" : required ? "required" : readOnly ? "always" : "optional")
        return field
    }

    /// The attributes that take a value.
    private static let valued: Set<String> = ["code", "type", "opt", "len", "words", "maxwords", "fmt", "seq", "open", "pre", "val"]
    private static let semicolon = UInt8(ascii: ";"), colon = UInt8(ascii: ":")

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }

    /// ASCII digits only, no sign, at most Int32.max: codes and sizes are C ints at the boundary.
    private static func parseNumber(_ digits: ArraySlice<UInt8>) -> Int? {
        guard !digits.isEmpty else { return nil }
        var value = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
            guard value <= Int(Int32.max) else { return nil }
        }
        return value
    }

    /// Slices end at ASCII bytes, so they are whole UTF-8.
    private static func string(_ bytes: [UInt8], _ range: Range<Int>) -> String {
        String(decoding: bytes[range], as: UTF8.self)
    }

    private static func quoted(_ text: String, limit: Int = 64) -> String {
        let scalars = text.unicodeScalars
        return scalars.count <= limit ? "'\(text)'" : "'\(String(String.UnicodeScalarView(scalars.prefix(limit))))…'"
    }

    private static func invalid(_ message: String) -> TetherError { TetherError(.invalid, "specdef: \(message)") }
}
