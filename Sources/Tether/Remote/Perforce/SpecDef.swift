/// One field of a Perforce spec definition, as Perforce's own decoder reads
/// it (`SpecElem::Decode`), so a parsed specdef can be checked against what
/// `p4 spec -o` shows.
public struct SpecDefField: Sendable, Equatable {
    /// The field's name, as forms and tagged output spell it ("Client").
    public var tag: String
    /// Perforce's numeric code for the field (`Client` is 301). A field
    /// without `code:` has its index in the specdef (0, 1, 2...); `code:NNN`
    /// reads as 0, Perforce's "AutoId" (a code the server gives when the
    /// spec is saved), which several fields may share.
    public var code: Int
    /// word, wlist, select, line, llist, date, text or bulk.
    public var type: String
    /// optional, default, required, once, always, empty or key.
    public var opt: String
    /// True for the one field that names a record: the spec's id field.
    public var key: Bool
    public var len: Int
    /// Words on a line (a word or wlist): 1 unless given, at most 10.
    public var words: Int
    public var maxwords: Int
    /// L, R, I or C: a display hint; nil for Perforce's `normal` (none
    /// given, or a value Perforce does not know, which it ignores).
    public var fmt: String?
    public var seq: Int
    /// isolate or propagate (streams); nil for Perforce's `none`.
    public var open: String?
    /// The preset (default) value, such as `$user` or `$now`.
    public var pre: String?
    /// The `val:` list split on `/`; empty when the field has none.
    public var val: [String]

