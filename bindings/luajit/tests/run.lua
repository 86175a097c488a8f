-- A tiny test runner (no luarocks): runs every tests/test_*.lua against the
-- Kinto at $TETHER_TEST_URL (start one with scripts/with-kinto):
--
--   scripts/with-kinto luajit bindings/luajit/tests/run.lua [PATTERN...]
--
-- Each test file returns a list of {name, function(h) ... end}; h is the
-- helpers module (tests/helpers.lua). A test fails by raising an error.
-- PATTERNs (Lua patterns) select tests by "file: name". Exit status 0 only
-- if every selected test passed.

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../?.lua;" .. package.path

local h = require("helpers")

local files = {}
local ls = io.popen('ls "' .. here .. '"')
for name in ls:lines() do
    if name:match("^test_.*%.lua$") then files[#files + 1] = name end
end
ls:close()
table.sort(files)

local patterns = {}
for i = 1, #arg do patterns[#patterns + 1] = arg[i] end
local function selected(full)
    if #patterns == 0 then return true end
    for _, p in ipairs(patterns) do
        if full:match(p) then return true end
    end
    return false
end

local passed, failed, failures = 0, 0, {}
local t_all = h.now_ms()
for _, file in ipairs(files) do
    local tests = dofile(here .. "/" .. file)
    for _, t in ipairs(tests) do
        local full = file:gsub("%.lua$", "") .. ": " .. t[1]
        if selected(full) then
            local t0 = h.now_ms()
            local ok, err = xpcall(function() t[2](h) end, function(e)
                return debug.traceback(tostring(e), 2)
            end)
            h.cleanup()
            if ok then
                passed = passed + 1
                print(string.format("ok    %s (%d ms)", full, h.now_ms() - t0))
            else
                failed = failed + 1
                failures[#failures + 1] = full
                print(string.format("FAIL  %s\n%s", full, err))
            end
        end
    end
end
h.teardown()
print(string.format("\n%d passed, %d failed in %.1f s", passed, failed, (h.now_ms() - t_all) / 1000))
for _, f in ipairs(failures) do print("FAILED: " .. f) end
os.exit(failed == 0 and passed > 0 and 0 or 1)
