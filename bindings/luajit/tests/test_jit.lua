-- LuaJIT's rule for callbacks: a C call that calls back into Lua must not
-- be made from JIT-compiled code. See jit_poll_child.lua.

return {
    {"polling from a hot, compiled loop runs callbacks without a bad-callback panic", function(h)
        local cmd = "luajit " .. h.q(h.repo .. "/bindings/luajit/tests/jit_poll_child.lua") .. " " .. h.q(h.url)
            .. " " .. h.q(h.bucket) .. " " .. h.q(h.store()) .. " " .. h.q(h.auth_user) .. " "
            .. h.q(h.auth_password) .. " 2>&1"
        local p = io.popen(cmd)
        local out = p:read("*a")
        local ok, _, code = p:close()
        h.ok(ok == true or code == 0, "the child process ended well: " .. out)
        h.eq(out:match("callbacks (%d+ of %d+)"), "100 of 100", "callbacks delivered")
    end},
}
