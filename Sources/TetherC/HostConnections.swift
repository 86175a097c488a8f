import Glibc
import Tether
import CTetherABI

// MARK: host-written connections

/// The host's callbacks and userdata. @unchecked: C pointers force it; the
/// host promises its callbacks may run on the connection's thread.
private struct HostCallbacks: @unchecked Sendable {
    let request: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void
    let cancel: (@convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void)?
    let release: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
    let userdata: UnsafeMutableRawPointer?
}

/// The strings a request's handle lends, by name. The handle keeps them as
/// one list, freed with it; `make` and `init` are the one place that knows
/// its order.
private struct RequestStrings {
    let name, route, cursor, query: UnsafeMutablePointer<CChar>
    private let sortFields: ArraySlice<UnsafeMutablePointer<CChar>>
    private let ids: ArraySlice<UnsafeMutablePointer<CChar>>
    /// Each write's entity name, id and fields (JSON), in turn.
    private let writeStrings: ArraySlice<UnsafeMutablePointer<CChar>>

    static func make(_ request: HostRequest) -> [String] {
        let page = request.pageRequest
        return [page?.spec.name ?? "", page?.spec.route ?? "", page?.cursor?.token ?? "", page?.rawQuery ?? ""]
            + (page?.sort.map(\.field) ?? []) + request.ids
            + request.writes.flatMap { [$0.spec.name, $0.id, JSON.object($0.fields).serialized()] }
    }

    init(_ strings: [UnsafeMutablePointer<CChar>], of request: HostRequest) {
        (name, route, cursor, query) = (strings[0], strings[1], strings[2], strings[3])
        let idsStart = 4 + (request.pageRequest?.sort.count ?? 0)
        let writesStart = idsStart + request.ids.count
        sortFields = strings[4..<idsStart]
        ids = strings[idsStart..<writesStart]
        writeStrings = strings[writesStart...]
    }

    func sortField(_ index: Int) -> UnsafeMutablePointer<CChar> { sortFields[sortFields.startIndex + index] }
    func id(_ index: Int) -> UnsafeMutablePointer<CChar> { ids[ids.startIndex + index] }

    func write(_ index: Int) -> (entity: UnsafeMutablePointer<CChar>, id: UnsafeMutablePointer<CChar>,
                                 fields: UnsafeMutablePointer<CChar>) {
        let first = writeStrings.startIndex + 3 * index
        return (writeStrings[first], writeStrings[first + 1], writeStrings[first + 2])
    }
}

@_cdecl("tether_connection_init")
public func tether_connection_init(_ connection: UnsafeMutablePointer<tether_connection>?, _ version: UInt32) -> Int32 {
    call { try initialize(connection, version: version, "connection") }
}

extension tether_connection: VersionedStruct {
    static var noun: String { "connection" }
    static var initializer: String { "tether_connection_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_CONNECTION_VERSION) }
    static var defaults: Self { Self() }
}

@_cdecl("tether_context_open_host")
public func tether_context_open_host(_ opts: UnsafePointer<tether_context_options>?, _ connection: UnsafePointer<tether_connection>?,
                                     _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        guard let connection else { throw misuse("connection is NULL") }
        let raw = try read(connection)
        // From here on, release is called once whatever happens: by the
        // connection's shutdown once it exists (a failed open shuts it down),
        // else here.
        var host: HostConnection?
        do {
            guard let request = raw.request else { throw misuse("connection.request is NULL") }
            let callbacks = HostCallbacks(request: request, cancel: raw.cancel, release: raw.release, userdata: raw.userdata)
            let rawOptions = try contextOptions(opts, out)
            let options = try coreOptions(rawOptions)
            let made = try HostConnection(identity: try text(raw.identity, "connection.identity"),
                                          timeoutMilliseconds: rawOptions.timeout_ms, handlers: handlers(callbacks))
            host = made
            let context = try Context.open(options, connection: made)
            do {
                try output(out, try register(context))
            } catch {
                try? context.close()
                throw error
            }
        } catch {
            if host == nil { raw.release?(raw.userdata) }
            throw error
        }
    }
}

private func handlers(_ callbacks: HostCallbacks) -> HostConnection.Handlers {
    HostConnection.Handlers(
        send: { request in
            guard let handle = try? Handles.shared.register(request, kind: .request, owner: 0,
                                                            strings: RequestStrings.make(request)).handle else {
                try? request.complete(TetherError(.internal, "no handle for a host request"))
                return
            }
            callbacks.request(handle, callbacks.userdata)
        },
        cancel: { request in
            guard let handle = Handles.shared.existing(request) else { return }
            callbacks.cancel?(handle, callbacks.userdata)
        },
        ended: { request in
            if let handle = Handles.shared.existing(request) { Handles.shared.remove(handle) }
        },
        release: { callbacks.release?(callbacks.userdata) })
}

