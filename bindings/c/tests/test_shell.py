"""The `tether` shell (bindings/c/shell.c), driven as a user drives it: one
command on the command line, or a script on stdin; tables are read as text,
--json output is parsed. Against the real Kinto the harness starts:

    scripts/with-kinto scripts/run-tests shell

Env: TETHER_TEST_URL (from with-kinto); TETHER_SHELL, the program (default
bindings/c/build/tether; the asan suite points it at an ASan build).
"""

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SHELL = os.environ.get("TETHER_SHELL") or os.path.join(REPO, "bindings", "c", "build", "tether")
WRITER = "demo:demo"  # seed-demo's user: it owns (so may write) the bucket


def need_url():
    url = os.environ.get("TETHER_TEST_URL")
    if not url:
        pytest.fail("TETHER_TEST_URL is not set: run through scripts/with-kinto", pytrace=False)
    return url.rstrip("/")


def http(method, path, body=None, auth=WRITER):
    req = urllib.request.Request(need_url() + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Basic " + base64.b64encode(auth.encode()).decode()})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def record(bucket, coll, rid):
    return http("GET", "/buckets/%s/collections/%s/records/%s" % (bucket, coll, rid))["data"]


def patch(bucket, coll, rid, data):
    return http("PATCH", "/buckets/%s/collections/%s/records/%s" % (bucket, coll, rid), {"data": data})["data"]


@pytest.fixture(scope="module")
def bucket():
    """The demo data set (scripts/seed-demo) in a bucket of this module's own."""
    name = "shell" + uuid.uuid4().hex[:12]
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "seed-demo"), need_url(), name],
                   check=True, capture_output=True)
    return name


class Shell:
    def __init__(self, bucket, store, user=WRITER, url=None):
        self.base = [SHELL, "--server", url or need_url(), "--bucket", bucket, "--store", str(store)]
        if user:
            self.base += ["--user", user]

    def run(self, *args, stdin=None, ok=True, timeout=60, env=None):
        """Runs the shell; returns (status, stdout, stderr). ok=True asserts status 0."""
        p = subprocess.run(self.base + list(args), input=stdin, capture_output=True, text=True,
                           timeout=timeout, env=env)
        if ok:
            assert p.returncode == 0, "%s -> %d\nstdout: %s\nstderr: %s" % (args, p.returncode, p.stdout, p.stderr)
        return p.returncode, p.stdout, p.stderr

    def json(self, *args, ok=True):
        """--json: exactly one well-formed JSON document on one line."""
        status, out, err = self.run("--json", *args, ok=ok)
        lines = out.splitlines()
        assert len(lines) == 1, "one document per command: %r (stderr %r)" % (out, err)
        return json.loads(lines[0]) if ok else (status, json.loads(lines[0]), err)


@pytest.fixture
def sh(bucket, tmp_path):
    return Shell(bucket, tmp_path / "store.sqlite")


def table(out):
    """A table's rows as lists of cells (cells are separated by 2+ spaces)."""
    import re
    return [re.split(r"  +", line.rstrip()) for line in out.splitlines() if line and not line.startswith("(")]


# ------------------------------------------------------------ no server needed

