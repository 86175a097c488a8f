"""Model-based test of delete rules (issue 28, "Tested"): seeded random
graphs of records across a real Kinto and two local stores, with a random
delete rule (cascade, nullify or deny) on every reference:

    changes                       (server)
    r0, r1, r2: Change -> changes, Up -> the one before (r0.Up -> r2: chains
                and cycles of records through the three)          (server)
    notes: Change -> changes, Ref -> r0, Parent -> notes           (local "private")
    tags: Note -> notes                                            (local "extra")

Two sibling contexts make random deletes here (of any record), another
writer deletes on Kinto (following the rules over the server's records,
knowing nothing of the local stores), deletes here are rolled back (undoing
what their rules changed), siblings edit and save, edits race
another writer's; some steps run with the local stores detached (deletes
then reach them when they are attached again) or drop the notes. After each
step Kinto, both contexts and both local files are compared with a
reference model of the rules: no record lost that no rule deleted, no
reference left pointing at a deleted record, every conflict reported (and
none that is not one).

The model's rules, worked out here and not asked of the library: deleting a
record here deletes the closure of its cascade referrers (through every
store); it is refused, changing nothing, when a deny referrer outside that
closure refers to a record in it; nullify referrers outside the closure
lose their reference. A deletion learned afterwards (another writer's, or
one made while a local store was detached) cannot be refused: the local
referrers follow cascade, and nullify and deny alike clear the reference.

`make test` runs it for TETHER_RULES_SECONDS (default 3) of seeds;
scripts/fuzz rules runs it longer. A failure names its seed: replay it with
TETHER_RULES_SEED=N (TETHER_RULES_STEPS: steps a seed, default 8;
TETHER_RULES_TRACE=1 prints each step, and each delete here with its plan)."""

import os
import random
import time

import pytest

import tether

RULES = ("cascade", "nullify", "deny")
SERVER = ("changes", "r0", "r1", "r2")
LOCAL = {"notes": "private", "tags": "extra"}
ENTITIES = SERVER + tuple(LOCAL)
# entity -> {field: target entity}
REFERENCES = {
    "changes": {},
    "r0": {"Change": "changes", "Up": "r2"},
    "r1": {"Change": "changes", "Up": "r0"},
    "r2": {"Change": "changes", "Up": "r1"},
    "notes": {"Change": "changes", "Ref": "r0", "Parent": "notes"},
    "tags": {"Note": "notes"},
}


def configuration(entity):
    return LOCAL.get(entity, "")


def stored(source, target, tid):
    """The value a reference holds: an id in its own store, a URI across."""
    if tid is None:
        return None
    if configuration(source) == configuration(target):
        return tid
    return "tether://%s/%s/%s" % (configuration(target) or "server", target, tid)


def schema(entity, rules):
    props = {"Text": {"type": "string"}}
    for field, target in REFERENCES[entity].items():
        props[field] = {"type": "string", "x-tether-to": target, "x-tether-inverse": "%s_%s" % (entity, field),
                        "x-tether-delete": rules[(entity, field)]}
    return {"type": "object", "properties": props}


class World:
    """The reference model: what every store must hold, by the rules."""

    def __init__(self, rng):
        self.rules = {(e, f): rng.choice(RULES) for e in ENTITIES for f in REFERENCES[e]}
        self.records = {e: {} for e in ENTITIES}
        for e in ENTITIES:
            for i in range(rng.randint(1 if e == "changes" else 0, 5)):
                self.records[e]["%s%d" % (e[0] if e in LOCAL else e, i)] = {"Text": "%s %d" % (e, i)}
        for e in ENTITIES:
            for rec in self.records[e].values():
                for field, target in REFERENCES[e].items():
                    rec[field] = rng.choice(sorted(self.records[target]) + [None, None])
        self.attached = True

    def describe(self):
        return " ".join("%s.%s:%s" % (e, f, r[0]) for (e, f), r in sorted(self.rules.items()))

    def referrers(self, entity, rid, visible):
        """(source, id, field) referring to entity/rid, in the stores visible."""
        return [(e, sid, field) for e in ENTITIES if e in visible for field, target in REFERENCES[e].items()
                if target == entity for sid, rec in sorted(self.records[e].items()) if rec[field] == rid]

    def plan(self, entity, rid, visible):
        """A delete here: (deleted, nullified) or None when a deny refuses it."""
        deleted = {(entity, rid)}
        queue = [(entity, rid)]
        while queue:
            e, i = queue.pop()
            for s, sid, field in self.referrers(e, i, visible):
                if self.rules[(s, field)] == "cascade" and (s, sid) not in deleted:
                    deleted.add((s, sid))
                    queue.append((s, sid))
        nullified = {}
        for e, i in deleted:
            for s, sid, field in self.referrers(e, i, visible):
                if (s, sid) in deleted:
                    continue
                if self.rules[(s, field)] == "deny":
                    return None
                if self.rules[(s, field)] == "nullify":
                    nullified.setdefault((s, sid), set()).add(field)
        return deleted, nullified

    def apply(self, deleted, nullified):
        for (e, i), fields in nullified.items():
            for field in fields:
                self.records[e][i][field] = None
        for e, i in deleted:
            del self.records[e][i]

    def learned(self, gone):
        """Records deleted where the rules could not refuse (another writer,
        a store detached): local referrers follow cascade, others clear."""
        queue = list(gone)
        while queue:
            e, i = queue.pop()
            for s, sid, field in self.referrers(e, i, LOCAL):
                if sid not in self.records[s]:
                    continue
                if self.rules[(s, field)] == "cascade":
                    del self.records[s][sid]
                    queue.append((s, sid))
                else:
                    self.records[s][sid][field] = None

    def dangling(self):
        return [(e, i, f) for e in ENTITIES for i, rec in self.records[e].items() for f, t in REFERENCES[e].items()
                if rec[f] is not None and rec[f] not in self.records[t]]


