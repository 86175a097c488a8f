#!/usr/bin/env python3
"""HTTP fault-injection proxy for tests (standard library only).

    python3 scripts/faultproxy.py --upstream http://127.0.0.1:PORT [--port 0]

Listens on 127.0.0.1 (--port 0 picks a free port) and prints the port as the
first line on stdout.  Forwards every request (method, path and query,
headers including Authorization and Host, body) to the upstream and relays
the answer (status, headers, body).  The Host header is passed through, so
URLs that Kinto builds from it (Next-Page, "url" in GET /v1/) point back at
the proxy.  HTTP/1.1 with keep-alive; every answer carries Content-Length.

Control endpoint (never forwarded):

  POST /__fault__   {"mode": "pass"|"malformed"|"truncate"|"status"|"delay"|"drop"
                             |"reset"|"huge"|"trickle"|"headers",
                     "status": 500, "delay": 2.0, "match": "substring" or null,
                     "count": N or null, "forward": bool, "retry_after": S,
                     "pad": BYTES, "rate": BYTES_PER_S, "max_connections": N or null,
                     "backoff": S or null, "rewrite": [["from", "to"], ...],
                     "rewrite_hex": [["66726f6d", "746f"], ...], "reset_log": bool,
                     "message": "text", "skip": N, "headers": {"Name": "value"}}
      Replaces the fault settings (fields left out take their defaults) and
      answers with the state (as GET).
        pass       forward and relay unchanged.
        malformed  forward, then answer 200 with a cut-off JSON body
                   ('{"data": [ {"id": "x",'), Content-Length matching it.
        truncate   forward, then send the headers with the full Content-Length
                   but only half of the body (nothing if the body is empty,
                   Content-Length then 100), and close the connection.
        reset      as truncate, but after the half body (and a 0.2 s pause, so
                   the client has read it) reset the connection (SO_LINGER 0,
                   then close): the client sees ECONNRESET mid-body.
        status     answer `status` with a Kinto-like JSON error body
                   {"code", "errno", "error", "message"}; not forwarded unless
                   "forward": true (then the server did apply the request).
                   "retry_after" adds a Retry-After header; "message" replaces
                   the body's message (default "Injected by faultproxy").
        delay      sleep `delay` seconds, then forward.
        drop       close the connection without answering; not forwarded
                   unless "forward": true.
        huge       forward; if the answer is a 2xx JSON listing ({"data": [...]},
                   no Content-Encoding), add to each record of it an extra field
                   "faultproxy_pad" holding a string of `pad` bytes (default
                   1000000), the rest unchanged; Content-Length fits the new body.
                   Other answers pass unchanged.
        trickle    forward, then send the whole answer (status line, headers,
                   body) at `rate` bytes per second (default 1000), in small
                   writes every 50 ms.
        headers    forward, then relay the answer with each header of
                   `headers` (an object, name -> value) set: replacing those
                   of that name (case-insensitive), else added.  Default {}.
      match: only requests whose target ("path?query") contains this
      substring get the fault; others pass.  skip: the first N requests that
      match pass too (default 0), so a fault can hit e.g. the 3rd page.
      count: after this many faulted requests the mode reverts to "pass".
      reset_log: clear log and counters.
      backoff (independent of mode and match): while set, the answer to every
      request that arrives meanwhile (relayed, injected by "status", or the
      proxy's 502) carries Kinto's "Backoff: S" header.
      rewrite (independent of mode and match, like backoff): in the body of
      every answer forwarded from the upstream (whatever the mode does with
      it afterwards: relayed, inflated by "huge", cut by "truncate" or
      "reset", trickled), replace each occurrence of the byte string `from`
      by `to`, both the UTF-8 encoding of the JSON strings given (so the JSON
      escape "\\u0000" in the control request is the byte 0, and "\\\\u0000"
      the six characters \\u0000; a lone surrogate escape gives its 3-byte
      form).  Pairs apply in order, each to the result of the previous one;
      Content-Length fits the new body.  `from` must not be empty.  Bodies
      are rewritten as received (a Content-Encoding'd body is not decoded
      first).  Control answers and the proxy's own bodies (status, malformed,
      502) are never rewritten.  Default [] (no rewriting).
      rewrite_hex: as rewrite, with `from` and `to` given as hex digits of
      the raw bytes (for bytes that are not UTF-8, e.g. ["41", "fffe"]);
      applied after the rewrite pairs.  Default [].
      max_connections: at most N client connections at once (null: no limit).
      A connection beyond N is closed at once, unanswered, and counted in
      "refused".  A client connection counts from its first request until
      either side closes it; connections whose first request is a control
      request are never counted nor refused.
  GET /__fault__    {"mode", "status", "delay", "match", "count", "forward",
                     "pad", "rate", "max_connections", "backoff", "rewrite",
                     "rewrite_hex", "message", "skip" (matching requests still
                         to let pass), "headers",
                     "requests": N (requests seen, control ones excluded),
                     "forwarded": N (requests sent to the upstream),
                     "faulted": N, "log": ["METHOD path?query", ...] (last 1000),
                     "times": [arrival of each log entry, monotonic seconds],
                     "entries": [one per log entry, in the same order:
                         {"method", "target", "time" (as in times),
                         "if_none_match": the request's If-None-Match or null,
                         "status": the status the proxy began to answer with
                         (relayed or injected; also when the body was then
                         cut), null while none (dropped, or not yet),
                         "items": how many records the relayed body's
                         {"data": [...]} listing holds; null for other bodies,
                         bodies cut short, and bodies over 1 MB (not parsed)},
                         ...],
                     "active_connections": N (client connections open now),
                     "peak_connections": N (most open at once since the last
                         reset; a refused one counts as open when it arrives),
                     "refused": N (connections closed by max_connections),
                     "rewritten": N (replacements made by rewrite and
                         rewrite_hex, summed over answers)}
  DELETE /__fault__ back to "pass" and clear the log and counters.

If the upstream cannot be reached the proxy answers 502 (Kinto-like body).
Stops on SIGTERM or SIGINT.  Only ever connects to the --upstream given,
which must be a loopback address.
"""
import argparse
import collections
import http.client
import http.server
import io
import json
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

