"""Deletes as one unit with their rules, against a real Kinto (issue 28):
the referrers' cascade and nullify go out only after the target's delete
succeeds and are undone when it fails or is rolled back (case 3), a delete
refused changes nothing (case 4), the rules reach referrers only the server
holds (case 5), and no reference to a target going is made (case 8)."""

import re

import pytest

import tether
from conftest import wait_until

CHANGES = {"type": "object", "properties": {"Title": {"type": "string"}}}


def ref(inverse, rule):
    return {"type": "string", "x-tether-to": "changes", "x-tether-inverse": inverse, "x-tether-delete": rule}


COMMENTS = {"type": "object", "properties": {"Text": {"type": "string"}, "Change": ref("comments", "cascade")}}
LINKS = {"type": "object", "properties": {"Url": {"type": "string"}, "Change": ref("links", "nullify")}}
SIGNOFFS = {"type": "object", "required": ["Change"],
             "properties": {"By": {"type": "string"}, "Change": ref("signoffs", "nullify")}}
BLOCKS = {"type": "object", "properties": {"Why": {"type": "string"}, "Change": ref("blocks", "deny")}}


@pytest.fixture
def graph(kinto):
    """A bucket per test: changes c0..c9; comment kN (cascade) and link lN
    (nullify) on each change; signoff a2 (a required reference) on c2."""
    bucket = kinto.create_bucket()
    for name, schema in [("changes", CHANGES), ("comments", COMMENTS), ("links", LINKS),
                         ("signoffs", SIGNOFFS), ("blocks", BLOCKS)]:
        kinto.create_collection(bucket, name, schema)
    kinto.put_records(bucket, "changes", [("c%d" % i, {"Title": "change %d" % i}) for i in range(10)])
    kinto.put_records(bucket, "comments", [("k%d" % i, {"Text": "on c%d" % i, "Change": "c%d" % i}) for i in range(10)])
    kinto.put_records(bucket, "links", [("l%d" % i, {"Url": "u%d" % i, "Change": "c%d" % i}) for i in range(10)])
    kinto.put_records(bucket, "signoffs", [("a2", {"By": "ann", "Change": "c2"})])
    yield bucket
    kinto.delete_bucket(bucket)


def opened(open_ctx, kinto_url, bucket, tmp_path, entities=("changes", "comments", "links", "signoffs", "blocks")):
    ctx = open_ctx(kinto_url, bucket, tmp_path / "rules.db")
    for entity in entities:
        ctx.query(entity, policy="server_only").all()
    return ctx


def exists(kinto, bucket, collection, rid):
    return kinto.request("GET", "/buckets/%s/collections/%s/records/%s" % (bucket, collection, rid),
                         expect_error=True).get("status") is None


