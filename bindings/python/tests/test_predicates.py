"""Fetch predicates: ctx.query(..., where=..., args=...).start() against the real Kinto.

Every answer is checked exactly, object for object and in order, in both
phases of a cache-then-server fetch: CACHED from the cache (filled by a first,
unfiltered fetch) and FINAL from the server. Bad predicates fail at the start
with InvalidError naming the column; bad Python arguments fail with TypeError
before anything reaches the library.
"""

import asyncio
import time

import pytest

import tether
from conftest import answers, quiet_counts, ranks

N = 130   # items i000..i129, Rank i: more than two pages of the server's 50

SCHEMA = {
    "type": "object",
    "properties": {
        "Rank": {"type": "integer", "x-tether-code": 1},
        "Title": {"type": "string", "x-tether-code": 2},
        "Score": {"type": "number", "x-tether-code": 3},
        "Open": {"type": "boolean", "x-tether-code": 4},
        "Tags": {"type": "array", "items": {"type": "string"}, "x-tether-code": 5},
    },
    "required": ["Rank"],
}
# The same without Title, to store a record whose Title is not text.
SCHEMA_NO_TITLE = {"type": "object",
                   "properties": {k: v for k, v in SCHEMA["properties"].items() if k != "Title"}}

QUOTED = "it's \"quoted\" \\ $1 %_*? ''"
SPECIAL = {   # Rank 1001.., no Score, no Open
    "snul": {"Rank": 1001, "Title": "a\x00b"},
    "squote": {"Rank": 1002, "Title": QUOTED},
    "sfive": {"Rank": 1003, "Title": "5"},           # text that looks like a number
    # smisfit, Rank 1004: Title is the integer 5 (the server's record breaks
    # the spec): it counts as null
    "scaps": {"Rank": 1005, "Title": "Item 7"},
    "snull": {"Rank": 1006},                         # no Title
}
SPECIAL_RANKS = [1001, 1002, 1003, 1004, 1005, 1006]
TOTAL = N + len(SPECIAL_RANKS)


def item(i):
    return {"Rank": i, "Title": "item %d" % i, "Score": i / 2, "Open": i % 2 == 0, "Tags": ["t"]}


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA_NO_TITLE)
    kinto.put_record(bucket, "items", "smisfit", {"Rank": 1004, "Title": 5})
    kinto.create_collection(bucket, "items", SCHEMA)   # Kinto checks new writes only
    kinto.put_records(bucket, "items", [("i%03d" % i, item(i)) for i in range(N)]
                      + list(SPECIAL.items()))
    return bucket


@pytest.fixture(scope="module")
def items_total():
    return TOTAL


def both_phases(ctx, where, args=(), sort="Rank", limit=None):
    limit = limit or None   # the cases' 0: no limit
    """(ranks of the CACHED phase, ranks of the FINAL phase)."""
    cached, final = answers(ctx.query, "items", where=where, args=args, sort=sort, limit=limit)
    return ranks(cached), ranks(final)


def check(ctx, where, args, expected, sort="Rank", limit=None):
    limit = limit or None   # the cases' 0: no limit
    cached, final = both_phases(ctx, where, args, sort, limit)
    assert cached == expected, "CACHED (the cache) for %r %r" % (where, args)
    assert final == expected, "FINAL (the server) for %r %r" % (where, args)
    for policy in ("server_only", "cache_only"):
        none, only = answers(ctx.query, "items", where=where, args=args, sort=sort, limit=limit,
                                    policy=policy)
        assert none is None and ranks(only) == expected, "%s for %r %r" % (policy, where, args)


# ------------------------------------------------------------------ answers

CASES = [
    # where, args, sort, limit, expected ranks
    ("Rank >= $1 AND Rank < $2 AND Title ENDSWITH $3", (10, 20, "5"), "Rank", 0, [15]),
    ("Title CONTAINS $1", ("11",), "Rank", 3, [11, 110, 111]),
    # limit beyond a page, and a test the server cannot make (BEGINSWITH)
    ("Rank >= $1 AND Title BEGINSWITH $2", (10, "item"), "-Rank", 60, list(range(129, 69, -1))),
    ("Score > $1 AND Rank < $2", (63.9, 1000), "Rank", 0, [128, 129]),
    ("Score BETWEEN {$1, $2}", (1, 2.5), "-Rank", 0, [5, 4, 3, 2]),
    ("Open == $1 AND Rank < $2", (True, 6), "Rank", 0, [0, 2, 4]),
    ("Open == $1 AND Rank < $2", (False, 6), "-Rank", 0, [5, 3, 1]),
    ("Open == $1", (None,), "Rank", 0, SPECIAL_RANKS),
    # the misfit (an integer Title) counts as null, like the missing one
    ("Title == $1", (None,), "Rank", 0, [1004, 1006]),
    ("Title != nil AND Rank > 1000", (), "Rank", 0, [1001, 1002, 1003, 1005]),
    # `!=` a value is true for null
    ("Title != $1 AND Rank >= $2", ("item 3", 1000), "Rank", 0, SPECIAL_RANKS),
    ("#1 < $1 OR #1 > $2", (2, 1005), "-Rank", 0, [1006, 1, 0]),
    ("TRUEPREDICATE", (), "-Rank", 2, [1006, 1005]),
    ("FALSEPREDICATE", (), "Rank", 0, []),
]


