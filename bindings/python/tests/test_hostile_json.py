"""Hostile JSON from the server, against the real Kinto through
scripts/faultproxy.py, which rewrites the bytes of its answers (Kinto itself
turns integers beyond 2^53 into doubles and never sends broken JSON).

The library's JSON reader must keep what other JSON readers refuse or bend
(integers beyond 64 bits, numbers beyond a double, U+0000 in keys and
strings, invalid UTF-8, lone surrogates), store the rest of the page, and
refuse broken structure or absurd nesting with a clean TETHER_E_PROTOCOL that
says where, leaving the store as it was.

Each test seeds its own collection, opens a context through the proxy with no
rewriting (so the model is read untouched), fills the store with one fetch,
then turns the rewrites on and fetches again (server_only). Each fetch is a
listing in Kinto's own terms (LIST_ALL), so every record comes every time: a
plain fetch would sync, and after the first ask only for what changed.
"""

import ctypes
import json
import urllib.request
import uuid

import pytest

import tether
from tether import _lib

SCHEMA = {"type": "object", "properties": {"Title": {"type": "string"},
                                           "Rank": {"type": "integer"},
                                           "Score": {"type": "number"}}}
PLAIN = 5              # r01..r05, never rewritten
LIST_ALL = "_sort=id"  # the server query of every server fetch here
INT64_MAX = 2 ** 63 - 1


def plain(i):
    return {"Title": "t%d" % i, "Rank": i, "Score": i + 0.5}


# Records whose bytes the tests rewrite, each identified by a unique value.
MARKED = {
    "rbig": {"Title": "big", "Rank": 777001, "Score": 1.5, "Marker": "k"},
    "rneg": {"Title": "neg", "Rank": 777002, "Score": 2.5},
    "rmax": {"Title": "max", "Rank": 777003, "Score": 3.5},
    "rover": {"Title": "over", "Rank": 777004, "Score": 4.5},
    "rmin": {"Title": "min", "Rank": 777005, "Score": 5.5},
    "rscore": {"Title": "score", "Rank": 6, "Score": 777.25},
    "rtext": {"Title": "plain", "Rank": 7, "Score": 7.5},
    "resc": {"Title": "two\nlines", "Rank": 8, "Score": 8.5},
}
SEED = dict({"r%02d" % i: plain(i) for i in range(1, PLAIN + 1)}, **MARKED)


@pytest.fixture
def coll(kinto, bucket):
    """A fresh collection, seeded; returns (name, {id: record as Kinto stored it})."""
    name = "h" + uuid.uuid4().hex[:12]
    kinto.create_collection(bucket, name, SCHEMA)
    stored = {rid: kinto.put_record(bucket, name, rid, data) for rid, data in SEED.items()}
    return name, stored


def open_filled(open_ctx, faultproxy, bucket, coll_name, store):
    """A context through the proxy (no rewriting) whose store holds every record."""
    ctx = open_ctx(faultproxy.url, bucket, store)
    objs = ctx.query(coll_name, policy="server_only", server_query=LIST_ALL).all()
    assert sorted(o.id for o in objs) == sorted(SEED)
    return ctx


def rewrite(faultproxy, pairs=(), hex_pairs=()):
    st = faultproxy.set("pass", rewrite=[list(p) for p in pairs],
                        rewrite_hex=[[a.hex(), b.hex()] for a, b in hex_pairs], reset_log=True)
    assert len(st["rewrite"]) == len(pairs) and len(st["rewrite_hex"]) == len(hex_pairs)


def raw_peek(obj, key):
    """(type name, integer, text bytes or None) of a peek, straight from the C
    value: the binding parses JSON values with Python's json, which turns
    1e400 into inf."""
    v = _lib.tether_value()
    try:
        _lib.tether_object_peek(obj._h, key.encode("utf-8"), ctypes.byref(v))
        text = ctypes.string_at(v.text, v.length) if v.text else None
        return _lib.TYPE_NAMES[v.type], v.integer, text
    finally:
        _lib.tether_value_free(ctypes.byref(v))


def fields(obj):
    return {k: obj.peek(k) for k in ("Title", "Rank", "Score")}


def assert_plain_intact(ctx, coll_name, skip=()):
    """Every record not in `skip` holds exactly its seeded values."""
    for rid, data in SEED.items():
        if rid in skip:
            continue
        o = ctx.object(coll_name, rid)
        assert fields(o) == {k: data[k] for k in ("Title", "Rank", "Score")}, rid


