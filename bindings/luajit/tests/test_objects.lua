-- Objects: peek vs get, values, observers, local changes, bad keys.

-- A context whose cache holds every client.
local function warm(h, o)
    local ctx = h.open(o)
    local _, final = ctx:fetch_wait{entity = "clients"}
    h.eq(final:count(), h.counts.clients, "clients")
    final:free()
    return ctx
end

return {
    {"peek of an uncached record is nil (or the default) and never fetches; get fetches", function(h)
        local ctx = h.open()
        local c = ctx:object("clients", "carol-ws")
        h.eq(c.id, "carol-ws", "id")
        h.eq(c.entity, "clients", "entity")
        local value, t = c:peek("Owner")
        h.eq(value, nil, "peek: nil"); h.eq(t, nil, "peek: no type")
        h.eq(c:peek("Owner", "?"), "?", "peek: the default")
        h.ok(not c:is_cached("Owner"), "not cached")
        ctx:poll(300)
        h.ok(not c:is_cached("Owner"), "peek, later: peek fetched nothing")
        h.eq(c:get("Owner", "later"), "later", "get: the default (and starts the refresh)")
        h.ok(ctx:wait(function() return c:is_cached("Owner") end, 10000), "the refresh landed")
        h.eq(c:peek("Owner"), "carol", "Owner")
        h.ok(c:version() > 0, "a server version")
    end},

    {"values come back as Lua types, with their type's name", function(h)
        local ctx = warm(h)
        local c = ctx:object("clients", "alice-ws")
        local function both(key) return {c:peek(key)} end
        local v = both("Owner");   h.eq(v[1], "alice", "text");       h.eq(v[2], "text", "text type")
        v = both("Update");        h.eq(type(v[1]), "number", "integer"); h.eq(v[2], "integer", "integer type")
        v = both("Locked");        h.eq(type(v[1]), "boolean", "boolean"); h.eq(v[2], "boolean", "boolean type")
        v = both("Options");       h.eq(v[2], "json", "array type")
        h.ok(v[1]:match("^%[.*%]$"), "the array as JSON text: " .. v[1])
        h.eq(c:peek(304), "alice", "by code (Owner is 304)")
        h.eq(c:peek("Description"), "Created by alice.\n", "a newline survives")
        local j = ctx:object("jobs", "job000002")
        h.ok(not j:is_cached("Severity"), "jobs not fetched")
        ctx:fetch_wait{entity = "jobs"}
        local sev, t = j:peek("Severity")
        h.eq(t, "real", "Severity's type")
        h.eq(type(sev), "number", "Severity")
        local ch = ctx:object("changes", "c1001")
        ctx:fetch_wait{entity = "changes", where = "Change == 1001"}
        local jc, jt = ch:peek("JobCount")
        h.eq(jc, nil, "an absent value is nil")
        h.eq(jt, "null", "its type")
    end},

    {"get returns the cached value and refreshes; observers hear a server change", function(h)
        local ctx = warm(h)
        local c = ctx:object("clients", "dave-ws")
        local old = c:peek("Description")
        local heard = {}
        local function on_change(obj, key, status)
            heard[#heard + 1] = {key = key, status = status, value = status == 0 and obj:peek("Description") or nil}
            h.ok(obj == c, "the observed object")
        end
        local ob1 = c:observe("Description", on_change)
        local ob2 = c:observe("DescriptionPeek", on_change)
        local new = "Edited by the Lua tests at " .. os.time() .. ".\n"
        h.patch("clients", "dave-ws", '{"Description": "' .. new:gsub("\n", "\\n") .. '"}')
        h.eq(c:peek("Description"), old, "peek: still the cached value")
        ctx:poll(200)
        h.eq(#heard, 0, "peek told nobody anything")
        h.eq(c:get("Description"), old, "get: the cached value at once")
        h.ok(ctx:wait(function() return #heard >= 2 end, 10000), "both observers told")
        local keys = {}
        for _, e in ipairs(heard) do
            h.eq(e.status, 0, "status")
            h.eq(e.value, new, "the value when told")
            keys[e.key] = true
        end
        h.ok(keys.Description and keys.DescriptionPeek, "told as Description and DescriptionPeek")
        h.eq(c:peek("Description"), new, "peek after the refresh")
        heard = {}
        h.ok(ob1:remove(), "remove")
        h.ok(ob2:remove(), "remove")
        h.eq(ob1:remove(), false, "remove again")
        ctx:poll(100)
        h.eq(#heard, 2, "one final callback each")
        for _, e in ipairs(heard) do h.eq(e.status, h.tether.E_CANCELLED, "the final's status") end
        h.ok(ob1.removed and ob2.removed, "marked removed")
        ctx:poll(100)
        h.eq(#heard, 2, "nothing after the final")
    end},

    {"set is a local change; rollback undoes it; save sends it and another context's observer hears it", function(h)
        local a = warm(h)
        local b = warm(h)
        local ca = a:object("clients", "erin-ws")
        local cb = b:object("clients", "erin-ws")
        local told = 0
        cb:observe("Host", function(_, _, status) if status == 0 then told = told + 1 end end)

        ca:set("Host", "lua-rolled-back")
        h.eq(ca:pending(), "update", "pending")
        h.eq(ca:peek("Host"), "lua-rolled-back", "peek gives the pending value")
        h.eq(a:change_count(), 1, "changes")
        ca:rollback()
        h.eq(ca:pending(), "none", "after rollback")
        h.eq(ca:peek("Host"), "erin-pc", "the server's value again")

        h.raises(h.tether.E_TYPE, function() ca:set("Locked", "yes") end, "text for a boolean")
        h.raises(h.tether.E_TYPE, function() ca:set("Owner", nil) end, "nil for a required attribute")
        h.raises(h.tether.E_INVALID, function() ca:set("LineEnd", "sideways") end, "outside the enum")
        h.raises(h.tether.E_NOT_FOUND, function() ca:set("NoSuchKey", 1) end, "an unknown key")
        h.raises(h.tether.E_MISUSE, function() ca:set("Host", function() end) end, "a function")
        h.eq(ca:pending(), "none", "refused sets leave nothing pending")

        local host = "lua-host-" .. os.time()
        ca:set("Host", host)
        ca:set("Locked", true)
        ca:set("Options", h.tether.json('["allwrite", "noclobber"]'))
        h.eq(a:save_wait(10000), 1, "changes saved")
        h.eq(ca:pending(), "none", "nothing pending after the save")
        local status, body = h.kinto("GET", "/buckets/" .. h.bucket .. "/collections/clients/records/erin-ws")
        h.eq(status, 200, "GET")
        h.ok(body:find('"Host":"' .. host .. '"', 1, true), "the server has the new Host: " .. body)
        h.ok(body:find('"noclobber"'), "and the new Options")

        h.eq(cb:get("Host"), "erin-pc", "b's get: its cached value at once")
        h.ok(b:wait(function() return told > 0 end, 10000), "b's observer told")
        h.eq(cb:peek("Host"), host, "b's peek after the refresh")
        h.eq(cb:peek("Locked"), true, "Locked")
    end},

    {"bad keys, codes and entities give clear errors", function(h)
        local ctx = warm(h)
        local c = ctx:object("clients", "frank-ws")
        local err = h.raises(h.tether.E_NOT_FOUND, function() c:peek("NoSuchKey") end, "unknown key")
        h.ok(err.message:find("NoSuchKey"), "the message names the key: " .. err.message)
        h.ok(tostring(err):find("TETHER_E_NOT_FOUND"), "tostring: " .. tostring(err))
        h.raises(h.tether.E_NOT_FOUND, function() c:get("NoSuchKey") end, "get of an unknown key")
        h.raises(h.tether.E_NOT_FOUND, function() c:peek(99999) end, "unknown code")
        h.raises(h.tether.E_INVALID, function() c:peek("Owner.Nope") end, "a key path through a non-reference")
        h.raises(h.tether.E_MISUSE, function() c:peek({}) end, "a table as the key")
        h.raises(h.tether.E_MISUSE, function() c:peek(nil) end, "nil as the key")
        h.raises(h.tether.E_NOT_FOUND, function() c:observe("NoSuchKey", function() end) end, "observe an unknown key")
        h.raises(h.tether.E_NOT_FOUND, function() ctx:object("nosuch", "x") end, "an unknown entity")
        h.raises(h.tether.E_MISUSE, function() ctx:object("clients", nil) end, "nil id")
        h.raises(h.tether.E_INVALID, function() ctx:object("clients", "bad\255utf8") end, "invalid UTF-8")
        local ghost = ctx:object("clients", "no-such-client")
        h.eq(ghost:peek("Owner", "none"), "none", "a record nobody has")
        h.eq(c:peek("Owner"), "frank", "the context still works")
    end},
}
