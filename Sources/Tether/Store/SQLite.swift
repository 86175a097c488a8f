import CSQLite

extension SQLValue {
    /// An SQL function's argument.
    init(_ value: OpaquePointer?) {
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: self = .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: self = .real(sqlite3_value_double(value))
        case SQLITE_NULL: self = .null
        default:
            let bytes = UnsafeRawBufferPointer(start: sqlite3_value_text(value), count: Int(sqlite3_value_bytes(value)))
            self = .text(String(decoding: bytes, as: UTF8.self))
        }
    }
}

/// One SQLite connection and its prepared statements.
// @unchecked: a C pointer forces it. Not thread-safe: only the Store uses it,
// inside its lock, and no statement outlives that scope.
final class Database: @unchecked Sendable {
    /// Unpinned statements a connection keeps prepared; beyond this the
    /// least recently used one goes (SQL built from sort keys can vary).
    static let statementCacheLimit = 128
    /// How long a statement waits for another connection's write lock.
    static let busyTimeoutMilliseconds = 5_000

    private(set) var handle: OpaquePointer?
    /// Statements this connection has prepared, for tests and benchmarks
    /// that check the statement cache does its job.
    private(set) var prepareCount = 0
    private let statements: StatementCache

    /// `statementCapacity`: unpinned statements kept (tests make it small).
    init(path: String, readOnly: Bool = false, statementCapacity: Int = Database.statementCacheLimit) throws {
        statements = StatementCache(capacity: statementCapacity)
        var connection: OpaquePointer?
        // NOMUTEX: the Store's lock serializes every use of this connection.
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &connection, flags, nil)
        guard status == SQLITE_OK else {
            let reason = connection.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_close_v2(connection)
            throw TetherError(.store, "cannot open store \(path): \(reason)")
        }
        handle = connection
        sqlite3_busy_timeout(connection, Int32(Self.busyTimeoutMilliseconds))
        sqlite3_extended_result_codes(connection, 1)
    }

    deinit { close() }

    /// Most values one statement binds: the SQLite build's limit (32,766
    /// by default, 250,000 in most distributions' builds), the same for
    /// every connection, as none lowers it.
    static let variableLimit: Int = {
        guard let database = try? Database(path: ":memory:") else { return 999 }
        return Int(sqlite3_limit(database.handle, SQLITE_LIMIT_VARIABLE_NUMBER, -1))
    }()

    /// The file's full path; empty for a database in memory or a temporary one.
    var fileName: String { sqlite3_db_filename(handle, "main").map { String(cString: $0) } ?? "" }

    /// A deterministic SQL function of `arity` arguments, computed in Swift,
    /// so that SQL answers exactly as the same Swift code does in memory.
    /// `body` must not throw or call back into this database.
    func define(_ name: String, arity: Int32, _ body: @escaping ([SQLValue]) -> SQLValue) throws {
        final class Box { let body: ([SQLValue]) -> SQLValue; init(_ body: @escaping ([SQLValue]) -> SQLValue) { self.body = body } }
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let status = sqlite3_create_function_v2(
            handle, name, arity, SQLITE_UTF8 | SQLITE_DETERMINISTIC, box,
            { context, count, arguments in
                let box = Unmanaged<Box>.fromOpaque(sqlite3_user_data(context)!).takeUnretainedValue()
                let values = (0..<Int(count)).map { SQLValue(arguments![$0]) }
                switch box.body(values) {
                case .null: sqlite3_result_null(context)
                case .integer(let i): sqlite3_result_int64(context, i)
                case .real(let d): sqlite3_result_double(context, d)
                case .text(var text):
                    text.withUTF8 { bytes in
                        bytes.withMemoryRebound(to: CChar.self) { chars in
                            if let base = chars.baseAddress {
                                sqlite3_result_text64(context, base, sqlite3_uint64(chars.count), tether_sqlite_transient(), UInt8(SQLITE_UTF8))
                            } else {
                                sqlite3_result_text64(context, "", 0, tether_sqlite_transient(), UInt8(SQLITE_UTF8))
                            }
                        }
                    }
                }
            },
            nil, nil,
            { box in box.map { Unmanaged<Box>.fromOpaque($0).release() } })
        guard status == SQLITE_OK else { throw error("define \(name)") }
    }

    /// Finalizes every statement, then closes the connection.
    func close() {
        statements.removeAll()
        sqlite3_close_v2(handle)
        handle = nil
    }

    /// The statement kept for `sql`, if one is (nothing is prepared).
    func cachedStatement(_ sql: String) -> Statement? { statements.peek(sql) }

    /// The statement for `sql`, prepared once and kept until evicted (see
    /// StatementCache). `pinned`: never evicted, for SQL whose variety the
    /// model and the code bound and that runs on every write or read.
    func statement(_ sql: String, pinned: Bool = false) throws -> Statement {
        if let cached = statements.use(sql, pin: pinned) { return cached }
        guard handle != nil else { throw TetherError(.closed, "the store is closed") }
        let statement = try Statement(database: self, sql: sql)
        prepareCount += 1
        Live.prepares.add(1, ordering: .relaxed)
        statements.insert(statement, for: sql, pin: pinned)
        return statement
    }

    /// Drops every prepared statement: the schema changed under them.
    func clearStatements() { statements.removeAll() }

    /// Statements kept prepared, pinned or not.
    var keptStatementCount: Int { statements.count }

    /// Statements prepared on this connection and not finalized, whoever
    /// holds them: what the cache keeps plus any in use.
    var liveStatementCount: Int {
        guard let handle else { return 0 }  // closed
        var count = 0
        var next = sqlite3_next_stmt(handle, nil)
        while let statement = next {
            count += 1
            next = sqlite3_next_stmt(handle, statement)
        }
        return count
    }

    /// A statement whose step failed is not kept: whatever state the error
    /// left it in, the next use prepares it anew.
    fileprivate func dropFailed(_ statement: Statement) { statements.remove(statement, for: statement.sql) }

    /// Logs a statement that ran since `start` if it was slow: its SQL (cut
    /// when long), never a bound value.
    static func noteTime(since start: MonotonicTime, _ sql: @autoclosure () -> String) {
        let took = MonotonicTime.now().milliseconds(since: start)
        guard took >= Log.slowStatementMilliseconds else { return }
        Log.warning(.store, {
            let text = sql()
            let shown = text.utf8.count > 300 ? String(text.prefix(300)) + "… (\(text.utf8.count) bytes)" : text
            return "slow statement (\(took) ms): \(shown)"
        }())
    }

    /// Runs statements that take no parameters and return no rows.
    func execute(_ sql: String) throws {
        let start = Log.isEnabled(.warning) ? MonotonicTime.now() : nil
        defer { if let start { Self.noteTime(since: start, sql) } }
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        guard status == SQLITE_OK else {
            let reason = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            throw Self.failure(status, "store: \(reason)")
        }
    }

    /// Runs `body` in one transaction: committed if it returns, rolled back if it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try statement("BEGIN IMMEDIATE", pinned: true).run()
        do {
            let result = try body()
            try statement("COMMIT", pinned: true).run()
            return result
        } catch {
            try? statement("ROLLBACK", pinned: true).run()
            throw error
        }
    }

    func error(_ context: String) -> TetherError {
        Self.failure(sqlite3_errcode(handle), "store: \(context): \(String(cString: sqlite3_errmsg(handle)))")
    }

    /// A store held by another process past the busy timeout (migrating
    /// it, say) is `.busy`, not a broken store.
    static func failure(_ status: Int32, _ message: String) -> TetherError {
        guard status & 0xff == SQLITE_BUSY || status & 0xff == SQLITE_LOCKED else { return TetherError(.store, message) }
        return TetherError(.busy, message + " (another process has held the store's write lock for \(busyTimeoutMilliseconds / 1000) s)")
    }
}

