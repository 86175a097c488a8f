import XCTest
@testable import Tether

/// Real spec definitions, as Perforce's own client libraries carry them (the
/// same strings servers send in the `specdef` field of tagged output).
/// Only the strings are taken, as test data.
enum RealSpecDefs {
    // client, label, branch, change, user, depot, job, typemap:
    // p4python's SpecMgr.cpp, 2026.1 release (github.com/perforce/p4python,
    // commit 9cec853): the spec definitions Perforce's Python API keeps for
    // working offline.
    static let client = [
        "Client;code:301;rq;ro;seq:1;len:32;;",
        "Update;code:302;type:date;ro;seq:2;fmt:L;len:20;;",
        "Access;code:303;type:date;ro;seq:4;fmt:L;len:20;;",
        "Owner;code:304;seq:3;fmt:R;len:32;;",
        "Host;code:305;seq:5;fmt:R;len:32;;",
        "Description;code:306;type:text;len:128;;",
        "Root;code:307;rq;type:line;len:64;;",
        "AltRoots;code:308;type:llist;len:64;;",
        "Options;code:309;type:line;len:64;val:noallwrite/allwrite,noclobber/clobber,nocompress/compress,unlocked/locked,nomodtime/modtime,normdir/rmdir,noaltsync/altsync;;",
        "SubmitOptions;code:313;type:select;fmt:L;len:25;val:submitunchanged/submitunchanged+reopen/revertunchanged/revertunchanged+reopen/leaveunchanged/leaveunchanged+reopen;;",
        "LineEnd;code:310;type:select;fmt:L;len:12;val:local/unix/mac/win/share;;",
        "Stream;code:314;type:line;len:64;;",
        "StreamAtChange;code:316;type:line;len:64;;",
        "ServerID;code:315;type:line;ro;len:64;;",
        "Type;code:318;type:select;len:10;val:writeable/readonly/graph/partitioned/partitioned-jnl;;",
        "Backup;code:319;type:select;len:10;val:enable/disable;;",
        "View;code:311;fmt:C;type:wlist;words:2;len:64;;",
        "ChangeView;code:317;type:llist;len:64;;",
        "LimitView;code:320;fmt:C;type:llist;len:64;;"
    ].joined()

    static let label = [
        "Label;code:301;rq;ro;fmt:L;len:32;;",
        "Update;code:302;type:date;ro;fmt:L;len:20;;",
        "Access;code:303;type:date;ro;fmt:L;len:20;;",
        "Owner;code:304;fmt:R;len:32;;",
        "Description;code:306;type:text;len:128;;",
        "Options;code:309;type:line;len:64;val:unlocked/locked,noautoreload/autoreload;;",
        "Revision;code:312;type:word;words:1;len:64;;",
        "ServerID;code:315;type:line;ro;len:64;;",
        "View;code:311;fmt:C;type:wlist;len:64;;"
    ].joined()

    static let branch = [
        "Branch;code:301;rq;ro;fmt:L;len:32;;",
        "Update;code:302;type:date;ro;fmt:L;len:20;;",
        "Access;code:303;type:date;ro;fmt:L;len:20;;",
        "Owner;code:304;fmt:R;len:32;;",
        "Description;code:306;type:text;len:128;;",
        "Options;code:309;type:line;len:32;val:unlocked/locked;;",
        "View;code:311;fmt:C;type:wlist;words:2;len:64;;"
    ].joined()

    static let change = [
        "Change;code:201;rq;ro;fmt:L;seq:1;len:10;;",
        "Date;code:202;type:date;ro;fmt:R;seq:3;len:20;;",
        "Client;code:203;ro;fmt:L;seq:2;len:32;;",
        "User;code:204;ro;fmt:L;seq:4;len:32;;",
        "Status;code:205;ro;fmt:R;seq:5;len:10;;",
        "Type;code:211;seq:6;type:select;fmt:L;len:10;val:public/restricted;;",
        "ImportedBy;code:212;type:line;ro;fmt:L;len:32;;",
        "Identity;code:213;type:line;;",
        "Description;code:206;type:text;rq;seq:7;;",
        "JobStatus;code:207;fmt:I;type:select;seq:9;;",
        "Jobs;code:208;type:wlist;seq:8;len:32;;",
        "Stream;code:214;type:line;len:64;;",
        "Files;code:210;type:llist;len:64;;"
    ].joined()

