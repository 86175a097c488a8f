import CSQLite

/// A value as SQLite holds it.
enum SQLValue: Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// One SQLite connection. Callers serialize access (the Store's lock).
final class Database {
    private(set) var handle: OpaquePointer?

    init(path: String) throws {
        var connection: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX
        let status = sqlite3_open_v2(path, &connection, flags, nil)
        guard status == SQLITE_OK else {
            let reason = connection.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_close_v2(connection)
            throw TetherError(.store, "cannot open store \(path): \(reason)")
        }
        handle = connection
        sqlite3_busy_timeout(connection, 5000)
        sqlite3_extended_result_codes(connection, 1)
    }

    deinit { close() }

    func close() {
        // _v2 defers the close until statements still alive are finalized by their deinit.
        sqlite3_close_v2(handle)
        handle = nil
    }

    func prepare(_ sql: String) throws -> Statement { try Statement(database: self, sql: sql) }

    /// Runs statements that take no parameters and return no rows.
    func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(handle, sql, nil, nil, &message) == SQLITE_OK else {
            let reason = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            throw TetherError(.store, "store: \(reason)")
        }
    }

    /// Runs `body` in one transaction: committed if it returns, rolled back if it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    func error(_ context: String) -> TetherError {
        TetherError(.store, "store: \(context): \(String(cString: sqlite3_errmsg(handle)))")
    }
}

/// A prepared statement, finalized when it goes away.
final class Statement {
    private let database: Database
    private var statement: OpaquePointer?

    fileprivate init(database: Database, sql: String) throws {
        self.database = database
        guard sqlite3_prepare_v2(database.handle, sql, -1, &statement, nil) == SQLITE_OK else {
            throw database.error("prepare")
        }
    }

    deinit { sqlite3_finalize(statement) }

    func bind(_ values: [SQLValue]) throws {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let status: Int32
            switch value {
            case .null: status = sqlite3_bind_null(statement, index)
            case .integer(let i): status = sqlite3_bind_int64(statement, index, i)
            case .real(let d): status = sqlite3_bind_double(statement, index, d)
            case .text(let s): status = sqlite3_bind_text(statement, index, s, -1, tether_sqlite_transient())
            }
            guard status == SQLITE_OK else { throw database.error("bind") }
        }
    }

    /// Steps once; true while a row is available.
    func step() throws -> Bool {
        switch sqlite3_step(statement) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw database.error("step")
        }
    }

    func run(_ values: [SQLValue] = []) throws {
        try bind(values)
        while try step() {}
    }

    func rows(_ values: [SQLValue] = []) throws -> [[SQLValue]] {
        try bind(values)
        var rows: [[SQLValue]] = []
        while try step() { rows.append((0..<columnCount).map(column)) }
        return rows
    }

    var columnCount: Int { Int(sqlite3_column_count(statement)) }

    func column(_ index: Int) -> SQLValue {
        let i = Int32(index)
        switch sqlite3_column_type(statement, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, i))
        case SQLITE_NULL: return .null
        default:
            let bytes = UnsafeRawBufferPointer(start: sqlite3_column_text(statement, i),
                                               count: Int(sqlite3_column_bytes(statement, i)))
            return .text(String(decoding: bytes, as: UTF8.self))
        }
    }
}