    public init(tag: String, code: Int, type: String = "word", opt: String = "optional", key: Bool = false,
                len: Int = 0, words: Int = 1, maxwords: Int = 0, fmt: String? = nil, seq: Int = 0,
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

/// Perforce spec definitions ("specdef" strings), as servers send them in
/// the `specdef` field of tagged output (`p4 -ztag client -o`) and as client
/// libraries keep them, read as Perforce's own decoder reads them
/// (`Spec::Decode` and `SpecElem::Decode`, support/specdef.cc in Perforce's
/// sources):
/// - a field is a tag, then `;`-separated attributes up to an empty one
///   (`;;`) or the end of the text: the last field may end with `;;`, a
///   single `;` or nothing (a 2012.1 server sends
///   `Triggers;code:551;type:wlist;words:4;len:64;opt:default;`);
/// - attributes come in any order, a later one wins; `code`, `len`,
///   `words`, `maxwords` and `seq` read as C's `atoi` (`code:NNN`, the
///   placeholder of 2019.2+ built-ins, is 0); unknown attributes are
///   ignored, and so is a `fmt` Perforce does not know;
/// - a field without `code` has its index (`Spec::Encode` leaves the code
///   out exactly then); `words` is 1 unless given (at most 10), `len`,
///   `maxwords` and `seq` 0; no `type` is a word;
/// - the opt: `z` (an empty list allowed) makes it `empty`; with no opt (or
///   `optional`) the old flags decide: `rq` required, `ro` always, both
///   key, neither optional; `opt:required` with `ro` is key (pre-2003.1
///   servers wrote ro;rq so); any other opt is as given.
///
/// Refused as Perforce refuses (TetherError .invalid, naming the field): an
/// unknown `type`, `opt` or `open` value. Refused beyond the decoder, for
/// what no form or model could address: an empty text, no field at all, a
/// field with attributes but no tag, a tag holding a space, a control
/// character or ':', a tag given twice, U+0000. White space around the
/// whole text and empty fields (`;;;;`) are skipped. Codes are not checked:
/// fields may share one (0 above all); the model gives such fields codes of
/// their own (see `spec`).
public enum SpecDef {
    public static let types: Set<String> = ["word", "wlist", "select", "line", "llist", "date", "text", "bulk"]
    public static let opts: Set<String> = ["optional", "default", "required", "once", "always", "empty", "key"]
    /// Perforce's display hints; `normal` is none.
    public static let fmts: Set<String> = ["normal", "L", "R", "I", "C"]
    public static let opens: Set<String> = ["none", "isolate", "propagate"]
    /// The list types: one value per line in forms, `View0`, `View1`, ... in
    /// tagged output; one list value in the model.
    public static let listTypes: Set<String> = ["wlist", "llist"]
    /// Perforce's forms split a line into at most this many words.
    public static let maxWords = 10
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

        var fields: [SpecDefField] = []
        var fieldByTag: [ExactString: Int] = [:]  // by bytes, as the model names attributes
        var position = start
        /// The next `;`-separated part from `position`, which moves past its `;`.
        func nextPart() -> Range<Int> {
            var stop = position
            while stop < end, bytes[stop] != semicolon { stop += 1 }
            defer { position = stop < end ? stop + 1 : end }
            return position..<stop
        }
        while position < end {
            let tag = nextPart()
            var attributes: [Range<Int>] = []
            while position < end {
                let part = nextPart()
                if part.isEmpty { break }  // ";;" ends the field
                attributes.append(part)
            }
            if tag.isEmpty && attributes.isEmpty { continue }  // an empty field: nothing to read
            let field = try parseField(bytes, tag: tag, attributes, index: fields.count)
            if let first = fieldByTag[ExactString(field.tag)] {
                throw invalid("field \(fields.count + 1) repeats the tag \(quoted(field.tag)) of field \(first + 1)")
            }
            fieldByTag[ExactString(field.tag)] = fields.count
            fields.append(field)
        }
        guard !fields.isEmpty else { throw invalid("the specdef has no fields") }
        fields[idFieldIndex(fields)].key = true
        return fields
    }

    /// `fields` as a specdef, written as Perforce's `Spec::Encode` writes
    /// one (a code left out where it is the field's index, `rq`/`ro` for
    /// the opts they stand for); `empty` is written `opt:default;z`, as the
    /// built-ins do, which servers before `z` read as `default`. `parse`
    /// reads it back into the same fields.
    public static func encode(_ fields: [SpecDefField]) -> String {
        var text = ""
        for (index, field) in fields.enumerated() {
            text += field.tag
            if field.code != index { text += ";code:\(field.code)" }
            if field.type != "word" { text += ";type:\(field.type)" }
            switch field.opt {
            case "optional", "key": break
            case "empty": text += ";opt:default;z"
            default: text += ";opt:\(field.opt)"
            }
            if let fmt = field.fmt { text += ";fmt:\(fmt)" }
            if let open = field.open { text += ";open:\(open)" }
            if field.words != 1 { text += ";words:\(field.words)" }
            if field.maxwords != 0 { text += ";maxwords:\(field.maxwords)" }
            if field.opt == "required" || field.opt == "key" { text += ";rq" }
            if ["once", "always", "key"].contains(field.opt) { text += ";ro" }
            if field.seq != 0 { text += ";seq:\(field.seq)" }
            if field.len != 0 { text += ";len:\(field.len)" }
            if let pre = field.pre { text += ";pre:\(pre)" }
            if !field.val.isEmpty { text += ";val:" + field.val.joined(separator: "/") }
            text += ";;"
        }
        return text
    }

    /// The field that names a record. Perforce marks it `rq;ro` (opt key):
    /// `p4 spec -o` lists it as `key` (`Client`, `Change`, `User`, `Stream`).
    /// Specs without one (job, protect, triggers, typemap, spec, license,
    /// hotfiles, ldap): a jobspec reserves field 101 for the job's name and
    /// marks it only `required` (a new job's name may be left as `new` for
    /// the server to number), and lists it first; so without a key the first
    /// required field names the record, else the first field (the tables
    /// with one record: protect, triggers, typemap, license, hotfiles).
    public static func idFieldIndex(_ fields: [SpecDefField]) -> Int {
        fields.firstIndex { $0.opt == "key" } ?? fields.firstIndex { $0.opt == "required" } ?? 0
    }

    /// A parsed specdef as the core's Spec: each field keeps its Perforce
    /// code, list types become one JSON list value, other types text; a
    /// select's values become its allowed values (a select without `val:`,
    /// such as a change's JobStatus, accepts any); `required` and `key`
    /// fields are required. The model makes the id field text whatever its
    /// type: specs that name no record (typemap, triggers, protect) get
    /// their first field, a list, as a stand-in. A code the model cannot
    /// keep (0, Perforce's AutoId; a code out of range or given twice) gets
    /// one of the model's own, with a diagnostic, as an `x-tether-code`
    /// collision does; the other fields keep theirs.
    public static func spec(name: String, route: String, fields: [SpecDefField]) -> Spec {
        let idField = fields.first(where: \.key)?.tag ?? (fields.isEmpty ? "" : fields[idFieldIndex(fields)].tag)
        var version = versionField
        while fields.contains(where: { $0.tag.hasSameBytes(as: version) }) { version += "_" }
        let fieldSpecs = fields.map { field in
            FieldSpec(name: field.tag, type: listTypes.contains(field.type) ? .json : .text,
                      code: Int64(field.code), isRequired: field.opt == "required" || field.opt == "key",
                      allowedValues: field.type == "select" && !field.val.isEmpty ? field.val.map(Value.text) : nil)
        }
        return Spec(name: name, route: route, idField: idField, versionField: version, fields: fieldSpecs,
                    operations: .all)
    }

    // MARK: one field

    private static func parseField(_ bytes: [UInt8], tag tagRange: Range<Int>, _ attributes: [Range<Int>],
                                   index: Int) throws -> SpecDefField {
        let tag = string(bytes, tagRange)
        let number = index + 1
        guard !tag.isEmpty else {
            let first = attributes.first.map { string(bytes, $0) } ?? ""
            throw invalid("field \(number) has no tag (it begins with \(quoted(";" + first, limit: 40)))")
        }
        guard !bytes[tagRange].contains(colon) else {
            throw invalid("field \(number) has no tag: it begins with the attribute \(quoted(tag, limit: 40))")
        }
        guard !bytes[tagRange].contains(where: { $0 <= 0x20 || $0 == 0x7F }) else {
            throw invalid("field \(number): the tag \(quoted(tag, limit: 40)) holds a space or a control character")
        }
        func fail(_ message: String) -> TetherError { invalid("field \(quoted(tag)): \(message)") }

        var field = SpecDefField(tag: tag, code: index)
        var required = false, readOnly = false, allowsEmpty = false
        for part in attributes {
            let separator = bytes[part].firstIndex(of: colon)
            let name = string(bytes, part.lowerBound..<(separator ?? part.upperBound))
            // A valued attribute written without ':' reads as empty.
            let valueRange = separator.map { ($0 + 1)..<part.upperBound } ?? part.upperBound..<part.upperBound
            let value = string(bytes, valueRange)
            switch name {
            case "code": field.code = atoi(bytes[valueRange])
            case "words": field.words = min(atoi(bytes[valueRange]), maxWords)
            case "maxwords": field.maxwords = atoi(bytes[valueRange])
            case "len": field.len = atoi(bytes[valueRange])
            case "seq": field.seq = atoi(bytes[valueRange])
            case "type":
                guard types.contains(value) else {
                    throw fail("unknown type \(quoted(value, limit: 20)) (Perforce's types: word, wlist, select, line, llist, date, text, bulk)")
                }
                field.type = value
            case "opt":
                guard opts.contains(value) else {
                    throw fail("unknown opt \(quoted(value, limit: 20)) (optional, default, required, once, always, empty or key)")
                }
                field.opt = value
            case "open":
                guard opens.contains(value) else {
                    throw fail("unknown open \(quoted(value, limit: 20)) (none, isolate or propagate)")
                }
                field.open = value == "none" ? nil : value
            case "fmt" where fmts.contains(value): field.fmt = value == "normal" ? nil : value
            case "pre": field.pre = value.isEmpty ? nil : value
            case "val": field.val = value.isEmpty ? [] : value.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            case "rq": required = true
            case "ro": readOnly = true
            case "z": allowsEmpty = true
            default: break  // an attribute Perforce does not know, or a fmt it ignores
            }
        }
        if allowsEmpty {
            field.opt = "empty"
        } else if field.opt == "optional" {
            field.opt = required && readOnly ? "key" : required ? "required" : readOnly ? "always" : "optional"
        } else if field.opt == "required" && readOnly {
            field.opt = "key"
        }
        return field
    }

    private static let semicolon = UInt8(ascii: ";"), colon = UInt8(ascii: ":")

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }

