"""Fetch options version 4 against the real Kinto: result types ("objects",
"ids", "count", "values"), properties, batches (a lazy Results) and progress.

Every answer is checked against what the seeded data says it must be,
computed here from the same records, not only against another fetch: a
result type that answered like another, or a count off by its offset, fails.
Counts are checked with a predicate Kinto filters (the server counts) and
with one it cannot (CONTAINS[c]: listed and filtered here), cold and synced.

These test the library's result types option by option, so they fetch
through the binding's one primitive, Context._fetch (conftest's fetch_wait
and fetch_async wrap it), which every public query method runs on; the
public methods (count(), ids(), values(), iteration) are test_query's.
"""

import asyncio
import ctypes
import gc
import logging
import threading
import time

import pytest

import tether
from tether import _lib
from conftest import fetch_async, fetch_wait, finished, quiet_counts, wait_until

N = 300            # six pages of 50
BATCH = 50

SCHEMA = {
    "type": "object",
    "properties": {
        "N": {"type": "integer"},
        "Name": {"type": "string"},
        "Score": {"type": "number"},
        "Flag": {"type": "boolean"},
        "Tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["N"],
}


def rid(i):
    return "r%03d" % i


def record(i):
    # "Blue" in mixed case on every 7th: CONTAINS[c] 'blue' matches 43 rows.
    d = {"N": i, "Name": "Row %d%s" % (i, " bLUe" if i % 7 == 0 else ""), "Score": i / 4.0,
         "Flag": i % 2 == 0}
    if i % 5 == 0:
        d["Tags"] = ["t%d" % (i % 3), "x"]
    return d


RECORDS = {rid(i): record(i) for i in range(N)}


def value(i, name):
    """What a values fetch must give for attribute `name` of record i."""
    if name == "id":
        return rid(i)
    return record(i).get(name)     # absent -> None


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA)
    kinto.put_records(bucket, "items", [(rid(i), record(i)) for i in range(N)])
    return bucket


@pytest.fixture(scope="module")
def items_total():
    return N


# ------------------------------------------------------------------ expectations

# name -> (where, args, which N match): one the server filters, one it cannot.
PREDICATES = {
    "none": (None, (), lambda i: True),
    "lt": ("N < $1", (100,), lambda i: i < 100),
    "flag": ("Flag == $1", (True,), lambda i: i % 2 == 0),
    "contains_c": ("Name CONTAINS[c] $1", ("BLUE",), lambda i: i % 7 == 0),
    "contains_c_and_ge": ("Name CONTAINS[c] $1 AND N >= $2", ("blue", 150),
                          lambda i: i % 7 == 0 and i >= 150),
}


# Kinto filters these whole and exactly (boolean ==), so it counts them (HEAD)
# without sending records. Not N < 100: Kinto's integer comparison takes 5.0
# for 5 and null or text as less than any number, so those are listed.
SERVER_FILTERS = {"none", "flag"}


def expected_ns(pred, limit=0, offset=0, descending=False):
    match = [i for i in range(N) if PREDICATES[pred][2](i)]
    if descending:
        match.reverse()
    match = match[offset:]
    return match[:limit] if limit else match


def expected_ids(pred, **kw):
    return [rid(i) for i in expected_ns(pred, **kw)]


def pred_kw(pred):
    where, args, _ = PREDICATES[pred]
    return {"where": where, "args": args}


# pred, limit, offset: counts before and after offset/limit cut.
COUNT_CASES = [
    ("none", 0, 0), ("none", 7, 295), ("none", 0, 299), ("none", 0, 300),
    ("lt", 0, 0), ("lt", 50, 10), ("lt", 50, 90), ("lt", 0, 99), ("lt", 0, 150), ("lt", 1000, 0),
    ("flag", 0, 0), ("flag", 50, 10), ("flag", 0, 149), ("flag", 0, 150),
    ("contains_c", 0, 0), ("contains_c", 5, 0), ("contains_c", 10, 40), ("contains_c", 0, 43),
    ("contains_c_and_ge", 0, 0), ("contains_c_and_ge", 4, 3),
]
COUNT_IDS = ["%s-l%d-o%d" % c for c in COUNT_CASES]


def expected_count(pred, limit, offset):
    return len(expected_ns(pred, limit=limit, offset=offset))


