"""A local-only store beside the server's, from Python: private notes on
Kinto records, saved to their own file and never to the server, linked to
server records by object URI, and cleaned up when Kinto deletes the target."""

import json
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
    ctx.fetch_wait(items, policy="server_only")
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
    cached, final = ctx.fetch_wait("notes")
    assert cached is None or len(cached) == len(final)
    assert [n.id for n in final] == [note_id]
    note = final[0]
    assert note.Text == "check this"
    assert note.peek("Item.Title") == "annotated"

    kinto.delete_record(bucket, items, "i1")   # another writer deletes the target
    ctx.fetch_wait(items, policy="server_only")
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
