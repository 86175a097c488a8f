// tether_log_set: the host's C hook as the core log's sink.
import CTetherABI
import Glibc
import Tether

/// Each category's name as a C string, made once: the hook borrows it.
private let categoryNames: [LogCategory: ConstantCString] =
    Dictionary(uniqueKeysWithValues: LogCategory.allCases.map { ($0, ConstantCString($0.rawValue)) })

/// The host's hook and its userdata.
// @unchecked: a C function pointer and the host's pointer force it. The core
// calls the sink under its log lock, one call at a time, and install waits
// out a call in progress, so the host's pointer is never used after
// tether_log_set replaces it.
private struct HostHook: @unchecked Sendable {
    let callback: tether_log_callback
    let userdata: UnsafeMutableRawPointer?

    func callAsFunction(_ level: LogLevel, _ category: LogCategory, _ message: String) {
        let cLevel = tether_log_level(rawValue: UInt32(level.rawValue))
        // The core's messages hold no U+0000 (one that did would end early).
        message.withCString { callback(cLevel, categoryNames[category]?.pointer, $0, userdata) }
    }
}

@_cdecl("tether_log_set")
public func tether_log_set(_ maxLevel: tether_log_level, _ callback: tether_log_callback?,
                           _ userdata: UnsafeMutableRawPointer?) -> Int32 {
    call {
        guard let level = LogLevel(rawValue: Int(maxLevel.rawValue)) else {
            throw TetherError(.invalid, "log level \(maxLevel.rawValue) is not one of TETHER_LOG_OFF..TETHER_LOG_DEBUG")
        }
        guard let callback, level != .off else { return try Log.install(.off, nil) }
        let hook = HostHook(callback: callback, userdata: userdata)
        try Log.install(level) { level, category, message in hook(level, category, message) }
    }
}
