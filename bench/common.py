"""Shared pieces of the benchmark: configuration, deterministic data, seeding
through Kinto's batch endpoint (seed_pg.py seeds PostgreSQL by SQL), the curl
and kinto-http peers, and reading the Kinto request log.  Standard library
only (kinto-http is imported lazily).
"""
import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BUCKET = "bench"
COLLECTION = "items"
USER, PASSWORD = "bench", "bench"
AUTH = "%s:%s" % (USER, PASSWORD)
BATCH = 25   # kinto.batch_max_requests in scripts/kinto-start


def setup_paths():
    """TETHER_LIBRARY defaults to build/libtether.so; the binding is imported
    from bindings/python. Subprocesses inherit both through the environment."""
    if not os.environ.get("TETHER_LIBRARY"):
        os.environ["TETHER_LIBRARY"] = os.path.join(ROOT, "build", "libtether.so")
    binding = os.path.join(ROOT, "bindings", "python")
    if binding not in sys.path:
        sys.path.insert(0, binding)
    pp = os.environ.get("PYTHONPATH", "")
    if binding not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = binding + (os.pathsep + pp if pp else "")


def server_url():
    url = os.environ.get("TETHER_TEST_URL")
    if not url:
        raise SystemExit("bench: TETHER_TEST_URL is not set; run via "
                         "`scripts/with-kinto .venv/bin/python bench/run.py` (or `make bench`)")
    return url.rstrip("/")


def records_route():
    return "/buckets/%s/collections/%s/records" % (BUCKET, COLLECTION)


# ------------------------------------------------------------------ data

# Eight fields: four strings, three integers, a boolean, an array.
SCHEMA = {
    "type": "object",
    "title": "Item",
    "description": "A benchmark record.",
    "properties": {
        "Name": {"type": "string", "title": "Name", "x-tether-code": 501},
        "Owner": {"type": "string", "title": "Owner", "x-tether-code": 502},
        "Description": {"type": "string", "title": "Description", "x-tether-code": 503},
        "Status": {"type": "string", "title": "Status", "x-tether-code": 504,
                   "enum": ["open", "closed", "review"]},
        "Count": {"type": "integer", "title": "Count", "x-tether-code": 505},
        "Size": {"type": "integer", "title": "Size", "x-tether-code": 506},
        "Created": {"type": "integer", "title": "Created", "x-tether-code": 507},
        "Active": {"type": "boolean", "title": "Active", "x-tether-code": 508},
        "Tags": {"type": "array", "title": "Tags", "items": {"type": "string"},
                 "x-tether-code": 509},
    },
    "required": ["Name", "Owner", "Count"],
}
FIELDS = ["Name", "Owner", "Description", "Status", "Count", "Size", "Created", "Active", "Tags"]
SCALAR_FIELDS = ["Name", "Owner", "Status", "Count", "Size", "Created", "Active"]

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
         "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "quentin", "rupert"]
WORDS = ["parser", "cache", "login", "build", "docs", "sync", "index", "report",
         "upload", "search", "config", "render"]
STATUSES = ["open", "closed", "review"]
T0 = 1700000000


# BENCH_IDS=uuid gives record i a UUID-shaped id, as Kinto makes them (36
# characters, in no order related to i), instead of "r%05d" (6 characters, in
# i's order): what a results handle or the store keeps per id shows at its
# real size. benchutil.h's bench_record_id makes the same ids in C.
ID_SHAPE = os.environ.get("BENCH_IDS") or "short"
if ID_SHAPE not in ("short", "uuid"):
    raise SystemExit("BENCH_IDS must be short or uuid, not %r" % ID_SHAPE)
_M64 = (1 << 64) - 1


def _splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def record_id(i):
    if ID_SHAPE == "short":
        return "r%05d" % i
    hi = (_splitmix64(2 * i) & ~0xF000) | 0x4000                     # version 4
    lo = (_splitmix64(2 * i + 1) & 0x3FFFFFFFFFFFFFFF) | 0x8000000000000000  # variant 10
    return "%08x-%04x-%04x-%04x-%012x" % (hi >> 32, (hi >> 16) & 0xFFFF, hi & 0xFFFF,
                                          lo >> 48, lo & 0xFFFFFFFFFFFF)


def make_record(i):
    """Record i: a pure function of i (no randomness)."""
    ntags = 1 + i % 4
    return {
        "Name": "item-%05d" % i,
        "Owner": NAMES[i % len(NAMES)],
        "Description": "Item %d: %s the %s of %s" % (
            i, WORDS[i % 12], WORDS[(i * 5 + 3) % 12], NAMES[(i * 7) % len(NAMES)]),
        "Status": STATUSES[i % 3],
        "Count": (i * 7) % 1000,
        "Size": (i * 7919) % 100000,
        "Created": T0 + i * 3600,
        "Active": i % 3 != 0,
        "Tags": [WORDS[(i + k * 5) % 12] for k in range(ntags)],
    }


# ------------------------------------------------------------------ HTTP (urllib)

