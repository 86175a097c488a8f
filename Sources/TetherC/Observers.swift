// The C ABI, "observers" section of include/tether.h.
import CTetherABI
import Glibc
import Tether

@_cdecl("tether_object_observe")
public func tether_object_observe(_ obj: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ callback: tether_observer_cb?,
                                  _ userdata: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let (object, owner) = try object(obj)
        let key = try text(key, "key")
        guard let callback else { throw misuse("callback is NULL") }
        let observer = try object.makeObserver(key: key)
        let (handle, strings) = try Handles.shared.register(observer, kind: .observer, owner: owner, strings: [key])
        // The observer holds its object's handle, so the callback can lend it.
        let objectPointer: OpaquePointer
        do {
            objectPointer = try objectHandle(object, owner: owner)
        } catch {
            Handles.shared.remove(handle)
            throw error
        }
        let host = HostCall(callback, userdata, handle: handle, object: objectPointer, key: strings[0])
        do {
            try observer.activate { error in
                host.function(host.object, host.key, error.map { status(of: $0.kind) } ?? TETHER_OK, host.userdata)
                guard error?.kind == .cancelled else { return }  // the final call; failed refreshes are not
                Handles.shared.remove(host.handle)
                _ = try? Handles.shared.release(host.object, .object)
            }
        } catch {
            Handles.shared.remove(handle)
            _ = try? Handles.shared.release(objectPointer, .object)
            throw error
        }
        out?.pointee = handle
    }
}

@_cdecl("tether_observer_cancel")
public func tether_observer_cancel(_ observer: OpaquePointer?) -> Int32 {
    call {
        let resolved = try Handles.shared.resolve(observer, .observer, as: AnyObject.self)
        if let online = resolved as? OnlineObserver { try online.remove() } else { try (resolved as! KeyObserver).remove() }
    }
}