def test_the_expectations_are_not_trivial():
    """The cases cover zero, a cut by limit, a cut by offset and both."""
    counts = [expected_count(*c) for c in COUNT_CASES]
    assert counts[:4] == [300, 5, 1, 0]
    assert expected_count("contains_c", 0, 0) == 43
    assert expected_count("lt", 50, 90) == 10 and expected_count("lt", 50, 10) == 50


def live(name):
    return tether.debug_counts()[name]


def settled(name):
    """A live count once garbage is collected and it stops moving."""
    return quiet_counts()[name]


def nothing_started(ctx, rec, tasks_before):
    time.sleep(0.05)
    assert rec.calls == [], "a callback ran"
    assert ctx.pending == 0 and live("tasks") <= tasks_before


# ------------------------------------------------------------------ count

@pytest.mark.parametrize("pred,limit,offset", COUNT_CASES, ids=COUNT_IDS)
def test_count_on_a_synced_cache_with_every_policy(warm, pred, limit, offset):
    want = expected_count(pred, limit, offset)
    kw = dict(pred_kw(pred), limit=limit, offset=offset, result="count")
    cached, final = fetch_wait(warm, "items", **kw)
    assert (cached, final) == (want, want)
    # An int that says whether it is the cache's answer for want of the server.
    assert type(final) is tether.Count and isinstance(final, int) and final.offline is False
    assert fetch_wait(warm, "items", policy="cache_only", **kw) == (None, want)
    assert fetch_wait(warm, "items", policy="server_only", **kw) == (None, want)
    assert fetch_wait(warm, "items", policy="cache_else_server", **kw) == (None, want)


@pytest.mark.parametrize("pred,limit,offset", COUNT_CASES, ids=COUNT_IDS)
def test_count_from_the_server_on_a_cold_cache(ctx, pred, limit, offset):
    """Not synced: the server counts (or lists, for CONTAINS[c]) and the
    answer is exact; cache-then-server's cached count is the empty cache's."""
    want = expected_count(pred, limit, offset)
    kw = dict(pred_kw(pred), limit=limit, offset=offset, result="count")
    assert fetch_wait(ctx, "items", policy="server_only", **kw) == (None, want)
    # A count the server makes stores nothing; a listing stores what it read
    # (at least offset + limit matching records, or all).
    cached = 0 if pred in SERVER_FILTERS else want
    assert fetch_wait(ctx, "items", policy="cache_only", **kw) == (None, cached)
    assert fetch_wait(ctx, "items", **kw) == (cached, want)


def test_count_cache_then_server_cold_gives_zero_then_the_count(ctx):
    assert fetch_wait(ctx, "items", result="count", **pred_kw("flag")) == (0, 150)
    assert fetch_wait(ctx, "items", result="count", **pred_kw("contains_c")) == (0, 43)


def test_count_asks_the_server_without_records_where_it_can_filter(items, tmp_path, open_ctx,
                                                                   faultproxy):
    """The header: the server counts without sending records (Kinto: HEAD)
    where it can filter the whole predicate; otherwise the records are listed
    and filtered here. Either way the count is exact."""
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db")
    faultproxy.set("pass", reset_log=True)
    _, n = fetch_wait(ctx, "items", result="count", policy="server_only", offset=10, limit=50,
                          **pred_kw("flag"))
    assert n == 50
    log = [e for e in faultproxy.log() if "/records" in e]
    assert log and all(e.startswith("HEAD ") for e in log), log
    # Nothing was listed, so nothing was cached.
    assert fetch_wait(ctx, "items", policy="cache_only", result="count") == (None, 0)

    faultproxy.set("pass", reset_log=True)
    _, n = fetch_wait(ctx, "items", result="count", policy="server_only", **pred_kw("contains_c"))
    assert n == 43
    log = [e for e in faultproxy.log() if "/records" in e]
    assert any(e.startswith("GET ") for e in log), log


def test_count_through_the_callback_and_fetch_async(warm, recorder):
    rec = recorder()
    task = warm._fetch("items", result="count", callback=rec, **pred_kw("lt"))
    assert finished(task, 30)
    assert [(c[0], c[1], c[3]) for c in rec.calls] == [("cached", 0, 100), ("final", 0, 100)]
    assert task.cached == 100 and task.result() == 100 and task.objects == 100
    got = asyncio.run(fetch_async(warm, "items", result="count", offset=290))
    assert got == 10


# ------------------------------------------------------------------ ids

