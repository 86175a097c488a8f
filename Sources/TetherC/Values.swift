// The C ABI, "values" section of include/tether.h: tether_value to and from
// the core's Value.
import CTetherABI
import Glibc
import Tether

@_cdecl("tether_value_free")
public func tether_value_free(_ value: UnsafeMutablePointer<tether_value>?) {
    guard let value else { return }
    free(value.pointee.text)
    value.pointee = tether_value()
}

func fill(_ out: UnsafeMutablePointer<tether_value>?, _ value: Value) throws {
    guard let out else { throw misuse("out is NULL") }
    var result = tether_value()
    func setText(_ string: String, _ type: tether_type) {
        var string = string
        string.withUTF8 { bytes in
            let copy = malloc(bytes.count + 1)!.assumingMemoryBound(to: CChar.self)
            if let base = bytes.baseAddress { memcpy(copy, base, bytes.count) }
            copy[bytes.count] = 0
            result.text = copy
            result.length = bytes.count
        }
        result.type = type
    }
    switch value {
    case .null: result.type = TETHER_TYPE_NULL
    case .text(let s): setText(s, TETHER_TYPE_TEXT)
    case .json(let s): setText(s, TETHER_TYPE_JSON)
    case .integer(let i):
        result.type = TETHER_TYPE_INTEGER
        result.integer = i
    case .real(let d):
        result.type = TETHER_TYPE_REAL
        result.real = d
    case .boolean(let b):
        result.type = TETHER_TYPE_BOOLEAN
        result.integer = b ? 1 : 0
    }
    out.pointee = result
}

/// A value from the host as the core's, by its type: text by length, so it
/// may hold NUL. `what` names it in messages ("the value", "argument $2").
func coreValue(_ value: tether_value, _ what: String) throws -> Value {
    func text() throws -> String {
        guard value.text != nil || value.length == 0 else { throw misuse("\(what) is TEXT or JSON with a NULL text") }
        guard let text = String(validating: UnsafeRawBufferPointer(start: value.text, count: value.length), as: UTF8.self) else {
            throw TetherError(.invalid, "\(what) is not valid UTF-8")
        }
        return text
    }
    switch value.type {
    case TETHER_TYPE_NULL: return .null
    case TETHER_TYPE_INTEGER: return .integer(value.integer)
    case TETHER_TYPE_REAL: return .real(value.real)
    case TETHER_TYPE_BOOLEAN: return .boolean(value.integer != 0)
    case TETHER_TYPE_TEXT: return .text(try text())
    case TETHER_TYPE_JSON: return .json(try text())
    default: throw TetherError(.invalid, "\(what) has unknown type \(value.type.rawValue)")
    }
}

/// A predicate argument from the host: a scalar, not JSON (the header's
/// list of argument types).
func argument(_ value: tether_value, number: Int) throws -> Value {
    guard value.type != TETHER_TYPE_JSON else {
        throw TetherError(.invalid, "argument $\(number) has type JSON: give TEXT, INTEGER, REAL, BOOLEAN or NULL")
    }
    return try coreValue(value, "argument $\(number)")
}

/// A value the host passes by pointer (to set or insert).
func hostValue(_ pointer: UnsafePointer<tether_value>?) throws -> Value {
    guard let pointer else { throw misuse("value is NULL") }
    return try coreValue(pointer.pointee, "the value")
}
