-- Tether from LuaJIT: a tour against the seeded demo bucket.
--
--   luajit bindings/luajit/demo.lua URL BUCKET STORE [--offline]
--
-- URL is the Kinto root (http://127.0.0.1:PORT/v1), BUCKET the bucket seeded
-- by scripts/seed-demo ("demo"), STORE the SQLite file to cache into. Run it
-- once with the server up, then again with --offline after stopping the
-- server: the second run works from the store alone.
--
-- Every callback (fetch phases, observers) runs on this thread, inside
-- ctx:poll() (POLL delivery: LuaJIT callbacks cannot run on another thread).

local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local tether = require("tether")

local url, bucket, store = arg[1], arg[2], arg[3]
local offline = arg[4] == "--offline"
if not (url and bucket and store) then
    io.stderr:write("usage: luajit demo.lua URL BUCKET STORE [--offline]\n")
    os.exit(2)
end
local user, password = "demo", "demo"

local function section(n, title)
    print()
    print(n .. ". " .. title)
    print(string.rep("-", 72))
end

local function status_name(status)
    return status == 0 and "OK" or tether.errstr(status)
end

local function show(v)
    if type(v) == "string" then return string.format("%q", v):gsub("\\\n", "\\n") end
    return tostring(v)
end

local function show_model(ctx)
    print(string.format("context on %s, bucket %q: online=%s (libtether %s)", url, bucket,
                        tostring(ctx:is_online()), tether.version()))
    for _, e in ipairs(ctx:entities()) do
        local ops = {}
        for _, op in ipairs({"fetch", "insert", "update", "delete"}) do
            if e.operations[op] then ops[#ops + 1] = op end
        end
        print(string.format("  %s  (%s; %s)", e.name, e.route, table.concat(ops, ", ")))
        for _, a in ipairs(e.attributes) do
            local flags = {}
            if a.id then flags[#flags + 1] = "id" end
            if a.version then flags[#flags + 1] = "version" end
            if a.required then flags[#flags + 1] = "required" end
            print(string.format("      %-14s %-8s code %-5d %s", a.name, a.type, a.code, table.concat(flags, " ")))
        end
    end
end

local function row(c)
    return string.format("%-16s owner %-8s host %-12s root %s", c:peek("Client"), c:peek("Owner"),
                         c:peek("Host"), c:peek("Root"))
end

local function on_phase(phase, status, message, results)
    print(string.format("  [%s] status %s%s, %d clients", phase, status_name(status),
                        message ~= "" and (": " .. message) or "", results:count()))
end

local function fetch_twice(ctx)
    local _, final = ctx:fetch_wait{entity = "clients", sort = "Client", callback = on_phase}
    for i = 1, 4 do print("      " .. row(final:object(i))) end
    print(string.format("      ... (%d in all)", final:count()))
    final:free()
    print("  again, now that the store holds them:")
    ctx:fetch_wait{entity = "clients", sort = "Client", callback = on_phase}
end

-- Another client changes the record on the server (curl), behind our back.
local function patch_description(rid, text)
    local body = string.format('{"data": {"Description": "%s"}}', text:gsub("\n", "\\n"))
    local cmd = string.format("curl -sS -f -o /dev/null -X PATCH -u '%s:%s' -H 'Content-Type: application/json' "
                              .. "--data-binary '%s' '%s/buckets/%s/collections/clients/records/%s'",
                              user, password, body, url, bucket, rid)
    assert(os.execute(cmd) == 0, "curl PATCH failed")
end

local function peek_get_observe(ctx)
    local c = ctx:object("clients", "alice-ws")
    print("  peek  Description = " .. show(c:peek("Description")) .. "   (from the cache, no network)")
    local changed
    local function on_change(obj, key, status)
        if status == 0 then
            print(string.format("  observer: %s of %s changed -> %s", key, obj.id, show(obj:peek("Description"))))
            if key == "Description" then changed = obj:peek("Description") end
        else
            print(string.format("  observer on %s: final callback (%s)", key, status_name(status)))
        end
    end
    local ob1 = c:observe("Description", on_change)
    local ob2 = c:observe("DescriptionPeek", on_change)
    patch_description("alice-ws", "Edited by the Lua demo at " .. os.date("%H:%M:%S") .. ".\n")
    print("  (the demo changed alice-ws on the server directly)")
    print("  peek  Description = " .. show(c:peek("Description")) .. "   (still the cached value)")
    print("  get   Description = " .. show(c:get("Description")) .. "   (cached value at once; refresh started)")
    assert(ctx:wait(function() return changed end, 10000), "no change heard within 10 s")
    ctx:poll(50)  -- let the peek-form observer print too
    print("  peek  Description = " .. show(c:peek("Description")) .. "   (the refresh landed)")
    ob1:remove()
    ob2:remove()
    ctx:poll(50)
end

local function predicate(ctx)
    local _, final = ctx:fetch_wait{entity = "changes", sort = "-Change", limit = 5,
                                    where = "Status == $1 AND User BEGINSWITH[c] $2", args = {"pending", "G"}}
    print(string.format("  Status == $1 AND User BEGINSWITH[c] $2, with $1 = \"pending\", $2 = \"G\": %d changes",
                        final:count()))
    for i = 1, final:count() do
        local o = final:object(i)
        print(string.format("      %-6d %-8s %s", o:peek("Change"), o:peek("User"), o:peek("Description")))
    end
    final:free()
end

local function cancel_in_flight(ctx)
    local calls = {}
    local task = ctx:fetch{entity = "changes", policy = "server_only", callback = function(phase, status, message, r)
        calls[#calls + 1] = phase
        print(string.format("  [%s] status %s%s, %d objects", phase, status_name(status),
                            message ~= "" and (": " .. message) or "", r:count()))
        r:free()
    end}
    print("  started a server-only fetch of changes; cancel() -> " .. tostring(task:cancel()))
    assert(ctx:wait(function() return task.done end, 10000), "no FINAL within 10 s")
    ctx:poll(200)
    print(string.format("  callbacks received: %d (%s); cancel() again -> %s", #calls, table.concat(calls, ", "),
                        tostring(task:cancel())))
    assert(task.status == tether.E_CANCELLED or task.status == 0)
end

local function offline_tour(ctx)
    print("  online = " .. tostring(ctx:is_online()) .. " (opened from the store)")
    local c = ctx:object("clients", "alice-ws")
    print(string.format("  peek alice-ws Owner=%s Root=%s", show(c:peek("Owner")), show(c:peek("Root"))))
    print("  peek alice-ws Description=" .. show(c:peek("Description")) .. " (as the last online run left it)")
    local _, final = ctx:fetch_wait{entity = "clients", policy = "cache_only", sort = "-Update", limit = 3}
    print("  cache_only fetch: " .. table.concat(final:ids(), ", "))
    final:free()
    local ok, err = pcall(ctx.fetch_wait, ctx, {entity = "clients", callback = on_phase})
    if ok then
        print("  (the server answered; stop it to see the offline case)")
    else
        print("  fetch_wait raised " .. tostring(err))
    end
end

local ok, err = pcall(function()
    local ctx = tether.open{url = url, bucket = bucket, store = store, username = user, password = password,
                            timeout_ms = 5000}
    section(1, "Connected; the model built from the server's schemas")
    show_model(ctx)
    if offline then
        section(6, "Offline: the server is gone, the store is not")
        offline_tour(ctx)
    else
        section(2, "An asynchronous fetch answers twice: cache, then server")
        fetch_twice(ctx)
        section(3, "peek never touches the network; get refreshes and tells observers")
        peek_get_observe(ctx)
        section(4, "A predicate, its values bound as $1, $2 (nothing to quote)")
        predicate(ctx)
        section(5, "A fetch cancelled in flight ends in one cancelled callback")
        cancel_in_flight(ctx)
    end
    ctx:close()
end)
if not ok then
    io.stderr:write("demo: " .. tostring(err) .. "\n")
    os.exit(1)
end
print()
print("closed.")
