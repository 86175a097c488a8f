import CTetherABI
import Glibc
import Tether

/// The last failure's message, per thread, as tether_errmsg hands it out:
/// a cell holding a malloc'd string, freed with its thread. Plain memory,
/// not an object, as every call touches it (no reference counting).
private typealias MessageCell = UnsafeMutablePointer<UnsafeMutablePointer<CChar>>

private let messageKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { raw in
        guard let cell = raw?.assumingMemoryBound(to: UnsafeMutablePointer<CChar>.self) else { return }
        free(cell.pointee)
        cell.deallocate()
    }
    return key
}()

private func messageCell() -> MessageCell {
    if let existing = pthread_getspecific(messageKey) {
        return existing.assumingMemoryBound(to: UnsafeMutablePointer<CChar>.self)
    }
    let cell = MessageCell.allocate(capacity: 1)
    cell.initialize(to: strdup("")!)
    pthread_setspecific(messageKey, cell)
    return cell
}

private func setMessage(_ cell: MessageCell, _ message: String) {
    free(cell.pointee)
    cell.pointee = strdup(message)!
}

func lastMessage() -> UnsafePointer<CChar> { UnsafePointer(messageCell().pointee) }

/// The status table: each error kind's TETHER_E_* code and that code's name.
/// Everything else about statuses derives from it (the switch makes a new
/// kind a compile error until it has a row here and in the header).
private func statusRow(_ kind: TetherError.Kind) -> (code: Int32, name: StaticString) {
    switch kind {
    case .internal: return (TETHER_E_ERROR, "TETHER_E_ERROR")
    case .misuse: return (TETHER_E_MISUSE, "TETHER_E_MISUSE")
    case .closed: return (TETHER_E_HANDLE, "TETHER_E_HANDLE")
    case .notFound: return (TETHER_E_NOT_FOUND, "TETHER_E_NOT_FOUND")
    case .type: return (TETHER_E_TYPE, "TETHER_E_TYPE")
    case .invalid: return (TETHER_E_INVALID, "TETHER_E_INVALID")
    case .network: return (TETHER_E_NETWORK, "TETHER_E_NETWORK")
    case .auth: return (TETHER_E_AUTH, "TETHER_E_AUTH")
    case .server: return (TETHER_E_SERVER, "TETHER_E_SERVER")
    case .expired: return (TETHER_E_EXPIRED, "TETHER_E_EXPIRED")
    case .protocol: return (TETHER_E_PROTOCOL, "TETHER_E_PROTOCOL")
    case .store: return (TETHER_E_STORE, "TETHER_E_STORE")
    case .cancelled: return (TETHER_E_CANCELLED, "TETHER_E_CANCELLED")
    case .notCached: return (TETHER_E_NOT_CACHED, "TETHER_E_NOT_CACHED")
    case .busy: return (TETHER_E_BUSY, "TETHER_E_BUSY")
    case .conflict: return (TETHER_E_CONFLICT, "TETHER_E_CONFLICT")
    case .notAllowed: return (TETHER_E_NOT_ALLOWED, "TETHER_E_NOT_ALLOWED")
    }
}

func status(of kind: TetherError.Kind) -> Int32 { statusRow(kind).code }

/// The status codes a host may give, as the core's kinds.
private let statusKinds = Dictionary(uniqueKeysWithValues: TetherError.Kind.allCases.map { (statusRow($0).code, $0) })

/// Every status's name, as tether_errstr lends it (static text, never freed).
private let statusNames: [Int32: StaticString] =
    statusKinds.mapValues { statusRow($0).name }.merging([TETHER_OK: "TETHER_OK"]) { row, _ in row }

/// Whether `status` is TETHER_OK or a TETHER_E_* code of this version.
func isStatus(_ status: Int32) -> Bool { status == TETHER_OK || statusKinds[status] != nil }

/// A status the host gives (a host connection's answer) as an error; nil
/// for TETHER_OK. An unknown one (see `isStatus`) is an internal error.
func error(ofStatus status: Int32, _ message: String?) -> TetherError? {
    guard status != TETHER_OK else { return nil }
    let kind = statusKinds[status] ?? .internal
    let text = message ?? ""
    // Network failures from a host are "unreachable": a context then opens offline.
    return TetherError(kind, text.isEmpty ? "the host connection failed (\(status))" : text, unreachable: kind == .network)
}

/// Runs one API call: clears the thread's message, turns a thrown error into
/// its status and message.
func call(_ body: () throws -> Void) -> Int32 {
    let cell = messageCell()
    do {
        try body()
        if cell.pointee[0] != 0 { setMessage(cell, "") }
        return TETHER_OK
    } catch let error as TetherError {
        setMessage(cell, error.message)
        return status(of: error.kind)
    } catch {
        setMessage(cell, "\(error)")
        return TETHER_E_ERROR
    }
}

func misuse(_ message: String) -> TetherError { TetherError(.misuse, message) }

/// A C string argument as a Swift string: NULL is misuse, bad UTF-8 invalid.
func text(_ pointer: UnsafePointer<CChar>?, _ what: String) throws -> String {
    guard let pointer else { throw misuse("\(what) is NULL") }
    guard let value = String(validatingCString: pointer) else {
        throw TetherError(.invalid, "\(what) is not valid UTF-8")
    }
    return value
}

func optionalText(_ pointer: UnsafePointer<CChar>?, _ what: String) throws -> String? {
    try pointer.map { try text($0, what) }
}

/// A C string made once and lent for the life of the process.
/// @unchecked: a C pointer, but nothing writes or frees it after it is made.
struct ConstantCString: @unchecked Sendable {
    let pointer: UnsafePointer<CChar>
    init(_ text: String) { pointer = UnsafePointer(strdup(text)!) }
}

/// Writes through an out parameter, which must not be NULL.
func output<T>(_ pointer: UnsafeMutablePointer<T>?, _ value: T, _ what: String = "out") throws {
    guard let pointer else { throw misuse("\(what) is NULL") }
    pointer.pointee = value
}

@_cdecl("tether_errmsg")
public func tether_errmsg() -> UnsafePointer<CChar> { lastMessage() }

@_cdecl("tether_errstr")
public func tether_errstr(_ status: Int32) -> UnsafePointer<CChar> {
    let name: StaticString = statusNames[status] ?? "TETHER_E_UNKNOWN"
    return UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
}
