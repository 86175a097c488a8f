// libFuzzer target: the C ABI driven by random call sequences (through the
// same functions a C host calls) on a context over an in-memory server.
// Bytes choose the calls, their handles and arguments, stale and bogus
// handles included. Nothing may crash; every task and observer gets exactly
// one final callback; after close and release nothing is left alive.
@testable import Tether
@testable import TetherC
import CTetherABI
import Glibc

private let server: MemoryServer = {
    let items = Spec(name: "items", route: "items", idField: "id", versionField: "last_modified",
                     fields: [FieldSpec(name: "Title", type: .text, code: 501), FieldSpec(name: "Rank", type: .integer),
                              FieldSpec(name: "Data", type: .json)], operations: .all)
    let notes = Spec(name: "notes", route: "notes", idField: "id", versionField: "last_modified",
                     fields: [FieldSpec(name: "Body", type: .text)], operations: .all)
    let server = MemoryServer(name: "fuzz", specs: [items, notes], pageSize: 4)
    for rank in 0..<12 {
        server.put("items", id: "i\(rank)", [("Title", .string("item \(rank)")), ("Rank", .integer(Int64(rank))),
                                             ("Data", rank % 3 == 0 ? .array([.integer(Int64(rank))]) : .null)])
    }
    server.put("notes", id: "n0", [("Body", .string("note"))])
    return server
}()

/// What the callbacks saw, by the serial number each task and observer got
/// as its userdata.
private struct Calls {
    var finals: [Int: Int] = [:]
    var afterFinal: [Int] = []
    var results: [OpaquePointer] = []
}
private let calls = Lock(Calls())

private func serial(_ userdata: UnsafeMutableRawPointer?) -> Int { Int(bitPattern: userdata) }

private let fetchCallback: tether_fetch_cb = { task, phase, status, message, results, userdata in
    require(message != nil && results != nil, "a fetch callback without message or results")
    calls.withLock { calls in
        let id = serial(userdata)
        if calls.finals[id, default: 0] > 0 { calls.afterFinal.append(id) }
        if phase == TETHER_PHASE_FINAL { calls.finals[id, default: 0] += 1 }
        calls.results.append(results!)
    }
    // A call from inside a callback must answer, not deadlock.
    if serial(userdata) % 3 == 0 { _ = tether_task_cancel(task) }
}

private let observerCallback: tether_observer_cb = { object, key, status, userdata in
    require(object != nil && key != nil, "an observer callback without object or key")
    calls.withLock { calls in
        let id = serial(userdata)
        if calls.finals[id, default: 0] > 0 { calls.afterFinal.append(id) }
        if status == TETHER_E_CANCELLED { calls.finals[id, default: 0] += 1 }
    }
    var value = tether_value()
    _ = tether_object_peek(object, key, &value)
    tether_value_free(&value)
}

private struct Input {
    var bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    var isEmpty: Bool { position >= bytes.count }
    mutating func next() -> Int {
        defer { position += 1 }
        return position < bytes.count ? Int(bytes[position]) : 0
    }
    mutating func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[next() % items.count] }
}

private let keys = ["Title", "Rank", "Data", "TitlePeek", "id", "last_modified", "Body", "", "nope", "Title\u{1}",
                    "Item", "Item.Title", "Text", "version"]
private let ids = ["i0", "i1", "i5", "i11", "missing", "n0", "é"]
private let entities = ["items", "notes", "nope", "", "remarks"]
private let uris = ["tether://server/items/i1", "tether://private/remarks/r", "tether://server/items/%zz", "tether://x/items/i1",
                    "tether://server/items/", "items/i1", ""]
private let sorts: [String?] = [nil, "Rank", "-Rank", "Title,-Rank", "nope", ",", "-"]

private func live(_ what: tether_debug_counter) -> Int64 {
    var count: Int64 = -1
    require(tether_debug_count(what, &count) == TETHER_OK)
    return count
}

private let documentedStatuses: ClosedRange<Int32> = TETHER_E_EXPIRED...TETHER_OK

