"""Local stores, from Python: what a delete on Kinto or in this context
leaves behind (issue 28). Notes whose target was deleted are cleaned up by
their rules (cascade, nullify, deny) at rollback, at a fetch, in a sibling,
and at a save; changes outlive their entity or field leaving the server's
model. The basics (notes, URIs, drops) are in test_local_stores.py."""

import pytest

import tether
from test_local_stores import ITEMS, items  # noqa: F401  (items: the fixture)



def two_rules(tmp_path, items):
    """Notes with a cascade reference (Item) and a nullify one (Also) to items."""
    specs = {"notes": {"type": "object", "properties": {
        "Text": {"type": "string"},
        "Item": {"type": "string", "x-tether-to": items, "x-tether-delete": "cascade"},
        "Also": {"type": "string", "x-tether-to": items, "x-tether-inverse": "also", "x-tether-delete": "nullify"}}}}
    return [tether.LocalStore("private", tmp_path / "p.db", specs)]


def note_ids(ctx):
    return sorted(n.id for n in ctx.query("notes", policy="cache_only").all())


def notes_on(ctx, items, target):
    """n1 (cascade) and n2 (nullify) on `target`, saved."""
    item = ctx.object(items, target)
    ctx.insert("notes", {"Text": "one"}, id="n1").set_related("Item", item)
    ctx.insert("notes", {"Text": "two"}, id="n2").set_related("Also", item)
    ctx.save()
    return item


def test_a_target_edited_here_and_deleted_there_is_cleaned_up_at_rollback(kinto, kinto_url, bucket, tmp_path,
                                                                            open_ctx, items):
    """Issue 28, case 9: the clean-up a local edit held back runs when the
    edit is rolled back, in that session."""
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    ctx.query(items, policy="server_only").all()
    item = notes_on(ctx, items, "i1")
    item.Title = "edited here"
    kinto.delete_record(bucket, items, "i1")
    ctx.query(items, policy="server_only").all()
    assert note_ids(ctx) == ["n1", "n2"], "held back: a merge policy may make i1 again"
    item.rollback()
    assert note_ids(ctx) == ["n2"], "the cascade note went with i1"
    assert ctx.object("notes", "n2").peek("Also") is None
    ctx.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    assert note_ids(ctx) == ["n2"] and ctx.object("notes", "n2").peek("Also") is None


