"""Live fetches (fetch options version 5, PHASE_LIVE) against the real Kinto.

A live fetch answers, then answers again each time the records it matches
change in its context. Changes here are made on Kinto and brought into the
context by another, non-live fetch: once an entity has been fetched whole,
its store is synced and a later fetch asks only for what changed.

Each test keeps its own bucket and a model of what Kinto holds (`Items`),
so every expected answer is computed from the data, not from another fetch.
Each live answer's changes are applied to the previous answer's ids, by the
rules of tether.h (deletions descending, then insertions ascending, a move
being both), and must give the new answer exactly.

Both delivery modes: callbacks (ctx.query(...).live(callback)), and
asyncio (AsyncContext's query(...).live()), whose loop's exit must cancel
the fetch and wait for its FINAL.
"""

import asyncio
import gc
import logging
import time

import pytest

import tether
from conftest import quiet_counts, wait_until, finished

SCHEMA = {"type": "object",
          "properties": {"N": {"type": "integer"}, "G": {"type": "string"},
                         "X": {"type": "integer"}}}
WHERE = "G == 'a'"      # the odd records of the seed
QUIET = 1.0             # how long "nothing comes" is watched (the library gathers 10 ms)
DELIVERIES = ["thread", "poll"]


def rid(i):
    return "r%02d" % i


class Items:
    """The "items" collection of a bucket of its own, and what Kinto holds
    in it, kept here as each write is made."""

    def __init__(self, kinto, bucket):
        self.kinto, self.bucket = kinto, bucket
        self.state = {rid(i): {"N": i, "G": "a" if i % 2 else "b"} for i in range(10)}
        kinto.create_collection(bucket, "items", SCHEMA)
        kinto.put_records(bucket, "items", list(self.state.items()))

    def put(self, id, data):
        self.kinto.put_record(self.bucket, "items", id, data)
        self.state[id] = dict(data)

    def patch(self, id, data):
        self.kinto.patch_record(self.bucket, "items", id, data)
        self.state[id].update(data)

    def delete(self, id):
        self.kinto.delete_record(self.bucket, "items", id)
        del self.state[id]

    def expected(self, g="a"):
        """The ids WHERE matches, in the order sort="N" gives (ties by id)."""
        return [i for i, d in sorted(self.state.items(), key=lambda kv: (kv[1]["N"], kv[0]))
                if d.get("G") == g]

    def mix(self):
        """One write of each kind that changes the answer to WHERE, sorted by
        N: r03 moves to the end, r20 comes in second, r05 leaves, r07 changes
        in place (not its N), and r04, outside the predicate, changes too."""
        self.patch("r03", {"N": 100})
        self.put("r20", {"N": 2, "G": "a"})
        self.delete("r05")
        self.patch("r07", {"X": 1})
        self.patch("r04", {"N": 44})


@pytest.fixture
def items(kinto):
    bucket = kinto.create_bucket()
    yield Items(kinto, bucket)
    kinto.delete_bucket(bucket)


def ids_of(answer):
    if answer and isinstance(answer[0], dict):
        return [row["id"] for row in answer]
    return [a if isinstance(a, str) else a.id for a in answer]


def apply_changes(previous, changes, current):
    """`previous` turned into the new answer by `changes`, as tether.h says:
    rows deleted or moved out by old index, descending, then rows inserted
    (from `current`) or moved in (the same row) by new index, ascending.
    Checks on the way that every index is in range and each row goes once."""
    rows = list(previous)
    out = sorted(changes.deleted + [old for old, _ in changes.moved], reverse=True)
    assert len(set(out)) == len(out) and all(0 <= i < len(previous) for i in out), changes
    for i in out:
        del rows[i]
    into = sorted([(new, current[new]) for new in changes.inserted]
                  + [(new, previous[old]) for old, new in changes.moved])
    assert len({n for n, _ in into}) == len(into), changes
    for new, row in into:
        assert 0 <= new <= len(rows), changes
        rows.insert(new, row)
    for old, new in changes.updated:     # in place: the same row at both ends
        assert previous[old] == current[new], changes
    return rows


