"""tether.perforce.parse_specdef: real Perforce spec definitions into fields
in Perforce's words; malformed ones raise InvalidError naming the field.
Needs no server."""

import dataclasses
import threading

import pytest

import tether
from tether import perforce
from tether.perforce import SpecDefField, parse_specdef

# From p4python's SpecMgr.cpp, 2026.1 release (github.com/perforce/p4python,
# commit 9cec853): the spec definitions Perforce's Python API keeps for
# working offline, as servers send them in tagged output.
CLIENT = (
    "Client;code:301;rq;ro;seq:1;len:32;;"
    "Update;code:302;type:date;ro;seq:2;fmt:L;len:20;;"
    "Access;code:303;type:date;ro;seq:4;fmt:L;len:20;;"
    "Owner;code:304;seq:3;fmt:R;len:32;;"
    "Host;code:305;seq:5;fmt:R;len:32;;"
    "Description;code:306;type:text;len:128;;"
    "Root;code:307;rq;type:line;len:64;;"
    "AltRoots;code:308;type:llist;len:64;;"
    "Options;code:309;type:line;len:64;val:"
    "noallwrite/allwrite,noclobber/clobber,nocompress/compress,"
    "unlocked/locked,nomodtime/modtime,normdir/rmdir,noaltsync/altsync;;"
    "SubmitOptions;code:313;type:select;fmt:L;len:25;val:"
    "submitunchanged/submitunchanged+reopen/revertunchanged/"
    "revertunchanged+reopen/leaveunchanged/leaveunchanged+reopen;;"
    "LineEnd;code:310;type:select;fmt:L;len:12;val:local/unix/mac/win/share;;"
    "Stream;code:314;type:line;len:64;;"
    "StreamAtChange;code:316;type:line;len:64;;"
    "ServerID;code:315;type:line;ro;len:64;;"
    "Type;code:318;type:select;len:10;val:writeable/readonly/graph/partitioned/partitioned-jnl;;"
    "Backup;code:319;type:select;len:10;val:enable/disable;;"
    "View;code:311;fmt:C;type:wlist;words:2;len:64;;"
    "ChangeView;code:317;type:llist;len:64;;"
    "LimitView;code:320;fmt:C;type:llist;len:64;;"
)
CHANGE = (
    "Change;code:201;rq;ro;fmt:L;seq:1;len:10;;"
    "Date;code:202;type:date;ro;fmt:R;seq:3;len:20;;"
    "Client;code:203;ro;fmt:L;seq:2;len:32;;"
    "User;code:204;ro;fmt:L;seq:4;len:32;;"
    "Status;code:205;ro;fmt:R;seq:5;len:10;;"
    "Type;code:211;seq:6;type:select;fmt:L;len:10;val:public/restricted;;"
    "ImportedBy;code:212;type:line;ro;fmt:L;len:32;;"
    "Identity;code:213;type:line;;"
    "Description;code:206;type:text;rq;seq:7;;"
    "JobStatus;code:207;fmt:I;type:select;seq:9;;"
    "Jobs;code:208;type:wlist;seq:8;len:32;;"
    "Stream;code:214;type:line;len:64;;"
    "Files;code:210;type:llist;len:64;;"
)
JOB = (
    "Job;code:101;rq;len:32;;"
    "Status;code:102;type:select;rq;len:10;pre:open;val:open/suspended/closed;;"
    "User;code:103;rq;len:32;pre:$user;;"
    "Date;code:104;type:date;ro;len:20;pre:$now;;"
    "Description;code:105;type:text;rq;pre:$blank;;"
)
# From p4ruby's ext/P4/specmgr.cpp, 2020.1 release (github.com/perforce/p4ruby,
# commit a9c10dc), from before p4python's NNN below.
GROUP = (
    "Group;code:401;rq;ro;len:32;;"
    "MaxResults;code:402;type:word;len:12;;"
    "MaxScanRows;code:403;type:word;len:12;;"
    "MaxLockTime;code:407;type:word;len:12;;"
    "MaxOpenFiles;code:413;type:word;len:12;;"
    "Timeout;code:406;type:word;len:12;;"
    "PasswordTimeout;code:409;type:word;len:12;;"
    "LdapConfig;code:410;type:line;len:128;;"
    "LdapSearchQuery;code:411;type:line;len:128;;"
    "LdapUserAttribute;code:412;type:line;len:128;;"
    "LdapUserDNAttribute;code:414;type:line;len:128;;"
    "Subgroups;code:404;type:wlist;len:32;opt:default;;"
    "Owners;code:408;type:wlist;len:32;opt:default;;"
    "Users;code:405;type:wlist;len:32;opt:default;;"
)
# p4python 2026.1's group (commit above) begins so: `code:NNN` is the
# placeholder an administrator types for the server to number; never sent.
GROUP_WITH_PLACEHOLDER = (
    "Group;code:401;rq;ro;len:32;;"
    "Description;code:NNN;type:text;fmt:L:len:128;;"
    "MaxResults;code:402;type:word;len:12;;"
)


