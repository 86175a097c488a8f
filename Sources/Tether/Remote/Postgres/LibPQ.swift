import Glibc

/// libpq, PostgreSQL's client library, loaded when the first Postgres
/// connection is made (as libcurl is for HTTP): hosts that never open one
/// never load it, and a host without it gets an error saying so, not a
/// failed load of libtether. Declared here rather than from libpq-fe.h, so
/// no header is needed to build: only non-variadic functions over opaque
/// pointers, ints and C strings, whose prototypes have not changed since
/// PostgreSQL 9. Loaded once and never unloaded.
struct LibPQ: @unchecked Sendable {  // the pointers are written once, before it is shared
    typealias Conn = OpaquePointer
    typealias Result = OpaquePointer

    let connectdbParams: @convention(c) (UnsafePointer<UnsafePointer<CChar>?>, UnsafePointer<UnsafePointer<CChar>?>,
                                         Int32) -> Conn?
    let finish: @convention(c) (Conn?) -> Void
    let status: @convention(c) (Conn?) -> Int32
    let errorMessage: @convention(c) (Conn?) -> UnsafePointer<CChar>?
    let serverVersion: @convention(c) (Conn?) -> Int32
    let execParams: @convention(c) (Conn?, UnsafePointer<CChar>, Int32, UnsafePointer<UInt32>?,
                                    UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
                                    UnsafePointer<Int32>?, Int32) -> Result?
    let exec: @convention(c) (Conn?, UnsafePointer<CChar>) -> Result?
    let resultStatus: @convention(c) (Result?) -> Int32
    let resultErrorField: @convention(c) (Result?, Int32) -> UnsafePointer<CChar>?
    let resultErrorMessage: @convention(c) (Result?) -> UnsafePointer<CChar>?
    let ntuples: @convention(c) (Result?) -> Int32
    let nfields: @convention(c) (Result?) -> Int32
    let getvalue: @convention(c) (Result?, Int32, Int32) -> UnsafePointer<CChar>?
    let getlength: @convention(c) (Result?, Int32, Int32) -> Int32
    let getisnull: @convention(c) (Result?, Int32, Int32) -> Int32
    let clear: @convention(c) (Result?) -> Void
    let conninfoParse: @convention(c) (UnsafePointer<CChar>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> OpaquePointer?
    let conninfoFree: @convention(c) (OpaquePointer?) -> Void
    let freemem: @convention(c) (UnsafeMutableRawPointer?) -> Void
    // For LISTEN (PostgresListener): the socket to poll, reading what came, the notifications.
    let socket: @convention(c) (Conn?) -> Int32
    let consumeInput: @convention(c) (Conn?) -> Int32
    let notifies: @convention(c) (Conn?) -> UnsafeMutableRawPointer?

    // libpq-fe.h's values (stable since PostgreSQL 7).
    static let connectionOK: Int32 = 0          // CONNECTION_OK
    static let commandOK: Int32 = 1             // PGRES_COMMAND_OK
    static let tuplesOK: Int32 = 2              // PGRES_TUPLES_OK
    static let diagSQLState = Int32(UInt8(ascii: "C"))    // PG_DIAG_SQLSTATE
    static let diagPrimary = Int32(UInt8(ascii: "M"))     // PG_DIAG_MESSAGE_PRIMARY

    /// The loaded library, or why it could not be loaded.
    static func load() throws(TetherError) -> LibPQ { try loaded.get() }

    /// A Swift global: initialised once, on first use, thread-safely.
    private static let loaded = Swift.Result { () throws(TetherError) in try LibPQ(library: "libpq.so.5") }

    private init(library name: String) throws(TetherError) {
        func failure(_ what: String) -> TetherError {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown reason"
            return TetherError(.internal, "cannot use libpq (\(name)), needed for PostgreSQL: \(what): \(reason)"
                               + " (Debian: apt-get install libpq5)")
        }
        guard let library = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { throw failure("cannot load it") }
        func bind<Function>(_ symbol: String) throws(TetherError) -> Function {
            guard let address = dlsym(library, symbol) else { throw failure("no \(symbol)") }
            return unsafeBitCast(address, to: Function.self)
        }
        connectdbParams = try bind("PQconnectdbParams")
        finish = try bind("PQfinish")
        status = try bind("PQstatus")
        errorMessage = try bind("PQerrorMessage")
        serverVersion = try bind("PQserverVersion")
        execParams = try bind("PQexecParams")
        exec = try bind("PQexec")
        resultStatus = try bind("PQresultStatus")
        resultErrorField = try bind("PQresultErrorField")
        resultErrorMessage = try bind("PQresultErrorMessage")
        ntuples = try bind("PQntuples")
        nfields = try bind("PQnfields")
        getvalue = try bind("PQgetvalue")
        getlength = try bind("PQgetlength")
        getisnull = try bind("PQgetisnull")
        clear = try bind("PQclear")
        conninfoParse = try bind("PQconninfoParse")
        conninfoFree = try bind("PQconninfoFree")
        freemem = try bind("PQfreemem")
        socket = try bind("PQsocket")
        consumeInput = try bind("PQconsumeInput")
        notifies = try bind("PQnotifies")
    }
}
