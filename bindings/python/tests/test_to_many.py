"""To-many relationships from Python (fetch options version 6, issue 25):
an entity's relationships and its references' targets are read, and
obj.related_query(name) (or related_many, its all()) answers the records
referring to obj, from the cache and the server alike, narrowed by a
predicate, in every form a query answers."""

import pytest

import tether

OWNERS = {"type": "object", "properties": {"Name": {"type": "string"}}}
PETS = {"type": "object", "properties": {
    "Name": {"type": "string"}, "Age": {"type": "integer"},
    "Owner": {"type": "string", "x-tether-to": "owners", "x-tether-inverse": "pets", "x-tether-delete": "cascade"}}}


@pytest.fixture(scope="module")
def pets(kinto, bucket):
    kinto.create_collection(bucket, "owners", OWNERS)
    kinto.create_collection(bucket, "pets", PETS)
    kinto.put_records(bucket, "owners", [("ann", {"Name": "Ann"}), ("bob", {"Name": "Bob"})])
    kinto.put_records(bucket, "pets", [("p%d" % i, {"Name": "pet%d" % i, "Age": i, "Owner": "ann" if i % 3 else "bob"})
                                       for i in range(9)])
    return bucket


def test_the_model_names_relationships_and_targets(pets, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pets, tmp_path / "s.db")
    owners, pet = ctx.entity("owners"), ctx.entity("pets")
    assert owners.relationships == [tether.Relationship("pets", "pets", "Owner")]
    assert owners.relationship("pets").entity == "pets"
    with pytest.raises(tether.NotFoundError):
        owners.relationship("cats")
    assert pet.attribute("Owner").target == "owners" and pet.attribute("Owner").delete_rule == "cascade"
    assert pet.attribute("Name").target is None and pet.attribute("Name").delete_rule is None
    assert pet.relationships == []


def test_related_query_answers_the_records_referring_to_an_object(pets, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pets, tmp_path / "s.db")
    ann = ctx.object("owners", "ann")
    final = ann.related_many("pets", sort="Age")
    assert [p.id for p in final] == ["p1", "p2", "p4", "p5", "p7", "p8"]
    assert final.offline is False
    assert all(p.entity.name == "pets" for p in final)
    # From the cache alone now, as any fetch; a predicate narrows it.
    old = ann.related_query("pets", where="Age > $1", args=[4], policy="cache_only", sort="-Age").all()
    assert [p.id for p in old] == ["p8", "p7", "p5"]
    bob = ctx.object("owners", "bob")
    assert sorted(p.id for p in bob.related_query("pets").start().result(30)) == ["p0", "p3", "p6"]
    assert bob.related_query("pets").count() == 3
    assert sorted(bob.related_query("pets").ids()) == ["p0", "p3", "p6"]
    assert bob.related_query("pets", sort="Age").values("Name") == [{"Name": "pet0"}, {"Name": "pet3"}, {"Name": "pet6"}]
    assert bob.related_query("pets", sort="-Age").first().id == "p6"


def test_related_query_refuses_what_it_cannot_answer(pets, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pets, tmp_path / "s.db")
    ann = ctx.object("owners", "ann")
    with pytest.raises(tether.NotFoundError):
        ann.related_many("cats")
    with pytest.raises(tether.NotFoundError):
        ctx.object("pets", "p1").related_many("pets")   # pets have no to-many "pets"
    with pytest.raises(TypeError):
        ann.related_many("pets", result="count")   # a QueryResult's method says what it answers
    with pytest.raises(ValueError):
        ann.related_query("pets", limit=0)