/// A prepared statement, finalized when it goes away. Reset after every use,
/// so a kept statement holds no read transaction open.
final class Statement {
    private unowned let database: Database
    private var statement: OpaquePointer?
    /// The text it was prepared from: its key in the cache.
    let sql: String

    fileprivate init(database: Database, sql: String) throws {
        self.database = database
        self.sql = sql
        guard sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK else {
            throw database.error("prepare")
        }
    }

    /// Where bound text is copied for the length of one use (SQLITE_STATIC
    /// bindings, cleared by `finish`): one block kept and reused, not a
    /// copy SQLite allocates and frees for every text of every use.
    private var boundText: UnsafeMutableRawPointer?
    private var boundTextCapacity = 0
    /// Larger texts are left to SQLite to copy: a cached statement keeps no big block.
    private static let boundTextLimit = 4 * 1024

    deinit {
        sqlite3_finalize(statement)
        boundText?.deallocate()
    }

    /// Runs one use of the statement; when warnings are logged, times it
    /// (with the reading of its rows) and logs it if slow: its SQL text,
    /// which holds no values (they are bound), and the time. When they are
    /// not, it costs one atomic load.
    @inline(__always)
    private func timed<T>(_ body: () throws -> T) rethrows -> T {
        guard Log.isEnabled(.warning) else { return try body() }
        let start = MonotonicTime.now()
        defer { Database.noteTime(since: start, sqlite3_sql(statement).map { String(cString: $0) } ?? "?") }
        return try body()
    }

