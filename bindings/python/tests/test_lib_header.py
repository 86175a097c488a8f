"""tether/_lib.py declares what include/tether.h declares (as
bindings/luajit/tests/test_cdef.lua checks the LuaJIT cdef): every function
by name, return type and argument types; every struct's fields, in order,
with their types; every callback type; the option versions and the enum and
#define constants _lib copies. Read from the header's text, so a header
change that _lib misses fails here, not as a silently wrong call."""

import ctypes
import os
import re

import pytest

from tether import _lib

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "include", "tether.h")


def header_text():
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return text


def declarations(text):
    """The top-level declarations (split at ';' outside braces), whitespace
    collapsed, preprocessor lines and extern "C" out."""
    text = re.sub(r"#ifdef __cplusplus.*?#endif", " ", text, flags=re.S)
    text = re.sub(r"(?m)^[ \t]*#[^\n]*", " ", text)
    text = text.replace("TETHER_API", " ")
    found, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ";" and depth == 0:
            d = " ".join(text[start:i].split())
            if d:
                found.append(d)
            start = i + 1
    return found


DECLS = declarations(header_text())
ENUMS = {m.group(2) for d in DECLS for m in [re.match(r"typedef enum (\w+) \{.*\} (\w+)$", d)] if m}
CALLBACKS = {}   # typedef name -> (return type, [parameter types])


def split_params(params):
    params = params.strip()
    if params in ("", "void"):
        return []
    out, depth, start = [], 0, 0
    for i, c in enumerate(params):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(params[start:i].strip())
            start = i + 1
    out.append(params[start:].strip())
    return out


def param_type(param):
    """'const char *name' -> 'const char *'; a function pointer -> 'fn'."""
    if "(*" in param:
        return "fn"
    param = re.sub(r"\s*\*\s*", " * ", param).split()
    if param[-1] != "*" and len(param) > 1:
        param = param[:-1]       # the name
    return " ".join(param)


for d in DECLS:
    m = re.match(r"typedef (.+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)$", d)
    if m:
        CALLBACKS[m.group(2)] = (param_type(m.group(1) + " x"), [param_type(p) for p in split_params(m.group(3))])


def c_kind(t):
    """A C type as the kind a ctypes declaration must have."""
    t = t.replace("const ", "").strip()
    stars = t.count("*")
    base = t.replace("*", "").strip()
    if t == "fn":
        return "fn"
    if stars == 0:
        if base in CALLBACKS:
            return "fn:" + base
        if base in ENUMS or base == "int":
            return "int"
        return {"void": "void", "unsigned int": "uint", "int64_t": "int64", "uint64_t": "u64",
                "size_t": "u64", "double": "double", "unsigned char": "uchar"}.get(base, "?" + base)
    if stars == 1 and base == "char":
        return "char*"
    return "ptr:" + base + "*" * (stars - 1)


CB_NAMES = {}    # id(CFUNCTYPE type) -> its typedef's name, from _lib's NAME_CB
for name, value in vars(_lib).items():
    if isinstance(value, type) and issubclass(value, ctypes._CFuncPtr):
        CB_NAMES[id(value)] = name


def cb_typedef(lib_name):
    """FETCH_CB -> tether_fetch_cb (LOG_CB -> tether_log_callback)."""
    guess = "tether_" + lib_name[:-3].lower() + "_cb"
    return guess if guess in CALLBACKS else "tether_" + lib_name[:-3].lower() + "_callback"


def fits(c, py):
    """Whether the ctypes type `py` passes/returns what the C kind `c` is."""
    if c == "void":
        return py is None
    if c == "int":
        return py is ctypes.c_int
    if c == "uint":
        return py is ctypes.c_uint
    if c == "int64":
        return py is ctypes.c_int64
    if c == "u64":
        return py is ctypes.c_size_t or py is ctypes.c_uint64
    if c == "double":
        return py is ctypes.c_double
    if c == "char*":
        return py in (ctypes.c_char_p, ctypes.c_void_p)    # c_void_p: a raw path's address
    if c == "fn" or c.startswith("fn:"):
        if not (isinstance(py, type) and issubclass(py, ctypes._CFuncPtr)):
            return False
        return c == "fn" or cb_typedef(CB_NAMES.get(id(py), "?_CB")) == c[3:]
    if c.startswith("ptr:"):
        if py is ctypes.c_void_p:
            return True
        if isinstance(py, type) and issubclass(py, ctypes._Pointer):
            target = py._type_
            if issubclass(target, ctypes.Structure):
                return c == "ptr:" + target.__name__
            return True
        return False
    return False


def header_functions():
    found = {}
    for d in DECLS:
        if d.startswith("typedef"):
            continue
        m = re.match(r"(.+?) ?\b(tether_\w+) ?\((.*)\)$", d)
        if m:
            found[m.group(2)] = (param_type(m.group(1) + " x"), [param_type(p) for p in split_params(m.group(3))])
    return found


def header_structs():
    found = {}
    for d in DECLS:
        m = re.match(r"typedef struct (\w+) \{(.*)\} (\w+)$", d)
        if m:
            fields = [f.strip() for f in m.group(2).split(";") if f.strip()]
            found[m.group(3)] = [(re.sub(r".*\( ?\* ?(\w+) ?\).*", r"\1", f) if "(*" in f else f.split()[-1].lstrip("*"),
                                  param_type(f)) for f in fields]
    return found


