"""The model is built from the collections' JSON schemas."""

import pytest

import tether

ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "Name": {"type": "string", "x-tether-code": 501},
        "Count": {"type": "integer", "x-tether-code": 502},
        "Score": {"type": "number", "x-tether-code": 503},
        "Flag": {"type": "boolean", "x-tether-code": 504},
        "Tags": {"type": "array", "items": {"type": "string"}, "x-tether-code": 505},
        "Meta": {"type": "object", "x-tether-code": 506},
    },
    "required": ["Name", "Count"],
}

PLAIN_SCHEMA = {
    "type": "object",
    "properties": {"Title": {"type": "string"}, "Size": {"type": "integer"}},
}


@pytest.fixture(scope="module")
def model_bucket(kinto, bucket):
    kinto.create_collection(bucket, "items", ITEM_SCHEMA)
    kinto.create_collection(bucket, "plain", PLAIN_SCHEMA)
    return bucket


def test_library_version():
    assert tether.library_version() == "0.3.0"
    assert tether.library_version_number() == 3000
    assert tether.errstr(tether.E_NETWORK) == "TETHER_E_NETWORK"
    assert tether.errstr(-999) == "TETHER_E_UNKNOWN"


def test_entities(kinto_url, model_bucket, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, model_bucket, tmp_path / "s.db")
    assert ctx.online is True
    names = [e.name for e in ctx.entities]
    assert names == ["items", "plain"]
    items = ctx.entity("items")
    assert items is ctx.entities[0]            # one Entity per handle
    assert items.route == "/buckets/%s/collections/items/records" % model_bucket
    assert "fetch" in items.operations
    assert items.operations <= {"fetch", "insert", "update", "delete"}
    with pytest.raises(tether.NotFoundError) as ei:
        ctx.entity("nope")
    assert ei.value.status == tether.E_NOT_FOUND
    assert ei.value.name == "TETHER_E_NOT_FOUND"


def test_attributes(kinto_url, model_bucket, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, model_bucket, tmp_path / "s.db")
    items = ctx.entity("items")
    by = {a.name: a for a in items.attributes}
    assert {"id", "last_modified", "Name", "Count", "Score", "Flag", "Tags", "Meta"} <= set(by)
    assert (by["Name"].type, by["Name"].code) == ("text", 501)
    assert (by["Count"].type, by["Count"].code) == ("integer", 502)
    assert (by["Score"].type, by["Score"].code) == ("real", 503)
    assert (by["Flag"].type, by["Flag"].code) == ("boolean", 504)
    assert (by["Tags"].type, by["Tags"].code) == ("json", 505)
    assert (by["Meta"].type, by["Meta"].code) == ("json", 506)
    assert by["id"].is_id and not by["id"].is_version
    assert by["last_modified"].is_version and not by["last_modified"].is_id
    assert by["last_modified"].type == "integer"
    assert by["Name"].required and by["Count"].required and not by["Score"].required
    assert [a for a in items.attributes if a.is_id] == [by["id"]]
    assert items.id_attribute == by["id"] and items.version_attribute == by["last_modified"]
    # codes are unique within the entity
    codes = [a.code for a in items.attributes]
    assert len(set(codes)) == len(codes)
    # lookups by name and by code go through the library
    assert items.attribute("Score") == by["Score"]
    assert items.attribute(504) == by["Flag"]
    with pytest.raises(tether.NotFoundError):
        items.attribute("Nope")
    with pytest.raises(tether.NotFoundError):
        items.attribute(99999)
    with pytest.raises(TypeError):
        items.attribute(1.5)


def test_codes_are_stable_across_opens(kinto_url, model_bucket, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, model_bucket, tmp_path / "s.db")
    first = {a.name: a.code for a in ctx.entity("plain").attributes}
    ctx.close()
    assert all(isinstance(c, int) for c in first.values())
    ctx2 = open_ctx(kinto_url, model_bucket, tmp_path / "s.db")
    second = {a.name: a.code for a in ctx2.entity("plain").attributes}
    assert first == second


def test_entity_data_survives_close(kinto_url, model_bucket, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, model_bucket, tmp_path / "s.db")
    items = ctx.entity("items")
    ctx.close()
    # Python copies of the model stay readable; library calls report the handle.
    assert items.name == "items" and len(items.attributes) >= 8
    with pytest.raises(tether.HandleError):
        items.attribute("Name")
    with pytest.raises(tether.HandleError):
        ctx.entities


def test_entity_codes_and_diagnostics(kinto, bucket, kinto_url, tmp_path, open_ctx):
    # Two collections whose names differ only in case, and explicit codes that
    # collide: 0.1 failed the whole bucket on the first; now both open, and
    # the collision is a diagnostic the host can read.
    kinto.create_collection(bucket, "Cased", PLAIN_SCHEMA)
    kinto.create_collection(bucket, "cased", {"type": "object", "properties": {
        "A": {"type": "string", "x-tether-code": 900}, "B": {"type": "string", "x-tether-code": 900}}})
    ctx = open_ctx(kinto_url, bucket, tmp_path / "d.db")
    upper, lower = ctx.entity("Cased"), ctx.entity("cased")
    assert upper.code != lower.code and upper.code > 0 and lower.code > 0
    found = [(d.entity, d.attribute) for d in ctx.diagnostics]
    assert found == [("cased", "B")], ctx.diagnostics
    assert lower.attribute("A").code == 900 and lower.attribute("B").code != 900
    codes = {e.name: e.code for e in ctx.entities}
    ctx.close()
    again = open_ctx(kinto_url, bucket, tmp_path / "d.db")
    assert {e.name: e.code for e in again.entities} == codes, "entity codes are stable"
