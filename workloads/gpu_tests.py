"""The GPU tests (``pytest -m gpu``), one process per test file, several at once, each within a
time limit: a CUDA fault poisons the process it happens in, and a hang must not take the other
files' results (or a lent GPU's whole budget) with it.

    python -m workloads.gpu_tests --out DIR [--jobs 4] [--timeout 300] [FILE ...]

Each file's output goes to ``DIR/<file>.txt``; ``DIR/gpu_tests.json`` and the printed table give
per file its exit status (``timeout`` where its limit ran out), passed / failed / skipped /
xfailed counts and seconds. The files default to every ``tests/test_*.py`` with a ``gpu`` mark.
Test files that compile many kernels run longest (``tests/test_gpu.py``: ~250 s alone on the
H200); they are started first.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Files started first (the longest), by name.
SLOW_FIRST = ("test_gpu.py", "test_bulk_copy.py", "test_gnn.py", "test_launch.py")

#: A test or module marked gpu (a decorator or ``pytestmark`` at the start of a line).
_GPU_MARK = re.compile(r"^(@pytest\.mark\.gpu|pytestmark = .*pytest\.mark\.gpu)",
                       re.MULTILINE)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def gpu_test_files(root=ROOT):
    """Test files with a ``gpu`` mark, the slow ones first."""
    files = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "test_*.py"))):
        with open(path) as f:
            if _GPU_MARK.search(f.read()):
                files.append(os.path.relpath(path, root))
    order = {name: k for k, name in enumerate(SLOW_FIRST)}
    return sorted(files, key=lambda p: (order.get(os.path.basename(p), len(order)), p))


def counts(output):
    """pytest's summary counts from its output (the last line that has them)."""
    found = {}
    for line in output.splitlines()[::-1]:
        hits = _COUNT.findall(line)
        if hits:
            for n, what in hits:
                found[what.rstrip("s") if what.startswith("error") else what] = int(n)
            break
    return found


def run(files, out_dir, jobs=4, timeout=300.0, python=sys.executable, log=print):
    """Run each file's GPU tests in its own process, ``jobs`` at once; returns a row per file."""
    os.makedirs(out_dir, exist_ok=True)
    pending = list(files)
    running = []    # (file, process, start, log file)
    rows = []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            # (closed when its process ends: it outlives this block)
            out = open(os.path.join(out_dir, os.path.basename(name)[:-3] + ".txt"), "w")  # noqa: SIM115
            cmd = [python, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                   "-o", f"faulthandler_timeout={max(1, int(timeout) - 20)}", name]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            running.append((name, proc, time.monotonic(), out))
        time.sleep(0.2)
        for entry in list(running):
            name, proc, start, out = entry
            took = time.monotonic() - start
            code = proc.poll()
            if code is None and took < timeout:
                continue
            if code is None:
                proc.kill()
                proc.wait()
                code = "timeout"
            out.close()
            running.remove(entry)
            with open(out.name) as f:
                row = {"file": name, "exit": code, "seconds": round(took, 1),
                       **counts(f.read())}
            rows.append(row)
            log(f"{name}: exit {code}, {took:.0f} s, "
                + ", ".join(f"{row[k]} {k}" for k in ("passed", "failed", "error", "skipped",
                                                       "xfailed") if row.get(k)))
    return sorted(rows, key=lambda r: r["file"])


def build_parser():
    p = argparse.ArgumentParser(prog="python -m workloads.gpu_tests",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", metavar="FILE", help="test files (default: every file "
                   "with a gpu mark)")
    p.add_argument("--out", default="out/gpu_tests", help="output folder")
    p.add_argument("--jobs", type=int, default=4, help="files at once (default 4)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a file may take (default 300)")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        p.error("--jobs must be >= 1 and --timeout > 0")
    files = args.files or gpu_test_files()
    missing = [f for f in files if not os.path.exists(os.path.join(ROOT, f))]
    if missing:
        p.error(f"no such test file: {', '.join(missing)}")
    rows = run(files, args.out, args.jobs, args.timeout)
    total = {k: sum(r.get(k, 0) for r in rows) for k in ("passed", "failed", "error")}
    summary = {"date": time.strftime("%Y-%m-%d"), "command": "python -m workloads.gpu_tests",
               "files": rows, **total}
    with open(os.path.join(args.out, "gpu_tests.json"), "w") as f:
        json.dump(summary, f, indent=1)
    bad = [r["file"] for r in rows if r["exit"] not in (0, 5)]
    print(f"{total['passed']} passed, {total['failed']} failed, {total['error']} errors; "
          f"files not clean: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