def lib_functions():
    """Every C function _lib declares: the checked ones and the raw ones."""
    found = {}
    for name, value in vars(_lib).items():
        if isinstance(value, ctypes._CFuncPtr) and getattr(value, "__name__", "").startswith("tether_"):
            found.setdefault(value.__name__, []).append((name, value))
    return found


def test_the_header_parses():
    functions = header_functions()
    assert functions["tether_context_poll"] == ("int", ["tether_context *", "int", "size_t *"])
    assert len(functions) > 100 and "tether_fetch_cb" in CALLBACKS and "tether_cache_policy" in ENUMS
    assert header_structs()["tether_value"][0] == ("type", "tether_type")


def test_every_function_is_declared_as_the_header_says():
    header, lib = header_functions(), lib_functions()
    missing = sorted(set(header) - set(lib))
    extra = sorted(set(lib) - set(header))
    assert not missing, "functions of include/tether.h that _lib.py does not declare: %s" % missing
    assert not extra, "functions _lib.py declares that include/tether.h does not: %s" % extra
    wrong = []
    for name, declared in lib.items():
        ret, params = header[name]
        for attr, f in declared:
            if not fits(c_kind(ret), f.restype):
                wrong.append("%s (%s): returns %s, not %r" % (name, attr, ret, f.restype))
            if f.argtypes is None or len(f.argtypes) != len(params):
                wrong.append("%s (%s): %d arguments, _lib declares %r" % (name, attr, len(params), f.argtypes))
                continue
            for i, (c, py) in enumerate(zip(params, f.argtypes)):
                if not fits(c_kind(c), py):
                    wrong.append("%s (%s): argument %d is %s, not %r" % (name, attr, i + 1, c, py))
    assert not wrong, "\n".join(wrong)


def test_every_callback_type_is_the_headers():
    wrong = []
    for name, value in vars(_lib).items():
        if not (isinstance(value, type) and issubclass(value, ctypes._CFuncPtr)) or not name.endswith("_CB"):
            continue
        typedef = cb_typedef(name)
        if typedef not in CALLBACKS:
            continue   # a struct's function pointer field (REQUEST_CB...): checked with its struct
        ret, params = CALLBACKS[typedef]
        if not fits(c_kind(ret), value._restype_) or len(params) != len(value._argtypes_) or \
                not all(fits(c_kind(c), py) for c, py in zip(params, value._argtypes_)):
            wrong.append("%s is not %s(%s) -> %s" % (name, typedef, ", ".join(params), ret))
    assert not wrong, "\n".join(wrong)
    assert {cb_typedef(n) for n in vars(_lib) if n.endswith("_CB")} >= set(CALLBACKS), \
        "callback types of the header _lib.py has no CFUNCTYPE for"


@pytest.mark.parametrize("struct", sorted(header_structs()))
def test_every_struct_has_the_headers_fields_in_order(struct):
    fields = header_structs()[struct]
    declared = getattr(_lib, struct, None)
    assert declared is not None, "_lib.py has no %s" % struct
    got = [(name, t) for name, t in declared._fields_]
    assert [n for n, _ in got] == [n for n, _ in fields], "%s's fields in _lib.py are not the header's" % struct
    wrong = ["%s.%s is %s, not %r" % (struct, n, c, py)
             for (n, c), (_, py) in zip(fields, got) if not fits(c_kind(c), py)]
    assert not wrong, "\n".join(wrong)


def header_constants():
    """#define TETHER_X n and the enum members, by name without TETHER_."""
    text = header_text()
    found = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define TETHER_(\w+)\s+\(?(-?\d+)u?\)?", text)}
    for d in DECLS:
        m = re.match(r"typedef enum \w+ \{(.*)\} \w+$", d)
        if not m:
            continue
        value = -1
        for member in (x.strip() for x in m.group(1).split(",") if x.strip()):
            name, _, given = member.partition("=")
            value = int(given.strip().rstrip("u"), 0) if given.strip() else value + 1
            found[name.strip()[len("TETHER_"):]] = value
    return found


def test_the_versions_are_the_headers():
    constants = header_constants()
    versions = {k: v for k, v in constants.items() if k.endswith("_VERSION")}
    assert "FETCH_OPTIONS_VERSION" in versions and len(versions) >= 6
    wrong = ["%s: header %d, _lib %r" % (k, v, getattr(_lib, k, None))
             for k, v in versions.items() if getattr(_lib, k, None) != v]
    assert not wrong, "option versions _lib.py does not declare as the header does:\n" + "\n".join(wrong)


def test_the_constants_lib_copies_are_the_headers():
    constants = header_constants()
    same = [k for k in constants if isinstance(getattr(_lib, k, None), int)]
    assert len(same) > 20
    wrong = ["%s: header %d, _lib %d" % (k, constants[k], getattr(_lib, k)) for k in same
             if getattr(_lib, k) != constants[k]]
    assert not wrong, "\n".join(wrong)
