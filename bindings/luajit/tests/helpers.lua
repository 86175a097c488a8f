-- Helpers for the LuaJIT binding's tests: the Kinto the harness started
-- ($TETHER_TEST_URL), seeded once per run by scripts/seed-demo (the same
-- data the demos and the Python tests' seeding use), contexts closed after
-- each test, and assertions.

local tether = require("tether")

local H = {tether = tether, now_ms = tether.now_ms}

local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
H.repo = here .. "/../../.."
H.auth_user, H.auth_password = "test", "test"

H.url = os.getenv("TETHER_TEST_URL")
if not H.url or H.url == "" then
    io.stderr:write("TETHER_TEST_URL is not set: these tests need a running Kinto. Run them with\n"
                    .. "  scripts/with-kinto luajit bindings/luajit/tests/run.lua\n")
    os.exit(2)
end
H.url = H.url:gsub("/+$", "")

-- ------------------------------------------------------------ shell, curl

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
H.q = q

local function run(cmd)
    local p = assert(io.popen(cmd, "r"))
    local out = p:read("*a")
    local ok, how, code = p:close()
    return out, (ok == true or code == 0)
end

-- A request to Kinto as another client (curl, basic auth test:test).
-- Returns the HTTP status and the body.
function H.kinto(method, path, body)
    local cmd = "curl -sS -X " .. method .. " -u " .. q(H.auth_user .. ":" .. H.auth_password)
        .. " -H 'Content-Type: application/json' -w '\\n%{http_code}' "
    if body then cmd = cmd .. "--data-binary " .. q(body) .. " " end
    local out = run(cmd .. q(H.url .. path))
    local text, status = out:match("^(.*)\n(%d+)%s*$")
    return tonumber(status), text
end

-- How many records of `coll` match the Kinto query `query` (server side).
function H.server_count(coll, query)
    local path = "/buckets/" .. H.bucket .. "/collections/" .. coll .. "/records?_limit=1"
        .. (query and ("&" .. query) or "")
    local out = run("curl -sS -I -u " .. q(H.auth_user .. ":" .. H.auth_password) .. " " .. q(H.url .. path))
    local n = out:lower():match("total%-records:%s*(%d+)")
    assert(n, "no Total-Records header from Kinto: " .. out)
    return tonumber(n)
end

-- Changes one record on the server, behind the library's back.
function H.patch(coll, id, json_data)
    local status, body = H.kinto("PATCH", "/buckets/" .. H.bucket .. "/collections/" .. coll .. "/records/" .. id,
                                 '{"data": ' .. json_data .. '}')
    assert(status == 200, "PATCH " .. coll .. "/" .. id .. " -> " .. tostring(status) .. " " .. tostring(body))
end

-- scripts/faultproxy.py in front of Kinto, passing everything: a server
-- URL that can be made to stop answering (for the offline tests).
-- Returns {url = ..., stop = function}; stopped after the test anyway.
local proxies = {}
function H.proxy()
    local upstream = H.url:match("^(https?://[^/]+)")
    local prefix = H.url:match("^https?://[^/]+(.*)$")
    local out_file = H.tmp .. "/proxy" .. (#proxies + 1) .. ".out"
    local pid = run("python3 " .. q(H.repo .. "/scripts/faultproxy.py") .. " --upstream " .. q(upstream)
                    .. " --port 0 >" .. q(out_file) .. " 2>/dev/null & echo $!"):match("%d+")
    local port
    local deadline = H.now_ms() + 10000
    while not port and H.now_ms() < deadline do
        local f = io.open(out_file, "r")
        if f then port = f:read("*l"); f:close() end
        port = port and port:match("^%d+$")
        if not port then os.execute("sleep 0.05") end
    end
    assert(port, "faultproxy did not print its port")
    local p = {url = "http://127.0.0.1:" .. port .. prefix, pid = pid}
    function p.stop()
        if p.pid then
            os.execute("kill " .. p.pid .. " 2>/dev/null; while kill -0 " .. p.pid .. " 2>/dev/null; do sleep 0.05; done")
            p.pid = nil
        end
    end
    proxies[#proxies + 1] = p
    return p
end

-- ------------------------------------------------------------ data

H.tmp = (run("mktemp -d /tmp/tether-lua.XXXXXX")):gsub("%s+$", "")
local stores = 0
function H.store()
    stores = stores + 1
    return H.tmp .. "/store" .. stores .. ".sqlite"
end

-- scripts/seed-demo into a fresh bucket: 40 users, 60 clients, 200 changes, 60 jobs.
H.counts = {users = 40, clients = 60, changes = 200, jobs = 60}
H.bucket = string.format("lua%d%04d", os.time(), math.random(0, 9999))
do
    local out, ok = run(q(H.repo .. "/scripts/seed-demo") .. " " .. q(H.url) .. " " .. q(H.bucket)
                        .. " --auth " .. q(H.auth_user .. ":" .. H.auth_password) .. " --read system.Everyone 2>&1")
    if not ok then
        io.stderr:write("seed-demo failed:\n" .. out)
        os.exit(2)
    end
end

-- ------------------------------------------------------------ contexts

local opened = {}

-- A context on the seeded bucket with a fresh store (closed after the test).
function H.open(o)
    o = o or {}
    o.url = o.url or H.url
    o.bucket = o.bucket or H.bucket
    o.store = o.store or H.store()
    if o.username == nil then o.username, o.password = H.auth_user, H.auth_password end
    o.timeout_ms = o.timeout_ms or 10000
    local ctx = tether.open(o)
    opened[#opened + 1] = ctx
    return ctx
end

function H.cleanup()
    for _, ctx in ipairs(opened) do pcall(ctx.close, ctx) end
    opened = {}
    for _, p in ipairs(proxies) do p.stop() end
    proxies = {}
    collectgarbage()
end

function H.teardown()
    H.kinto("DELETE", "/buckets/" .. H.bucket)
    if H.tmp:match("^/tmp/tether%-lua%.") then os.execute("rm -rf " .. q(H.tmp)) end
end

-- ------------------------------------------------------------ assertions

local function show(v)
    if type(v) == "string" then return string.format("%q", v) end
    return tostring(v)
end

function H.eq(got, want, what)
    if got ~= want then
        error(string.format("%s: got %s, want %s", what or "value", show(got), show(want)), 2)
    end
end

function H.ok(v, what)
    if not v then error((what or "assertion") .. " failed", 2) end
    return v
end

-- Calls fn, which must raise a tether error of `code`; returns the error.
function H.raises(code, fn, what)
    local ok, err = pcall(fn)
    if ok then error(string.format("%s: no error, want %s", what or "call", tether.errstr(code)), 2) end
    if not tether.is_error(err) then
        error(string.format("%s: raised %s, want a tether error %s", what or "call", show(err), tether.errstr(code)), 2)
    end
    if err.code ~= code then
        error(string.format("%s: raised %s, want %s", what or "call", tostring(err), tether.errstr(code)), 2)
    end
    return err
end

-- A fetch callback that records its calls: {phase, status, message, count}.
function H.recorder()
    local rec = {calls = {}}
    function rec.fn(phase, status, message, results, task)
        local n = nil
        if status == 0 then n = results:count() end
        rec.calls[#rec.calls + 1] = {phase = phase, status = status, message = message, count = n}
        results:free()
    end
    function rec.finals()
        local n = 0
        for _, c in ipairs(rec.calls) do if c.phase == "final" then n = n + 1 end end
        return n
    end
    return rec
end

return H