def _auth_header():
    return "Basic " + base64.b64encode(AUTH.encode()).decode()


def http(method, url, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", _auth_header())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s %s -> %d %s" % (method, url, e.code, e.read()[:300])) from None


def seed(url, n):
    """Creates bucket `bench` and collection `items` (with SCHEMA) and PUTs
    records 0..n-1 through POST /batch in chunks of BATCH."""
    http("PUT", url + "/buckets/" + BUCKET, {"data": {}})
    http("PUT", "%s/buckets/%s/collections/%s" % (url, BUCKET, COLLECTION),
         {"data": {"schema": SCHEMA}})
    for start in range(0, n, BATCH):
        reqs = [{"method": "PUT", "path": "%s/%s" % (records_route(), record_id(i)),
                 "body": {"data": make_record(i)}}
                for i in range(start, min(n, start + BATCH))]
        _, answer = http("POST", url + "/batch", {"requests": reqs}, timeout=60)
        bad = [r for r in answer["responses"] if r["status"] >= 400]
        if bad:
            raise RuntimeError("seeding: batch sub-request failed: %s" % json.dumps(bad[0])[:300])


# ------------------------------------------------------------------ peers

def curl_listing(url, parse=False):
    """GETs `url` with the curl tool, one process per page, following the
    Next-Page header until there is none. Returns (pages, records or None):
    the bodies are parsed only with parse=True (outside timed runs)."""
    pages = 0
    records = [] if parse else None
    while url:
        proc = subprocess.run(["curl", "-s", "-S", "--fail", "--max-time", "30",
                               "-u", AUTH, "-D", "-", url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=40)
        if proc.returncode != 0:
            raise RuntimeError("curl %s failed (%d): %s" % (url, proc.returncode,
                                                            proc.stderr.decode().strip()))
        head, _, body = proc.stdout.partition(b"\r\n\r\n")
        nxt = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"next-page":
                nxt = value.strip().decode()
        pages += 1
        if parse:
            records.extend(json.loads(body)["data"])
        url = nxt
    return pages, records


def since_before_ranges(url, first, last, parts):
    """`parts` listing URLs that split last_modified first..last (both
    included) into equal spans: range k is _since=e_k&_before=e_(k+1)+1, i.e.
    e_k < last_modified <= e_(k+1), from e_0 = first - 1 to e_parts = last."""
    edges = [first - 1 + (last - first + 1) * k // parts for k in range(parts + 1)]
    sep = "&" if "?" in url else "?"
    return ["%s%s_since=%d&_before=%d" % (url, sep, edges[k], edges[k + 1] + 1) for k in range(parts)]


def curl_parallel(urls, parse=False):
    """curl_listing of each URL at the same time (one thread each, so one
    curl process per URL runs at a time). Returns (pages, records or None)."""
    import threading
    results = [None] * len(urls)

    def one(k):
        try:
            results[k] = curl_listing(urls[k], parse=parse)
        except Exception as e:  # noqa: BLE001 - raised below, in the caller's thread
            results[k] = e

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, Exception):
            raise r
    pages = sum(r[0] for r in results)
    return pages, ([rec for r in results for rec in r[1]] if parse else None)


def kinto_http_client(url):
    import kinto_http
    return kinto_http.Client(server_url=url, auth=(USER, PASSWORD))


def kinto_http_listing(client):
    return client.get_records(bucket=BUCKET, collection=COLLECTION)


# ------------------------------------------------------------------ Kinto log

def kinto_log_path():
    d = os.environ.get("TETHER_KINTO_DIR")
    if not d:
        return None
    p = os.path.join(d, "kinto.log")
    return p if os.path.exists(p) else None


def log_offset(path):
    return os.path.getsize(path)


def requests_since(path, offset):
    """The request.summary entries of the Kinto log written after `offset`:
    a list of (method, path, querystring dict)."""
    return [(method, path, query) for method, path, query, _ in request_codes_since(path, offset)]


def request_codes_since(path, offset):
    """The request.summary entries of the Kinto log written after `offset`,
    with their status: a list of (method, path, querystring dict, code)."""
    return [entry[:4] for entry in request_timings_since(path, offset)]


def request_timings_since(path, offset):
    """The request.summary entries of the Kinto log written after `offset`,
    with their status and Kinto's own milliseconds: a list of (method, path,
    querystring dict, code, t)."""
    out = []
    with open(path, "rb") as f:
        f.seek(offset)
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("Type") == "request.summary":
                fields = entry.get("Fields", {})
                out.append((fields.get("method"), fields.get("path"), fields.get("querystring") or {},
                            fields.get("code"), fields.get("t")))
    return out


def subrequests_since(path, offset):
    """How many subrequest.summary entries (the requests inside POST /batch,
    logged without their query string) the Kinto log got after `offset`."""
    n = 0
    with open(path, "rb") as f:
        f.seek(offset)
        for line in f:
            if b'"subrequest.summary"' in line:
                n += 1
    return n
