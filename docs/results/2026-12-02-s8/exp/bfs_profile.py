"""Where the whole-cache BFS loses time against GPU memory, level by level (a diagnosis, not a
benchmark): host time by function (cProfile) and GPU time by CUDA events, per data path.

    python exp/bfs_profile.py [--scale 22] [--roots 4] [--out DIR]
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time


sys.path.insert(0, os.getcwd())
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402
from workloads.graph.kronecker import generate_kronecker_csr  # noqa: E402
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--roots", type=int, default=4)
    ap.add_argument("--graph", default=None)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    path = a.graph or f"/tmp/prof-k{a.scale}.csr"
    if not os.path.exists(path):
        t = time.perf_counter()
        generate_kronecker_csr(path, a.scale)
        print(f"generated scale {a.scale} in {time.perf_counter() - t:.1f} s", flush=True)
    graph = open_csr(path)
    roots = sample_bfs_roots(graph, a.roots, seed=0)
    report = []
    for name, opts in (("memory", {}), ("gids", {"cache_fraction": 1.0, "storage": "memory"}),
                       ("memory", {})):
        with open_device_graph(graph, name, cold_cache=False, **opts) as dg:
            dg.bfs(int(roots[0]))     # compile, warm
            dg.bfs(int(roots[0]))
            prof = cProfile.Profile()
            levels = []
            t = time.perf_counter()
            prof.enable()
            for r in roots:
                res = dg.bfs(int(r))
                levels.append((res.seconds, res.level_seconds, res.level_vertices))
            prof.disable()
            wall = time.perf_counter() - t
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            st.sort_stats("tottime").print_stats(25)
            st.sort_stats("cumulative").print_stats(40)
            # the same without the profiler
            plain = []
            for r in roots:
                res = dg.bfs(int(r))
                plain.append((res.seconds, [round(x * 1e3, 3) for x in res.level_seconds],
                              res.level_vertices))
            report.append(f"=== {name} {opts}: profiled wall {wall:.4f} s\n")
            for p in plain:
                report.append(f"  plain search {p[0] * 1e3:.2f} ms levels(ms) {p[1]} vertices {p[2]}\n")
            report.append(s.getvalue())
            print("".join(report[-1 - len(plain) - 1:]), flush=True)
    with open(os.path.join(a.out, "bfs_profile.txt"), "w") as f:
        f.write("".join(report))


if __name__ == "__main__":
    main()