private let saveCallback: tether_save_cb = { task, status, message, report, userdata in
    require(message != nil && report != nil, "a save callback without message or report")
    calls.withLock { calls in
        let id = serial(userdata)
        if calls.finals[id, default: 0] > 0 { calls.afterFinal.append(id) }
        calls.finals[id, default: 0] += 1
    }
    // The report is read as a host reads it, out of range too.
    var failures = 0
    require(tether_save_report_failure_count(report, &failures) == TETHER_OK, "failure count")
    for index in 0...failures {
        var object: OpaquePointer?
        var why: Int32 = 0
        var text: UnsafePointer<CChar>?
        let found = tether_save_report_failure_at(report, index, &object, &why, &text)
        require(found == (index < failures ? TETHER_OK : TETHER_E_NOT_FOUND), "failure at \(index) gave \(found)")
        var local: Int64 = 0, server: Int64 = 0
        var keys = 0
        if tether_save_report_conflict_at(report, index, &local, &server, &keys) == TETHER_OK {
            for key in 0...keys {
                var name: UnsafePointer<CChar>?
                _ = tether_save_report_conflict_key_at(report, index, key, &name)
            }
            var value = tether_value()
            _ = tether_save_report_server_value(report, index, "Title", &value)
            tether_value_free(&value)
        }
    }
    if serial(userdata) % 3 == 0 { _ = tether_task_cancel(task) }
}

