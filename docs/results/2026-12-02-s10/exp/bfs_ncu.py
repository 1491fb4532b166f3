"""One warm BFS search, inside a CUDA profiler range, for Nsight Compute to compare the top-down
kernels of the whole-cache gids path with those of the all-in-GPU-memory path (prepared for the
next session; not yet run). From the repository root, on the GPU machine:

    NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
    for p in memory gids; do
      $NCU --profile-from-start off --kernel-name regex:top_down --set detailed \\
           --csv --page details \\
           python docs/results/2026-12-02-s8/exp/bfs_ncu.py --graph /tmp/k22.csr --path $p \\
           > $OUT/ncu_$p.csv
    done

Every launch outside the range (compiling, filling the cache, the warm-up searches) is left
out, so each CSV holds the top-down launches of one search, level by level.
"""
import argparse
import os
import sys

sys.path.insert(0, os.getcwd())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True, help="a CSR file; generated first if missing")
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--path", choices=("memory", "gids"), required=True)
    ap.add_argument("--root", type=int, default=None, help="default: the first sampled root")
    a = ap.parse_args()
    from numba import cuda
    from workloads.graph.bfs import sample_bfs_roots
    from workloads.graph.csr_file import open_csr
    from workloads.graph.gpu_graph import open_device_graph
    from workloads.graph.kronecker import generate_kronecker_csr
    if not os.path.exists(a.graph):
        generate_kronecker_csr(a.graph, a.scale)
    graph = open_csr(a.graph)
    root = a.root if a.root is not None else int(sample_bfs_roots(graph, 1, seed=0)[0])
    opts = {"cache_fraction": 1.0, "storage": "memory"} if a.path == "gids" else {}
    with open_device_graph(graph, a.path, cold_cache=False, **opts) as dg:
        dg.bfs(root)     # compiles; fills the cache
        dg.bfs(root)     # warm
        cuda.profile_start()
        res = dg.bfs(root)
        cuda.profile_stop()
    print(f"{a.path} (all resident: {dg.source.all_resident}): root {root}, {res.seconds * 1e3:.2f} ms, levels "
          + " ".join(f"{s * 1e3:.2f}" for s in res.level_seconds) + " ms, vertices "
          + " ".join(str(v) for v in res.level_vertices), file=sys.stderr)


if __name__ == "__main__":
    main()