@pytest.mark.parametrize("where,args,sort,limit,expected", CASES,
                         ids=["%d:%s" % (i, c[0]) for i, c in enumerate(CASES)])
def test_both_phases_answer_exactly(warm, where, args, sort, limit, expected):
    check(warm, where, args, expected, sort, limit)


def test_cold_cache_then_cache_only(ctx):
    """On an empty cache: CACHED has nothing, FINAL the server's exact answer,
    which the cache then answers alike."""
    cached, final = both_phases(ctx, "Title CONTAINS $1", ("12",), "-Rank", 5)
    assert cached == [] and final == [129, 128, 127, 126, 125]
    none, only = answers(ctx.query, "items", where="Title CONTAINS $1", args=("12",), sort="-Rank",
                                limit=5, policy="cache_only")
    assert ranks(only) == [129, 128, 127, 126, 125]


def test_case_insensitive(warm):
    check(warm, "Title ==[c] $1", ("ITEM 7",), [7, 1005])
    check(warm, "Title == 'item 7'", (), [7])
    check(warm, "Title == $1", ("ITEM 7",), [])
    check(warm, "Title BEGINSWITH[c] 'ITEM 12'", (), [12] + list(range(120, 130)))
    check(warm, "Title ==[cd] $1", ("ÎTEM 7",), [7, 1005])


def test_in(warm):
    check(warm, "Rank IN {3, 5, 200} OR Title == $1", ("item 8",), [3, 5, 8])
    check(warm, "Title IN {$1, $2, 'item 9'}", ("item 3", "item 2"), [2, 3, 9])
    check(warm, "Rank IN {$1}", (1003,), [1003])
    check(warm, "Title IN[c] {'ITEM 1', 'item 7'}", (), [1, 7, 1005])
    check(warm, "Rank IN {}", (), [])


def test_not(warm):
    check(warm, "NOT (Rank > 2)", (), [2, 1, 0], sort="-Rank")
    check(warm, "NOT Title BEGINSWITH $1", ("item",), SPECIAL_RANKS)
    check(warm, "!(Title == nil) AND Rank > $1", (1000,), [1001, 1002, 1003, 1005])
    check(warm, "NOT (Rank < $1 OR Rank > $2)", (3, 1000), list(range(3, N)))


def test_text_arguments_need_no_quoting(warm):
    check(warm, "Title == $1", (QUOTED,), [1002])
    check(warm, "Title CONTAINS $1", ("'",), [1002])
    check(warm, "Title CONTAINS $1", ("%_",), [1002])      # SQL's LIKE wildcards are text
    check(warm, "Title ENDSWITH $1", ("''",), [1002])
    check(warm, "Title BEGINSWITH $1", ("it's \"",), [1002])
    check(warm, "Title == $1", ("",), [])


NUL_CASES = [
    ("Title == $1", ("a\x00b",), [1001]),
    ("Title == $1", ("a",), []),
    ("Title CONTAINS $1", ("\x00",), [1001]),
    ("Title BEGINSWITH $1", ("a\x00",), [1001]),
    ("Title IN {$1, $2, 'item 9'}", ("a\x00b", "item 2"), [2, 9, 1001]),
    ("Title == $1 OR Title == $2", ("a\x00b", QUOTED), [1001, 1002]),
    ("Title == 'a\\0b'", (), [1001]),                 # the literal's escape for NUL
]


@pytest.mark.parametrize("where,args,expected", NUL_CASES, ids=[repr(c[1]) + c[0] for c in NUL_CASES])
def test_text_holding_nul(warm, where, args, expected):
    """A text argument may hold NUL (it is passed by length); the cache and
    the server answer alike."""
    none, only = answers(warm.query, "items", where=where, args=args, sort="Rank", policy="cache_only")
    assert ranks(only) == expected, "cache_only"
    cached, final = both_phases(warm, where, args)
    assert cached == expected, "CACHED"
    assert final == expected, "FINAL"