def listing(kinto, bucket, collection):
    got = kinto.request("GET", "/buckets/%s/collections/%s/records?_limit=1000" % (bucket, collection))
    return {r["id"]: r for r in got["data"]}


def expected(world, entity):
    return {i: {k: stored(entity, REFERENCES[entity].get(k), v) if k != "Text" else v for k, v in rec.items()}
            for i, rec in world.records[entity].items()}


def held(obj, entity):
    return {k: obj.peek(k) for k in ["Text"] + sorted(REFERENCES[entity])}


def check(world, kinto, bucket, contexts, where, settle=0.0):
    assert not world.dangling(), where + ": the model itself dangles"
    for entity in SERVER:
        on_kinto = {i: {k: r.get(k) for k in ["Text"] + sorted(REFERENCES[entity])}
                    for i, r in listing(kinto, bucket, entity).items()}
        assert on_kinto == expected(world, entity), where + ": %s on Kinto" % entity
    for ctx in contexts:
        assert ctx.change_count == 0, where + ": unsaved changes left %s" % [(o.entity.name, o.id) for o in ctx.changed_objects]
        for entity in ENTITIES:
            if entity in LOCAL and not world.attached:
                continue
            want = expected(world, entity)
            # First what the cache holds (a deletion learned reaches the
            # cached referrers on the worker, as an open's clean-up does:
            # give them a moment), then what a fetch from the server brings.
            # (Only where the step changed nothing the cache cannot know
            # without a fetch: another writer's edits are learned by one.)
            deadline = time.monotonic() + settle
            while settle or entity in LOCAL:
                seen = {o.id: held(o, entity) for o in ctx.query(entity, policy="cache_only").all()}
                if seen == want or time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
            if settle or entity in LOCAL:
                assert seen == want, where + ": %s in a context's cache" % entity
            if entity in SERVER:
                seen = {o.id: held(o, entity) for o in ctx.query(entity, policy="server_only").all()}
                assert seen == want, where + ": %s in a context" % entity


def failed_ids(error):
    return sorted(obj.id for obj, _ in error.failures)


def visible(world):
    return ENTITIES if world.attached else SERVER


def local_delete(rng, world, ctx):
    """A delete here of any record of a store attached."""
    candidates = [(e, i) for e in visible(world) for i in sorted(world.records[e])]
    if not candidates:
        return
    entity, rid = rng.choice(candidates)
    plan = world.plan(entity, rid, visible(world))
    if os.environ.get("TETHER_RULES_TRACE"):
        print("delete here", entity, rid, plan, {e: world.records[e] for e in LOCAL})
    if plan is None:
        with pytest.raises(tether.NotAllowedError):
            ctx.object(entity, rid).delete()
        assert ctx.change_count == 0, "a refused delete (%s/%s) changes nothing" % (entity, rid)
        return
    deleted, nullified = plan
    ctx.object(entity, rid).delete()
    report = ctx.save()
    changed = len(deleted | set(nullified))
    assert (report.saved, report.failures) == (changed, []), \
        "deleting %s/%s: the delete and each of its rules' changes %s %s" % (entity, rid, sorted(deleted), sorted(nullified))
    world.apply(deleted, nullified)
    if not world.attached:
        world.learned(deleted)


