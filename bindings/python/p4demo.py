#!/usr/bin/env python3
"""Tether over a Perforce-style port: the Kinto demo's tour, with entities
made from Perforce spec definitions and records in Perforce's tagged output.

    python3 bindings/python/p4demo.py DATA STORE [--offline]

DATA is a folder like bindings/python/examples/perforce (each spec type's
`specdef` string and its records as `p4 -ztag -Mj` lines; the demo edits a
record there, so give it a copy), STORE the SQLite file to cache into. With
--offline the port answers nothing, as a server that is down: the context
opens from its store.
"""

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tether  # noqa: E402
from tether import perforce  # noqa: E402
from demo import section  # noqa: E402  (the Kinto demo's, for the same look)


class TalkingPort(perforce.Port):
    """The port, saying what the library asks of it; down when offline."""

    def __init__(self, source, offline):
        super().__init__(source, identity="perforce-style port (demo data)")
        self.offline = offline

    def server_info(self):
        if self.offline:
            raise tether.NetworkError("the port is down (--offline)")
        return super().server_info()

    def page(self, request):
        print("      [port] listing %s" % request.entity)
        return super().page(request)

    def records(self, entity, ids, cursor):
        print("      [port] reading %s %s" % (entity, ", ".join(ids)))
        return super().records(entity, ids, cursor)


def edit_change(data, number, description):
    """Another user edits change `number`'s description, on the "server"."""
    path = os.path.join(data, "change.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            record = json.loads(line)
            if record.get("Change") == str(number):
                record["Description"] = description
            f.write(json.dumps(record) + "\n")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    data, store = sys.argv[1], sys.argv[2]
    offline = "--offline" in sys.argv[3:]
    port = TalkingPort(perforce.FileSource(data), offline)
    with tether.Context.with_connection(port, store) as ctx:
        section(1, "Connected; the model built from Perforce's spec definitions")
        print("  online=%s" % ctx.online)
        for entity in ctx.entities:
            codes = ", ".join("%s %d" % (a.name, a.code) for a in entity.attributes[:6])
            print("  %-7s %s ..." % (entity.name, codes))
        if offline:
            section(2, "Offline: the port is down, the store is not")
            change = ctx.object("change", "1042")
            print("  change 1042: client %s, user %s (peek by code 204: %s)"
                  % (change.peek("Client"), change.peek("User"), change.peek(204)))
            final = ctx.query("change", policy="cache_only", sort="-Change").all()
            print("  %d changes in the store, newest %s" % (len(final), final[0].peek("Change")))
            return 0

        section(2, "A query answers twice: cache, then the port")
        final = ctx.query("change", sort="Change",
                          on_cached=lambda cached: print("  %d changes cached" % len(cached))).all()
        print("  %d changes from the port" % len(final))
        clients = ctx.query("client", sort="Client").all()
        alice = clients[0]
        print("  %s: owner %s (code 304), root %s, view %s" % (alice.peek("Client"), alice.peek(304),
                                                             alice.peek("Root"), alice.peek("View")))

        section(3, "peek never asks the port; get asks, and observers hear the change")
        change = ctx.object("change", "1042")
        print("  peek: change 1042 client = %r" % change.peek("Client"))
        heard = threading.Event()
        change.observe("Description", lambda obj, key, error: heard.set() if error is None else None)
        edit_change(data, 1042, "Edited by another user.\n")
        print("  get:  change 1042 client = %r  (cached now; a refresh goes out)" % change.Client)
        print("  get:  change 1042 description = %r" % change.Description)
        print("  observer heard the new description: %s" % heard.wait(5))
        print("  peek: change 1042 description = %r" % change.peek("Description"))

        section(4, "A fetch cancelled in flight ends in one cancelled callback")
        finals = []

        def on_phase(phase, error, answer):
            if phase == "final":
                finals.append(type(error).__name__ if error else "OK")
        task = ctx.query("job", policy="server_only").start(on_phase)
        task.cancel()
        print("  the task's exception: %r" % (task.exception(5),))
        print("  final callbacks: %s" % finals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