    static let user = [
        "User;code:651;rq;ro;seq:1;len:32;;",
        "Type;code:659;ro;fmt:R;len:10;;",
        "Email;code:652;fmt:R;rq;seq:3;len:32;;",
        "Update;code:653;fmt:L;type:date;ro;seq:2;len:20;;",
        "Access;code:654;fmt:L;type:date;ro;len:20;;",
        "FullName;code:655;fmt:R;type:line;rq;len:32;;",
        "JobView;code:656;type:line;len:64;;",
        "Password;code:657;len:32;;",
        "AuthMethod;code:662;fmt:L;len:10;val:perforce/perforce+2fa/ldap/ldap+2fa;;",
        "Reviews;code:658;type:wlist;len:64;;"
    ].joined()

    static let depot = [
        "Depot;code:251;rq;ro;len:32;;",
        "Owner;code:252;len:32;;",
        "Date;code:253;type:date;ro;len:20;;",
        "Description;code:254;type:text;len:128;;",
        "Type;code:255;rq;len:10;;",
        "Address;code:256;len:64;;",
        "Suffix;code:258;len:64;;",
        "StreamDepth;code:260;len:64;;",
        "Map;code:257;rq;len:64;;",
        "SpecMap;code:259;type:wlist;len:64;;"
    ].joined()

    static let job = [
        "Job;code:101;rq;len:32;;",
        "Status;code:102;type:select;rq;len:10;pre:open;val:open/suspended/closed;;",
        "User;code:103;rq;len:32;pre:$user;;",
        "Date;code:104;type:date;ro;len:20;pre:$now;;",
        "Description;code:105;type:text;rq;pre:$blank;;"
    ].joined()

    static let typemap = [
        "TypeMap;code:601;fmt:C;type:wlist;words:2;len:64;opt:default;z;;"
    ].joined()

    // group, stream: p4ruby's ext/P4/specmgr.cpp, 2020.1 release
    // (github.com/perforce/p4ruby, commit a9c10dc), from before the NNN below.
    static let group = [
        "Group;code:401;rq;ro;len:32;;",
        "MaxResults;code:402;type:word;len:12;;",
        "MaxScanRows;code:403;type:word;len:12;;",
        "MaxLockTime;code:407;type:word;len:12;;",
        "MaxOpenFiles;code:413;type:word;len:12;;",
        "Timeout;code:406;type:word;len:12;;",
        "PasswordTimeout;code:409;type:word;len:12;;",
        "LdapConfig;code:410;type:line;len:128;;",
        "LdapSearchQuery;code:411;type:line;len:128;;",
        "LdapUserAttribute;code:412;type:line;len:128;;",
        "LdapUserDNAttribute;code:414;type:line;len:128;;",
        "Subgroups;code:404;type:wlist;len:32;opt:default;;",
        "Owners;code:408;type:wlist;len:32;opt:default;;",
        "Users;code:405;type:wlist;len:32;opt:default;;"
    ].joined()

    static let stream = [
        "Stream;code:701;rq;ro;len:64;;",
        "Update;code:705;type:date;ro;fmt:L;len:20;;",
        "Access;code:706;type:date;ro;fmt:L;len:20;;",
        "Owner;code:704;len:32;open:isolate;;",
        "Name;code:703;rq;type:line;len:32;open:isolate;;",
        "Parent;code:702;rq;len:64;open:isolate;;",
        "Type;code:708;rq;len:32;open:isolate;;",
        "Description;code:709;type:text;len:128;open:isolate;;",
        "Options;code:707;type:line;len:64;val:allsubmit/ownersubmit,unlocked/locked,toparent/notoparent,fromparent/nofromparent,mergedown/mergeany;open:isolate;;",
        "Paths;code:710;rq;type:wlist;words:2;maxwords:3;len:64;open:propagate;;",
        "Remapped;code:711;type:wlist;words:2;len:64;open:propagate;;",
        "Ignored;code:712;type:wlist;words:1;len:64;open:propagate;;",
        "View;code:713;type:wlist;words:2;len:64;;",
        "ChangeView;code:714;type:llist;ro;len:64;;"
    ].joined()

