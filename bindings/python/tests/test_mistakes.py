"""A user's mistakes caught where they are made, each saying what happened
and what to do (issue 22): a misspelled attribute, an insert with a bad key
or value (refused whole), a record id that never existed, a server URL
without /v1, a record the server's schema refuses, and a `with` block left
with unsaved changes."""

import hashlib
import warnings

import pytest

import tether

SCHEMA = {
    "type": "object",
    "properties": {
        "Title": {"type": "string"},
        "Severity": {"type": "number"},
        "Status": {"type": "string", "enum": ["open", "done"]},
        "id_note": {"type": "string"},
        "delete": {"type": "string"},
    },
}


@pytest.fixture
def jobs(kinto, bucket, request):
    # Each test (and parameter) its own collection.
    name = "jobs_" + hashlib.sha1(request.node.name.encode()).hexdigest()[:12]
    kinto.create_collection(bucket, name, SCHEMA)
    kinto.put_records(bucket, name, [("j1", {"Title": "first", "Severity": 2.0, "Status": "open",
                                             "delete": "a key named as a method"})])
    return name


def ids_on_server(kinto, bucket, collection):
    return sorted(r["id"] for r in kinto.request("GET", "/buckets/%s/collections/%s/records"
                                                 % (bucket, collection))["data"])


def opened(open_ctx, kinto_url, bucket, tmp_path, jobs):
    ctx = open_ctx(kinto_url, bucket, tmp_path / "mistakes.db")
    ctx.query(jobs, policy="server_only").all()
    return ctx


def test_a_misspelled_attribute_raises_and_names_the_nearest_key(kinto_url, bucket, tmp_path, open_ctx, jobs):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, jobs)
    job = ctx.object(jobs, "j1")
    with pytest.raises(AttributeError) as caught:
        job.Sevrity = 4.0
    assert str(caught.value) == "%s object 'j1' has no attribute 'Sevrity' (did you mean Severity?)" % jobs
    assert "Sevrity" not in job.__dict__ and job.pending is None, "nothing kept, nothing changed"
    with pytest.raises(AttributeError) as caught:
        job.Sevrity
    assert str(caught.value) == "%s object 'j1' has no attribute 'Sevrity' (did you mean Severity?)" % jobs
    with pytest.raises(AttributeError) as caught:
        job.zzz = 1
    assert str(caught.value) == "%s object 'j1' has no attribute 'zzz'" % jobs
    job.Severity = 4.0                       # a key of the model: a set
    assert job.pending == "update" and job.peek("Severity") == 4.0
    # Keys the Object's own names hide are reached by subscript.
    assert callable(job.delete) and job["delete"] == "a key named as a method"
    job["delete"] = "changed"
    assert job.peek("delete") == "changed"
    assert job["id"] == "j1"


def test_typed_checks_the_declared_keys(kinto_url, bucket, tmp_path, open_ctx, jobs):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, jobs)

    class Job:
        Title: str
        Severity: float

    class Misspelled:
        Sevrity: float

    job = ctx.object(jobs, "j1").typed(Job)
    assert job is ctx.object(jobs, "j1") and job.Severity == 2.0
    with pytest.raises(AttributeError, match=r"has no attribute 'Sevrity' \(did you mean Severity\?\)"):
        ctx.object(jobs, "j1").typed(Misspelled)


@pytest.mark.parametrize("values, error, message", [
    ({"Title": "x", "Sevrity": 1}, tether.NotFoundError, '{jobs} has no key "Sevrity"'),
    ({"Title": "x", "Severity": "high"}, tether.TypeMismatchError, "{jobs}.Severity holds real values, not text"),
    ({"Title": "x", "Status": "lost"}, tether.InvalidError, '{jobs}.Status must be one of "open", "done"'),
])
def test_an_insert_with_a_bad_value_inserts_nothing(kinto, kinto_url, bucket, tmp_path, open_ctx, jobs,
                                                    values, error, message):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, jobs)
    with pytest.raises(error) as caught:
        ctx.insert(jobs, values, id="new1")
    assert caught.value.message == message.format(jobs=jobs)
    assert ctx.change_count == 0 and ctx.changed_objects == []
    ctx.save()
    assert ids_on_server(kinto, bucket, jobs) == ["j1"], "nothing sent"
    # The id is still free: a corrected retry makes the one record.
    ctx.insert(jobs, {"Title": "x", "Severity": 1}, id="new1")
    ctx.save()
    assert ids_on_server(kinto, bucket, jobs) == ["j1", "new1"]


def test_a_record_that_never_existed_says_so(kinto_url, bucket, tmp_path, open_ctx, jobs, recorder):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, jobs)
    ghost = ctx.object(jobs, "nosuch")
    seen = recorder()
    ghost.observe("Title", seen)
    assert ghost.Title is None               # not cached: a get, whose refresh asks the server
    assert seen.wait(lambda c: any(s == tether.E_NOT_FOUND for _, _, s in c))
    with pytest.raises(tether.NotFoundError) as caught:
        ghost.peek("Title")
    assert caught.value.message == "no record %s/nosuch on the server" % jobs
    # One the server deleted is told apart: it was there.
    job = ctx.object(jobs, "j1")
    assert job.Title == "first"


def test_a_server_url_without_v1_says_add_v1(kinto_url, bucket, tmp_path, open_ctx, jobs):
    root = kinto_url[:-len("/v1")]
    with pytest.raises(tether.InvalidError) as caught:
        open_ctx(root, bucket, tmp_path / "root.db")
    assert caught.value.message == ("%s/ redirects to %s/v1/ (HTTP 307): the server URL must be Kinto's API root;"
                                    " add /v1" % (root, root))
    assert not (tmp_path / "root.db").exists()


