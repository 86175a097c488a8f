// The C ABI, "diagnostics" section of include/tether.h: leak counters.
import CTetherABI
import Tether

@_cdecl("tether_debug_count")
public func tether_debug_count(_ what: tether_debug_counter, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    call {
        let count: Int
        switch what {
        case TETHER_DEBUG_CONTEXTS: count = Live.count(.contexts)
        case TETHER_DEBUG_OBJECTS: count = Live.count(.objects)
        case TETHER_DEBUG_OBJECT_HANDLES: count = Handles.shared.count(.object)
        case TETHER_DEBUG_RESULTS: count = Handles.shared.count(.results)
        case TETHER_DEBUG_TASKS: count = Live.count(.tasks)
        case TETHER_DEBUG_OBSERVERS: count = Live.count(.observers)
        case TETHER_DEBUG_THREADS: count = Live.count(.threads)
        case TETHER_DEBUG_PREPARED_STATEMENTS: count = Live.count(.prepares)
        case TETHER_DEBUG_REQUESTS: count = Handles.shared.count(.request)
        default: throw TetherError(.invalid, "unknown live count \(what.rawValue)")
        }
        try output(out, Int64(count))
    }
}