    // p4python's 2026.1 group and stream (the commit above): fields added since
    // carry `code:NNN`, which Perforce's decoder reads as 0, AutoId (and
    // group has a `fmt:L:len:128`, an unknown fmt, ignored).
    static let groupWithPlaceholders = [
        "Group;code:401;rq;ro;len:32;;",
        "Description;code:NNN;type:text;fmt:L:len:128;;",
        "MaxResults;code:402;type:word;len:12;;",
        "MaxScanRows;code:403;type:word;len:12;;",
        "MaxLockTime;code:407;type:word;len:12;;",
        "MaxOpenFiles;code:413;type:word;len:12;;",
        "MaxMemory;code:NNN;type:word;len:12;;",
        "Timeout;code:406;type:word;len:12;;",
        "IdleTimeout;code:NNN;type:word;len:12;;",
        "PasswordTimeout;code:409;type:word;len:12;;",
        "LdapConfig;code:410;type:line;len:128;;",
        "LdapSearchQuery;code:411;type:line;len:128;;",
        "LdapUserAttribute;code:412;type:line;len:128;;",
        "LdapUserDNAttribute;code:414;type:line;len:128;;",
        "Subgroups;code:404;type:wlist;len:32;opt:default;;",
        "Owners;code:408;type:wlist;len:32;opt:default;;",
        "Users;code:405;type:wlist;len:32;opt:default;;"
    ].joined()

    static let streamWithPlaceholders = [
        "Stream;code:701;rq;ro;len:64;;",
        "Update;code:705;type:date;ro;fmt:L;len:20;;",
        "Access;code:706;type:date;ro;fmt:L;len:20;;",
        "Owner;code:704;len:32;open:isolate;;",
        "Name;code:703;rq;type:line;len:32;open:isolate;;",
        "Parent;code:702;rq;len:64;open:isolate;;",
        "Type;code:708;rq;type:select;len:32;open:isolate;val:mainline/virtual/development/release/task/sparsedev/sparserel;;",
        "Description;code:709;type:text;len:128;open:isolate;;",
        "Options;code:707;type:line;len:64;val:allsubmit/ownersubmit,unlocked/locked,toparent/notoparent,fromparent/nofromparent,mergedown/mergeany;open:isolate;;",
        "ParentView;code:NNN;rq;open:isolate;pre:inherit;val:noinherit/inherit;;",
        "Components;code:NNN;type:wlist;words:3;maxwords:4;len:64;open:propagate;fmt:C;;",
        "Paths;code:710;rq;type:wlist;words:2;maxwords:3;len:64;open:propagate;fmt:C;;",
        "Remapped;code:711;type:wlist;words:2;len:64;open:propagate;fmt:C;;",
        "Ignored;code:712;type:wlist;words:1;len:64;open:propagate;fmt:C;;",
        "View;code:713;type:wlist;words:2;len:64;;",
        "ChangeView;code:714;type:llist;ro;len:64;;"
    ].joined()

    // P4Win's P4SpecData.cpp (Perforce's old Windows client, public source):
    // "the 98.2 format specs describing 97.3 data", before fields had codes.
    static let clientWithoutCodes = [
        "Client;rq;ro;len:32;;",
        "Date;type:line;ro;len:20;;",
        "Owner;len:32;;",
        "Description;type:text;len:128;;",
        "Root;type:line;rq;len:64;;",
        "Options;type:line;len:64;;",
        "View;type:wlist;words:2;len:64;;"
    ].joined()

