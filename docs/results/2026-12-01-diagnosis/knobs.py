"""Scratch: the 25 %-cache collapse under knobs (env GIDS_DIAG_*), optional trace."""
import sys, json, tempfile, os
from pathlib import Path
import numpy as np
import gids
from workloads.vector import SyntheticClusters, build_ivf, train_kmeans
from workloads.vector.gpu_search import GPUSearcher
from host_daemon.trace import read_trace

out, label, blocks_list, trace = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")], sys.argv[4] == "1"
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
tmp = Path(tempfile.mkdtemp())
data = SyntheticClusters(2000 if SIM else 100000, 16 if SIM else 128, 16 if SIM else 256, seed=0, spread=1.0)
cent = train_kmeans(data, 16 if SIM else 256, seed=0)
index = build_ivf(tmp / "s.ivf", data, cent, page_size=4096)
queries = data.queries(8 if SIM else 1000, seed=1, skewed=False)[0]
pages = index.vectors_nbytes // 4096
nprobe = 4 if SIM else 16
for blocks in blocks_list:
    tpath = f"{out}/{label}_b{blocks}.trace" if trace else None
    rt = gids.Runtime("host", cache_pages=max(32, int(0.25 * pages)), page_size=4096, trace=tpath)
    try:
        with GPUSearcher(index, "gids", runtime=rt, blocks=blocks, storage="memory") as s:
            s.warmup(10, nprobe)
            rt.invalidate()
            nq = len(queries)
            r = s.search(queries, 10, nprobe)
            row = dict(label=label, blocks=blocks, nq=nq, s=r.seconds, qps=nq / r.seconds, ios=r.ios,
                       pages_q=r.pages_per_query, hit=r.hit_rate, miss=r.miss_path,
                       env={k: v for k, v in os.environ.items() if k.startswith("GIDS_DIAG")})
    finally:
        rt.close()
    if trace:
        rec = read_trace(tpath, strict=False)
        svc = rec["complete_ns"] - rec["issue_ns"]
        span = (rec["issue_ns"].max() - rec["issue_ns"].min()) / 1e9
        row["trace"] = dict(n=len(rec), span_s=span, svc_us_p50=float(np.percentile(svc, 50)) / 1e3,
                            svc_us_p99=float(np.percentile(svc, 99)) / 1e3,
                            queues_used=int(len(np.unique(rec["queue"]))))
        # arrivals per 10 ms window
        t = (rec["issue_ns"] - rec["issue_ns"].min()) // 10_000_000
        row["trace"]["per10ms_first20"] = np.bincount(t)[:20].tolist()
        os.remove(tpath)
    print(json.dumps(row), flush=True)