def check_step(previous, changes, current):
    """The changes turn the previous ids into the current ones, and tell
    the rows the mix() writes moved as they moved."""
    assert isinstance(changes, tether.Changes), changes
    assert apply_changes(previous, changes, current) == current
    deleted = [previous[i] for i in changes.deleted]
    inserted = [current[i] for i in changes.inserted]
    moved = [previous[o] for o, _ in changes.moved]
    updated = [previous[o] for o, _ in changes.updated]
    assert (deleted, inserted, moved, updated) == (["r05"], ["r20"], ["r03"], ["r07"]), changes


def pump(ctx, seconds):
    """Lets callbacks come for `seconds` (polling a poll-mode context)."""
    wait_until(lambda: False, timeout=seconds, poll=ctx if ctx.delivery == "poll" else None)


def settle_tasks(base, timeout=5.0):
    """The library's task count once it is back at `base` (a task is freed
    just after its FINAL callback returns)."""
    return wait_until(lambda: tether.debug_counts()["tasks"] == base, timeout=timeout) and base


def answers(rec):
    """The LiveAnswers a recorder took as live()'s callback."""
    return [c[0] for c in rec.calls]


def live_calls(rec):
    return [a for a in answers(rec) if a.phase == "live"]


# ------------------------------------------------------------------ callbacks

@pytest.mark.parametrize("delivery", DELIVERIES)
def test_callback_answers_then_changes(items, kinto_url, tmp_path, open_ctx, recorder, delivery):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    poll = ctx if delivery == "poll" else None
    base = quiet_counts()
    rec = recorder()
    task = ctx.query("items", sort="N", where=WHERE).live(rec)
    assert task.live is True
    assert rec.wait(lambda c: live_calls(rec), ctx=poll)
    # The default policy: the (cold) cache's answer, then the live one, the
    # answer a FINAL would be; each LiveAnswer takes its changes too.
    a = answers(rec)[0]
    assert (a.phase, a.status, a.answer, a.changes, a.error) == ("cached", 0, [], None, None)
    a = answers(rec)[1]
    assert (a.phase, a.status, a.message, a.changes, a.error) == ("live", 0, "", None, None)
    answer = a.answer
    first = ids_of(answer)
    assert first == items.expected() == ["r01", "r03", "r05", "r07", "r09"]
    assert task.answer is answer and task.changes is None and not task.done()
    # The empty cached answer's handle is released at once; the live one's
    # goes with its Answer (held by the task and the recorder).
    assert wait_until(lambda: tether.debug_counts()["results"] == base["results"] + 1, timeout=5)

    # A whole fetch syncs the store; its records are those the live fetch
    # holds, unchanged: no answer.
    ctx.query("items").all()
    pump(ctx, QUIET)
    assert len(rec.calls) == 2, rec.calls[2:]

    items.mix()
    ctx.query("items").all()          # synced: asks only for what changed
    assert rec.wait(lambda c: len(c) == 3, ctx=poll), rec.calls
    a = answers(rec)[2]
    assert (a.phase, a.status) == ("live", 0)
    answer, changes = a.answer, a.changes
    second = ids_of(answer)
    assert second == items.expected() == ["r01", "r20", "r07", "r09", "r03"]
    check_step(first, changes, second)
    assert task.answer is answer and task.changes is changes
    # The mix() changed r04 too, which the live fetch does not match.
    assert ctx.object("items", "r04").peek("N") == 44

    # A change outside the predicate only, brought in for sure: nothing comes.
    items.patch("r06", {"N": 66})
    ctx.query("items").all()
    assert ctx.object("items", "r06").peek("N") == 66
    pump(ctx, QUIET)
    assert len(rec.calls) == 3, rec.calls[3:]

    # Cancelled: the task ends cancelled (live() hands its callback the
    # answers, not the FINAL), and nothing comes after.
    assert task.cancel() is True
    assert finished(task, 10)
    assert len(rec.calls) == 3, rec.calls[3:]
    assert isinstance(task.error, tether.TaskCancelledError) and task.exception() is task.error
    items.patch("r01", {"N": -1})
    ctx.query("items").all()
    pump(ctx, QUIET)
    assert len(rec.calls) == 3, rec.calls[3:]
    assert ctx.pending == 0 and task.callback is None
    assert settle_tasks(base["tasks"]) == base["tasks"]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_close_ends_live_fetch_with_its_final(items, kinto_url, tmp_path, open_ctx, recorder,
                                              delivery):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    rec = recorder()
    task = ctx.query("items", sort="N", policy="server_only").live(rec)
    assert rec.wait(lambda c: live_calls(rec), ctx=ctx if delivery == "poll" else None)
    ctx.close()
    # Close delivers the FINAL before it returns, in both modes: the task is done.
    assert task.done() and [(a.phase, a.status) for a in answers(rec)] == [("live", 0)]
    assert isinstance(task.error, tether.TaskCancelledError) and ctx.pending == 0


