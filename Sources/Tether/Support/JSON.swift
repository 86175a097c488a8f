import CJansson
import Glibc

/// A JSON document as Swift values. Objects keep their key order, so a spec's
/// properties are seen in the order the server wrote them.
public enum JSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    case string(String)
    case array([JSON])
    case object([(key: String, value: JSON)])

    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.integer(a), .integer(b)): return a == b
        case let (.real(a), .real(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: return false
        }
    }

    public subscript(key: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var integerValue: Int64? { if case .integer(let i) = self { return i } else { return nil } }
    public var arrayValue: [JSON]? { if case .array(let a) = self { return a } else { return nil } }
    public var objectValue: [(key: String, value: JSON)]? { if case .object(let o) = self { return o } else { return nil } }

    /// Parses a complete JSON text; anything else is a `.protocol` error.
    public static func parse(_ bytes: [UInt8]) throws -> JSON {
        var error = json_error_t()
        let root = bytes.withUnsafeBufferPointer { buffer -> UnsafeMutablePointer<json_t>? in
            (buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!).withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                json_loadb($0, buffer.count, Int(JSON_DECODE_ANY | JSON_ALLOW_NUL), &error)
            }
        }
        guard let root else {
            let reason = withUnsafeBytes(of: &error.text) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            throw TetherError(.protocol, "malformed JSON (line \(error.line), column \(error.column)): \(reason)")
        }
        defer { tether_json_decref(root) }
        return JSON(jansson: root)
    }

    public static func parse(_ text: String) throws -> JSON { try parse(Array(text.utf8)) }

    private init(jansson value: UnsafeMutablePointer<json_t>) {
        switch tether_json_typeof(value) {
        case JSON_OBJECT:
            var members: [(key: String, value: JSON)] = []
            var iterator = json_object_iter(value)
            while let current = iterator {
                let key = String(cString: json_object_iter_key(current))
                members.append((key, JSON(jansson: json_object_iter_value(current))))
                iterator = json_object_iter_next(value, current)
            }
            self = .object(members)
        case JSON_ARRAY:
            self = .array((0..<json_array_size(value)).map { JSON(jansson: json_array_get(value, $0)) })
        case JSON_STRING:
            let bytes = UnsafeRawBufferPointer(start: json_string_value(value), count: json_string_length(value))
            self = .string(String(decoding: bytes, as: UTF8.self))
        case JSON_INTEGER: self = .integer(Int64(json_integer_value(value)))
        case JSON_REAL: self = .real(json_real_value(value))
        case JSON_TRUE: self = .bool(true)
        case JSON_FALSE: self = .bool(false)
        default: self = .null
        }
    }

    /// Compact text; object keys sorted when `sortKeys`, so equal values
    /// serialize equally.
    public func serialized(sortKeys: Bool = false) -> String {
        let value = makeJansson()
        defer { tether_json_decref(value) }
        var flags = Int(JSON_COMPACT | JSON_ENCODE_ANY)
        if sortKeys { flags |= Int(JSON_SORT_KEYS) }
        guard let text = json_dumps(value, flags) else { return "null" }
        defer { free(text) }
        return String(cString: text)
    }

    private func makeJansson() -> UnsafeMutablePointer<json_t> {
        switch self {
        case .null: return json_null()
        case .bool(let b): return b ? json_true() : json_false()
        case .integer(let i): return json_integer(json_int_t(i))
        case .real(let d): return json_real(d)
        case .string(let s):
            var s = s
            return s.withUTF8 { buffer in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    chars.count == 0 ? json_string_nocheck("") : json_stringn_nocheck(chars.baseAddress!, chars.count)
                }
            }
        case .array(let items):
            let array = json_array()!
            for item in items { json_array_append_new(array, item.makeJansson()) }
            return array
        case .object(let members):
            let object = json_object()!
            for member in members { json_object_set_new_nocheck(object, member.key, member.value.makeJansson()) }
            return object
        }
    }
}