IDS_CASES = [
    # pred, sort, limit, offset
    ("none", "N", 0, 0),
    ("none", "-N", 0, 0),
    ("none", "-N", 20, 140),
    ("lt", "-N", 30, 5),
    ("contains_c", "N", 0, 0),
    ("contains_c_and_ge", "-N", 3, 1),
]


@pytest.mark.parametrize("pred,sort,limit,offset", IDS_CASES, ids=["%s%s-l%d-o%d" % c for c in IDS_CASES])
@pytest.mark.parametrize("policy", ["cache_only", "server_only", "cache_then_server"])
def test_ids_equal_the_objects_ids_in_order(warm, policy, pred, sort, limit, offset):
    kw = dict(pred_kw(pred), sort=sort, limit=limit, offset=offset, policy=policy)
    want = expected_ids(pred, limit=limit, offset=offset, descending=sort.startswith("-"))
    c_ids, f_ids = fetch_wait(warm, "items", result="ids", **kw)
    c_objs, f_objs = fetch_wait(warm, "items", **kw)
    assert f_ids == want and f_ids == [o.id for o in f_objs]
    assert all(type(i) is str for i in f_ids)
    if policy == "cache_then_server":
        assert c_ids == want and c_ids == [o.id for o in c_objs]
    else:
        assert c_ids is None


def test_ids_from_the_server_on_a_cold_cache(ctx):
    want = expected_ids("contains_c", limit=5, offset=2, descending=True)
    assert fetch_wait(ctx, "items", result="ids", sort="-N", limit=5, offset=2,
                          **pred_kw("contains_c")) == ([], want)
    _, ids = fetch_wait(ctx, "items", result="ids", sort="N", policy="server_only")
    assert ids == [rid(i) for i in range(N)]


def test_ids_make_no_objects(warm):
    """An ids answer is strings: no Object is wrapped, no handle is held."""
    base = settled("object_handles")
    _, ids = fetch_wait(warm, "items", result="ids", policy="cache_only")
    assert len(ids) == N
    assert settled("object_handles") == base
    assert not any(isinstance(i, tether.Object) for i in ids)


# ------------------------------------------------------------------ values

PROPS = ["Score", "id", "Flag", "Tags", "N", "Name"]


def check_values(rows, ns, props):
    assert len(rows) == len(ns)
    for row, i in zip(rows, ns):
        assert list(row) == props, "the keys, in the order asked"
        for name in props:
            want, got = value(i, name), row[name]
            assert got == want and type(got) is type(want), (i, name, got, want)


@pytest.mark.parametrize("policy", ["cache_only", "server_only", "cache_then_server"])
def test_values_give_exactly_the_requested_properties_typed(warm, policy):
    kw = dict(pred_kw("lt"), sort="-N", limit=40, offset=3, policy=policy)
    ns = expected_ns("lt", limit=40, offset=3, descending=True)
    cached, final = fetch_wait(warm, "items", result="values", properties=PROPS, **kw)
    check_values(final, ns, PROPS)
    if policy == "cache_then_server":
        check_values(cached, ns, PROPS)
    # The same values as the objects hold.
    _, objs = fetch_wait(warm, "items", **kw)
    assert final == [{p: o.peek(p) for p in PROPS} for o in objs]


def test_values_types_include_null_json_real_and_boolean(warm):
    _, rows = fetch_wait(warm, "items", result="values", properties=["Tags", "Score", "Flag"],
                              where="N IN {$1, $2}", args=(5, 6), sort="N")
    assert rows == [{"Tags": ["t2", "x"], "Score": 1.25, "Flag": False},
                    {"Tags": None, "Score": 1.5, "Flag": True}]


def test_values_from_the_server_on_a_cold_cache(ctx):
    ns = expected_ns("contains_c", limit=10)
    cached, final = fetch_wait(ctx, "items", result="values", properties=["N", "Name"],
                                   sort="N", limit=10, **pred_kw("contains_c"))
    assert cached == []
    check_values(final, ns, ["N", "Name"])
    _, final = fetch_wait(ctx, "items", result="values", properties=["Name"], sort="N",
                              policy="server_only")
    check_values(final, range(N), ["Name"])


