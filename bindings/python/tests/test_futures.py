"""Tasks are futures (issue 25): a fetch's Task and a save's SaveTask are
concurrent.futures.Futures of their final answer (result, exception, done,
cancel, add_done_callback, concurrent.futures.wait and as_completed) and
awaitables, in both delivery modes; callbacks and observers get an
exception or None, never an integer status."""

import asyncio
import concurrent.futures
import threading

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"}, "Rank": {"type": "integer"}}}
N = 30


@pytest.fixture(scope="module")
def cards(kinto, bucket):
    kinto.create_collection(bucket, "cards", SCHEMA)
    kinto.put_records(bucket, "cards", [("c%02d" % i, {"Name": "card%d" % i, "Rank": i}) for i in range(N)])
    return bucket


def test_a_task_is_a_future_of_its_final_answer(cards, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, cards, tmp_path / "s.db")
    heard = []
    task = ctx.query("cards", sort="Rank", policy="server_only").start()
    task.add_done_callback(heard.append)
    assert isinstance(task, concurrent.futures.Future)
    final = task.result(30)
    assert [o.peek("Rank") for o in final] == list(range(N))
    assert task.done() and not task.running() and not task.cancelled()
    assert task.exception() is None and task.error is None and task.status == 0
    assert heard == [task], "add_done_callback ran once, with the task"
    # start() answers Objects only: the counts are the answers' lengths
    counts = [ctx.query("cards", where="Rank < $1", args=[n]).start() for n in (5, 10, 20)]
    done, not_done = concurrent.futures.wait(counts, timeout=30)
    assert not not_done and sorted(len(t.result()) for t in done) == [5, 10, 20]
    assert sorted(len(t.result()) for t in concurrent.futures.as_completed(counts, timeout=30)) == [5, 10, 20]
    late = []
    task.add_done_callback(late.append)   # on a finished future: at once
    assert late == [task]


def test_a_failed_fetch_raises_its_error_from_result(cards, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, cards, tmp_path / "s.db")
    ctx.query("cards").all()
    faultproxy.set("status", status=500, match="/records")
    task = ctx.query("cards", policy="server_only").start()
    with pytest.raises(tether.ServerError) as caught:
        task.result(30)
    assert task.exception() is caught.value is task.error and caught.value.status == tether.E_SERVER
    assert len(task.objects) == N, "the final answer on error: what the cache held"


def test_cancel_ends_the_task_with_task_cancelled_error(cards, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, cards, tmp_path / "s.db")
    faultproxy.set("delay", delay=2.0, match="/records")
    finals = []
    task = ctx.query("cards", policy="server_only").start(
        lambda phase, error, answer: finals.append(error) if phase == "final" else None)
    assert task.cancel() is True
    error = task.exception(30)
    assert isinstance(error, tether.TaskCancelledError) and error.status == tether.E_CANCELLED
    assert not isinstance(error, asyncio.CancelledError)
    with pytest.raises(tether.TaskCancelledError):
        task.result()
    assert finals == [error], "the callback's final error is the task's exception"
    assert task.cancel() is False, "finished: nothing to cancel"


def test_result_times_out_without_losing_the_task(cards, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, cards, tmp_path / "s.db")
    faultproxy.set("delay", delay=2.0, match="/records")
    task = ctx.query("cards", policy="server_only").start()
    with pytest.raises(concurrent.futures.TimeoutError):
        task.result(0.01)
    assert not task.done()
    assert len(task.result(30)) == N


def test_poll_mode_result_polls(cards, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, cards, tmp_path / "s.db", delivery="poll")
    task = ctx.query("cards", sort="Rank").start()
    assert [o.id for o in task.result(30)[:3]] == ["c00", "c01", "c02"]


@pytest.mark.parametrize("delivery", ["thread", "poll"])
def test_a_task_is_awaitable(cards, kinto_url, tmp_path, open_ctx, delivery):
    ctx = open_ctx(kinto_url, cards, tmp_path / "s.db", delivery=delivery)

    async def main():
        count = len(await ctx.query("cards").start())
        objs = await ctx.query("cards", sort="-Rank", limit=2).start()
        report = await ctx.start_save()
        return count, [o.id for o in objs], report.saved

    assert asyncio.run(main()) == (N, ["c29", "c28"], 0)


def test_awaiting_a_cancelled_fetch_raises_task_cancelled_error(cards, tmp_path, open_ctx, faultproxy):
    ctx = open_ctx(faultproxy.url, cards, tmp_path / "s.db")
    faultproxy.set("delay", delay=2.0, match="/records")

    async def main():
        task = ctx.query("cards", policy="server_only").start()
        task.cancel()
        with pytest.raises(tether.TaskCancelledError):
            await task
        # Cancelling the awaiting asyncio task cancels the fetch: asyncio's error there.
        other = ctx.query("cards", policy="server_only").start()
        waiter = asyncio.ensure_future(asyncio.wait_for(other, 0.05))
        with pytest.raises(asyncio.TimeoutError):
            await waiter
        return other

    other = asyncio.run(main())
    assert isinstance(other.exception(30), tether.TaskCancelledError)


@pytest.mark.parametrize("delivery", ["thread", "poll"])
def test_waiting_inside_a_callback_is_busy(cards, kinto_url, tmp_path, open_ctx, delivery):
    ctx = open_ctx(kinto_url, cards, tmp_path / "s.db", delivery=delivery)
    seen = []
    started = threading.Event()
    holder = {}

    def cb(phase, error, answer):
        if phase == "final":
            started.wait(10)
            try:
                holder["task"].result(1)   # its own: it ends after this callback
            except BaseException as e:     # recorded for the assertion
                seen.append(e)

    holder["task"] = task = ctx.query("cards", policy="cache_only").start(cb)
    started.set()
    assert task.result(30) == []
    assert len(seen) == 1 and isinstance(seen[0], tether.BusyError), seen


def test_observers_and_saves_get_an_exception_or_none(cards, kinto, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, cards, tmp_path / "s.db")
    ctx.query("cards").all()
    card = ctx.object("cards", "c01")
    told = []
    changed = threading.Event()

    def on_change(obj, key, error):
        told.append(error)
        if error is None:
            changed.set()

    observer = card.observe("Name", on_change)
    card.Name = "renamed"
    assert changed.wait(10)
    saves = []
    report = ctx.start_save(callback=lambda error, report: saves.append((error, report))).result(30)
    assert report.saved == 1 and saves == [(None, report)]
    observer.remove()
    assert observer.removed or changed.wait(0)
    ctx.close()
    assert told[0] is None and isinstance(told[-1], tether.TaskCancelledError)
    assert not any(isinstance(e, int) for e in told)
    kinto.patch_record(cards, "cards", "c01", {"Name": "card1"})