def test_live_refuses_a_callback_it_cannot_call(items, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db")
    tasks = quiet_counts()["tasks"]
    with pytest.raises(TypeError, match="callback must be callable"):
        ctx.query("items").live(None)
    with pytest.raises(tether.InvalidError):
        ctx.query("items", where="N ==").live(lambda a: None)
    # Nothing was started.
    assert ctx.pending == 0 and tether.debug_counts()["tasks"] == tasks
    # The plain query, as before.
    assert ids_of(ctx.query("items", sort="N").all()) == [rid(i) for i in range(10)]


# ------------------------------------------------------------------ result types

# live() answers Objects only: the ids/values/count live answers of
# tether_fetch_options.result have no form in the query API (issue 25).

@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("result", ["objects"])
def test_result_types(items, kinto_url, tmp_path, open_ctx, recorder, delivery, result):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    poll = ctx if delivery == "poll" else None
    ctx.query("items").all()                              # synced from here
    rec = recorder()
    task = ctx.query("items", sort="N", where=WHERE, policy="cache_only").live(rec)
    assert rec.wait(lambda c: live_calls(rec), ctx=poll)
    first = live_calls(rec)[0].answer
    items.mix()
    ctx.query("items").all()
    if result == "count":
        # Rows came and went, the count did not move: a count answer tells nothing.
        assert first == 5 == len(items.expected())
        pump(ctx, QUIET)
        assert len(live_calls(rec)) == 1, rec.calls
    else:
        assert rec.wait(lambda c: len(live_calls(rec)) == 2, ctx=poll), rec.calls
        a = live_calls(rec)[1]
        status, second, changes = a.status, a.answer, a.changes
        assert status == 0
        assert ids_of(first) == ["r01", "r03", "r05", "r07", "r09"]
        assert ids_of(second) == items.expected()
        check_step(ids_of(first), changes, ids_of(second))
        if result == "values":
            assert second[-1] == {"id": "r03", "N": 100}
    # One more matching record.
    n = len(live_calls(rec))
    items.put("r30", {"N": 30, "G": "a"})
    ctx.query("items").all()
    assert rec.wait(lambda c: len(live_calls(rec)) == n + 1, ctx=poll), rec.calls
    a = live_calls(rec)[-1]
    status, last, changes = a.status, a.answer, a.changes
    assert status == 0 and isinstance(changes, tether.Changes)
    if result == "count":
        assert last == 6 and not changes           # no rows: no changes
    else:
        assert ids_of(last) == items.expected()
        assert changes.inserted == [ids_of(last).index("r30")]
        assert not (changes.deleted or changes.moved or changes.updated)
    task.cancel()
    assert finished(task, 10) and ctx.pending == 0


# ------------------------------------------------------------------ asyncio

@pytest.mark.parametrize("delivery", DELIVERIES)
def test_async_for_answers_and_break_cancels(items, kinto_url, tmp_path, open_ctx, caplog,
                                             delivery):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    base = quiet_counts()
    got, seen = [], {}

    async def main():
        actx = tether.AsyncContext(ctx)   # poll mode: attached to the loop until detach()
        async for a in actx.query("items", sort="N", where=WHERE).live():
            assert isinstance(a, tether.LiveAnswer)
            got.append(a)
            if a.phase == "live" and a.changes is None:
                seen["task"] = next(iter(ctx._pending.values()))
                await actx.query("items").all()    # synced: later fetches ask for changes
                items.mix()
                await actx.query("items").all()
            elif a.phase == "live":
                break
        # Left by break: the iterator is gone, the fetch cancelled and its
        # FINAL delivered before the next statement.
        seen["pending_after_break"] = ctx.pending
        ctx.detach()                                # AsyncContext's hold: what is left is the fetch's
        seen["loop_after_break"] = ctx._loop
        # Nothing comes after: another change in the predicate, synced.
        items.patch("r01", {"N": -1})
        await actx.query("items").all()
        await asyncio.sleep(QUIET)

    with caplog.at_level(logging.WARNING, logger="tether"):
        asyncio.run(asyncio.wait_for(main(), 60))
    assert [a.phase for a in got] == ["cached", "live", "live"]
    assert got[0].answer == [] and got[0].changes is None
    first, second = ids_of(got[1].answer), ids_of(got[2].answer)
    assert first == ["r01", "r03", "r05", "r07", "r09"]
    assert second == ["r01", "r20", "r07", "r09", "r03"]
    assert all(a.status == 0 and a.error is None for a in got)
    check_step(first, got[2].changes, second)
    task = seen["task"]
    assert seen["pending_after_break"] == 0 and task.done()
    assert isinstance(task.error, tether.TaskCancelledError)
    assert seen["loop_after_break"] is None         # poll mode: the reader is gone
    assert task.answer is got[2].answer             # no answer after the break
    assert not [r for r in caplog.records if "unknown or finished" in r.getMessage()]
    assert settle_tasks(base["tasks"]) == base["tasks"]
    del got[:], task
    seen.clear()     # the answers' handles go with them
    assert wait_until(lambda: tether.debug_counts()["results"] == base["results"], timeout=5)


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_async_timeout_then_answer_and_aclose(items, kinto_url, tmp_path, open_ctx, delivery):
    """A wait_for that times out (nothing matched changed) leaves the
    iterator working; aclose() cancels and waits for the FINAL; the
    iterator then ends."""
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    base = quiet_counts()

    async def main():
        actx = tether.AsyncContext(ctx)   # poll mode: attached to the loop until detach()
        await actx.query("items").all()                        # synced
        live = actx.query("items", sort="N", where=WHERE, policy="cache_only").live()
        first = await asyncio.wait_for(live.__anext__(), 10)
        assert (first.phase, first.changes) == ("live", None)
        items.patch("r04", {"N": 44})                          # outside WHERE
        await actx.query("items").all()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(live.__anext__(), QUIET)
        items.mix()
        await actx.query("items").all()
        second = await asyncio.wait_for(live.__anext__(), 10)
        check_step(ids_of(first.answer), second.changes, ids_of(second.answer))
        await live.aclose()
        assert live.task.done() and isinstance(live.task.error, tether.TaskCancelledError)
        assert ctx.pending == 0
        with pytest.raises(StopAsyncIteration):
            await live.__anext__()
        await live.aclose()                                   # idempotent
        ctx.detach()                                          # AsyncContext's hold
        return live.task

    task = asyncio.run(asyncio.wait_for(main(), 60))
    assert task.done() and ctx._loop is None
    assert settle_tasks(base["tasks"]) == base["tasks"]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_async_context_close_ends_iteration(items, kinto_url, tmp_path, open_ctx, delivery):
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    base = quiet_counts()

    async def main():
        actx = tether.AsyncContext(ctx)   # poll mode: attached to the loop until detach()
        phases = []
        async with actx.query("items", sort="N", policy="server_only").live() as live:
            async for a in live:
                phases.append(a.phase)
                ctx.close()      # the loop ends, normally, after this answer
        return phases, live

    phases, live = asyncio.run(asyncio.wait_for(main(), 30))
    assert phases == ["live"]
    assert live.task.done() and isinstance(live.task.error, tether.TaskCancelledError)
    assert settle_tasks(base["tasks"]) == base["tasks"]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_async_batched_results_are_released(items, kinto_url, tmp_path, open_ctx, delivery):
    """With batch > 0 each answer is a Results the iterator owns: closed
    when the next answer is taken, and at the end."""
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery=delivery)
    base = quiet_counts()

    async def main():
        actx = tether.AsyncContext(ctx)   # poll mode: attached to the loop until detach()
        await actx.query("items").all()
        answers = []
        async for a in actx.query("items", sort="N", where=WHERE, policy="cache_only",
                                  batch=2).live():
            assert isinstance(a.answer, tether.Results) and not a.answer.closed
            answers.append((a, ids_of(list(a.answer))))
            if len(answers) == 1:
                items.mix()
                await actx.query("items").all()
            else:
                assert answers[0][0].answer.closed       # taken the next: closed
                break
        return answers

    answers = asyncio.run(asyncio.wait_for(main(), 60))
    (a1, first), (a2, second) = answers
    assert a2.answer.closed                                # left the loop: closed
    assert second == items.expected()
    check_step(first, a2.changes, second)
    del a1, a2, answers
    gc.collect()
    assert wait_until(lambda: tether.debug_counts()["results"] == base["results"], timeout=5)
    assert settle_tasks(base["tasks"]) == base["tasks"]


