import Glibc

/// One libpq connection to the server, used on the connection's request
/// thread only (a PGconn is not for two threads at once). It connects on
/// first use and again after the server dropped it; every statement is
/// parameterized (`$1`...), values sent as text and never spliced into SQL.
final class PostgresSession: @unchecked Sendable {  // used by one thread at a time (RequestQueue)
    private let pq: LibPQ
    private let conninfo: String
    private let connectTimeoutSeconds: Int64
    private let applicationName: String
    /// The open connection, if any (PostgresListener polls its socket).
    private(set) var conn: LibPQ.Conn?

    init(conninfo: String, timeoutMilliseconds: Int64, applicationName: String = "tether") throws {
        pq = try LibPQ.load()
        self.conninfo = conninfo
        self.applicationName = applicationName
        // libpq's connect_timeout is whole seconds, at least 2.
        connectTimeoutSeconds = max(2, (timeoutMilliseconds + 999) / 1000)
    }

    deinit { close() }

    func close() {
        if let conn { pq.finish(conn) }
        conn = nil
    }

    /// The options the conninfo (key=value or postgresql:// URI) gives, or
    /// why it is not one: libpq's own parser, so it means what libpq makes of it.
    static func parse(_ conninfo: String) throws -> [String: String] {
        let pq = try LibPQ.load()
        guard !conninfo.utf8.contains(0) else { throw TetherError(.invalid, "conninfo holds U+0000") }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = pq.conninfoParse(conninfo, &error) else {
            let why = error.map { String(cString: $0) } ?? "out of memory"
            pq.freemem(error)
            throw TetherError(.invalid, "conninfo is not a libpq connection string: \(why.trimmingNewlines)")
        }
        defer { pq.conninfoFree(options) }
        // PQconninfoOption: keyword, envvar, compiled, val, label, dispchar (char *), dispsize (int).
        let stride = 6 * MemoryLayout<UnsafePointer<CChar>?>.stride + MemoryLayout<Int>.stride
        var found: [String: String] = [:]
        var item = UnsafeRawPointer(options)
        while let keyword = item.load(as: UnsafePointer<CChar>?.self) {
            if let value = item.load(fromByteOffset: 3 * MemoryLayout<UnsafePointer<CChar>?>.stride, as: UnsafePointer<CChar>?.self) {
                found[String(cString: keyword)] = String(cString: value)
            }
            item += stride
        }
        return found
    }

    /// The rows of one statement, each column's text (nil: SQL NULL). A
    /// connection the server dropped is opened again and the statement
    /// sent again once (they are all reads).
    func query(_ sql: String, _ parameters: [String] = []) throws -> [[String?]] {
        do {
            return try run(sql, parameters.map { $0 })
        } catch let error as Dropped {
            close()
            Log.info(.http, "PostgreSQL connection lost (\(error.message)); connecting again")
            do { return try run(sql, parameters.map { $0 }) } catch let again as Dropped {
                close()
                throw TetherError(.network, "the PostgreSQL server dropped the connection: \(again.message)")
            }
        }
    }

    /// Runs a script of several statements without parameters (the simple
    /// query protocol: one implicit transaction), for SQL text Tether ships.
    func script(_ sql: String) throws {
        let conn = try connected()
        let result = pq.exec(conn, sql)
        defer { pq.clear(result) }
        let status = pq.resultStatus(result)
        guard status == LibPQ.tuplesOK || status == LibPQ.commandOK else {
            if result == nil || pq.status(conn) != LibPQ.connectionOK {
                close()
                throw TetherError(.network, "the PostgreSQL server dropped the connection")
            }
            throw statementFailure(result)
        }
    }

    /// A statement failed because the connection is gone, not because of the statement.
    private struct Dropped: Error { let message: String }

    private func connected() throws -> LibPQ.Conn {
        if let conn { return conn }
        let keywords = ["dbname", "connect_timeout", "client_encoding", "application_name"]
        let values = [conninfo, String(connectTimeoutSeconds), "UTF8", applicationName]
        // dbname first, expanded as the whole conninfo; the later keywords are ours.
        let made = withCStrings(keywords) { keys in
            withCStrings(values) { values in pq.connectdbParams(keys, values, 1) }
        }
        guard let made else { throw TetherError(.internal, "libpq could not allocate a connection") }
        guard pq.status(made) == LibPQ.connectionOK else {
            let message = pq.errorMessage(made).map { String(cString: $0) }?.trimmingNewlines ?? "unknown reason"
            pq.finish(made)
            throw Self.connectFailure(message)
        }
        conn = made
        return made
    }

