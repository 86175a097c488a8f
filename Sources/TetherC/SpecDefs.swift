import Glibc
import Tether
import CTetherABI

// MARK: Perforce spec definitions

/// A parsed specdef behind a tether_specdef handle, its fields as C structs
/// whose strings it owns: they live until the handle is freed.
final class SpecDefBox {
    let fields: [tether_specdef_field]
    /// The fields as a specdef (SpecDef.encode), lent by tether_specdef_text.
    let text: UnsafeMutablePointer<CChar>
    private let strings: [UnsafeMutablePointer<CChar>]

    init(_ parsed: [SpecDefField]) {
        // The parser refuses U+0000, so no string is cut short.
        var strings: [UnsafeMutablePointer<CChar>] = []
        func lend(_ text: String?) -> UnsafePointer<CChar>? {
            guard let text else { return nil }
            strings.append(text.cDuplicate)
            return UnsafePointer(strings.last!)
        }
        func number(_ value: Int) -> Int32 { Int32(clamping: value) }
        fields = parsed.map { field in
            var out = tether_specdef_field()
            out.tag = lend(field.tag)
            out.code = number(field.code)
            out.type = lend(field.type)
            out.opt = lend(field.opt)
            out.key = field.key ? 1 : 0
            out.len = number(field.len)
            out.words = number(field.words)
            out.maxwords = number(field.maxwords)
            out.seq = number(field.seq)
            out.fmt = lend(field.fmt)
            out.open = lend(field.open)
            out.pre = lend(field.pre)
            out.val = field.val.isEmpty ? nil : lend(field.val.joined(separator: "/"))
            out.val_count = field.val.count
            return out
        }
        self.strings = strings
        text = SpecDef.encode(parsed).cDuplicate
    }

    deinit {
        strings.forEach { free($0) }
        free(text)
    }
}

@_cdecl("tether_specdef_parse")
public func tether_specdef_parse(_ specdefText: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        guard out != nil else { throw misuse("out is NULL") }
        let box = SpecDefBox(try SpecDef.parse(try text(specdefText, "text")))
        try output(out, try Handles.shared.register(box, kind: .specdef, owner: 0).handle)
    }
}

@_cdecl("tether_specdef_from_form")
public func tether_specdef_from_form(_ formJSON: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        guard out != nil else { throw misuse("out is NULL") }
        let box = SpecDefBox(try SpecDef.fromForm(json: try text(formJSON, "form_json")))
        try output(out, try Handles.shared.register(box, kind: .specdef, owner: 0).handle)
    }
}

@_cdecl("tether_specdef_text")
public func tether_specdef_text(_ specdef: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call { try output(out, UnsafePointer(try Handles.shared.resolve(specdef, .specdef, as: SpecDefBox.self).text)) }
}

@_cdecl("tether_specdef_field_count")
public func tether_specdef_field_count(_ specdef: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try Handles.shared.resolve(specdef, .specdef, as: SpecDefBox.self).fields.count) }
}

@_cdecl("tether_specdef_field_at")
public func tether_specdef_field_at(_ specdef: OpaquePointer?, _ index: Int,
                                    _ out: UnsafeMutablePointer<tether_specdef_field>?) -> Int32 {
    call {
        let fields = try Handles.shared.resolve(specdef, .specdef, as: SpecDefBox.self).fields
        guard index >= 0, index < fields.count else { throw TetherError(.notFound, "no specdef field at index \(index)") }
        try output(out, fields[index])
    }
}

@_cdecl("tether_specdef_free")
public func tether_specdef_free(_ specdef: OpaquePointer?) -> Int32 {
    call {
        guard let specdef else { return }
        _ = try Handles.shared.release(specdef, .specdef)  // the box, and its strings, go here, outside the lock
    }
}
