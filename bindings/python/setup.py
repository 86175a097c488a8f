"""Builds the tether wheel with libtether.so inside it.

The metadata is in pyproject.toml; this file only adds two commands:

- build_py also puts the release libtether.so (the Swift runtime linked in)
  into the built package as tether/libtether.so, where tether/_lib.py finds
  it after $TETHER_LIBRARY. The library comes from, in order:
    1. $TETHER_LIBRARY_BUILD, a libtether.so built already;
    2. <repo>/build/libtether.so, if no source is newer than it;
    3. `make -C <repo> build/libtether.so`, the Makefile's release rule.
  It is copied into the build folder only, never into the source tree.
  Editable installs get no copy: tether/_lib.py finds <repo>/build.
- bdist_wheel tags the wheel py3-none-<platform> (linux_x86_64 here): any
  Python 3, no Python ABI (ctypes), but a native library for one platform.

`pip install bindings/python` and `pip wheel bindings/python` (pip >= 21.3
builds a local folder in place) and `python -m build --wheel` find the
repository two folders up. An sdist unpacked elsewhere has no Swift sources:
building it needs TETHER_LIBRARY_BUILD.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py

try:                                   # setuptools >= 70.1
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:                    # older setuptools: the wheel package's
    try:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        _bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))     # bindings/python
REPO = os.path.dirname(os.path.dirname(HERE))         # the repository, if we are in one
LIBNAME = "libtether.so"
ENV = "TETHER_LIBRARY_BUILD"


class LibraryError(Exception):
    pass


def _log(message):
    print("tether: " + message, file=sys.stderr, flush=True)


def _stderr_fd():
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):     # a stream with no descriptor
        return None


def _in_repository():
    return all(os.path.exists(os.path.join(REPO, p))
               for p in ("Package.swift", "Makefile", "include/tether.h", "Sources"))


def _newest_source():
    """The newest of the files the Makefile's release rule depends on."""
    newest, name = 0.0, None
    paths = [os.path.join(REPO, "Package.swift"), os.path.join(REPO, "include", "tether.h")]
    for folder, _, files in os.walk(os.path.join(REPO, "Sources")):
        paths.extend(os.path.join(folder, f) for f in files)
    flags = os.path.join(REPO, "build", "release-flags")   # rewritten when the flags change
    if os.path.exists(flags):
        paths.append(flags)
    for p in paths:
        m = os.stat(p).st_mtime
        if m > newest:
            newest, name = m, p
    return newest, name


def _check(path):
    """Refuses what would not load in a fresh environment."""
    if not os.path.isfile(path):
        raise LibraryError("%s is not a file" % path)
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise LibraryError("%s is not an ELF shared library" % path)
    readelf = shutil.which("readelf")
    if readelf:
        dynamic = subprocess.run([readelf, "-d", path], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic)
        swift = [n for n in needed if "swift" in n.lower() or n.startswith("libdispatch")
                 or n.startswith("libFoundation")]
        if swift:
            raise LibraryError(
                "%s links the Swift runtime dynamically (%s): a wheel needs the release build, "
                "which links it statically (`make build/libtether.so`)" % (path, ", ".join(swift)))


def find_library():
    """The path of the release libtether.so to put in the wheel."""
    env = os.environ.get(ENV)
    if env:
        _log("using %s=%s" % (ENV, env))
        _check(env)
        return env
    if not _in_repository():
        raise LibraryError(
            "cannot build the wheel: libtether.so is needed, and %s is not inside the Tether "
            "repository (no Swift sources at %s; an sdist does not carry them). Build from the "
            "repository: `pip install <repo>/bindings/python` or `pip wheel <repo>/bindings/python` "
            "(`python -m build --wheel`, not an sdist; pip older than 21.3 builds a copy in a "
            "temporary folder: upgrade pip). Or build the library first "
            "(`make build/libtether.so` in the repository, Swift 6 needed) and set %s to it: "
            "%s=/path/to/libtether.so pip install ..." % (HERE, REPO, ENV, ENV))
    built = os.path.join(REPO, "build", LIBNAME)
    if os.path.exists(built):
        newest, name = _newest_source()
        if os.stat(built).st_mtime >= newest:
            _log("using %s (up to date)" % built)
            _check(built)
            return built
        _log("%s is older than %s: rebuilding it" % (built, os.path.relpath(name, REPO)))
    make = os.environ.get("MAKE") or "make"
    _log("building the release library: %s -C %s build/%s (Swift; this takes minutes)"
         % (make, REPO, LIBNAME))
    try:
        # Its output to stderr: pip shows it with -v, and in full if it fails.
        subprocess.run([make, "-C", REPO, "build/" + LIBNAME], stdout=_stderr_fd(), check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise LibraryError(
            "`%s -C %s build/%s` failed (%s). Build the library with `make build` in the "
            "repository (Swift 6, libcurl, libsqlite3, libjansson), or set %s to a release "
            "libtether.so." % (make, REPO, LIBNAME, e, ENV)) from e
    _check(built)
    return built


class build_py(_build_py):
    """Also copies libtether.so into the built package (not for editable installs)."""

    def _library_target(self):
        return os.path.join(self.build_lib, "tether", LIBNAME)

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        try:
            source = find_library()
        except LibraryError as e:
            raise SystemExit("tether: " + str(e)) from None
        target = self._library_target()
        self.mkpath(os.path.dirname(target))
        _log("copying %s -> %s" % (source, target))
        shutil.copyfile(source, target)        # follows a symbolic link
        os.chmod(target, 0o755)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(self._library_target())
        return outputs


cmdclass = {"build_py": build_py}


class BinaryDistribution(Distribution):
    """Not pure Python: the package holds a native library, so it is installed
    in platlib and the wheel says Root-Is-Purelib: false. (No extension
    module is built.)"""

    def has_ext_modules(self):
        return True


if _bdist_wheel is not None:
    class bdist_wheel(_bdist_wheel):
        """py3-none-<platform>: a native library for one platform, but no Python
        ABI (ctypes), so any Python 3 (a non-pure wheel would say cp311-cp311)."""

        def get_tag(self):
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    cmdclass["bdist_wheel"] = bdist_wheel

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
