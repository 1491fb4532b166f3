"""A/B of the BFS's resident-first top-down step (gpu_bfs.RESIDENT_FIRST) against the kernels
with the miss path, through a warm gids cache holding the whole graph, beside GPU memory, in one
process, interleaved in rounds.

    python exp/bfs_resident.py --graph /tmp/gids-session-k24.csr --roots 8 --rounds 2
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import gids  # noqa: E402,F401
import workloads.graph.gpu_bfs as gb  # noqa: E402
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    graph = open_csr(a.graph)
    roots = [int(r) for r in sample_bfs_roots(graph, a.roots, seed=1)]
    t0 = time.time()
    memory = open_device_graph(graph, "memory")
    cached = open_device_graph(graph, "gids", cold_cache=False, cache_fraction=1.0,
                               storage="memory")
    print(f"opened in {time.time() - t0:.0f} s", flush=True)
    runs = {"memory": (memory, True), "gids resident": (cached, True),
            "gids miss path": (cached, False)}
    for name, (dg, flag) in runs.items():   # warm the cache, compile, check
        gb.RESIDENT_FIRST = flag
        gb.validate_bfs_result(graph, gb.bfs(dg, roots[0]))
        gb.validate_bfs_result(graph, gb.bfs(dg, roots[0]))
        print(f"{name}: checked (all resident: {dg.source.all_resident})", flush=True)
    teps = {k: [] for k in runs}
    levels = {k: None for k in runs}
    order = list(runs.items())
    for rnd in range(a.rounds):
        for name, (dg, flag) in (order if rnd % 2 == 0 else order[::-1]):
            gb.RESIDENT_FIRST = flag
            for r in roots:
                res = gb.bfs(dg, r)
                teps[name].append(res.teps)
                if r == roots[0]:
                    levels[name] = [round(s * 1e3, 2) for s in res.level_seconds]
    hm = {k: len(x) / sum(1 / t for t in x) for k, x in teps.items()}
    for k in runs:
        print(f"{k:15s} hmean TEPS {hm[k]:.3e}  of memory {hm[k] / hm['memory']:.3f}  "
              f"levels of root {roots[0]} (ms, last round) {levels[k]}")
    memory.close()
    cached.close()


if __name__ == "__main__":
    main()
