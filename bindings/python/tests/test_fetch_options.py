"""Fetch options version 3: ctx.query(..., offset=..., server_query=...)
against the real Kinto.

`offset` skips results in sort order, before `limit`, on the cache and the
server alike: every answer is checked exactly, in both phases of a
cache-then-server fetch (CACHED from the cache, filled by a first unfiltered
fetch; FINAL from the server) and with the server-only and cache-only
policies. `server_query` is sent as given for the server phase: the FINAL
answer is the server's (in the sort asked, with offset and limit), while the
predicate still answers from the cache. Bad values raise InvalidError at the
start, bad Python types TypeError, and then no callback runs. An offset or
limit out of range is refused by tether.Query when it is built (ValueError),
before the library is asked.
"""

import asyncio
import time

import pytest

import tether
from conftest import ranks, wait_until

N = 130   # items i000..i129, Rank i, Title "item i": more than two pages of 50

SCHEMA = {
    "type": "object",
    "properties": {
        "Rank": {"type": "integer"},
        "Title": {"type": "string"},
    },
    "required": ["Rank"],
}


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA)
    kinto.put_records(bucket, "items",
                      [("i%03d" % i, {"Rank": i, "Title": "item %d" % i}) for i in range(N)])
    return bucket


@pytest.fixture(scope="module")
def items_total():
    return N


def both(ctx, entity, **kw):
    """(the cache's first answer or None when the policy gives none, the final
    answer) of ctx.query(entity, **kw).all(), the first taken by on_cached;
    limit 0: none."""
    if kw.get("limit") == 0:
        kw["limit"] = None
    cached = []
    final = ctx.query(entity, on_cached=cached.append, **kw).all()
    assert len(cached) <= 1
    return (cached[0] if cached else None), final


def run_async(ctx, entity, **kw):
    """AsyncContext(ctx).query(entity, **kw).all(), awaited."""
    async def go():
        return await tether.AsyncContext(ctx).query(entity, **kw).all()
    return asyncio.run(go())


def every_policy(ctx, expected_cached, expected_final, **kw):
    """Both phases of cache-then-server, then server-only (the server's
    answer) and cache-only (the cache's)."""
    what = repr(kw) if len(repr(kw)) < 300 else repr(kw)[:300] + "..."
    cached, final = both(ctx, "items", **kw)
    assert ranks(cached) == expected_cached, "CACHED (the cache) for " + what
    assert ranks(final) == expected_final, "FINAL (the server) for " + what
    none, only = both(ctx, "items", policy="server_only", **kw)
    assert none is None and ranks(only) == expected_final, "server_only for " + what
    none, only = both(ctx, "items", policy="cache_only", **kw)
    assert none is None and ranks(only) == expected_cached, "cache_only for " + what


def check(ctx, expected, **kw):
    every_policy(ctx, expected, expected, **kw)


def live_tasks():
    """Live tasks once the earlier fetches' tasks are freed (just after their
    FINAL callback returns)."""
    wait_until(lambda: tether.debug_counts()["tasks"] == 0, timeout=2)
    return tether.debug_counts()["tasks"]


def nothing_started(ctx, rec, tasks_before):
    time.sleep(0.1)
    assert rec.calls == [], "a callback ran"
    assert ctx.pending == 0 and tether.debug_counts()["tasks"] <= tasks_before


# ------------------------------------------------------------------ offset

ENDS_7 = [i for i in range(N) if i % 10 == 7]        # 7, 17, ..., 127