def test_a_record_the_schema_refuses_names_its_field(kinto, kinto_url, bucket, tmp_path, open_ctx):
    kinto.create_collection(bucket, "strict", {"type": "object", "required": ["Title"], "properties": {
        "Title": {"type": "string"}, "Rank": {"type": "integer", "minimum": 0}}})
    ctx = open_ctx(kinto_url, bucket, tmp_path / "strict.db")
    ctx.insert("strict", {"Title": "t", "Rank": -1}, id="s1")
    with pytest.raises(tether.TetherError) as caught:
        ctx.save()
    (obj, failure), = caught.value.failures
    assert failure.message == "the server refused strict/s1 (HTTP 400): Rank: -1 is less than the minimum of 0"


def test_leaving_a_with_block_with_unsaved_changes_warns(kinto_url, bucket, tmp_path, open_ctx, jobs):
    opened(open_ctx, kinto_url, bucket, tmp_path, jobs).close()
    from conftest import AUTH
    with pytest.warns(tether.UnsavedChangesWarning) as caught:
        with tether.Context(kinto_url, bucket, str(tmp_path / "mistakes.db"), username=AUTH[0],
                            password=AUTH[1]) as ctx:
            ctx.object(jobs, "j1").Severity = 3.0
            ctx.insert(jobs, {"Title": "kept"}, id="k1")
    assert str(caught[0].message) == (
        "tether: the context '' closed with 2 unsaved changes: kept in its store's outbox under its name,"
        " for the next context opened on the store to save")
    assert issubclass(tether.UnsavedChangesWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tether.Context(kinto_url, bucket, str(tmp_path / "mistakes.db"), username=AUTH[0],
                            password=AUTH[1]) as ctx:
            assert ctx.change_count == 2, "kept for the next open"
            ctx.save()


def test_a_query_says_what_it_takes_and_what_it_has(kinto_url, bucket, tmp_path, open_ctx, jobs):
    ctx = opened(open_ctx, kinto_url, bucket, tmp_path, jobs)
    # 0.2's result= is a method of the result now: the error says which.
    with pytest.raises(TypeError) as caught:
        ctx.query(jobs, result="count")
    assert str(caught.value) == ("query() takes no result=: call the result's method for it (all(), ids(), "
                                 "count(), values(...)), e.g. ctx.query(...).count()")
    with pytest.raises(TypeError, match=r"e\.g\. ctx\.query\(\.\.\.\)\.ids\(\)"):
        ctx.object(jobs, "j1").related_query("x", result="ids")
    with pytest.raises(TypeError) as caught:
        ctx.query(jobs, limt=1)
    assert "unexpected keyword argument 'limt' (did you mean limit?)" in str(caught.value)
    with pytest.raises(TypeError, match=r"use ctx\.query\(\.\.\.\)\.live\(callback\)"):
        ctx.query(jobs, live=True)
    # A misspelled method names the nearest, as an Object's key does.
    with pytest.raises(AttributeError) as caught:
        ctx.query(jobs).cout()
    assert str(caught.value).startswith("QueryResult has no attribute 'cout' (did you mean count?)")
    with pytest.raises(AttributeError, match=r"'fetch_wait'"):
        ctx.fetch_wait(jobs)           # 0.2's names are gone: ctx.query(...) replaces them
    assert ctx.query(jobs).count() == 1, "nothing of the above ran a fetch that broke the context"


SHADOWED = {"type": "object", "properties": {
    "Name": {"type": "string"}, "version": {"type": "string"}, "entity": {"type": "string"},
    "context": {"type": "string"}, "pending": {"type": "string"}}}


def test_fields_the_binding_shadows_are_read_by_key(kinto, kinto_url, bucket, tmp_path, open_ctx):
    kinto.create_collection(bucket, "shadowed", SHADOWED)
    values = {"Name": "n", "version": "v2", "entity": "e", "context": "c", "pending": "p"}
    kinto.put_records(bucket, "shadowed", [("s1", values)])
    ctx = open_ctx(kinto_url, bucket, tmp_path / "shadowed.db")
    ctx.query("shadowed", policy="server_only").all()
    s = ctx.object("shadowed", "s1")
    for key, value in values.items():
        assert s[key] == s.get(key) == s.peek(key) == value, key
    # The binding's own names keep their meaning.
    assert isinstance(s.version, int) and s.entity.name == "shadowed" and s.context is ctx
    assert s.pending is None
    s["pending"] = "q"                 # a set by key, as obj.set("pending", ...)
    assert s.peek("pending") == "q" and s.pending == "update"
    with pytest.raises(AttributeError) as caught:
        s.Nmae
    assert "did you mean Name?" in str(caught.value)
    with pytest.raises(AttributeError) as caught:
        s.NmaePeek
    assert "did you mean NamePeek?" in str(caught.value)
    assert s.NamePeek == "n" and s.Name == "n"


def test_an_attribute_says_its_allowed_values(kinto_url, bucket, tmp_path, open_ctx, jobs):
    # What may be set is in the model, before a set is refused for it.
    ctx = open_ctx(kinto_url, bucket, str(tmp_path / "allowed.db"))
    entity = ctx.entity(jobs)
    assert entity.attribute("Status").allowed == ("open", "done")
    assert entity.attribute("Title").allowed is None
    obj = ctx.query(jobs).all()[0]
    with pytest.raises(tether.InvalidError):
        obj.Status = "closed"