def delete_rolled_back(rng, world, ctx):
    """A delete here, rolled back (the object's, or the context's whole):
    what its rules changed is undone, nothing is left to save."""
    candidates = [(e, i) for e in visible(world) for i in sorted(world.records[e])]
    if not candidates:
        return
    entity, rid = rng.choice(candidates)
    if world.plan(entity, rid, visible(world)) is None:
        return
    target = ctx.object(entity, rid)
    target.delete()
    if rng.random() < 0.5:
        target.rollback()
    else:
        ctx.rollback()
    assert ctx.change_count == 0, "rolling back %s/%s leaves nothing to save" % (entity, rid)


def foreign_delete(rng, world, kinto, bucket, contexts):
    """Another writer deletes a server record on Kinto, following the
    rules over the server's records (it knows nothing of local stores)."""
    candidates = [(e, i) for e in SERVER for i in sorted(world.records[e])]
    if not candidates:
        return
    entity, rid = rng.choice(candidates)
    plan = world.plan(entity, rid, SERVER)
    if plan is None:
        return
    deleted, nullified = plan
    for (e, i), fields in sorted(nullified.items()):
        if (e, i) in deleted:
            continue
        rec = {k: stored(e, REFERENCES[e].get(k), v) if k != "Text" else v
               for k, v in world.records[e][i].items() if k not in fields and v is not None}
        kinto.put_record(bucket, e, i, rec)            # null is no string: the field goes
    for e, i in sorted(deleted, key=lambda d: d != (entity, rid)):
        kinto.delete_record(bucket, e, i)
    world.apply(deleted, nullified)
    world.learned(deleted)
    # A context learns of it by a fetch of the target's entity alone.
    rng.choice(contexts).query(entity, policy="server_only").all()


def sibling_edits(rng, world, contexts):
    """Each sibling edits a record (perhaps the same one); both save, in a
    random order. The second writer's text is the one kept; a conflict, if
    any, is only on the record both edited, and settled by client_wins."""
    records = [(e, i) for e in visible(world) for i in sorted(world.records[e])]
    if not records:
        return
    picks = [rng.choice(records) for _ in contexts]
    texts = []
    for ctx, (entity, rid) in zip(contexts, picks):
        text = "edit %d" % rng.randrange(10 ** 6)
        ctx.object(entity, rid).Text = text
        texts.append(text)
    order = list(range(len(contexts)))
    rng.shuffle(order)
    for position, index in enumerate(order):
        ctx, (entity, rid) = contexts[index], picks[index]
        try:
            ctx.save()
        except tether.ConflictError as error:
            earlier = [picks[i] for i in order[:position]]
            assert (entity, rid) in earlier, "a conflict only where another context saved first"
            assert failed_ids(error) == [rid]
            ctx.save(merge="client_wins")
        world.records[entity][rid]["Text"] = texts[index]


def edit_against_another_writer(rng, world, ctx, kinto, bucket):
    """An edit here while another writer edits some records on Kinto: the
    save reports a conflict for exactly the records both edited."""
    records = [(e, i) for e in SERVER for i in sorted(world.records[e])]
    if not records:
        return
    mine = rng.sample(records, rng.randint(1, min(3, len(records))))
    theirs = rng.sample(records, rng.randint(0, min(3, len(records))))
    stamp = rng.randrange(10 ** 6)                     # each edit a new value: setting the same one changes nothing
    for entity, rid in mine:
        ctx.object(entity, rid).Text = "mine %d" % stamp
    for entity, rid in theirs:
        kinto.patch_record(bucket, entity, rid, {"Text": "theirs %d" % stamp})
        world.records[entity][rid]["Text"] = "theirs %d" % stamp
    both = sorted(rid for _, rid in set(mine) & set(theirs))
    if both:
        with pytest.raises(tether.ConflictError) as raised:
            ctx.save()
        assert failed_ids(raised.value) == both, "every conflict reported, and only those"
        policy = rng.choice(["server_wins", "client_wins"])
        ctx.save(merge=policy)
        if policy == "client_wins":
            for entity, rid in mine:
                world.records[entity][rid]["Text"] = "mine %d" % stamp
    else:
        ctx.save()
    for entity, rid in mine:
        if rid not in both:
            world.records[entity][rid]["Text"] = "mine %d" % stamp


