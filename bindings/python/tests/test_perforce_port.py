"""The Perforce-style port (tether.perforce.Port): entities from real spec
definitions, addressed by Perforce's codes; records from tagged output,
list fields folded; from files and from a `p4` command line; the Kinto
demo's points: a get asks the port, a peek does not."""

import json
import os
import shutil
import stat
import sys
import threading
import time

import pytest

import tether
from tether import perforce

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples", "perforce")


class Counting(perforce.Port):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.reads = []

    def records(self, entity, ids, cursor):
        self.reads.append((entity, tuple(ids)))
        return super().records(entity, ids, cursor)


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "p4"
    shutil.copytree(EXAMPLES, folder)
    return folder


def test_perforce_codes_lists_and_selects(data, tmp_path):
    port = Counting(perforce.FileSource(data), operations=("fetch", "update"))
    with tether.Context.with_connection(port, tmp_path / "p4.db") as ctx:
        assert [e.name for e in ctx.entities] == ["change", "client", "job", "user"]
        client = ctx.entity("client")
        assert client.attribute(301).name == "Client" and client.attribute(311).name == "View"
        assert client.id_attribute.name == "Client"
        assert ctx.entity("change").attribute(205).name == "Status"
        assert ctx.entity("user").attribute(651).is_id
        assert ctx.entity("job").attribute(101).is_id       # a jobspec's first required field
        ctx.query("client", policy="server_only").all()
        ws = ctx.object("client", "alice-ws")
        assert ws.peek(304) == "alice" and ws.peek(307) == "/home/alice/alice-ws"
        assert ws.peek("View") == ["//depot/main/... //alice-ws/main/...",
                                   "-//depot/main/secret/... //alice-ws/main/secret/..."]
        with pytest.raises(tether.InvalidError, match="must be one of"):
            ws.LineEnd = "dos"                                # a select's values
        ws.LineEnd = "unix"
        assert ws.peek("LineEnd") == "unix"