private func hostRequest(_ pointer: OpaquePointer?) throws -> (request: HostRequest, strings: RequestStrings) {
    let resolved = try Handles.shared.resolveWithOwner(pointer, .request, as: HostRequest.self)
    return (resolved.object, RequestStrings(resolved.strings, of: resolved.object))
}

private func pageRequest(_ request: HostRequest) throws -> PageRequest {
    guard let page = request.pageRequest else { throw misuse("a \(request.kind) request is about no entity") }
    return page
}

@_cdecl("tether_request_kind")
public func tether_request_kind(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<tether_request_kind_t>?) -> Int32 {
    call { try output(out, tether_request_kind_t(rawValue: UInt32(try hostRequest(r).request.kind.rawValue))) }
}

@_cdecl("tether_request_entity")
public func tether_request_entity(_ r: OpaquePointer?, _ outName: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                  _ outRoute: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        _ = try pageRequest(request)
        outName?.pointee = UnsafePointer(strings.name)
        outRoute?.pointee = UnsafePointer(strings.route)
    }
}

@_cdecl("tether_request_cursor")
public func tether_request_cursor(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        try output(out, try pageRequest(request).cursor == nil ? nil : UnsafePointer(strings.cursor))
    }
}

@_cdecl("tether_request_limit")
public func tether_request_limit(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    call { try output(out, try pageRequest(try hostRequest(r).request).limit) }
}

@_cdecl("tether_request_since")
public func tether_request_since(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?, _ outHas: UnsafeMutablePointer<Int32>?) -> Int32 {
    call {
        let since = try pageRequest(try hostRequest(r).request).since
        out?.pointee = since ?? 0
        outHas?.pointee = since == nil ? 0 : 1
    }
}

@_cdecl("tether_request_query")
public func tether_request_query(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        try output(out, try pageRequest(request).rawQuery == nil ? nil : UnsafePointer(strings.query))
    }
}

@_cdecl("tether_request_sort_count")
public func tether_request_sort_count(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try pageRequest(try hostRequest(r).request).sort.count) }
}

@_cdecl("tether_request_sort_at")
public func tether_request_sort_at(_ r: OpaquePointer?, _ index: Int, _ outField: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                   _ outDescending: UnsafeMutablePointer<Int32>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        let sort = try pageRequest(request).sort
        guard sort.indices.contains(index) else { throw TetherError(.notFound, "no sort key at index \(index)") }
        outField?.pointee = UnsafePointer(strings.sortField(index))
        outDescending?.pointee = sort[index].descending ? 1 : 0
    }
}

@_cdecl("tether_request_id_count")
public func tether_request_id_count(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try hostRequest(r).request.ids.count) }
}

@_cdecl("tether_request_id_at")
public func tether_request_id_at(_ r: OpaquePointer?, _ index: Int, _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        guard request.ids.indices.contains(index) else { throw TetherError(.notFound, "no id at index \(index)") }
        try output(out, UnsafePointer(strings.id(index)))
    }
}

@_cdecl("tether_request_write_count")
public func tether_request_write_count(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try hostRequest(r).request.writes.count) }
}

@_cdecl("tether_request_write_at")
public func tether_request_write_at(_ r: OpaquePointer?, _ index: Int, _ outKind: UnsafeMutablePointer<tether_write_kind>?,
                                    _ outEntity: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                    _ outID: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                    _ outFields: UnsafeMutablePointer<UnsafePointer<CChar>?>?,
                                    _ outIfVersion: UnsafeMutablePointer<Int64>?, _ outHasVersion: UnsafeMutablePointer<Int32>?) -> Int32 {
    call {
        let (request, strings) = try hostRequest(r)
        guard request.writes.indices.contains(index) else { throw TetherError(.notFound, "no write at index \(index)") }
        let write = request.writes[index]
        let lent = strings.write(index)
        let kinds: [RecordWrite.Kind: tether_write_kind] = [.create: TETHER_WRITE_CREATE, .patch: TETHER_WRITE_PATCH,
                                                            .replace: TETHER_WRITE_REPLACE, .delete: TETHER_WRITE_DELETE]
        outKind?.pointee = kinds[write.kind]!
        outEntity?.pointee = UnsafePointer(lent.entity)
        outID?.pointee = UnsafePointer(lent.id)
        outFields?.pointee = UnsafePointer(lent.fields)
        outIfVersion?.pointee = write.ifVersion ?? 0
        outHasVersion?.pointee = write.ifVersion == nil ? 0 : 1
    }
}