MODES = ("pass", "malformed", "truncate", "status", "delay", "drop", "reset", "huge", "trickle",
         "headers")
DEFAULT_MESSAGE = "Injected by faultproxy"
PAD_FIELD = "faultproxy_pad"
RESET_PAUSE = 0.2      # lets the client read the half body before the reset
TRICKLE_TICK = 0.05    # seconds between two writes of a trickled answer
MALFORMED_BODY = b'{"data": [ {"id": "x",'
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
              "proxy-connection", "te", "trailer", "trailers", "transfer-encoding",
              "upgrade", "expect"}
# Kinto's errno for each status (kinto.core.errors.ERRORS)
ERRNO = {400: 107, 401: 104, 403: 121, 404: 111, 405: 115, 406: 107, 409: 122,
         410: 202, 411: 112, 412: 114, 413: 113, 415: 107, 429: 117, 500: 999,
         502: 201, 503: 201, 504: 201}
LOG_MAX = 1000
ITEMS_MAX = 1 << 20    # bodies parsed to count a listing's items in the log


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.forwarded = 0
        self.faulted = 0
        self.log = collections.deque(maxlen=LOG_MAX)
        self.times = collections.deque(maxlen=LOG_MAX)
        self.entries = collections.deque(maxlen=LOG_MAX)
        self.active = set()     # sockets of the client connections counted now
        self.peak = 0
        self.refused = 0
        self.rewritten = 0
        self.configure({})

    def configure(self, cfg):
        mode = cfg.get("mode", "pass")
        if mode not in MODES:
            raise ValueError("mode must be one of %s" % ", ".join(MODES))
        count = cfg.get("count")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise ValueError("count must be a non-negative integer or null")
        match = cfg.get("match")
        if match is not None and not isinstance(match, str):
            raise ValueError("match must be a string or null")
        status = int(cfg.get("status", 500))
        if not 100 <= status <= 599:
            raise ValueError("status must be 100..599")
        pad = cfg.get("pad", 1000000)
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise ValueError("pad must be a non-negative integer")
        rate = cfg.get("rate", 1000)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate <= 0:
            raise ValueError("rate must be a positive number")
        max_connections = cfg.get("max_connections")
        if max_connections is not None and (not isinstance(max_connections, int)
                                            or isinstance(max_connections, bool)
                                            or max_connections < 0):
            raise ValueError("max_connections must be a non-negative integer or null")
        backoff = cfg.get("backoff")
        if backoff is not None and (not isinstance(backoff, int) or isinstance(backoff, bool)
                                    or backoff < 0):
            raise ValueError("backoff must be a non-negative integer (seconds) or null")
        rewrite = self._pairs(cfg.get("rewrite", []), "rewrite",
                              lambda t: t.encode("utf-8", "surrogatepass"))
        rewrite_hex = self._pairs(cfg.get("rewrite_hex", []), "rewrite_hex", bytes.fromhex)
        message = cfg.get("message", DEFAULT_MESSAGE)
        if not isinstance(message, str):
            raise ValueError("message must be a string")
        skip = cfg.get("skip", 0)
        if not isinstance(skip, int) or isinstance(skip, bool) or skip < 0:
            raise ValueError("skip must be a non-negative integer")
        headers = cfg.get("headers", {})
        if headers is None:
            headers = {}
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k
                and not any(c in k for c in ":\r\n") and not any(c in v for c in "\r\n")
                for k, v in headers.items()):
            raise ValueError("headers must be an object of header names to string values")
        self.mode = mode
        self.status = status
        self.delay = float(cfg.get("delay", 1.0))
        self.match = match
        self.count = count
        self.forward = cfg.get("forward")
        self.retry_after = cfg.get("retry_after")
        self.pad = pad
        self.rate = rate
        self.max_connections = max_connections
        self.backoff = backoff
        self.rewrite = rewrite
        self.rewrite_hex = rewrite_hex
        self.message = message
        self.skip = skip
        self.headers = dict(headers)
        if cfg.get("reset_log"):
            self.reset_counters()
        if self.count == 0:
            self.mode = "pass"

    @staticmethod
    def _pairs(value, name, to_bytes):
        """[[from, to], ...] -> [(from, to, from_bytes, to_bytes), ...]."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("%s must be a list of [from, to] pairs" % name)
        out = []
        for pair in value:
            if (not isinstance(pair, list) or len(pair) != 2
                    or not all(isinstance(x, str) for x in pair)):
                raise ValueError("%s must be a list of [from, to] pairs of strings" % name)
            try:
                old, new = to_bytes(pair[0]), to_bytes(pair[1])
            except (ValueError, UnicodeError) as e:
                raise ValueError("%s: bad pair %r: %s" % (name, pair, e))
            if not old:
                raise ValueError("%s: `from` must not be empty" % name)
            out.append((pair[0], pair[1], old, new))
        return out

    def rewrites(self):
        """The byte pairs to apply now, in order."""
        with self.lock:
            return [(o, n) for _, _, o, n in self.rewrite + self.rewrite_hex]

    def count_rewritten(self, n):
        if n:
            with self.lock:
                self.rewritten += n

    def reset_counters(self):
        self.requests = self.forwarded = self.faulted = 0
        self.log.clear()
        self.times.clear()
        self.entries.clear()
        self.prune()
        self.peak = len(self.active)
        self.refused = 0
        self.rewritten = 0

    def snapshot(self):
        self.prune()
        return {"mode": self.mode, "status": self.status, "delay": self.delay,
                "match": self.match, "count": self.count, "forward": self.forward,
                "pad": self.pad, "rate": self.rate, "max_connections": self.max_connections,
                "backoff": self.backoff,
                "rewrite": [[f, t] for f, t, _, _ in self.rewrite],
                "rewrite_hex": [[f, t] for f, t, _, _ in self.rewrite_hex],
                "requests": self.requests, "forwarded": self.forwarded,
                "faulted": self.faulted, "log": list(self.log), "times": list(self.times),
                "active_connections": len(self.active), "peak_connections": self.peak,
                "refused": self.refused, "rewritten": self.rewritten,
                "message": self.message, "skip": self.skip, "headers": dict(self.headers),
                "entries": [dict(e) for e in self.entries]}

    # -- connection cap (call with the lock held) ---------------------------

    def prune(self):
        """Forget connections the client has closed: the handler thread may
        not have noticed yet, and a client that closes an idle connection to
        open another must not look as if it held both."""
        for sock in list(self.active):
            try:
                closed = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                closed = False
            except OSError:
                closed = True
            if closed:
                self.active.discard(sock)

    def admit(self, sock):
        """Count a new client connection; False if it must be refused."""
        with self.lock:
            self.prune()
            if self.max_connections is not None and len(self.active) >= self.max_connections:
                self.refused += 1
                self.peak = max(self.peak, len(self.active) + 1)
                return False
            self.active.add(sock)
            self.peak = max(self.peak, len(self.active))
            return True

    def leave(self, sock):
        with self.lock:
            self.active.discard(sock)

    def decide(self, method, target, if_none_match=None):
        """Record the request; return (the fault settings to apply to it or
        None, the Backoff header value or None, its log entry)."""
        with self.lock:
            self.requests += 1
            now = time.monotonic()
            self.log.append("%s %s" % (method, target))
            self.times.append(now)
            entry = {"method": method, "target": target, "time": now,
                     "if_none_match": if_none_match, "status": None, "items": None}
            self.entries.append(entry)
            backoff = None if self.backoff is None else str(self.backoff)
            if self.mode == "pass" or (self.match is not None and self.match not in target):
                return None, backoff, entry
            if self.skip > 0:
                self.skip -= 1
                return None, backoff, entry
            fault = {"mode": self.mode, "status": self.status, "delay": self.delay,
                     "forward": self.forward, "retry_after": self.retry_after,
                     "pad": self.pad, "rate": self.rate, "message": self.message,
                     "headers": dict(self.headers)}
            self.faulted += 1
            if self.count is not None:
                self.count -= 1
                if self.count <= 0:
                    self.mode = "pass"
                    self.count = None
            return fault, backoff, entry

    def answered(self, entry, status):
        with self.lock:
            if entry.get("status") is None:
                entry["status"] = status

    def relayed(self, entry, items):
        with self.lock:
            entry["items"] = items

    def count_forwarded(self):
        with self.lock:
            self.forwarded += 1


def inflate(data, headers, pad):
    """A JSON listing's body with a `pad`-byte string field added to each
    record; anything else unchanged."""
    if any(k.lower() == "content-encoding" for k, _ in headers):
        return data
    try:
        doc = json.loads(data)
    except ValueError:
        return data
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        return data
    filler = "x" * pad
    for record in doc["data"]:
        if isinstance(record, dict):
            record[PAD_FIELD] = filler
    return json.dumps(doc).encode("utf-8")


def listing_items(data, headers):
    """How many items a JSON listing body holds ({"data": [...]}); None for
    anything else, or a body too big to parse here."""
    if len(data) > ITEMS_MAX or any(k.lower() == "content-encoding" for k, _ in headers):
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):    # hostile bodies are relayed too
        return None
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return len(doc["data"])
    return None


def kinto_error(status, message):
    reason = http.client.responses.get(status, "Error")
    body = {"code": status, "errno": ERRNO.get(status, 999), "error": reason,
            "message": message}
    return json.dumps(body).encode("utf-8")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy/1"
    # set on the class by main()
    upstream_host = "127.0.0.1"
    upstream_port = 80
    upstream_prefix = ""
    state = None
    verbose = False
    extra_headers = ()   # per request: the Backoff header while set
    entry = None         # per request: its log entry (None for control requests)

    # -- connection accounting ------------------------------------------------

    def peek_request_line(self):
        """The start of the first request, left unread; None if the client
        closed without sending one."""
        deadline = time.monotonic() + 10
        while True:
            try:
                data = self.connection.recv(256, socket.MSG_PEEK)
            except OSError:
                return None
            if not data:
                return None
            if b"\n" in data or len(data) >= 256 or time.monotonic() > deadline:
                return data
            time.sleep(0.002)

    def handle(self):
        line = self.peek_request_line()
        if line is None:
            return
        parts = line.split(b" ", 2)
        target = parts[1].decode("latin-1") if len(parts) > 1 else ""
        if urllib.parse.urlsplit(target).path == "/__fault__":
            return super().handle()
        if not self.state.admit(self.connection):
            return   # closed unanswered by the server's shutdown_request
        try:
            super().handle()
        finally:
            self.state.leave(self.connection)

    def send_response(self, code, message=None):
        if self.entry is not None:
            self.state.answered(self.entry, code)
        super().send_response(code, message)

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("faultproxy: %s\n" % (fmt % args))

    # -- request plumbing --------------------------------------------------

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the blank line
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_simple(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in list(extra) + list(self.extra_headers):
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def forward(self, body):
        """Send the request upstream; return (status, reason, headers, body)."""
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            conn.putrequest(self.command, self.upstream_prefix + self.path,
                            skip_host=True, skip_accept_encoding=True)
            has_host = False
            for k, v in self.headers.items():
                lk = k.lower()
                if lk in HOP_BY_HOP or lk == "content-length":
                    continue
                if lk == "host":
                    has_host = True
                conn.putheader(k, v)
            if not has_host:
                conn.putheader("Host", "%s:%d" % (self.upstream_host, self.upstream_port))
            if body or self.command in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(len(body)))
            conn.putheader("Connection", "close")
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            data = resp.read()
            self.state.count_forwarded()
            return resp.status, resp.reason, resp.getheaders(), self.rewrite(data)
        finally:
            conn.close()

    def rewrite(self, data):
        """The body with the rewrite and rewrite_hex pairs applied."""
        made = 0
        for old, new in self.state.rewrites():
            n = data.count(old)
            if n:
                data = data.replace(old, new)
                made += n
        self.state.count_rewritten(made)
        return data

    def relay(self, status, reason, headers, data):
        self.send_response(status, reason)
        no_body = self.command == "HEAD" or status in (204, 304) or 100 <= status < 200
        for k, v in headers:
            lk = k.lower()
            if lk in HOP_BY_HOP or lk in ("date", "server"):
                continue
            if lk == "content-length" and not no_body:
                continue
            self.send_header(k, v)
        if not no_body:
            self.send_header("Content-Length", str(len(data)))
        for k, v in self.extra_headers:
            self.send_header(k, v)
        self.end_headers()
        if not no_body:
            self.wfile.write(data)
        if self.entry is not None and not no_body:
            self.state.relayed(self.entry, listing_items(data, headers))

    def send_part(self, status, reason, headers, data):
        """Headers with the full Content-Length (100 if the body is empty),
        then only half of the body."""
        self.send_response(status, reason)
        for k, v in headers:
            lk = k.lower()
            if lk in HOP_BY_HOP or lk in ("content-length", "date", "server"):
                continue
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if data else 100))
        for k, v in self.extra_headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def reset_connection(self):
        """Abortive close: with SO_LINGER 0, close() sends RST, not FIN."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.rfile.close()   # its reference would delay the real close
            self.connection.close()
        except OSError:
            pass

    def trickle(self, status, reason, headers, data, rate):
        """Relay the answer `rate` bytes per second."""
        out, self.wfile = self.wfile, io.BytesIO()
        try:
            self.relay(status, reason, headers, data)
            raw = self.wfile.getvalue()
        finally:
            self.wfile = out
        step = max(1, int(rate * TRICKLE_TICK))
        for i in range(0, len(raw), step):
            self.wfile.write(raw[i:i + step])
            time.sleep(len(raw[i:i + step]) / rate)

    # -- control endpoint -------------------------------------------------

    def control(self, body):
        st = self.state
        if self.command == "GET":
            with st.lock:
                snap = st.snapshot()
            return self.send_simple(200, json.dumps(snap).encode())
        if self.command == "DELETE":
            with st.lock:
                st.configure({"reset_log": True})
                snap = st.snapshot()
            return self.send_simple(200, json.dumps(snap).encode())
        if self.command == "POST":
            try:
                cfg = json.loads(body or b"{}")
                if not isinstance(cfg, dict):
                    raise ValueError("body must be a JSON object")
                with st.lock:
                    st.configure(cfg)
                    snap = st.snapshot()
            except (ValueError, TypeError) as e:
                return self.send_simple(400, kinto_error(400, str(e)))
            if self.verbose:
                sys.stderr.write("faultproxy: fault set to %r\n" % (cfg,))
            return self.send_simple(200, json.dumps(snap).encode())
        return self.send_simple(405, kinto_error(405, "GET, POST or DELETE"))

    # -- main entry ---------------------------------------------------------

    def handle_any(self):
        self.extra_headers = ()
        self.entry = None
        body = self.read_body()
        if urllib.parse.urlsplit(self.path).path == "/__fault__":
            return self.control(body)

        fault, backoff, self.entry = self.state.decide(self.command, self.path,
                                                       self.headers.get("If-None-Match"))
        self.extra_headers = [("Backoff", backoff)] if backoff is not None else []
        mode = fault["mode"] if fault else "pass"
        try:
            if mode == "drop":
                if fault["forward"]:
                    self.forward(body)
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if mode == "status":
                if fault["forward"]:
                    self.forward(body)
                status = fault["status"]
                extra = []
                if fault["retry_after"] is not None:
                    extra.append(("Retry-After", str(fault["retry_after"])))
                return self.send_simple(status, kinto_error(status, fault["message"]),
                                        extra=extra)
            if mode == "delay":
                time.sleep(max(0.0, fault["delay"]))

            status, reason, headers, data = self.forward(body)

            if mode == "malformed":
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
                headers.append(("Content-Type", "application/json"))
                return self.relay(200, "OK", headers, MALFORMED_BODY)
            if mode == "truncate":
                self.send_part(status, reason, headers, data)
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if mode == "reset":
                self.send_part(status, reason, headers, data)
                time.sleep(RESET_PAUSE)
                return self.reset_connection()
            if mode == "huge" and 200 <= status < 300:
                data = inflate(data, headers, fault["pad"])
            if mode == "trickle":
                return self.trickle(status, reason, headers, data, fault["rate"])
            if mode == "headers":
                names = {k.lower() for k in fault["headers"]}
                headers = [(k, v) for k, v in headers if k.lower() not in names]
                headers += list(fault["headers"].items())
            return self.relay(status, reason, headers, data)
        except (ConnectionError, socket.timeout, OSError, http.client.HTTPException) as e:
            if isinstance(e, (BrokenPipeError, ConnectionResetError)) and mode != "pass":
                return
            try:
                self.send_simple(502, kinto_error(502, "faultproxy: upstream error: %s" % e))
            except OSError:
                self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description="HTTP fault-injection proxy for tests.")
    ap.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8888")
    ap.add_argument("--port", type=int, default=0, help="listen port (0: pick a free one)")
    ap.add_argument("--verbose", action="store_true", help="log requests to stderr")
    a = ap.parse_args()

    u = urllib.parse.urlsplit(a.upstream)
    if u.scheme != "http" or u.hostname not in ("127.0.0.1", "localhost", "::1"):
        ap.error("--upstream must be http://127.0.0.1:PORT (loopback only)")
    Handler.upstream_host = u.hostname
    Handler.upstream_port = u.port or 80
    # A path in --upstream (e.g. http://127.0.0.1:8888/v1) is NOT prepended:
    # the proxy is transparent, clients use the same paths as upstream.
    Handler.upstream_prefix = ""
    Handler.state = State()
    Handler.verbose = a.verbose

    srv = Server(("127.0.0.1", a.port), Handler)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
