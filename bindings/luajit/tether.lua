-- tether.lua — a LuaJIT FFI binding of libtether.so (see include/tether.h,
-- which is the reference for every function's ownership, threads and errors).
--
--   local tether = require("tether")
--   local ctx = tether.open{url = "http://127.0.0.1:8888/v1", bucket = "demo",
--                           store = "demo.sqlite", username = "demo", password = "demo"}
--
-- Contexts always use POLL delivery: every callback runs on this thread,
-- inside ctx:poll() (or ctx:close()). LuaJIT callbacks must not be entered
-- from another OS thread, so the library's THREAD delivery is refused.
-- README.md beside this file says why the rest is as it is.

local ffi = require("ffi")
local bit = require("bit")
local jit = require("jit")

local M = {}

-- A hand-written subset of include/tether.h. Each declaration is copied from
-- the header (comments and TETHER_API left out); tests/test_cdef.lua checks
-- that every one still matches the header after whitespace normalization.
local CDEF = [[
typedef struct tether_context tether_context;
typedef struct tether_entity tether_entity;
typedef struct tether_object tether_object;
typedef struct tether_task tether_task;
typedef struct tether_observer tether_observer;
typedef struct tether_results tether_results;

typedef enum tether_type {
    TETHER_TYPE_NULL = 0,
    TETHER_TYPE_TEXT = 1,
    TETHER_TYPE_INTEGER = 2,
    TETHER_TYPE_REAL = 3,
    TETHER_TYPE_BOOLEAN = 4,
    TETHER_TYPE_JSON = 5
} tether_type;

typedef struct tether_value {
    tether_type type;
    int64_t integer;
    double real;
    char *text;
    size_t length;
} tether_value;

typedef enum tether_delivery {
    TETHER_DELIVER_THREAD = 0,
    TETHER_DELIVER_POLL = 1
} tether_delivery;

typedef enum tether_merge_policy {
    TETHER_MERGE_REPORT = 0,
    TETHER_MERGE_SERVER_WINS = 1,
    TETHER_MERGE_CLIENT_WINS = 2,
    TETHER_MERGE_PROPERTIES = 3
} tether_merge_policy;

typedef struct tether_local_store {
    unsigned int version;
    const char *configuration;
    const char *path;
    const char *specs_json;
} tether_local_store;

typedef struct tether_context_options {
    unsigned int version;
    const char *store_path;
    tether_delivery delivery;
    int64_t staleness_ms;
    int64_t timeout_ms;
    size_t object_cache_size;
    tether_merge_policy merge_policy;
    const tether_local_store *local_stores;
    size_t local_store_count;
    int64_t sync_interval_ms;
    int64_t full_check_interval_ms;
    int exclusive;
} tether_context_options;

typedef struct tether_kinto_options {
    unsigned int version;
    const char *server_url;
    const char *bucket;
    const char *username;
    const char *password;
} tether_kinto_options;

typedef struct tether_postgres_options {
    unsigned int version;
    const char *conninfo;
    const char *schema;
} tether_postgres_options;

typedef enum tether_phase {
    TETHER_PHASE_CACHED = 1,
    TETHER_PHASE_FINAL = 2,
    TETHER_PHASE_LIVE = 3
} tether_phase;

typedef enum tether_cache_policy {
    TETHER_POLICY_CACHE_THEN_SERVER = 0,
    TETHER_POLICY_CACHE_ONLY = 1,
    TETHER_POLICY_SERVER_ONLY = 2,
    TETHER_POLICY_CACHE_ELSE_SERVER = 3
} tether_cache_policy;

typedef enum tether_result_type {
    TETHER_RESULT_OBJECTS = 0,
    TETHER_RESULT_IDS = 1,
    TETHER_RESULT_COUNT = 2,
    TETHER_RESULT_VALUES = 3
} tether_result_type;

typedef void (*tether_progress_cb)(tether_task *task, int64_t received, int64_t total, void *userdata);

typedef struct tether_fetch_options {
    unsigned int version;
    const char *entity;
    const char *sort;
    int64_t limit;
    tether_cache_policy policy;
    const char *predicate;
    const tether_value *arguments;
    size_t argument_count;
    int64_t offset;
    const char *server_query;
    tether_result_type result_type;
    const char *properties;
    size_t batch_size;
    tether_progress_cb progress;
    int live;
    tether_object *related_owner;
    const char *related_name;
} tether_fetch_options;

typedef void (*tether_fetch_cb)(tether_task *task, tether_phase phase, int status, const char *message,
                                tether_results *results, void *userdata);

typedef void (*tether_observer_cb)(tether_object *obj, const char *key, int status, void *userdata);

typedef struct tether_save_report tether_save_report;

typedef struct tether_save_options {
    unsigned int version;
    int merge_policy;
    tether_progress_cb progress;
} tether_save_options;

typedef void (*tether_save_cb)(tether_task *task, int status, const char *message,
                               tether_save_report *report, void *userdata);

typedef enum tether_pending {
    TETHER_PENDING_NONE = 0,
    TETHER_PENDING_INSERT = 1,
    TETHER_PENDING_UPDATE = 2,
    TETHER_PENDING_DELETE = 3
} tether_pending;

typedef enum tether_change {
    TETHER_CHANGE_DELETE = 1,
    TETHER_CHANGE_INSERT = 2,
    TETHER_CHANGE_MOVE = 3,
    TETHER_CHANGE_UPDATE = 4
} tether_change;

typedef enum tether_debug_counter {
    TETHER_DEBUG_CONTEXTS = 1,
    TETHER_DEBUG_OBJECTS = 2,
    TETHER_DEBUG_OBJECT_HANDLES = 3,
    TETHER_DEBUG_RESULTS = 4,
    TETHER_DEBUG_TASKS = 5,
    TETHER_DEBUG_OBSERVERS = 6,
    TETHER_DEBUG_THREADS = 7,
    TETHER_DEBUG_PREPARED_STATEMENTS = 8,
    TETHER_DEBUG_REQUESTS = 9
} tether_debug_counter;

const char *tether_version(void);
int tether_version_number(void);
const char *tether_errmsg(void);
const char *tether_errstr(int status);
void tether_value_free(tether_value *value);

int tether_context_options_init(tether_context_options *opts, unsigned int version);
int tether_kinto_options_init(tether_kinto_options *kinto, unsigned int version);
int tether_postgres_options_init(tether_postgres_options *pg, unsigned int version);
int tether_context_open_postgres(const tether_context_options *opts, const tether_postgres_options *pg,
                                 tether_context **out);
int tether_postgres_install(const tether_postgres_options *pg, int *tracked);
int tether_context_open_kinto(const tether_context_options *opts, const tether_kinto_options *kinto,
                              tether_context **out);
int tether_context_close(tether_context *ctx);
int tether_context_is_online(tether_context *ctx, int *out);
int tether_context_changed(tether_context *ctx, const char *entity);
int tether_context_fd(tether_context *ctx, int *out);
int tether_context_poll(tether_context *ctx, int timeout_ms, size_t *out_delivered);

int tether_context_entity_count(tether_context *ctx, size_t *out);
int tether_context_entity_at(tether_context *ctx, size_t index, tether_entity **out);
int tether_entity_name(tether_entity *entity, const char **out);
int tether_entity_route(tether_entity *entity, const char **out);
int tether_entity_code(tether_entity *entity, int *out);
int tether_entity_operations(tether_entity *entity, unsigned int *out);
int tether_entity_attribute_count(tether_entity *entity, size_t *out);
int tether_entity_attribute_at(tether_entity *entity, size_t index,
                               const char **out_name, int *out_code,
                               tether_type *out_type, unsigned int *out_flags);
int tether_entity_attribute_allowed(tether_entity *entity, size_t index, const char **out);

int tether_context_object(tether_context *ctx, const char *entity, const char *id,
                          tether_object **out);
int tether_object_retain(tether_object *obj);
int tether_object_free(tether_object *obj);
int tether_object_entity(tether_object *obj, tether_entity **out);
int tether_object_id(tether_object *obj, const char **out);
int tether_object_version(tether_object *obj, int64_t *out);
int tether_object_peek(tether_object *obj, const char *key, tether_value *out);
int tether_object_get(tether_object *obj, const char *key, tether_value *out);
int tether_object_peek_code(tether_object *obj, int code, tether_value *out);
int tether_object_get_code(tether_object *obj, int code, tether_value *out);
int tether_object_set(tether_object *obj, const char *key, const tether_value *value);
int tether_object_rollback(tether_object *obj);
int tether_object_pending(tether_object *obj, tether_pending *out);
int tether_context_change_count(tether_context *ctx, size_t *out);

int tether_object_observe(tether_object *obj, const char *key, tether_observer_cb callback,
                          void *userdata, tether_observer **out);
int tether_observer_cancel(tether_observer *observer);

int tether_fetch_options_init(tether_fetch_options *opts, unsigned int version);
int tether_fetch_start(tether_context *ctx, const tether_fetch_options *opts,
                       tether_fetch_cb callback, void *userdata, tether_task **out);
int tether_task_cancel(tether_task *task);

int tether_save_options_init(tether_save_options *opts, unsigned int version);
int tether_save_start(tether_context *ctx, const tether_save_options *opts,
                      tether_save_cb callback, void *userdata, tether_task **out);
int tether_save_report_counts(tether_save_report *report, size_t *out_saved, size_t *out_discarded);
int tether_save_report_failure_count(tether_save_report *report, size_t *out);

int tether_results_type(tether_results *results, tether_result_type *out);
int tether_results_count(tether_results *results, size_t *out);
int tether_results_object_at(tether_results *results, size_t index, tether_object **out);
int tether_results_id_at(tether_results *results, size_t index, const char **out);
int tether_results_value_at(tether_results *results, size_t index, const char *key, tether_value *out);
int tether_results_change_count(tether_results *results, tether_change kind, size_t *out);
int tether_results_free(tether_results *results);

int tether_debug_count(tether_debug_counter what, int64_t *out);
]]
M._cdef = CDEF
ffi.cdef(CDEF)

-- #defines ffi.cdef cannot see; test_cdef.lua checks them against the header.
M.OK = 0
M.E_ERROR, M.E_MISUSE, M.E_HANDLE, M.E_NOT_FOUND = -1, -2, -3, -4
M.E_TYPE, M.E_INVALID, M.E_NETWORK, M.E_AUTH = -5, -6, -7, -8
M.E_SERVER, M.E_PROTOCOL, M.E_STORE, M.E_CANCELLED = -9, -10, -11, -12
M.E_NOT_CACHED, M.E_BUSY, M.E_CONFLICT, M.E_NOT_ALLOWED = -13, -14, -15, -16
M.E_EXPIRED = -17
local CONTEXT_OPTIONS_VERSION = 7
local KINTO_OPTIONS_VERSION = 1
local POSTGRES_OPTIONS_VERSION = 1
local FETCH_OPTIONS_VERSION = 6
local SAVE_OPTIONS_VERSION = 1
M._versions = {TETHER_CONTEXT_OPTIONS_VERSION = CONTEXT_OPTIONS_VERSION, TETHER_KINTO_OPTIONS_VERSION = KINTO_OPTIONS_VERSION,
               TETHER_POSTGRES_OPTIONS_VERSION = POSTGRES_OPTIONS_VERSION,
               TETHER_FETCH_OPTIONS_VERSION = FETCH_OPTIONS_VERSION, TETHER_SAVE_OPTIONS_VERSION = SAVE_OPTIONS_VERSION}

-- ------------------------------------------------------------ loading

local function script_dir()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then return "." end
    return src:sub(2):match("^(.*)/[^/]*$") or "."
end

-- TETHER_LIBRARY first (an explicit choice: fail on it rather than use
-- another), then the repository's build/libtether.so, then the system's.
local function load_library()
    local env = os.getenv("TETHER_LIBRARY")
    if env and env ~= "" then
        local ok, lib = pcall(ffi.load, env)
        if not ok then
            error("tether: cannot load the library named by TETHER_LIBRARY=" .. env .. ": " .. tostring(lib), 0)
        end
        return lib, env
    end
    local tried = {}
    local build = script_dir() .. "/../../build/libtether.so"
    local f = io.open(build, "rb")
    if f then
        f:close()
        local ok, lib = pcall(ffi.load, build)
        if ok then return lib, build end
        tried[#tried + 1] = "  build folder: " .. build .. " (" .. tostring(lib) .. ")"
    else
        tried[#tried + 1] = "  build folder: " .. build .. " (not found)"
    end
    local ok, lib = pcall(ffi.load, "libtether.so.0")
    if ok then return lib, "libtether.so.0" end
    tried[#tried + 1] = "  system: libtether.so.0 (" .. tostring(lib) .. ")"
    error("tether: cannot find libtether.so. Build it (`make build`) or set TETHER_LIBRARY. Tried:\n"
          .. table.concat(tried, "\n"), 0)
end

local C, library_path = load_library()
M.library_path = library_path

-- ------------------------------------------------------------ errors

-- Errors are raised as tables carrying the status: catch them with pcall
-- and read err.code (a tether.E_* number), err.name ("TETHER_E_NOT_CACHED"),
-- err.message (tether_errmsg() of the failed call) and err.what (the call).
local Error = {}
Error.__index = Error
Error.__tostring = function(e)
    local msg = e.message ~= "" and e.message or "failed"
    return string.format("tether: %s: %s (%s)", e.what or "?", msg, e.name)
end
M.Error = Error

function M.errstr(status)
    return ffi.string(C.tether_errstr(status))
end

local function make_error(status, message, what)
    return setmetatable({code = status, name = M.errstr(status), message = message or "", what = what}, Error)
end
M._make_error = make_error

function M.is_error(e, code)
    return getmetatable(e) == Error and (code == nil or e.code == code)
end

-- Raises the failure of the tether_* call just made: tether_errmsg() is
-- per thread and valid until the next tether_* call, so read it first.
local function raise(status, what)
    error(make_error(status, ffi.string(C.tether_errmsg()), what), 0)
end

local function check(status, what)
    if status ~= 0 then raise(status, what) end
end

-- A misuse the binding catches before calling C (nothing to ask errmsg).
local function misuse(what, message)
    error(make_error(M.E_MISUSE, message, what), 0)
end

-- The nearest of `names` to `word` (at most 2 edits away), or nil: for
-- "did you mean" in the errors below.
local function nearest(word, names)
    local best, best_d = nil, 3
    for _, n in ipairs(names) do
        local prev = {}
        for j = 0, #n do prev[j] = j end
        for i = 1, #word do
            local cur = {[0] = i}
            for j = 1, #n do
                local cost = word:sub(i, i) == n:sub(j, j) and 0 or 1
                cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            end
            prev = cur
        end
        if prev[#n] < best_d then best, best_d = n, prev[#n] end
    end
    return best
end

-- An options table may hold only the keys `allowed` lists (a set): a
-- misspelled option (wehre=) is an error, never silently ignored.
local function check_options(o, what, allowed)
    for k in pairs(o) do
        if not allowed[k] then
            local names = {}
            for n in pairs(allowed) do names[#names + 1] = n end
            table.sort(names)
            local near = type(k) == "string" and nearest(k, names)
            misuse(what, string.format("unknown option %s%s (%s takes: %s)", tostring(k),
                                       near and (" (did you mean " .. near .. "?)") or "", what,
                                       table.concat(names, ", ")))
        end
    end
end

-- A name from a vocabulary (policies, result types, merge policies): the
-- header's names, lower case (TETHER_POLICY_CACHE_ONLY: "cache_only").
local function pick(names, v, what, option)
    local code = names[v]
    if code then return code end
    local list = {}
    for n in pairs(names) do list[#list + 1] = n end
    table.sort(list)
    local near = type(v) == "string" and nearest(v, list)
    misuse(what, string.format("unknown %s %s%s (one of: %s)", option, tostring(v),
                               near and (" (did you mean " .. near .. "?)") or "", table.concat(list, ", ")))
end

local function need_string(v, what, name)
    if type(v) ~= "string" then
        misuse(what, string.format("%s must be a string, not %s", name, type(v)))
    end
end

-- ------------------------------------------------------------ values

local TYPE_NAMES = {[0] = "null", "text", "integer", "real", "boolean", "json"}
local TWO53 = 2 ^ 53

-- A tether_value as Lua: nil, string, number (an integer beyond ±2^53, where
-- a double would lose digits, stays an int64_t cdata), boolean, or JSON text.
-- The type's name comes second, so JSON text and TEXT can be told apart.
local function from_value(v)
    local t = tonumber(v.type)
    if t == 1 or t == 5 then
        return ffi.string(v.text, v.length), TYPE_NAMES[t]
    elseif t == 2 then
        local i = v.integer
        if i >= -TWO53 and i <= TWO53 then return tonumber(i), "integer" end
        return i, "integer"
    elseif t == 3 then
        return tonumber(v.real), "real"
    elseif t == 4 then
        return v.integer ~= 0, "boolean"
    end
    return nil, "null"
end

-- tether.null stands for NULL where nil cannot (in an args list), and
-- tether.json(text) for a JSON value to set.
M.null = setmetatable({}, {__tostring = function() return "tether.null" end})
local JsonMT = {__tostring = function(j) return j.text end}
function M.json(text)
    assert(type(text) == "string", "tether.json: text must be a string")
    return setmetatable({text = text}, JsonMT)
end

-- Fills `v` from a Lua value. Returns the Lua string that `v.text` points
-- into: the caller keeps it alive while C reads `v`.
local function to_value(v, x, what)
    local tx = type(x)
    if x == nil or x == M.null then
        v.type = 0
    elseif tx == "boolean" then
        v.type, v.integer = 4, x and 1 or 0
    elseif tx == "string" then
        v.type, v.text, v.length = 1, ffi.cast("char *", x), #x
        return x
    elseif tx == "number" then
        if x == math.floor(x) and x >= -TWO53 and x <= TWO53 then
            v.type, v.integer = 2, x
        else
            v.type, v.real = 3, x
        end
    elseif tx == "cdata" and ffi.istype("int64_t", x) then
        v.type, v.integer = 2, x
    elseif getmetatable(x) == JsonMT then
        v.type, v.text, v.length = 5, ffi.cast("char *", x.text), #x.text
        return x.text
    else
        misuse(what, "cannot pass a " .. tx .. " as a tether value")
    end
    return nil
end

-- ------------------------------------------------------------ callbacks
--
-- Three C callbacks for the whole process, made once and never freed: each
-- dispatches by its userdata, a number, to an entry of `registry`. LuaJIT
-- has few callback slots and never collects a callback, and the library may
-- call one until a FINAL (or close) has come, so one ffi.cast per fetch
-- would leak slots or risk a freed one being called. Each entry holds its
-- context's wrapper, so a context with anything pending is never collected
-- (the GC never closes a context whose callbacks could still run).

local registry = {}
local last_id = 0

local function register(entry)
    last_id = last_id + 1
    registry[last_id] = entry
    entry.ctx._pending[last_id] = true
    return last_id, ffi.cast("void *", last_id)
end

local function unregister(id, entry)
    registry[id] = nil
    entry.ctx._pending[id] = nil
end

-- Runs a user callback. An error must not unwind through the library's C
-- (and Swift) frames, so it is caught here and raised again by the poll
-- (or close) that ran the callback.
local function run_user(ctx, fn, ...)
    local ok, err = xpcall(fn, debug.traceback, ...)
    if not ok then
        local errs = ctx._callback_errors
        errs[#errs + 1] = err
    end
end

local PHASES = {[1] = "cached", [2] = "final", [3] = "live"}

-- A borrowed C string as Lua ("" for NULL, which the header never promises).
local function str(p)
    if p == nil then return "" end
    return ffi.string(p)
end
local wrap_results

local function on_fetch(_, phase, status, message, results, userdata)
    local id = tonumber(ffi.cast("intptr_t", userdata))
    local entry = registry[id]
    if entry == nil then  -- cannot happen: nothing is freed before its FINAL
        C.tether_results_free(results)
        return
    end
    local task, ctx = entry.task, entry.ctx
    local r = wrap_results(results, ctx)
    local final = phase == 2
    if final then
        task.done, task.status, task.message = true, status, str(message)
    end
    if entry.fn then
        run_user(ctx, entry.fn, PHASES[tonumber(phase)] or tostring(phase), status,
                 str(message), r, task)
    else
        r:free()
    end
    if final then unregister(id, entry) end
end

local function on_observe(_, key, status, userdata)
    local id = tonumber(ffi.cast("intptr_t", userdata))
    local entry = registry[id]
    if entry == nil then return end
    run_user(entry.ctx, entry.fn, entry.object, str(key), status)
    -- TETHER_E_CANCELLED comes once, last: the library drops the observer.
    if status == M.E_CANCELLED then
        entry.observer.removed = true
        unregister(id, entry)
    end
end

local function on_save(_, status, message, report, userdata)
    local id = tonumber(ffi.cast("intptr_t", userdata))
    local entry = registry[id]
    if entry == nil then return end
    local task = entry.task
    local saved, discarded, failed = ffi.new("size_t[1]"), ffi.new("size_t[1]"), ffi.new("size_t[1]")
    C.tether_save_report_counts(report, saved, discarded)
    C.tether_save_report_failure_count(report, failed)
    task.done, task.status, task.message = true, status, str(message)
    task.saved, task.discarded, task.failed = tonumber(saved[0]), tonumber(discarded[0]), tonumber(failed[0])
    if entry.fn then
        run_user(entry.ctx, entry.fn, status, task.message, task)
    end
    unregister(id, entry)
end

-- Kept in the module table so that they live as long as the library does.
M._callbacks = {
    fetch = ffi.cast("tether_fetch_cb", on_fetch),
    observe = ffi.cast("tether_observer_cb", on_observe),
    save = ffi.cast("tether_save_cb", on_save),
}

-- ------------------------------------------------------------ objects

local Object = {}
Object.__index = Object
Object.__eq = function(a, b) return a._h == b._h end
Object.__tostring = function(o) return "tether.Object(" .. o.entity .. "/" .. o.id .. ")" end

local function release_object(h) C.tether_object_free(h) end

-- Wraps a reference the caller owns: the GC releases it if :free() was
-- not called. Id and entity are read now, while the handle is surely alive
-- (closing the context kills it).
local function wrap_object(h, ctx)
    local s, e = ffi.new("const char *[1]"), ffi.new("tether_entity *[1]")
    check(C.tether_object_id(h, s), "tether_object_id")
    local id = ffi.string(s[0])
    check(C.tether_object_entity(h, e), "tether_object_entity")
    check(C.tether_entity_name(e[0], s), "tether_entity_name")
    return setmetatable({_h = ffi.gc(h, release_object), ctx = ctx, id = id, entity = ffi.string(s[0])},
                        Object)
end

local function read_value(self, verb, fn_name, fn_code, key, default)
    local v = ffi.new("tether_value")
    local st
    if type(key) == "number" then
        st = fn_code(self._h, key, v)
    else
        need_string(key, verb, "key")
        st = fn_name(self._h, key, v)
    end
    -- Not cached yet is an answer, not a failure (a get has started the
    -- refresh): the default, and no type.
    if st == M.E_NOT_CACHED then return default, nil end
    if st ~= 0 then raise(st, verb .. " " .. (type(key) == "number" and "#" or "") .. tostring(key)) end
    local value, t = from_value(v)
    C.tether_value_free(v)
    return value, t
end

-- peek(key [, default]): the cached value, never the network. key: a name,
-- a key path ("Client.Owner") or an attribute code. Returns value, type
-- name; `default` (nil if not given) and no type name when it is not cached.
function Object:peek(key, default)
    return read_value(self, "peek", C.tether_object_peek, C.tether_object_peek_code, key, default)
end

-- get(key [, default]): as peek, and starts a background refresh; observers
-- of the key hear when the value changes (also when a record that was not
-- cached arrives).
function Object:get(key, default)
    return read_value(self, "get", C.tether_object_get, C.tether_object_get_code, key, default)
end

-- is_cached(key): whether peek(key) gives a stored value (nil then means a
-- NULL), never the network.
function Object:is_cached(key)
    local _, t = self:peek(key)
    return t ~= nil
end

-- An unsaved, durable local change (sent by ctx:save()). value: nil or
-- tether.null, boolean, number, string, int64_t cdata, tether.json(text).
function Object:set(key, value)
    need_string(key, "set", "key")
    local v = ffi.new("tether_value")
    local anchor = to_value(v, value, "set")
    check(C.tether_object_set(self._h, key, v), "set " .. key)
end
-- v.text points into a Lua string (`anchor`) the GC does not know is in
-- use: in the interpreter the frame's slots keep it alive; a trace might not.
jit.off(Object.set)

function Object:rollback()
    check(C.tether_object_rollback(self._h), "rollback")
end

local PENDING = {[0] = "none", "insert", "update", "delete"}
function Object:pending()
    local out = ffi.new("tether_pending[1]")
    check(C.tether_object_pending(self._h, out), "pending")
    return PENDING[tonumber(out[0])]
end

-- The server's version (Kinto last_modified, ms) of the cached record.
function Object:version()
    local out = ffi.new("int64_t[1]")
    check(C.tether_object_version(self._h, out), "version")
    return tonumber(out[0])
end

-- Drops this wrapper's reference now (rather than at the next GC). Returns
-- false if the handle was dead already (released, or its context closed:
-- harmless, as the header says); again: a no-op.
function Object:free()
    if self._released then return false end
    self._released = true
    local h = self._h
    ffi.gc(h, nil)
    self._h = nil  -- NULL from now on: later calls give TETHER_E_HANDLE, even
                   -- while another wrapper keeps the same handle alive
    local st = C.tether_object_free(h)
    if st == M.E_HANDLE then return false end
    check(st, "tether_object_free")
    return true
end

local Observer = {}
Observer.__index = Observer

-- observe(key, fn): fn(object, key, status) each time key's value changes
-- (status 0), each time a background refresh fails (an error status), and
-- once more, last, with tether.E_CANCELLED when removed or the context
-- closes. key may be the peek form ("OwnerPeek").
function Object:observe(key, fn)
    need_string(key, "observe", "key")
    if type(fn) ~= "function" then misuse("observe", "callback must be a function") end
    local observer = setmetatable({key = key, removed = false}, Observer)
    local entry = {ctx = self.ctx, fn = fn, object = self, observer = observer}
    local id, ud = register(entry)
    local out = ffi.new("tether_observer *[1]")
    local st = C.tether_object_observe(self._h, key, M._callbacks.observe, ud, out)
    if st ~= 0 then
        local msg = ffi.string(C.tether_errmsg())
        unregister(id, entry)
        error(make_error(st, msg, "observe " .. key), 0)
    end
    observer._h = out[0]
    return observer
end

-- Removes the observer: its callback runs once more, at the next poll, with
-- tether.E_CANCELLED. Returns false if it was removed already.
function Observer:remove()
    if self.removed then return false end
    local st = C.tether_observer_cancel(self._h)
    if st == M.E_HANDLE then return false end
    check(st, "tether_observer_cancel")
    return true
end
jit.off(Observer.remove)

-- ------------------------------------------------------------ results

local Results = {}
Results.__index = Results

local function release_results(h) C.tether_results_free(h) end

function wrap_results(h, ctx)
    return setmetatable({_h = ffi.gc(h, release_results), ctx = ctx}, Results)
end

function Results:count()
    local out = ffi.new("size_t[1]")
    check(C.tether_results_count(self._h, out), "tether_results_count")
    return tonumber(out[0])
end

local RESULT_TYPES = {objects = 0, ids = 1, count = 2, values = 3}
local RESULT_NAMES = {[0] = "objects", "ids", "count", "values"}

function Results:type()
    local out = ffi.new("tether_result_type[1]")
    check(C.tether_results_type(self._h, out), "tether_results_type")
    return RESULT_NAMES[tonumber(out[0])]
end

local function index0(i, what)
    if type(i) ~= "number" or i ~= math.floor(i) or i < 1 then
        misuse(what, "index must be an integer from 1, not " .. tostring(i))
    end
    return i - 1
end

-- The object at index i (1-based), with a reference of its own: it outlives
-- the results.
function Results:object(i)
    local out = ffi.new("tether_object *[1]")
    check(C.tether_results_object_at(self._h, index0(i, "object"), out), "tether_results_object_at")
    local h = out[0]
    check(C.tether_object_retain(h), "tether_object_retain")
    local ok, o = pcall(wrap_object, h, self.ctx)
    if not ok then C.tether_object_free(h); error(o, 0) end
    return o
end

function Results:id(i)
    local out = ffi.new("const char *[1]")
    check(C.tether_results_id_at(self._h, index0(i, "id"), out), "tether_results_id_at")
    return ffi.string(out[0])
end

-- A TETHER_RESULT_VALUES answer's value of `key` at index i.
function Results:value(i, key)
    need_string(key, "value", "key")
    local v = ffi.new("tether_value")
    check(C.tether_results_value_at(self._h, index0(i, "value"), key, v), "value " .. key)
    local value, t = from_value(v)
    C.tether_value_free(v)
    return value, t
end

function Results:objects()
    local list = {}
    for i = 1, self:count() do list[i] = self:object(i) end
    return list
end

function Results:ids()
    local list = {}
    for i = 1, self:count() do list[i] = self:id(i) end
    return list
end

local CHANGES = {delete = 1, insert = 2, move = 3, update = 4}
-- A live answer's moves since the previous one: kind "insert", "delete",
-- "move" or "update".
function Results:change_count(kind)
    local k = CHANGES[kind]
    if not k then misuse("change_count", "kind must be insert, delete, move or update") end
    local out = ffi.new("size_t[1]")
    check(C.tether_results_change_count(self._h, k, out), "tether_results_change_count")
    return tonumber(out[0])
end

-- Releases the handle now; false if it was dead already (its context
-- closed); again: a no-op.
function Results:free()
    if self._released then return false end
    self._released = true
    local h = self._h
    ffi.gc(h, nil)
    self._h = nil
    local st = C.tether_results_free(h)
    if st == M.E_HANDLE then return false end
    check(st, "tether_results_free")
    return true
end

-- ------------------------------------------------------------ tasks

local Task = {}
Task.__index = Task

-- Cancels the task: its callback runs once more, at the next poll, FINAL
-- with tether.E_CANCELLED. Returns false if it had ended or was cancelled
-- already (its FINAL is then the one that counts).
function Task:cancel()
    if self.done or self.cancelled then return false end
    local st = C.tether_task_cancel(self._h)
    if st == M.E_HANDLE then return false end
    check(st, "tether_task_cancel")
    self.cancelled = true
    return true
end
jit.off(Task.cancel)

-- ------------------------------------------------------------ contexts

local Context = {}
Context.__index = Context

-- Runs from a finalizer only for a context nothing is pending on (see the
-- registry), so no callback can run here.
local function close_context(h) C.tether_context_close(h) end
jit.off(close_context)

local function opt_int(t, k, default)
    local v = t[k]
    if v == nil then return default end
    if type(v) ~= "number" then misuse("open", k .. " must be a number") end
    return v
end

-- The options every context takes (store, delivery, timeouts, cache), from
-- the table given to tether.open or tether.open_postgres (`what`).
local function context_options(o, what)
    need_string(o.store, what, "store")
    if (o.delivery or "poll") ~= "poll" then
        misuse(what, "delivery must be \"poll\": LuaJIT cannot run callbacks on the library's "
               .. "threads (see bindings/luajit/README.md)")
    end
    local opts = ffi.new("tether_context_options")
    check(C.tether_context_options_init(opts, CONTEXT_OPTIONS_VERSION), "tether_context_options_init")
    opts.store_path = o.store
    opts.delivery = C.TETHER_DELIVER_POLL
    opts.timeout_ms = opt_int(o, "timeout_ms", tonumber(opts.timeout_ms))
    opts.staleness_ms = opt_int(o, "staleness_ms", tonumber(opts.staleness_ms))
    opts.object_cache_size = opt_int(o, "object_cache_size", tonumber(opts.object_cache_size))
    opts.sync_interval_ms = opt_int(o, "sync_interval_ms", tonumber(opts.sync_interval_ms))
    opts.full_check_interval_ms = opt_int(o, "full_check_interval_ms", tonumber(opts.full_check_interval_ms))
    if o.exclusive ~= nil then
        if type(o.exclusive) ~= "boolean" then misuse(what, "exclusive must be a boolean") end
        opts.exclusive = o.exclusive and 1 or 0
    end
    return opts
end

-- A new context's table, owning the handle in `out` (closed when collected).
local function wrap_context(out, fields)
    fields._h = ffi.gc(out[0], close_context)
    fields._pending, fields._callback_errors, fields.closed = {}, {}, false
    return setmetatable(fields, Context)
end

-- tether.open{url=, bucket=, store=, username=, password=, timeout_ms=,
-- staleness_ms=, object_cache_size=, sync_interval_ms=, full_check_interval_ms=, exclusive=,
-- delivery="poll"}. Raises on failure.
local OPEN_OPTIONS = {url = true, bucket = true, store = true, username = true, password = true,
                      timeout_ms = true, staleness_ms = true, object_cache_size = true, delivery = true,
                      sync_interval_ms = true, full_check_interval_ms = true, exclusive = true}
function M.open(o)
    if type(o) ~= "table" then misuse("open", "tether.open takes a table of options") end
    check_options(o, "open", OPEN_OPTIONS)
    need_string(o.url, "open", "url")
    need_string(o.bucket, "open", "bucket")
    local opts = context_options(o, "open")
    local kinto = ffi.new("tether_kinto_options")
    check(C.tether_kinto_options_init(kinto, KINTO_OPTIONS_VERSION), "tether_kinto_options_init")
    kinto.server_url, kinto.bucket = o.url, o.bucket
    if o.username ~= nil then need_string(o.username, "open", "username"); kinto.username = o.username end
    if o.password ~= nil then need_string(o.password, "open", "password"); kinto.password = o.password end
    local out = ffi.new("tether_context *[1]")
    check(C.tether_context_open_kinto(opts, kinto, out), "tether_context_open_kinto")
    return wrap_context(out, {url = o.url, bucket = o.bucket, store = o.store})
end

-- The options of a PostgreSQL schema (the struct points into `o`'s strings,
-- which the caller's table keeps alive for the call).
local function postgres_options(o, what)
    need_string(o.conninfo, what, "conninfo")
    if o.schema ~= nil then need_string(o.schema, what, "schema") end
    local pg = ffi.new("tether_postgres_options")
    check(C.tether_postgres_options_init(pg, POSTGRES_OPTIONS_VERSION), "tether_postgres_options_init")
    pg.conninfo, pg.schema = o.conninfo, o.schema
    return pg
end

-- tether.open_postgres{conninfo=, schema=, store=, timeout_ms=, staleness_ms=,
-- object_cache_size=, delivery="poll"}: a context on a PostgreSQL schema (nil:
-- "public"), each table with a one-column primary key an entity (tether.h's
-- PostgreSQL section). Raises on failure.
local OPEN_POSTGRES_OPTIONS = {conninfo = true, schema = true, store = true, timeout_ms = true,
                               staleness_ms = true, object_cache_size = true, delivery = true,
                               sync_interval_ms = true, full_check_interval_ms = true, exclusive = true}
function M.open_postgres(o)
    if type(o) ~= "table" then misuse("open_postgres", "tether.open_postgres takes a table of options") end
    check_options(o, "open_postgres", OPEN_POSTGRES_OPTIONS)
    local pg = postgres_options(o, "open_postgres")
    local opts = context_options(o, "open_postgres")
    local out = ffi.new("tether_context *[1]")
    check(C.tether_context_open_postgres(opts, pg, out), "tether_context_open_postgres")
    return wrap_context(out, {schema = o.schema or "public", store = o.store})
end

-- tether.install_postgres{conninfo=, schema=}: installs the change tracking
-- (sql/tether-postgres.sql) and tracks the schema's tables; returns how many
-- it began to track (0 when all were). Raises on failure.
function M.install_postgres(o)
    if type(o) ~= "table" then misuse("install_postgres", "tether.install_postgres takes a table of options") end
    check_options(o, "install_postgres", {conninfo = true, schema = true})
    local pg = postgres_options(o, "install_postgres")
    local tracked = ffi.new("int[1]")
    check(C.tether_postgres_install(pg, tracked), "tether_postgres_install")
    return tonumber(tracked[0])
end

-- Raises the first error a callback raised, after the poll (or close) that
-- ran it has delivered everything waiting; others wait for the next poll.
local function raise_callback_errors(ctx)
    local errs = ctx._callback_errors
    if #errs > 0 then error(table.remove(errs, 1), 0) end
end

-- Closes the context: every pending task and observer gets its final
-- tether.E_CANCELLED callback, on this thread, before this returns; every
-- object and results handle of the context is dead afterwards. Idempotent.
function Context:close()
    if self.closed then return end
    local h = self._h
    local st = C.tether_context_close(h)
    if st == M.E_BUSY then raise(st, "tether_context_close") end  -- inside a callback: stays open
    self.closed = true
    ffi.gc(h, nil)
    -- Nothing can call back now; drop what the library would never finish.
    for id in pairs(self._pending) do registry[id] = nil end
    self._pending = {}
    if st ~= 0 and st ~= M.E_HANDLE then raise(st, "tether_context_close") end
    raise_callback_errors(self)
end
jit.off(Context.close)

-- Runs every callback waiting (waiting up to timeout_ms first; 0: none, -1:
-- no limit) on this thread; returns how many ran. Not compiled: a C call
-- that calls back into Lua must not be made from a JIT trace.
function Context:poll(timeout_ms)
    local n = ffi.new("size_t[1]")
    check(C.tether_context_poll(self._h, timeout_ms or 0, n), "tether_context_poll")
    raise_callback_errors(self)
    return tonumber(n[0])
end
jit.off(Context.poll)

-- os.clock is CPU time; a monotonic clock needs clock_gettime.
ffi.cdef("int clock_gettime(int clk_id, void *tp);")
local timespec = ffi.typeof("struct { long sec; long nsec; }")
local CLOCK_MONOTONIC = 1
local function now_ms()
    local ts = timespec()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.sec) * 1000 + tonumber(ts.nsec) / 1e6
end
M.now_ms = now_ms

-- Polls until pred() is true or timeout_ms passes; returns pred()'s last value.
function Context:wait(pred, timeout_ms)
    local deadline = now_ms() + (timeout_ms or 10000)
    while true do
        local v = pred()
        if v then return v end
        local left = deadline - now_ms()
        if left <= 0 then return v end
        self:poll(math.min(50, math.ceil(left)))
    end
end

-- The descriptor readable while callbacks wait (for select/poll/epoll or
-- an event loop). Borrowed: the context closes it.
function Context:fd()
    local out = ffi.new("int[1]")
    check(C.tether_context_fd(self._h, out), "tether_context_fd")
    return out[0]
end

function Context:is_online()
    local out = ffi.new("int[1]")
    check(C.tether_context_is_online(self._h, out), "tether_context_is_online")
    return out[0] ~= 0
end

-- The server changed `entity` (nil: every entity), as the program learned by
-- a channel of its own: synced now, its live fetches and observers answer.
function Context:changed(entity)
    if entity ~= nil and type(entity) ~= "string" then misuse("changed", "entity must be a string or nil") end
    check(C.tether_context_changed(self._h, entity), "tether_context_changed")
end

function Context:change_count()
    local out = ffi.new("size_t[1]")
    check(C.tether_context_change_count(self._h, out), "tether_context_change_count")
    return tonumber(out[0])
end

local OPS = {{1, "fetch"}, {2, "insert"}, {4, "update"}, {8, "delete"}}

-- The model, as plain tables: {name, route, code, operations = {fetch=true,
-- ...}, attributes = {{name, code, type, id, version, required}, ...}}.
function Context:entities()
    local n = ffi.new("size_t[1]")
    check(C.tether_context_entity_count(self._h, n), "tether_context_entity_count")
    local list = {}
    local e, s, code, ops = ffi.new("tether_entity *[1]"), ffi.new("const char *[1]"), ffi.new("int[1]"),
        ffi.new("unsigned int[1]")
    local an, atype, aflags = ffi.new("size_t[1]"), ffi.new("tether_type[1]"), ffi.new("unsigned int[1]")
    for i = 0, tonumber(n[0]) - 1 do
        check(C.tether_context_entity_at(self._h, i, e), "tether_context_entity_at")
        local ent = {attributes = {}, operations = {}}
        check(C.tether_entity_name(e[0], s), "tether_entity_name"); ent.name = ffi.string(s[0])
        check(C.tether_entity_route(e[0], s), "tether_entity_route"); ent.route = ffi.string(s[0])
        check(C.tether_entity_code(e[0], code), "tether_entity_code"); ent.code = code[0]
        check(C.tether_entity_operations(e[0], ops), "tether_entity_operations")
        for _, op in ipairs(OPS) do ent.operations[op[2]] = bit.band(ops[0], op[1]) ~= 0 end
        check(C.tether_entity_attribute_count(e[0], an), "tether_entity_attribute_count")
        for j = 0, tonumber(an[0]) - 1 do
            check(C.tether_entity_attribute_at(e[0], j, s, code, atype, aflags), "tether_entity_attribute_at")
            local f = aflags[0]
            ent.attributes[j + 1] = {name = ffi.string(s[0]), code = code[0], type = TYPE_NAMES[tonumber(atype[0])],
                                     id = bit.band(f, 1) ~= 0, version = bit.band(f, 2) ~= 0,
                                     required = bit.band(f, 4) ~= 0}
            check(C.tether_entity_attribute_allowed(e[0], j, s), "tether_entity_attribute_allowed")
            if s[0] ~= nil then ent.attributes[j + 1].allowed = ffi.string(s[0]) end  -- a JSON array
        end
        list[#list + 1] = ent
    end
    return list
end

-- The object for record `id` of `entity` (cached or not): a reference this
-- wrapper owns, released by :free() or the GC.
function Context:object(entity, id)
    need_string(entity, "object", "entity")
    need_string(id, "object", "id")
    local out = ffi.new("tether_object *[1]")
    check(C.tether_context_object(self._h, entity, id, out), "object " .. entity .. "/" .. id)
    local h = out[0]
    local ok, o = pcall(wrap_object, h, self)
    if not ok then C.tether_object_free(h); error(o, 0) end
    return o
end

local POLICIES = {cache_then_server = 0, cache_only = 1, server_only = 2, cache_else_server = 3}

-- fetch{entity=, where=, args={...}, sort=, limit=, offset=, policy=,
-- result=, properties=, live=, server_query=, callback=fn}: starts a fetch,
-- returns its Task. fn(phase, status, message, results, task) with phase
-- "cached", "final" or "live"; results is ours (results:free(), or the
-- GC). Bad options raise here, and then no callback runs.
local FETCH_OPTIONS = {entity = true, where = true, args = true, sort = true, limit = true, offset = true,
                       policy = true, result = true, properties = true, live = true, server_query = true,
                       callback = true}
function Context:fetch(o)
    if type(o) ~= "table" then misuse("fetch", "fetch takes a table of options") end
    check_options(o, "fetch", FETCH_OPTIONS)
    local opts = ffi.new("tether_fetch_options")
    check(C.tether_fetch_options_init(opts, FETCH_OPTIONS_VERSION), "tether_fetch_options_init")
    need_string(o.entity, "fetch", "entity")
    opts.entity = o.entity
    if o.sort ~= nil then need_string(o.sort, "fetch", "sort"); opts.sort = o.sort end
    if o.where ~= nil then need_string(o.where, "fetch", "where"); opts.predicate = o.where end
    if o.properties ~= nil then need_string(o.properties, "fetch", "properties"); opts.properties = o.properties end
    if o.server_query ~= nil then
        need_string(o.server_query, "fetch", "server_query"); opts.server_query = o.server_query
    end
    opts.limit = opt_int(o, "limit", 0)
    opts.offset = opt_int(o, "offset", 0)
    if o.policy ~= nil then
        opts.policy = pick(POLICIES, o.policy, "fetch", "policy")
    end
    if o.result ~= nil then
        opts.result_type = pick(RESULT_TYPES, o.result, "fetch", "result")
    end
    opts.live = o.live and 1 or 0
    -- $1, $2...: borrowed for the call; `anchors` keeps their strings alive.
    local args, anchors = o.args, {}
    if args ~= nil then
        if type(args) ~= "table" then misuse("fetch", "args must be a table") end
        local n = args.n or #args
        if n > 0 then
            local values = ffi.new("tether_value[?]", n)
            for i = 1, n do anchors[i] = to_value(values[i - 1], args[i], "fetch") end
            opts.arguments, opts.argument_count = values, n
            anchors.values = values
        end
    end
    if o.callback ~= nil and type(o.callback) ~= "function" then misuse("fetch", "callback must be a function") end
    local task = {entity = o.entity, done = false, cancelled = false}
    setmetatable(task, Task)
    local entry = {ctx = self, fn = o.callback, task = task}
    local id, ud = register(entry)
    local out = ffi.new("tether_task *[1]")
    local st = C.tether_fetch_start(self._h, opts, M._callbacks.fetch, ud, out)
    if st ~= 0 then
        local msg = ffi.string(C.tether_errmsg())
        unregister(id, entry)
        error(make_error(st, msg, "fetch " .. o.entity), 0)
    end
    task._h = out[0]
    return task
end
jit.off(Context.fetch)  -- the args' text pointers, as Object.set

-- fetch and wait: returns cached, final (Results; cached is nil for
-- policies that answer once). A FINAL error is raised; after timeout_ms
-- (default 30000) the fetch is cancelled and tether.E_CANCELLED raised.
local FETCH_WAIT_OPTIONS = {timeout_ms = true}
for k in pairs(FETCH_OPTIONS) do FETCH_WAIT_OPTIONS[k] = true end
function Context:fetch_wait(o)
    if type(o) ~= "table" then misuse("fetch_wait", "fetch_wait takes a table of options") end
    check_options(o, "fetch_wait", FETCH_WAIT_OPTIONS)
    local cached, final
    local fn = o.callback
    local opts = {}
    for k, v in pairs(o) do opts[k] = v end
    opts.timeout_ms = nil
    opts.callback = function(phase, status, message, results, task)
        if phase == "cached" then cached = results elseif phase == "final" then final = results end
        if fn then fn(phase, status, message, results, task) end
    end
    local task = self:fetch(opts)
    if not self:wait(function() return task.done end, o.timeout_ms or 30000) then
        task:cancel()
        self:wait(function() return task.done end, 5000)
    end
    if task.status ~= 0 then
        if cached then cached:free() end
        if final then final:free() end
        error(make_error(task.status or M.E_CANCELLED, task.message or "timed out", "fetch " .. o.entity), 0)
    end
    return cached, final
end

-- The header's merge policies (TETHER_MERGE_CLIENT_WINS: "client_wins");
-- "merge_properties" is the Python binding's word for "properties".
local MERGE_POLICIES = {report = 0, server_wins = 1, client_wins = 2, properties = 3, merge_properties = 3}
local SAVE_OPTIONS = {callback = true, merge = true}

-- Sends every unsaved change: save(fn) or save{callback = fn, merge = ...}
-- (merge: "report", the context's default, "server_wins", "client_wins" or
-- "properties"). fn(status, message, task) once, at the end (task.saved,
-- task.discarded, task.failed count them). Returns the Task.
function Context:save(fn)
    local merge
    if type(fn) == "table" then
        check_options(fn, "save", SAVE_OPTIONS)
        if fn.merge ~= nil then merge = pick(MERGE_POLICIES, fn.merge, "save", "merge policy") end
        fn = fn.callback
    end
    if fn ~= nil and type(fn) ~= "function" then misuse("save", "callback must be a function") end
    local so
    if merge then
        so = ffi.new("tether_save_options")
        check(C.tether_save_options_init(so, SAVE_OPTIONS_VERSION), "tether_save_options_init")
        so.merge_policy = merge
    end
    local task = setmetatable({done = false, cancelled = false}, Task)
    local entry = {ctx = self, fn = fn, task = task}
    local id, ud = register(entry)
    local out = ffi.new("tether_task *[1]")
    local st = C.tether_save_start(self._h, so, M._callbacks.save, ud, out)
    if st ~= 0 then
        local msg = ffi.string(C.tether_errmsg())
        unregister(id, entry)
        error(make_error(st, msg, "save"), 0)
    end
    task._h = out[0]
    return task
end

-- save and wait: save_wait(timeout_ms) or save_wait{timeout_ms =, merge =};
-- returns how many changes were saved, or raises.
local SAVE_WAIT_OPTIONS = {timeout_ms = true, merge = true}
function Context:save_wait(o)
    local timeout_ms, merge = o, nil
    if type(o) == "table" then
        check_options(o, "save_wait", SAVE_WAIT_OPTIONS)
        timeout_ms, merge = o.timeout_ms, o.merge
    end
    if timeout_ms ~= nil and type(timeout_ms) ~= "number" then misuse("save_wait", "timeout_ms must be a number") end
    local task = self:save{merge = merge}
    if not self:wait(function() return task.done end, timeout_ms or 30000) then
        task:cancel()
        self:wait(function() return task.done end, 5000)
    end
    if task.status ~= 0 then error(make_error(task.status, task.message, "save"), 0) end
    return task.saved
end

-- ------------------------------------------------------------ module

local DEBUG_COUNTERS = {contexts = 1, objects = 2, object_handles = 3, results = 4, tasks = 5, observers = 6,
              threads = 7, prepared_statements = 8, requests = 9}

-- How many of `what` ("contexts", "objects", "object_handles", "results",
-- "tasks", "observers", ...) the library holds now, process-wide: the debug
-- counters, for leak checks.
function M.debug_count(what)
    local k = DEBUG_COUNTERS[what] or misuse("debug_count", "unknown counter " .. tostring(what))
    local out = ffi.new("int64_t[1]")
    check(C.tether_debug_count(k, out), "tether_debug_count")
    return tonumber(out[0])
end

function M.version()
    return ffi.string(C.tether_version())
end

-- For tests: how many callbacks the binding still expects (over all contexts).
function M._pending_count()
    local n = 0
    for _ in pairs(registry) do n = n + 1 end
    return n
end

M.Context, M.Object, M.Results, M.Task, M.Observer = Context, Object, Results, Task, Observer
return M
