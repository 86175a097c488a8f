"""The package's shape: its modules import one way (no cycle, counting the
imports made only for a type checker and those inside functions), none is
over 600 lines, and only _lib.py declares C functions.

Read from the source with ast: nothing is imported, so this runs without
the library or a server."""

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tether")
MAX_LINES = 600


def modules():
    return sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py"))


def source(module):
    with open(os.path.join(PACKAGE, module + ".py"), encoding="utf-8") as f:
        return f.read()


def imports(module):
    """The package modules `module` imports, wherever the import is (top
    level, under `if TYPE_CHECKING:`, inside a function): {name: line}."""
    found = {}
    known = set(modules())
    for node in ast.walk(ast.parse(source(module))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:   # from .x import y
                targets = [node.module.split(".")[0]]
            else:             # from . import x, y
                targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether"):
            parts = node.module.split(".")
            targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[1] for a in node.names if a.name.startswith("tether.")]
        else:
            continue
        for t in targets:
            if t in known and t != module:
                found.setdefault(t, node.lineno)
    return found


def function_level_imports(module):
    """Imports of the package inside a function: (function, line)."""
    found = []
    for fn in ast.walk(ast.parse(source(module))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("tether")):
                    found.append((fn.name, node.lineno))
    return found


def cycle(graph):
    """A cycle of `graph` (module -> modules it imports) as a list, or None."""
    state = {}   # module -> "visiting" | "done"
    path = []

    def visit(m):
        state[m] = "visiting"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "visiting":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_modules_import_one_way():
    graph = {m: imports(m) for m in modules()}
    found = cycle(graph)
    assert found is None, "the package's imports go round: " + " -> ".join(
        "%s (line %d)" % (a, graph[a][b]) for a, b in zip(found, found[1:])) + " -> " + found[-1]


def test_the_cycle_check_sees_a_cycle():
    # The check itself: a type-only import back up is a cycle too.
    assert cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) is None


def test_no_import_inside_a_function():
    found = {m: function_level_imports(m) for m in modules()}
    assert not any(found.values()), "imports of the package inside functions: %r" % {
        m: f for m, f in found.items() if f}


@pytest.mark.parametrize("module", modules())
def test_no_module_is_over_600_lines(module):
    lines = source(module).count("\n")
    assert lines <= MAX_LINES, "tether/%s.py has %d lines (at most %d)" % (module, lines, MAX_LINES)


def test_errors_imports_only_the_bottom():
    # errors.py is under everything that raises: it may not reach up.
    assert set(imports("errors")) <= {"_types"}, imports("errors")
    assert set(imports("_lib")) <= {"_types", "errors"}, imports("_lib")


@pytest.mark.parametrize("module", [m for m in modules() if m != "_lib"])
def test_only_lib_declares_c_functions(module):
    tree = ast.parse(source(module))
    named = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
            {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not named & {"argtypes", "restype", "errcheck", "CFUNCTYPE", "CDLL"}, \
        "tether/%s.py declares C functions: %s" % (module, sorted(named & {"argtypes", "restype", "errcheck", "CFUNCTYPE", "CDLL"}))
