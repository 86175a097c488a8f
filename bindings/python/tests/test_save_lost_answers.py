"""A save whose answers are lost after the server applied its writes (the
answer dropped, a 500 from a server that applied the batch, the connection
reset mid-answer): the next save, with the objects edited again meanwhile,
knows those writes for its own: no conflict, nothing lost, nothing sent
twice (issue 22, case 2, through scripts/faultproxy.py)."""

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"N": {"type": "integer"}, "Tag": {"type": "string"}}}

FAULTS = {
    "dropped": dict(mode="drop", forward=True),
    "500-after-applying": dict(mode="status", status=500, forward=True),
    "reset-mid-answer": dict(mode="reset"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("merge", [None, "server_wins"])
def test_edit_after_a_lost_answer(kinto, bucket, faultproxy, open_ctx, tmp_path, fault, merge):
    name = "lost_%s_%s" % (fault.replace("-", "_"), merge or "report")
    kinto.create_collection(bucket, name, SCHEMA)
    kinto.put_records(bucket, name, [("r%d" % i, {"N": i, "Tag": "seed"}) for i in range(3)])
    ctx = open_ctx(faultproxy.url, bucket, tmp_path / "s.db")
    ctx.query(name, policy="server_only").all()
    ctx.object(name, "r0").N = 100
    ctx.object(name, "r1").N = 101
    inserted = ctx.insert(name, {"N": 7})

    # Every batch (the library's own retries too) is applied, its answer lost.
    faultproxy.set(match="/batch", reset_log=True, **FAULTS[fault])
    with pytest.raises((tether.NetworkError, tether.ServerError)):
        ctx.save()
    faultproxy.set("pass")
    assert kinto.get_record(bucket, name, "r0")["N"] == 100, "the server applied the batch"
    assert kinto.get_record(bucket, name, inserted.id)["N"] == 7
    assert ctx.change_count == 3, "its answer lost, every change stays pending"

    # Edited again before the retry: each edit is saved, none is a conflict.
    ctx.object(name, "r0").Tag = "edited again"
    inserted.Tag = "inserted, then edited"
    ctx.object(name, "r1").delete()
    report = ctx.save(merge=merge)
    assert (report.saved, report.discarded, report.failures) == (3, 0, [])
    assert ctx.change_count == 0
    got = kinto.get_record(bucket, name, "r0")
    assert (got["N"], got["Tag"]) == (100, "edited again")
    got = kinto.get_record(bucket, name, inserted.id)
    assert (got["N"], got["Tag"]) == (7, "inserted, then edited")
    assert kinto.request("GET", "/buckets/%s/collections/%s/records/r1" % (bucket, name),
                         expect_error=True)["status"] == 404
    records = kinto.request("GET", "/buckets/%s/collections/%s/records" % (bucket, name))["data"]
    assert sorted(r["id"] for r in records) == sorted(["r0", "r2", inserted.id]), "nothing made twice"
