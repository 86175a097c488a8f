"""The exceptions sit in Python's tree (issue 25): a TetherError base in
three groups (usage, remote, store), NotFoundError a LookupError,
TypeMismatchError a TypeError, InvalidError a ValueError, a cancel's error
that is not asyncio.CancelledError; each keeps `.status`, the C code. Raised
for real by the library where a program meets them."""

import asyncio
import builtins

import pytest

import tether

SCHEMA = {"type": "object", "properties": {"Name": {"type": "string"},
                                           "Size": {"type": "integer"},
                                           "State": {"type": "string", "enum": ["on", "off"]}}}

GROUPS = {
    tether.UsageError: (tether.MisuseError, tether.HandleError, tether.NotFoundError,
                        tether.TypeMismatchError, tether.InvalidError, tether.BusyError),
    tether.RemoteError: (tether.NetworkError, tether.AuthError, tether.ServerError, tether.ProtocolError,
                         tether.ConflictError, tether.NotAllowedError, tether.ExpiredError),
    tether.StoreError: (tether.NotCachedError,),
}


@pytest.fixture(scope="module")
def things(kinto, bucket):
    kinto.create_collection(bucket, "things", SCHEMA)
    kinto.put_records(bucket, "things", [("t1", {"Name": "one", "Size": 1, "State": "on"})])
    return bucket


def test_every_status_has_a_class_in_one_group_and_keeps_its_status():
    statuses = [v for k, v in vars(tether).items() if k.startswith("E_") and k != "E_ERROR"]
    assert len(statuses) == 16
    for status in statuses:
        cls = tether.error_class(status)
        assert cls is not tether.TetherError and cls.status == status
        groups = [g for g in GROUPS if issubclass(cls, g)]
        if cls is tether.TaskCancelledError:
            assert groups == [], "a cancel is its own kind"
        elif cls is tether.StoreError:
            assert groups == [tether.StoreError]
        else:
            assert len(groups) == 1, (cls, groups)
        error = tether.errors.make_error(status, "what happened")
        assert isinstance(error, cls) and isinstance(error, tether.TetherError)
        assert error.status == status and error.message == "what happened"
    assert set(c for cs in GROUPS.values() for c in cs) | {tether.StoreError, tether.TaskCancelledError} == \
        {tether.error_class(s) for s in statuses}


def test_the_python_bases():
    assert issubclass(tether.NotFoundError, LookupError)
    assert issubclass(tether.TypeMismatchError, TypeError)
    assert issubclass(tether.InvalidError, ValueError)
    assert issubclass(tether.TetherError, Exception)


def test_the_cancel_error_is_not_asyncios():
    assert not issubclass(tether.TaskCancelledError, asyncio.CancelledError)
    assert not issubclass(asyncio.CancelledError, tether.TetherError)
    assert issubclass(tether.TaskCancelledError, Exception)
    assert tether.error_class(tether.E_CANCELLED) is tether.TaskCancelledError
    assert "CancelledError" not in tether.__all__ and "TaskCancelledError" in tether.__all__


def test_a_star_import_leaves_asyncios_cancelled_error():
    # A program that imports asyncio's names, then tether's (or its errors
    # module's), still has asyncio's CancelledError (issue 39).
    for module in ("tether", "tether.errors"):
        names = {}
        exec("from asyncio import *\nfrom %s import *" % module, names)
        assert names["CancelledError"] is asyncio.CancelledError, module
        assert names["TaskCancelledError"] is tether.TaskCancelledError, module


def test_the_old_name_warns():
    # The name before 0.3, kept for old programs: it warns where it is read.
    with pytest.warns(DeprecationWarning, match="TaskCancelledError"):
        assert tether.CancelledError is tether.TaskCancelledError
    with pytest.raises(AttributeError, match="NoSuchError"):
        tether.NoSuchError


def test_the_library_raises_them_as_pythons(things, kinto_url, tmp_path, open_ctx):
    ctx = open_ctx(kinto_url, things, tmp_path / "e.db")
    ctx.query("things", policy="server_only").all()
    with pytest.raises(LookupError) as caught:
        ctx.entity("nothings")
    assert isinstance(caught.value, tether.NotFoundError) and caught.value.status == tether.E_NOT_FOUND
    t = ctx.object("things", "t1")
    with pytest.raises(TypeError) as caught:
        t.Size = "large"
    assert isinstance(caught.value, tether.TypeMismatchError) and caught.value.status == tether.E_TYPE
    with pytest.raises(ValueError) as caught:
        t.State = "maybe"
    assert isinstance(caught.value, tether.InvalidError) and caught.value.status == tether.E_INVALID
    with pytest.raises(ValueError) as caught:
        ctx.query("things", where="Size >").all()
    assert isinstance(caught.value, tether.InvalidError) and isinstance(caught.value, tether.UsageError)
    assert t.pending is None, "nothing changed"


def test_a_network_failure_is_a_remote_error(things, tmp_path, open_ctx, faultproxy, kinto_url):
    ctx = open_ctx(faultproxy.url, things, tmp_path / "n.db", timeout_ms=3000)
    ctx.query("things", policy="server_only").all()
    faultproxy.stop()
    with pytest.raises(tether.RemoteError) as caught:
        ctx.query("things", policy="server_only").all()
    assert isinstance(caught.value, tether.NetworkError) and caught.value.status == tether.E_NETWORK
    assert not isinstance(caught.value, builtins.OSError)