def test_a_fetch_clean_up_reaches_a_sibling(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, cases 10 and 8: a sibling takes what a fetch's clean-up did,
    so its next save of the note is no conflict, and even under client_wins
    it does not write back the reference the clean-up cleared."""
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    ctx.query(items, policy="server_only").all()
    notes_on(ctx, items, "i1")
    sibling = ctx.open_sibling("background")
    one, two = sibling.object("notes", "n1"), sibling.object("notes", "n2")
    assert one.peek("Text") == "one" and two.peek("Also") == "tether://server/%s/i1" % items
    two.Text = "edited in the sibling"
    kinto.delete_record(bucket, items, "i1")
    ctx.query(items, policy="server_only").all()
    assert note_ids(sibling) == ["n2"], "the sibling saw the cascade"
    assert two.peek("Also") is None and two.peek("Text") == "edited in the sibling"
    report = sibling.save(merge="client_wins")
    assert report.saved == 1 and not report.failures
    for c in (ctx, sibling):
        note = c.object("notes", "n2")
        assert note.peek("Also") is None and note.peek("Text") == "edited in the sibling"
    ctx.close()
    sibling.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    assert note_ids(ctx) == ["n2"] and ctx.object("notes", "n2").peek("Also") is None


def test_a_note_edited_here_is_not_made_again_on_a_deleted_target(kinto, kinto_url, bucket, tmp_path,
                                                                    open_ctx, items):
    """Issue 28, case 8: a cascade note edited here, whose target the server
    deletes, is reported under client_wins, not made again pointing at it;
    an unsaved reference to a target the server deleted is not sent."""
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    ctx.query(items, policy="server_only").all()
    item = notes_on(ctx, items, "i1")
    three = ctx.insert("notes", {"Text": "three"}, id="n3")
    ctx.save()
    ctx.object("notes", "n1").Text = "edited"
    three.set_related("Also", item)
    kinto.delete_record(bucket, items, "i1")
    ctx.query(items, policy="server_only").all()
    with pytest.raises(tether.TetherError) as caught:
        ctx.save(merge="client_wins")
    failures = {obj.id: error for obj, error in caught.value.failures}
    assert set(failures) == {"n1", "n3"}
    assert isinstance(failures["n1"], tether.ConflictError)
    assert "Item refers to %s/i1, which was deleted" % items in failures["n1"].message
    assert isinstance(failures["n3"], tether.InvalidError)
    assert "Also refers to %s/i1, which was deleted" % items in failures["n3"].message
    ctx.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=two_rules(tmp_path, items))
    ctx.rollback()                             # the edits the save reported dropped
    assert note_ids(ctx) == ["n2", "n3"], "n1 was not made again"
    assert ctx.object("notes", "n3").peek("Also") is None, "the reference was not written"


def test_changes_outlive_their_entity_leaving_the_server_model(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 1 (server side): an open whose server model lacks an
    entity with unsaved changes keeps them, for a model that has it again."""
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    ctx.query(items, policy="server_only").all()
    ctx.object(items, "i1").Title = "kept"
    ctx.close()
    kinto.request("DELETE", "/buckets/%s/collections/%s" % (bucket, items))
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    assert items not in [e.name for e in ctx.entities]
    absent = [d for d in ctx.diagnostics if d.entity == items]
    assert len(absent) == 1 and absent[0].attribute is None
    assert "no longer has the entity %s: 1 unsaved change to it is kept" % items in absent[0].message
    ctx.close()
    kinto.create_collection(bucket, items, ITEMS)
    kinto.put_records(bucket, items, [("i1", {"Title": "item 1"})])
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    assert [o.id for o in ctx.changed_objects] == ["i1"]
    assert ctx.object(items, "i1").peek("Title") == "kept"
    assert not [d for d in ctx.diagnostics if d.entity == items], "back: nothing absent"
    with pytest.raises(tether.ConflictError):
        ctx.save()                             # the record made again is not the one edited
    ctx.save(merge="client_wins")
    assert kinto.get_record(bucket, items, "i1")["Title"] == "kept"


def test_changes_outlive_their_field_leaving_the_server_model(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, case 1 (server side): a field that leaves the server's model
    and comes back gets its code back, and the unsaved value kept under it."""
    both = {"type": "object", "properties": {"Title": {"type": "string"}, "Note": {"type": "string"}}}
    kinto.create_collection(bucket, items, both)
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    ctx.query(items, policy="server_only").all()
    ctx.object(items, "i1").Note = "kept"
    ctx.close()
    kinto.create_collection(bucket, items, ITEMS)
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    assert "Note" not in [a.name for a in ctx.entity(items).attributes]
    absent = [d for d in ctx.diagnostics if d.entity == items]
    assert len(absent) == 1 and absent[0].attribute == "Note"
    assert "no longer has the field %s.Note: 1 unsaved change to it is kept" % items in absent[0].message
    ctx.close()
    kinto.create_collection(bucket, items, both)
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    assert ctx.object(items, "i1").peek("Note") == "kept"
    ctx.save()
    assert kinto.get_record(bucket, items, "i1")["Note"] == "kept"


@pytest.mark.parametrize("save_while_absent", [False, True])
def test_an_edit_while_a_field_is_absent_keeps_its_unsaved_value(kinto, kinto_url, bucket, tmp_path, open_ctx, items,
                                                                  save_while_absent):
    """Issue 28: editing (and saving) another field of a record while one of
    its unsaved fields is absent from the server's model rewrites its outbox
    row: the absent field's value stays in it, for the field's return, and
    the server's own value of the field is not touched meanwhile."""
    both = {"type": "object", "properties": {"Title": {"type": "string"}, "Note": {"type": "string"}}}
    kinto.create_collection(bucket, items, both)
    kinto.patch_record(bucket, items, "i2", {"Note": "theirs"})
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    ctx.query(items, policy="server_only").all()
    ctx.object(items, "i1").Note = "kept"
    ctx.close()
    kinto.create_collection(bucket, items, ITEMS)                     # Note leaves the spec
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    assert "Note" not in [a.name for a in ctx.entity(items).attributes]
    ctx.object(items, "i1").Title = "edited while Note is absent"
    ctx.object(items, "i2").Title = "i2 edited too"
    if save_while_absent:
        ctx.save()
        assert kinto.get_record(bucket, items, "i1")["Title"] == "edited while Note is absent"
        assert "Note" not in kinto.get_record(bucket, items, "i1"), "an absent field is not sent"
        assert kinto.get_record(bucket, items, "i2")["Note"] == "theirs", "nor is the server's value of it touched"
    ctx.close()
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    absent = [d for d in ctx.diagnostics if d.entity == items]
    assert len(absent) == 1 and "1 unsaved change to it is kept" in absent[0].message, "the value is still kept"
    ctx.close()
    kinto.create_collection(bucket, items, both)                      # and comes back
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db")
    i1 = ctx.object(items, "i1")
    assert i1.peek("Note") == "kept", "the unsaved value outlived the edit"
    ctx.save()
    held = kinto.get_record(bucket, items, "i1")
    assert (held["Title"], held["Note"]) == ("edited while Note is absent", "kept")
    assert kinto.get_record(bucket, items, "i2")["Note"] == "theirs"


@pytest.mark.parametrize("first, second", [("Parent", "Other"), ("Other", "Parent")])
def test_a_deny_from_a_record_the_delete_takes_along_refuses_nothing(kinto_url, bucket, tmp_path, open_ctx, first, second):
    """Issue 28: deleting top cascades to x (through `first`) and to m
    (through `second`), and from m to y; y's deny reference to x refuses
    nothing, as y goes too. The answer must not hang on the order the
    rules are visited in (it did: one order refused the delete)."""
    cascade = {"type": "string", "x-tether-to": "notes", "x-tether-delete": "cascade"}
    specs = {"notes": {"type": "object", "properties": {
        "Parent": dict(cascade, **{"x-tether-inverse": "children"}),
        "Other": dict(cascade, **{"x-tether-inverse": "others"}),
        "Watch": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "watchers", "x-tether-delete": "deny"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    ctx.insert("notes", id="top")
    ctx.insert("notes", {first: "top"}, id="x")
    ctx.insert("notes", {second: "top"}, id="m")
    ctx.insert("notes", {"Parent": "m", "Watch": "x"}, id="y")
    ctx.insert("notes", id="other")
    ctx.save()
    ctx.object("notes", "top").delete()
    assert ctx.save().saved == 4
    assert [n.id for n in ctx.query("notes").all()] == ["other"]


def test_a_cycle_of_cascades_is_deleted_in_one_save(kinto_url, bucket, tmp_path, open_ctx):
    """Issue 28, found by the delete rules model test (seed 26801): a and b
    refer to each other (cascade), c to b; deleting a takes b and c along,
    and the save sends all three (each delete waited for the other's, so
    none was sent and the save said CANCELLED)."""
    specs = {"notes": {"type": "object", "properties": {
        "Parent": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "children", "x-tether-delete": "cascade"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    ctx.insert("notes", id="a")
    ctx.insert("notes", {"Parent": "a"}, id="b")
    ctx.insert("notes", {"Parent": "b"}, id="c")
    ctx.insert("notes", id="other")
    ctx.save()
    ctx.object("notes", "a").Parent = "b"
    ctx.save()
    ctx.object("notes", "a").delete()
    report = ctx.save()
    assert (report.saved, report.failures) == (3, [])
    assert [n.id for n in ctx.query("notes").all()] == ["other"]


@pytest.mark.parametrize("other_rule", ["nullify", "deny"])
def test_a_note_the_delete_takes_along_is_no_conflict_for_its_clean_up(kinto, kinto_url, bucket, tmp_path, open_ctx, items,
                                                                        other_rule):
    """Issue 28, found by the delete rules model test (seed 145585): a note
    refers to i1 by a nullify (or deny) reference, and to a link that
    cascades from i1 by a cascade one. Deleting i1 takes the link and the
    note along; once i1's delete is saved, its clean-up of the references
    to i1 must not rewrite the note under its pending delete (which then
    met a conflict with that clean-up)."""
    kinto.create_collection(bucket, "links", {"type": "object", "properties": {
        "Item": {"type": "string", "x-tether-to": items, "x-tether-delete": "cascade"}}})
    kinto.put_records(bucket, "links", [("l1", {"Item": "i1"})])
    specs = {"notes": {"type": "object", "properties": {
        "Item": {"type": "string", "x-tether-to": items, "x-tether-inverse": "notes", "x-tether-delete": other_rule},
        "Link": {"type": "string", "x-tether-to": "links", "x-tether-inverse": "notes", "x-tether-delete": "cascade"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    ctx.query(items, policy="server_only").all()
    ctx.query("links", policy="server_only").all()
    ctx.insert("notes", {"Item": "tether://server/%s/i1" % items, "Link": "tether://server/links/l1"}, id="n")
    ctx.insert("notes", id="other")
    ctx.save()
    ctx.object(items, "i1").delete()
    report = ctx.save()
    assert (report.saved, report.failures) == (3, [])
    assert [n.id for n in ctx.query("notes").all()] == ["other"]
    assert ctx.change_count == 0


def test_client_wins_writes_a_note_that_refers_to_itself(kinto_url, bucket, tmp_path, open_ctx):
    """Issue 28, found by the delete rules model test (seed 956929, a hang):
    a note whose Parent is itself, edited in two siblings; the second save
    conflicts and client_wins writes it again. Looking for a target gone
    among the values it writes, the save locked the note (its own target)
    while holding its lock, and waited on itself for ever."""
    specs = {"notes": {"type": "object", "properties": {
        "Text": {"type": "string"},
        "Parent": {"type": "string", "x-tether-to": "notes", "x-tether-inverse": "children", "x-tether-delete": "nullify"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    ctx.insert("notes", {"Text": "made", "Parent": "n"}, id="n")
    ctx.save()
    sibling = ctx.open_sibling("b")
    ctx.object("notes", "n").Text = "here"
    sibling.object("notes", "n").Text = "there"
    ctx.save(timeout=20)
    with pytest.raises(tether.ConflictError):
        sibling.save(timeout=20)
    report = sibling.save(merge="client_wins", timeout=20)
    assert (report.saved, report.failures) == (1, [])
    for c in (ctx, sibling):
        note = c.object("notes", "n")
        assert (note.peek("Text"), note.peek("Parent")) == ("there", "n")
    assert ctx.change_count == 0 and sibling.change_count == 0


def test_a_note_cleared_of_a_delete_and_of_its_cascade_is_no_conflict(kinto, kinto_url, bucket, tmp_path, open_ctx, items):
    """Issue 28, found by the delete rules model test (seed 910420): a note
    refers by nullify references to i1 and to a link that cascades from
    i1. Deleting i1 clears both; the note's write waited for i1's delete
    alone, so it went with the link's delete, after i1's clean-up cleared
    one reference in the store and before the link's cleared the other:
    it met the store as a conflict. It waits for the last of its targets."""
    kinto.create_collection(bucket, "links", {"type": "object", "properties": {
        "Item": {"type": "string", "x-tether-to": items, "x-tether-delete": "cascade"}}})
    kinto.put_records(bucket, "links", [("l1", {"Item": "i1"})])
    specs = {"notes": {"type": "object", "properties": {
        "Item": {"type": "string", "x-tether-to": items, "x-tether-inverse": "notes", "x-tether-delete": "nullify"},
        "Link": {"type": "string", "x-tether-to": "links", "x-tether-inverse": "notes", "x-tether-delete": "nullify"}}}}
    ctx = open_ctx(kinto_url, bucket, tmp_path / "s.db", local_stores=[tether.LocalStore("private", tmp_path / "p.db", specs)])
    ctx.query(items, policy="server_only").all()
    ctx.query("links", policy="server_only").all()
    ctx.insert("notes", {"Item": "tether://server/%s/i1" % items, "Link": "tether://server/links/l1"}, id="n")
    ctx.save()
    ctx.object(items, "i1").delete()
    report = ctx.save()
    assert (report.saved, report.failures) == (3, [])
    note = ctx.object("notes", "n")
    assert (note.peek("Item"), note.peek("Link")) == (None, None)
    assert ctx.change_count == 0