class Session:
    """Both siblings, opened with the local stores attached or not."""

    def __init__(self, world, open_ctx, kinto_url, bucket, tmp_path, seed):
        self.world, self.open_ctx, self.kinto_url, self.bucket = world, open_ctx, kinto_url, bucket
        self.server_path = tmp_path / ("s%d.db" % seed)
        self.stores = [tether.LocalStore(configuration, tmp_path / ("%s%d.db" % (configuration, seed)),
                                         {entity: schema(entity, world.rules)})
                       for entity, configuration in sorted(LOCAL.items())]
        self.contexts = []

    def open(self):
        ctx = self.open_ctx(self.kinto_url, self.bucket, self.server_path,
                            local_stores=self.stores if self.world.attached else [])
        self.contexts = [ctx, ctx.open_sibling("b")]

    def close(self):
        for ctx in reversed(self.contexts):
            ctx.close()
        self.contexts = []

    def reopen(self, attached):
        self.close()
        self.world.attached = attached
        self.open()


def run_seed(seed, kinto, kinto_url, tmp_path, open_ctx, steps):
    rng = random.Random(seed)
    world = World(rng)
    bucket = kinto.create_bucket()
    session = Session(world, open_ctx, kinto_url, bucket, tmp_path, seed)
    try:
        for entity in SERVER:
            kinto.create_collection(bucket, entity, schema(entity, world.rules))
        for entity in SERVER:
            if world.records[entity]:
                kinto.put_records(bucket, entity, [(i, {k: v for k, v in rec.items() if v is not None})
                                                   for i, rec in sorted(expected(world, entity).items())])
        session.open()
        ctx = session.contexts[0]
        for entity in SERVER:
            ctx.query(entity, policy="server_only").all()
        for entity in LOCAL:                                # the local records, then their references
            for i, rec in sorted(world.records[entity].items()):
                ctx.insert(entity, {"Text": rec["Text"]}, id=i)
        for entity in LOCAL:
            for i, rec in sorted(expected(world, entity).items()):
                for field in REFERENCES[entity]:
                    if rec[field] is not None:
                        setattr(ctx.object(entity, i), field, rec[field])
        ctx.save()
        check(world, kinto, bucket, session.contexts, "seed %d, step 0 [%s]" % (seed, world.describe()))
        for step in range(1, steps + 1):
            action = rng.choice(["local_delete"] * 3 + ["foreign_delete"] * 2 + ["sibling_edits", "edit_against_another_writer",
                                 "delete_rolled_back",
                                 "detach" if world.attached else "attach"] + (["drop_notes"] if rng.random() < 0.3 else []))
            where = "seed %d, step %d, %s [%s]" % (seed, step, action, world.describe())
            if os.environ.get("TETHER_RULES_TRACE"):
                print(where)
            settle = 0.0
            try:
                if action == "local_delete":
                    local_delete(rng, world, rng.choice(session.contexts))
                elif action == "foreign_delete":
                    foreign_delete(rng, world, kinto, bucket, session.contexts)
                    settle = 5.0
                elif action == "delete_rolled_back":
                    delete_rolled_back(rng, world, rng.choice(session.contexts))
                elif action == "sibling_edits":
                    sibling_edits(rng, world, session.contexts)
                elif action == "edit_against_another_writer":
                    edit_against_another_writer(rng, world, rng.choice(session.contexts), kinto, bucket)
                elif action in ("detach", "attach"):
                    session.reopen(attached=action == "attach")
                    settle = 5.0
                else:
                    session.close()
                    next(s for s in session.stores if s.configuration == "private").drop("notes")
                    gone = [("notes", i) for i in world.records["notes"]]
                    world.records["notes"] = {}
                    world.learned(gone)
                    world.attached = True
                    session.open()
                    settle = 5.0
            except (AssertionError, pytest.fail.Exception, tether.TetherError) as failure:
                raise AssertionError("%s: %s: %s" % (where, type(failure).__name__, failure)) from None
            check(world, kinto, bucket, session.contexts, where, settle)
    finally:
        session.close()
        kinto.delete_bucket(bucket)


def test_random_deletes_and_edits_follow_the_rules(kinto, kinto_url, tmp_path, open_ctx):
    budget = float(os.environ.get("TETHER_RULES_SECONDS", "3"))
    steps = int(os.environ.get("TETHER_RULES_STEPS", "8"))
    if "TETHER_RULES_SEED" in os.environ:
        seeds = [int(os.environ["TETHER_RULES_SEED"])]
    else:
        first = random.randrange(10 ** 6)
        seeds = (first + n for n in range(10 ** 6))
    start = time.monotonic()
    ran = 0
    for seed in seeds:
        run_seed(seed, kinto, kinto_url, tmp_path, open_ctx, steps=steps)
        ran += 1
        if time.monotonic() - start > budget:
            break
    print("delete rules model: %d seeds in %.1f s" % (ran, time.monotonic() - start))