def test_version_help_and_usage():
    p = subprocess.run([SHELL, "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("tether 0.") and "library" in p.stdout
    p = subprocess.run([SHELL, "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: tether")
    p = subprocess.run([SHELL, "help"], capture_output=True, text=True)  # no context needed
    assert p.returncode == 0
    for command in ("entities", "fields", "fetch", "count", "watch", "peek", "get", "set", "unset",
                    "insert", "delete", "rollback", "pending", "save", "info"):
        assert "\n  %s " % command in p.stdout, command
    p = subprocess.run([SHELL, "--bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown option '--bogus'" in p.stderr and "usage:" in p.stderr
    p = subprocess.run([SHELL, "--server"], capture_output=True, text=True)
    assert p.returncode == 2 and "missing" in p.stderr
    p = subprocess.run([SHELL, "entities"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "--server, --bucket and --store" in p.stderr


# ------------------------------------------------------------ model

def test_entities_and_fields(sh):
    _, out, _ = sh.run("entities")
    rows = table(out)
    assert rows[0][:4] == ["entity", "code", "fields", "operations"]
    assert [r[0] for r in rows[1:]] == ["changes", "clients", "jobs", "users"]
    doc = sh.json("entities")
    changes = next(e for e in doc["entities"] if e["name"] == "changes")
    assert changes["operations"] == ["fetch", "insert", "update", "delete"] and changes["fields"] == 10
    assert changes["route"].endswith("/collections/changes/records")

    _, out, _ = sh.run("fields", "changes")
    rows = {r[0]: r for r in table(out)[1:]}
    assert rows["Status"][1:3] == ["#205", "text"] and rows["Files"][2] == "json"
    assert rows["id"][3] == "id,required" and rows["last_modified"][3] == "version"
    doc = sh.json("fields", "changes")
    by = {f["name"]: f for f in doc["fields"]}
    assert by["Change"] == {"name": "Change", "code": 201, "type": "integer", "id": False, "version": False,
                            "required": True, "target": None, "allowed": None}
    assert by["id"]["id"] and by["last_modified"]["version"]
    # The spec's allowed values (its JSON schema's "enum"), as seed-demo wrote them.
    assert by["Status"]["allowed"] == ["pending", "submitted", "shelved"]
    assert rows["Status"][-1] == "pending|submitted|shelved" and rows["Change"][-1] == "required"
    assert table(out)[0] == ["field", "code", "type", "flags", "refers to", "allowed"]


# ------------------------------------------------------------ fetch

def expected_pending(minimum):
    """Pending changes of seed-demo (i % 10 in 7, 8) numbered >= minimum, newest first."""
    return sorted((1000 + i for i in range(200) if i % 10 in (7, 8) and 1000 + i >= minimum), reverse=True)


def test_fetch_predicate_arguments_sort_limit(sh):
    args = ("fetch", "changes", "--where", "Status == $1 AND Change >= $2", "--arg", "pending",
            "--arg", "1100", "--sort", "-Change", "--limit", "5", "--fields", "Change,Status,#204")
    doc = sh.json(*args)
    assert doc["entity"] == "changes" and doc["count"] == 5
    assert [r["Change"] for r in doc["rows"]] == expected_pending(1100)[:5]
    assert all(r["Status"] == "pending" and r["id"] == "c%d" % r["Change"] for r in doc["rows"])
    assert all(isinstance(r["#204"], str) for r in doc["rows"]), "a column by code"

    _, out, _ = sh.run(*args)
    rows = table(out)
    assert rows[0] == ["id", "Change", "Status", "#204"]
    assert [int(r[1]) for r in rows[1:]] == expected_pending(1100)[:5]
    assert out.rstrip().endswith("(5 rows)")

    # Quoted text, an offset, and an answer from the cache alone.
    doc = sh.json("fetch", "changes", "--where", "Status == 'pending'", "--sort", "-Change",
                  "--offset", "2", "--limit", "2", "--fields", "Change", "--policy", "cache_only")
    assert [r["Change"] for r in doc["rows"]] == expected_pending(0)[2:4]
    # Every field by default: the id first, no version.
    doc = sh.json("fetch", "jobs", "--where", "Job == 'job000003'")
    assert list(doc["rows"][0]) == ["id", "Job", "Status", "User", "Date", "Description", "Severity"]
    assert doc["rows"][0]["Severity"] == 1.0 and isinstance(doc["rows"][0]["Severity"], float)


def test_count(sh):
    assert sh.run("count", "changes")[1] == "200\n"
    assert sh.json("count", "changes", "--where", "Status == 'pending' AND Change >= $1", "--arg", "1100") == \
        {"entity": "changes", "count": len(expected_pending(1100))}


def test_progress_on_stderr_only_when_asked(sh):
    _, out, err = sh.run("--progress", "fetch", "users", "--fields", "User")
    assert "fetched: " in err and "fetched" not in out
    _, _, err = sh.run("fetch", "users", "--fields", "User")  # stderr is a pipe: no progress
    assert "fetched" not in err


# ------------------------------------------------------------ errors

def assert_error(sh, args, status_name, text=None, code=1):
    status, out, err = sh.run(*args, ok=False)
    assert status == code, (args, status, out, err)
    assert ("\ntether: %s: " % status_name) in "\n" + err, err
    if text:
        assert text in err, err
    status, doc, _ = sh.json(*args, ok=False)
    assert status == code and doc["error"]["status"] == status_name and doc["error"]["message"]
    # The document's code: a library error's TETHER_E_* value; a usage error's exit status, 2.
    assert doc["error"]["code"] == (2 if status_name == "usage" else STATUS_CODES[status_name]), doc
    return doc


STATUS_CODES = {"TETHER_E_NOT_FOUND": -4, "TETHER_E_TYPE": -5, "TETHER_E_INVALID": -6, "TETHER_E_NETWORK": -7,
                "TETHER_E_AUTH": -8, "TETHER_E_SERVER": -9, "TETHER_E_NOT_CACHED": -13,
                "TETHER_E_NOT_ALLOWED": -16}


def test_errors_have_a_status_a_message_and_a_status_code(sh):
    sh.run("count", "changes")  # the store holds the model from here on
    assert_error(sh, ["fetch", "nope"], "TETHER_E_NOT_FOUND", '"nope"')
    assert_error(sh, ["fields", "nope"], "TETHER_E_NOT_FOUND")
    assert_error(sh, ["fetch", "changes", "--where", "Status =="], "TETHER_E_INVALID", "column")
    assert_error(sh, ["fetch", "changes", "--where", "Nope == 1"], "TETHER_E_INVALID")
    assert_error(sh, ["fetch", "changes", "--where", "Change == $1"], "TETHER_E_INVALID")  # no argument
    assert_error(sh, ["fetch", "changes", "--sort", "Nope"], "TETHER_E_INVALID")
    assert_error(sh, ["fetch", "changes", "--fields", "Status,Nope"], "TETHER_E_NOT_FOUND", "Nope")
    assert_error(sh, ["peek", "changes", "c1000", "Nope"], "TETHER_E_NOT_FOUND")
    assert_error(sh, ["peek", "changes", "c1000", "#999"], "TETHER_E_NOT_FOUND")
    # A record the server never had: peek cannot know (it never asks), get says so (issue 22, case 10).
    assert_error(sh, ["peek", "changes", "no-such-id", "Status"], "TETHER_E_NOT_CACHED",
                 "changes/no-such-id is not cached (peek does not ask the server: get does)")
    assert_error(sh, ["get", "changes", "no-such-id", "Status"], "TETHER_E_NOT_FOUND",
                 "tether: TETHER_E_NOT_FOUND: no record changes/no-such-id on the server\n")
    assert_error(sh, ["set", "changes", "c1000", "Change", "many"], "TETHER_E_TYPE", "not an integer")
    assert_error(sh, ["set", "changes", "c1000", "Status", "lost"], "TETHER_E_INVALID")  # not in the enum
    assert_error(sh, ["set", "changes", "c1000", "id", "c1"], "TETHER_E_INVALID")
    assert_error(sh, ["set", "changes", "c1000", "Files", "[unclosed"], "TETHER_E_TYPE")
    assert_error(sh, ["unset", "changes", "c1000", "Status"], "TETHER_E_TYPE")  # required
    assert_error(sh, ["fetch", "changes", "--limit", "x"], "usage", code=2)
    assert_error(sh, ["fetch", "changes", "--bogus", "1"], "usage", code=2)
    assert_error(sh, ["fetch"], "usage", code=2)
    assert_error(sh, ["frobnicate"], "usage", "unknown command", code=2)
    assert_error(sh, ["save", "--merge", "whoever"], "usage", code=2)
    # Options before the command: their usage errors are documents too (with --json anywhere among them).
    status, out, err = sh.run("--json", "--bogus", ok=False)
    assert status == 2 and json.loads(out)["error"] == {"status": "usage", "code": 2,
                                                        "message": "unknown option '--bogus'"}, out
    status, out, err = sh.run("--timeout", "soon", "--json", "entities", ok=False)
    assert status == 2 and json.loads(out)["error"]["code"] == 2 and "usage:" in err
    assert sh.json("pending")["count"] == 0, "no failed edit left a change"


def test_one_vocabulary_the_headers_names(sh):
    """Policies and merge policies as include/tether.h names them, lower case
    (TETHER_POLICY_CACHE_ONLY: cache_only), as Python and LuaJIT spell them;
    '-' for '_' is the same word; the shell's 0.2 words name their new one."""
    sh.run("fetch", "jobs", "--fields", "Status")  # every job in the store
    for policy in ("cache_then_server", "cache_only", "server_only", "cache_else_server",
                   "cache-then-server", "cache-only", "server-only", "cache-else-server"):
        assert sh.json("count", "jobs", "--policy", policy)["count"] == 60, policy
    for old, new in (("cache", "cache_only"), ("server", "server_only")):
        doc = assert_error(sh, ["count", "jobs", "--policy", old], "usage", code=2)
        assert doc["error"]["message"] == "count: --policy %s is now %s (the header's name)" % (old, new)
    doc = assert_error(sh, ["count", "jobs", "--policy", "sometimes"], "usage", code=2)
    assert "cache_then_server, cache_only, server_only, cache_else_server" in doc["error"]["message"]
    for merge in ("report", "server_wins", "client_wins", "properties", "server-wins", "merge_properties"):
        assert sh.run("save", "--merge", merge)[1].startswith("saved 0"), merge
    for old, new in (("server", "server_wins"), ("client", "client_wins")):
        doc = assert_error(sh, ["save", "--merge", old], "usage", code=2)
        assert "is now %s" % new in doc["error"]["message"]


def test_server_down_and_refused_credentials(bucket, tmp_path):
    down = Shell(bucket, tmp_path / "down.sqlite", url="http://127.0.0.1:9/v1")
    assert_error(down, ["entities"], "TETHER_E_NETWORK")
    assert not (tmp_path / "down.sqlite").exists(), "a failed open leaves no store"
    assert_error(Shell(bucket, tmp_path / "auth.sqlite", user="demo:wrong"), ["entities"], "TETHER_E_AUTH")
    status, _, err = Shell(bucket, tmp_path / "x.sqlite", user="nocolon").run("entities", ok=False)
    assert status == 2 and "NAME:PASSWORD" in err
    # The user from the environment.
    env = dict(os.environ, TETHER_USER=WRITER)
    status, out, _ = Shell(bucket, tmp_path / "env.sqlite", user=None).run("count", "users", env=env)
    assert out == "40\n"
    # Options beat the environment: --server and --bucket reach Kinto with
    # $TETHER_POSTGRES set (it opened PostgreSQL instead), and an empty one is unset.
    for conninfo in ("host=127.0.0.1 port=9 dbname=none", ""):
        env = dict(os.environ, TETHER_POSTGRES=conninfo)
        status, out, _ = Shell(bucket, tmp_path / "pg-env.sqlite").run("count", "users", env=env)
        assert out == "40\n", conninfo


# ------------------------------------------------------------ values and JSON

def test_json_strings_are_escaped(sh):
    sh.run("fetch", "changes", "--fields", "Status")  # set needs the record cached (count caches none)
    text = 'a "quote", a \\ backslash,\na newline, a\ttab, \x01 a control, é → ünïcödé'
    doc = sh.json("set", "changes", "c1001", "Description", text)
    assert doc == {"entity": "changes", "id": "c1001", "key": "Description", "value": text, "pending": "update"}
    assert sh.json("peek", "changes", "c1001", "Description")["values"] == {"Description": text}
    _, out, _ = sh.run("peek", "changes", "c1001", "Description")
    assert "a \\ backslash,\\na newline, a\\ttab, \\x01 a" in out, "one line per row in a table"
    # JSON attributes take JSON text and come back as JSON.
    files = ["//depot/a.c", {"odd": [1, 2.5, None, True]}]
    sh.run("set", "changes", "c1001", "Files", json.dumps(files))
    assert sh.json("peek", "changes", "c1001", "Files")["values"]["Files"] == files
    # Typed values by the key's type, and a null.
    sh.run("fetch", "jobs", "--fields", "Status")
    sh.run("set", "jobs", "job000004", "Severity", "3")
    assert sh.json("peek", "jobs", "job000004", "Severity")["values"]["Severity"] == 3.0
    sh.run("unset", "changes", "c1001", "JobCount")
    assert sh.json("peek", "changes", "c1001", "JobCount", "#205") == \
        {"entity": "changes", "id": "c1001", "values": {"JobCount": None, "#205": "submitted"}}
    sh.run("rollback")
    assert sh.json("pending") == {"changes": [], "count": 0}


# ------------------------------------------------------------ get

def test_get_shows_the_cached_value_then_the_refreshed_one(bucket, sh):
    sh.run("fetch", "clients", "--fields", "Owner")
    patch(bucket, "clients", "bob-ws", {"Host": "new-host"})  # behind the cache's back
    _, out, _ = sh.run("peek", "clients", "bob-ws", "Host")
    assert table(out)[1] == ["Host", "bob-pc"], "peek never asks the server"
    _, out, _ = sh.run("get", "clients", "bob-ws", "Host")
    assert out == "cached     bob-pc\nrefreshed  new-host\n"
    assert sh.json("get", "clients", "bob-ws", "Host") == {
        "entity": "clients", "id": "bob-ws", "key": "Host", "cached": "new-host", "cached_status": "TETHER_OK",
        "refreshed": "new-host", "refreshed_status": "TETHER_OK"}
    # A record never cached: get brings it.
    doc = sh.json("get", "users", "carol", "Email")
    assert doc["cached_status"] == "TETHER_E_NOT_CACHED" and doc["refreshed"] == "carol@example.com"


# ------------------------------------------------------------ the walkthrough

def test_walkthrough_on_the_command_line(bucket, sh):
    """README's walkthrough: entities, fetch, peek, get, set, pending, save, fetch."""
    assert "changes" in sh.run("entities")[1]
    doc = sh.json("fetch", "changes", "--where", "Status == 'pending' AND Change >= $1", "--arg", "1190",
                  "--sort", "-Change", "--fields", "Change,Description")
    assert [r["id"] for r in doc["rows"]] == ["c1198", "c1197"]
    assert sh.json("peek", "changes", "c1198", "Status")["values"]["Status"] == "pending"
    assert sh.json("get", "changes", "c1198", "Description")["refreshed"] == "Fix index (change 1198)"
    sh.run("set", "changes", "c1198", "Description", "Reviewed in the shell")
    sh.run("set", "changes", "c1198", "JobCount", "3")
    assert record(bucket, "changes", "c1198")["Description"] == "Fix index (change 1198)", "not saved yet"
    _, out, _ = sh.run("pending")
    rows = table(out)
    assert rows[0] == ["entity", "id", "change", "key", "server", "local"]
    assert rows[1:] == [["changes", "c1198", "update", "Description", "Fix index (change 1198)",
                         "Reviewed in the shell"],
                        ["changes", "c1198", "update", "JobCount", "2", "3"]]
    doc = sh.json("pending")
    assert doc["count"] == 1 and doc["changes"][0]["keys"][1] == {"key": "JobCount", "server": 2, "local": 3}
    assert sh.run("save")[1].startswith("saved 1, discarded 0, not saved 0")
    assert record(bucket, "changes", "c1198")["Description"] == "Reviewed in the shell"
    assert sh.json("pending")["count"] == 0
    doc = sh.json("fetch", "changes", "--where", "Change == 1198", "--fields", "Description,JobCount",
                  "--policy", "server_only")
    assert doc["rows"] == [{"id": "c1198", "Description": "Reviewed in the shell", "JobCount": 3}]


def test_walkthrough_on_stdin(bucket, sh):
    script = """\
# comments and blank lines are skipped
entities

fetch changes --where "Status == 'shelved' AND Change >= $1" --arg 1180 --sort -Change --fields Change,Status
peek changes c1189 Status
get changes c1189 Description
set changes c1189 Description 'Edited on stdin: "quoted"'
pending
save
fetch changes --where 'Change == 1189' --fields Description --policy server-only
"""
    status, out, err = sh.run(stdin=script)
    assert "tether>" not in out, "a prompt only on a tty"
    assert "c1199" in out and "c1189" in out and "(2 rows)" in out
    assert "saved 1, discarded 0, not saved 0" in out
    assert out.rstrip().endswith("c1189  Edited on stdin: \"quoted\"\n(1 row)".rstrip())
    assert record(bucket, "changes", "c1189")["Description"] == 'Edited on stdin: "quoted"'
    # --json: one document a command, in order.
    _, out, _ = sh.run("--json", stdin="count users\nfetch users --where \"User == 'alice'\" --fields Email\n")
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs == [{"entity": "users", "count": 40},
                    {"entity": "users", "count": 1, "rows": [{"id": "alice", "Email": "alice@example.com"}]}]


def test_stdin_goes_on_after_an_error_and_exits_non_zero(sh):
    status, out, err = sh.run(stdin="count nope\nfetch changes --where 'x\ncount users\nquit\ncount jobs\n",
                              ok=False)
    assert status == 1
    assert out == "40\n", "the commands after an error run; none after quit"
    assert "TETHER_E_NOT_FOUND" in err and "unterminated ' quote" in err


# ------------------------------------------------------------ edits

def test_insert_delete_rollback(bucket, sh):
    sh.run("fetch", "jobs", "--fields", "Status")
    doc = sh.json("insert", "jobs", "--id", "job-shell", "Job=job-shell", "Status=open", "User=alice",
                  "Description=From the shell", "Severity=1.5")
    assert doc == {"entity": "jobs", "id": "job-shell", "pending": "insert"}
    assert_error(sh, ["insert", "jobs", "Job=x", "Severity=high"], "TETHER_E_TYPE")
    sh.run("delete", "jobs", "job000002")
    doc = sh.json("pending")
    assert [(c["id"], c["change"]) for c in doc["changes"]] == [("job-shell", "insert"), ("job000002", "delete")], \
        "every change, in the order made (another process's delete too); the failed insert left nothing"
    assert doc["count"] == 2
    _, out, _ = sh.run("--json", stdin="delete jobs job000003\npending\n")
    changes = json.loads(out.splitlines()[1])
    assert [(c["id"], c["change"]) for c in changes["changes"]] == [
        ("job-shell", "insert"), ("job000002", "delete"), ("job000003", "delete")]
    assert changes["count"] == 3
    sh.run("rollback", "jobs", "job000003")
    assert sh.json("pending")["count"] == 2
    assert sh.run("save")[1].startswith("saved 2")
    assert record(bucket, "jobs", "job-shell")["Severity"] == 1.5
    assert sh.json("count", "jobs", "--where", "Job == 'job000002'", "--policy", "server_only")["count"] == 0


def test_save_reports_conflicts(bucket, sh):
    sh.run("fetch", "users", "--fields", "User")
    sh.run("set", "users", "dave", "FullName", "Dave Mine")
    patch(bucket, "users", "dave", {"FullName": "Dave Theirs"})
    status, doc, err = sh.json("save", ok=False)
    assert status == 1 and "TETHER_E_CONFLICT" in err
    assert doc["status"] == "TETHER_E_CONFLICT" and doc["saved"] == 0 and len(doc["failures"]) == 1
    failure = doc["failures"][0]
    assert failure["entity"] == "users" and failure["id"] == "dave" and failure["status"] == "TETHER_E_CONFLICT"
    conflict = failure["conflict"]
    assert conflict["server_version"] > conflict["local_version"] > 0
    keys = {k["key"]: k for k in conflict["keys"]}
    assert keys["FullName"] == {"key": "FullName", "local": "Dave Mine", "server": "Dave Theirs"}
    status, out, _ = sh.run("save", ok=False)
    assert status == 1 and "not saved 1" in out and "FullName: mine Dave Mine, server Dave Theirs" in out
    assert sh.run("save", "--merge", "properties")[1].startswith("saved 1")
    assert record(bucket, "users", "dave")["FullName"] == "Dave Mine"


# ------------------------------------------------------------ watch

def test_watch_prints_changes_as_they_come(bucket, sh):
    # Changes another client makes arrive by the library's periodic sync.
    cmd = sh.base + ["--sync-interval", "100", "--json", "watch", "jobs", "--where", "Status == 'suspended'",
                     "--fields", "Status,Severity", "--count", "2", "--timeout", "30"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline())
        assert first["answer"] == 0 and first["count"] == 15
        assert all(r["Status"] == "suspended" for r in first["rows"])
        patch(bucket, "jobs", "job000004", {"Severity": 4.5})      # still matches: an update
        second = json.loads(p.stdout.readline())
        patch(bucket, "jobs", "job000008", {"Status": "open"})     # leaves the answer: a delete
        third = json.loads(p.stdout.readline())
        assert p.wait(timeout=30) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    assert second["answer"] == 1 and second["count"] == 15
    assert [(c["change"], c["row"]["id"], c["row"]["Severity"]) for c in second["changes"]] == \
        [("update", "job000004", 4.5)]
    assert third["count"] == 14 and [(c["change"], c["id"]) for c in third["changes"]] == [("delete", "job000008")]


def test_watch_interval_is_the_contexts(sh):
    status, _, err = sh.run("watch", "users", "--interval", "100", ok=False)
    assert status == 2 and "--sync-interval MS" in err
    status, _, err = sh.run("--sync-interval", "-1", "entities", ok=False)
    assert status == 2 and "--sync-interval" in err


def test_watch_table_until_the_timeout(sh):
    _, out, _ = sh.run("watch", "users", "--where", "Type == 'service'", "--sort", "User", "--fields", "User",
                       "--timeout", "1")
    rows = table(out)
    assert rows[0] == ["id", "User"] and [r[0] for r in rows[1:]] == ["bianca", "olivia", "oscar"]


def test_watch_stops_on_ctrl_c(sh):
    p = subprocess.Popen(sh.base + ["watch", "users", "--fields", "User"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().split() == ["id", "User"]
        time.sleep(0.3)
        p.send_signal(2)
        assert p.wait(timeout=10) == 0
        assert "(40 rows)" in p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


# ------------------------------------------------------------ offline

def test_offline_from_the_store(bucket, tmp_path):
    proxy = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts", "faultproxy.py"),
                              "--upstream", need_url().rsplit("/v1", 1)[0]],
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(proxy.stdout.readline())
        sh = Shell(bucket, tmp_path / "offline.sqlite", url="http://127.0.0.1:%d/v1" % port)
        sh.run("fetch", "jobs", "--fields", "Status")
        assert sh.json("info")["online"] is True
    finally:
        proxy.terminate()
        proxy.wait()
        proxy.stdout.close()
    # The server is unreachable now: the context opens from the store.
    status, out, err = sh.run("info")
    assert "online     no" in out and "offline" in err
    assert sh.json("count", "jobs")["count"] == 60, "fetches answer from the cache"
    _, out, _ = sh.run("get", "jobs", "job000001", "Status")
    assert out == "cached     open\n", "no refresh offline"
    sh.run("set", "jobs", "job000001", "Status", "closed")
    status, _, err = sh.run("save", ok=False)
    assert status == 1 and "TETHER_E_NETWORK" in err
    status, doc, _ = sh.json("save", ok=False)  # a failed save's document is its report
    assert status == 1 and doc["status"] == "TETHER_E_NETWORK" and doc["saved"] == 0
    assert [(f["id"], f["status"]) for f in doc["failures"]] == [("job000001", "TETHER_E_NETWORK")]
    assert sh.json("pending")["count"] == 1, "the edit is kept"
    assert_error(sh, ["--offline", "save"], "TETHER_E_NETWORK", "--offline")
    assert_error(sh, ["fetch", "jobs", "--policy", "server_only"], "TETHER_E_NETWORK")


# ------------------------------------------------------------ a terminal

class Terminal:
    """The shell on a pseudo-terminal (Python's pty), as a person at a
    keyboard drives it: line editing, completion and history are libedit's,
    on a tty only. `expect` reads until a text appears (or fails after 60 s:
    a hang, not a measurement)."""

    def __init__(self, sh, state_home):
        import pty
        env = dict(os.environ, TERM="xterm", XDG_STATE_HOME=str(state_home))
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(SHELL, sh.base, env)
        self.out = b""

    def send(self, keys):
        os.write(self.fd, keys.encode())

    def expect(self, text):
        import select
        deadline = time.monotonic() + 60
        while text.encode() not in self.out:
            assert time.monotonic() < deadline, "no %r in %r" % (text, self.out)
            ready, _, _ = select.select([self.fd], [], [], 1)
            if ready:
                try:
                    self.out += os.read(self.fd, 4096)
                except OSError:  # the other side closed
                    break
        assert text.encode() in self.out, "no %r in %r" % (text, self.out)
        i = self.out.index(text.encode()) + len(text)
        seen, self.out = self.out[:i], self.out[i:]
        return seen.decode(errors="replace")

    def close(self):
        self.send("quit\n")
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def history_lines(path):
    """libedit's history file: a _HiStOrY_V2_ line, then one line an entry,
    spaces and other specials as octal escapes (\\040)."""
    import re
    lines = path.read_text().splitlines()
    assert lines[0] == "_HiStOrY_V2_", lines
    return [re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), l).strip() for l in lines[1:]]


def test_a_terminal_completes_commands_entities_fields_and_words(sh, tmp_path):
    state = tmp_path / "state"
    t = Terminal(sh, state)
    t.expect("tether> ")
    # fie<Tab> cha<Tab>: "fields changes", completed from the commands and the model's entities.
    t.send("fie\tcha\t\n")
    assert "pending|submitted|shelved" in t.expect("tether> ")
    # Options, the vocabulary and field names: "fetch jobs --policy cache_then_server --fields Status".
    t.send("fetch jo\t--pol\tcache_t\t--fie\tSta\t\n")
    assert "job000001  open" in t.expect("tether> ")
    # A key's allowed values: "set jobs job000001 Sta<Tab> clo<Tab>" is "... Status closed".
    t.send("set jobs job000001 Sta\tclo\t\n")
    seen = t.expect("tether> ")
    assert "TETHER_E" not in seen, seen
    # The up arrow brings back the last line (line editing: no "unknown command '^[[A'").
    t.send("pending\n")
    t.expect("tether> ")
    t.send("\x1b[A\n")
    seen = t.expect("tether> ")
    assert "closed" in seen and "unknown command" not in seen, seen
    assert t.close() == 0
    # What was run, as completed (the history keeps the lines as entered).
    assert history_lines(state / "tether" / "history") == [
        "fields changes", "fetch jobs --policy cache_then_server --fields Status",
        "set jobs job000001 Status closed",
        "pending", "pending", "quit"]


def test_a_terminal_keeps_a_history_under_xdg_state_home(sh, tmp_path):
    state = tmp_path / "state"
    t = Terminal(sh, state)
    t.expect("tether> ")
    # Ctrl-C at the prompt: the line is dropped, a new prompt. It is sent once
    # Tab has completed "coun", i.e. libedit has the terminal: a Ctrl-C before
    # that (the prompt is drawn first) is the line discipline's, which only
    # flushes the line and leaves the prompt waiting.
    t.send("coun\t")
    t.expect("t ")   # the completion, drawn by libedit (a cooked terminal would echo the tab)
    t.send("\x03")
    t.expect("tether> ")
    t.send("count jobs\n")
    t.expect("60")
    t.expect("tether> ")
    assert t.close() == 0
    assert history_lines(state / "tether" / "history") == ["count jobs", "quit"]
    # A new session starts with it: the up arrow twice gives the last session's line.
    t = Terminal(sh, state)
    t.expect("tether> ")
    t.send("\x1b[A\x1b[A\n")
    t.expect("60")
    t.expect("tether> ")
    assert t.close() == 0
    # Without a terminal (a script on stdin) no history is read or written; a last
    # line without its newline runs too (it was a usage error with no message).
    other = tmp_path / "other"
    status, out, _ = sh.run(stdin="count jobs\ncount users", env=dict(os.environ, XDG_STATE_HOME=str(other)))
    assert out.split() == ["60", "40"] and not other.exists()


# ------------------------------------------------------------ the demo server

def test_the_demo_server_stays_up_until_stopped(tmp_path):
    """scripts/demo-server (make serve): the README examples' Kinto, seeded,
    on a fixed port (here a free one, KINTO_PORT), up until stopped."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = os.path.join(REPO, "scripts", "demo-server")
    env = dict(os.environ, KINTO_PORT=str(port), TETHER_DEMO_DIR=str(tmp_path / "demo"))
    url = "http://127.0.0.1:%d/v1" % port

    def run(*args):
        p = subprocess.run([script] + list(args), capture_output=True, text=True, env=env, timeout=120)
        return p.returncode, p.stdout

    assert run("status") == (3, "demo server not running (start it: %s start)\n" % script)
    try:
        status, out = run("start")
        assert status == 0 and out.startswith("demo server running at %s " % url), out
        # The shell, as the README runs it against that server: the seeded data.
        sh = Shell("demo", tmp_path / "demo.sqlite", url=url)
        assert sh.json("count", "jobs")["count"] == 60
        status, out = run("start")  # once is enough: a second start says where it is
        assert status == 0 and out.startswith("demo server already running at %s " % url), out
        status, out = run("status")
        assert status == 0 and out.startswith("demo server running at %s " % url), out
        # Another demo server cannot take the port.
        other = dict(env, TETHER_DEMO_DIR=str(tmp_path / "other"))
        p = subprocess.run([script, "start"], capture_output=True, text=True, env=other, timeout=120)
        assert p.returncode == 1 and "port %d is taken" % port in p.stderr, p.stderr
    finally:
        status, out = run("stop")
    assert (status, out) == (0, "demo server stopped\n")
    assert run("status")[0] == 3
    status, _, err = Shell("demo", tmp_path / "down.sqlite", url=url).run("--json", "entities", ok=False)
    assert status == 1 and "TETHER_E_NETWORK" in err, "stopped: nothing answers on the port"