def test_async_first_answer_error_then_watches(items, tmp_path, open_ctx, faultproxy):
    """The first live answer carries the server's error with the cache's
    answer, and the fetch goes on watching the cache."""
    ctx = open_ctx(faultproxy.url, items.bucket, tmp_path / "s.db", delivery="poll")

    async def main():
        actx = tether.AsyncContext(ctx)   # poll mode: attached to the loop until detach()
        await actx.query("items").all()                        # synced
        faultproxy.set("status", status=500, match="/records")
        live = actx.query("items", sort="N", where=WHERE, policy="server_only").live()
        first = await asyncio.wait_for(live.__anext__(), 20)
        faultproxy.reset()
        items.mix()
        await actx.query("items").all()
        second = await asyncio.wait_for(live.__anext__(), 10)
        await live.aclose()
        return first, second

    first, second = asyncio.run(asyncio.wait_for(main(), 60))
    assert first.phase == "live" and first.status == tether.E_SERVER
    assert isinstance(first.error, tether.ServerError)
    assert ids_of(first.answer) == ["r01", "r03", "r05", "r07", "r09"]   # the cache's
    assert second.status == 0 and second.error is None
    check_step(ids_of(first.answer), second.changes, ids_of(second.answer))


def test_live_validates_at_once(items, kinto_url, tmp_path, open_ctx):
    threaded = tether.AsyncContext(open_ctx(kinto_url, items.bucket, tmp_path / "t.db"))
    with pytest.raises(RuntimeError):
        threaded.query("items").live()                     # no running loop
    ctx = open_ctx(kinto_url, items.bucket, tmp_path / "s.db", delivery="poll")
    with pytest.raises(RuntimeError):
        tether.AsyncContext(ctx)                           # poll mode: no loop to attach to

    async def main():
        actx = tether.AsyncContext(ctx)
        with pytest.raises(tether.NotFoundError):
            actx.query("nope").live()
        with pytest.raises(tether.InvalidError):
            actx.query("items", where="N ==").live()
        assert ctx.pending == 0
        ctx.detach()
        assert ctx._loop is None                          # nothing held

    asyncio.run(main())