def test_a_failed_delete_sends_none_of_its_rules(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 3: the target's delete conflicts; its cascade and nullify are
    not sent, and when the delete is dropped they are undone."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    ctx.object("changes", "c1").delete()
    assert ctx.object("comments", "k1").pending == "delete" and ctx.object("links", "l1").pending == "update"
    kinto.patch_record(graph, "changes", "c1", {"Title": "someone else's"})
    with pytest.raises(tether.ConflictError) as raised:
        ctx.save()
    assert exists(kinto, graph, "comments", "k1"), "the cascade waits for the target's delete"
    assert kinto.get_record(graph, "links", "l1")["Change"] == "c1", "the nullify waits for the target's delete"
    failed = {obj.id for obj, _ in raised.value.failures}
    assert failed == {"c1", "k1", "l1"}, "the report names every change not sent"

    report = ctx.save(merge="server_wins")
    assert report.discarded == 3, "the delete dropped, its rules' changes with it"
    assert ctx.object("changes", "c1").pending is None
    assert ctx.object("comments", "k1").pending is None, "the cascade is undone with the delete"
    link = ctx.object("links", "l1")
    assert link.pending is None and link.peek("Change") == "c1", "the nullify is undone with the delete"
    assert ctx.change_count == 0
    assert exists(kinto, graph, "comments", "k1") and kinto.get_record(graph, "links", "l1")["Change"] == "c1"


def test_a_delete_saved_then_sends_its_rules(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 3, the other side: a delete that succeeds takes its rules with it, in one save."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    ctx.object("changes", "c7").delete()
    report = ctx.save()
    assert (report.saved, report.failures) == (3, [])
    assert not exists(kinto, graph, "changes", "c7") and not exists(kinto, graph, "comments", "k7")
    assert kinto.get_record(graph, "links", "l7").get("Change") is None


def test_a_refused_delete_changes_nothing(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 4: nullify onto a required reference refuses the delete, and
    the other referrers (l2, k2) are left as they were."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    with pytest.raises(tether.TypeMismatchError):
        ctx.object("changes", "c2").delete()
    assert ctx.change_count == 0, "nothing in the outbox"
    assert ctx.object("links", "l2").peek("Change") == "c2" and ctx.object("links", "l2").pending is None
    assert ctx.object("comments", "k2").pending is None
    assert ctx.save().saved == 0
    assert kinto.get_record(graph, "links", "l2")["Change"] == "c2"


def test_rollback_of_a_delete_restores_its_rules(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 12's rollback: the referrers come back as they were, edits made before kept."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    link = ctx.object("links", "l3")
    link.Url = "edited before"
    target = ctx.object("changes", "c3")
    target.delete()
    assert link.peek("Change") is None
    target.rollback()
    assert link.peek("Change") == "c3" and link.pending == "update" and link.changed_keys == ["Url"]
    assert ctx.object("comments", "k3").pending is None
    assert ctx.change_count == 1


def test_rules_reach_referrers_only_the_server_holds(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 5: a store that fetched only changes still follows the rules at save."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path, entities=("changes",))
    ctx.object("changes", "c5").delete()
    report = ctx.save()
    assert report.failures == []
    assert not exists(kinto, graph, "changes", "c5")
    assert not exists(kinto, graph, "comments", "k5"), "the cascade reached a comment never cached"
    assert kinto.get_record(graph, "links", "l5").get("Change") is None, "the nullify reached a link never cached"

    kinto.put_record(graph, "blocks", "b6", {"Why": "held", "Change": "c6"})
    ctx.object("changes", "c6").delete()
    with pytest.raises(tether.NotAllowedError):
        ctx.save()
    assert exists(kinto, graph, "changes", "c6"), "deny refuses a referrer only the server holds"
    assert exists(kinto, graph, "comments", "k6") and kinto.get_record(graph, "links", "l6")["Change"] == "c6"


def test_no_reference_to_a_target_going(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Case 8: a reference to a target pending delete is refused, by set and set_related alike."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    target = ctx.object("changes", "c4")
    target.delete()
    with pytest.raises(tether.InvalidError, match=re.escape("changes/c4")):
        ctx.insert("comments", {"Text": "late", "Change": "c4"})
    link = ctx.object("links", "l8")
    with pytest.raises(tether.InvalidError):
        link.set_related("Change", target)
    with pytest.raises(tether.InvalidError):
        link.Change = "c4"
    assert link.pending is None and link.peek("Change") == "c8"
    ctx.save()
    assert not exists(kinto, graph, "changes", "c4")


def cached(ctx, entity):
    return {o.id: o.peek("Change") for o in ctx.query(entity, policy="cache_only").all()}


def settled(ctx, entity):
    """`cached`, or None while the cascade is under way: a record listed, then
    deleted before it is read, reads as deleted (as documented)."""
    try:
        return cached(ctx, entity)
    except tether.NotFoundError:
        return None


def test_a_deletion_learned_reaches_the_cached_referrers(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """Another writer deletes c1 on Kinto, taking its comment along and
    clearing its link, as the rules say, but leaving a block it should not
    have. A context learning of the deletion by a fetch of changes alone
    asks for the referrers it caches: the comment goes, the link's reference
    is cleared, in its sibling too; the block, as the server still holds it,
    keeps its reference, which reads as the record deleted, never as it was."""
    kinto.put_record(graph, "blocks", "b1", {"Why": "left behind", "Change": "c1"})
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    sibling = ctx.open_sibling("b")
    assert cached(sibling, "comments")["k1"] == "c1" and cached(sibling, "links")["l1"] == "c1"
    kinto.delete_record(graph, "comments", "k1")
    kinto.put_record(graph, "links", "l1", {"Url": "u1"})
    kinto.delete_record(graph, "changes", "c1")

    ctx.query("changes", policy="server_only").all()
    for context in (ctx, sibling):
        assert wait_until(lambda: (now := settled(context, "comments")) is not None and "k1" not in now,
                          timeout=5), "the cascaded comment is gone"
        assert wait_until(lambda: (now := settled(context, "links")) is not None and now["l1"] is None,
                          timeout=5), "the cleared link is cleared here"
        assert context.object("comments", "k2").peek("Change") == "c2", "others untouched"
    block = ctx.object("blocks", "b1")
    assert block.peek("Change") == "c1", "what the server holds"
    with pytest.raises(tether.NotFoundError, match="changes/c1 was deleted"):
        block.peek("Change.Title")
    assert ctx.change_count == 0 and sibling.change_count == 0, "nothing made to save"


def test_rollback_of_a_referrers_delete_follows_its_gone_targets_rule(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """A referrer's own delete, rolled back after its target is known gone
    (another writer deleted c5, a fetch learned it; the clean-up left the
    referrers to their pending deletes): the rule applies at once, so
    nothing refers to a deleted record — the link's reference is cleared
    as an unsaved change, the comment is deleted again, and a save sends that."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    link, comment = ctx.object("links", "l5"), ctx.object("comments", "k5")
    link.delete()
    comment.delete()
    kinto.delete_record(graph, "changes", "c5")
    ctx.query("changes", policy="server_only").all()
    link.rollback()
    comment.rollback()
    assert link.pending == "update" and link.peek("Change") is None and link.changed_keys == ["Change"]
    assert comment.pending == "delete"
    assert ctx.save().failures == []
    assert kinto.get_record(graph, "links", "l5").get("Change") is None
    assert not exists(kinto, graph, "comments", "k5")


def test_rollback_of_a_referrers_delete_after_its_targets_delete_saved(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """The same after this context saved the target's delete: l1's and
    k1's own deletes met conflicts (another writer edited them) while c1's
    delete was saved; rolled back, they follow c1's rules at once, and the
    reference to c1 is no longer read from anywhere."""
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    link, comment = ctx.object("links", "l1"), ctx.object("comments", "k1")
    link.delete()
    comment.delete()
    kinto.patch_record(graph, "links", "l1", {"Url": "someone else's"})
    kinto.patch_record(graph, "comments", "k1", {"Text": "someone else's"})
    ctx.object("changes", "c1").delete()
    with pytest.raises(tether.ConflictError) as raised:
        ctx.save()
    assert {obj.id for obj, _ in raised.value.failures} == {"l1", "k1"}
    assert not exists(kinto, graph, "changes", "c1")
    link.rollback()
    comment.rollback()
    assert link.pending == "update" and link.peek("Change") is None
    assert comment.pending == "delete"
    ctx.save(merge="client_wins")
    assert kinto.get_record(graph, "links", "l1").get("Change") is None
    assert not exists(kinto, graph, "comments", "k1")


def test_related_to_a_deleted_target_is_not_found(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """A reference the server still holds to a deleted record (a writer
    that ignored the rules left b1): related() raises NotFoundError, as
    the header says, never an object for the deleted record."""
    kinto.put_record(graph, "blocks", "b1", {"Why": "left behind", "Change": "c1"})
    ctx = opened(open_ctx, kinto_url, graph, tmp_path)
    block = ctx.object("blocks", "b1")
    assert block.related("Change").id == "c1"
    kinto.delete_record(graph, "changes", "c1")
    ctx.query("changes", policy="server_only").all()
    with pytest.raises(tether.NotFoundError, match="changes/c1, which was deleted"):
        block.related("Change")
    assert block.peek("Change") == "c1", "the reference is what the server holds"
    ctx.close()
    ctx = opened(open_ctx, kinto_url, graph, tmp_path, entities=())
    with pytest.raises(tether.NotFoundError, match="which was deleted"):
        ctx.object("blocks", "b1").related("Change")


NOTES = {"notes": {"type": "object", "properties": {
    "Text": {"type": "string"},
    "Item": {"type": "string", "x-tether-to": "changes", "x-tether-delete": "cascade"},
    "Also": {"type": "string", "x-tether-to": "changes", "x-tether-inverse": "also", "x-tether-delete": "nullify"}}}}


def test_rollback_of_a_local_notes_delete_follows_its_gone_targets_rule(kinto, kinto_url, bucket, tmp_path, open_ctx, graph):
    """The same in a local store, whose clean-up left notes pending delete
    to their deletes: rolled back, n1 (cascade) is deleted again and n2
    (nullify) cleared, and so they stay after a save and a reopen."""
    stores = [tether.LocalStore("private", tmp_path / "p.db", NOTES)]
    ctx = open_ctx(kinto_url, graph, tmp_path / "rules.db", local_stores=stores)
    ctx.query("changes", policy="server_only").all()
    c8 = ctx.object("changes", "c8")
    one = ctx.insert("notes", {"Text": "one"}, id="n1")
    one.set_related("Item", c8)
    two = ctx.insert("notes", {"Text": "two"}, id="n2")
    two.set_related("Also", c8)
    ctx.save()
    one.delete()
    two.delete()
    kinto.delete_record(graph, "changes", "c8")
    ctx.query("changes", policy="server_only").all()
    one.rollback()
    two.rollback()
    assert one.pending == "delete"
    assert two.pending == "update" and two.peek("Also") is None and two.peek("Text") == "two"
    ctx.save()
    ctx.close()
    ctx = open_ctx(kinto_url, graph, tmp_path / "rules.db", local_stores=stores)
    assert [n.id for n in ctx.query("notes").all()] == ["n2"]
    assert ctx.object("notes", "n2").peek("Also") is None
