"""Peak-RSS probe, run in a fresh subprocess by bench/run.py:

    python bench/memprobe.py tether|kinto-http URL STORE_DIR

Imports what it needs, reads the peak RSS (VmHWM) as the baseline, does one
full listing of bench/items, keeps the result alive, reads VmHWM again and
prints one JSON line: {"mode", "baseline_kb", "peak_kb", "growth_kb", "records"}.
"""
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def peak_kb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def main():
    mode, url, store_dir = sys.argv[1:4]
    common.setup_paths()
    if mode == "tether":
        import tether
        tether.library_version()   # the library is loaded and initialised
        base = peak_kb()
        ctx = tether.Context(url, common.BUCKET, os.path.join(store_dir, "mem.db"),
                             username=common.USER, password=common.PASSWORD)
        result = ctx.query(common.COLLECTION, policy="server_only", timeout=60).all()
        n = len(result)
        peak = peak_kb()
        ctx.close()
    elif mode == "kinto-http":
        import kinto_http  # noqa: F401
        client = common.kinto_http_client(url)
        base = peak_kb()
        result = common.kinto_http_listing(client)
        n = len(result)
        peak = peak_kb()
    else:
        raise SystemExit("unknown mode %r" % mode)
    print(json.dumps({"mode": mode, "baseline_kb": base, "peak_kb": peak,
                      "growth_kb": peak - base, "records": n}))


if __name__ == "__main__":
    main()
