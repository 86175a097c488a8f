"""Editing and saving from Python: set, insert, delete, rollback, save
(sync and asyncio), conflicts with both sides and each merge policy,
relationships, siblings, and a server that is down: nothing is lost."""

import asyncio
import re

import pytest

import tether
from conftest import finished

SCHEMA = {
    "type": "object",
    "properties": {
        "Title": {"type": "string"},
        "Rank": {"type": "integer"},
        "Status": {"type": "string", "enum": ["open", "done"]},
        "Tags": {"type": "array"},
        "Owner": {"type": "string", "x-tether-to": "people", "x-tether-inverse": "notes"},
    },
}
PEOPLE = {"type": "object", "properties": {"Name": {"type": "string"}}}


@pytest.fixture
def notes(kinto, bucket, request):
    # A collection per test: each starts from the same records.
    name = "notes_" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[:40]
    kinto.create_collection(bucket, "people", PEOPLE)
    kinto.put_records(bucket, "people", [("ann", {"Name": "Ann"}), ("bob", {"Name": "Bob"})])
    kinto.create_collection(bucket, name, dict(SCHEMA, properties=dict(
        SCHEMA["properties"], Owner=dict(SCHEMA["properties"]["Owner"], **{"x-tether-inverse": name}))))
    kinto.put_records(bucket, name, [("n%d" % i, {"Title": "note %d" % i, "Rank": i, "Status": "open",
                                                  "Owner": "ann" if i % 2 else "bob"}) for i in range(6)])
    return name


def opened(open_ctx, kinto_url, bucket, tmp_path, notes, **kw):
    ctx = open_ctx(kinto_url, bucket, tmp_path / "save.db", **kw)
    ctx.query(notes, policy="server_only").all()
    ctx.query("people", policy="server_only").all()
    return ctx


def test_edit_save_and_reopen(kinto, kinto_url, bucket, tmp_path, open_ctx, notes, recorder):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    note = ctx.object(notes, "n1")
    seen = recorder()
    note.observe("Title", seen)
    note.Title = "edited"                      # attribute assignment is a set
    note.set("Tags", ["a", "b"])
    assert note.peek("Title") == "edited"
    assert note.committed("Title") == "note 1"
    assert note.pending == "update" and note.has_changes
    assert note.changed_keys == ["Title", "Tags"]
    assert seen.wait(lambda c: len(c) >= 1), "an observer hears a local change"
    assert kinto.get_record(bucket, notes, "n1")["Title"] == "note 1", "nothing sent before save"
    ctx.close()

    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    assert ctx.change_count == 1, "the change survived the close"
    (changed,) = ctx.changed_objects              # ...and says what it is
    assert (changed.id, changed.pending, changed.changed_keys) == ("n1", "update", ["Title", "Tags"])
    assert changed.committed("Title") == "note 1", "the server's side, read from the store in a new run"
    report = ctx.save()
    assert (report.saved, report.discarded, report.failures) == (1, 0, [])
    server = kinto.get_record(bucket, notes, "n1")
    assert server["Title"] == "edited" and server["Tags"] == ["a", "b"] and server["Rank"] == 1
    note = ctx.object(notes, "n1")
    assert note.version == server["last_modified"] and note.pending is None
    assert ctx.save().saved == 0


def test_bad_edits_are_refused(kinto_url, bucket, tmp_path, open_ctx, notes):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    note = ctx.object(notes, "n2")
    with pytest.raises(tether.TypeMismatchError):
        note.Title = 3
    with pytest.raises(tether.TypeMismatchError):
        note.Rank = "3"
    with pytest.raises(tether.InvalidError):
        note.Status = "closed"                 # not among the spec's allowed values
    with pytest.raises(tether.NotFoundError):
        note.set("Nope", 1)
    with pytest.raises(tether.InvalidError):
        note.set("id", "other")
    with pytest.raises(TypeError):
        note.Title = object()
    assert note.pending is None
    note.Status = "done"
    note.rollback()
    assert note.peek("Status") == "open"
    with pytest.raises(tether.NotCachedError):
        ctx.object(notes, "nowhere").Title = "x"


def test_insert_delete_and_relationships(kinto, kinto_url, bucket, tmp_path, open_ctx, notes):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    made = ctx.insert(notes, {"Title": "new", "Rank": 100, "Owner": "ann"})
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", made.id)
    named = ctx.insert(notes, {"Title": "named"}, id="named")
    with pytest.raises(tether.ConflictError):
        ctx.insert(notes, id="named")
    assert made.related("Owner") is ctx.object("people", "ann")
    assert made.peek("Owner.Name") == "Ann"
    gone = ctx.object(notes, "n3")
    gone.delete()
    assert gone.pending == "delete"
    final = ctx.query(notes, sort="Rank", policy="cache_only").all()
    assert [o.id for o in final][-1] == made.id and gone not in final, "unsaved changes count in fetches"
    assert ctx.save().saved == 3
    assert kinto.get_record(bucket, notes, made.id)["Title"] == "new"
    assert kinto.get_record(bucket, notes, "named")["Title"] == "named"
    with pytest.raises(Exception):
        kinto.get_record(bucket, notes, "n3")
    assert named.pending is None


