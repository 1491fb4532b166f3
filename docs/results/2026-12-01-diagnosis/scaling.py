"""Scratch: how the gids search's time scales with blocks, cache and block size (GPU)."""
import sys, time, json, tempfile
from pathlib import Path
import gids
from workloads.vector import SyntheticClusters, build_ivf, train_kmeans
from workloads.vector.gpu_search import GPUSearcher

out = sys.argv[1]
tmp = Path(tempfile.mkdtemp())
import os
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
data = SyntheticClusters(2000 if SIM else 100000, 16 if SIM else 128, 16 if SIM else 256, seed=0, spread=1.0)
t = time.time()
cent = train_kmeans(data, 16 if SIM else 256, seed=0)
index = build_ivf(tmp / "s.ivf", data, cent, page_size=4096)
print("built", time.time() - t, flush=True)
queries = data.queries(8 if SIM else 1000, seed=1, skewed=False)[0]
pages = index.vectors_nbytes // 4096
rows = []

def run(path, blocks, nq, threads=128, frac=0.25, nprobe=4 if SIM else 16, label=""):
    rt = None
    if path == "gids":
        rt = gids.Runtime("host", cache_pages=max(32, int(frac * pages)), page_size=4096)
    try:
        with GPUSearcher(index, path, runtime=rt, threads=threads, blocks=blocks,
                         **({"storage": "memory"} if rt else {})) as s:
            s.warmup(10, nprobe)
            if rt: rt.invalidate()
            r = s.search(queries[:nq], 10, nprobe)
            row = dict(path=path, blocks=blocks, nq=nq, threads=threads, frac=frac, nprobe=nprobe,
                       s=r.seconds, qps=nq / r.seconds, ms_per_query_per_block=1e3 * r.seconds * min(blocks, nq) / nq,
                       ios=r.ios, pages_q=r.pages_per_query, hit=r.hit_rate, miss=r.miss_path, label=label)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        if rt: rt.close()

run("memory", 1000, 1000)
for blocks, nq in [(1, 2), (8, 16), (64, 128), (512, 1000), (1000, 1000)]:
    run("gids", blocks, nq, frac=1.0)
for blocks, nq in [(1, 2), (64, 128), (1000, 1000)]:
    run("gids", blocks, nq, frac=0.25)
run("gids", 1000, 1000, threads=32, frac=1.0)
run("gids", 1, 2, threads=32, frac=1.0)
json.dump(rows, open(f"{out}/diag_search.json", "w"), indent=1)
