"""A local-only store beside the server's, from Python: private notes on
Kinto records, saved to their own file and never to the server, linked to
server records by object URI, and cleaned up when Kinto deletes the target."""

import json
import time
import re

import pytest

import tether

ITEMS = {"type": "object", "properties": {"Title": {"type": "string"}}}
SPECS = {
    "notes": {"type": "object", "required": ["Text"], "properties": {
        "Text": {"type": "string"},
        "Item": {"type": "string", "x-tether-to": None, "x-tether-inverse": "notes"}}},
}


@pytest.fixture
def items(kinto, bucket, request):
    name = "items_" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[:40]
    kinto.create_collection(bucket, name, ITEMS)
    kinto.put_records(bucket, name, [("i%d" % i, {"Title": "item %d" % i}) for i in range(4)])
    return name


def local(tmp_path, items):
    specs = json.loads(json.dumps(SPECS))
    specs["notes"]["properties"]["Item"]["x-tether-to"] = items
    return tether.LocalStore("private", tmp_path / "private.db", specs)


def opened(open_ctx, kinto_url, bucket, tmp_path, items, **kw):
    ctx = open_ctx(kinto_url, bucket, tmp_path / "server.db", local_stores=[local(tmp_path, items)], **kw)
    ctx.query(items, policy="server_only").all()
    return ctx


def test_notes_on_server_records(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    assert ctx.entity("notes").configuration == "private"
    assert ctx.entity(items).configuration == ""
    item = ctx.object(items, "i1")
    note = ctx.insert("notes")
    note.Text = "check this"
    note.set_related("Item", item)
    assert note.peek("Item") == "tether://server/%s/i1" % items
    assert note.related("Item") is item
    assert note.peek("Item.Title") == "item 1"
    with pytest.raises(tether.InvalidError):
        note.Item = "i1"                       # across stores, only a URI
    with pytest.raises(tether.TypeMismatchError):
        note.set_related("Item", note)
    item.Title = "annotated"
    report = ctx.save()
    assert report.saved == 2, "the note and the server's record in one save"
    assert kinto.get_record(bucket, items, "i1")["Title"] == "annotated"
    assert kinto.request("GET", "/buckets/%s/collections/notes" % bucket, expect_error=True)["status"] == 404
    assert note.uri == "tether://private/notes/" + note.id
    assert ctx.object_for_uri(note.uri) is note
    with pytest.raises(tether.NotFoundError):
        ctx.object_for_uri("tether://public/notes/x")
    note_id = note.id
    ctx.close()

    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    cached = []
    final = ctx.query("notes", on_cached=cached.append).all()
    assert len(cached) <= 1 and all(len(c) == len(final) for c in cached)
    assert [n.id for n in final] == [note_id]
    note = final[0]
    assert note.Text == "check this"
    assert note.peek("Item.Title") == "annotated"

    kinto.delete_record(bucket, items, "i1")   # another writer deletes the target
    ctx.query(items, policy="server_only").all()
    assert note.peek("Item") is None, "the reference is cleared"
    assert note.related("Item") is None


def test_bad_local_stores(kinto_url, bucket, tmp_path, open_ctx, items):
    with pytest.raises(tether.InvalidError, match="not JSON"):
        open_ctx(kinto_url, bucket, tmp_path / "a.db", local_stores=[tether.LocalStore("p", tmp_path / "p.db", "{")])
    with pytest.raises(tether.InvalidError):
        open_ctx(kinto_url, bucket, tmp_path / "a.db", local_stores=[tether.LocalStore("server", tmp_path / "p.db", {})])
    with pytest.raises(TypeError):
        open_ctx(kinto_url, bucket, tmp_path / "a.db", local_stores=[("p", "p.db", {})])
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "p.db").exists()


