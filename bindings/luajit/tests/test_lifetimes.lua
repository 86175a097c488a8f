-- Cancel, close, dead handles, callback errors and the garbage collector.

return {
    {"cancel delivers one FINAL, TETHER_E_CANCELLED, and nothing after it", function(h)
        local ctx = h.open()
        local rec = h.recorder()
        local task = ctx:fetch{entity = "changes", policy = "server_only", callback = rec.fn}
        h.eq(task:cancel(), true, "cancel")
        h.eq(task:cancel(), false, "cancel again")
        h.ok(ctx:wait(function() return task.done end, 5000), "the FINAL")
        ctx:poll(300)
        h.eq(#rec.calls, 1, "callbacks")
        h.eq(rec.calls[1].phase, "final", "phase")
        h.eq(rec.calls[1].status, h.tether.E_CANCELLED, "status")
        h.eq(task.status, h.tether.E_CANCELLED, "task.status")
        h.eq(task:cancel(), false, "cancel after the FINAL")
        -- The context goes on.
        local _, final = ctx:fetch_wait{entity = "users", result = "count"}
        h.eq(final:count(), h.counts.users, "a later fetch")
    end},

    {"cancel from inside the CACHED callback", function(h)
        local ctx = h.open()
        local phases, cancelled = {}, nil
        local task
        task = ctx:fetch{entity = "jobs", callback = function(phase, status, message, results, t)
            phases[#phases + 1] = phase .. ":" .. h.tether.errstr(status)
            h.ok(t == task, "the callback's task")
            if phase == "cached" then cancelled = t:cancel() end
            results:free()
        end}
        h.ok(ctx:wait(function() return task.done end, 5000), "the FINAL")
        ctx:poll(200)
        h.eq(cancelled, true, "cancel returned")
        h.eq(table.concat(phases, " "), "cached:TETHER_OK final:TETHER_E_CANCELLED", "phases")
    end},

    {"close with pending tasks and observers delivers each final once, before it returns", function(h)
        local ctx = h.open()
        ctx:fetch_wait{entity = "clients"}
        local base_pending = h.tether._pending_count()
        local a, b = h.recorder(), h.recorder()
        local t1 = ctx:fetch{entity = "changes", policy = "server_only", callback = a.fn}
        local t2 = ctx:fetch{entity = "clients", live = true, callback = b.fn}
        local obj = ctx:object("clients", "grace-ws")
        local told = {}
        local ob = obj:observe("Owner", function(_, _, status) told[#told + 1] = status end)
        local kept  -- a results handle kept past close
        ctx:fetch{entity = "users", policy = "cache_only", callback = function(_, _, _, r) kept = r end}
        ctx:poll(0)
        ctx:wait(function() return kept ~= nil end, 5000)
        h.ok(kept, "a results handle")
        h.eq(kept:count(), 0, "users not cached")

        ctx:close()
        h.eq(a.finals(), 1, "the server fetch's finals")
        h.eq(a.calls[#a.calls].status, h.tether.E_CANCELLED, "its status")
        h.eq(b.finals(), 1, "the live fetch's finals")
        h.eq(b.calls[#b.calls].status, h.tether.E_CANCELLED, "its status")
        h.eq(#told, 1, "the observer's calls")
        h.eq(told[1], h.tether.E_CANCELLED, "its status")
        h.ok(t1.done and t2.done and ob.removed, "all marked done")
        h.eq(h.tether._pending_count(), base_pending - 0, "callbacks still expected")

        -- Every handle of the context is dead: errors, not crashes.
        h.raises(h.tether.E_HANDLE, function() obj:peek("Owner") end, "peek after close")
        h.raises(h.tether.E_HANDLE, function() kept:count() end, "results after close")
        h.raises(h.tether.E_HANDLE, function() ctx:poll(0) end, "poll after close")
        h.raises(h.tether.E_HANDLE, function() ctx:fetch{entity = "clients"} end, "fetch after close")
        h.raises(h.tether.E_HANDLE, function() ctx:object("clients", "grace-ws") end, "object after close")
        h.eq(t1:cancel(), false, "cancel after close")
        h.eq(ob:remove(), false, "remove after close")
        h.eq(obj:free(), false, "release after close: harmless")
        h.eq(kept:free(), false, "results release after close: harmless")
        ctx:close()  -- again: a no-op
        h.ok(obj.id == "grace-ws", "the id stays readable")
    end},

    {"released handles give TETHER_E_HANDLE", function(h)
        local ctx = h.open()
        local cached, final = ctx:fetch_wait{entity = "users", sort = "User"}
        local o = final:object(1)
        h.eq(final:free(), true, "release")
        h.eq(final:free(), false, "release again")
        h.raises(h.tether.E_HANDLE, function() final:count() end, "count of released results")
        h.raises(h.tether.E_NOT_FOUND, function() cached:object(1) end, "the CACHED results were empty")
        h.eq(o:peek("User"), "alice", "an object outlives its results")
        local o2 = ctx:object("users", "alice")
        h.ok(o == o2, "one object per record: the same handle")
        h.eq(o:free(), true, "release one wrapper")
        h.raises(h.tether.E_HANDLE, function() o:peek("User") end, "the released wrapper")
        h.eq(o2:peek("User"), "alice", "the other wrapper's reference stands")
    end},

    {"a callback's error is raised by the poll that ran it; close inside a callback is TETHER_E_BUSY", function(h)
        local ctx = h.open()
        local ran = 0
        local t1 = ctx:fetch{entity = "users", policy = "cache_only", callback = function()
            ran = ran + 1
            error("boom from a callback")
        end}
        local t2 = ctx:fetch{entity = "jobs", policy = "cache_only", callback = function(_, _, _, r)
            ran = ran + 1
            r:free()
            ctx:close()  -- refused: TETHER_E_BUSY
        end}
        local errors = {}
        local deadline = h.now_ms() + 5000
        while not (t1.done and t2.done) and h.now_ms() < deadline do
            local ok, err = pcall(ctx.poll, ctx, 50)
            if not ok then errors[#errors + 1] = err end
        end
        local ok, err = pcall(ctx.poll, ctx, 0)  -- the second error, if both ran in one poll
        if not ok then errors[#errors + 1] = err end
        h.eq(ran, 2, "both callbacks ran")
        h.eq(#errors, 2, "two errors raised")
        local text = tostring(errors[1]) .. tostring(errors[2])
        h.ok(text:find("boom from a callback", 1, true), "the first error: " .. text)
        h.ok(text:find("TETHER_E_BUSY", 1, true), "the close refused: " .. text)
        h.eq(ctx.closed, false, "the context stays open")
        local _, final = ctx:fetch_wait{entity = "jobs", result = "count"}
        h.eq(final:count(), h.counts.jobs, "and works")
    end},

    {"THREAD delivery and bad options are refused; open errors are clear", function(h)
        local err = h.raises(h.tether.E_MISUSE, function()
            h.tether.open{url = h.url, bucket = h.bucket, store = h.store(), delivery = "thread"}
        end, "thread delivery")
        h.ok(err.message:find("poll", 1, true), err.message)
        h.raises(h.tether.E_MISUSE, function() h.tether.open{url = h.url, bucket = h.bucket} end, "no store")
        h.raises(h.tether.E_MISUSE, function() h.tether.open("x") end, "not a table")
        h.raises(h.tether.E_NOT_FOUND, function() h.open{bucket = "no-such-bucket-lua"} end, "unknown bucket")
        h.raises(h.tether.E_NETWORK, function() h.open{url = "http://127.0.0.1:9/v1", timeout_ms = 2000} end,
                 "nothing listening, no store to open from")
    end},

    {"offline: a store opens without the server; peek and cache-only fetches work", function(h)
        local store, proxy = h.store(), h.proxy()
        local ctx = h.open{store = store, url = proxy.url}
        h.eq(ctx:is_online(), true, "online")
        ctx:fetch_wait{entity = "clients"}
        ctx:close()
        proxy.stop()
        local off = h.open{store = store, url = proxy.url, timeout_ms = 2000}
        h.eq(off:is_online(), false, "offline")
        h.eq(off:object("clients", "heidi-ws"):peek("Owner"), "heidi", "peek offline")
        local _, final = off:fetch_wait{entity = "clients", policy = "cache_only"}
        h.eq(final:count(), h.counts.clients, "cache-only fetch offline")
        local err = h.raises(h.tether.E_NETWORK, function() off:fetch_wait{entity = "clients"} end,
                             "cache-then-server offline")
        h.ok(err.message ~= "", "with the FINAL's message")
    end},

    {"the GC releases forgotten handles and closes a forgotten context", function(h)
        collectgarbage(); collectgarbage()
        local base = {contexts = h.tether.debug_count("contexts"),
                      handles = h.tether.debug_count("object_handles"),
                      results = h.tether.debug_count("results")}
        do
            local ctx = h.tether.open{url = h.url, bucket = h.bucket, store = h.store(),
                                      username = h.auth_user, password = h.auth_password}
            local cached, final = ctx:fetch_wait{entity = "changes"}
            for i = 1, final:count() do final:object(i) end
            h.eq(h.tether.debug_count("contexts"), base.contexts + 1, "contexts while open")
            h.ok(h.tether.debug_count("object_handles") >= base.handles + h.counts.changes, "handles while held")
            h.ok(h.tether.debug_count("results") >= base.results + 2, "results while held")
            for _ = 1, 3 do ctx:fetch_wait{entity = "users", policy = "cache_only"} end
            local o = ctx:object("users", "ivan")
            o = nil
            -- Nothing pending: once unreachable, the context may be collected.
            ctx:fetch{entity = "users", policy = "cache_only"}
            ctx:wait(function() return h.tether._pending_count() == 0 end, 5000)
        end
        for _ = 1, 4 do collectgarbage() end
        h.eq(h.tether.debug_count("object_handles"), base.handles, "handles after GC")
        h.eq(h.tether.debug_count("results"), base.results, "results after GC")
        h.eq(h.tether.debug_count("contexts"), base.contexts, "contexts after GC")
    end},

    {"a context with a pending callback is not collected", function(h)
        local ctx = h.open()
        local got
        ctx:fetch{entity = "users", live = true, callback = function(_, status, _, r)
            got = status
            r:free()
        end}
        local base = h.tether.debug_count("contexts")
        local weak = setmetatable({ctx}, {__mode = "v"})
        ctx = nil
        for _ = 1, 4 do collectgarbage() end
        h.ok(weak[1], "still there: its live fetch can call back")
        h.eq(h.tether.debug_count("contexts"), base, "still open")
        weak[1]:close()
        h.eq(got, h.tether.E_CANCELLED, "the live fetch's final, at close")
    end},
}