def listing_as_sent(kinto, faultproxy):
    """The body of the last records listing the library asked for, as the
    proxy (with its rewrites) answers it: the same request, made again."""
    targets = [l.split(" ", 1)[1] for l in faultproxy.log() if "/records" in l]
    assert targets, faultproxy.log()
    req = urllib.request.Request(faultproxy.base + targets[-1], headers=kinto._headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def assert_store_unchanged(kinto, ctx, faultproxy, bucket, coll_name, changed_id, new_title):
    """After a refused page: the cache holds every record as before (not the
    server's change to `changed_id`); once the answers are clean again the
    change comes in, so nothing was lost or marked as seen."""
    objs = ctx.query(coll_name, policy="cache_only").all()
    assert sorted(o.id for o in objs) == sorted(SEED)
    assert_plain_intact(ctx, coll_name)
    faultproxy.set("pass")
    objs = ctx.query(coll_name, policy="server_only", server_query=LIST_ALL).all()
    assert sorted(o.id for o in objs) == sorted(SEED)
    assert ctx.object(coll_name, changed_id).peek("Title") == new_title
    assert_plain_intact(ctx, coll_name, skip={changed_id})


# ------------------------------------------------------------------ big integers

BIG = {  # record -> (rewritten Rank text, expected type)
    "rbig": ("18446744073709551616", "json"),            # 2^64
    "rneg": ("-99999999999999999999", "json"),
    "rmax": (str(INT64_MAX), "integer"),                  # the largest that fits
    "rover": (str(INT64_MAX + 1), "json"),                # one past it
    "rmin": (str(-INT64_MAX - 1), "integer"),            # the smallest that fits
}


def check_big(ctx, coll_name):
    for rid, (text, typ) in BIG.items():
        o = ctx.object(coll_name, rid)
        t, integer, raw = raw_peek(o, "Rank")
        if typ == "integer":
            assert (t, integer, raw) == ("integer", int(text), None), rid
        else:
            # Kept as the server wrote it: serialized JSON, every digit.
            assert (t, raw) == ("json", text.encode("ascii")), rid
        assert o.peek("Rank") == int(text), rid   # the binding: exact Python int
        assert o.peek("Title") == SEED[rid]["Title"] and o.peek("Score") == SEED[rid]["Score"]
    assert_plain_intact(ctx, coll_name, skip=set(BIG))


def test_integers_beyond_64_bits_are_kept_exactly(bucket, coll, tmp_path, open_ctx, faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    rewrite(faultproxy, [('"Rank":%d' % SEED[rid]["Rank"], '"Rank":' + text)
                         for rid, (text, _) in BIG.items()])
    objs = ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert sorted(o.id for o in objs) == sorted(SEED)
    assert faultproxy.state()["rewritten"] == len(BIG), "each marker rewritten once"
    check_big(ctx, name)
    # The entity still says Rank is an integer: the value's type differs.
    assert ctx.entity(name).attribute("Rank").type == "integer"

    ctx.close()
    faultproxy.stop()   # same URL, nobody listening: opens offline from the store
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    assert offline.online is False
    check_big(offline, name)


# ------------------------------------------------------------------ U+0000

def test_key_holding_nul_is_kept_and_the_page_stored(kinto, bucket, coll, tmp_path, open_ctx,
                                                     faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    new_title = "CHANGED-" + uuid.uuid4().hex[:6]
    kinto.patch_record(bucket, name, "r02", {"Title": new_title})
    # The JSON escape \u0000 (six characters) inside the key, and a key made
    # only of it.
    rewrite(faultproxy, [('"Marker":"k"', '"Mar\\u0000ker":"k","\\u0000":1')])
    objs = ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert faultproxy.state()["rewritten"] == 1
    assert sorted(o.id for o in objs) == sorted(SEED)
    assert ctx.object(name, "r02").peek("Title") == new_title    # the page was stored
    assert_plain_intact(ctx, name, skip={"r02"})
    ctx.close()
    faultproxy.stop()
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    assert offline.online is False
    assert offline.object(name, "r02").peek("Title") == new_title
    assert_plain_intact(offline, name, skip={"r02"})


def test_nul_inside_a_string_value_is_kept(bucket, coll, tmp_path, open_ctx, faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    rewrite(faultproxy, [('"Title":"plain"', '"Title":"pl\\u0000ain"')])
    ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert faultproxy.state()["rewritten"] == 1
    o = ctx.object(name, "rtext")
    assert raw_peek(o, "Title") == ("text", 0, b"pl\x00ain")
    assert o.peek("Title") == "pl\x00ain"
    assert_plain_intact(ctx, name, skip={"rtext"})
    ctx.close()
    faultproxy.stop()
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    assert raw_peek(offline.object(name, "rtext"), "Title") == ("text", 0, b"pl\x00ain")


# ------------------------------------------------------------------ beyond a double

def test_number_beyond_a_double_is_kept_as_its_text(bucket, coll, tmp_path, open_ctx,
                                                    faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    assert ctx.entity(name).attribute("Score").type == "real"
    rewrite(faultproxy, [('"Score":777.25', '"Score":1e400')])
    objs = ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert faultproxy.state()["rewritten"] == 1
    assert sorted(o.id for o in objs) == sorted(SEED)
    o = ctx.object(name, "rscore")
    assert raw_peek(o, "Score") == ("json", 0, b"1e400")      # not inf, not null
    assert o.peek("Title") == "score" and o.peek("Rank") == 6
    assert_plain_intact(ctx, name, skip={"rscore"})
    ctx.close()
    faultproxy.stop()
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    assert raw_peek(offline.object(name, "rscore"), "Score") == ("json", 0, b"1e400")


# ------------------------------------------------------------------ broken structure

def test_structure_that_is_not_json_fails_where_and_keeps_the_store(
        kinto, bucket, coll, tmp_path, open_ctx, faultproxy):
    name, stored = coll
    ctx = open_filled(open_ctx, faultproxy, bucket, name, tmp_path / "s.db")
    new_title = "CHANGED-" + uuid.uuid4().hex[:6]
    kinto.patch_record(bucket, name, "r03", {"Title": new_title})
    lm = stored["rbig"]["last_modified"]
    # The closing brace of rbig's object, gone.
    rewrite(faultproxy, [('"last_modified":%d}' % lm, '"last_modified":%d' % lm)])
    with pytest.raises(tether.ProtocolError) as raised:
        ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    err = raised.value
    assert err.status == tether.E_PROTOCOL and err.name == "TETHER_E_PROTOCOL"
    body = listing_as_sent(kinto, faultproxy)
    assert body.isascii()
    with pytest.raises(json.JSONDecodeError) as py:
        json.loads(body)
    # Where a strict reader first fails (Python's json agrees on the offset).
    assert "at byte %d:" % py.value.pos in err.message, (err.message, py.value.msg)
    assert_store_unchanged(kinto, ctx, faultproxy, bucket, name, "r03", new_title)


# ------------------------------------------------------------------ deep nesting

DEPTH = 100_000
OUTER = 3        # the document's object, its "data" array, the record's object
LIMIT = 512


def test_deep_nesting_is_refused_cleanly(kinto, bucket, coll, tmp_path, open_ctx, faultproxy):
    name, _ = coll
    ctx = open_filled(open_ctx, faultproxy, bucket, name, tmp_path / "s.db")
    new_title = "CHANGED-" + uuid.uuid4().hex[:6]
    kinto.patch_record(bucket, name, "r04", {"Title": new_title})
    rewrite(faultproxy, [('"Rank":777001', '"Rank":' + "[" * DEPTH + "]" * DEPTH)])
    with pytest.raises(tether.ProtocolError) as raised:
        ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    err = raised.value
    assert "nested deeper than %d levels" % LIMIT in err.message, err.message
    # The first bracket past the limit: level LIMIT + 1 of the document.
    body = listing_as_sent(kinto, faultproxy)
    at = body.index(b'"Rank":[') + len(b'"Rank":') + (LIMIT - OUTER)
    assert "at byte %d:" % at in err.message, err.message
    assert_store_unchanged(kinto, ctx, faultproxy, bucket, name, "r04", new_title)


def test_nesting_within_the_limit_is_kept(bucket, coll, tmp_path, open_ctx, faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    deep = "[" * (LIMIT - OUTER) + "]" * (LIMIT - OUTER)    # exactly LIMIT levels in all
    rewrite(faultproxy, [('"Rank":777001', '"Rank":' + deep)])
    ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert faultproxy.state()["rewritten"] == 1
    assert raw_peek(ctx.object(name, "rbig"), "Rank") == ("json", 0, deep.encode())
    assert_plain_intact(ctx, name, skip={"rbig"})
    ctx.close()
    faultproxy.stop()
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    assert raw_peek(offline.object(name, "rbig"), "Rank") == ("json", 0, deep.encode())


# ------------------------------------------------------------------ invalid UTF-8

def test_invalid_utf8_becomes_replacement_characters(bucket, coll, tmp_path, open_ctx,
                                                     faultproxy):
    name, _ = coll
    store = tmp_path / "s.db"
    ctx = open_filled(open_ctx, faultproxy, bucket, name, store)
    bad = {
        # a string without escapes, and one with (the reader's two paths)
        "rtext": (b'"Title":"plain"', b'"Title":"pl\xff\xfeain"'),
        "resc": (b'"Title":"two\\nlines"', b'"Title":"two\\nli\xe2\x82nes\xc3"'),
    }
    # A lone surrogate escape, as JSON text.
    surrogate = ('"Title":"big"', '"Title":"b\\ud800ig"')
    rewrite(faultproxy, [surrogate], [pair for pair in bad.values()])
    objs = ctx.query(name, policy="server_only", server_query=LIST_ALL).all()
    assert faultproxy.state()["rewritten"] == 3
    assert sorted(o.id for o in objs) == sorted(SEED)
    expected = {
        "rtext": "pl\ufffd\ufffdain",
        "resc": "two\nli\ufffdnes\ufffd",     # a cut 3-byte sequence is one U+FFFD
        "rbig": "b\ufffdig",
    }
    # What a decoder that replaces errors makes of the bytes.
    assert expected["rtext"] == b"pl\xff\xfeain".decode("utf-8", "replace")
    assert expected["resc"] == b"two\nli\xe2\x82nes\xc3".decode("utf-8", "replace")

    def check(c):
        for rid, text in expected.items():
            o = c.object(name, rid)
            assert raw_peek(o, "Title") == ("text", 0, text.encode("utf-8")), rid
            assert o.peek("Rank") == SEED[rid]["Rank"]
        assert_plain_intact(c, name, skip=set(expected))

    check(ctx)
    ctx.close()
    faultproxy.stop()
    offline = open_ctx(faultproxy.url, bucket, store, timeout_ms=3000)
    check(offline)
