-- LuaJIT on PostgreSQL: tether.open_postgres and tether.install_postgres
-- against the cluster scripts/with-postgres starts (run by the `postgres`
-- suite: luajit bindings/luajit/tests/postgres.lua). Exits 1 on a failure.
package.path = "bindings/luajit/?.lua;" .. package.path
local tether = require("tether")

local conninfo = os.getenv("TETHER_PG_CONNINFO")
if not conninfo then
    io.stderr:write("postgres.lua: TETHER_PG_CONNINFO is not set: run under scripts/with-postgres\n")
    os.exit(2)
end

local function psql(sql)
    local p = io.popen("psql -X -q -A -t -v ON_ERROR_STOP=1 -d '" .. conninfo .. "' -c \"" .. sql .. "\"")
    local out = p:read("*a")
    assert(p:close(), "psql failed: " .. sql)
    return (out:gsub("%s+$", ""))
end

local failures = 0
local function check(cond, what)
    if not cond then failures = failures + 1; io.stderr:write("FAIL: " .. what .. "\n") end
end

local schema = string.format("lua_%d_%d", os.time(), math.random(1e6))
local store = os.tmpname()
psql("CREATE SCHEMA " .. schema .. "; CREATE TABLE " .. schema ..
     ".items (id int8 PRIMARY KEY, title text NOT NULL, n int4); INSERT INTO " .. schema ..
     ".items SELECT g, 't' || g, g % 5 FROM generate_series(1, 20) g")

local ok, err = pcall(function()
    check(tether.install_postgres{conninfo = conninfo, schema = schema} == 1, "install tracks the one table")
    check(tether.install_postgres{conninfo = conninfo, schema = schema} == 0, "installing again tracks nothing new")
    local e = select(2, pcall(tether.open_postgres, {conninfo = conninfo, schema = schema, store = store, shema = "x"}))
    check(tether.is_error(e, tether.E_MISUSE) and e.message:find("schema", 1, true),
          "a misspelled option is refused, naming the one meant")
    e = select(2, pcall(tether.open_postgres, {conninfo = conninfo, schema = "no_such_schema_x", store = store .. "b"}))
    check(tether.is_error(e, tether.E_NOT_FOUND), "an unknown schema is NOT_FOUND")

    local ctx = tether.open_postgres{conninfo = conninfo, schema = schema, store = store}
    local cached, final = ctx:fetch_wait{entity = "items", where = "n == $1", args = {2}, sort = "title"}
    local want = psql("SELECT string_agg(id::text, ',' ORDER BY title) FROM " .. schema .. ".items WHERE n = 2")
    local got = {}
    for i = 1, final:count() do got[#got + 1] = final:id(i) end
    check(table.concat(got, ",") == want, "the answer is PostgreSQL's: " .. table.concat(got, ",") .. " vs " .. want)
    if cached then cached:free() end
    final:free()
    check(ctx:object("items", "2"):peek("title") == "t2", "peek reads what the fetch stored")
    ctx:close()
end)
if not ok then failures = failures + 1; io.stderr:write("FAIL: " .. tostring(type(err) == "table" and err.message or err) .. "\n") end
psql("DROP SCHEMA " .. schema .. " CASCADE")
os.remove(store)
if failures > 0 then os.exit(1) end
print("postgres.lua: all checks passed")
