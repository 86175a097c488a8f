import Glibc
import Synchronization
import Tether
import CTetherABI

// MARK: save

@_cdecl("tether_save_options_init")
public func tether_save_options_init(_ opts: UnsafeMutablePointer<tether_save_options>?, _ version: UInt32) -> Int32 {
    call { try initialize(opts, version: version, "opts") }
}

extension tether_save_options: VersionedStruct {
    static var noun: String { "options" }
    static var initializer: String { "tether_save_options_init" }
    static var currentVersion: UInt32 { UInt32(TETHER_SAVE_OPTIONS_VERSION) }
    /// -1: the context's merge policy.
    static var defaults: Self { Self(version: 0, merge_policy: -1, progress: nil) }
}

/// A save's outcome as the host reads it during the callback; the strings
/// it lends live as long as it does.
final class SaveReportBox: @unchecked Sendable {
    // @unchecked: read only on the delivering thread, during the callback.
    let result: SaveResult
    let owner: UInt
    var objectHandles: [Int: OpaquePointer] = [:]
    var messages: [Int: UnsafeMutablePointer<CChar>] = [:]

    init(_ result: SaveResult, owner: UInt) {
        self.result = result
        self.owner = owner
    }

    deinit {
        for handle in objectHandles.values { _ = try? Handles.shared.release(handle, .object) }
        for message in messages.values { free(message) }
    }

    func failure(_ index: Int) throws -> SaveFailure {
        guard index >= 0, index < result.failures.count else { throw TetherError(.notFound, "no failure at \(index)") }
        return result.failures[index]
    }

    func conflict(_ index: Int) throws -> SaveConflict {
        guard let conflict = try failure(index).conflict else { throw TetherError(.notFound, "failure \(index) is not a conflict") }
        return conflict
    }
}

@_cdecl("tether_save_start")
public func tether_save_start(_ ctx: OpaquePointer?, _ opts: UnsafePointer<tether_save_options>?, _ callback: tether_save_cb?,
                              _ userdata: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (box, token) = try contextBox(ctx)
        guard let callback else { throw misuse("callback is NULL") }
        let options = try opts.map { try read($0) } ?? tether_save_options.defaults
        let policy = options.merge_policy == -1 ? nil : try mergePolicy(options.merge_policy)
        let task = try box.context.makeSave(policy: policy)
        let handle = try Handles.shared.register(task, kind: .task, owner: token).handle
        let host = HostCall(callback, userdata, handle: handle)
        let progress = options.progress.map { function in
            let progressHost = HostCall(function, userdata, handle: handle)
            return { @Sendable (told: SaveProgress) in
                progressHost.function(progressHost.handle, Int64(told.answered), Int64(told.total), progressHost.userdata)
            }
        }
        do {
            try task.start(progress: progress) { result in
                let report = SaveReportBox(result, owner: token)
                // Lives for the callback only: its handle dies after.
                let reportHandle = try? Handles.shared.register(report, kind: .report, owner: token).handle
                let code = result.error.map { status(of: $0.kind) } ?? TETHER_OK
                (result.error?.message ?? "").withCString { message in
                    host.function(host.handle, code, message, reportHandle, host.userdata)
                }
                if let reportHandle { Handles.shared.remove(reportHandle) }
                Handles.shared.remove(host.handle)
            }
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        out?.pointee = handle
    }
}

private func report(_ pointer: OpaquePointer?) throws -> SaveReportBox {
    try Handles.shared.resolve(pointer, .report, as: SaveReportBox.self)
}

@_cdecl("tether_save_report_counts")
public func tether_save_report_counts(_ pointer: OpaquePointer?, _ saved: UnsafeMutablePointer<Int>?,
                                      _ discarded: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let box = try report(pointer)
        saved?.pointee = box.result.saved
        discarded?.pointee = box.result.discarded
    }
}

@_cdecl("tether_save_report_failure_count")
public func tether_save_report_failure_count(_ pointer: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try report(pointer).result.failures.count) }
}

@_cdecl("tether_save_report_failure_at")
public func tether_save_report_failure_at(_ pointer: OpaquePointer?, _ index: Int, _ outObject: UnsafeMutablePointer<OpaquePointer?>?,
                                          _ outStatus: UnsafeMutablePointer<Int32>?,
                                          _ outMessage: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let box = try report(pointer)
        let failure = try box.failure(index)
        if let outObject {
            if box.objectHandles[index] == nil { box.objectHandles[index] = try objectHandle(failure.object, owner: box.owner) }
            outObject.pointee = box.objectHandles[index]
        }
        outStatus?.pointee = status(of: failure.error.kind)
        if let outMessage {
            if box.messages[index] == nil { box.messages[index] = strdup(failure.error.message) }
            outMessage.pointee = UnsafePointer(box.messages[index])
        }
    }
}

@_cdecl("tether_save_report_conflict_at")
public func tether_save_report_conflict_at(_ pointer: OpaquePointer?, _ index: Int, _ outLocal: UnsafeMutablePointer<Int64>?,
                                           _ outServer: UnsafeMutablePointer<Int64>?, _ outKeys: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        outLocal?.pointee = conflict.localVersion ?? -1
        outServer?.pointee = conflict.serverValues == nil ? -1 : conflict.serverVersion ?? -1
        outKeys?.pointee = conflict.differingAttributes.count
    }
}

@_cdecl("tether_save_report_conflict_key_at")
public func tether_save_report_conflict_key_at(_ pointer: OpaquePointer?, _ index: Int, _ keyIndex: Int,
                                               _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        guard keyIndex >= 0, keyIndex < conflict.differingAttributes.count else {
            throw TetherError(.notFound, "the conflict has no key at \(keyIndex)")
        }
        let box = try report(pointer)
        try output(out, try attributeName(conflict.object.entity, conflict.differingAttributes[keyIndex], owner: box.owner))
    }
}

@_cdecl("tether_save_report_server_value")
public func tether_save_report_server_value(_ pointer: OpaquePointer?, _ index: Int, _ key: UnsafePointer<CChar>?,
                                            _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        let conflict = try report(pointer).conflict(index)
        let attribute = try conflict.object.attributeIndex(bytes: try keyBytes(key))
        guard out != nil else { throw misuse("out is NULL") }
        guard let values = conflict.serverValues else {
            throw TetherError(.notFound, "the server has no record \(conflict.object.entity.name)/\(conflict.object.id)")
        }
        try fill(out, values[attribute])
    }
}
