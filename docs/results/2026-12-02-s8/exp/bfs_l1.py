"""What the whole-cache BFS would gain if a pinned page's bytes were read through the SM's L1
(a plain load) instead of L2 only (``ld.global.cg``): an experiment, not a mode. A plain load is
safe only while no page is evicted during the kernel (a warm cache holding the whole graph);
gids does not know that in general, which is why it reads slots with ``.cg``.

    python exp/bfs_l1.py --graph G.csr [--roots 4] [--l1]

Runs memory, gids, memory (every search validated by Graph500's rules), with ``--l1`` after
replacing the load ``gids.pinned`` compiles to by a plain one (before any kernel compiles).
"""
import argparse
import os
import sys
import time


sys.path.insert(0, os.getcwd())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--roots", type=int, default=4)
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--l1", action="store_true")
    a = ap.parse_args()
    import kernels.access as access
    from kernels.sync import make_load
    if a.l1:
        access.ld_weak_l2 = make_load("global.ca")   # ld.global.ca: cached in L1
    from workloads.graph.bfs import sample_bfs_roots
    from workloads.graph.csr_file import open_csr
    from workloads.graph.gpu_bfs import validate_bfs_result
    from workloads.graph.gpu_graph import open_device_graph
    from workloads.graph.kronecker import generate_kronecker_csr
    if not os.path.exists(a.graph):
        t = time.perf_counter()
        generate_kronecker_csr(a.graph, a.scale)
        print(f"generated in {time.perf_counter() - t:.0f} s", flush=True)
    graph = open_csr(a.graph)
    roots = sample_bfs_roots(graph, a.roots, seed=0)
    tag = "gids, L1 reads" if a.l1 else "gids, .cg reads"
    for name, opts in (("memory", {}), ("gids", {"cache_fraction": 1.0, "storage": "memory"}),
                       ("memory", {})):
        with open_device_graph(graph, name, cold_cache=False, **opts) as dg:
            dg.bfs(int(roots[0]))                 # compile; fills the cache
            teps = []
            for k, r in enumerate(roots):
                res = dg.bfs(int(r))
                if k == 0:
                    validate_bfs_result(graph, res)
                teps.append(res.teps)
            label = tag if name == "gids" else name
            hm = len(teps) / sum(1 / t for t in teps)
            print(f"{label:<16} hmean TEPS {hm:.3e}  per root "
                  + " ".join(f"{t:.2e}" for t in teps) + "  (root 1 valid)", flush=True)


if __name__ == "__main__":
    main()
