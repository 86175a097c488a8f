"""To-many relationships from Python (fetch options version 6, issue 25):
an entity's relationships and its references' targets are read, and
fetch(related=(obj, name)) answers the records referring to obj, from the
cache and the server alike, narrowed by a predicate, in every form."""

import asyncio

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


def test_fetch_related_answers_the_records_referring_to_an_object(pets, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pets, tmp_path / "s.db")
    ann = ctx.object("owners", "ann")
    cached, final = ctx.fetch_wait(None, related=(ann, "pets"), sort="Age")
    assert [p.id for p in final] == ["p1", "p2", "p4", "p5", "p7", "p8"]
    assert all(p.entity.name == "pets" for p in final)
    # From the cache alone now, as any fetch; a predicate narrows it.
    _, old = ctx.fetch_wait("pets", related=(ann, "pets"), where="Age > $1", args=[4], policy="cache_only",
                            sort="-Age")
    assert [p.id for p in old] == ["p8", "p7", "p5"]
    bob = ctx.object("owners", "bob")
    assert ctx.fetch("pets", related=(bob, "pets"), result="count").result(30) == 3
    assert sorted(bob.related_many("pets", result="ids")) == ["p0", "p3", "p6"]

    async def main():
        return await ctx.fetch_async(None, related=(bob, "pets"), result="values", properties=["Name"], sort="Age")

    assert asyncio.run(main()) == [{"Name": "pet0"}, {"Name": "pet3"}, {"Name": "pet6"}]


def test_fetch_related_refuses_what_it_cannot_answer(pets, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, pets, tmp_path / "s.db")
    ann = ctx.object("owners", "ann")
    with pytest.raises(tether.NotFoundError):
        ctx.fetch_wait(None, related=(ann, "cats"))
    with pytest.raises(tether.TetherError):
        ctx.fetch_wait("owners", related=(ann, "pets"))   # the relationship holds pets
    with pytest.raises(TypeError):
        ctx.fetch_wait(None)
    with pytest.raises(TypeError):
        ctx.fetch_wait(None, related=("ann", "pets"))