def test_text_that_looks_like_a_number_matches_only_text(warm):
    check(warm, "Title == $1", ("5",), [1003])              # not the misfit integer 5
    check(warm, "Title == '5'", (), [1003])
    check(warm, "Title IN {$1, '6'}", ("5",), [1003])
    check(warm, "Rank == $1", (5,), [5])
    # A real against an integer compares exactly (issue 21, case 8).
    check(warm, "Rank == $1", (5.5,), [])
    check(warm, "Rank < $1 AND Rank > 3", (5.5,), [4, 5])
    with pytest.raises(tether.InvalidError, match="column"):
        warm.query("items", where="Rank == $1", args=("5",)).start()
    with pytest.raises(tether.InvalidError, match="column"):
        warm.query("items", where="Title == $1", args=(5,)).start()
    with pytest.raises(tether.InvalidError, match="column"):
        warm.query("items", where="Title == 5").start()


# ------------------------------------------------------------------ errors

BAD = [
    # where, args, what the message says
    ("Rank ==", (), "column 8"),                      # bad syntax
    ("Rank == 1 Rank", (), "column 11"),
    ("(Rank == 1", (), "column 11"),
    ("Title == 'abc", (), "column 10"),
    ("Nope == 1", (), "column 1"),                    # unknown key
    ("#99 == 1", (), "column 1"),
    ("Rank == 'x'", (), "column 9"),                  # wrong type
    ("Rank BEGINSWITH 'x'", (), "column 6"),
    ("Tags == 'x'", (), "column 9"),
    ("Rank == $1", ("x",), "column 9"),               # an argument of the wrong type
    ("Rank == $1", (True,), "column 9"),
    ("Open == $1", (1,), "column 9"),
    ("Rank == $2", (1,), "column 9"),                 # wrong argument count
    ("Rank == $1", (), "column 9"),
]


@pytest.mark.parametrize("where,args,says", BAD, ids=[b[0] for b in BAD])
def test_bad_predicates_raise_invalid_with_the_column(warm, recorder, where, args, says):
    rec = recorder()
    with pytest.raises(tether.InvalidError) as e:
        warm.query("items", where=where, args=args).start(rec)
    assert e.value.status == tether.E_INVALID and e.value.name == "TETHER_E_INVALID"
    assert "column" in e.value.message and says in e.value.message, e.value.message
    with pytest.raises(tether.InvalidError):
        warm.query("items", where=where, args=args).all()
    time.sleep(0.1)
    assert rec.calls == [] and warm.pending == 0      # no callback, nothing started


def test_too_many_arguments_raise_invalid_naming_the_unused_one(warm):
    """tether.h: an argument given but not used has no column; the message
    names it and the counts."""
    with pytest.raises(tether.InvalidError) as e:
        warm.query("items", where="Rank == $1", args=(1, 2)).start()
    assert "argument $2 is given but not used (2 given, 1 used)" in e.value.message, e.value.message
    assert warm.pending == 0


def test_arguments_without_a_predicate_raise_when_the_query_is_built(warm):
    with pytest.raises(ValueError, match="args without a predicate"):
        warm.query("items", args=(1,))
    assert warm.pending == 0


@pytest.mark.parametrize("bad", [[1], (1,), b"x", bytearray(b"x"), object(), {"a": 1}, 1j,
                                 {1}],
                         ids=lambda b: type(b).__name__)
def test_bad_python_arguments_raise_type_error_before_the_call(warm, recorder, bad):
    rec = recorder()
    before = quiet_counts()["tasks"]  # the warm fixture's task may not be freed yet
    with pytest.raises(TypeError, match=r"\$2"):
        warm.query("items", where="Rank == $1 AND Title == $2", args=(1, bad)).start(rec)
    with pytest.raises(TypeError, match=r"\$1"):
        warm.query("items", where="Rank == $1", args=[bad]).all()
    assert tether.debug_counts()["tasks"] == before and warm.pending == 0 and rec.calls == []


def test_args_that_are_not_a_sequence_raise_type_error(warm):
    for bad in ("12", b"12", 5, {"a": 1}, {1, 2}):
        with pytest.raises(TypeError, match="args"):
            warm.query("items", where="Rank == $1", args=bad).start()
    for bad in (5, ["Rank == 1"]):
        with pytest.raises(TypeError):
            warm.query("items", where=bad).start()
    with pytest.raises(ValueError):
        warm.query("items", where="Rank == 1\x00").start()
    assert warm.pending == 0


def test_integers_beyond_64_bits_raise_before_the_call(warm):
    for big in (2 ** 63, -2 ** 63 - 1, 10 ** 30):
        with pytest.raises(OverflowError, match=r"\$1"):
            warm.query("items", where="Rank == $1", args=(big,)).start()
    assert warm.pending == 0
    check(warm, "Rank == $1 OR Rank == $2", (2 ** 63 - 1, -2 ** 63), [])
    check(warm, "Rank < $1", (-2 ** 63 + 1,), [])
    check(warm, "Rank > $1", (2 ** 63 - 2,), [])


