import CCurl
import Glibc

/// libcurl, loaded when the first HTTP engine is made rather than when
/// libtether.so is: libcurl.so.4 pulls in some 30 libraries, about 5 ms of
/// every load of libtether, and hosts that never open an HTTP connection
/// should not pay for them. Loaded once and never unloaded.
///
/// Call a function as `curl.multi_perform(...)`; the variadic ones
/// (setopt, getinfo) only through the typed C wrappers of shim.h, given
/// `curl.table`.
@dynamicMemberLookup
struct Curl: @unchecked Sendable {  // the table is written once, before it is shared
    let table: UnsafePointer<tether_curl_api>

    /// The loaded library, or why it could not be loaded.
    static func load() throws(TetherError) -> Curl { try loaded.get() }

    /// A Swift global: initialised once, on first use, thread-safely.
    private static let loaded = Result { () throws(TetherError) in try Curl(library: "libcurl.so.4") }

    subscript<Function>(dynamicMember field: KeyPath<tether_curl_api, Function?>) -> Function {
        table.pointee[keyPath: field]!  // every field is set once loaded
    }

    private init(library name: String) throws(TetherError) {
        func failure(_ what: String) -> TetherError {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown reason"
            return TetherError(.internal, "cannot use libcurl (\(name)), needed for HTTP: \(what): \(reason)")
        }
        guard let library = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { throw failure("cannot load it") }
        var api = tether_curl_api()
        func bind<Function>(_ field: WritableKeyPath<tether_curl_api, Function?>, _ symbol: String) throws(TetherError) {
            guard let address = dlsym(library, symbol) else { throw failure("no \(symbol)") }
            // The field's type is the function's prototype (an opaque pointer for a variadic one).
            api[keyPath: field] = unsafeBitCast(address, to: Function.self)
        }
        try bind(\.global_init, "curl_global_init")
        try bind(\.easy_init, "curl_easy_init")
        try bind(\.easy_cleanup, "curl_easy_cleanup")
        try bind(\.easy_setopt, "curl_easy_setopt")
        try bind(\.easy_getinfo, "curl_easy_getinfo")
        try bind(\.easy_strerror, "curl_easy_strerror")
        try bind(\.slist_append, "curl_slist_append")
        try bind(\.slist_free_all, "curl_slist_free_all")
        try bind(\.multi_init, "curl_multi_init")
        try bind(\.multi_cleanup, "curl_multi_cleanup")
        try bind(\.multi_setopt, "curl_multi_setopt")
        try bind(\.multi_add_handle, "curl_multi_add_handle")
        try bind(\.multi_remove_handle, "curl_multi_remove_handle")
        try bind(\.multi_perform, "curl_multi_perform")
        try bind(\.multi_poll, "curl_multi_poll")
        try bind(\.multi_wakeup, "curl_multi_wakeup")
        try bind(\.multi_info_read, "curl_multi_info_read")
        guard api.global_init!(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK else {
            throw TetherError(.internal, "libcurl could not be initialized (curl_global_init failed)")
        }
        let table = UnsafeMutablePointer<tether_curl_api>.allocate(capacity: 1)
        table.initialize(to: api)
        self.table = UnsafePointer(table)
    }
}
