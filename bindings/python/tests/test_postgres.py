"""PostgreSQL from Python: Context.open_postgres, AsyncContext.open_postgres
and install_postgres against the cluster scripts/with-postgres starts (the
`postgres` suite). Skipped, with the reason, without TETHER_PG_CONNINFO."""

import asyncio
import os
import subprocess
import time
import uuid

import pytest

import tether

CONNINFO = os.environ.get("TETHER_PG_CONNINFO")
pytestmark = pytest.mark.skipif(CONNINFO is None, reason="TETHER_PG_CONNINFO is not set: "
                                "run under scripts/with-postgres (scripts/run-tests postgres)")


def psql(sql):
    out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", CONNINFO, "-c", sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def schema():
    name = "py_" + uuid.uuid4().hex[:8]
    psql("CREATE SCHEMA %s; "
         "CREATE TABLE %s.items (id int8 PRIMARY KEY, title text NOT NULL, n int4, "
         "state text CHECK (state IN ('open', 'closed'))); "
         "INSERT INTO %s.items SELECT g, 't' || g, g %% 7, CASE WHEN g %% 2 = 0 THEN 'open' ELSE 'closed' END "
         "FROM generate_series(1, 50) g" % (name, name, name))
    yield name
    psql("DROP SCHEMA %s CASCADE" % name)


def test_a_schema_opens_as_a_model_and_answers_queries(schema, tmp_path):
    with tether.Context.open_postgres(CONNINFO, tmp_path / "s.db", schema=schema) as ctx:
        items = ctx.entity("items")
        assert {a.name for a in items.attributes} >= {"title", "n", "state"}
        assert items.attribute("title").required and sorted(items.attribute("state").allowed) == ["closed", "open"]
        got = ctx.query("items", where="n == $1 AND state == 'open'", args=(3,), sort="-id").ids()
        expected = psql("SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM %s.items "
                        "WHERE n = 3 AND state = 'open'" % schema).split(",")
        assert list(got) == expected and got.offline is False
        assert ctx.query("items", where="n >= 5").count() == int(psql(
            "SELECT count(*) FROM %s.items WHERE n >= 5" % schema))
        assert ctx.object("items", "1").peek("title") is None, "peek never asks the server"
        objs = ctx.query("items", where="title == 't1' OR title == 't2'", sort="title").all()
        assert [(o.id, o.peek("title"), o.peek("n")) for o in objs] == [("1", "t1", 1), ("2", "t2", 2)]
        assert ctx.object("items", "1") is objs[0], "one live object per record"


def test_bad_conninfo_and_unknown_schema_are_clear_errors(schema, tmp_path):
    with pytest.raises(tether.InvalidError):
        tether.Context.open_postgres("host=127.0.0.1 nonsense_key=1", tmp_path / "a.db")
    with pytest.raises(tether.NotFoundError):
        tether.Context.open_postgres(CONNINFO, tmp_path / "b.db", schema="no_such_schema_here")
    with pytest.raises(TypeError):
        tether.Context.open_postgres(42, tmp_path / "c.db")  # type: ignore[arg-type]


def test_install_tracks_once_and_a_live_query_hears_a_commit(schema, tmp_path):
    assert tether.install_postgres(CONNINFO, schema) == 1
    assert tether.install_postgres(CONNINFO, schema) == 0, "installing again tracks nothing new"
    answers = []
    with tether.Context.open_postgres(CONNINFO, tmp_path / "s.db", schema=schema) as ctx:
        task = ctx.query("items", where="title BEGINSWITH 'fifty'", sort="id").live(lambda a: answers.append(a))
        deadline = time.monotonic() + 30
        while not any(a.phase == "live" for a in answers) and time.monotonic() < deadline:
            time.sleep(0.01)
        psql("INSERT INTO %s.items VALUES (51, 'fifty-one', 1, 'open')" % schema)  # another client
        while time.monotonic() < deadline:
            last = [a for a in answers if a.phase == "live"]
            if last and [o.id for o in last[-1].answer] == ["51"]:
                break
            time.sleep(0.01)
        last = [a for a in answers if a.phase == "live"][-1]
        assert [o.id for o in last.answer] == ["51"], "the commit reaches the live query unasked"
        task.cancel()


def test_async_context_opens_on_postgres(schema, tmp_path):
    async def main():
        async with tether.AsyncContext.open_postgres(CONNINFO, tmp_path / "s.db", schema=schema) as actx:
            return list(await actx.query("items", where="title IN {'t1', 't2', 't3'}", sort="-title").ids())
    assert asyncio.run(main()) == ["3", "2", "1"]


def test_edits_are_saved_to_the_table_and_conflicts_reported(schema, tmp_path):
    with tether.Context.open_postgres(CONNINFO, tmp_path / "s.db", schema=schema) as ctx:
        objs = {o.id: o for o in ctx.query("items", where="title IN {'t1', 't2'}").all()}
        objs["1"].set("title", "first")
        made = ctx.insert("items", {"title": "new", "n": 3, "state": "open"}, id="99")
        report = ctx.save()
        assert report.saved == 2 and not ctx.has_changes
        assert psql("SELECT title FROM %s.items WHERE id IN (1, 99) ORDER BY id" % schema).split() == ["first", "new"]
        assert made.version is not None
        psql("UPDATE %s.items SET n = 6 WHERE id = 2" % schema)          # another client
        objs["2"].set("title", "second")
        report = ctx.save(merge="properties")                                   # theirs n, our title
        assert psql("SELECT title || ':' || n FROM %s.items WHERE id = 2" % schema) == "second:6"
        objs["2"].set("n", 2 ** 40)                                            # beyond int4: PostgreSQL refuses it
        with pytest.raises(tether.InvalidError, match="out of range"):
            ctx.save()
        assert ctx.has_changes, "a refused change stays pending"
        assert psql("SELECT n FROM %s.items WHERE id = 2" % schema) == "6"
        ctx.rollback()
