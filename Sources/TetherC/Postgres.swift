// The C ABI, "PostgreSQL" section of include/tether.h: its options and open.
import CTetherABI
import Tether

@_cdecl("tether_postgres_options_init")
public func tether_postgres_options_init(_ pg: UnsafeMutablePointer<tether_postgres_options>?, _ version: UInt32) -> Int32 {
    call { try initialize(pg, version: version, "pg") }
}

extension tether_postgres_options: VersionedStruct {
    static var noun: String { "PostgreSQL options" }
    static var initializer: String { "tether_postgres_options_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_POSTGRES_OPTIONS_VERSION) }
    static var defaults: Self { Self() }
}

@_cdecl("tether_context_open_postgres")
public func tether_context_open_postgres(_ opts: UnsafePointer<tether_context_options>?,
                                         _ pgOptions: UnsafePointer<tether_postgres_options>?,
                                         _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let raw = try contextOptions(opts, out)
        guard let pgOptions else { throw misuse("pg is NULL") }
        let rawPG = try read(pgOptions)
        var pg = PostgresOptions(conninfo: try text(rawPG.conninfo, "conninfo"),
                                 schema: try optionalText(rawPG.schema, "schema") ?? "public")
        pg.timeoutMilliseconds = raw.timeout_ms
        let options = try coreOptions(raw)
        try output(out, try register(Context.open(options, connection: PostgresConnection(pg))))
    }
}

@_cdecl("tether_postgres_install")
public func tether_postgres_install(_ pgOptions: UnsafePointer<tether_postgres_options>?, _ tracked: UnsafeMutablePointer<Int32>?)
    -> Int32 {
    call {
        guard let pgOptions else { throw misuse("pg is NULL") }
        let rawPG = try read(pgOptions)
        let pg = PostgresOptions(conninfo: try text(rawPG.conninfo, "conninfo"),
                                 schema: try optionalText(rawPG.schema, "schema") ?? "public")
        let added = try PostgresConnection.install(pg)
        tracked?.pointee = Int32(clamping: added)
    }
}
