"""Variants of the BFS top-down kernel in one process, interleaved in rounds (a diagnosis):
the committed scan (exp/gpu_bfs_old.py) and the working tree's, at register caps, over GPU
memory and over a gids cache holding the whole graph (warm); and gids with plain (L1) loads of
pinned entries (unsafe in general: only with no eviction, as here).

    python exp/bfs_caps.py --graph /tmp/k23.csr --scale 23 --roots 8 --rounds 2
"""
import argparse
import os
import sys
import time

from numba import cuda

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "exp"))
import gids  # noqa: E402,F401
from workloads.graph import gpu_bfs as new  # noqa: E402
import gpu_bfs_old as old  # noqa: E402
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402
from workloads.graph.kronecker import generate_kronecker_csr  # noqa: E402
from workloads.pager import GIDS_PAGER  # noqa: E402


@cuda.jit(device=True)
def plain_pinned(h, k):
    return h.cache[k]


L1_PAGER = GIDS_PAGER._replace(value=plain_pinned)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--scale", type=int, default=23)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    t0 = time.time()
    if not os.path.exists(a.graph):
        generate_kronecker_csr(a.graph, a.scale)
    print(f"graph ready in {time.time() - t0:.0f} s", flush=True)
    graph = open_csr(a.graph)
    roots = [int(r) for r in sample_bfs_roots(graph, a.roots, seed=1)]
    mem = open_device_graph(graph, "memory")
    gd = open_device_graph(graph, "gids", cold_cache=False, cache_fraction=1.0, storage="memory")
    # (name, module, device graph, register cap, pager or None)
    configs = [("memory old", old, mem, None, None), ("memory new", new, mem, None, None),
               ("memory new cap40", new, mem, 40, None), ("memory new cap48", new, mem, 48, None),
               ("gids new 64", new, gd, 64, None), ("gids old 64", old, gd, 64, None)]
    default_pager = gd.source.pager

    def run(cfg, root):
        name, m, dg, cap, pager = cfg
        dg.source.max_registers = cap
        if dg is gd:
            dg.source.pager = pager or default_pager
        return m.bfs(dg, root)

    for cfg in configs:          # compile, fill the cache, validate each
        t = time.time()
        res = run(cfg, roots[0])
        cfg[1].validate_bfs_result(graph, res)
        print(f"{cfg[0]:18s} compiled and checked in {time.time() - t:.1f} s", flush=True)
    teps = {c[0]: [] for c in configs}
    for rnd in range(a.rounds):
        for cfg in (configs if rnd % 2 == 0 else configs[::-1]):
            for r in roots:
                teps[cfg[0]].append(run(cfg, r).teps)
    hm = {k: len(x) / sum(1 / t for t in x) for k, x in teps.items()}
    for k in hm:
        print(f"{k:18s} hmean TEPS {hm[k]:.3e}   of 'memory old' {hm[k] / hm['memory old']:.3f}")
    for cfg in configs:
        res = run(cfg, roots[0])
        print(f"{cfg[0]:18s} levels " + " ".join(f"{s * 1e3:.2f}" for s in res.level_seconds))
    gd.close()
    mem.close()


if __name__ == "__main__":
    main()