    /// A failed connect: the server answered (it refused the role, the
    /// password, the database) or could not be reached at all or is
    /// restarting, which alone lets a context open offline.
    static func connectFailure(_ message: String) -> TetherError {
        let answered = message.contains("FATAL") || message.contains("ERROR")
        guard answered else {
            return TetherError(.network, "cannot reach the PostgreSQL server: \(message)", unreachable: true)
        }
        // 57P03: the server is starting up, shutting down or recovering: a
        // restart in progress, unavailable for now as an unreachable one is.
        if message.contains("the database system is") {
            return TetherError(.network, "the PostgreSQL server is not accepting connections now: \(message)", unreachable: true)
        }
        if message.contains("database") && message.contains("does not exist") {
            return TetherError(.notFound, "the PostgreSQL server has no such database: \(message)")
        }
        if message.contains("authentication") || message.contains("password") || message.contains("role")
            || message.contains("pg_hba.conf") || message.contains("permission denied") {
            return TetherError(.auth, "the PostgreSQL server refused the connection: \(message)")
        }
        return TetherError(.server, "the PostgreSQL server refused the connection: \(message)")
    }

    /// One statement of a transaction (nil parameters: SQL NULL). Never sent
    /// again: a dropped connection throws `TetherError(.network)` and the
    /// transaction is gone with it (the caller cannot know whether a COMMIT
    /// in flight was applied).
    func execute(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
        do {
            return try run(sql, parameters)
        } catch let error as Dropped {
            close()
            throw TetherError(.network, "the PostgreSQL server dropped the connection: \(error.message)")
        }
    }

    private func run(_ sql: String, _ parameters: [String?]) throws -> [[String?]] {
        let conn = try connected()
        for case let parameter? in parameters where parameter.utf8.contains(0) {
            // A C string would end there: another value than the one given.
            throw TetherError(.invalid, "a value for PostgreSQL holds U+0000, which text cannot hold")
        }
        let result = withCStrings(parameters) { values in
            pq.execParams(conn, sql, Int32(parameters.count), nil, values, nil, nil, 0)
        }
        defer { pq.clear(result) }
        let status = pq.resultStatus(result)
        guard status == LibPQ.tuplesOK || status == LibPQ.commandOK else {
            if result == nil || pq.status(conn) != LibPQ.connectionOK {
                throw Dropped(message: pq.errorMessage(conn).map { String(cString: $0) }?.trimmingNewlines ?? "no answer")
            }
            throw statementFailure(result)
        }
        let rows = Int(pq.ntuples(result)), columns = Int(pq.nfields(result))
        var answer: [[String?]] = []
        answer.reserveCapacity(rows)
        for row in 0..<Int32(rows) {
            var values: [String?] = []
            values.reserveCapacity(columns)
            for column in 0..<Int32(columns) {
                if pq.getisnull(result, row, column) != 0 {
                    values.append(nil)
                } else {
                    let bytes = UnsafeRawPointer(pq.getvalue(result, row, column)!).assumingMemoryBound(to: UInt8.self)
                    values.append(String(decoding: UnsafeBufferPointer(start: bytes, count: Int(pq.getlength(result, row, column))),
                                         as: UTF8.self))
                }
            }
            answer.append(values)
        }
        return answer
    }

    /// A statement's error by its SQLSTATE class.
    private func statementFailure(_ result: LibPQ.Result?) -> TetherError {
        let state = pq.resultErrorField(result, LibPQ.diagSQLState).map { String(cString: $0) } ?? ""
        let message = (pq.resultErrorField(result, LibPQ.diagPrimary) ?? pq.resultErrorMessage(result))
            .map { String(cString: $0) }?.trimmingNewlines ?? "unknown error"
        switch state {
        case "42501": return TetherError(.auth, "PostgreSQL refused access: \(message)")
        case "3F000", "42P01", "42703": return TetherError(.notFound, "PostgreSQL: \(message) (SQLSTATE \(state))")
        // Integrity (NOT NULL, foreign key, unique, check) and data exceptions
        // (a value the column's type cannot hold): the values are refused.
        case let state where state.hasPrefix("23") || state.hasPrefix("22"):
            return TetherError(.invalid, "PostgreSQL refused the values: \(message) (SQLSTATE \(state))")
        default: return TetherError(.server, "PostgreSQL failed: \(message) (SQLSTATE \(state))")
        }
    }
}

/// C strings of `strings` for one call, NULL-terminated as libpq wants lists.
private func withCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { $0.map { strdup($0) } ?? nil }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

extension String {
    var trimmingNewlines: String {
        var text = Substring(self)
        while let last = text.last, last.isNewline || last == " " { text.removeLast() }
        return String(text)
    }
}
