-- Fetches against the seeded bucket: two answers, predicates, sort, limit,
-- result types, live fetches, and validation errors.

local function max_change_on_server(h, query)
    local status, body = h.kinto("GET", "/buckets/" .. h.bucket .. "/collections/changes/records?_sort=-Change&_limit=1"
                                 .. (query and ("&" .. query) or ""))
    h.eq(status, 200, "GET changes")
    return tonumber(body:match('"Change":%s*(%d+)'))
end

return {
    {"a fetch answers twice: CACHED (the empty cache) then FINAL (the server)", function(h)
        local ctx = h.open()
        local rec = h.recorder()
        local task = ctx:fetch{entity = "clients", sort = "Client", callback = rec.fn}
        h.eq(#rec.calls, 0, "callbacks before any poll (POLL delivery)")
        h.ok(ctx:wait(function() return task.done end, 10000), "FINAL within 10 s")
        h.eq(#rec.calls, 2, "callbacks")
        h.eq(rec.calls[1].phase, "cached", "first phase")
        h.eq(rec.calls[1].count, 0, "cached count on a fresh store")
        h.eq(rec.calls[2].phase, "final", "second phase")
        h.eq(rec.calls[2].status, 0, "final status")
        h.eq(rec.calls[2].count, h.counts.clients, "final count (seeded)")
        h.eq(task.status, 0, "task.status")

        -- Again: now the cache answers with everything first.
        local cached, final = ctx:fetch_wait{entity = "clients", sort = "Client"}
        h.eq(cached:count(), h.counts.clients, "cached count the second time")
        h.eq(final:count(), h.counts.clients, "final count the second time")
        h.eq(final:object(1).id, "alice-laptop", "first client in Client order")
        h.eq(final:object(1):peek("Owner"), "alice", "its Owner")
        h.eq(final:id(h.counts.clients), "zoe-ws", "last client in Client order")
        cached:free()
        final:free()
    end},

    {"a predicate with arguments counts what the server counts", function(h)
        local ctx = h.open()
        local _, final = ctx:fetch_wait{entity = "changes", where = "Status == $1 AND User BEGINSWITH[c] $2",
                                        args = {"pending", "J"}}
        -- The seed's users whose names begin with "j": judy and jonas.
        local want = h.server_count("changes", "Status=pending&in_User=judy,jonas")
        h.ok(want > 0, "the seed has pending changes by j* users")
        h.eq(final:count(), want, "pending changes by j* users")
        for _, o in ipairs(final:objects()) do
            h.eq(o:peek("Status"), "pending", o.id .. " Status")
            h.eq(o:peek("User"):sub(1, 1), "j", o.id .. " User")
        end
        -- Numbers, booleans and tether.null bind too.
        local _, n = ctx:fetch_wait{entity = "changes", where = "Change > $1 AND Description != $2",
                                    args = {1100, h.tether.null, n = 2}, result = "count"}
        h.eq(n:count(), h.server_count("changes", "gt_Change=1100"), "changes above 1100")
        local _, locked = ctx:fetch_wait{entity = "clients", where = "Locked == $1", args = {true}}
        h.eq(locked:count(), h.server_count("clients", "Locked=true"), "locked clients")
    end},

    {"sort, limit and offset", function(h)
        local ctx = h.open()
        local _, top = ctx:fetch_wait{entity = "changes", sort = "-Change", limit = 5}
        h.eq(top:count(), 5, "limit 5")
        h.eq(top:object(1):peek("Change"), max_change_on_server(h), "the highest change first")
        local last = math.huge
        for i = 1, 5 do
            local c = top:object(i):peek("Change")
            h.ok(c < last, "descending at " .. i)
            last = c
        end
        local _, page2 = ctx:fetch_wait{entity = "changes", sort = "-Change", limit = 5, offset = 5}
        local _, ten = ctx:fetch_wait{entity = "changes", sort = "-Change", limit = 10}
        h.eq(page2:count(), 5, "page 2's count")
        for i = 1, 5 do
            h.eq(ten:id(i), top:id(i), "row " .. i .. " of 10 is page 1's")
            h.eq(ten:id(5 + i), page2:id(i), "row " .. (5 + i) .. " of 10 is page 2's")
        end
    end},

    {"result types: count, ids, values", function(h)
        local ctx = h.open()
        local _, count = ctx:fetch_wait{entity = "changes", result = "count"}
        h.eq(count:type(), "count", "type")
        h.eq(count:count(), h.counts.changes, "count")
        h.raises(h.tether.E_MISUSE, function() count:object(1) end, "object of a COUNT answer")
        local _, ids = ctx:fetch_wait{entity = "users", result = "ids", sort = "User"}
        local list = ids:ids()
        h.eq(#list, h.counts.users, "ids")
        h.eq(list[1], "alice", "first id")
        local _, values = ctx:fetch_wait{entity = "clients", result = "values", properties = "Client,Locked",
                                         where = "Client == 'bob-ws'"}
        h.eq(values:count(), 1, "one row")
        h.eq(values:value(1, "Client"), "bob-ws", "Client value")
        local v, t = values:value(1, "Locked")
        h.eq(t, "boolean", "Locked's type")
        h.eq(type(v), "boolean", "Locked as a Lua boolean")
        h.raises(h.tether.E_NOT_FOUND, function() values:value(1, "Owner") end, "a property not asked for")
        h.raises(h.tether.E_NOT_FOUND, function() values:value(2, "Client") end, "past the end")
        h.raises(h.tether.E_MISUSE, function() values:value(0, "Client") end, "index 0")
    end},

    {"bad options raise at start, and then no callback runs", function(h)
        local ctx = h.open()
        local before = h.tether._pending_count()
        local calls = 0
        local cb = function() calls = calls + 1 end
        local err = h.raises(h.tether.E_INVALID, function()
            ctx:fetch{entity = "changes", where = "Status == ", callback = cb}
        end, "bad syntax")
        h.ok(err.message:find("column"), "the message says where: " .. err.message)
        h.raises(h.tether.E_INVALID, function()
            ctx:fetch{entity = "changes", where = "Status == $1", args = {}, callback = cb}
        end, "a missing argument")
        h.raises(h.tether.E_INVALID, function()
            ctx:fetch{entity = "changes", sort = "NoSuchKey", callback = cb}
        end, "an unknown sort key")
        h.raises(h.tether.E_NOT_FOUND, function() ctx:fetch{entity = "nosuch", callback = cb} end,
                 "an unknown entity")
        h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = 42} end, "a number for the entity")
        h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = "changes", policy = "sometimes"} end,
                 "an unknown policy")
        h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = "changes", where = "Status == $1",
                                                         args = {{}}} end, "a table as an argument")
        ctx:poll(200)
        h.eq(calls, 0, "callbacks")
        h.eq(h.tether._pending_count(), before, "callbacks the binding still expects")
    end},

    {"a live fetch answers again when a change lands, and ends with its cancel", function(h)
        local ctx = h.open()
        local phases, inserted, updated = {}, 0, 0
        local task = ctx:fetch{entity = "clients", where = "Owner == 'bob'", live = true,
                               callback = function(phase, status, message, results)
                                   phases[#phases + 1] = phase .. ":" .. status
                                   if phase == "live" and status == 0 then
                                       inserted = inserted + results:change_count("insert")
                                       updated = updated + results:change_count("update")
                                   end
                                   results:free()
                               end}
        h.ok(ctx:wait(function() return #phases >= 2 end, 10000), "two answers")
        h.eq(table.concat(phases, " "), "cached:0 live:0", "phases")
        h.eq(task.done, false, "a live fetch goes on")
        -- Another client changes bob-ws; a get's refresh brings it here.
        h.patch("clients", "bob-ws", '{"Host": "bob-new-host"}')
        local obj = ctx:object("clients", "bob-ws")
        obj:get("Host")
        h.ok(ctx:wait(function() return updated > 0 end, 10000), "a LIVE answer with the update")
        h.eq(obj:peek("Host"), "bob-new-host", "the refreshed value")
        h.eq(inserted, 0, "inserted rows")
        h.ok(task:cancel(), "cancel")
        h.ok(ctx:wait(function() return task.done end, 5000), "the FINAL")
        h.eq(phases[#phases], "final:" .. h.tether.E_CANCELLED, "the last phase")
    end},

    {"another client's change reaches a live fetch by the sync interval, or at once by changed()", function(h)
        for _, interval in ipairs{200, 0} do
            local ctx = h.open{sync_interval_ms = interval}
            ctx:fetch_wait{entity = "clients"}   -- synced whole: later syncs ask what changed
            local updated, answers = 0, 0
            local task = ctx:fetch{entity = "clients", where = "Owner == 'bob'", live = true,
                                   callback = function(phase, status, message, results)
                                       if phase == "live" and status == 0 then
                                           answers = answers + 1
                                           updated = updated + results:change_count("update")
                                       end
                                       results:free()
                                   end}
            h.ok(ctx:wait(function() return answers >= 1 end, 10000), "the first answer")
            ctx:poll(300)
            local host = "bob-host-" .. interval
            h.patch("clients", "bob-ws", '{"Host": "' .. host .. '"}')
            if interval == 0 then
                ctx:poll(600)
                h.eq(updated, 0, "interval 0: nothing comes by itself")
                ctx:changed("clients")
            end
            h.ok(ctx:wait(function() return updated > 0 end, 10000), "a LIVE answer with the update, interval " .. interval)
            h.eq(ctx:object("clients", "bob-ws"):peek("Host"), host, "the value")
            h.raises(h.tether.E_NOT_FOUND, function() ctx:changed("nope") end, "an unknown entity")
            h.raises(h.tether.E_MISUSE, function() ctx:changed(5) end, "not a string")
            task:cancel()
        end
        h.raises(h.tether.E_MISUSE, function() h.open{sync_interval = 1} end, "the option is sync_interval_ms")
    end},
}