    /// C's atoi, as Perforce reads numbers: white space, a sign, the digits
    /// up to the first other byte; 0 without digits. Kept within a C int.
    static func atoi<Bytes: Collection>(_ bytes: Bytes) -> Int where Bytes.Element == UInt8 {
        var index = bytes.startIndex
        while index < bytes.endIndex, isSpace(bytes[index]) { index = bytes.index(after: index) }
        var negative = false
        if index < bytes.endIndex, bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") {
            negative = bytes[index] == UInt8(ascii: "-")
            index = bytes.index(after: index)
        }
        var value = 0
        while index < bytes.endIndex, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
            value = min(value * 10 + Int(bytes[index] - UInt8(ascii: "0")), Int(Int32.max) + 1)
            index = bytes.index(after: index)
        }
        return negative ? max(-value, Int(Int32.min)) : min(value, Int(Int32.max))
    }

    /// Slices end at ASCII bytes, so they are whole UTF-8.
    private static func string(_ bytes: [UInt8], _ range: Range<Int>) -> String {
        String(decoding: bytes[range], as: UTF8.self)
    }

    static func quoted(_ text: String, limit: Int = 64) -> String {
        let scalars = text.unicodeScalars
        return scalars.count <= limit ? "'\(text)'" : "'\(String(String.UnicodeScalarView(scalars.prefix(limit))))…'"
    }

    static func invalid(_ message: String) -> TetherError { TetherError(.invalid, "specdef: \(message)") }
}