def test_package_exports_perforce():
    assert tether.perforce is perforce
    assert "perforce" in tether.__all__


def test_client_fields_in_order_in_perforce_words():
    fields = parse_specdef(CLIENT)
    assert [f.tag for f in fields] == [
        "Client", "Update", "Access", "Owner", "Host", "Description", "Root", "AltRoots", "Options",
        "SubmitOptions", "LineEnd", "Stream", "StreamAtChange", "ServerID", "Type", "Backup", "View",
        "ChangeView", "LimitView"]
    assert [f.code for f in fields][:8] == [301, 302, 303, 304, 305, 306, 307, 308]
    assert fields[0] == SpecDefField(tag="Client", code=301, type="word", opt="key", key=True, len=32, seq=1)
    by_tag = {f.tag: f for f in fields}
    assert by_tag["Update"].opt == "always" and by_tag["Update"].fmt == "L" and by_tag["Update"].type == "date"
    assert by_tag["Root"].opt == "required" and by_tag["Root"].code == 307
    assert by_tag["View"].type == "wlist" and by_tag["View"].words == 2 and by_tag["View"].code == 311
    assert by_tag["View"].maxwords == 0 and by_tag["View"].pre is None
    assert by_tag["Update"].words == 1 and by_tag["Description"].seq == 0
    assert by_tag["LineEnd"].val == ("local", "unix", "mac", "win", "share")
    assert by_tag["Description"].val == ()
    assert [f.tag for f in fields if f.key] == ["Client"]


def test_change_job_and_group():
    change = {f.tag: f for f in parse_specdef(CHANGE)}
    assert change["Change"].code == 201 and change["Change"].key
    assert change["Status"].code == 205 and change["Status"].opt == "always"
    assert change["JobStatus"].type == "select" and change["JobStatus"].val == ()

    job = parse_specdef(JOB)
    assert [f.code for f in job] == [101, 102, 103, 104, 105]
    # No key field in a jobspec: its name, 101, is the first required field.
    assert job[0].opt == "required" and job[0].key
    assert job[1] == SpecDefField(tag="Status", code=102, type="select", opt="required", key=False, len=10,
                                  pre="open", val=("open", "suspended", "closed"))
    assert job[2].pre == "$user"

    group = {f.tag: f for f in parse_specdef(GROUP)}
    assert group["Group"].code == 401 and group["Group"].key
    assert group["Users"].opt == "default" and group["Users"].type == "wlist"


def test_fields_are_frozen():
    field = parse_specdef(JOB)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        field.code = 1


def test_tolerated_quirks():
    # The typemap's unknown `z` flag (p4python's table), an extra ";;", a line end, bytes.
    (typemap,) = parse_specdef("TypeMap;code:601;fmt:C;type:wlist;words:2;len:64;opt:default;z;;;;\n")
    assert (typemap.tag, typemap.opt, typemap.type, typemap.key) == ("TypeMap", "empty", "wlist", True)
    assert parse_specdef(JOB.encode("utf-8")) == parse_specdef(JOB)
    assert parse_specdef("A;code:1;val:x//y;;")[0].val == ("x", "", "y")


@pytest.mark.parametrize("text, needle", [
    ("", "empty"),
    (";;;;", "no fields"),
    (";code:1;;", "no tag"),
    ("Client;code:301;;Client;code:302;;", "repeats the tag 'Client'"),
    ("Client;code:301;type:wordy;;", "'Client': unknown type 'wordy'"),
    ("Client;code:301;opt:sometimes;;", "'Client': unknown opt 'sometimes'"),
    ("Owner;code:704;open:always;;", "'Owner': unknown open 'always'"),
    ("Client;code:301;pre:a\0b;;", "U+0000"),
])
def test_malformed_raise_invalid_naming_the_field(text, needle):
    with pytest.raises(tether.InvalidError) as raised:
        parse_specdef(text)
    assert needle in raised.value.message
    assert raised.value.status == tether.E_INVALID


def test_invalid_utf8_bytes():
    with pytest.raises(tether.InvalidError):
        parse_specdef(b"Client\xff;code:1;;")


