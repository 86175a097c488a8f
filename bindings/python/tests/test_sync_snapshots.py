"""Sync answers that follow the server whatever it does between or during
fetches (issue 29): listings read as snapshots though the server changes
between their pages, collections recreated or restored, partial answers,
statuses across reopens. Through scripts/faultproxy.py in front of the real
Kinto, whose paginate_by is 50.
"""

import threading
import time
import uuid

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"},
                                           "Rank": {"type": "integer"}}}


def rid(i):
    return "r%03d" % i


@pytest.fixture
def seed(kinto, bucket):
    """seed(n) -> the name of a new collection of n records r000.. (Rank i)."""
    def make(n, schema=SCHEMA):
        name = "s" + uuid.uuid4().hex[:12]
        kinto.create_collection(bucket, name, schema)
        kinto.put_records(bucket, name, [(rid(i), {"Name": "n%d" % i, "Rank": i}) for i in range(n)])
        return name
    return make


def state(objs):
    return [(o.id, o.peek("Name"), o.peek("Rank")) for o in objs]


def cache_state(ctx, name):
    objs = ctx.query(name, policy="cache_only", sort="Rank").all()
    return state(objs)


def server_state(kinto, bucket, name):
    """The server's records, sorted by Rank, page after page (by Rank ranges:
    a few records here)."""
    records, low = [], None
    while True:
        query = "_sort=Rank,id&_limit=40" + ("&gt_Rank=%d" % low if low is not None else "")
        page = kinto.request("GET", "/buckets/%s/collections/%s/records?%s" % (bucket, name, query))["data"]
        records += page
        if len(page) < 40:
            return [(r["id"], r.get("Name"), r.get("Rank")) for r in records]
        low = page[-1]["Rank"]


def between_pages(kinto, proxy, change):
    """Holds the listing's second page (its `_token=` request) a moment, and
    makes `change` on the server meanwhile, straight to Kinto."""
    proxy.set("delay", delay=1.0, match="_token=", count=1, reset_log=True)
    thread = threading.Timer(0.3, change)
    thread.start()
    return thread


# ------------------------------------------------------------------ case 4

def test_record_moved_between_pages_is_in_the_answer(kinto, bucket, seed, tmp_path, open_ctx, faultproxy):
    name = seed(60)                                  # 2 pages
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    # r055 moves to the first page while the second is asked for: the
    # listing's pages, sorted by Rank, name it nowhere.
    moved = between_pages(kinto, faultproxy, lambda: kinto.put_record(
        bucket, name, rid(55), {"Name": "moved", "Rank": -1}))
    objs = ctx.query(name, sort="Rank").all()
    moved.join()
    want = server_state(kinto, bucket, name)
    assert want[0] == (rid(55), "moved", -1)
    assert state(objs) == want
    assert cache_state(ctx, name) == want
    # The catch-up asked what changed since the first page.
    targets = [e["target"] for e in faultproxy.state()["entries"] if "/records" in e["target"]]
    assert any("_since=" in t for t in targets), targets


def test_relisting_never_deletes_what_existed_throughout(kinto, bucket, seed, tmp_path, open_ctx,
                                                          faultproxy):
    name = seed(60)
    store = tmp_path / "s.db"
    ctx = open_ctx(faultproxy.url, bucket, store)
    ctx.query(name, sort="Rank").all()
    ctx.close()
    # A model change: the reopened store lists everything again, and deletes
    # what that listing did not name.
    kinto.create_collection(bucket, name, {"type": "object", "properties": dict(
        SCHEMA["properties"], Extra={"type": "string"})})
    ctx = open_ctx(faultproxy.url, bucket, store)
    obj = ctx.object(name, rid(55))
    told = []
    observer = obj.observe("Rank", lambda *a: told.append(a))
    moved = between_pages(kinto, faultproxy, lambda: kinto.put_record(
        bucket, name, rid(55), {"Name": "moved", "Rank": -1}))
    objs = ctx.query(name, sort="Rank").all()
    moved.join()
    want = server_state(kinto, bucket, name)
    assert state(objs) == want
    assert cache_state(ctx, name) == want
    assert obj.peek("Rank") == -1
    observer.remove()


# ------------------------------------------------------------------ cases 2, 5

def test_recreated_collection_leaves_its_old_records(kinto, bucket, seed, tmp_path, open_ctx, faultproxy):
    name = seed(3)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    objs = ctx.query(name, sort="Rank").all()
    b = objs[1]
    told = []
    observer = b.observe("Name", lambda *a: told.append(a))
    kinto.request("DELETE", "/buckets/%s/collections/%s" % (bucket, name))
    kinto.create_collection(bucket, name, SCHEMA)
    kinto.put_records(bucket, name, [(rid(0), {"Name": "new", "Rank": 0}), (rid(3), {"Name": "n3", "Rank": 3})])
    objs = ctx.query(name, sort="Rank").all()
    want = [(rid(0), "new", 0), (rid(3), "n3", 3)]
    assert state(objs) == want
    assert cache_state(ctx, name) == want
    with pytest.raises(tether.NotFoundError):
        b.peek("Name")
    assert told, "b's observer was not told"
    observer.remove()


