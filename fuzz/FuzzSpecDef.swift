// libFuzzer target: bytes as a Perforce spec definition. Nothing may crash;
// what parses keeps the parser's promises (one key, distinct tags and codes,
// Perforce's words only), reads the same once written out again, and models
// with every field at its Perforce code. Seeds (fuzz/corpus/specdef): real-*
// are the spec tables of p4python 2026.1 (github.com/perforce/p4python,
// 9cec853) and p4ruby 2020.1 (github.com/perforce/p4ruby, a9c10dc),
// placeholder-* p4python's with `code:NNN`, nocodes-* P4Win's 97.3 client.
@testable import Tether
import Glibc

/// The fields written back as a specdef, every attribute spelled out.
private func encode(_ fields: [SpecDefField]) -> String {
    fields.map { field in
        var parts = [field.tag, "code:\(field.code!)", "type:\(field.type)", "opt:\(field.opt)"]
        for (name, number) in [("len", field.len), ("words", field.words), ("maxwords", field.maxwords), ("seq", field.seq)] {
            if let number { parts.append("\(name):\(number)") }
        }
        for (name, text) in [("fmt", field.fmt), ("open", field.open), ("pre", field.pre)] {
            if let text { parts.append("\(name):\(text)") }
        }
        if !field.val.isEmpty { parts.append("val:" + field.val.joined(separator: "/")) }
        return parts.joined(separator: ";") + ";;"
    }.joined()
}

private func checkPromises(_ fields: [SpecDefField]) {
    require(!fields.isEmpty, "no fields")
    require(fields.filter(\.key).count == 1, "not one key")
    require(fields.firstIndex(where: \.key) == SpecDef.idFieldIndex(fields), "the key is not the id field")
    var tags = Set<ExactString>(), codes = Set<Int>()
    for field in fields {
        require(!field.tag.isEmpty && !field.tag.utf8.contains { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ";") },
                "tag \(field.tag)")
        require(tags.insert(ExactString(field.tag)).inserted, "tag twice")
        guard let code = field.code else { fatalError("no code") }
        require((1...Int(Int32.max)).contains(code) && codes.insert(code).inserted, "code \(code)")
        require(SpecDef.types.contains(field.type) && SpecDef.opts.contains(field.opt), "type or opt")
        for number in [field.len, field.words, field.maxwords, field.seq] {
            require(number.map { (0...Int(Int32.max)).contains($0) } ?? true, "number")
        }
        require(!field.val.contains { $0.contains("/") }, "val not split")
        let texts = [field.fmt, field.open, field.pre].compactMap { $0 } + field.val
        require(!texts.contains { $0.contains(";") || $0.utf8.contains(0) }, "a value holds ; or U+0000")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSpecDef(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let fields: [SpecDefField]
    do {
        fields = try SpecDef.parse(text)
    } catch let error as TetherError {
        require(error.kind == .invalid && error.message.hasPrefix("specdef: "), "\(error.kind): \(error.message)")
        return 0
    } catch {
        fatalError("not a TetherError: \(error)")
    }
    checkPromises(fields)

    // Written out and read again: the same fields.
    let again: [SpecDefField]
    do { again = try SpecDef.parse(encode(fields)) } catch { fatalError("its own encoding is refused: \(error)") }
    require(again == fields, "the encoding reads differently")

    // Modelled: every usable field at its Perforce code, the id its key.
    let spec = SpecDef.spec(name: "fuzz", route: "p4 fuzz", fields: fields)
    let model = ModelBuilder.build(specs: [spec], previous: nil)
    guard let entity = model.entity(named: "fuzz") else {
        require(!Identifier.isUsableName(spec.idField), "the entity was left out")
        return 0
    }
    require(!fields.contains { $0.tag.hasSameBytes(as: spec.versionField) }, "the version field takes a tag")
    require(entity.attributes[entity.idIndex].name.hasSameBytes(as: fields.first(where: \.key)!.tag), "id field")
    for field in fields where Identifier.isUsableName(field.tag) {
        guard let index = entity.attributeIndex(named: field.tag) else { fatalError("\(field.tag) left out") }
        let attribute = entity.attributes[index]
        require(attribute.code == field.code!, "\(field.tag) has code \(attribute.code), not \(field.code!)")
        // An id is text in every model, whatever the field's type (the
        // typemap and triggers name none: their first field, a list, stands in).
        let type: AttributeType = field.key || !SpecDef.listTypes.contains(field.type) ? .text : .json
        require(attribute.type == type, "type of \(field.tag)")
    }
    return 0
}
