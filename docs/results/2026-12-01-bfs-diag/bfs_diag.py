"""Experiment (not part of gids): which part of the paged top-down step is slow.

    python exp/bfs_diag.py VARIANT GRAPH DATA_PATH
"""
import json
import sys


import gids  # noqa: F401
from workloads.graph import open_csr, sample_bfs_roots
from workloads.graph.gpu_graph import open_device_graph

variant, graph_path, path = sys.argv[1:4]
if variant == "old":
    from workloads.graph import _old_bfs as B
else:
    from workloads.graph import gpu_bfs as B
    if "nolong" in variant:
        B.LONG_LIST = 1 << 40
    if "run1" in variant:
        B.frontier_run = lambda n: 1
graph = open_csr(graph_path)
roots = sample_bfs_roots(graph, 3, seed=0).tolist()
opts = {"storage": "memory", "cache_fraction": 1.0} if path == "gids" else {}
with open_device_graph(graph, path, **opts) as dg:
    out = []
    for root in roots:
        r = B.bfs(dg, root)
        out.append({"s": round(r.seconds * 1e3, 2), "levels_ms": [round(x * 1e3, 2) for x in r.level_seconds],
                    "verts": r.level_vertices, "lookups": (r.stats or {}).get("lookups")})
    k = B.make_bfs_kernels(getattr(dg.source, "pager", None) or dg.source.reader)
    regs = {}
    for name in ("top_down", "long_lists"):
        kern = getattr(k, name, None)
        if kern is None:
            continue
        try:
            regs[name] = (kern.get_regs_per_thread(), kern.get_local_mem_per_thread())
        except Exception as e:  # noqa
            regs[name] = repr(e)[:100]
print(json.dumps({"variant": variant, "path": path, "runs": out, "regs": str(regs)}))
