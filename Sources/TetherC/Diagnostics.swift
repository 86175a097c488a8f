// The C ABI, "diagnostics" section of include/tether.h: leak counters.
import CTetherABI
import Tether

@_cdecl("tether_live_count")
public func tether_live_count(_ what: tether_live, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    call {
        let count: Int
        switch what {
        case TETHER_LIVE_CONTEXTS: count = Live.count(.contexts)
        case TETHER_LIVE_OBJECTS: count = Live.count(.objects)
        case TETHER_LIVE_OBJECT_HANDLES: count = Handles.shared.count(.object)
        case TETHER_LIVE_RESULTS: count = Handles.shared.count(.results)
        case TETHER_LIVE_TASKS: count = Live.count(.tasks)
        case TETHER_LIVE_OBSERVERS: count = Live.count(.observers)
        case TETHER_LIVE_THREADS: count = Live.count(.threads)
        case TETHER_LIVE_PREPARED_STATEMENTS: count = Live.count(.prepares)
        case TETHER_LIVE_REQUESTS: count = Handles.shared.count(.request)
        default: throw TetherError(.invalid, "unknown live count \(what.rawValue)")
        }
        try output(out, Int64(count))
    }
}
