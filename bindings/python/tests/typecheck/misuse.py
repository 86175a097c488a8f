"""Mistakes the hints must catch: each line marked `# E: code` must fail to
type-check with that mypy error code, and nothing else here may.
check_misuse.py runs mypy on this file and compares (scripts/run-tests types).

Nothing here runs; each of these would fail at run time (a ValueError or
TypeError from the binding, or an AttributeError in the program).
"""

from __future__ import annotations

import tether


class Job:
    Severity: float


def misuse(ctx: tether.Context, obj: tether.Object, conflict: tether.Conflict) -> None:
    # A policy, result type, merge policy or delivery that does not exist.
    ctx.query("changes", policy="cache_first")  # E: arg-type
    ctx.query("changes", result="rows")  # E: call-arg
    ctx.save(merge="mine")  # E: arg-type
    tether.Context("http://x/v1", "b", "s.db", delivery="threads")  # E: arg-type
    tether.Spec("notes", "id", "rev", operations=("read",))  # E: arg-type

    # Keys are str or int; ids are str; values are tether.Value.
    obj.peek(3.5)  # E: call-overload
    ctx.object("clients", 42)  # E: arg-type
    obj.set("Title", b"bytes")  # E: arg-type
    obj.Title = {1, 2}  # E: assignment

    # Declared keys (Object.typed): a misspelled one, a value of another type.
    job = obj.typed(Job)
    job.Sevrity = 4.0  # E: attr-defined
    job.Severity = "high"  # E: assignment
    ctx.query("changes", where="Change == $1", args=[object()])  # E: list-item

    # What a query answers follows the method asked.
    n = ctx.query("changes").count()
    n.append(1)  # E: attr-defined
    ids = ctx.query("changes").ids()
    ids[0].peek("Owner")  # E: attr-defined
    ctx.query("changes").cout()  # E: attr-defined
    ctx.fetch_wait("changes")  # E: attr-defined
    ctx.query("changes", live=True)  # E: call-arg
    ctx.query("changes", limt=10)  # E: call-arg
    tether.Query("changes", policy="cache")  # E: arg-type
    tether.Query("changes").limit("10")  # E: arg-type
    ctx.query("changes").count() + ctx.query("changes").ids()  # E: operator

    # A value is a union: narrow it before using it as one type.
    owner: str = obj.peek("Owner")  # E: assignment
    # The server's side of a conflict is None when it deleted the record.
    conflict.server["Title"]  # E: index
    print(owner)

    # An observer is called with (obj, key, error).
    def changed(obj: tether.Object) -> None:
        print(obj.id)

    obj.observe("Owner", changed)  # E: arg-type

    # Callbacks get an exception or None, never an integer status.
    def on_phase(phase: str, status: int, message: str, answer: object) -> None:
        print(phase, status, message, answer)

    def on_change(obj: tether.Object, key: str, status: int) -> None:
        print(obj.id, key, status)

    def on_save(status: int, message: str, report: tether.SaveReport) -> None:
        print(status, message, report)

    ctx.query("changes").start(on_phase)  # E: arg-type
    obj.observe("Owner", on_change)  # E: arg-type
    ctx.start_save(callback=on_save)  # E: arg-type

    # A task is a concurrent.futures.Future: done() and result() are methods,
    # and wait() (a bool) is gone (concurrent.futures.wait, or result(timeout)).
    task = ctx.query("changes").start()
    if task.done:  # E: truthy-function
        print(task.result + 1)  # E: operator
    task.wait(5)  # E: attr-defined