def test_values_without_properties_give_every_attribute(warm):
    names = [a.name for a in warm.entity("items").attributes]
    assert names[:2] == ["id", "last_modified"] and set(PROPS) <= set(names)
    _, rows = fetch_wait(warm, "items", result="values", sort="N", limit=3, policy="cache_only")
    assert [list(r) for r in rows] == [names] * 3
    for i, row in enumerate(rows):
        assert type(row["last_modified"]) is int and row["last_modified"] > 0
        check_values([{p: row[p] for p in PROPS}], [i], PROPS)


def test_values_with_one_property_and_a_repeated_one(warm):
    _, rows = fetch_wait(warm, "items", result="values", properties=["N"], sort="N", limit=2)
    assert rows == [{"N": 0}, {"N": 1}]
    _, rows = fetch_wait(warm, "items", result="values", properties=("N", "N"), sort="N", limit=1)
    assert rows == [{"N": 0}]


@pytest.mark.parametrize("props", [["Nope"], ["N", "nope"], ["n"], [""], ["N", ""]])
def test_values_of_an_unknown_property_are_invalid(warm, recorder, props):
    rec = recorder()
    before = live("tasks")
    with pytest.raises(tether.InvalidError) as e:
        warm._fetch("items", result="values", properties=props, callback=rec)
    assert e.value.message
    with pytest.raises(tether.InvalidError):
        fetch_wait(warm, "items", result="values", properties=props, policy="cache_only")
    nothing_started(warm, rec, before)


@pytest.mark.parametrize("result", ["objects", "ids", "count"])
def test_properties_for_another_result_type_are_invalid(warm, recorder, result):
    rec = recorder()
    before = live("tasks")
    with pytest.raises(tether.InvalidError, match="propert"):
        warm._fetch("items", result=result, properties=["N"], callback=rec)
    with pytest.raises(tether.InvalidError):
        asyncio.run(fetch_async(warm, "items", result=result, properties=["N"]))
    nothing_started(warm, rec, before)


# ------------------------------------------------------------------ batches

@pytest.mark.parametrize("policy", ["cache_only", "server_only", "cache_then_server"])
@pytest.mark.parametrize("pred,sort", [("none", "-N"), ("contains_c", "N"), ("lt", "-N")])
def test_batch_iteration_gives_the_same_ids_as_a_plain_fetch(warm, policy, pred, sort):
    kw = dict(pred_kw(pred), sort=sort, policy=policy)
    plain_c, plain_f = fetch_wait(warm, "items", **kw)
    cached, final = fetch_wait(warm, "items", batch=BATCH, **kw)
    try:
        assert isinstance(final, tether.Results) and not isinstance(final, list)
        want = expected_ids(pred, descending=sort.startswith("-"))
        assert len(final) == len(want)
        assert [o.id for o in final] == want == [o.id for o in plain_f]
        if policy == "cache_then_server":
            assert isinstance(cached, tether.Results)
            assert [o.id for o in cached] == want == [o.id for o in plain_c]
        else:
            assert cached is None
    finally:
        final.close()
        if cached is not None:
            cached.close()


def test_batch_on_a_cold_cache(ctx):
    cached, final = fetch_wait(ctx, "items", batch=7, sort="-N", limit=20, offset=3,
                                   **pred_kw("lt"))
    with cached, final:
        assert len(cached) == 0 and list(cached) == []
        assert [o.peek("N") for o in final] == expected_ns("lt", limit=20, offset=3,
                                                           descending=True)


def test_batched_iteration_holds_about_one_batch_of_object_handles(warm):
    """While 300 rows are iterated 50 at a time, the live object handles stay
    within about one batch of the baseline; a plain fetch's Answer, once
    read, holds them all (the control: the count does see handles)."""
    base = settled("object_handles")
    _, res = fetch_wait(warm, "items", batch=BATCH, sort="N", policy="cache_only")
    seen, peak = [], 0
    with res:
        assert live("object_handles") == base    # nothing made before a row is read
        for o in res:
            seen.append(o.peek("N"))
            peak = max(peak, live("object_handles") - base)
    del o
    assert seen == list(range(N))
    assert 1 <= peak <= BATCH + 2, peak
    assert settled("object_handles") == base

    _, plain = fetch_wait(warm, "items", sort="N", policy="cache_only")
    assert live("object_handles") == base    # an Answer makes its Objects as they are read
    assert [o.peek("N") for o in plain] == list(range(N))
    assert live("object_handles") - base >= N
    del plain
    assert settled("object_handles") == base


