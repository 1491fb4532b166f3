"""A/B of versions of the BFS module in one process, interleaved in rounds (a diagnosis, for the
next session): each ``--variant NAME=FILE`` is a copy of ``workloads/graph/gpu_bfs.py`` (from
any commit: ``git show REV:workloads/graph/gpu_bfs.py > FILE``; relative imports are rewritten
on loading), run over each data path of ``--paths`` (``memory``, ``zero_copy``, ``gids`` (a
cache holding the whole graph, warm), ``gids25`` (a quarter of it, cold)).

    python exp/bfs_variants.py --graph /tmp/k23.csr --scale 23 --roots 8 --rounds 2 \\
        --paths memory,zero_copy,gids --variant main=exp/v_main.py --variant s9=exp/v_130d92b.py
"""
import argparse
import importlib.util
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
import gids  # noqa: E402,F401
from workloads.graph.bfs import sample_bfs_roots  # noqa: E402
from workloads.graph.csr_file import open_csr  # noqa: E402
from workloads.graph.gpu_graph import open_device_graph  # noqa: E402
from workloads.graph.kronecker import generate_kronecker_csr  # noqa: E402


def load_variant(name, path):
    """Import a copy of gpu_bfs.py as module ``bfs_variant_NAME`` (absolute imports)."""
    with open(path) as f:
        text = re.sub(r"^from \.(\w+) import", r"from workloads.graph.\1 import", f.read(),
                      flags=re.M)
    tmp = os.path.join(tempfile.mkdtemp(), f"bfs_variant_{name}.py")
    with open(tmp, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"bfs_variant_{name}", tmp)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def open_path(graph, path):
    if path == "gids":
        return open_device_graph(graph, "gids", cold_cache=False, cache_fraction=1.0,
                                 storage="memory")
    if path == "gids25":
        return open_device_graph(graph, "gids", cold_cache=True, cache_fraction=0.25,
                                 storage="memory")
    return open_device_graph(graph, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--scale", type=int, default=23)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--paths", default="memory,zero_copy,gids")
    ap.add_argument("--variant", action="append", required=True, help="NAME=FILE")
    a = ap.parse_args()
    t0 = time.time()
    if not os.path.exists(a.graph):
        generate_kronecker_csr(a.graph, a.scale)
    print(f"graph ready in {time.time() - t0:.0f} s", flush=True)
    graph = open_csr(a.graph)
    roots = [int(r) for r in sample_bfs_roots(graph, a.roots, seed=1)]
    variants = {n: load_variant(n, p) for n, p in (v.split("=", 1) for v in a.variant)}
    paths = {p: open_path(graph, p) for p in a.paths.split(",")}
    for v, m in variants.items():      # compile; check every variant's search
        for p, dg in paths.items():
            m.validate_bfs_result(graph, m.bfs(dg, roots[0]))
            print(f"{v} {p}: compiled and checked", flush=True)
    teps = {(v, p): [] for v in variants for p in paths}
    order = list(variants.items())
    for rnd in range(a.rounds):
        for v, m in (order if rnd % 2 == 0 else order[::-1]):
            for p, dg in paths.items():
                for r in roots:
                    teps[v, p].append(m.bfs(dg, r).teps)
    first = order[0][0]
    for p in paths:
        for v in variants:
            x = teps[v, p]
            hm = len(x) / sum(1 / t for t in x)
            base = teps[first, p]
            hm0 = len(base) / sum(1 / t for t in base)
            print(f"{p:9s} {v:10s} hmean TEPS {hm:.3e}  of {first}: {hm / hm0:.3f}")
    for dg in paths.values():
        dg.close()


if __name__ == "__main__":
    main()
