// The structs a host fills and versions (context, fetch and save options,
// local stores, connections): one initializer and one reader serve them all.
import CTetherABI
import Tether

/// A struct whose first field is `unsigned int version` and whose versions
/// only add fields at its end: a host built against an older header passes
/// a shorter struct, so it is read (and initialized) no further than its
/// version goes.
protocol VersionedStruct {
    /// Its name in messages: "unknown <noun> version".
    static var noun: String { get }
    /// The function that fills it with defaults, named in messages.
    static var initializer: String { get }
    static var currentVersion: UInt32 { get }
    /// The first version this library reads (an ABI break starts again
    /// there: earlier versions had another layout and are refused).
    static var firstVersion: UInt32 { get }
    /// Why versions before firstVersion are refused, for the message.
    static var formerVersions: String { get }
    /// For each version from firstVersion before the current one, in order,
    /// the first field it lacks (where that version's struct ends).
    static var versionEnds: [PartialKeyPath<Self>] { get }
    /// The value of every field the host leaves out.
    static var defaults: Self { get }
    var version: UInt32 { get set }
}

extension VersionedStruct {
    static var versionEnds: [PartialKeyPath<Self>] { [] }
    static var firstVersion: UInt32 { 1 }
    static var formerVersions: String { "" }

    static func byteCount(ofVersion version: UInt32) -> Int {
        let index = Int(version) - Int(firstVersion)
        guard index < versionEnds.count else { return MemoryLayout<Self>.size }
        return MemoryLayout<Self>.offset(of: versionEnds[index])!
    }

    static func isKnown(_ version: UInt32) -> Bool { version >= firstVersion && version <= currentVersion }

    /// "unknown <noun> version N", saying why for a former version.
    static func unknown(_ version: UInt32) -> String {
        version >= 1 && version < firstVersion
            ? "\(noun) version \(version) is \(formerVersions)"
            : "unknown \(noun) version \(version)"
    }

    static func defaults(version: UInt32) -> Self {
        var value = defaults
        value.version = version
        return value
    }
}

/// What a `tether_*_init` does: writes the defaults of `version` into the
/// host's struct, no further than that version's struct goes.
func initialize<T: VersionedStruct>(_ pointer: UnsafeMutablePointer<T>?, version: UInt32, _ what: String) throws {
    guard T.isKnown(version) else { throw misuse(T.unknown(version)) }
    guard let pointer else { throw misuse("\(what) is NULL") }
    withUnsafeBytes(of: T.defaults(version: version)) { bytes in
        UnsafeMutableRawPointer(pointer).copyMemory(from: bytes.baseAddress!, byteCount: T.byteCount(ofVersion: version))
    }
}

/// The host's struct, read no further than its version goes: the fields
/// of later versions keep their defaults. `what` prefixes the message for
/// an element of an array ("local_stores[2]").
func read<T: VersionedStruct>(_ pointer: UnsafePointer<T>, _ what: String? = nil) throws -> T {
    let version = UnsafeRawPointer(pointer).load(as: UInt32.self)
    guard T.isKnown(version) else {
        throw misuse("\(what.map { "\($0): " } ?? "")\(T.unknown(version)): use \(T.initializer)")
    }
    var value = T.defaults(version: version)
    withUnsafeMutableBytes(of: &value) { bytes in
        bytes.baseAddress!.copyMemory(from: UnsafeRawPointer(pointer), byteCount: T.byteCount(ofVersion: version))
    }
    return value
}
