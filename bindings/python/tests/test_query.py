"""tether.Query and Context.query (issue 25) against the real Kinto.

Every answer is checked against what the seeded records say it must be
(computed here), by every method (all, iteration, batched iteration, ids,
count, values, first, start's Future), under every policy, cold and warm.
"""

import concurrent.futures
import copy
import pickle
import threading

import pytest

import tether
from tether import Query
from conftest import wait_until

N = 120
STATUSES = ("open", "review", "closed")

SCHEMA = {
    "type": "object",
    "properties": {
        "N": {"type": "integer"},
        "Name": {"type": "string"},
        "Status": {"type": "string"},
        "Flag": {"type": "boolean"},
    },
    "required": ["N"],
}


def rid(i):
    return "q%03d" % i


def record(i):
    return {"N": i, "Name": "Item %d" % i, "Status": STATUSES[i % 3], "Flag": i % 2 == 0}


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA)
    kinto.put_records(bucket, "items", [(rid(i), record(i)) for i in range(N)])
    return bucket


@pytest.fixture(scope="module")
def items_total():
    return N


POLICIES = ["cache_then_server", "cache_only", "server_only", "cache_else_server"]

# The open ones, by N descending, skipping 2, at most 10: what Q asks.
Q = Query("items").where("Status == $1", "open").sort("-N").offset(2).limit(10)
EXPECTED = [i for i in sorted(range(N), reverse=True) if i % 3 == 0][2:12]


def ns(objs):
    return [o.peek("N") for o in objs]


# ------------------------------------------------------------------ building

def test_keywords_and_steps_build_the_same_query():
    by_keywords = Query("items", where="Status == $1", args=["open"], sort=["-N"], offset=2, limit=10)
    assert by_keywords == Q and hash(by_keywords) == hash(Q)
    assert Query("items", sort="-N, Name") == Query("items").sort("-N", "Name") == Query("items").sort("-N,Name")
    assert Q.as_dict() == {"where": "Status == $1", "args": ["open"], "sort": ["-N"], "limit": 10, "offset": 2}
    assert Query(Q.entity, **Q.as_dict()) == Q
    assert Query("items", properties="Name, N") == Query("items").properties("Name", "N")
    assert eval(repr(Q), {"Query": Query}) == Q
    assert pickle.loads(pickle.dumps(Q)) == Q == copy.deepcopy(Q)
    # Each step a new Query; the first is unchanged.
    base = Query("items")
    assert base.limit(3) is not base and base.as_dict() == {}
    # True == 1 in Python, not in a predicate.
    assert Query("items").where("Flag == $1", True) != Query("items").where("Flag == $1", 1)


def test_a_query_is_immutable():
    with pytest.raises(AttributeError):
        Q.entity = "other"
    with pytest.raises(AttributeError):
        Q._limit = 3
    with pytest.raises(AttributeError):
        del Q.entity


@pytest.mark.parametrize("bad, error", [
    (dict(limit=0), ValueError), (dict(limit=-1), ValueError), (dict(limit="10"), TypeError),
    (dict(limit=True), TypeError), (dict(offset=-1), ValueError), (dict(offset=2 ** 31), ValueError),
    (dict(offset=1.5), TypeError), (dict(batch=-1), ValueError), (dict(batch=None), TypeError),
    (dict(policy="cache"), ValueError), (dict(policy=1), TypeError), (dict(where=3), TypeError),
    (dict(args=[1]), ValueError),            # args without a predicate
    (dict(where="N == $1", args="1"), TypeError), (dict(where="N == $1", args=[object()]), TypeError),
    (dict(where="N == $1", args=[2 ** 64]), OverflowError),
    (dict(sort=[1]), TypeError), (dict(sort="A,,B"), ValueError), (dict(sort=b"N"), TypeError),
    (dict(properties=[]), ValueError), (dict(properties=""), ValueError),
    (dict(properties=["A,B"]), ValueError), (dict(properties=[3]), TypeError),
    (dict(server_query=b"x"), TypeError),
])
def test_bad_values_raise_when_built(bad, error):
    with pytest.raises(error):
        Query("items", **bad)
    with pytest.raises(error):
        Query("items").replace(**bad)