def test_an_open_never_drops_local_data(kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 1: specs that leave out an entity or a field holding
    data are refused, naming it, until it is dropped on purpose."""
    full = {"notes": {"type": "object", "properties": {"Text": {"type": "string"}, "Extra": {"type": "string"}}},
            "other": {"type": "object", "properties": {"O": {"type": "string"}}}}
    path = tmp_path / "p.db"
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", path, full)])
    ctx.insert("notes", {"Text": "t", "Extra": "e"}, id="n1")
    ctx.insert("other", {"O": "o"}, id="o1")
    ctx.save()
    ctx.close()
    narrow = {"notes": {"type": "object", "properties": {"Text": {"type": "string"}}}}
    with pytest.raises(tether.StoreError) as caught:
        open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", path, narrow)])
    assert "other (1 record)" in caught.value.message and "notes.Extra (1 value)" in caught.value.message
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", path, full)])
    assert ctx.object("notes", "n1").Extra == "e" and ctx.object("other", "o1").O == "o", "nothing was lost"
    ctx.close()
    store = tether.LocalStore("private", path, narrow)
    with pytest.raises(tether.NotFoundError):
        store.drop("nosuch")
    store.drop("other")
    store.drop("notes", "Extra")
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[store])
    assert ctx.object("notes", "n1").Text == "t"


def outbox(path):
    import sqlite3
    with sqlite3.connect(str(path)) as db:
        return sorted(db.execute("SELECT id, ivalues FROM tether_outbox").fetchall())


def test_a_drop_takes_the_unsaved_values_along(kinto_url, bucket, tmp_path, open_ctx, items):
    """A field or an entity dropped on purpose takes its unsaved values out
    of the outbox too, none kept unseen for a field that never comes back:
    an update that set only the field goes, an insert keeps its other values."""
    full = {"notes": {"type": "object", "properties": {"Text": {"type": "string"}, "Extra": {"type": "string"}}},
            "other": {"type": "object", "properties": {"O": {"type": "string"}}}}
    narrow = {"notes": {"type": "object", "properties": {"Text": {"type": "string"}}}}
    path = tmp_path / "p.db"
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", path, full)])
    ctx.insert("notes", {"Text": "t", "Extra": "e"}, id="n1")
    ctx.save()
    ctx.object("notes", "n1").Extra = "unsaved"
    ctx.insert("notes", {"Text": "t2", "Extra": "x2"}, id="n2")
    ctx.insert("other", {"O": "o2"}, id="o2")
    assert ctx.change_count == 3
    ctx.close()
    store = tether.LocalStore("private", path, narrow)
    store.drop("other")
    store.drop("notes", "Extra")
    rows = outbox(path)
    assert [rid for rid, _ in rows] == ["n2"], "the update of Extra alone and the other's insert are gone"
    assert "x2" not in rows[0][1] and "t2" in rows[0][1]
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[store])
    assert ctx.change_count == 1 and ctx.object("notes", "n1").pending is None
    assert ctx.object("notes", "n2").Text == "t2"
    ctx.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", path, full)])
    assert ctx.object("notes", "n1").Extra is None and ctx.object("notes", "n2").Extra is None, "defined again, it starts empty"
    assert ctx.change_count == 1
    ctx.save()
    assert outbox(path) == []


def test_a_local_store_stays_beside_its_bucket(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 2: attached beside another bucket, a local store is
    refused, naming both, and its references are left as they were."""
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    note = ctx.insert("notes", {"Text": "on i1"})
    note.set_related("Item", ctx.object(items, "i1"))
    ctx.save()
    ctx.close()
    other = kinto.create_bucket()
    try:
        with pytest.raises(tether.StoreError) as caught:
            open_ctx(kinto_url, other, tmp_path / "other.db", local_stores=[local(tmp_path, items)])
        assert bucket in caught.value.message and other in caught.value.message
    finally:
        kinto.delete_bucket(other)
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    assert ctx.object("notes", note.id).Item == "tether://server/%s/i1" % items


def test_a_server_delete_cascades_on_inside_the_local_store(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 6: a note cascaded away by a server delete takes the
    notes referring to it along (cascade), or clears them (nullify)."""
    specs = {"notes": {"type": "object", "properties": {
        "Item": {"type": "string", "x-tether-to": items, "x-tether-delete": "cascade"},
        "Parent": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "children", "x-tether-delete": "cascade"},
        "Seen": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "seen_by"}}}}
    stores = [tether.LocalStore("private", tmp_path / "p.db", specs)]
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=stores)
    ctx.query(items, policy="server_only").all()
    top = ctx.insert("notes", id="top")
    top.set_related("Item", ctx.object(items, "i2"))
    child = ctx.insert("notes", id="child")
    child.set_related("Parent", top)
    grandchild = ctx.insert("notes", id="grandchild")
    grandchild.set_related("Parent", child)
    watcher = ctx.insert("notes", id="watcher")
    watcher.set_related("Seen", child)
    ctx.save()
    kinto.delete_record(bucket, items, "i2")
    ctx.query(items, policy="server_only").all()
    assert [n.id for n in ctx.query("notes").all()] == ["watcher"]
    assert watcher.peek("Seen") is None
    ctx.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=stores)
    assert [n.id for n in ctx.query("notes").all()] == ["watcher"]


def test_a_uri_has_one_spelling(kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 7: another spelling of a target's URI is refused, so
    every reference is found by the text the URI has."""
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    note = ctx.insert("notes", {"Text": "x"})
    for spelling in ["tether://server/%s/%%69%%31" % items, "tether://server/%%%02X%s/i1" % (ord(items[0]), items[1:])]:
        with pytest.raises(tether.InvalidError) as caught:
            note.Item = spelling
        assert "tether://server/%s/i1" % items in caught.value.message
    note.Item = "tether://server/%s/i1" % items
    assert note.related("Item") is ctx.object(items, "i1")


def test_a_missing_local_record_is_not_found(kinto_url, bucket, tmp_path, open_ctx, items, recorder):
    """Issue 28, case 11: the file is the only copy: a local record it lacks
    does not exist, and a get tells its observer so, once."""
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, items)
    ghost = ctx.object("notes", "nosuch")
    seen = recorder()
    ghost.observe("Text", seen)
    with pytest.raises(tether.NotFoundError) as caught:
        ghost.get("Text")
    assert caught.value.message == "no record notes/nosuch in local store private"
    with pytest.raises(tether.NotFoundError):
        ghost.get("Text")
    assert seen.wait(lambda c: any(s == tether.E_NOT_FOUND for _, _, s in c))
    time.sleep(0.2)
    assert [s for _, _, s in seen.calls] == [tether.E_NOT_FOUND]


def test_model_edges_are_told(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 12: shared inverse names and unknown delete words are
    diagnostics; related on an unknown key is InvalidError; the first
    context's changes are reachable while a sibling is open."""
    specs = {"notes": {"type": "object", "properties": {
        "Text": {"type": "string"},
        "Owner": {"type": "string", "x-tether-to": items},
        "Reviewer": {"type": "string", "x-tether-to": items, "x-tether-delete": "Cascade"},
        "Other": {"type": "string", "x-tether-to": items, "x-tether-inverse": "others", "x-tether-delete": "explode"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    said = {(d.entity, d.attribute): d.message for d in ctx.diagnostics}
    assert 'it is named "notes.Owner"' in said[("notes", "Owner")]
    assert 'it is named "notes.Reviewer"' in said[("notes", "Reviewer")]
    assert '"explode"' in said[("notes", "Other")] and "deny" in said[("notes", "Other")]
    assert ("notes", "Reviewer") in said and "Cascade" not in said[("notes", "Reviewer")]
    entity = ctx.entity("notes")
    assert entity.attribute("Reviewer").index >= 0
    note = ctx.insert("notes", {"Text": "x"})
    with pytest.raises(tether.InvalidError):
        note.related("Nosuch")
    sibling = ctx.open_sibling("background")
    ctx.close()
    first = sibling.open_sibling("")
