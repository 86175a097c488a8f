"""Model-based test of delete rules (issue 28, "Tested"): seeded random
graphs of records on a real Kinto (changes, and three referrer collections
each with a random rule: cascade, nullify or deny), two sibling contexts,
random deletes here and by another writer on the server (Kinto REST,
following the same rules), random sibling edits and saves, and edits another
writer makes at the same time. After each step Kinto and both contexts are
compared with a reference model of the rules: no record lost that no rule
deleted, no reference left pointing at a deleted record, every conflict
reported (and none that is not one).

`make test` runs it for TETHER_RULES_SECONDS (default 3) of seeds;
scripts/fuzz rules runs it longer. A failure names its seed: replay it with
TETHER_RULES_SEED=N."""

import os
import random
import time

import pytest

import tether

RULES = ("cascade", "nullify", "deny")
REFERRERS = ("r0", "r1", "r2")
CHANGES = {"type": "object", "properties": {"Title": {"type": "string"}}}


def referrer_schema(rule):
    return {"type": "object", "properties": {
        "Text": {"type": "string"},
        "Change": {"type": "string", "x-tether-to": "changes", "x-tether-delete": rule}}}


class World:
    """The reference model: what Kinto must hold, by the rules."""

    def __init__(self, rng):
        self.rules = {name: rng.choice(RULES) for name in REFERRERS}
        self.changes = {"c%d" % i: "change %d" % i for i in range(rng.randint(2, 6))}
        self.refs = {name: {} for name in REFERRERS}
        for name in REFERRERS:
            for i in range(rng.randint(0, 5)):
                target = rng.choice(sorted(self.changes) + [None])
                self.refs[name]["%s_%d" % (name, i)] = {"Text": "t%d" % i, "Change": target}

    def referrers(self, change):
        return [(name, rid) for name in REFERRERS for rid, rec in sorted(self.refs[name].items())
                if rec["Change"] == change]

    def denied(self, change):
        return any(self.rules[name] == "deny" for name, _ in self.referrers(change))

    def delete(self, change):
        """The rules applied, as Tether and a well-behaved writer apply them."""
        del self.changes[change]
        for name, rid in self.referrers(change):
            if self.rules[name] == "cascade":
                del self.refs[name][rid]
            else:
                self.refs[name][rid]["Change"] = None


def listing(kinto, bucket, collection):
    got = kinto.request("GET", "/buckets/%s/collections/%s/records?_limit=1000" % (bucket, collection))
    return {r["id"]: r for r in got["data"]}


def check(world, kinto, bucket, contexts, seed, step):
    where = "seed %d, step %d (%s)" % (seed, step, world.rules)
    server = {"changes": listing(kinto, bucket, "changes")}
    assert {k: v["Title"] for k, v in server["changes"].items()} == world.changes, where + ": changes on Kinto"
    for name in REFERRERS:
        held = {rid: {"Text": r.get("Text"), "Change": r.get("Change")} for rid, r in listing(kinto, bucket, name).items()}
        assert held == world.refs[name], where + ": %s on Kinto (%s)" % (name, world.rules[name])
        dangling = [rid for rid, r in held.items() if r["Change"] is not None and r["Change"] not in world.changes]
        assert not dangling, where + ": %s refer to deleted changes" % dangling
    for ctx in contexts:
        assert ctx.change_count == 0, where + ": unsaved changes left %s" % [(o.entity.name, o.id) for o in ctx.changed_objects]
        seen = {o.id: o.peek("Title") for o in ctx.fetch_wait("changes", policy="server_only")[1]}
        assert seen == world.changes, where + ": changes in a context"
        for name in REFERRERS:
            seen = {o.id: {"Text": o.peek("Text"), "Change": o.peek("Change")}
                    for o in ctx.fetch_wait(name, policy="server_only")[1]}
            assert seen == world.refs[name], where + ": %s in a context" % name


def failed_ids(error):
    return sorted(obj.id for obj, _ in error.failures)


def local_delete(rng, world, ctx, kinto, bucket):
    if not world.changes:
        return
    change = rng.choice(sorted(world.changes))
    if world.denied(change):
        with pytest.raises(tether.NotAllowedError):
            ctx.object("changes", change).delete()
        assert ctx.change_count == 0, "a refused delete changes nothing"
        return
    ctx.object("changes", change).delete()
    expected = 1 + len(world.referrers(change))
    report = ctx.save()
    assert (report.saved, report.failures) == (expected, []), "the delete and each of its rules' changes"
    world.delete(change)


def foreign_delete(rng, world, kinto, bucket, contexts):
    """Another writer deletes a change on Kinto, following the rules itself."""
    if not world.changes:
        return
    change = rng.choice(sorted(world.changes))
    if world.denied(change):
        return
    for name, rid in world.referrers(change):
        if world.rules[name] == "cascade":
            kinto.delete_record(bucket, name, rid)
        else:
            kinto.put_record(bucket, name, rid, {"Text": world.refs[name][rid]["Text"]})  # null is no string
    kinto.delete_record(bucket, "changes", change)
    world.delete(change)


