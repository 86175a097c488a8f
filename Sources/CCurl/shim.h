#include <curl/curl.h>

// libtether does not link libcurl: libcurl.so.4 pulls in some 30 libraries
// (OpenSSL, GnuTLS, Kerberos, LDAP...), about 5 ms of every dlopen of
// libtether.so, which hosts that never open an HTTP connection would pay for
// nothing. The first HTTP engine loads it instead (dlopen, then dlsym into
// this table: Curl.swift), and every call goes through the table. The header
// is still used for libcurl's types and constants.
struct tether_curl_api {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *handle);
    CURLcode (*easy_setopt)(CURL *handle, CURLoption option, ...);
    CURLcode (*easy_getinfo)(CURL *handle, CURLINFO info, ...);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *string);
    void (*slist_free_all)(struct curl_slist *list);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *multi);
    CURLMcode (*multi_setopt)(CURLM *multi, CURLMoption option, ...);
    CURLMcode (*multi_add_handle)(CURLM *multi, CURL *handle);
    CURLMcode (*multi_remove_handle)(CURLM *multi, CURL *handle);
    CURLMcode (*multi_perform)(CURLM *multi, int *running);
    CURLMcode (*multi_poll)(CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout_ms, int *ready);
    CURLMcode (*multi_wakeup)(CURLM *multi);
    CURLMsg *(*multi_info_read)(CURLM *multi, int *queued);
};

// easy_setopt, easy_getinfo and multi_setopt are variadic: Swift cannot call
// them (it sees those fields as opaque pointers), and calling them through a
// non-variadic function type would be undefined behaviour. So each argument
// type gets a typed wrapper that calls through the variadic prototype, from C.
static inline CURLcode tether_curl_set_long(const struct tether_curl_api *api, CURL *h, CURLoption o, long v) { return api->easy_setopt(h, o, v); }
static inline CURLcode tether_curl_set_string(const struct tether_curl_api *api, CURL *h, CURLoption o, const char *v) { return api->easy_setopt(h, o, v); }
static inline CURLcode tether_curl_set_pointer(const struct tether_curl_api *api, CURL *h, CURLoption o, void *v) { return api->easy_setopt(h, o, v); }
static inline CURLcode tether_curl_set_slist(const struct tether_curl_api *api, CURL *h, CURLoption o, struct curl_slist *v) { return api->easy_setopt(h, o, v); }
static inline CURLcode tether_curl_set_write_function(const struct tether_curl_api *api, CURL *h, CURLoption o, curl_write_callback v) { return api->easy_setopt(h, o, v); }
static inline CURLcode tether_curl_get_long(const struct tether_curl_api *api, CURL *h, CURLINFO i, long *out) { return api->easy_getinfo(h, i, out); }
static inline CURLcode tether_curl_get_pointer(const struct tether_curl_api *api, CURL *h, CURLINFO i, void **out) { return api->easy_getinfo(h, i, out); }
static inline CURLMcode tether_curl_multi_set_long(const struct tether_curl_api *api, CURLM *m, CURLMoption o, long v) { return api->multi_setopt(m, o, v); }