def test_unknown_keywords_and_entities_are_errors(ctx):
    with pytest.raises(TypeError):
        Query("items", limt=3)
    with pytest.raises(TypeError, match="limt"):
        Query("items").replace(limt=3)
    with pytest.raises(TypeError):
        ctx.query("items", limt=3)
    with pytest.raises(TypeError):
        Query(3)
    with pytest.raises(ValueError):
        Query("")
    with pytest.raises(TypeError):
        ctx.query(3)
    with pytest.raises(TypeError):
        ctx.query("items", on_cached=3)
    with pytest.raises(tether.NotFoundError):
        ctx.query("nothing").all()
    with pytest.raises(tether.InvalidError):
        ctx.query("items", where="N == 'x'").count()
    with pytest.raises(tether.InvalidError):
        ctx.query("items", sort="Nope").ids()
    with pytest.raises(tether.InvalidError):
        ctx.query("items").values("Nope")
    with pytest.raises(TypeError):
        ctx.query("items").live(3)


def test_keywords_replace_a_querys_values(ctx):
    r = ctx.query(Q, limit=3, policy="server_only")
    assert r.query == Q.limit(3).policy("server_only")
    assert ctx.query(Q).query is Q


# ------------------------------------------------------------------ answers

@pytest.mark.parametrize("warmed", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_method_answers_alike(ctx, policy, warmed):
    if warmed:
        ctx.query("items").all()
    q = Q.policy(policy)
    # What the cache holds decides cache_only's answer: none when cold.
    expected = [] if policy == "cache_only" and not warmed else EXPECTED
    objs = ctx.query(q).all()
    assert isinstance(objs, tether.Answer) and objs.offline is False
    assert ns(objs) == expected == ns(ctx.query(q).start().result(30))   # a Future of all()'s answer
    assert ns(ctx.query(q)) == expected                      # iteration
    assert ns(ctx.query(q.batch(3))) == expected             # made 3 at a time
    ids = ctx.query(q).ids()
    assert ids == [rid(i) for i in expected]
    assert [o.id for o in objs] == ids
    n = ctx.query(q).count()
    assert n == len(expected)
    assert isinstance(n, int) and n.offline is False
    rows = ctx.query(q).values("N", "Status")
    assert rows == [{"N": i, "Status": "open"} for i in expected]
    assert ctx.query(q.properties("N", "Status")).values() == rows
    assert ctx.query(q.properties("Name")).values() == [{"Name": "Item %d" % i} for i in expected]
    every = ctx.query(q).values()
    assert [r["N"] for r in every] == expected and all(set(r) >= {"id", "N", "Name"} for r in every)
    first = ctx.query(q).first()
    if expected:
        assert first is not None and first.peek("N") == expected[0] and first is objs[0]
    else:
        assert first is None


def test_a_server_query_answers_the_servers_answer(ctx):
    q = Query("items", server_query="Status=closed", sort="N", limit=5, policy="server_only")
    expected = [i for i in range(N) if i % 3 == 2][:5]
    assert ns(ctx.query(q).all()) == expected == ns(ctx.query(q).start().result(30))
    assert ctx.query(q).ids() == [rid(i) for i in expected]


def test_first_is_none_when_nothing_matches(ctx):
    assert ctx.query("items", where="N > $1", args=[10 ** 6]).first() is None
    assert ctx.query("items", where="N > $1", args=[10 ** 6]).all() == []
    assert ctx.query("items", where="N > $1", args=[10 ** 6]).count() == 0


def test_a_result_asks_again_each_time(ctx, kinto, items):
    r = ctx.query("items", where="Name == $1", args=["again"], policy="server_only")
    assert r.count() == 0
    kinto.put_record(items, "items", "again", {"N": 10 ** 5, "Name": "again"})
    try:
        assert r.count() == 1 and r.ids() == ["again"]
    finally:
        kinto.delete_record(items, "items", "again")


def test_on_cached_gets_the_caches_first_answer(ctx):
    ctx.query("items", where="N < 5").all()          # the cache holds N 0..4
    seen = []
    q = Query("items").where("N < $1", 10).sort("N")
    final = ctx.query(q, on_cached=seen.append).all()
    assert [ns(a) for a in seen] == [[0, 1, 2, 3, 4]]
    assert ns(final) == list(range(10))
    counts = []
    assert ctx.query(q, on_cached=counts.append).count() == 10 and counts == [10]
    # No cached phase under server_only: on_cached is not called.
    seen.clear()
    assert len(ctx.query(q.policy("server_only"), on_cached=seen.append).ids()) == 10 and seen == []


def test_poll_delivery(kinto_url, items, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items, tmp_path / "p.db", delivery="poll")
    assert ns(ctx.query(Q).all()) == EXPECTED
    assert ctx.query(Q).count() == len(EXPECTED)


def test_offline_answers_the_cache_marked(kinto_url, items, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, items, tmp_path / "o.db", timeout_ms=2000)
    ctx.query("items").all()
    faultproxy.stop()
    objs = ctx.query(Q).all()
    assert ns(objs) == EXPECTED and objs.offline is True
    n = ctx.query(Q).count()
    assert n == len(EXPECTED) and n.offline is True
    # start()'s Future says what happened (the final error); its task
    # keeps the cache's answer all() gave.
    task = ctx.query(Q).start()
    assert isinstance(task.exception(30), tether.NetworkError) and ns(task.objects) == EXPECTED
    with pytest.raises(tether.NetworkError):
        ctx.query(Q.policy("server_only")).all()


def test_live_calls_back_with_answers_and_changes(ctx, kinto, items):
    answers = []
    lock = threading.Lock()

    def on_answer(a):
        with lock:
            answers.append(a)

    q = Query("items").where("Status == $1", "review").sort("N")
    task = ctx.query(q).live(on_answer)
    try:
        assert wait_until(lambda: any(a.phase == "live" for a in answers))
        first_live = [a for a in answers if a.phase == "live"][0]
        assert first_live.error is None and first_live.changes is None
        assert ns(first_live.answer) == [i for i in range(N) if i % 3 == 1]
        kinto.patch_record(items, "items", rid(1), {"Status": "closed"})
        ctx.query("items").ids()     # a sync: brings the change into the context
        assert wait_until(lambda: len([a for a in answers if a.phase == "live"]) >= 2)
        last = answers[-1]
        assert last.changes is not None and last.changes.deleted == [0]
        assert ns(last.answer) == [i for i in range(N) if i % 3 == 1 and i != 1]
    finally:
        kinto.patch_record(items, "items", rid(1), {"Status": "review"})
        task.cancel()
        assert isinstance(task.exception(timeout=10), tether.TaskCancelledError)


def test_a_batched_live_query_answers_results(ctx):
    answers = []
    task = ctx.query(Query("items").where("Status == $1", "review").sort("N").batch(4)).live(answers.append)
    try:
        assert wait_until(lambda: any(a.phase == "live" for a in answers))
        live = [a for a in answers if a.phase == "live"][0]
        assert isinstance(live.answer, tether.Results)
        with live.answer as rows:             # read 4 at a time; the callback's to close
            assert ns(rows) == [i for i in range(N) if i % 3 == 1]
    finally:
        task.cancel()
        assert isinstance(task.exception(timeout=10), tether.TaskCancelledError)


def test_start_answers_what_all_answers(ctx):
    calls = []
    task = ctx.query("items", sort="-id").start(lambda phase, error, answer: calls.append((phase, error)))
    assert isinstance(task, concurrent.futures.Future)
    got = task.result(30)
    assert [o.id for o in got] == [o.id for o in ctx.query("items", sort="-id").all()]
    assert calls[-1] == ("final", None)


def test_start_refuses_a_callback_that_cannot_be_called(ctx):
    with pytest.raises(TypeError, match="callable"):
        ctx.query("items").start(42)  # type: ignore[arg-type]
