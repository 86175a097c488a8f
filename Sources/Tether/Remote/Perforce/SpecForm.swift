/// The spec of specs: the form `p4 spec -o TYPE` and `p4 jobspec -o` show
/// (Fields, Words, Formats, Values, Presets, Openable, Maxwords, Comments),
/// turned into the specdef it describes, so a host can give Tether a custom
/// jobspec from its form.
extension SpecDef {
    /// The form's lists, one line per item.
    static let formLists = ["Fields", "Words", "Formats", "Values", "Presets", "Openable", "Maxwords"]

    /// `form` as tagged output gives it (`p4 -ztag -Mj jobspec -o`: Fields0,
    /// Fields1, ...) or as client APIs do (P4Python's `fetch_jobspec()`:
    /// "Fields" a list of lines; a list may also be one text, a line each):
    /// - Fields: `code name type length opt` (length and opt may be left
    ///   out: 0, optional); a code read as `atoi` (`NNN`: 0, AutoId);
    /// - Words `name count`, Maxwords `name count`, Formats `name order
    ///   format` (the order is seq; a format Perforce does not know is
    ///   ignored), Values `name a/b/c`, Presets `name value` (a value with
    ///   spaces in double quotes), Openable `name isolate|propagate`;
    /// - Comments and any other key are ignored.
    /// The fields are then those of the specdef `encode` writes for them,
    /// read by `parse`. TetherError .invalid, naming the line: no Fields, a
    /// line too short or too long, an unknown type, opt or open, a line
    /// naming a field Fields does not define, a value holding `;` (which a
    /// specdef cannot carry), and whatever `parse` refuses.
    public static func fromForm(_ form: RecordFields) throws -> [SpecDefField] {
        let folded = TaggedRecords.folded(form, listTags: Set(formLists))
        func lines(_ list: String) throws -> [[String]] {
            guard let value = folded.first(where: { $0.key.hasSameBytes(as: list) })?.value else { return [] }
            let items: [String]
            switch value {
            case .string(let text): items = text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }).map(String.init)
            case .array(let array):
                items = try array.map {
                    guard let line = $0.stringValue else { throw formError("\(list) holds \($0.serialized()), not a line of text") }
                    return line
                }
            default: throw formError("\(list) is \(value.serialized()), not a list of lines")
            }
            return items.map(words).filter { !$0.isEmpty }
        }

        var fields: [SpecDefField] = []
        var byTag: [ExactString: Int] = [:]
        for line in try lines("Fields") {
            let shown = quoted(line.joined(separator: " "), limit: 60)
            guard (3...5).contains(line.count) else {
                throw formError("Fields line \(shown): expected code, name, type, length and opt")
            }
            let tag = line[1]
            guard types.contains(line[2]) else { throw formError("Fields line \(shown): unknown type \(quoted(line[2], limit: 20))") }
            var field = SpecDefField(tag: tag, code: atoi(line[0].utf8), type: line[2], len: line.count > 3 ? atoi(line[3].utf8) : 0)
            if line.count > 4 {
                guard opts.contains(line[4]) else { throw formError("Fields line \(shown): unknown opt \(quoted(line[4], limit: 20))") }
                field.opt = line[4]
            }
            guard byTag.updateValue(fields.count, forKey: ExactString(tag)) == nil else {
                throw formError("Fields defines \(quoted(tag)) twice")
            }
            fields.append(field)
        }
        guard !fields.isEmpty else { throw formError("the form has no Fields") }

        /// Each line of `list`: the field it names, and its other words.
        func each(_ list: String, words count: ClosedRange<Int>, _ apply: (inout SpecDefField, [String]) throws -> Void) throws {
            for line in try lines(list) {
                let shown = quoted(line.joined(separator: " "), limit: 60)
                guard count.contains(line.count) else { throw formError("\(list) line \(shown): expected \(count.lowerBound) words") }
                guard let index = byTag[ExactString(line[0])] else {
                    throw formError("\(list) line \(shown) names \(quoted(line[0])), which Fields does not define")
                }
                guard !line.contains(where: { $0.utf8.contains(semicolonByte) }) else {
                    throw formError("\(list) line \(shown): a specdef cannot carry ';'")
                }
                try apply(&fields[index], Array(line.dropFirst()))
            }
        }
        try each("Words", words: 2...2) { $0.words = min(atoi($1[0].utf8), maxWords) }
        try each("Maxwords", words: 2...2) { $0.maxwords = atoi($1[0].utf8) }
        try each("Formats", words: 2...3) { field, rest in
            field.seq = atoi(rest[0].utf8)
            if rest.count > 1, fmts.contains(rest[1]) { field.fmt = rest[1] == "normal" ? nil : rest[1] }
        }
        try each("Values", words: 2...2) { $0.val = $1[0].split(separator: "/", omittingEmptySubsequences: false).map(String.init) }
        try each("Presets", words: 2...Int.max) { $0.pre = $1.joined(separator: " ") }
        try each("Openable", words: 2...2) { field, rest in
            guard opens.contains(rest[0]) else {
                throw formError("Openable: unknown open \(quoted(rest[0], limit: 20)) for \(quoted(field.tag))")
            }
            field.open = rest[0] == "none" ? nil : rest[0]
        }
        for field in fields where field.tag.utf8.contains(semicolonByte) {
            throw formError("the field name \(quoted(field.tag)) holds ';', which a specdef cannot carry")
        }
        return try parse(encode(fields))
    }

    /// The form as a JSON object's text; TetherError .invalid if it is not one.
    public static func fromForm(json: String) throws -> [SpecDefField] {
        let form: JSON
        do { form = try JSON.parse(json) } catch let error as TetherError {
            throw formError("the form is not JSON: \(error.message)")
        }
        guard let members = form.objectValue else { throw formError("the form is not a JSON object") }
        return try fromForm(members)
    }

    /// A form line's words, split at white space; a word in double quotes
    /// may hold spaces (the quotes are dropped), as Perforce's forms write
    /// a preset such as `"<enter description here>"`.
    private static func words(_ line: String) -> [String] {
        var words: [String] = [], word = "", inWord = false, quoted = false
        for character in line {
            if quoted {
                if character == "\"" { quoted = false } else { word.append(character) }
            } else if character == "\"" && !inWord {
                quoted = true
                inWord = true
            } else if character == " " || character == "\t" {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if inWord { words.append(word) }
        return words
    }

    private static let semicolonByte = UInt8(ascii: ";")

    private static func formError(_ message: String) -> TetherError { TetherError(.invalid, "spec form: \(message)") }
}
