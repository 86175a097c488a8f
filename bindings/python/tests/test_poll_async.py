"""Poll delivery (fileno + select) and asyncio."""

import asyncio
import select
import threading
import time

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"W": {"type": "string"}, "I": {"type": "integer"}}}
N = 30


@pytest.fixture(scope="module")
def words(kinto, bucket):
    kinto.create_collection(bucket, "words", SCHEMA)
    kinto.put_records(bucket, "words", [("w%02d" % i, {"W": "word%d" % i, "I": i})
                                        for i in range(N)])
    return bucket


def test_poll_mode_select(words, kinto_url, tmp_path, open_ctx, recorder):
    ctx = open_ctx(kinto_url, words, tmp_path / "s.db", delivery="poll")
    fd = ctx.fileno()
    assert isinstance(fd, int) and fd >= 0
    threads = []
    rec = recorder()

    def cb(*args):
        threads.append(threading.get_ident())
        rec(*args)

    task = ctx.query("words").start(cb)
    time.sleep(0.5)
    assert rec.calls == []                  # nothing runs outside poll()
    deadline = time.monotonic() + 15
    while not task.done() and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 5)
        if r:
            ctx.poll(0)
    assert task.done()
    assert [c[0] for c in rec.calls] == ["cached", "final"]
    assert len(rec.calls[1][3]) == N
    assert set(threads) == {threading.get_ident()}
    # nothing left: the fd is not readable, poll delivers nothing
    assert select.select([fd], [], [], 0)[0] == []
    assert ctx.poll(0) == 0
    # a query polls by itself
    cached = []
    final = ctx.query("words", on_cached=cached.append).all()
    assert len(cached) == 1 and len(cached[0]) == N and len(final) == N


def test_poll_blocking_timeout(words, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, words, tmp_path / "s.db", delivery="poll")
    t0 = time.monotonic()
    assert ctx.poll(200) == 0
    assert 0.1 < time.monotonic() - t0 < 2.0
    task = ctx.query("words", policy="cache_only").start()
    assert ctx.poll(5000) == 1 and task.done()


def test_asyncio_poll_mode(words, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, words, tmp_path / "s.db", delivery="poll")

    async def main():
        actx = tether.AsyncContext(ctx)      # attaches the poll-mode context to the loop
        a = await actx.query("words", sort="I").all()
        b, c = await asyncio.gather(actx.query("words", sort="-I", limit=3).all(),
                                    actx.query("words", policy="cache_only").all())
        ctx.detach()
        return a, b, c

    a, b, c = asyncio.run(main())
    assert [o.peek("I") for o in a] == list(range(N))
    assert [o.peek("I") for o in b] == [N - 1, N - 2, N - 3]
    assert len(c) == N and b[0] is a[-1]
    assert ctx._loop is None                 # reader removed when idle
    assert ctx.pending == 0


def test_asyncio_thread_mode(words, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, words, tmp_path / "s.db")
    async def main():
        return await tether.AsyncContext(ctx).query("words", limit=5, sort="W").all()
    objs = asyncio.run(main())
    assert [o.peek("W") for o in objs] == sorted("word%d" % i for i in range(N))[:5]


def test_asyncio_errors_and_cancel(words, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, words, tmp_path / "s.db", delivery="poll")

    async def main():
        actx = tether.AsyncContext(ctx)
        faultproxy.set("status", status=500, match="/records")
        with pytest.raises(tether.ServerError):
            await actx.query("words", policy="server_only").all()
        # cancelling the awaiting asyncio task cancels the fetch
        faultproxy.set("delay", delay=2.0, match="/records")
        t = asyncio.ensure_future(actx.query("words", policy="server_only").all())
        await asyncio.sleep(0.3)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        for _ in range(100):                 # its final cancelled callback is polled
            if ctx.pending == 0:
                break
            await asyncio.sleep(0.02)
        assert ctx.pending == 0
        # closing the context fails the awaiting fetch with tether.TaskCancelledError
        t = asyncio.ensure_future(actx.query("words", policy="server_only").all())
        await asyncio.sleep(0.3)
        ctx.close()
        with pytest.raises(tether.TaskCancelledError):
            await t

    asyncio.run(main())


def test_asyncio_attach_observers(words, kinto, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, words, tmp_path / "s.db", delivery="poll")

    async def main():
        actx = tether.AsyncContext(ctx)      # attaches it
        await actx.query("words").all()
        o = ctx.object("words", "w05")
        got = asyncio.get_running_loop().create_future()

        def cb(obj, key, error):
            if error is None and not got.done():
                got.set_result(obj.peek("W"))
        ob = o.observe("W", cb)
        kinto.patch_record(words, "words", "w05", {"W": "five"})
        assert o.get("W") == "word5"
        value = await asyncio.wait_for(got, 10)
        ob.remove()
        await asyncio.sleep(0.1)
        ctx.detach()
        return value

    assert asyncio.run(main()) == "five"
    assert ctx.pending == 0