def test_results_is_a_read_only_sequence(warm):
    _, res = fetch_wait(warm, "items", batch=BATCH, sort="N", policy="cache_only")
    with res:
        assert len(res) == N and bool(res)
        assert res[0].id == rid(0) and res[-1].id == rid(N - 1) and res[-N].id == rid(0)
        assert res[123].id == rid(123)
        for bad in (N, -N - 1, 10 ** 20):
            with pytest.raises(IndexError):
                res[bad]
        with pytest.raises(TypeError):
            res["1"]
        with pytest.raises(TypeError):
            res[1.0]
        assert [o.id for o in res[48:53]] == [rid(i) for i in range(48, 53)]   # across batches
        assert [o.id for o in res[::-100]] == [rid(299), rid(199), rid(99)]
        assert res[5:2] == []
        with pytest.raises(TypeError):
            res[0] = None
        # Uniquing holds across batches while Python holds the Object.
        first = res[0]
        res[250]
        assert res[0] is first
        assert [o.id for o in reversed(res)][:2] == [rid(299), rid(298)]


def test_results_close_releases_the_handle(warm):
    base_results = settled("results")
    cached, final = fetch_wait(warm, "items", batch=BATCH, sort="N")
    assert live("results") == base_results + 2       # both phases, held
    first = final[0]
    cached.close()
    assert live("results") == base_results + 1
    final.close()
    final.close()                                    # idempotent
    assert live("results") == base_results and final.closed
    assert len(final) == N                           # still known
    with pytest.raises(tether.HandleError):
        final[1]
    with pytest.raises(tether.HandleError):
        list(final)
    assert first.peek("N") == 0                      # what was read outlives it

    with fetch_wait(warm, "items", batch=BATCH, policy="cache_only")[1] as res:
        assert live("results") == base_results + 1
        res[0]
    assert live("results") == base_results and res.closed


def test_results_are_released_when_collected(warm):
    base_results = settled("results")
    base_handles = settled("object_handles")
    cached, final = fetch_wait(warm, "items", batch=BATCH)
    [o.id for o in final[:60]]
    assert live("results") == base_results + 2
    del cached, final
    assert settled("results") == base_results
    assert settled("object_handles") == base_handles


def test_results_after_their_context_closed(kinto_url, items, tmp_path, open_ctx, monkeypatch):
    """Closing the context releases every handle: the Results then raises
    HandleError without asking the library with the dead handle, and closing
    or dropping it is harmless."""
    ctx = open_ctx(kinto_url, items, tmp_path / "s.db")
    _, res = fetch_wait(ctx, "items", batch=BATCH, sort="N", policy="server_only")
    kept = res[0]
    ctx.close()
    assert res.closed
    calls = []
    real = _lib.tether_results_object_at
    monkeypatch.setattr(_lib, "tether_results_object_at",
                        lambda *a: calls.append(a) or real(*a))
    with pytest.raises(tether.HandleError):
        res[1]
    with pytest.raises(tether.HandleError):
        next(iter(res))
    assert calls == []
    res.close()
    del res
    gc.collect()
    with pytest.raises(tether.HandleError):
        kept.peek("N")


