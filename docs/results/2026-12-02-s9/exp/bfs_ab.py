"""A/B of the BFS kernels in one process: the committed top-down scan (exp/gpu_bfs_old.py, a
copy of HEAD's module) against the working tree's, each over GPU memory and over a gids cache
holding the whole graph (warm), interleaved in rounds so that drift hits all four alike.

    python exp/bfs_ab.py --graph /tmp/k23.csr --scale 23 --roots 8 --rounds 3
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "exp"))
import gids  # noqa: E402,F401
from workloads.graph import gpu_bfs as new  # noqa: E402
import gpu_bfs_old as old  # noqa: E402
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402
from workloads.graph.kronecker import generate_kronecker_csr  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--scale", type=int, default=23)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    t0 = time.time()
    if not os.path.exists(a.graph):
        generate_kronecker_csr(a.graph, a.scale)
    print(f"graph ready in {time.time() - t0:.0f} s", flush=True)
    graph = open_csr(a.graph)
    roots = [int(r) for r in sample_bfs_roots(graph, a.roots, seed=1)]
    mem = open_device_graph(graph, "memory")
    gd = open_device_graph(graph, "gids", cold_cache=False, cache_fraction=1.0, storage="memory")
    paths = {"memory": mem, "gids": gd}
    mods = {"old": old, "new": new}
    for m in mods.values():          # compile, fill the cache, check against each other
        for p, dg in paths.items():
            res = m.bfs(dg, roots[0])
            m.validate_bfs_result(graph, res)
    times = {(v, p): [] for v in mods for p in paths}
    teps = {(v, p): [] for v in mods for p in paths}
    for rnd in range(a.rounds):
        for v, m in (mods.items() if rnd % 2 == 0 else reversed(mods.items())):
            for p, dg in paths.items():
                for r in roots:
                    res = m.bfs(dg, r)
                    times[v, p].append(res.seconds)
                    teps[v, p].append(res.teps)
        print(f"round {rnd} done", flush=True)
    hm = {k: len(x) / sum(1 / t for t in x) for k, x in teps.items()}
    for k in times:
        print(f"{k[0]:4s} {k[1]:7s} hmean TEPS {hm[k]:.3e}  mean search {np.mean(times[k]) * 1e3:7.2f} ms")
    for v in mods:
        print(f"{v}: gids / memory = {hm[v, 'gids'] / hm[v, 'memory']:.3f}")
    print(f"new/old memory {hm['new', 'memory'] / hm['old', 'memory']:.3f}, "
          f"gids {hm['new', 'gids'] / hm['old', 'gids']:.3f}")
    # One search's levels, per variant and path (ms), for where the time goes.
    for v, m in mods.items():
        for p, dg in paths.items():
            res = m.bfs(dg, roots[0])
            print(f"{v:4s} {p:7s} levels " + " ".join(f"{s * 1e3:.2f}" for s in res.level_seconds)
                  + "  vertices " + " ".join(str(x) for x in res.level_vertices))
    gd.close()
    mem.close()


if __name__ == "__main__":
    main()