def test_unencodable_text_raises_before_the_call(warm):
    with pytest.raises(ValueError, match=r"\$1"):
        warm.query("items", where="Title == $1", args=("\ud800",)).start()
    assert warm.pending == 0


def test_arguments_other_than_the_exact_types(warm):
    """Subclasses of the accepted types bind as their base type; a bool is
    BOOLEAN, never INTEGER."""
    import enum

    class Rank(enum.IntEnum):
        SEVEN = 7

    class Text(str):
        pass

    check(warm, "Rank == $1 OR Title == $2", (Rank.SEVEN, Text("item 9")), [7, 9])
    with pytest.raises(tether.InvalidError, match="column"):
        warm.query("items", where="Rank == $1", args=(True,)).start()


# ------------------------------------------------------------------ the cache

def test_filtered_fetch_keeps_other_records(kinto, bucket, kinto_url, tmp_path, open_ctx):
    """Before a whole listing, a filtered listing is not the whole collection:
    records it does not answer stay cached, even one the server no longer
    has, until a listing they would match is complete without them."""
    kinto.create_collection(bucket, "keep", {"type": "object",
                                             "properties": {"N": {"type": "integer"}}})
    kinto.put_records(bucket, "keep", [("k%d" % i, {"N": i}) for i in range(10)])
    ctx = open_ctx(kinto_url, bucket, tmp_path / "keep.db")
    low = ctx.query("keep", where="N < $1", args=(5,), sort="N").all()
    high = ctx.query("keep", where="N >= $1", args=(5,), sort="N").all()
    assert len(low) + len(high) == 10
    kinto.delete_record(bucket, "keep", "k9")

    cached, final = answers(ctx.query, "keep", where="N < $1", args=(3,), sort="N")
    assert [o.id for o in cached] == ["k0", "k1", "k2"] and [o.id for o in final] == ["k0", "k1", "k2"]
    final = ctx.query("keep", where="N == $1 OR N == $2", args=(4, 6), policy="server_only").all()
    assert sorted(o.id for o in final) == ["k4", "k6"]
    cached_all = ctx.query("keep", sort="N", policy="cache_only").all()
    assert [o.id for o in cached_all] == ["k%d" % i for i in range(10)]
    assert ctx.object("keep", "k9").peek("N") == 9

    # A complete answer to a predicate k9 would match leaves it out: the
    # store asks for k9 by id, learns it is gone, and drops it.
    final = ctx.query("keep", where="N >= $1", args=(5,), sort="N", policy="server_only").all()
    assert [o.id for o in final] == ["k5", "k6", "k7", "k8"]
    cached_all = ctx.query("keep", sort="N", policy="cache_only").all()
    assert [o.id for o in cached_all] == ["k%d" % i for i in range(9)]
    with pytest.raises(tether.NotFoundError):
        ctx.object("keep", "k9").peek("N")


def test_after_a_whole_listing_every_fetch_syncs(kinto, bucket, kinto_url, tmp_path, open_ctx):
    """Once the store holds the whole collection, any fetch asks for what
    changed since, deletions included, and answers from the synced store."""
    kinto.create_collection(bucket, "sync", {"type": "object",
                                             "properties": {"N": {"type": "integer"}}})
    kinto.put_records(bucket, "sync", [("s%d" % i, {"N": i}) for i in range(10)])
    ctx = open_ctx(kinto_url, bucket, tmp_path / "sync.db")
    every = ctx.query("sync", sort="N").all()
    assert len(every) == 10
    kinto.delete_record(bucket, "sync", "s9")
    kinto.put_record(bucket, "sync", "s3", {"N": 30})

    cached, final = answers(ctx.query, "sync", where="N < $1", args=(4,), sort="N")
    assert [o.id for o in cached] == ["s0", "s1", "s2", "s3"]
    assert [o.id for o in final] == ["s0", "s1", "s2"]
    cached_all = ctx.query("sync", sort="N", policy="cache_only").all()
    assert [o.id for o in cached_all] == ["s%d" % i for i in range(9) if i != 3] + ["s3"]


def test_filtered_fetch_keeps_the_big_cache(warm):
    final = warm.query("items", where="Rank == $1", args=(3,), policy="server_only").all()
    assert ranks(final) == [3]
    every = warm.query("items", sort="Rank", policy="cache_only").all()
    assert ranks(every) == list(range(N)) + SPECIAL_RANKS


def test_an_async_query_takes_a_predicate(warm):
    async def main():
        return await tether.AsyncContext(warm).query("items", where="Rank IN {$1, $2}", args=(4, 1003),
                                                     sort="-Rank").all()
    objs = asyncio.run(main())
    assert ranks(objs) == [1003, 4]


def test_poll_mode(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    cached, final = answers(ctx.query, "items", where="Title ==[c] $1", args=("item 7",), sort="Rank")
    assert cached == [] and ranks(final) == [7, 1005]