    private func bind(_ values: [SQLValue]) throws {
        // The block first, at its size for this use: it must not move once a
        // text points into it. Never while a use is under way (a bind then
        // fails, and the rows being read may still point into the block).
        let blockFree = sqlite3_stmt_busy(statement) == 0
        var textBytes = 0
        for case .text(let s) in values where s.utf8.count <= Self.boundTextLimit { textBytes += s.utf8.count }
        if blockFree && textBytes > boundTextCapacity {
            boundText?.deallocate()
            boundTextCapacity = max(textBytes, 256)
            boundText = UnsafeMutableRawPointer.allocate(byteCount: boundTextCapacity, alignment: 1)
        }
        var used = 0
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let status: Int32
            switch value {
            case .null: status = sqlite3_bind_null(statement, index)
            case .integer(let i): status = sqlite3_bind_int64(statement, index, i)
            case .real(let d): status = sqlite3_bind_double(statement, index, d)
            case .text(var s):
                // By length, so text holding U+0000 is stored whole.
                status = s.withUTF8 { bytes in
                    // Empty text has no buffer of its own.
                    guard let base = bytes.baseAddress else {
                        return sqlite3_bind_text64(statement, index, "", 0, tether_sqlite_transient(), UInt8(SQLITE_UTF8))
                    }
                    guard blockFree, let block = boundText, bytes.count <= Self.boundTextLimit,
                          used + bytes.count <= boundTextCapacity else {
                        return sqlite3_bind_text64(statement, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
                                                   sqlite3_uint64(bytes.count), tether_sqlite_transient(), UInt8(SQLITE_UTF8))
                    }
                    let copy = block + used
                    copy.copyMemory(from: base, byteCount: bytes.count)
                    used += bytes.count
                    return sqlite3_bind_text64(statement, index, copy.assumingMemoryBound(to: CChar.self),
                                               sqlite3_uint64(bytes.count), nil, UInt8(SQLITE_UTF8))  // nil: SQLITE_STATIC
                }
            }
            guard status == SQLITE_OK else { throw database.error("bind") }
        }
    }

    /// Steps once; true while a row is available.
    private func step() throws -> Bool {
        switch sqlite3_step(statement) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = database.error("step")
            database.dropFailed(self)
            throw error
        }
    }

    private func finish() {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    func run(_ values: [SQLValue] = []) throws {
        try timed {
            defer { finish() }
            try bind(values)
            while try step() {}
        }
    }

    /// `run`, then how many rows it inserted, updated or deleted.
    func runCountingChanges(_ values: [SQLValue] = []) throws -> Int {
        try run(values)
        return Int(sqlite3_changes64(sqlite3_db_handle(statement)))
    }

    /// A result row read in place, lent only for the call that gives it:
    /// no row arrays are built for results that are decoded straight away.
    struct Row {
        fileprivate let statement: Statement

        subscript(index: Int) -> SQLValue { statement.column(index) }
    }

    /// Calls `body` with each row.
    func each(_ values: [SQLValue] = [], _ body: (Row) throws -> Void) throws {
        try timed {
            defer { finish() }
            try bind(values)
            while try step() { try body(Row(statement: self)) }
        }
    }

    /// The first row given to `body`, nil without one; steps no further
    /// (for a lookup by a unique key, the step that would find no more).
    func first<T>(_ values: [SQLValue] = [], _ body: (Row) throws -> T) throws -> T? {
        try timed {
            defer { finish() }
            try bind(values)
            return try step() ? body(Row(statement: self)) : nil
        }
    }

    func rows(_ values: [SQLValue] = []) throws -> [[SQLValue]] {
        var rows: [[SQLValue]] = []
        let count = Int(sqlite3_column_count(statement))
        try each(values) { row in rows.append((0..<count).map { row[$0] }) }
        return rows
    }

    /// Each row's first column as raw bytes (empty for a non-text value),
    /// without building rows: for reading very many ids.
    func eachText(_ values: [SQLValue] = [], _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try timed {
            defer { finish() }
            try bind(values)
            while try step() {
                guard sqlite3_column_type(statement, 0) == SQLITE_TEXT else {
                    try body(UnsafeRawBufferPointer(start: nil, count: 0))
                    continue
                }
                try body(UnsafeRawBufferPointer(start: sqlite3_column_text(statement, 0), count: Int(sqlite3_column_bytes(statement, 0))))
            }
        }
    }

    /// Each row's first column where it is an integer (rowids), without building rows.
    func eachInteger(_ values: [SQLValue] = [], _ body: (Int64) throws -> Void) throws {
        try timed {
            defer { finish() }
            try bind(values)
            while try step() {
                if sqlite3_column_type(statement, 0) == SQLITE_INTEGER { try body(sqlite3_column_int64(statement, 0)) }
            }
        }
    }

    fileprivate func column(_ index: Int) -> SQLValue {
        // The column's value once, then its parts: each sqlite3_column_* call
        // finds the column again. The value is unprotected, which is safe
        // here: this connection is NOMUTEX and held by one thread at a time.
        guard let value = sqlite3_column_value(statement, Int32(index)) else { return .null }
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: return .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: return .real(sqlite3_value_double(value))
        case SQLITE_NULL: return .null
        default:
            let text = sqlite3_value_text(value)  // before its length: the length of this form
            let bytes = UnsafeRawBufferPointer(start: text, count: Int(sqlite3_value_bytes(value)))
            return .text(String(decoding: bytes, as: UTF8.self))
        }
    }
}
