"""Answer, a fetch's answer as a lazy list, against the real Kinto: nothing
is made before a row is read (no Object for an objects answer, none ever for
ids or values), a row read once is the same thereafter, the list's face
(len, indexes, slices, iteration, ==, +, offline), and the results handle's
lifetime (close(), the context's close, garbage collection)."""

import copy
import gc
import pickle
import threading

import pytest

import tether
from conftest import quiet_counts

N = 120


def rid(i):
    return "a%03d" % i


@pytest.fixture(scope="module")
def items(kinto, bucket):
    kinto.create_collection(bucket, "items", {
        "type": "object", "properties": {"N": {"type": "integer"}, "Name": {"type": "string"}}})
    kinto.put_records(bucket, "items", [(rid(i), {"N": i, "Name": "n%d" % i}) for i in range(N)])
    return bucket


@pytest.fixture(scope="module")
def items_total():
    return N


def live(name):
    return tether.debug_counts()[name]


def test_objects_are_made_as_rows_are_read(warm):
    base = quiet_counts()
    ans = warm.query("items", sort="N", policy="cache_only").all()
    assert type(ans) is tether.Answer and len(ans) == N and ans.offline is False
    assert live("object_handles") == base["object_handles"]     # none made by the fetch
    assert len(warm._objects) == 0
    seventh = ans[7]
    assert live("object_handles") == base["object_handles"] + 1  # that row's only
    assert ans[7] is seventh and ans[-N + 7] is seventh and seventh.peek("N") == 7
    assert [o.peek("N") for o in ans[10:13]] == [10, 11, 12]
    assert live("object_handles") == base["object_handles"] + 4
    assert [o.peek("N") for o in ans] == list(range(N))        # iteration reads the rest
    assert live("object_handles") == base["object_handles"] + N
    assert ans[7] is seventh and list(ans)[7] is seventh
    # A second answer of the same records gives the same Objects.
    again = warm.query("items", sort="N", policy="cache_only").all()
    assert again == ans and again[3] is ans[3]
    del seventh, ans, again
    assert quiet_counts()["object_handles"] == base["object_handles"]
    assert quiet_counts()["results"] == base["results"]


def test_the_list_face(warm):
    ans = warm.query("items", sort="-N", policy="cache_only", limit=5).all()
    ns = [o.peek("N") for o in ans]
    assert ns == [N - 1 - k for k in range(5)]
    objs = list(ans)
    assert ans == objs and objs == ans and not (ans != objs) and ans != objs[:4]
    assert ans != tuple(objs) and ans != [] and bool(ans)
    assert ans[::2] == objs[::2] and ans[::-1] == objs[::-1] and ans[4:1] == []
    assert ans + [1] == objs + [1] and [1] + ans == [1] + objs
    assert objs[2] in ans and ans.index(objs[2]) == 2 and ans.count(objs[2]) == 1
    assert list(reversed(ans)) == objs[::-1]
    with pytest.raises(IndexError):
        ans[5]
    with pytest.raises(TypeError):
        ans["0"]
    with pytest.raises(TypeError):
        hash(ans)
    assert repr(ans) == repr(objs)
    copied = copy.copy(ans)
    assert type(copied) is tether.Answer and copied == ans and copied.closed and not ans.closed
    ids = warm.query("items", sort="N", policy="cache_only", limit=3).ids()
    ids.offline = True
    back = pickle.loads(pickle.dumps(ids))
    assert back == [rid(0), rid(1), rid(2)] and back.offline is True
    fresh = warm.query("items", sort="N", policy="cache_only").ids()
    assert list(reversed(fresh)) == [rid(i) for i in reversed(range(N))]
    none = warm.query("items", where="N < 0", policy="cache_only").all()
    assert none == [] and type(none) is tether.Answer and not none and none.closed


@pytest.mark.parametrize("result", ["ids", "values"])
def test_ids_and_values_make_no_objects(warm, result):
    base = quiet_counts()
    r = warm.query("items", sort="N", policy="cache_only")
    ans = r.values("N", "Name") if result == "values" else r.ids()
    assert type(ans) is tether.Answer and len(ans) == N
    rows = list(ans)
    if result == "ids":
        assert rows == [rid(i) for i in range(N)] and ans[5] == rid(5)
    else:
        assert rows == [{"N": i, "Name": "n%d" % i} for i in range(N)]
        assert ans[5] is ans[5] and ans[5] is rows[5]     # a row read once stays that dict
    assert live("object_handles") == base["object_handles"] and len(warm._objects) == 0
    del ans
    assert quiet_counts()["results"] == base["results"]


def test_close_keeps_the_rows_read(warm):
    base = quiet_counts()
    with warm.query("items", sort="N", policy="cache_only").all() as ans:
        first = ans[0]
        assert not ans.closed and live("results") == base["results"] + 1
    assert ans.closed and live("results") == base["results"]
    assert ans[0] is first and len(ans) == N
    with pytest.raises(tether.HandleError):
        ans[1]
    with pytest.raises(tether.HandleError):
        list(ans)
    assert "closed" in repr(ans)
    ans.close()   # idempotent


def test_an_answer_outlives_its_context(kinto_url, items, tmp_path, open_ctx):
    """Rows not read when the context closes read afterwards as they would
    have before: ids and rows as they were, Objects as a closed context's
    (id and entity, HandleError for the rest), as a live Object becomes."""
    ctx = open_ctx(kinto_url, items, tmp_path / "c.db")
    ans = ctx.query("items", sort="N").all()
    ids = ctx.query("items", sort="N", policy="cache_only").ids()
    rows = ctx.query("items", sort="N", policy="cache_only").values("N")
    gone = ctx.query("items", sort="N", policy="cache_only").all()
    gone.close()
    first = ans[0]
    assert len(ctx._objects) == 1
    ctx.close()
    assert ans.closed and ans[0] is first and first.id == rid(0)
    assert [o.id for o in ans] == [rid(i) for i in range(N)] and ans[5] is ans[5]
    assert ans[5].entity is first.entity and repr(ans[5]) == "<tether.Object items/%s>" % rid(5)
    with pytest.raises(tether.HandleError):
        ans[5].peek("N")
    with pytest.raises(tether.HandleError):
        first.peek("N")
    assert ids == [rid(i) for i in range(N)] and rows == [{"N": i} for i in range(N)]
    with pytest.raises(tether.HandleError):
        gone[0]    # closed by the host before: its rows went with the handle
    del ans, ids, rows, first, gone
    gc.collect()   # releasing what the closed context took is quiet


def test_threads_reading_one_answer_get_one_object_per_row(warm):
    ans = warm.query("items", sort="N", policy="cache_only").all()
    got = [None] * 4
    start = threading.Barrier(4)

    def read(k):
        start.wait()
        got[k] = [ans[i] for i in range(N)] if k % 2 else list(ans)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(all(a is b for a, b in zip(g, got[0])) for g in got)
    assert [o.peek("N") for o in got[0]] == list(range(N))


def test_task_and_callback_answers_are_lazy(warm, recorder):
    base = quiet_counts()
    rec = recorder()
    task = warm.query("items", sort="N", policy="cache_then_server").start(rec)
    assert task.result(10) == task.objects and len(task.objects) == N
    assert live("object_handles") == base["object_handles"]
    assert isinstance(task.cached, tether.Answer) and task.cached[0] is task.objects[0]
    del task, rec
    assert quiet_counts()["results"] == base["results"]