OFFSET_CASES = [
    # where, args, sort, limit, offset, expected ranks
    ("Rank < $1", (5,), "Rank", 0, 3, [3, 4]),                           # without limit
    ("Rank < $1", (10,), "Rank", 4, 3, [3, 4, 5, 6]),                    # with limit
    ("Rank < $1", (10,), "-Rank", 4, 3, [6, 5, 4, 3]),
    ("Rank < $1", (5,), "Rank", 0, 0, [0, 1, 2, 3, 4]),                  # 0: nothing skipped
    # no predicate, across the server's pages of 50
    (None, (), "Rank", 5, 48, [48, 49, 50, 51, 52]),
    (None, (), "Rank", 0, 120, list(range(120, N))),
    (None, (), "-Rank", 3, 100, [29, 28, 27]),
    (None, (), "Rank", 2, 99, [99, 100]),
    # a test the server cannot make (ENDSWITH): fetched broadly, filtered here
    ("Title ENDSWITH $1", ("7",), "Rank", 2, 1, [17, 27]),
    ("Title ENDSWITH $1", ("7",), "Rank", 0, 10, [107, 117, 127]),
    ("Title ENDSWITH $1", ("7",), "Rank", 4, 6, [67, 77, 87, 97]),
    ("Title ENDSWITH $1", ("9",), "-Rank", 4, 5, [79, 69, 59, 49]),
    # a filter the server makes and one it cannot
    ("Title ENDSWITH $1 AND Rank > $2", ("3", 60), "-Rank", 3, 2, [103, 93, 83]),
]

# Offsets at or past the end: empty, in both phases.
PAST_END = [
    ("Rank < $1", (5,), "Rank", 0, 9),
    ("Rank < $1", (5,), "Rank", 0, 5),                  # exactly the count
    ("Rank < $1", (5,), "Rank", 3, 5),
    (None, (), "Rank", 0, N),
    (None, (), "-Rank", 10, 10000),
    ("Title ENDSWITH $1", ("7",), "Rank", 0, len(ENDS_7)),
    (None, (), "Rank", 0, 2 ** 31 - 1),                 # the largest allowed
]


@pytest.mark.parametrize("where,args,sort,limit,offset,expected", OFFSET_CASES,
                         ids=["%d:%s+%d" % (i, c[0], c[4]) for i, c in enumerate(OFFSET_CASES)])
def test_offset_answers_exactly_in_both_phases(warm, where, args, sort, limit, offset, expected):
    check(warm, expected, where=where, args=args, sort=sort, limit=limit, offset=offset)


@pytest.mark.parametrize("where,args,sort,limit,offset", PAST_END,
                         ids=["%d:%s+%d" % (i, c[0], c[4]) for i, c in enumerate(PAST_END)])
def test_offset_past_the_end_is_empty(warm, where, args, sort, limit, offset):
    check(warm, [], where=where, args=args, sort=sort, limit=limit, offset=offset)


def test_offset_on_a_cold_cache(ctx):
    """CACHED has nothing; FINAL is the server's page; the cache then answers
    alike."""
    cached, final = both(ctx, "items", where="Title ENDSWITH $1", args=("7",), sort="-Rank",
                                   limit=3, offset=2)
    assert cached == [] and ranks(final) == [107, 97, 87]
    only = ctx.query("items", where="Title ENDSWITH $1", args=("7",), sort="-Rank",
                             limit=3, offset=2, policy="cache_only").all()
    assert ranks(only) == [107, 97, 87]


def test_offset_pages_through_everything(warm):
    """Consecutive pages of 40 cover every record once, in order."""
    got = []
    for offset in range(0, N + 40, 40):
        cached, final = both(warm, "items", sort="-Rank", limit=40, offset=offset)
        assert ranks(cached) == ranks(final)
        got += ranks(final)
    assert got == list(range(N - 1, -1, -1))


