// libFuzzer target: bytes as a Perforce spec definition. Nothing may crash;
// what parses keeps the parser's promises (one key, distinct tags, Perforce's
// words only), reads the same once written out again (decode → encode →
// decode, both as SpecDef.encode writes it and with every attribute spelled
// out), and models with every field whose code is real at that code. Seeds
// (fuzz/corpus/specdef): real-* are the spec tables of p4python 2026.1
// (github.com/perforce/p4python, 9cec853) and p4ruby 2020.1
// (github.com/perforce/p4ruby, a9c10dc), placeholder-* p4python's with
// `code:NNN`, nocodes-* P4Win's 97.3 client, builtin-* P4Perl 2026.1's
// (github.com/perforce/p4perl, 2b290b2), server-* a 2012.1 server's.
@testable import Tether
import Glibc

/// The fields written back as a specdef, every attribute spelled out, in
/// another order than SpecDef.encode's.
private func encodeVerbosely(_ fields: [SpecDefField]) -> String {
    fields.map { field in
        var parts = [field.tag]
        if !field.val.isEmpty { parts.append("val:" + field.val.joined(separator: "/")) }
        for (name, text) in [("pre", field.pre), ("open", field.open), ("fmt", field.fmt)] {
            if let text { parts.append("\(name):\(text)") }
        }
        for (name, number) in [("seq", field.seq), ("maxwords", field.maxwords), ("words", field.words), ("len", field.len)] {
            parts.append("\(name):\(number)")
        }
        parts += field.opt == "empty" ? ["z"] : ["opt:\(field.opt)"]
        parts += ["type:\(field.type)", "code:\(field.code)"]
        return parts.joined(separator: ";") + ";;"
    }.joined()
}

private func checkPromises(_ fields: [SpecDefField]) {
    require(!fields.isEmpty, "no fields")
    require(fields.filter(\.key).count == 1, "not one key")
    require(fields.firstIndex(where: \.key) == SpecDef.idFieldIndex(fields), "the key is not the id field")
    var tags = Set<ExactString>()
    for field in fields {
        require(!field.tag.isEmpty && !field.tag.utf8.contains { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ";") },
                "tag \(field.tag)")
        require(tags.insert(ExactString(field.tag)).inserted, "tag twice")
        require(SpecDef.types.contains(field.type) && SpecDef.opts.contains(field.opt), "type or opt")
        for number in [field.code, field.len, field.words, field.maxwords, field.seq] {
            require((Int(Int32.min)...Int(Int32.max)).contains(number), "number")
        }
        require(field.words <= SpecDef.maxWords, "words")
        require(field.fmt.map { ["L", "R", "I", "C"].contains($0) } ?? true, "fmt")
        require(field.open.map { ["isolate", "propagate"].contains($0) } ?? true, "open")
        require(field.pre.map { !$0.isEmpty } ?? true, "empty pre")
        require(!field.val.contains { $0.contains("/") }, "val not split")
        let texts = [field.pre].compactMap { $0 } + field.val
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
    for encoded in [SpecDef.encode(fields), encodeVerbosely(fields)] {
        let again: [SpecDefField]
        do { again = try SpecDef.parse(encoded) } catch { fatalError("its own encoding is refused: \(error)") }
        require(again == fields, "the encoding reads differently: \(encoded)")
    }

    // Modelled: every usable field at its Perforce code where the code is
    // real (1 or more, the first to claim it), the id its key.
    let spec = SpecDef.spec(name: "fuzz", route: "p4 fuzz", fields: fields)
    let model = ModelBuilder.build(specs: [spec], previous: nil)
    guard let entity = model.entity(named: "fuzz") else {
        require(!Identifier.isUsableName(spec.idField), "the entity was left out")
        return 0
    }
    require(!fields.contains { $0.tag.hasSameBytes(as: spec.versionField) }, "the version field takes a tag")
    require(entity.attributes[entity.idIndex].name.hasSameBytes(as: fields.first(where: \.key)!.tag), "id field")
    let codes = entity.attributes.map(\.code)
    require(Set(codes).count == codes.count, "two attributes share a code")
    var claimed = Set<Int>()
    // The model claims codes for the id field first, then in the specdef's order.
    let keyFirst = fields.filter(\.key) + fields.filter { !$0.key }
    for field in keyFirst where Identifier.isUsableName(field.tag) {
        guard let index = entity.attributeIndex(named: field.tag) else { fatalError("\(field.tag) left out") }
        let attribute = entity.attributes[index]
        if field.code > 0, claimed.insert(field.code).inserted {
            require(attribute.code == field.code, "\(field.tag) has code \(attribute.code), not \(field.code)")
        } else {
            require(model.diagnostics.contains { $0.attribute.map { $0.hasSameBytes(as: field.tag) } ?? false },
                    "\(field.tag): no diagnostic for its code \(field.code)")
        }
        // An id is text in every model, whatever the field's type (the
        // typemap and triggers name none: their first field, a list, stands in).
        let type: AttributeType = field.key || !SpecDef.listTypes.contains(field.type) ? .text : .json
        require(attribute.type == type, "type of \(field.tag)")
    }
    return 0
}