def test_get_asks_the_port_and_peek_does_not(data, tmp_path):
    port = Counting(perforce.FileSource(data))
    with tether.Context.with_connection(port, tmp_path / "p4.db") as ctx:
        final = ctx.query("change").all()
        assert len(final) == 6
        change = ctx.object("change", "1042")
        assert change.peek("Client") == "carol-build"
        time.sleep(0.2)
        assert port.reads == [], "peek never touches the port"
        heard = threading.Event()
        change.observe("Description", lambda obj, key, status: heard.set())
        lines = [json.loads(line) for line in open(data / "change.jsonl")]
        for record in lines:
            if record["Change"] == "1042":
                record["Description"] = "edited elsewhere\n"
        with open(data / "change.jsonl", "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in lines))
        assert change.Client == "carol-build"               # get: the cached value now
        assert heard.wait(10)
        assert ("change", ("1042",)) in port.reads
        assert change.peek("Description") == "edited elsewhere\n"
        assert change.peek("Jobs") == ["job000042"]


FAKE_P4 = r'''#!/usr/bin/env python3
"""A stand-in for `p4 -ztag -Mj`, reading a folder of example data."""
import json, os, sys
data = os.environ["FAKE_P4_DATA"]
args = [a for a in sys.argv[1:] if a not in ("-ztag", "-Mj")]
if args[:2] == ["spec", "-o"]:
    print(json.dumps({"specdef": open(os.path.join(data, args[2] + ".specdef")).read().strip()}))
elif args and args[0] == "bad":
    sys.stderr.write("Perforce client error: Connect to server failed\n")
    sys.exit(1)
else:
    kind = {"clients": "client", "changes": "change", "users": "user", "jobs": "job"}[args[0]]
    for line in open(os.path.join(data, kind + ".jsonl")):
        record = json.loads(line)
        if kind == "client":     # as `p4 clients` lists: the name lower-case
            record["client"] = record.pop("Client")
        if kind == "change":     # as `p4 changes -l` lists
            record["change"] = record.pop("Change")
            record["desc"] = record.pop("Description")
        print(json.dumps(record))
'''


def test_a_p4_command_line(data, tmp_path, monkeypatch):
    fake = tmp_path / "fake-p4"
    fake.write_text(FAKE_P4)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_P4_DATA", str(data))
    source = perforce.CommandSource([sys.executable, str(fake)], {"client": ["clients"], "change": ["changes", "-l"]})
    with tether.Context.with_connection(perforce.Port(source), tmp_path / "cmd.db") as ctx:
        assert [e.name for e in ctx.entities] == ["change", "client"]
        changes = ctx.query("change", sort="-Change").all()
        assert changes[0].peek(201) == "1045"
        assert changes[0].peek("Description") == "Change 1045 by bob.\n"
        clients = ctx.query("client").all()
        assert sorted(c.peek("Owner") for c in clients) == ["alice", "bob", "carol", "dave"]
    broken = perforce.CommandSource([sys.executable, str(fake)], {"client": ["bad"]})
    with tether.Context.with_connection(perforce.Port(broken), tmp_path / "bad.db") as ctx:
        with pytest.raises(tether.NetworkError, match="Connect to server failed"):
            ctx.query("client", policy="server_only").all()


def test_a_malformed_specdef_fails_the_open(data, tmp_path):
    (data / "label.specdef").write_text("Label;code:301;rq;ro;;Owner;code:304;type:wordy;;")
    with pytest.raises(tether.InvalidError, match="label.*'Owner': unknown type 'wordy'"):
        tether.Context.with_connection(perforce.Port(perforce.FileSource(data)), tmp_path / "bad.db")


# P4Perl's lib/specmgr.cpp, 2026.1 release (github.com/perforce/p4perl, commit
# 2b290b2): built-ins with code:NNN (group) and z (typemap), and a 2012.1
# server's triggers ending in a single ';' (as P4Lua's tables keep it).
P4PERL_GROUP = (
    "Group;code:401;rq;ro;len:32;;"
    "Description;code:NNN;type:text;fmt:L:len:128;;"
    "MaxResults;code:402;type:word;len:12;;"
    "MaxScanRows;code:403;type:word;len:12;;"
    "MaxLockTime;code:407;type:word;len:12;;"
    "MaxOpenFiles;code:413;type:word;len:12;;"
    "MaxMemory;code:NNN;type:word;len:12;;"
    "Timeout;code:406;type:word;len:12;;"
    "IdleTimeout;code:NNN;type:word;len:12;;"
    "PasswordTimeout;code:409;type:word;len:12;;"
    "LdapConfig;code:410;type:line;len:128;;"
    "LdapSearchQuery;code:411;type:line;len:128;;"
    "LdapUserAttribute;code:412;type:line;len:128;;"
    "LdapUserDNAttribute;code:414;type:line;len:128;;"
    "Subgroups;code:404;type:wlist;len:32;opt:default;;"
    "Owners;code:408;type:wlist;len:32;opt:default;;"
    "Users;code:405;type:wlist;len:32;opt:default;;"
)
P4PERL_TYPEMAP = "TypeMap;code:601;fmt:C;type:wlist;words:2;len:64;opt:default;z;;"
TRIGGERS_2012 = "Triggers;code:551;type:wlist;words:4;len:64;opt:default;"


def test_the_port_opens_with_autoid_z_and_single_semicolon_specdefs(data, tmp_path):
    (data / "group.specdef").write_text(P4PERL_GROUP)
    (data / "group.jsonl").write_text(json.dumps({"Group": "devs", "Description": "The developers.\n",
                                                  "MaxMemory": "1024", "Timeout": "43200", "Users0": "alice",
                                                  "Users1": "bob"}) + "\n")
    (data / "typemap.specdef").write_text(P4PERL_TYPEMAP)
    (data / "triggers.specdef").write_text(TRIGGERS_2012)
    with tether.Context.with_connection(perforce.Port(perforce.FileSource(data)), tmp_path / "p4.db") as ctx:
        assert [e.name for e in ctx.entities] == ["change", "client", "group", "job", "triggers", "typemap", "user"]
        group = ctx.entity("group")
        assert group.attribute(401).name == "Group" and group.attribute(406).name == "Timeout"
        # The AutoId fields have codes of their own, each with a diagnostic; real codes stay exact.
        autoid = {a.name: a.code for a in group.attributes if a.name in ("Description", "MaxMemory", "IdleTimeout")}
        assert len(set(autoid.values())) == 3 and 0 not in autoid.values()
        assert sorted(d.attribute for d in ctx.diagnostics if d.entity == "group") == [
            "Description", "IdleTimeout", "MaxMemory"]
        ctx.query("group", policy="server_only").all()
        devs = ctx.object("group", "devs")
        assert devs.peek(406) == "43200" and devs.peek("MaxMemory") == "1024"
        assert devs.peek(autoid["MaxMemory"]) == "1024"
        assert devs.peek("Users") == ["alice", "bob"]
        assert ctx.entity("typemap").id_attribute.name == "TypeMap"
        assert ctx.entity("triggers").attribute(551).name == "Triggers"
