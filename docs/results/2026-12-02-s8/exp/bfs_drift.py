"""Does the all-in-GPU-memory BFS drift over a process's life, and what does a Runtime.sync cost
(a diagnosis): memory and gids (whole cache, warm) searches alternated in one process, GPU clocks
read between blocks; then the cost of ``time.sleep(0)`` and of ``Runtime.sync`` after a tiny
kernel, with the sync's wait as it is and with a pure spin.

    python exp/bfs_drift.py [--scale 22] [--roots 4] [--out DIR]
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
from numba import cuda

sys.path.insert(0, os.getcwd())
import gids.runtime as grt  # noqa: E402
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402
from workloads.graph.kronecker import generate_kronecker_csr  # noqa: E402


def clocks():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception as exc:   # noqa: BLE001
        return repr(exc)


def block(dg, roots, tag, log):
    ms, tiny = [], []
    for r in roots:
        res = dg.bfs(int(r))
        ms.append(res.seconds * 1e3)
        tiny += [s * 1e3 for s, v in zip(res.level_seconds, res.level_vertices) if v < 100]
    log(f"{tag:<12} search ms {' '.join(f'{x:6.2f}' for x in ms)}  mean {np.mean(ms):6.2f}  "
        f"tiny levels mean {np.mean(tiny):.3f} ms  | {clocks()}")
    return float(np.mean(ms))


@cuda.jit
def tiny(out):
    out[0] += 1


def op_costs(tag, log):
    """Median host time of the per-level operations of a BFS: a pageable H2D copy of a few
    words, a tiny launch, a D2H copy (waits for it), a synchronize."""
    d = cuda.to_device(np.zeros(8, dtype=np.int64))
    z = np.zeros(8, dtype=np.int64)
    res = {"h2d": [], "launch": [], "d2h": [], "sync": []}
    for _ in range(200):
        t0 = time.perf_counter()
        d.copy_to_device(z)
        t1 = time.perf_counter()
        tiny[1, 1](d)
        t2 = time.perf_counter()
        d.copy_to_host()
        t3 = time.perf_counter()
        cuda.synchronize()
        t4 = time.perf_counter()
        for k, a, b in (("h2d", t0, t1), ("launch", t1, t2), ("d2h", t2, t3), ("sync", t3, t4)):
            res[k].append(b - a)
    log(f"{tag:<12} op costs (median us): " + ", ".join(f"{k} {np.median(v) * 1e6:.1f}"
                                                       for k, v in res.items()))


def spin_until(done, clock=time.perf_counter, sleep=time.sleep):
    while not done():
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--roots", type=int, default=4)
    ap.add_argument("--out", default=".")
    ap.add_argument("--other", default="gids", help="the path opened second: gids or memory")
    ap.add_argument("--daemon-threads", type=int, default=None)
    a = ap.parse_args()
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        time.sleep(0)
    log(f"time.sleep(0): {(time.perf_counter() - t) / n * 1e6:.1f} us")

    path = f"/tmp/drift-k{a.scale}.csr"
    if not os.path.exists(path):
        generate_kronecker_csr(path, a.scale)
    graph = open_csr(path)
    roots = sample_bfs_roots(graph, a.roots, seed=0)
    mem = open_device_graph(graph, "memory", cold_cache=False)
    mem.bfs(int(roots[0]))
    op_costs("before", log)
    block(mem, roots, "memory-only", log)
    block(mem, roots, "memory-only", log)
    if a.other == "memory":
        g = open_device_graph(graph, "memory", cold_cache=False)
    else:
        ro = {} if a.daemon_threads is None else {"daemon_threads": a.daemon_threads}
        g = open_device_graph(graph, "gids", cold_cache=False, cache_fraction=1.0,
                              storage="memory", runtime_options=ro)
    g.bfs(int(roots[0]))
    g.bfs(int(roots[0]))
    op_costs(f"{a.other} open", log)
    for k in range(2):
        block(mem, roots, f"memory {k}", log)
        block(g, roots, f"{a.other} {k}", log)
    if a.other == "memory":
        g.close()
        op_costs("closed", log)
        block(mem, roots, "mem, g shut", log)
        mem.close()
        with open(os.path.join(a.out, f"bfs_drift_{a.other}.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return
    rt = g.source.runtime
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    for name, fn in (("sync as is", grt.poll_until), ("sync spin", spin_until),
                     ("sync as is", grt.poll_until)):
        grt.poll_until = fn
        ts = []
        for _ in range(300):
            tiny[1, 1](out)
            cuda.synchronize()
            t = time.perf_counter()
            rt.sync()
            ts.append(time.perf_counter() - t)
        ts2 = []
        for _ in range(300):
            tiny[1, 1](out)
            t = time.perf_counter()
            rt.sync()
            ts2.append(time.perf_counter() - t)
        log(f"{name}: idle sync median {np.median(ts) * 1e6:.1f} us; launch+sync median "
            f"{np.median(ts2) * 1e6:.1f} us")
        if name == "sync spin":
            block(g, roots, "gids spin", log)
            block(mem, roots, "memory", log)
    g.close()
    op_costs("closed", log)
    block(mem, roots, "mem, g shut", log)
    mem.close()
    with open(os.path.join(a.out, f"bfs_drift_{a.other}{a.daemon_threads or ''}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