/// A value of any type, ill-formed ones too; `storage` keeps text alive.
private func anyValue(_ input: inout Input, _ storage: inout [UnsafeMutablePointer<CChar>]) -> tether_value {
    let texts = ["new", "", "{\"a\": [1]}", "not json", "é\u{0}x", "\u{FF}"]
    var value = tether_value()
    value.type = tether_type(rawValue: UInt32(input.next() % 7))
    value.integer = Int64(input.next()) - 128
    value.real = [0.5, .nan, .infinity, 3][input.next() % 4]
    let text = strdup(input.pick(texts)!)!
    storage.append(text)
    value.length = strlen(text)
    if input.next() % 5 == 0, value.length > 0 { text[0] = CChar(bitPattern: 0xFF) }  // invalid UTF-8
    value.text = input.next() % 9 == 0 ? nil : text
    return value
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHandles(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(bytes: UnsafeBufferPointer(start: data, count: size))
    var options = ContextOptions(storePath: ":memory:")
    // A local store beside the server's: its entity refers to the server's items.
    options.localStores = [LocalStoreOptions(configuration: "private", path: ":memory:", specs: #"""
        {"remarks": {"properties": {"Text": {"type": "string"},
         "Item": {"type": "string", "x-tether-to": "items", "x-tether-delete": "cascade"}}}}
        """#)]
    options.delivery = input.next() % 2 == 0 ? .thread : .poll
    options.objectCacheSize = input.next() % 8
    // Only the handle is kept, as a C host has it: the context must be freed once closed.
    guard let ctx = try? TetherC.register(Context.open(options, connection: MemoryConnection(server))) else {
        fatalError("a context over the memory server did not open")
    }

    var owned: [OpaquePointer] = []       // object references this host holds
    var tasks: [(OpaquePointer, Int)] = []
    var observers: [(OpaquePointer, Int)] = []
    var started: [Int] = []               // serials that must see exactly one final
    var nextSerial = 1
    var closed = false
    var siblings: [OpaquePointer] = []
    var texts: [UnsafeMutablePointer<CChar>] = []
    defer { texts.forEach { free($0) } }
    let bogus = [OpaquePointer(bitPattern: 16), OpaquePointer(bitPattern: 0x7fff_0000), OpaquePointer(bitPattern: 3), nil]

    func check(_ status: Int32, _ what: String) {
        require(documentedStatuses.contains(status), "\(what) returned \(status), not a documented status")
        if closed { require(status != TETHER_OK, "\(what) succeeded after close") }
    }
    func anyObject(_ input: inout Input) -> OpaquePointer? {
        input.next() % 8 == 0 ? input.pick(bogus) ?? nil : input.pick(owned)
    }

    for _ in 0..<200 where !input.isEmpty {
        switch input.next() % 23 {
        case 0:
            var object: OpaquePointer?
            let status = tether_context_object(ctx, input.pick(entities)!, input.pick(ids)!, &object)
            check(status, "object")
            if status == TETHER_OK { owned.append(object!) }
        case 1:
            if let object = input.pick(owned) {
                let status = tether_object_retain(object)
                check(status, "retain")
                if status == TETHER_OK { owned.append(object) }
            }
        case 2:
            if !owned.isEmpty {
                let object = owned.remove(at: input.next() % owned.count)
                let status = tether_object_free(object)
                require(status == (closed ? TETHER_E_HANDLE : TETHER_OK), "release of an owned reference gave \(status)")
            }
        case 3, 4:
            var value = tether_value()
            let key = input.pick(keys)!
            let status = input.next() % 2 == 0 ? tether_object_peek(anyObject(&input), key, &value)
                                                : tether_object_get(anyObject(&input), key, &value)
            check(status, "read")
            tether_value_free(&value)
        case 5:
            var value = tether_value()
            let code = Int32(truncatingIfNeeded: [1, 2, 501, 101, 0, -1, Int(Int32.max)][input.next() % 7])
            check(tether_object_peek_code(anyObject(&input), code, &value), "peek code")
            tether_value_free(&value)
        case 6:
            let id = nextSerial
            nextSerial += 1
            var observer: OpaquePointer?
            let status = tether_object_observe(anyObject(&input), input.pick(keys)!, observerCallback,
                                               UnsafeMutableRawPointer(bitPattern: id), &observer)
            check(status, "observe")
            if status == TETHER_OK {
                observers.append((observer!, id))
                started.append(id)
            }
        case 7:
            if let (observer, _) = input.pick(observers) {
                let status = tether_observer_cancel(observer)
                require(status == TETHER_OK || status == TETHER_E_HANDLE, "observer remove gave \(status)")
            }
        case 8, 9:
            let id = nextSerial
            nextSerial += 1
            var fetch = tether_fetch_options()
            _ = tether_fetch_options_init(&fetch, UInt32(TETHER_FETCH_OPTIONS_VERSION))
            var task: OpaquePointer?
            let status = input.pick(entities)!.withCString { entity in
                (input.pick(sorts)! ?? "").withCString { sort in
                    fetch.entity = entity
                    fetch.sort = input.next() % 4 == 0 ? nil : sort
                    fetch.limit = Int64(input.next() % 6) - 1
                    fetch.policy = tether_cache_policy(rawValue: UInt32(input.next() % 5))
                    return tether_fetch_start(ctx, &fetch, fetchCallback, UnsafeMutableRawPointer(bitPattern: id), &task)
                }
            }
            check(status, "fetch")
            if status == TETHER_OK {
                tasks.append((task!, id))
                started.append(id)
            }
        case 10:
            if let (task, _) = input.pick(tasks) {
                let status = tether_task_cancel(task)
                require(status == TETHER_OK || status == TETHER_E_HANDLE, "cancel gave \(status)")
            }
        case 11:
            let mine = calls.withLock { calls -> OpaquePointer? in
                calls.results.isEmpty ? nil : calls.results[input.next() % calls.results.count]
            }
            var count = 0
            if tether_results_count(mine, &count) == TETHER_OK, count > 0 {
                var object: OpaquePointer?
                check(tether_results_object_at(mine, input.next() % (count + 1), &object), "results object")
            }
        case 12:
            var delivered = 0
            check(tether_context_poll(ctx, Int32(input.next() % 3), &delivered), "poll")
        case 13:
            var entity: OpaquePointer?
            if tether_context_entity_at(ctx, input.next() % 3, &entity) == TETHER_OK {
                var name: UnsafePointer<CChar>?
                var code: Int32 = 0
                var type = tether_type(rawValue: 0)
                check(tether_entity_attribute_at(entity, input.next() % 6, &name, &code, &type, nil), "attribute")
            }
        case 14:
            // Releasing NULL is a no-op; anything else about a bogus handle is TETHER_E_HANDLE.
            let handle = input.pick(bogus) ?? nil
            let released = handle == nil ? TETHER_OK : TETHER_E_HANDLE
            require(tether_object_free(handle) == released, "object release of \(String(describing: handle))")
            require(tether_results_free(handle) == released, "results release of \(String(describing: handle))")
            require(tether_task_cancel(handle) == TETHER_E_HANDLE, "cancel of \(String(describing: handle))")
            require(tether_observer_cancel(handle) == TETHER_E_HANDLE, "remove of \(String(describing: handle))")
        case 15, 16:
            var value = anyValue(&input, &texts)
            let status = input.next() % 4 == 0
                ? tether_object_set_code(anyObject(&input), Int32(truncatingIfNeeded: [1, 2, 501, 0][input.next() % 4]), &value)
                : tether_object_set(anyObject(&input), input.pick(keys)!, &value)
            check(status, "set")
        case 17:
            var object: OpaquePointer?
            let id = input.next() % 3 == 0 ? nil : strdup(input.pick(ids + ["new\(input.next())"])!)
            defer { free(id) }
            let status = tether_context_insert(ctx, input.pick(entities)!, id, &object)
            check(status, "insert")
            if status == TETHER_OK { owned.append(object!) }
        case 18:
            let object = anyObject(&input)
            switch input.next() % 4 {
            case 0: check(tether_object_delete(object), "delete")
            case 1: check(tether_object_rollback(object), "rollback")
            case 2: check(tether_context_rollback(ctx), "context rollback")
            default:
                var pending = tether_pending(rawValue: 0)
                var count = 0
                var name: UnsafePointer<CChar>?
                check(tether_object_pending(object, &pending), "pending")
                check(tether_object_changed_key_count(object, &count), "changed keys")
                check(tether_object_changed_key_at(object, input.next() % 3, &name), "changed key")
                var value = tether_value()
                check(tether_object_committed(object, input.pick(keys)!, &value), "committed")
                tether_value_free(&value)
            }
        case 19, 20:
            let id = nextSerial
            nextSerial += 1
            var options = tether_save_options()
            _ = tether_save_options_init(&options, UInt32(TETHER_SAVE_OPTIONS_VERSION))
            options.merge_policy = Int32(input.next() % 6) - 1
            var task: OpaquePointer?
            let defaults = input.next() % 5 == 0
            let status = withUnsafePointer(to: &options) { pointer in
                tether_save_start(ctx, defaults ? nil : pointer, saveCallback, UnsafeMutableRawPointer(bitPattern: id), &task)
            }
            check(status, "save")
            if status == TETHER_OK {
                tasks.append((task!, id))
                started.append(id)
            }
        case 21:
            var sibling: OpaquePointer?
            let status = tether_context_open_sibling(ctx, ["a", "b", ""][input.next() % 3], TETHER_DELIVER_THREAD, &sibling)
            check(status, "sibling")
            if status == TETHER_OK {
                siblings.append(sibling!)
                if let object = input.pick(owned) {
                    var local: OpaquePointer?
                    if tether_context_local_object(sibling, object, &local) == TETHER_OK {
                        var value = tether_value()
                        _ = tether_object_set(local, "Title", &value)
                        require(tether_object_free(local) == TETHER_OK, "release of a local object")
                    }
                }
            }
        case 22:
            switch input.next() % 3 {
            case 0:
                check(tether_object_set_related(anyObject(&input), input.pick(keys)!, anyObject(&input)), "set related")
            case 1:
                var value = tether_value()
                let status = tether_object_uri(anyObject(&input), &value)
                check(status, "uri")
                if status == TETHER_OK {
                    var object: OpaquePointer?
                    let found = tether_context_object_for_uri(ctx, value.text, &object)
                    check(found, "object for its own uri")
                    if found == TETHER_OK { owned.append(object!) }
                }
                tether_value_free(&value)
            default:
                var object: OpaquePointer?
                let status = tether_context_object_for_uri(ctx, input.pick(uris)!, &object)
                check(status, "object for uri")
                if status == TETHER_OK { owned.append(object!) }
            }
        default:
            if input.next() % 4 == 0 {
                require(tether_context_close(ctx) == (closed ? TETHER_E_HANDLE : TETHER_OK), "close")
                closed = true
            }
        }
    }
    // Siblings close before or after the context they came from.
    let early = siblings.prefix(siblings.count / 2)
    for sibling in early { require(tether_context_close(sibling) == TETHER_OK, "sibling close") }
    if !closed { require(tether_context_close(ctx) == TETHER_OK, "close at the end") }
    for sibling in siblings.dropFirst(early.count) { require(tether_context_close(sibling) == TETHER_OK, "sibling close") }
    require(tether_context_close(ctx) == TETHER_E_HANDLE, "a second close")
    for object in owned { require(tether_object_free(object) == TETHER_E_HANDLE, "release after close") }

    let (finals, late) = calls.withLock { calls -> ([Int: Int], [Int]) in
        for results in calls.results { _ = tether_results_free(results) }
        calls.results = []
        defer { calls = Calls() }
        return (calls.finals, calls.afterFinal)
    }
    require(late.isEmpty, "callbacks after the final: \(late)")
    for id in started { require(finals[id] == 1, "task or observer \(id) saw \(finals[id] ?? 0) finals, not 1") }
    // The close delivered every final; what is left is freed once the
    // context's threads have let go (a moment).
    for what in [TETHER_DEBUG_CONTEXTS, TETHER_DEBUG_OBJECTS, TETHER_DEBUG_OBJECT_HANDLES, TETHER_DEBUG_RESULTS,
                 TETHER_DEBUG_TASKS, TETHER_DEBUG_OBSERVERS, TETHER_DEBUG_THREADS] {
        var waited = 0
        while live(what) != 0, waited < 2_000 {
            usleep(1_000)
            waited += 1
        }
        require(live(what) == 0, "live count \(what.rawValue) is \(live(what)) 2 s after close; all: "
                + (1...7).map { "\($0)=\(live(tether_debug_counter(rawValue: UInt32($0))))" }.joined(separator: " "))
    }
    return 0
}