def test_conflicts_and_merge_policies(kinto, kinto_url, bucket, tmp_path, open_ctx, notes):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    note = ctx.object(notes, "n4")
    base = note.version
    note.Title = "mine"
    theirs = kinto.patch_record(bucket, notes, "n4", {"Title": "theirs"})
    with pytest.raises(tether.ConflictError) as raised:
        ctx.save()
    error = raised.value
    assert error.saved == 0 and len(error.conflicts) == 1
    conflict = error.conflicts[0]
    assert conflict.object is note
    assert conflict.local_version == base and conflict.server_version == theirs["last_modified"]
    assert conflict.keys == ["Title"] and conflict.server["Title"] == "theirs"
    assert note.peek("Title") == "mine" and note.pending == "update", "the change stays"

    report = ctx.save(merge="server_wins")
    assert report.discarded == 1 and note.peek("Title") == "theirs" and note.pending is None

    five = ctx.object(notes, "n5")
    five.Rank = 500
    kinto.patch_record(bucket, notes, "n5", {"Title": "theirs 5"})
    ctx.save(merge="merge_properties")
    server = kinto.get_record(bucket, notes, "n5")
    assert (server["Rank"], server["Title"]) == (500, "theirs 5")

    zero = ctx.object(notes, "n0")
    zero.Rank = -1
    kinto.delete_record(bucket, notes, "n0")
    with pytest.raises(tether.ConflictError) as raised:
        ctx.save()
    assert raised.value.conflicts[0].server is None and raised.value.conflicts[0].server_version is None
    ctx.save(merge="client_wins")
    assert kinto.get_record(bucket, notes, "n0")["Rank"] == -1, "made again from the local object"

    with pytest.raises(ValueError):
        ctx.save(merge="whatever")


def test_unreachable_server_keeps_every_change(kinto, kinto_url, bucket, tmp_path, open_ctx, notes, faultproxy):
    ctx = opened(open_ctx, faultproxy.url, bucket, tmp_path, notes)
    ctx.object(notes, "n1").Title = "offline"
    faultproxy.set("drop")
    with pytest.raises(tether.NetworkError) as raised:
        ctx.save(timeout=60)
    assert len(raised.value.failures) == 1
    assert ctx.change_count == 1
    faultproxy.reset()
    assert ctx.save().saved == 1
    assert kinto.get_record(bucket, notes, "n1")["Title"] == "offline"


def test_many_changes_progress_and_cancel(kinto, kinto_url, bucket, tmp_path, open_ctx, notes):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    made = [ctx.insert(notes, {"Rank": 1000 + i}) for i in range(60)]
    told = []
    report = ctx.save(progress=lambda answered, total: told.append((answered, total)))
    assert report.saved == 60 and told[-1] == (60, 60) and told == sorted(told)
    assert kinto.get_record(bucket, notes, made[59].id)["Rank"] == 1059

    for i in range(30):
        ctx.insert(notes, {"Rank": 2000 + i})
    finals = []
    task = ctx.start_save(callback=lambda error, report: finals.append(error.status if error else 0))
    task.cancel()
    assert finished(task, 10) and finals == [tether.E_CANCELLED]
    ctx.save()
    assert ctx.change_count == 0


def test_save_async_in_poll_mode(kinto, kinto_url, bucket, tmp_path, open_ctx, notes):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes, delivery="poll")
    ctx.object(notes, "n2").Title = "async"

    async def main():
        return await ctx.save_async()

    assert asyncio.run(main()).saved == 1
    assert kinto.get_record(bucket, notes, "n2")["Title"] == "async"


def test_a_sibling_takes_what_another_fetched(kinto, kinto_url, bucket, tmp_path, open_ctx, notes, recorder):
    """The store is shared: what one sibling's fetch brings reaches the
    objects the other holds (its own fetch then finds nothing new, and
    answered the value it held; found by test_delete_rules_model)."""
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    held = ctx.object(notes, "n2")
    assert held.peek("Title") != "theirs"
    seen = recorder()
    held.observe("Title", seen)
    sibling = ctx.open_sibling("b")
    try:
        kinto.patch_record(bucket, notes, "n2", {"Title": "theirs"})
        sibling.query(notes, policy="server_only").all()
        assert held.peek("Title") == "theirs"
        answer = {o.id: o.peek("Title") for o in ctx.query(notes, policy="server_only").all()}
        assert answer["n2"] == "theirs"
        assert seen.wait(lambda calls: len(calls) >= 1), "its observer is told"
    finally:
        sibling.close()


