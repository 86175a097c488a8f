#!/usr/bin/env python3
"""Tether from Python: a tour against the seeded demo bucket.

    python3 bindings/python/demo.py URL BUCKET STORE [--offline]

URL is the Kinto root (http://127.0.0.1:PORT/v1), BUCKET the bucket seeded by
scripts/seed-demo ("demo"), STORE the SQLite file to cache into. Run it once
with the server up, then again with --offline after stopping the server: the
second run works from the store alone.

The context runs in POLL delivery under a tether.AsyncContext, attached to
an asyncio loop: every callback (a query's cached answer, observers) runs on
the loop's thread, woken by the context's descriptor (loop.add_reader).
"""

import argparse
import asyncio
import base64
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tether  # noqa: E402

RULE = "-" * 72


def section(n, title):
    print()
    print("%d. %s" % (n, title))
    print(RULE)


def show_model(ctx):
    print("context on %s, bucket %r: online=%s (libtether %s)"
          % (ctx.url, ctx.bucket, ctx.online, tether.library_version()))
    for ent in ctx.entities:
        print("  %s  (%s; %s)" % (ent.name, ent.route, ", ".join(sorted(ent.operations))))
        for a in ent.attributes:
            flags = [f for f, on in (("id", a.is_id), ("version", a.is_version),
                                     ("required", a.required)) if on]
            print("      %-14s %-8s code %-5d %s" % (a.name, a.type, a.code, " ".join(flags)))


def patch_record(url, bucket, coll, rid, data, auth):
    token = base64.b64encode(auth.encode()).decode("ascii")
    req = urllib.request.Request(
        "%s/buckets/%s/collections/%s/records/%s" % (url.rstrip("/"), bucket, coll, rid),
        data=json.dumps({"data": data}).encode(), method="PATCH",
        headers={"Content-Type": "application/json", "Authorization": "Basic " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["data"]


def row(c):
    return "%-16s owner %-8s host %-12s root %s" % (
        c.peek("Client"), c.peek("Owner"), c.peek("Host"), c.peek("Root"))


async def fetch_twice(actx):
    def on_cached(objects):
        print("  [cached] %d clients" % len(objects))
    final = await actx.query("clients", sort="Client", on_cached=on_cached).all()
    print("  [final] %d clients (offline=%s)" % (len(final), final.offline))
    for c in final[:4]:
        print("      " + row(c))
    print("      ... (%d in all)" % len(final))
    print("  again, now that the store holds them:")
    final = await actx.query("clients", sort="Client", on_cached=on_cached).all()
    print("  [final] %d clients (offline=%s)" % (len(final), final.offline))


async def peek_get_observe(ctx, args):
    loop = asyncio.get_running_loop()
    c = ctx.object("clients", "alice-ws")
    print("  peek  Description = %r   (from the cache, no network)" % c.peek("Description"))
    changed = loop.create_future()

    def on_change(obj, key, error):
        if error is None:
            print("  observer: %s of %s changed -> %r" % (key, obj.id, obj.peek("Description")))
            if key == "Description" and not changed.done():
                changed.set_result(obj.peek("Description"))
        else:
            print("  observer on %s: final callback (%s)" % (key, type(error).__name__))

    ob1 = c.observe("Description", on_change)
    ob2 = c.observe("DescriptionPeek", on_change)
    new = "Edited by the Python demo at %s.\n" % time.strftime("%H:%M:%S")
    patch_record(args.url, args.bucket, "clients", "alice-ws", {"Description": new}, args.auth)
    print("  (the demo changed alice-ws on the server directly)")
    print("  peek  Description = %r   (still the cached value)" % c.peek("Description"))
    print("  get   Description = %r   (cached value at once; refresh started)"
          % c.Description)
    value = await asyncio.wait_for(changed, 10)
    await asyncio.sleep(0.05)           # let the peek-form observer print too
    print("  peek  Description = %r   (the refresh landed)" % value)
    ob1.remove()
    ob2.remove()
    await asyncio.sleep(0.05)


async def cancel_in_flight(ctx):
    calls = []

    def on_phase(phase, error, objects):
        calls.append(phase)
        print("  [%s] %s, %d objects" % (phase, repr(error) if error else "OK", len(objects)))

    task = ctx.query("changes", policy="server_only").start(on_phase)
    print("  started a server-only fetch of changes; cancel() -> %s" % task.cancel())
    try:
        await asyncio.wait_for(task, 10)        # a Task is awaitable (and a Future)
        print("  the fetch finished before the cancel landed")
    except tether.TaskCancelledError as e:
        print("  await task raised TaskCancelledError (status %d)" % e.status)
    print("  callbacks received: %d (%s); cancel() again -> %s"
          % (len(calls), ", ".join(calls), task.cancel()))


async def offline(actx):
    ctx = actx.sync
    print("  online = %s (opened from the store)" % ctx.online)
    c = ctx.object("clients", "alice-ws")
    print("  peek alice-ws Owner=%r Root=%r" % (c.peek("Owner"), c.peek("Root")))
    print("  peek alice-ws Description=%r (as the last online run left it)"
          % c.peek("Description"))
    final = await actx.query("clients", policy="cache_only", sort="-Update", limit=3).all()
    print("  cache_only query: %s" % ", ".join(o.id for o in final))
    final = await actx.query("clients").all()
    if final.offline:
        print("  cache_then_server: the cache's %d clients, offline=True (the server is gone)" % len(final))
    else:
        print("  (the server answered: %d clients; stop it to see the offline case)" % len(final))
    try:
        await actx.query("clients", policy="server_only").all()
    except tether.NetworkError as e:
        print("  server_only raised %s: %s" % (type(e).__name__, e.message))


async def main(args):
    ctx = tether.Context(args.url, args.bucket, args.store, delivery="poll",
                         username=args.user, password=args.password, timeout_ms=5000)
    with ctx:
        actx = tether.AsyncContext(ctx)   # callbacks now run on this loop (add_reader on ctx.fileno())
        section(1, "Connected; the model built from the server's schemas")
        show_model(ctx)
        if args.offline:
            section(5, "Offline: the server is gone, the store is not")
            await offline(actx)
        else:
            section(2, "A query answers twice: cache, then server")
            await fetch_twice(actx)
            section(3, "peek never touches the network; get refreshes and tells observers")
            await peek_get_observe(ctx, args)
            section(4, "A fetch cancelled in flight ends in one cancelled callback")
            await cancel_in_flight(ctx)
        ctx.detach()
    print()
    print("closed.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("bucket")
    ap.add_argument("store")
    ap.add_argument("--offline", action="store_true",
                    help="the server is stopped: show what works from the store")
    ap.add_argument("--user", default="demo")
    ap.add_argument("--password", default="demo")
    a = ap.parse_args()
    a.auth = "%s:%s" % (a.user, a.password)
    try:
        asyncio.run(main(a))
    except tether.TetherError as e:
        print("demo: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
