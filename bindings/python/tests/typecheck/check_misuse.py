"""Runs mypy (the [tool.mypy] configuration of bindings/python/pyproject.toml)
on misuse.py and checks that it fails exactly where the file says: each line
marked `# E: code` with an error of that code, and no other line. So the
hints are shown to catch the mistakes they are for (a bad policy string, a
key of the wrong type...), and a hint loosened to Any fails this check.

    .venv/bin/python bindings/python/tests/typecheck/check_misuse.py
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(os.path.dirname(HERE))       # bindings/python
MISUSE = os.path.join("tests", "typecheck", "misuse.py")

MARK = re.compile(r"#\s*E:\s*([a-z-]+(?:\s*,\s*[a-z-]+)*)\s*$")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<text>.*?)(?:  \[(?P<code>[a-z-]+)\])?$")


def expected():
    found = set()
    with open(os.path.join(PKG_ROOT, MISUSE), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = MARK.search(line)
            if m:
                for code in m.group(1).split(","):
                    found.add((number, code.strip()))
    return found


def main():
    want = expected()
    if not want:
        print("check_misuse: %s marks no error" % MISUSE)
        return 1
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", MISUSE],
                          cwd=PKG_ROOT, capture_output=True, text=True, check=False)
    got, other = set(), []
    for line in done.stdout.splitlines():
        m = ERROR.match(line)
        if not m:
            continue
        if os.path.normpath(m.group("path")) != MISUSE:
            other.append(line)   # an error in the package itself
            continue
        got.add((int(m.group("line")), m.group("code") or "?"))
    if done.returncode not in (0, 1) or other:
        print(done.stdout + done.stderr)
        print("check_misuse: mypy failed otherwise than on %s (status %d)" % (MISUSE, done.returncode))
        return 1
    missed, extra = sorted(want - got), sorted(got - want)
    for number, code in missed:
        print("%s:%d: expected a mypy error [%s], got none: the hints let this mistake through"
              % (MISUSE, number, code))
    for number, code in extra:
        print("%s:%d: unexpected mypy error [%s]" % (MISUSE, number, code))
    if missed or extra:
        print(done.stdout)
        return 1
    print("check_misuse: mypy refuses each of the %d mistakes of %s, and nothing else"
          % (len(want), MISUSE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
