-- The binding's ffi.cdef is a hand-written subset of include/tether.h: every
-- declaration in it must be one of the header's, after whitespace
-- normalization, so that the two cannot drift apart unnoticed. The #defines
-- the binding copies as Lua numbers are checked too.

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

-- Comments out, whitespace collapsed, no space around punctuation.
local function normalize(s)
    s = s:gsub("%s+", " ")
    s = s:gsub("%s*([%(%)%{%}%*,;=%[%]])%s*", "%1")
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The top-level declarations of C text, each normalized.
local function declarations(text)
    text = text:gsub("/%*.-%*/", " ")
    text = text:gsub("//[^\n]*", " ")
    text = text:gsub("#ifdef __cplusplus.-#endif", " ")
    text = text:gsub("\n[ \t]*#[^\n]*", "\n")
    text = text:gsub("^[ \t]*#[^\n]*", "")
    text = text:gsub("TETHER_API", " ")
    local list, depth, start = {}, 0, 1
    for i = 1, #text do
        local c = text:sub(i, i)
        if c == "{" then depth = depth + 1
        elseif c == "}" then depth = depth - 1
        elseif c == ";" and depth == 0 then
            local d = normalize(text:sub(start, i))
            if d ~= ";" then list[#list + 1] = d end
            start = i + 1
        end
    end
    return list
end

return {
    {"every cdef declaration is the header's", function(h)
        local header = read(h.repo .. "/include/tether.h")
        local known = {}
        for _, d in ipairs(declarations(header)) do known[d] = true end
        h.ok(known["int tether_context_poll(tether_context*ctx,int timeout_ms,size_t*out_delivered);"],
             "the header parses into declarations")
        local decls = declarations(h.tether._cdef)
        h.ok(#decls > 50, "the cdef has its declarations (" .. #decls .. ")")
        local missing = {}
        for _, d in ipairs(decls) do
            if not known[d] then missing[#missing + 1] = "  " .. d end
        end
        if #missing > 0 then
            error("declarations in bindings/luajit/tether.lua that include/tether.h does not have "
                  .. "(copy them again from the header):\n" .. table.concat(missing, "\n"))
        end
    end},

    {"status codes and struct versions are the header's", function(h)
        local header = read(h.repo .. "/include/tether.h")
        local t, n = h.tether, 0
        for name, value in header:gmatch("#define TETHER_(E_[A-Z_]+)%s+(%-?%d+)") do
            h.eq(t[name], tonumber(value), "tether." .. name)
            h.eq(t.errstr(t[name]), "TETHER_" .. name, "errstr(tether." .. name .. ")")
            n = n + 1
        end
        h.ok(n >= 17, "the header's TETHER_E_* codes were read")
        h.eq(t.OK, tonumber(header:match("#define TETHER_OK%s+(%d+)")), "tether.OK")
        for macro, value in pairs(t._versions) do
            h.eq(value, tonumber(header:match("#define " .. macro .. "%s+(%d+)")), macro)
        end
        h.eq(t.version(), header:match('#define TETHER_VERSION "([^"]+)"'), "tether.version()")
    end},
}