def test_parse_from_threads():
    errors = []

    def work():
        try:
            for _ in range(200):
                assert parse_specdef(CLIENT)[16].tag == "View"
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --------------------------------------------------------------- as Perforce's decoder reads them (issue 23)

def test_code_nnn_is_autoid_zero_shared():
    # p4python 2026.1's group: code:NNN is atoi("NNN"), 0; fmt:L:len:128 an unknown fmt, ignored.
    group = {f.tag: f for f in parse_specdef(GROUP_WITH_PLACEHOLDER)}
    assert group["Description"].code == 0 and group["Description"].fmt is None and group["Description"].len == 0
    assert [f.code for f in parse_specdef("A;code:NNN;;B;code:NNN;;")] == [0, 0]


def test_a_field_without_code_has_its_index():
    # P4Win's P4SpecData.cpp: the 98.2 specs describing 97.3 data, before codes.
    fields = parse_specdef("Client;rq;ro;len:32;;Date;type:line;ro;len:20;;Owner;len:32;;")
    assert [f.code for f in fields] == [0, 1, 2] and fields[0].key


def test_z_makes_opt_empty():
    # P4Perl 2026.1's protect (github.com/perforce/p4perl, 2b290b2).
    protect = parse_specdef("SubPath;code:502;ro;len:64;;Update;code:503;type:date;ro;fmt:L;len:20;;"
                            "Protections;code:501;fmt:C;type:wlist;words:5;opt:default;z;len:64;;")
    assert protect[2].opt == "empty" and protect[2].words == 5
    assert [f.tag for f in protect if f.key] == ["SubPath"]     # no required field: the first


def test_the_last_field_may_end_with_one_semicolon():
    # A 2012.1 server's triggers (as P4Lua's tables keep it).
    (triggers,) = parse_specdef("Triggers;code:551;type:wlist;words:4;len:64;opt:default;")
    assert triggers == SpecDefField(tag="Triggers", code=551, type="wlist", opt="default", key=True, len=64, words=4)
    assert parse_specdef(JOB[:-2]) == parse_specdef(JOB)


def test_rq_ro_with_opt():
    def opt(attributes):
        return parse_specdef("A;code:1;%s;;" % attributes)[0].opt
    assert [opt(a) for a in ["rq", "ro", "rq;ro", "opt:required;ro", "opt:once;rq", "opt:default;z"]] == [
        "required", "always", "key", "key", "once", "empty"]


JOBSPEC_FORM = {   # as P4Python's p4.fetch_jobspec() gives `p4 jobspec -o`, with a custom field
    "Fields": ["101 Job word 32 required", "102 Status select 10 required", "103 User word 32 required",
               "104 Date date 20 always", "105 Description text 0 required", "NNN Severity select 10 optional"],
    "Values": ["Status open/suspended/closed", "Severity A/B/C"],
    "Presets": ["Status open", "User $user", "Date $now", "Description \"<enter description here>\""],
    "Comments": "# A Perforce Job Specification.\n",
}


def test_specdef_from_a_jobspec_form():
    specdef = perforce.specdef_from_form(JOBSPEC_FORM)
    fields = parse_specdef(specdef)
    assert [f.tag for f in fields] == ["Job", "Status", "User", "Date", "Description", "Severity"]
    assert [f.code for f in fields] == [101, 102, 103, 104, 105, 0]
    assert fields[5].val == ("A", "B", "C") and fields[4].pre == "<enter description here>"
    assert [f.tag for f in fields if f.key] == ["Job"]
    # Tagged output's Fields0, Fields1... read the same.
    tagged = {"Fields%d" % i: line for i, line in enumerate(JOBSPEC_FORM["Fields"])}
    tagged.update({"Values%d" % i: line for i, line in enumerate(JOBSPEC_FORM["Values"])})
    tagged.update({"Presets%d" % i: line for i, line in enumerate(JOBSPEC_FORM["Presets"])})
    assert parse_specdef(perforce.specdef_from_form(tagged)) == fields


def test_a_malformed_form_raises_naming_the_line():
    with pytest.raises(tether.InvalidError, match="unknown type 'wordy'"):
        perforce.specdef_from_form({"Fields": ["101 Job wordy 32 required"]})
    with pytest.raises(tether.InvalidError, match="no Fields"):
        perforce.specdef_from_form({"Comments": "#"})
    with pytest.raises(tether.InvalidError, match="'Status', which Fields does not define"):
        perforce.specdef_from_form({"Fields": ["101 Job word 32 required"], "Values": ["Status a/b"]})
