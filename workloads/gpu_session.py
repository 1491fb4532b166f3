"""Everything a lent GPU should run, in stages that fit one device call each.

    python -m workloads.gpu_session --out $OUT [STAGE ...]

Stages, in order of priority (default: all, in this order):

- ``tests``: the GPU tests (``pytest -m gpu``), first, since every figure after them assumes
  the runtime reads the right values;
- ``core``: the core's GPU suite (``python -m workloads.microbench gpu-suite``): all-miss pages
  (host daemon and direct NVMe path), hits, QD1 latency, emulation replay, with the ceilings of
  the same run;
- ``bench``: ``gids bench --quick`` over every data path;
- ``bfs``: ``gids bfs`` on a Graph500 graph over the data paths and cache sizes;
- ``search``: ``gids search`` on synthetic vectors over the data paths;
- ``stress``: the write path under load (``python -m workloads.stress``): 60 s of 1 M threads
  writing and reading a sparse 16 GiB file through a cache of 1 % of it, then flush, fsync and
  a check of the whole file against the model (table of operations, bytes, evictions,
  write-backs, mismatches).

Each stage runs in its own process with a time limit and writes its log and outputs under
``OUT/<stage>/``; ``OUT/summary.md`` collects the tail of every log. At the end everything is
packed into ``OUT/gpu_session.tar.gz`` as well (the device tool returns at most 8 files).
Prepare the machine first (numpy < 2.5): see ``../shared/GPU_NOTES.md``.
"""
import argparse
import os
import subprocess
import sys
import tarfile
import time

STAGES = {
    # 420 s: the write tests (four dtypes, 64 k writers, the stress run at 1/64) add about
    # two minutes, mostly compiling (an estimate: not yet run on a GPU).
    "tests": ([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
               "tests"], 420),
    "core": ([sys.executable, "-m", "workloads.microbench", "gpu-suite", "--no-tests",
              "--out", "{dir}"], 540),
    "bench": ([sys.executable, "-m", "gids.cli", "bench", "--quick", "--no-progress",
               "--out", "{dir}"], 570),
    # Issue 5's setting: a RAM-backed store, caches of 25 % and 100 % of the edges (scale 20
    # took about 100 s on 2026-11-29 with 4 roots; scale 22 is 4x the graph).
    "bfs": ([sys.executable, "-m", "gids.cli", "bfs", "--scale", "22", "--roots", "8",
             "--storage", "memory", "--cache-fractions", "0.25,1.0",
             "--json", "{dir}/bfs.json"], 480),
    "search": ([sys.executable, "-m", "gids.cli", "search", "--n", "1000000", "--dim", "128",
                "--lists", "1024", "--nprobe", "8,16,32,64", "--json", "{dir}/search.json"], 480),
    # The file goes to the temp dir, not under {dir}: 16 GiB must not be sent back.
    "stress": ([sys.executable, "-m", "workloads.stress", "--seconds", "60", "--file-gib", "16",
                "--cache-fraction", "0.01", "--json", "{dir}/stress.json"], 480),
}


def run_stage(name, out_dir):
    """Run one stage; return (exit code or 'timeout', seconds, log path)."""
    command, limit = STAGES[name]
    stage_dir = os.path.join(out_dir, name)
    os.makedirs(stage_dir, exist_ok=True)
    command = [part.replace("{dir}", stage_dir) for part in command]
    log_path = os.path.join(stage_dir, "log.txt")
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        try:
            rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=limit,
                                env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.monotonic() - start, log_path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.gpu_session",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="*", metavar="STAGE",
                        help=f"any of {', '.join(STAGES)} (default: all)")
    parser.add_argument("--out", default="out", help="output folder (default: out)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    stages = args.stages or list(STAGES)
    os.makedirs(args.out, exist_ok=True)
    summary = [f"# GPU session {time.strftime('%Y-%m-%d %H:%M')}", ""]
    for name in stages:
        print(f"== {name}", flush=True)
        rc, secs, log_path = run_stage(name, args.out)
        with open(log_path) as f:
            tail = f.read()[-4000:]
        print(tail, flush=True)
        summary += [f"## {name}: exit {rc}, {secs:.0f} s", "", "```", tail, "```", ""]
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(summary))
    with tarfile.open(os.path.join(args.out, "gpu_session.tar.gz"), "w:gz") as tar:
        for name in stages:
            tar.add(os.path.join(args.out, name), arcname=name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
