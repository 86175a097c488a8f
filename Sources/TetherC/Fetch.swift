// The C ABI, "fetch" section of include/tether.h: fetch options, start, cancel.
import CTetherABI
import Glibc
import Tether

@_cdecl("tether_fetch_options_init")
public func tether_fetch_options_init(_ opts: UnsafeMutablePointer<tether_fetch_options>?, _ version: UInt32) -> Int32 {
    call { try initialize(opts, version: version, "opts") }
}

extension tether_fetch_options: VersionedStruct {
    static var noun: String { "options" }
    static var initializer: String { "tether_fetch_options_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_FETCH_OPTIONS_VERSION) }
    static var versionEnds: [PartialKeyPath<Self>] { [\.predicate, \.offset, \.result_type, \.live, \.related_owner] }
    static var defaults: Self {
        var options = Self()
        options.policy = TETHER_POLICY_CACHE_THEN_SERVER
        options.result_type = TETHER_RESULT_OBJECTS
        return options
    }
}

@_cdecl("tether_fetch_start")
public func tether_fetch_start(_ ctx: OpaquePointer?, _ opts: UnsafePointer<tether_fetch_options>?,
                               _ callback: tether_fetch_cb?, _ userdata: UnsafeMutableRawPointer?,
                               _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard let opts else { throw misuse("opts is NULL") }
        guard let callback else { throw misuse("callback is NULL") }
        let raw = try read(opts)
        var request = FetchRequest(entity: raw.related_owner != nil && raw.entity == nil ? "" : try text(raw.entity, "entity"))
        if raw.related_owner != nil || raw.related_name != nil {
            let (owner, ownerContext) = try object(raw.related_owner)
            guard ownerContext == token else { throw TetherError(.invalid, "related_owner belongs to another context") }
            request.related = (owner, try text(raw.related_name, "related_name"))
        }
        request.sort = try optionalText(raw.sort, "sort")
        request.limit = raw.limit
        switch raw.policy {
        case TETHER_POLICY_CACHE_THEN_SERVER: request.policy = .cacheThenServer
        case TETHER_POLICY_CACHE_ONLY: request.policy = .cacheOnly
        case TETHER_POLICY_SERVER_ONLY: request.policy = .serverOnly
        case TETHER_POLICY_CACHE_ELSE_SERVER: request.policy = .cacheElseServer
        default: throw TetherError(.invalid, "unknown cache policy \(raw.policy.rawValue)")
        }
        request.predicate = try optionalText(raw.predicate, "predicate")
        request.offset = raw.offset
        request.serverQuery = try optionalText(raw.server_query, "server_query")
        if raw.argument_count > 0 {
            guard let arguments = raw.arguments else { throw misuse("arguments is NULL but argument_count is \(raw.argument_count)") }
            request.arguments = try (0..<raw.argument_count).map { try argument(arguments[$0], number: $0 + 1) }
        }
        switch raw.result_type {
        case TETHER_RESULT_OBJECTS: request.resultType = .objects
        case TETHER_RESULT_IDS: request.resultType = .ids
        case TETHER_RESULT_COUNT: request.resultType = .count
        case TETHER_RESULT_VALUES: request.resultType = .values
        default: throw TetherError(.invalid, "unknown result type \(raw.result_type.rawValue)")
        }
        if let properties = try optionalText(raw.properties, "properties") {
            request.properties = properties.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        request.batchSize = Int(clamping: raw.batch_size)
        request.live = raw.live != 0
        let task = try box.context.makeFetch(request)
        let handle = try Handles.shared.register(task, kind: .task, owner: token).handle
        let host = HostCall(callback, userdata, handle: handle)
        let progress = raw.progress.map { function in
            let progressHost = HostCall(function, userdata, handle: handle)
            return { @Sendable (told: FetchProgress) in
                progressHost.function(progressHost.handle, told.received, told.total ?? -1, progressHost.userdata)
            }
        }
        do {
            try task.start(progress: progress) { result in
                // Owned by the callee. Finals come before close removes the
                // context's handles, so this succeeds.
                let results = ResultsBox(result.results, owner: token)
                guard let resultsHandle = try? Handles.shared.register(results, kind: .results, owner: token).handle else {
                    return
                }
                let phase: tether_phase
                switch result.phase {
                case .cached: phase = TETHER_PHASE_CACHED
                case .live: phase = TETHER_PHASE_LIVE
                case .final: phase = TETHER_PHASE_FINAL
                }
                let code = result.error.map { status(of: $0.kind) } ?? TETHER_OK
                (result.error?.message ?? "").withCString { message in
                    host.function(host.handle, phase, code, message, resultsHandle, host.userdata)
                }
                if result.phase == .final { Handles.shared.remove(host.handle) }
            }
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        out?.pointee = handle
    }
}

@_cdecl("tether_task_cancel")
public func tether_task_cancel(_ task: OpaquePointer?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolve(task, .task, as: AnyObject.self)
        if let save = resolved as? SaveTask { try save.cancel() } else { try (resolved as! FetchTask).cancel() }
    }
}