def test_offset_in_async_query_and_poll_mode(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    cached, final = both(ctx, "items", where="Rank < $1", args=(10,), sort="Rank",
                                   limit=4, offset=3)
    assert cached == [] and ranks(final) == [3, 4, 5, 6]
    objs = run_async(ctx, "items", where="Rank < $1", args=(10,), sort="-Rank", offset=8)
    assert ranks(objs) == [1, 0]


@pytest.mark.parametrize("offset", [-1, -2 ** 31, -2 ** 63, 2 ** 31, 2 ** 63 - 1])
def test_offset_out_of_range_raises_value_error_before_any_callback(warm, recorder, offset):
    # tether.Query judges the range (0 to 2**31-1, the library's) when built.
    rec = recorder()
    before = live_tasks()
    with pytest.raises(ValueError, match="offset must be between 0 and 2147483647"):
        warm.query("items", offset=offset).start(callback=rec)
    with pytest.raises(ValueError, match="offset"):
        warm.query("items", where="Rank < $1", args=(5,), offset=offset).all()
    with pytest.raises(ValueError, match="offset"):
        tether.Query("items").offset(offset)
    with pytest.raises(ValueError, match="offset"):
        run_async(warm, "items", offset=offset)
    nothing_started(warm, rec, before)


@pytest.mark.parametrize("bad", [True, False, 1.0, "3", b"3", None, [1]],
                         ids=lambda b: "%s:%r" % (type(b).__name__, b))
def test_offset_of_another_type_raises_type_error(warm, recorder, bad):
    rec = recorder()
    before = live_tasks()
    with pytest.raises(TypeError, match="offset"):
        warm.query("items", offset=bad).start(callback=rec)
    with pytest.raises(TypeError, match="offset"):
        warm.query("items", offset=bad).all()
    nothing_started(warm, rec, before)


def test_offset_beyond_64_bits_raises_before_the_call(warm):
    for big in (2 ** 63, 2 ** 64, -2 ** 63 - 1):    # ctypes would wrap 2**64 to 0
        with pytest.raises(ValueError, match="offset"):
            warm.query("items", offset=big).start()
    assert warm.pending == 0


def test_limit_beyond_64_bits_raises_before_the_call(warm):
    for big in (2 ** 63, 2 ** 64, 0, -1):    # 2**64 would wrap to 0: no limit at all
        with pytest.raises(ValueError, match="limit"):
            warm.query("items", limit=big).start()
    assert warm.pending == 0


def test_offset_subclasses_of_int(warm):
    import enum

    class Skip(enum.IntEnum):
        THREE = 3

    check(warm, [3, 4], where="Rank < $1", args=(5,), sort="Rank", offset=Skip.THREE)


# ------------------------------------------------------------------ server_query

def test_server_query_asks_the_server_and_the_predicate_the_cache(warm):
    """As ContextTests.testAServerQueryAsksTheServerAndThePredicateTheCache."""
    every_policy(warm, [2], [3, 2, 1], where="Rank == 2", server_query="in_Rank=1,2,3", sort="-Rank")
    every_policy(warm, [2], [1, 2, 3], where="Rank == $1", args=(2,), server_query="in_Rank=1,2,3",
                 sort="Rank")
    with pytest.raises(TypeError, match="server_query"):     # a Query takes str only
        warm.query("items", server_query=b"in_Rank=1,2,3")
    # nothing removed from the cache
    every = warm.query("items", sort="Rank", policy="cache_only").all()
    assert ranks(every) == list(range(N))


def test_server_query_without_a_predicate(warm):
    """No predicate: the cache answers everything (with sort, offset, limit),
    the server its query."""
    every_policy(warm, [0, 1, 2], [7, 8], server_query="in_Rank=7,8", sort="Rank", limit=3)
    every_policy(warm, [129, 128, 127, 126], [129, 128, 127, 126], server_query="gt_Rank=125",
                 sort="-Rank", limit=4)
    every_policy(warm, list(range(N - 3, -1, -1)), [127, 126], server_query="gt_Rank=125",
                 sort="-Rank", offset=2)


SERVER_CASES = [
    # server_query, where, args, sort, limit, offset, CACHED, FINAL
    ("in_Rank=1,2,3,4,5", "Rank >= $1", (100,), "Rank", 2, 1, [101, 102], [2, 3]),
    ("lt_Rank=10", "Rank < $1", (10,), "-Rank", 3, 2, [7, 6, 5], [7, 6, 5]),
    ("lt_Rank=10", "Rank < $1", (10,), "Rank", 0, 8, [8, 9], [8, 9]),
    ("lt_Rank=10", "Rank < $1", (10,), "Rank", 0, 10, [], []),       # past the end
    ("gt_Rank=120", "Rank == $1", (5,), "-Rank", 0, 7, [], [122, 121]),
    ("min_Rank=40&max_Rank=60", None, (), "Rank", 3, 9, [9, 10, 11], [49, 50, 51]),
    ("gt_Rank=10", "Rank < $1", (3,), "Rank", 5, 60, [], [71, 72, 73, 74, 75]),  # past a page
    ("gt_Rank=10", "Rank < $1", (3,), "-Rank", 0, 115, [], [14, 13, 12, 11]),
    ("Title=item%207", "Rank == $1", (8,), "Rank", 0, 0, [8], [7]),  # percent-encoded, as given
    ("in_Rank=1,2,3", "FALSEPREDICATE", (), "Rank", 0, 0, [], [1, 2, 3]),
    ("in_Rank=1000,2000", "TRUEPREDICATE", (), "-Rank", 2, 0, [129, 128], []),
    ("like_Title=item%2012*", "Rank == 3", (), "-Rank", 0, 0, [3], [129, 128, 127, 126, 125, 124,
                                                                    123, 122, 121, 120, 12]),
]


@pytest.mark.parametrize("query,where,args,sort,limit,offset,cached,final", SERVER_CASES,
                         ids=["%d:%s" % (i, c[0]) for i, c in enumerate(SERVER_CASES)])
def test_server_query_answers(warm, query, where, args, sort, limit, offset, cached, final):
    every_policy(warm, cached, final, server_query=query, where=where, args=args, sort=sort,
                 limit=limit, offset=offset)


def test_server_query_on_a_cold_cache(ctx):
    cached, final = both(ctx, "items", where="Rank == $1", args=(2,), server_query="in_Rank=1,2,3",
                                   sort="-Rank")
    assert cached == [] and ranks(final) == [3, 2, 1]
    # What the server answered is cached now (and only that).
    only = ctx.query("items", sort="Rank", policy="cache_only").all()
    assert ranks(only) == [1, 2, 3]


def test_server_query_with_cache_else_server(warm):
    """The cache's answer is the predicate's; the server is asked (with the
    query) only when the cache has nothing."""
    none, got = both(warm, "items", where="Rank == $1", args=(2,), server_query="in_Rank=1,2,3",
                                sort="Rank", policy="cache_else_server")
    assert none is None and ranks(got) == [2]
    none, got = both(warm, "items", where="Rank == $1", args=(5000,),
                                server_query="in_Rank=1,2,3", sort="Rank", policy="cache_else_server")
    assert none is None and ranks(got) == [1, 2, 3]


def test_server_query_in_async_query_and_poll_mode(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    objs = run_async(ctx, "items", where="Rank == $1", args=(2,), sort="-Rank",
                     server_query="in_Rank=4,5,6", offset=1)
    assert ranks(objs) == [5, 4]
    cached, final = both(ctx, "items", where="Rank == $1", args=(5,), sort="-Rank",
                                   server_query="in_Rank=4,5,6")
    assert ranks(cached) == [5] and ranks(final) == [6, 5, 4]


def long_query(length):
    """A valid query of exactly `length` bytes: in_Rank=1,2,3,5000,... ."""
    q = "in_Rank=1,2,3"
    while len(q) + 5 <= length - 4:
        q += ",5000"
    q += "," + "9" * (length - len(q) - 1)      # 999 or longer: no such Rank
    assert len(q) == length
    return q


def test_server_query_of_8000_bytes_is_accepted(warm):
    q = long_query(8000)
    every_policy(warm, [2], [1, 2, 3], where="Rank == 2", server_query=q, sort="Rank")


BAD_QUERIES = [
    "",
    "a b",
    "in_Rank=1,2 ",
    "x=1#frag",
    "#",
    "caf\u00e9=1",               # str, not ASCII: sent as UTF-8
    "Title=\u00eetem",
    "a=\x01",
    "a=\tb",
    "a=b\n",
    "a=b\x7f",
    "Rank=\u2028",
    long_query(8001),
    long_query(20000),
]


@pytest.mark.parametrize("query", BAD_QUERIES,
                         ids=lambda q: repr(q) if len(q) < 30 else "%d bytes" % len(q))
def test_bad_server_queries_raise_invalid_before_any_callback(warm, recorder, query):
    rec = recorder()
    before = live_tasks()
    with pytest.raises(tether.InvalidError) as e:
        warm.query("items", server_query=query).start(callback=rec)
    assert e.value.status == tether.E_INVALID and e.value.message
    for policy in ("cache_only", "server_only", "cache_else_server"):
        with pytest.raises(tether.InvalidError):
            warm.query("items", where="Rank == 2", server_query=query, policy=policy).start(callback=rec)
    with pytest.raises(tether.InvalidError):
        warm.query("items", server_query=query).all()
    with pytest.raises(tether.InvalidError):
        run_async(warm, "items", server_query=query)
    nothing_started(warm, rec, before)


@pytest.mark.parametrize("bad", [5, 1.5, True, ["in_Rank=1"], b"in_Rank=1", b"caf\xe9=1",
                                 bytearray(b"in_Rank=1"), memoryview(b"in_Rank=1"), object()],
                         ids=lambda b: type(b).__name__)
def test_server_query_of_another_type_raises_type_error(warm, recorder, bad):
    rec = recorder()
    before = live_tasks()
    with pytest.raises(TypeError, match="server_query"):
        warm.query("items", server_query=bad).start(callback=rec)
    with pytest.raises(TypeError, match="server_query"):
        warm.query("items", server_query=bad).all()
    nothing_started(warm, rec, before)


def test_server_query_holding_nul_raises_value_error(warm):
    for q in ("in_Rank=1\x002", "\x00"):
        with pytest.raises(ValueError, match="server_query"):
            warm.query("items", server_query=q).start()
    with pytest.raises(ValueError):
        warm.query("items", server_query="\ud800").start()      # not encodable
    assert warm.pending == 0


def test_errors_of_other_options_still_come_first_or_alike(warm):
    """A bad predicate with a good query, and a good predicate with a bad
    offset, are both refused."""
    with pytest.raises(tether.InvalidError, match="column"):
        warm.query("items", where="Rank == 'x'", server_query="in_Rank=1").start()
    with pytest.raises(ValueError, match="offset"):
        warm.query("items", where="Rank == 1", server_query="in_Rank=1", offset=-1).start()
    with pytest.raises(tether.NotFoundError):
        warm.query("nope", server_query="in_Rank=1").start()
    assert warm.pending == 0


# ------------------------------------------------------------------ the cache

def test_server_query_keeps_other_records(kinto, bucket, kinto_url, tmp_path, open_ctx):
    """A server query's listing is not the whole collection: the records it
    does not answer stay cached, even one the server no longer has; the ones
    it answers are updated."""
    kinto.create_collection(bucket, "keep", {"type": "object",
                                             "properties": {"N": {"type": "integer"},
                                                            "S": {"type": "string"}}})
    kinto.put_records(bucket, "keep", [("k%d" % i, {"N": i, "S": "v1"}) for i in range(10)])
    ctx = open_ctx(kinto_url, bucket, tmp_path / "keep.db")
    every = ctx.query("keep", sort="N").all()
    assert len(every) == 10
    kinto.delete_record(bucket, "keep", "k9")
    kinto.patch_record(bucket, "keep", "k6", {"S": "v2"})

    def ids(objs):
        return [o.id for o in objs]

    cached, final = both(ctx, "keep", where="N < $1", args=(2,), server_query="gt_N=4",
                                   sort="N")
    assert ids(cached) == ["k0", "k1"] and ids(final) == ["k5", "k6", "k7", "k8"]
    final = ctx.query("keep", server_query="in_N=3,9", policy="server_only", sort="N").all()
    assert ids(final) == ["k3"]
    final = ctx.query("keep", server_query="gt_N=4", policy="server_only", sort="-N",
                              offset=1, limit=2).all()
    assert ids(final) == ["k7", "k6"]

    cached_all = ctx.query("keep", sort="N", policy="cache_only").all()
    assert ids(cached_all) == ["k%d" % i for i in range(10)]
    assert ctx.object("keep", "k9").peek("N") == 9
    assert ctx.object("keep", "k6").peek("S") == "v2"
    assert ctx.object("keep", "k5").peek("S") == "v1"


def test_offset_listing_keeps_other_records(warm):
    final = warm.query("items", sort="Rank", offset=125, policy="server_only").all()
    assert ranks(final) == [125, 126, 127, 128, 129]
    final = warm.query("items", where="Title ENDSWITH $1", args=("3",), sort="Rank",
                               offset=11, policy="server_only").all()
    assert ranks(final) == [113, 123]
    every = warm.query("items", sort="Rank", policy="cache_only").all()
    assert ranks(every) == list(range(N))