def test_siblings(kinto, kinto_url, bucket, tmp_path, open_ctx, notes, recorder):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, notes)
    shown = ctx.object(notes, "n1")
    seen = recorder()
    shown.observe("Title", seen)
    background = ctx.open_sibling("import")
    try:
        with pytest.raises(tether.BusyError):
            tether.Context(kinto_url, bucket, str(tmp_path / "save.db"), username="test", password="test")
        there = background.local(shown)
        assert there is not shown and there.id == "n1"
        there.Title = "imported"
        assert shown.peek("Title") == "note 1" and ctx.change_count == 0
        assert background.save().saved == 1
        assert seen.wait(lambda c: len(c) >= 1)
        assert shown.peek("Title") == "imported"
    finally:
        background.close()


REQUIRED = {"type": "object", "properties": {"Title": {"type": "string"}, "Rank": {"type": "integer"}},
            "required": ["Title"]}


def test_a_batch_partly_refused(kinto, kinto_url, bucket, tmp_path, open_ctx):
    """A record the server's schema refuses (400; here a minimum the model
    does not check) fails alone; the rest of its batch lands, and it stays
    pending until it is fixed."""
    kinto.create_collection(bucket, "strict", dict(REQUIRED, properties=dict(
        REQUIRED["properties"], Rank={"type": "integer", "minimum": 0})))
    ctx = open_ctx(kinto_url, bucket, tmp_path / "strict.db")
    good = [ctx.insert("strict", {"Title": "ok %d" % i}) for i in range(3)]
    bad = ctx.insert("strict", {"Title": "below", "Rank": -1})
    with pytest.raises(tether.InvalidError) as raised:
        ctx.save()
    assert raised.value.saved == 3
    assert [obj for obj, _ in raised.value.failures] == [bad]
    assert "400" in str(raised.value.failures[0][1])
    assert bad.pending == "insert" and all(g.pending is None for g in good)
    bad.Rank = 1
    assert ctx.save().saved == 1
    assert kinto.get_record(bucket, "strict", bad.id)["Rank"] == 1


def test_a_required_field_missing_sends_nothing(kinto, kinto_url, bucket, tmp_path, open_ctx):
    """An insert without a field the schema requires fails the save before
    anything is sent, naming the record and the field; every change stays
    pending (issue 22)."""
    kinto.create_collection(bucket, "required", REQUIRED)
    ctx = open_ctx(kinto_url, bucket, tmp_path / "required.db")
    good = ctx.insert("required", {"Title": "ok"})
    bad = ctx.insert("required", {"Rank": 1}, id="no-title")
    with pytest.raises(tether.InvalidError) as raised:
        ctx.save()
    assert 'required/no-title has no value for the required field "Title": nothing was sent' in str(raised.value)
    assert raised.value.saved == 0 and ctx.change_count == 2
    assert kinto.request("GET", "/buckets/%s/collections/required/records" % bucket)["data"] == []
    bad.Title = "fixed"
    assert ctx.save().saved == 2
    assert kinto.get_record(bucket, "required", good.id)["Title"] == "ok"


def test_a_batch_cut_midway_is_sent_again_and_applied_once(kinto, kinto_url, bucket, tmp_path, open_ctx, faultproxy):
    """The connection breaks inside the batch's answer after the server
    applied it: the batch is sent again (its writes are conditional), the
    server's records are recognised as these changes, and each lands once."""
    kinto.create_collection(bucket, "cut", REQUIRED)
    kinto.put_records(bucket, "cut", [("c%d" % i, {"Title": "c%d" % i, "Rank": i}) for i in range(5)])
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "cut.db")
    ctx.query("cut", policy="server_only").all()
    made = [ctx.insert("cut", {"Title": "new %d" % i}) for i in range(10)]
    for i in range(5):
        ctx.object("cut", "c%d" % i).Rank = 100 + i
    faultproxy.set("reset", match="/batch", count=1)
    report = ctx.save()
    assert report.saved == 15 and report.failures == []
    assert len([l for l in faultproxy.log() if "/batch" in l]) >= 2, "the batch was sent again"
    final = ctx.query("cut", policy="server_only").all()
    assert len(final) == 15, "each insert once"
    assert sorted(kinto.get_record(bucket, "cut", "c%d" % i)["Rank"] for i in range(5)) == [100, 101, 102, 103, 104]
    assert {kinto.get_record(bucket, "cut", o.id)["Title"] for o in made} == {"new %d" % i for i in range(10)}


@pytest.mark.parametrize("status,error", [(403, tether.AuthError), (500, tether.ServerError)])
def test_server_errors_keep_every_change(kinto, kinto_url, bucket, tmp_path, open_ctx, faultproxy, status, error):
    kinto.create_collection(bucket, "errs%d" % status, REQUIRED)
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "errs.db")
    made = [ctx.insert("errs%d" % status, {"Title": "t%d" % i}) for i in range(4)]
    faultproxy.set("status", status=status, match="/batch")
    with pytest.raises(error):
        ctx.save()
    assert ctx.change_count == 4 and all(o.pending == "insert" for o in made)
    assert ctx.changed_objects == made, "every change, in the order made"
    faultproxy.reset()
    assert ctx.save().saved == 4