@_cdecl("tether_request_set_server_info")
public func tether_request_set_server_info(_ r: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?) -> Int32 {
    call { try hostRequest(r).request.setServerInfo(name: try text(name, "name"), version: try text(version, "version")) }
}

@_cdecl("tether_request_add_spec")
public func tether_request_add_spec(_ r: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ idField: UnsafePointer<CChar>?,
                                    _ versionField: UnsafePointer<CChar>?, _ schema: UnsafePointer<CChar>?, _ operations: UInt32) -> Int32 {
    call {
        try hostRequest(r).request.addSpec(name: try text(name, "name"), idField: try text(idField, "id_field"),
                                           versionField: try text(versionField, "version_field"),
                                           schema: try text(schema, "schema_json"), operations: Operations(rawValue: operations))
    }
}

@_cdecl("tether_request_add_specdef")
public func tether_request_add_specdef(_ r: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ specdef: UnsafePointer<CChar>?,
                                       _ operations: UInt32) -> Int32 {
    call {
        let request = try hostRequest(r).request
        let (spec, folding) = try SpecDef.taggedSpec(name: try text(name, "name"), specdef: try text(specdef, "specdef"),
                                                     operations: Operations(rawValue: operations))
        try request.addSpec(spec, foldingRecords: folding)
    }
}

@_cdecl("tether_request_add_record")
public func tether_request_add_record(_ r: OpaquePointer?, _ json: UnsafePointer<CChar>?) -> Int32 {
    call { try hostRequest(r).request.addRecord(json: try text(json, "record_json")) }
}

@_cdecl("tether_request_add_record_values")
public func tether_request_add_record_values(_ r: OpaquePointer?, _ names: UnsafePointer<UnsafePointer<CChar>?>?,
                                             _ values: UnsafePointer<tether_value>?, _ count: Int) -> Int32 {
    call {
        let request = try hostRequest(r).request
        guard count >= 0, count == 0 || (names != nil && values != nil) else { throw misuse("names or values is NULL") }
        try request.addRecord(values: try (0..<count).map { index in
            (try text(names![index], "names[\(index)]"), try hostValue(values! + index))
        })
    }
}

@_cdecl("tether_request_add_deleted")
public func tether_request_add_deleted(_ r: OpaquePointer?, _ id: UnsafePointer<CChar>?) -> Int32 {
    call { try hostRequest(r).request.addDeleted(id: try text(id, "id")) }
}

@_cdecl("tether_request_set_page")
public func tether_request_set_page(_ r: OpaquePointer?, _ next: UnsafePointer<CChar>?, _ version: Int64, _ total: Int64) -> Int32 {
    call {
        try hostRequest(r).request.setPage(next: try optionalText(next, "next_cursor"), version: version < 0 ? nil : version,
                                           total: total < 0 ? nil : total)
    }
}

@_cdecl("tether_request_set_count")
public func tether_request_set_count(_ r: OpaquePointer?, _ count: Int64) -> Int32 {
    call { try hostRequest(r).request.setCount(count) }
}

@_cdecl("tether_request_set_outcome")
public func tether_request_set_outcome(_ r: OpaquePointer?, _ index: Int, _ outcome: tether_write_outcome,
                                       _ json: UnsafePointer<CChar>?, _ status: Int32, _ message: UnsafePointer<CChar>?) -> Int32 {
    call {
        let request = try hostRequest(r).request
        let converted: HostRequest.Outcome
        switch outcome {
        case TETHER_OUTCOME_WRITTEN: converted = .written(try text(json, "record_json"))
        case TETHER_OUTCOME_DELETED: converted = .deleted
        case TETHER_OUTCOME_CONFLICT: converted = .conflict(try optionalText(json, "record_json"))
        case TETHER_OUTCOME_FAILED:
            guard status < 0, let failure = error(ofStatus: status, try optionalText(message, "message")) else {
                throw TetherError(.invalid, "a FAILED outcome needs a negative status")
            }
            converted = .failed(failure)
        default: throw TetherError(.invalid, "unknown write outcome \(outcome.rawValue)")
        }
        try request.setOutcome(index, converted)
    }
}

@_cdecl("tether_request_complete")
public func tether_request_complete(_ r: OpaquePointer?, _ status: Int32, _ message: UnsafePointer<CChar>?) -> Int32 {
    call {
        let request = try hostRequest(r).request
        let text = message.flatMap { String(validatingCString: $0) }
        guard isStatus(status) else { return try request.complete(badStatus: Int(status), text) }
        try request.complete(error(ofStatus: status, text))
    }
}