def test_batched_fetch_async_and_poll_mode(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    res = asyncio.run(fetch_async(ctx, "items", batch=BATCH, sort="-N", policy="server_only"))
    with res:
        assert [o.id for o in res] == [rid(i) for i in range(N - 1, -1, -1)]
    cached, final = fetch_wait(ctx, "items", batch=3, limit=4, sort="N")
    with cached, final:
        assert [o.id for o in cached] == [o.id for o in final] == [rid(i) for i in range(4)]


def test_cancelled_batched_fetch_answers_an_empty_results(kinto_url, items, tmp_path, open_ctx,
                                                          recorder):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    rec = recorder()
    task = ctx._fetch("items", batch=BATCH, policy="server_only", callback=rec)
    assert task.cancel() is True                     # before any poll: nothing delivered yet
    assert finished(task, 10)
    [(phase, status, _, res)] = rec.calls
    assert (phase, status) == ("final", tether.E_CANCELLED)
    assert isinstance(res, tether.Results) and len(res) == 0 and list(res) == []
    assert isinstance(task.error, tether.TaskCancelledError) and task.exception() is task.error
    res.close()


@pytest.mark.parametrize("result,empty", [("ids", []), ("values", []), ("count", 0),
                                          ("objects", [])])
def test_cancelled_fetch_of_each_result_type(kinto_url, items, tmp_path, open_ctx, recorder,
                                             result, empty):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    rec = recorder()
    task = ctx._fetch("items", result=result, policy="server_only", callback=rec)
    assert task.cancel() is True
    assert finished(task, 10)
    assert rec.calls == [("final", tether.E_CANCELLED, rec.calls[0][2], empty)]
    assert task.exception() is task.error and task.objects == empty


@pytest.mark.parametrize("result", ["ids", "values", "count"])
def test_batch_with_other_result_types_changes_nothing(warm, result):
    plain = fetch_wait(warm, "items", result=result, sort="N", **pred_kw("lt"))
    batched = fetch_wait(warm, "items", result=result, sort="N", batch=7, **pred_kw("lt"))
    assert plain == batched and not isinstance(batched[1], tether.Results)


# ------------------------------------------------------------------ progress

class Events:
    """Progress calls and phase callbacks, in the order they came."""

    def __init__(self):
        self.lock = threading.Lock()
        self.list = []

    def progress(self, received, total):
        with self.lock:
            self.list.append(("progress", received, total))

    def callback(self, phase, error, answer):
        with self.lock:
            self.list.append((phase, error.status if error else 0))

    def of(self, kind):
        return [e for e in self.list if e[0] == kind]


def slow_pages(proxy, seconds=0.15):
    # Pages further apart than the library's 100 ms between progress calls.
    proxy.set("delay", delay=seconds, match="/records", reset_log=True)


@pytest.mark.parametrize("delivery", ["thread", "poll"])
def test_progress_counts_up_and_stops_at_the_final(items, tmp_path, open_ctx, faultproxy, delivery):
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db", delivery=delivery)
    slow_pages(faultproxy)
    ev = Events()
    task = ctx._fetch("items", policy="server_only", sort="N", callback=ev.callback,
                     progress=ev.progress)
    assert finished(task, 30) and task.status == 0 and len(task.result()) == N
    wait_until(lambda: False, timeout=0.5, poll=ctx if delivery == "poll" else None)
    events = list(ev.list)
    assert events[-1] == ("final", 0), events
    prog = ev.of("progress")
    assert len(prog) >= 3, events                    # six pages, 150 ms apart
    received = [p[1] for p in prog]
    assert received == sorted(received) and 0 < received[0] and received[-1] <= N
    assert received[0] >= 50                         # a whole page counts at once
    assert all(t is None or (type(t) is int and t >= received[-1]) for _, _, t in prog)


def test_progress_counts_records_the_server_sent_not_matching_ones(items, tmp_path, open_ctx,
                                                                   faultproxy):
    """CONTAINS[c] is filtered here: every record is listed, and received
    counts them all though only 43 match."""
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db")
    slow_pages(faultproxy)
    ev = Events()
    _, n = fetch_wait(ctx, "items", result="count", policy="server_only", progress=ev.progress,
                          **pred_kw("contains_c"))
    assert n == 43
    received = [p[1] for p in ev.of("progress")]
    assert received and received == sorted(received) and received[-1] > 43


def test_no_progress_without_records_from_the_server(ctx):
    """cache_only never asks the server; a count the server makes (HEAD)
    sends no records."""
    ev = Events()
    _, n = fetch_wait(ctx, "items", policy="server_only", result="count", progress=ev.progress,
                          **pred_kw("flag"))
    assert n == 150
    fetch_wait(ctx, "items", policy="cache_only", progress=ev.progress)
    time.sleep(0.2)
    assert ev.of("progress") == []


@pytest.mark.parametrize("delivery", ["thread", "poll"])
def test_cancel_from_inside_progress_gives_one_cancelled_final(items, tmp_path, open_ctx,
                                                               faultproxy, delivery):
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db", delivery=delivery)
    slow_pages(faultproxy)
    ev = Events()
    started = threading.Event()
    holder = {}

    def progress(received, total):
        ev.progress(received, total)
        if "cancelled" not in holder:
            started.wait(5)              # fetch() has returned the task
            holder["cancelled"] = holder["task"].cancel()
            with ev.lock:
                ev.list.append(("cancel returned", holder["cancelled"]))

    task = ctx._fetch("items", policy="server_only", callback=ev.callback, progress=progress)
    holder["task"] = task
    started.set()
    assert finished(task, 30)
    wait_until(lambda: False, timeout=0.8, poll=ctx if delivery == "poll" else None)
    events = list(ev.list)
    assert holder["cancelled"] is True
    i = events.index(("cancel returned", True))
    assert events[i - 1][0] == "progress"
    assert events[i + 1:] == [("final", tether.E_CANCELLED)], events
    assert len(ev.of("final")) == 1
    assert isinstance(task.error, tether.TaskCancelledError) and task.exception() is task.error
    assert task.cancel() is False and ctx.pending == 0


def test_an_exception_in_progress_is_logged_and_the_fetch_goes_on(items, tmp_path, open_ctx,
                                                                  faultproxy, caplog):
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db")
    slow_pages(faultproxy, 0.12)
    calls = []

    def progress(received, total):
        calls.append(received)
        raise RuntimeError("boom in progress %d" % received)

    with caplog.at_level(logging.ERROR, logger="tether"):
        _, ids = fetch_wait(ctx, "items", result="ids", policy="server_only", sort="N",
                                progress=progress)
    assert ids == [rid(i) for i in range(N)]
    assert len(calls) >= 2                           # it kept being called
    assert any("boom in progress" in (r.exc_text or "") for r in caplog.records)


def test_progress_in_fetch_async(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    got = []
    ids = asyncio.run(fetch_async(ctx, "items", result="ids", policy="server_only",
                                      progress=lambda r, t: got.append((r, t))))
    assert len(ids) == N and got and got[0][0] >= 50


def test_waiting_inside_progress_is_refused(kinto_url, items, tmp_path, open_ctx, faultproxy):
    """Progress runs as a callback of the context: waiting there for the
    fetch would wait for itself."""
    ctx = open_ctx(faultproxy.url, items, tmp_path / "s.db")
    slow_pages(faultproxy, 0.05)
    errors = []
    holder = {}
    ready = threading.Event()

    def progress(received, total):
        ready.wait(5)
        try:
            finished(holder["task"], 0.1)
        except tether.BusyError as e:
            errors.append(e)

    holder["task"] = task = ctx._fetch("items", policy="server_only", progress=progress)
    ready.set()
    assert finished(task, 30) and task.status == 0
    assert errors


# ------------------------------------------------------------------ bad arguments

BAD_ARGS = [
    ({"result": 1}, TypeError, "result"),
    ({"result": None}, TypeError, "result"),
    ({"result": b"ids"}, TypeError, "result"),
    ({"result": "rows"}, ValueError, "result"),
    ({"result": "IDS"}, ValueError, "result"),
    ({"batch": "5"}, TypeError, "batch"),
    ({"batch": 1.5}, TypeError, "batch"),
    ({"batch": True}, TypeError, "batch"),
    ({"batch": None}, TypeError, "batch"),
    ({"batch": -1}, ValueError, "batch"),
    ({"batch": 2 ** 64}, OverflowError, "batch"),
    ({"progress": 5}, TypeError, "progress"),
    ({"progress": "print"}, TypeError, "progress"),
    ({"result": "values", "properties": "N"}, TypeError, "properties"),
    ({"result": "values", "properties": b"N"}, TypeError, "properties"),
    ({"result": "values", "properties": {"N": 1}}, TypeError, "properties"),
    ({"result": "values", "properties": 5}, TypeError, "properties"),
    ({"result": "values", "properties": [1]}, TypeError, "properties"),
    ({"result": "values", "properties": ["N", None]}, TypeError, "properties"),
    ({"result": "values", "properties": []}, ValueError, "properties"),
    ({"result": "values", "properties": ["N,Name"]}, ValueError, "separator"),
    ({"result": "values", "properties": ["N\x00"]}, ValueError, "properties"),
]


@pytest.mark.parametrize("kw,exc,match", BAD_ARGS,
                         ids=["%d:%r" % (i, c[0]) for i, c in enumerate(BAD_ARGS)])
def test_bad_arguments_are_refused_before_anything_starts(warm, recorder, kw, exc, match):
    rec = recorder()
    before = live("tasks")
    with pytest.raises(exc, match=match):
        warm._fetch("items", callback=rec, **kw)
    with pytest.raises(exc, match=match):
        fetch_wait(warm, "items", **kw)
    with pytest.raises(exc, match=match):
        asyncio.run(fetch_async(warm, "items", **kw))
    nothing_started(warm, rec, before)


def test_a_subclass_of_int_is_a_batch(warm):
    import enum

    class Size(enum.IntEnum):
        SMALL = 10

    _, res = fetch_wait(warm, "items", batch=Size.SMALL, policy="cache_only", sort="N", limit=12)
    with res:
        assert [o.id for o in res] == [rid(i) for i in range(12)]


# ------------------------------------------------------------------ through the C ABI

@pytest.mark.parametrize("rtype", [_lib.RESULT_IDS, _lib.RESULT_COUNT, _lib.RESULT_VALUES],
                         ids=["ids", "count", "values"])
def test_cancelled_results_report_the_fetchs_result_type(kinto_url, items, tmp_path, open_ctx, rtype):
    """Straight through the C ABI: POLL mode, cancel before polling, so the
    FINAL is the cancelled one; its results should say the fetch's type."""
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    seen = []

    @_lib.FETCH_CB
    def cb(task, phase, status, message, results, userdata):
        t = ctypes.c_int(-1)
        _lib.tether_results_type(results, ctypes.byref(t))
        seen.append((phase, status, t.value))
        _lib.tether_results_free(results)

    opts = _lib.tether_fetch_options()
    _lib.tether_fetch_options_init(ctypes.byref(opts), _lib.FETCH_OPTIONS_VERSION)
    opts.entity = b"items"
    opts.policy = _lib.POLICY_SERVER_ONLY
    opts.result_type = rtype
    out = ctypes.c_void_p()
    _lib.tether_fetch_start(ctx._h, ctypes.byref(opts), cb, None, ctypes.byref(out))
    _lib.tether_task_cancel(out.value)
    wait_until(lambda: seen, timeout=10, poll=ctx)
    assert [(p, s) for p, s, _ in seen] == [(_lib.PHASE_FINAL, tether.E_CANCELLED)]
    assert seen[0][2] == rtype, "a cancelled FINAL's results have the fetch's type"


# A version-4 struct (this binding's) must be neither written nor read past
# its end: the library once grew the struct by `live` without a new version,
# and plain fetches from this binding came out live, with no FINAL.

# Up to and including `progress` (not sizeof: the struct class may be given tail room).
V4_SIZE = _lib.tether_fetch_options.progress.offset + ctypes.sizeof(ctypes.c_void_p)


def test_options_init_writes_only_a_version_4_struct():
    buf = (ctypes.c_ubyte * (V4_SIZE + 16))(*([0xAB] * (V4_SIZE + 16)))
    _lib.tether_fetch_options_init(ctypes.cast(buf, ctypes.POINTER(_lib.tether_fetch_options)), 4)
    assert buf[0] == 4                     # it did fill the struct
    written = [i for i in range(V4_SIZE, V4_SIZE + 16) if buf[i] != 0xAB]
    assert not written, "init wrote past the %d-byte version-4 struct" % V4_SIZE


def test_fetch_start_reads_only_a_version_4_struct(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    # A correct version-4 struct (filled in a roomy scratch buffer), followed
    # by non-zero bytes, as any memory after a host's struct may be.
    scratch = (ctypes.c_ubyte * (V4_SIZE + 64))()
    _lib.tether_fetch_options_init(ctypes.cast(scratch, ctypes.POINTER(_lib.tether_fetch_options)), 4)
    size = ctypes.sizeof(_lib.tether_fetch_options)   # the current version's: every later field garbage
    buf = (ctypes.c_ubyte * size)(*(list(scratch[:V4_SIZE]) + [0xFF] * (size - V4_SIZE)))
    opts = _lib.tether_fetch_options.from_buffer(buf)
    opts.entity = b"items"
    opts.policy = _lib.POLICY_CACHE_ONLY
    phases = []

    @_lib.FETCH_CB
    def cb(task, phase, status, message, results, userdata):
        phases.append((phase, status))
        _lib.tether_results_free(results)

    out = ctypes.c_void_p()
    _lib.tether_fetch_start(ctx._h, opts, cb, None, ctypes.byref(out))
    wait_until(lambda: phases, timeout=10, poll=ctx)
    first = list(phases)
    if not any(p == _lib.PHASE_FINAL for p, _ in first):
        _lib.tether_task_cancel(out.value)   # end it while `cb` is alive
        wait_until(lambda: any(p == _lib.PHASE_FINAL for p, _ in phases), timeout=10, poll=ctx)
    assert first, "no callback at all"
    assert first == [(_lib.PHASE_FINAL, 0)], "a cache-only version-4 fetch is not live"