@pytest.mark.parametrize("synced_delete", [False, True])
def test_restored_older_record_is_seen(kinto, bucket, seed, tmp_path, open_ctx, faultproxy, synced_delete):
    name = seed(3)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    ctx.query(name, sort="Rank").all()
    old = kinto.get_record(bucket, name, rid(2))
    kinto.patch_record(bucket, name, rid(2), {"Name": "newer"})
    ctx.query(name, sort="Rank").all()
    kinto.delete_record(bucket, name, rid(2))
    if synced_delete:
        ctx.query(name, sort="Rank").all()
    # A backup put back: the older content with its older version.
    kinto.put_record(bucket, name, rid(2), old)
    assert kinto.get_record(bucket, name, rid(2))["last_modified"] == old["last_modified"]
    objs = ctx.query(name, sort="Rank").all()
    want = server_state(kinto, bucket, name)
    assert want[2] == (rid(2), "n2", 2)
    assert state(objs) == want
    assert cache_state(ctx, name) == want


# ------------------------------------------------------------------ case 3

def test_partial_answer_never_overwrites_values(kinto, bucket, seed, tmp_path, open_ctx):
    name = seed(3)
    ctx = open_ctx(kinto.url, bucket, tmp_path / "s.db")
    ctx.query(name, sort="Rank").all()
    # r002 changes on the server: its partial record is of another version.
    kinto.patch_record(bucket, name, rid(2), {"Name": "newer"})
    objs = ctx.query(name, policy="server_only", server_query="_fields=id&_sort=id").all()
    assert [o.id for o in objs] == [rid(0), rid(1), rid(2)]   # the server's answer
    assert ctx.object(name, rid(1)).peek("Name") == "n1"
    assert ctx.object(name, rid(1)).peek("Rank") == 1
    assert ctx.object(name, rid(2)).peek("Name") == "n2"       # left as it was, not nulled
    objs = ctx.query(name, policy="cache_only", where="Name == 'n1'").all()
    assert [o.id for o in objs] == [rid(1)]
    # The row left alone is not fresh: the next sync brings it whole.
    ctx.query(name, sort="Rank").all()
    assert cache_state(ctx, name) == server_state(kinto, bucket, name)
    assert ctx.object(name, rid(2)).peek("Name") == "newer"


# ------------------------------------------------------------------ case 6

def test_retyped_column_reads_alike_in_predicates_and_peek(kinto, bucket, seed, tmp_path, open_ctx):
    name = seed(3)
    store = tmp_path / "s.db"
    ctx = open_ctx(kinto.url, bucket, store)
    ctx.query(name, sort="Rank").all()
    # Rank becomes text on the server, and r001 takes a text Rank, synced
    # under the integer model (a value that does not fit its column).
    kinto.create_collection(bucket, name, {"type": "object", "properties": dict(
        SCHEMA["properties"], Rank={"type": "string"})})
    kinto.put_record(bucket, name, rid(1), {"Name": "n1", "Rank": "7"})
    ctx.query(name, sort="Name").all()
    ctx.close()
    ctx = open_ctx(kinto.url, bucket, store)
    assert ctx.object(name, rid(1)).peek("Rank") == "7"
    objs = ctx.query(name, policy="cache_only", where="Rank == '7'").all()
    assert [o.id for o in objs] == [rid(1)]
    objs = ctx.query(name, policy="cache_only", where="Rank == nil", sort="Name").all()
    assert rid(1) not in [o.id for o in objs]
    assert all(o.peek("Rank") is None for o in objs)


# ------------------------------------------------------------------ case 8

def test_deleted_record_stays_not_found_after_reopen(kinto, bucket, seed, tmp_path, open_ctx):
    name = seed(3)
    store = tmp_path / "s.db"
    ctx = open_ctx(kinto.url, bucket, store)
    ctx.query(name, sort="Rank").all()
    kinto.delete_record(bucket, name, rid(2))
    ctx.query(name, sort="Rank").all()
    with pytest.raises(tether.NotFoundError):
        ctx.object(name, rid(2)).peek("Name")
    ctx.close()
    # The store saw it deleted: gone, not "not fetched yet".
    ctx = open_ctx(kinto.url, bucket, store)
    with pytest.raises(tether.NotFoundError, match="was deleted"):
        ctx.object(name, rid(2)).peek("Name")
    assert ctx.object(name, rid(7)).peek("Name", "unknown") == "unknown"   # never fetched: not cached
    # Made again on the server: a sync brings it back, and the tombstone goes.
    kinto.put_record(bucket, name, rid(2), {"Name": "again", "Rank": 2})
    ctx.query(name, sort="Rank").all()
    assert ctx.object(name, rid(2)).peek("Name") == "again"
    ctx.close()
    ctx = open_ctx(kinto.url, bucket, store)
    assert ctx.object(name, rid(2)).peek("Name") == "again"
