-- Run by test_jit.lua in a fresh luajit process: a hot loop polls a context
-- (so LuaJIT compiles it) and callbacks arrive only now and then, the case
-- the LuaJIT manual warns of: a C function that calls back into Lua, called
-- from a trace, is a "bad callback" PANIC. The binding's poll is jit.off,
-- so this must end normally. Arguments: URL BUCKET STORE USER PASSWORD.
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local tether = require("tether")
local ctx = tether.open{url = arg[1], bucket = arg[2], store = arg[3], username = arg[4], password = arg[5]}
-- No callback before the loop: one delivered by the interpreter first would
-- make LuaJIT blacklist the call and hide the problem.
local got, started = 0, 0
local function cb(_, _, _, r) got = got + 1; r:free() end
for i = 1, 300000 do
    ctx:poll(0)
    if i % 3000 == 0 then
        ctx:fetch{entity = "users", policy = "cache_only", callback = cb}
        started = started + 1
    end
end
ctx:wait(function() return got == started end, 5000)
ctx:close()
print(string.format("callbacks %d of %d", got, started))
os.exit(got == started and 0 or 1)