def sibling_edits(rng, world, contexts):
    """Each sibling edits a referrer (perhaps the same one); both save, in a
    random order. The second writer's text is the one kept; a conflict, if
    any, is only on the record both edited, and settled by client_wins."""
    records = [(name, rid) for name in REFERRERS for rid in sorted(world.refs[name])]
    if not records:
        return
    picks = [rng.choice(records) for _ in contexts]
    texts = []
    for ctx, (name, rid) in zip(contexts, picks):
        text = "edit %d" % rng.randrange(10 ** 6)
        ctx.object(name, rid).Text = text
        texts.append(text)
    order = list(range(len(contexts)))
    rng.shuffle(order)
    for position, index in enumerate(order):
        ctx, (name, rid) = contexts[index], picks[index]
        try:
            ctx.save()
        except tether.ConflictError as error:
            earlier = [picks[i] for i in order[:position]]
            assert (name, rid) in earlier, "a conflict only where another context saved first"
            assert failed_ids(error) == [rid]
            ctx.save(merge="client_wins")
        world.refs[name][rid]["Text"] = texts[index]


def edit_against_another_writer(rng, world, ctx, kinto, bucket):
    """An edit here while another writer edits some records on Kinto: the
    save reports a conflict for exactly the records both edited."""
    records = [(name, rid) for name in REFERRERS for rid in sorted(world.refs[name])]
    if not records:
        return
    mine = rng.sample(records, rng.randint(1, min(3, len(records))))
    theirs = rng.sample(records, rng.randint(0, min(3, len(records))))
    stamp = rng.randrange(10 ** 6)                     # each edit a new value: setting the same one changes nothing
    for name, rid in mine:
        ctx.object(name, rid).Text = "mine %d" % stamp
    for name, rid in theirs:
        kinto.patch_record(bucket, name, rid, {"Text": "theirs %d" % stamp})
        world.refs[name][rid]["Text"] = "theirs %d" % stamp
    both = sorted(rid for name, rid in set(mine) & set(theirs))
    if both:
        with pytest.raises(tether.ConflictError) as raised:
            ctx.save()
        assert failed_ids(raised.value) == both, "every conflict reported, and only those"
        policy = rng.choice(["server_wins", "client_wins"])
        ctx.save(merge=policy)
        if policy == "client_wins":
            for name, rid in mine:
                world.refs[name][rid]["Text"] = "mine %d" % stamp
    else:
        ctx.save()
    for name, rid in mine:
        if rid not in both:
            world.refs[name][rid]["Text"] = "mine %d" % stamp


def run_seed(seed, kinto, kinto_url, tmp_path, open_ctx, steps):
    rng = random.Random(seed)
    world = World(rng)
    bucket = kinto.create_bucket()
    try:
        kinto.create_collection(bucket, "changes", CHANGES)
        kinto.put_records(bucket, "changes", [(cid, {"Title": title}) for cid, title in sorted(world.changes.items())])
        for name in REFERRERS:
            kinto.create_collection(bucket, name, referrer_schema(world.rules[name]))
            if world.refs[name]:
                kinto.put_records(bucket, name, [(rid, {k: v for k, v in rec.items() if v is not None})
                                                 for rid, rec in sorted(world.refs[name].items())])
        ctx = open_ctx(kinto_url, bucket, tmp_path / ("s%d.db" % seed))
        sibling = ctx.open_sibling("b")
        contexts = [ctx, sibling]
        try:
            check(world, kinto, bucket, contexts, seed, 0)
            for step in range(1, steps + 1):
                action = rng.choice(["local_delete", "foreign_delete", "sibling_edits", "edit_against_another_writer"])
                try:
                    if action == "local_delete":
                        local_delete(rng, world, rng.choice(contexts), kinto, bucket)
                    elif action == "foreign_delete":
                        foreign_delete(rng, world, kinto, bucket, contexts)
                    elif action == "sibling_edits":
                        sibling_edits(rng, world, contexts)
                    else:
                        edit_against_another_writer(rng, world, rng.choice(contexts), kinto, bucket)
                except (AssertionError, pytest.fail.Exception) as failure:
                    raise AssertionError("seed %d, step %d, %s (%s): %s" % (seed, step, action, world.rules, failure)) from None
                check(world, kinto, bucket, contexts, seed, step)
        finally:
            sibling.close()
            ctx.close()
    finally:
        kinto.delete_bucket(bucket)


def test_random_deletes_and_edits_follow_the_rules(kinto, kinto_url, tmp_path, open_ctx):
    budget = float(os.environ.get("TETHER_RULES_SECONDS", "3"))
    if "TETHER_RULES_SEED" in os.environ:
        seeds = [int(os.environ["TETHER_RULES_SEED"])]
    else:
        first = random.randrange(10 ** 6)
        seeds = (first + n for n in range(10 ** 6))
    start = time.monotonic()
    ran = 0
    for seed in seeds:
        run_seed(seed, kinto, kinto_url, tmp_path, open_ctx, steps=8)
        ran += 1
        if time.monotonic() - start > budget:
            break
    print("delete rules model: %d seeds in %.1f s" % (ran, time.monotonic() - start))