    // P4Perl's lib/specmgr.cpp, 2026.1 release (github.com/perforce/p4perl,
    // commit 2b290b2): every built-in of Perforce's Perl API, the newest a
    // client API ships. Group, stream and repo carry `code:NNN` (AutoId, 0,
    // shared); protect, triggers, typemap and hotfiles `z`; group's
    // Description a `fmt:L:len:128` Perforce reads as an unknown fmt.
    static let p4perl2026: [(name: String, specdef: String)] = [
        ("branch", [
            "Branch;code:301;rq;ro;fmt:L;len:32;;",
            "Update;code:302;type:date;ro;fmt:L;len:20;;",
            "Access;code:303;type:date;ro;fmt:L;len:20;;",
            "Owner;code:304;fmt:R;len:32;;",
            "Description;code:306;type:text;len:128;;",
            "Options;code:309;type:line;len:32;val:unlocked/locked;;",
            "View;code:311;fmt:C;type:wlist;words:2;len:64;;"
        ].joined()),
        ("change", [
            "Change;code:201;rq;ro;fmt:L;seq:1;len:10;;",
            "Date;code:202;type:date;ro;fmt:R;seq:3;len:20;;",
            "Client;code:203;ro;fmt:L;seq:2;len:32;;",
            "User;code:204;ro;fmt:L;seq:4;len:32;;",
            "Status;code:205;ro;fmt:R;seq:5;len:10;;",
            "Type;code:211;seq:6;type:select;fmt:L;len:10;val:public/restricted;;",
            "ImportedBy;code:212;type:line;ro;fmt:L;len:32;;",
            "Identity;code:213;type:line;;",
            "Description;code:206;type:text;rq;seq:7;;",
            "JobStatus;code:207;fmt:I;type:select;seq:9;;",
            "Jobs;code:208;type:wlist;seq:8;len:32;;",
            "Stream;code:214;type:line;len:64;;",
            "Files;code:210;type:llist;len:64;;"
        ].joined()),
        ("client", [
            "Client;code:301;rq;ro;seq:1;len:32;;",
            "Update;code:302;type:date;ro;seq:2;fmt:L;len:20;;",
            "Access;code:303;type:date;ro;seq:4;fmt:L;len:20;;",
            "Owner;code:304;seq:3;fmt:R;len:32;;",
            "Host;code:305;seq:5;fmt:R;len:32;;",
            "Description;code:306;type:text;len:128;;",
            "Root;code:307;rq;type:line;len:64;;",
            "AltRoots;code:308;type:llist;len:64;;",
            "Options;code:309;type:line;len:64;val:noallwrite/allwrite,noclobber/clobber,nocompress/compress,unlocked/locked,nomodtime/modtime,normdir/rmdir,noaltsync/altsync;;",
            "SubmitOptions;code:313;type:select;fmt:L;len:25;val:submitunchanged/submitunchanged+reopen/revertunchanged/revertunchanged+reopen/leaveunchanged/leaveunchanged+reopen;;",
            "LineEnd;code:310;type:select;fmt:L;len:12;val:local/unix/mac/win/share;;",
            "Stream;code:314;type:line;len:64;;",
            "StreamAtChange;code:316;type:line;len:64;;",
            "ServerID;code:315;type:line;ro;len:64;;",
            "Type;code:318;type:select;len:10;val:writeable/readonly/graph/partitioned/partitioned-jnl;;",
            "Backup;code:319;type:select;len:10;val:enable/disable;;",
            "View;code:311;fmt:C;type:wlist;words:2;len:64;;",
            "ChangeView;code:317;type:llist;len:64;;",
            "LimitView;code:320;fmt:C;type:llist;len:64;;"
        ].joined()),
        ("depot", [
            "Depot;code:251;rq;ro;len:32;;",
            "Owner;code:252;len:32;;",
            "Date;code:253;type:date;ro;len:20;;",
            "Description;code:254;type:text;len:128;;",
            "Type;code:255;rq;len:10;;",
            "Address;code:256;len:64;;",
            "Suffix;code:258;len:64;;",
            "StreamDepth;code:260;len:64;;",
            "Map;code:257;rq;len:64;;",
            "SpecMap;code:259;type:wlist;len:64;;"
        ].joined()),
        ("group", [
            "Group;code:401;rq;ro;len:32;;",
            "Description;code:NNN;type:text;fmt:L:len:128;;",
            "MaxResults;code:402;type:word;len:12;;",
            "MaxScanRows;code:403;type:word;len:12;;",
            "MaxLockTime;code:407;type:word;len:12;;",
            "MaxOpenFiles;code:413;type:word;len:12;;",
            "MaxMemory;code:NNN;type:word;len:12;;",
            "Timeout;code:406;type:word;len:12;;",
            "IdleTimeout;code:NNN;type:word;len:12;;",
            "PasswordTimeout;code:409;type:word;len:12;;",
            "LdapConfig;code:410;type:line;len:128;;",
            "LdapSearchQuery;code:411;type:line;len:128;;",
            "LdapUserAttribute;code:412;type:line;len:128;;",
            "LdapUserDNAttribute;code:414;type:line;len:128;;",
            "Subgroups;code:404;type:wlist;len:32;opt:default;;",
            "Owners;code:408;type:wlist;len:32;opt:default;;",
            "Users;code:405;type:wlist;len:32;opt:default;;"
        ].joined()),
        ("hotfiles", [
            "HotFiles;code:1051;fmt:C;type:wlist;words:1;maxwords:3;len:64;opt:default;z;;"
        ].joined()),
        ("job", [
            "Job;code:101;rq;len:32;;",
            "Status;code:102;type:select;rq;len:10;pre:open;val:open/suspended/closed;;",
            "User;code:103;rq;len:32;pre:$user;;",
            "Date;code:104;type:date;ro;len:20;pre:$now;;",
            "Description;code:105;type:text;rq;pre:$blank;;"
        ].joined()),
        ("label", [
            "Label;code:301;rq;ro;fmt:L;len:32;;",
            "Update;code:302;type:date;ro;fmt:L;len:20;;",
            "Access;code:303;type:date;ro;fmt:L;len:20;;",
            "Owner;code:304;fmt:R;len:32;;",
            "Description;code:306;type:text;len:128;;",
            "Options;code:309;type:line;len:64;val:unlocked/locked,noautoreload/autoreload;;",
            "Revision;code:312;type:word;words:1;len:64;;",
            "ServerID;code:315;type:line;ro;len:64;;",
            "View;code:311;fmt:C;type:wlist;len:64;;"
        ].joined()),
        ("ldap", [
            "Name;code:801;rq;len:32;;",
            "Host;code:802;rq;type:word;words:1;len:128;;",
            "Port;code:803;rq;type:word;words:1;len:5;;",
            "Encryption;code:804;rq;len:10;val:none/ssl/tls;;",
            "BindMethod;code:805;rq;len:10;val:simple/search/sasl;;",
            "Options;code:816;type:line;len:64;val:nodowncase/downcase,nogetattrs/getattrs,norealminusername/realminusername;;",
            "SimplePattern;code:806;type:line;len:128;;",
            "SearchBaseDN;code:807;type:line;len:128;;",
            "SearchFilter;code:808;type:line;len:128;;",
            "SearchScope;code:809;len:10;val:baseonly/children/subtree;;",
            "SearchBindDN;code:810;type:line;len:128;;",
            "SearchPasswd;code:811;type:line;len:128;;",
            "SaslRealm;code:812;type:word;words:1;len:128;;",
            "GroupBaseDN;code:813;type:line;len:128;;",
            "GroupSearchFilter;code:814;type:line;len:128;;",
            "GroupSearchScope;code:815;len:10;val:baseonly/children/subtree;;",
            "AttributeUid;code:817;type:word;len:128;;",
            "AttributeName;code:818;type:line;len:128;;",
            "AttributeEmail;code:819;type:word;len:128;;"
        ].joined()),
        ("license", [
            "License;code:451;len:32;;",
            "License-Expires;code:452;len:10;;",
            "Support-Expires;code:453;len:10;;",
            "Customer;code:454;type:line;len:128;;",
            "Application;code:455;len:32;;",
            "IPaddress;code:456;len:24;;",
            "IPservice;code:461;type:wlist;len:24;;",
            "Platform;code:457;len:32;;",
            "Clients;code:458;len:8;;",
            "Users;code:459;len:8;;",
            "Files;code:460;len:8;;",
            "Repos;code:462;len:8;;",
            "ExtraCapabilities;code:463;type:llist;len:512;;"
        ].joined()),
        ("protect", [
            "SubPath;code:502;ro;len:64;;",
            "Update;code:503;type:date;ro;fmt:L;len:20;;",
            "Protections;code:501;fmt:C;type:wlist;words:5;opt:default;z;len:64;;"
        ].joined()),
        ("remote", [
            "RemoteID;code:851;rq;ro;fmt:L;len:32;;",
            "Address;code:852;rq;type:line;len:32;;",
            "Owner;code:853;fmt:R;len:32;;",
            "RemoteUser;code:861;fmt:R;len:32;;",
            "Options;code:854;type:line;len:32;val:unlocked/locked,nocompress/compress,copyrcs/nocopyrcs;;",
            "Update;code:855;type:date;ro;fmt:L;len:20;;",
            "Access;code:856;type:date;ro;fmt:L;len:20;;",
            "Description;code:857;type:text;len:128;;",
            "LastFetch;code:858;fmt:L;len:10;;",
            "LastPush;code:859;fmt:L;len:10;;",
            "DepotMap;code:860;type:wlist;words:2;len:64;;",
            "ArchiveLimits;code:862;type:wlist;words:2;len:64;;",
            "RemoteCharset;code:863;opt:optional;type:line;len:32;;"
        ].joined()),
        ("repo", [
            "Repo;code:1001;rq;ro;fmt:L;len:128;;",
            "Owner;code:1002;fmt:R;len:32;;",
            "Created;code:1003;type:date;ro;fmt:L;len:20;;",
            "Pushed;code:1004;type:date;ro;fmt:R;len:20;;",
            "ForkedFrom;code:1005;ro;fmt:L;len:128;;",
            "Description;code:1006;type:text;len:128;;",
            "DefaultBranch;code:1007;fmt:L;len:32;;",
            "MirroredFrom;code:1008;fmt:R;len:32;;",
            "Options;code:1009;type:select;len:10;val:lfs/nolfs;;",
            "GconnMirrorServerId;code:1010;fmt:L;len:32;;",
            "GconnMirrorSecretToken;code:NNN;len:36;;",
            "GconnMirrorStatus;code:NNN;len:8;;",
            "GconnMirrorExcludedBranches;code:NNN;len:256;;",
            "GconnMirrorHideFetchUrl;code:NNN;len:5;;"
        ].joined()),
        ("server", [
            "ServerID;code:751;rq;ro;len:32;;",
            "Type;code:752;rq;len:32;;",
            "Name;code:753;type:line;len:32;;",
            "Address;code:754;type:line;len:32;;",
            "ExternalAddress;code:755;type:line;len:32;;",
            "Services;code:756;rq;len:128;;",
            "Options;code:764;type:line;len:32;val:nomandatory/mandatory;;",
            "ReplicatingFrom;code:765;type:line;len:32;;",
            "Description;code:757;type:text;len:128;;",
            "User;code:761;type:line;len:64;;",
            "AllowedAddresses;code:763;type:wlist;len:64;;",
            "UpdateCachedRepos;code:766;type:wlist;len:64;;",
            "ClientDataFilter;code:758;type:wlist;len:64;;",
            "RevisionDataFilter;code:759;type:wlist;len:64;;",
            "ArchiveDataFilter;code:760;type:wlist;len:64;;",
            "DistributedConfig;code:762;type:text;len:128;;"
        ].joined()),
        ("spec", [
            "Fields;code:351;type:wlist;words:5;rq;;",
            "Words;code:352;type:wlist;words:2;;",
            "Formats;code:353;type:wlist;words:3;;",
            "Values;code:354;type:wlist;words:2;;",
            "Presets;code:355;type:wlist;words:2;;",
            "Openable;code:362;type:wlist;words:2;;",
            "Maxwords;code:361;type:wlist;words:2;;",
            "Comments;code:356;type:text;;"
        ].joined()),
        ("stream", [
            "Stream;code:701;rq;ro;len:64;;",
            "Update;code:705;type:date;ro;fmt:L;len:20;;",
            "Access;code:706;type:date;ro;fmt:L;len:20;;",
            "Owner;code:704;len:32;open:isolate;;",
            "Name;code:703;rq;type:line;len:32;open:isolate;;",
            "Parent;code:702;rq;len:64;open:isolate;;",
            "Type;code:708;rq;type:select;len:32;open:isolate;val:mainline/virtual/development/release/task/sparsedev/sparserel;;",
            "Description;code:709;type:text;len:128;open:isolate;;",
            "Options;code:707;type:line;len:64;val:allsubmit/ownersubmit,unlocked/locked,toparent/notoparent,fromparent/nofromparent,mergedown/mergeany;open:isolate;;",
            "ParentView;code:NNN;rq;open:isolate;pre:inherit;val:noinherit/inherit;;",
            "Components;code:NNN;type:wlist;words:3;maxwords:4;len:64;open:propagate;fmt:C;;",
            "Paths;code:710;rq;type:wlist;words:2;maxwords:3;len:64;open:propagate;fmt:C;;",
            "Remapped;code:711;type:wlist;words:2;len:64;open:propagate;fmt:C;;",
            "Ignored;code:712;type:wlist;words:1;len:64;open:propagate;fmt:C;;",
            "View;code:713;type:wlist;words:2;len:64;;",
            "ChangeView;code:714;type:llist;ro;len:64;;"
        ].joined()),
        ("triggers", [
            "Triggers;code:551;type:wlist;words:4;len:64;opt:default;z;;"
        ].joined()),
        ("typemap", [
            "TypeMap;code:601;fmt:C;type:wlist;words:2;len:64;opt:default;z;;"
        ].joined()),
        ("user", [
            "User;code:651;rq;ro;seq:1;len:32;;",
            "Type;code:659;ro;fmt:R;len:10;;",
            "Email;code:652;fmt:R;rq;seq:3;len:32;;",
            "Update;code:653;fmt:L;type:date;ro;seq:2;len:20;;",
            "Access;code:654;fmt:L;type:date;ro;len:20;;",
            "FullName;code:655;fmt:R;type:line;rq;len:32;;",
            "JobView;code:656;type:line;len:64;;",
            "Password;code:657;len:32;;",
            "AuthMethod;code:662;fmt:L;len:10;val:perforce/perforce+2fa/ldap/ldap+2fa;;",
            "Reviews;code:658;type:wlist;len:64;;"
        ].joined()),
    ]

    // P4Lua's specmgr.cpp (Perforce's Lua API, its tables from the 2008-2012
    // servers): the triggers and typemap end with a single ';', as a 2012.1
    // server sends them; protect has its one field of then.
    static let triggers2012 = "Triggers;code:551;type:wlist;words:4;len:64;opt:default;"
    static let typemap2012 = "TypeMap;code:601;type:wlist;words:2;len:64;opt:default;"
    static let protect2012 = "Protections;code:501;type:wlist;words:5;opt:default;len:64;;"

    static let all: [(name: String, specdef: String)] = [
        ("client", client), ("label", label), ("branch", branch), ("change", change), ("user", user),
        ("group", group), ("depot", depot), ("stream", stream), ("job", job),
    ]
}
