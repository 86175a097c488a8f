-- Options tables and the model: a misspelled option is an error in every entry point that
-- takes one (never silently ignored), and the vocabulary is the header's
-- (TETHER_POLICY_CACHE_ONLY: "cache_only", TETHER_MERGE_CLIENT_WINS: "client_wins", ...).

return {
    {"a misspelled fetch option is an error, and no fetch starts", function(h)
        local ctx = h.open()
        local calls, before = 0, h.tether._pending_count()
        local cb = function() calls = calls + 1 end
        local err = h.raises(h.tether.E_MISUSE, function()
            ctx:fetch{entity = "changes", wehre = "Status == 'pending'", callback = cb}
        end, "fetch{wehre=}")
        h.ok(err.message:find("wehre", 1, true) and err.message:find("did you mean where", 1, true),
             "the message names it and the option meant: " .. err.message)
        err = h.raises(h.tether.E_MISUSE, function()
            ctx:fetch_wait{entity = "changes", wehre = "Status == 'pending'"}
        end, "fetch_wait{wehre=}")
        h.ok(err.message:find("did you mean where", 1, true), err.message)
        h.raises(h.tether.E_MISUSE, function() ctx:fetch_wait{entity = "changes", timeout = 100} end,
                 "fetch_wait{timeout=} (timeout_ms)")
        h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = "changes", [1] = "x"} end, "a list entry")
        h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = "changes", policy = "cache"} end,
                 "the shell's old policy word")
        err = h.raises(h.tether.E_MISUSE, function() ctx:fetch{entity = "changes", result = "cuont"} end,
                       "a misspelled result type")
        h.ok(err.message:find("did you mean count", 1, true), err.message)
        ctx:poll(200)
        h.eq(calls, 0, "callbacks")
        h.eq(h.tether._pending_count(), before, "callbacks the binding still expects")
    end},

    {"a misspelled open or save option is an error", function(h)
        local err = h.raises(h.tether.E_MISUSE, function()
            h.tether.open{url = h.url, bucket = h.bucket, store = h.store(), usernme = "test"}
        end, "open{usernme=}")
        h.ok(err.message:find("did you mean username", 1, true), err.message)
        local ctx = h.open()
        h.raises(h.tether.E_MISUSE, function() ctx:save{marge = "client_wins"} end, "save{marge=}")
        h.raises(h.tether.E_MISUSE, function() ctx:save{merge = "client"} end, "the shell's old merge word")
        h.raises(h.tether.E_MISUSE, function() ctx:save_wait{timeout = 100} end, "save_wait{timeout=}")
        h.eq(ctx:save_wait{timeout_ms = 10000, merge = "report"}, 0, "nothing to save")
    end},

    {"entities() gives each attribute's allowed values (the spec's enum) as JSON", function(h)
        local ctx = h.open()
        ctx:fetch_wait{entity = "jobs", limit = 1}
        local allowed = {}
        for _, e in ipairs(ctx:entities()) do
            for _, a in ipairs(e.attributes) do allowed[e.name .. "." .. a.name] = a.allowed end
        end
        h.eq(allowed["jobs.Status"], '["open","closed","suspended"]', "jobs.Status")
        h.eq(allowed["jobs.User"], nil, "jobs.User: any text")
    end},

    {"every policy and result type by the header's name", function(h)
        local ctx = h.open()
        local counts = {}
        for _, policy in ipairs{"cache_only", "cache_then_server", "server_only", "cache_else_server"} do
            local _, final = ctx:fetch_wait{entity = "jobs", policy = policy, result = "count"}
            counts[#counts + 1] = policy .. "=" .. final:count()
        end
        -- cache_only first, on an empty store: nothing; the rest reach the server.
        h.eq(table.concat(counts, " "), "cache_only=0 cache_then_server=60 server_only=60 cache_else_server=60",
             "counts")
        for _, result in ipairs{"objects", "ids", "count", "values"} do
            local _, final = ctx:fetch_wait{entity = "jobs", result = result, policy = "cache_only",
                                            properties = result == "values" and "Status" or nil}
            h.eq(final:type(), result, "result " .. result)
        end
    end},

    {"save{merge = 'client_wins'} writes over a change another client made", function(h)
        local ctx = h.open()
        local _, final = ctx:fetch_wait{entity = "jobs", where = "Job == 'job000007'"}
        h.eq(final:count(), 1, "job000007")
        local job = final:object(1)
        h.patch("jobs", "job000007", '{"Description": "from the server"}')
        job:set("Description", "from lua, client wins")
        local task = ctx:save{merge = "client_wins"}
        h.ok(ctx:wait(function() return task.done end, 10000), "save done")
        h.eq(task.status, 0, "save status: " .. tostring(task.message))
        local status, body = h.kinto("GET", "/buckets/" .. h.bucket .. "/collections/jobs/records/job000007")
        h.eq(status, 200, "GET")
        h.ok(body:find('"Description":"from lua, client wins"', 1, true), "the client's value won: " .. body)
    end},
}
