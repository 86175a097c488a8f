"""tether.AsyncContext (issue 25) against the real Kinto: Context.query's
names, awaited, in both delivery modes and under every policy; answers
checked against the seeded records and against the sync path (Context.query).
"""

import asyncio
import threading
import warnings

import pytest

import tether
from tether import AsyncContext, Query
from conftest import AUTH

N = 90
STATUSES = ("open", "review", "closed")
SCHEMA = {"type": "object", "properties": {"N": {"type": "integer"}, "Status": {"type": "string"},
                                           "Name": {"type": "string"}}}
POLICIES = ["cache_then_server", "cache_only", "server_only", "cache_else_server"]
Q = Query("items").where("Status == $1", "review").sort("-N").offset(1).limit(7)
EXPECTED = [i for i in sorted(range(N), reverse=True) if i % 3 == 1][1:8]


def rid(i):
    return "a%03d" % i


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", SCHEMA)
    kinto.put_records(bucket, "items", [(rid(i), {"N": i, "Status": STATUSES[i % 3], "Name": "n%d" % i})
                                        for i in range(N)])
    return bucket


def ns(objs):
    return [o.peek("N") for o in objs]


def opener(kinto_url, items, path, **kw):
    kw.setdefault("username", AUTH[0])
    kw.setdefault("password", AUTH[1])
    return AsyncContext.open(kinto_url, items, str(path), **kw)


@pytest.mark.parametrize("delivery", ["poll", "thread"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_method_awaited(kinto_url, items, tmp_path, policy, delivery):
    q = Q.policy(policy)
    expected = [] if policy == "cache_only" else EXPECTED   # a cold cache

    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db", delivery=delivery) as actx:
            got = {}
            got["all"] = ns(await actx.query(q).all())
            got["iter"] = [o.peek("N") async for o in actx.query(q)]
            got["batched"] = [o.peek("N") async for o in actx.query(q.batch(2))]
            got["ids"] = await actx.query(q).ids()
            got["count"] = await actx.query(q).count()
            got["values"] = await actx.query(q).values("N")
            first = await actx.query(q).first()
            got["first"] = None if first is None else first.peek("N")
            got["offline"] = (await actx.query(q).all()).offline
            return got, actx.sync

    got, ctx = asyncio.run(main())
    assert ctx.closed
    assert got["all"] == got["iter"] == got["batched"] == expected
    assert got["ids"] == [rid(i) for i in expected]
    assert got["count"] == len(expected)
    assert got["values"] == [{"N": i} for i in expected]
    assert got["first"] == (expected[0] if expected else None)
    assert got["offline"] is False
    # The sync path on the same store agrees.
    with tether.Context(kinto_url, items, str(tmp_path / "s.db"), username=AUTH[0], password=AUTH[1]) as sync:
        assert ns(sync.query(q).all()) == expected
        assert ns(sync.query(q).start().result(30)) == expected
        assert sync.query(q).count() == len(expected)


def test_callbacks_run_on_the_loop_thread_in_poll_mode(kinto_url, items, tmp_path):
    threads = set()

    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db") as actx:
            assert actx.sync.delivery == "poll"
            cached = []
            answer = await actx.query(Q, on_cached=lambda a: (threads.add(threading.get_ident()),
                                                             cached.append(ns(a)))).all()
            # A second time: the cache now holds the answer, given first.
            answer = await actx.query(Q, on_cached=lambda a: (threads.add(threading.get_ident()),
                                                             cached.append(ns(a)))).all()
            return cached, ns(answer), threading.get_ident()

    cached, answer, loop_thread = asyncio.run(main())
    assert cached == [[], EXPECTED] and answer == EXPECTED
    assert threads == {loop_thread}


def test_await_open_and_aclose(kinto_url, items, tmp_path):
    async def main():
        actx = await opener(kinto_url, items, tmp_path / "s.db")
        try:
            assert [e.name for e in actx.entities] == ["items"]
            assert actx.entity("items").name == "items" and actx.online
            obj = actx.object("items", rid(4))
            assert (await actx.query("items", where="N == $1", args=[4]).first()) is obj
        finally:
            await actx.aclose()
            await actx.aclose()          # idempotent
        return actx

    assert asyncio.run(main()).closed
    with pytest.raises(TypeError):
        AsyncContext("not a context")


def test_save_and_unsaved_changes(kinto, kinto_url, items, tmp_path):
    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db") as actx:
            obj = actx.insert("items", {"N": 1000, "Status": "open", "Name": "saved"}, id="saved-1")
            assert actx.has_changes and actx.change_count == 1
            report = await actx.save()
            assert report.saved == 1 and not actx.has_changes
            assert obj.id == "saved-1"
            # Left unsaved: warned at the end of `async with`, as Context's `with`.
            obj.Name = "changed"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
    assert any(issubclass(w.category, tether.UnsavedChangesWarning) for w in caught)
    try:
        assert kinto.get_record(items, "items", "saved-1")["Name"] == "saved"
    finally:
        kinto.delete_record(items, "items", "saved-1")


def test_errors_raise_when_awaited(kinto_url, items, tmp_path):
    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db") as actx:
            with pytest.raises(tether.NotFoundError):
                await actx.query("nothing").all()
            with pytest.raises(tether.InvalidError):
                await actx.query("items", where="N == 'x'").count()
            with pytest.raises(tether.InvalidError):
                await actx.query("items").values("Nope")
            with pytest.raises(TypeError):
                actx.query("items", limt=1)
            with pytest.raises(ValueError):
                actx.query("items", limit=0)
            # Still usable afterwards.
            return await actx.query(Q).count()

    assert asyncio.run(main()) == len(EXPECTED)


def test_cancelling_the_awaiting_task_cancels_the_fetch(kinto_url, items, tmp_path):
    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db") as actx:
            t = asyncio.ensure_future(actx.query("items", policy="server_only").all())
            await asyncio.sleep(0)           # started: waiting for its answer
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            return await actx.query(Q).ids()

    assert asyncio.run(main()) == [rid(i) for i in EXPECTED]


def test_live_is_an_async_iterator(kinto, kinto_url, items, tmp_path):
    async def main():
        async with opener(kinto_url, items, tmp_path / "s.db") as actx:
            seen = []
            async for a in actx.query(Q).live():
                seen.append((a.phase, ns(a.answer), a.error))
                if a.phase == "live":
                    break
            return seen

    seen = asyncio.run(main())
    assert seen[-1] == ("live", EXPECTED, None)
    assert [p for p, _, _ in seen] in (["cached", "live"], ["live"])


def test_with_connection(tmp_path):
    from test_host import DictServer
    server = DictServer(n=6)

    async def main():
        async with AsyncContext.with_connection(server, tmp_path / "dict.db") as actx:
            top = Query("rows", sort="-Rank", limit=3)
            got = (await actx.query(top).ids(), await actx.query("rows").count())
            row = await actx.query(top).first()
            row.Title = "mine"
            await actx.save()
            return got

    assert asyncio.run(main()) == (["r5", "r4", "r3"], 6)
    assert server.rows["r5"]["Title"] == "mine" and server.closes == 1
