"""A second process on a store, driven by test_processes.py: one JSON command a
line on stdin, one JSON answer a line on stdout.

    {"op": "open", "url": U, "bucket": B, "store": S, "exclusive": false}   (and fetches "notes")
    {"op": "set", "entity": E, "id": I, "values": {K: V, ...}}     (an edit, unsaved)
    {"op": "insert", "entity": E, "id": I, "values": {...}}
    {"op": "save"}            -> {"saved": n, "conflicts": n} or {"error": name}
    {"op": "fetch", "entity": E}   -> {"count": records} (from the server)
    {"op": "changes"}         -> {"count": the context's unsaved changes}
    {"op": "cached", "entity": E, "key": K}   -> {"values": {id: value}} (the store's, cache-only)
    {"op": "close"}

Every answer is {"ok": true, ...} or {"error": "BusyError", "message": ...}.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tether  # noqa: E402


def run(command, state):
    op = command["op"]
    ctx = state.get("ctx")
    if op == "open":
        state["ctx"] = tether.Context(command["url"], command["bucket"], command["store"], username="test",
                                      password="test", exclusive=command.get("exclusive", False), sync_interval=0)
        state["ctx"].query(command.get("entity", "notes")).all()
        return {"pid": os.getpid()}
    if op == "set":
        obj = ctx.object(command["entity"], command["id"])
        for key, value in command["values"].items():
            obj[key] = value
        return {}
    if op == "insert":
        ctx.insert(command["entity"], command["values"], id=command["id"])
        return {}
    if op == "save":
        try:
            report = ctx.save()
            return {"saved": report.saved, "conflicts": len(report.conflicts)}
        except tether.ConflictError as error:
            return {"saved": error.saved, "conflicts": len(error.conflicts)}
    if op == "fetch":
        return {"count": len(ctx.query(command["entity"], policy="server_only").all())}
    if op == "changes":
        return {"count": ctx.change_count}
    if op == "cached":
        rows = ctx.query(command["entity"], policy="cache_only").all()
        return {"values": {o.id: o.peek(command["key"]) for o in rows}}
    if op == "close":
        ctx.close()
        return {}
    raise ValueError("unknown op %r" % op)


def main():
    state = {}
    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = dict(run(command, state), ok=True)
        except tether.TetherError as error:
            answer = {"error": type(error).__name__, "message": error.message}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
