"""Hit-path diagnosis: kernel times (CUDA events) of the all-hit kernels, plain vs gids, and an
ncu-profiled launch of each (``profile`` argument: inside cuda.profile_start/stop).

python docs/results/2026-12-01-hitpath/hitprof.py time|profile [out.json]  (run from the repository root)
"""
import json
import sys
import time

import numpy as np

import gids
from numba import cuda
from workloads import microbench as mb
from workloads import baselines as B
from workloads.pager import GIDS_PAGER, element_pager


def ev_time(fn, reps=5):
    """Median seconds of ``fn()`` by CUDA events, over ``reps`` runs."""
    return mb._time_kernel(fn, reps)


def main():
    mode = sys.argv[1]
    out_path = sys.argv[2] if len(sys.argv) > 2 else None
    small = gids.SIMULATOR
    n = 1 << (12 if small else 26)
    rng = np.random.default_rng(2)
    data = rng.integers(0, 1 << 40, n, dtype=np.int64)
    d_data = cuda.to_device(data)
    blocks, threads = (2, 64) if small else (132 * 16, 256)
    out_g = cuda.device_array(blocks * threads, np.int64)
    out_p = cuda.device_array(blocks * threads, np.int64)
    res = {}
    with gids.Runtime(cache_bytes=1 << 30, page_size=4096) as rt:
        arr = rt.open_array(data)
        h = arr.handle
        mb.sequential_reads_gids[blocks, threads](h, n, out_g)
        rt.sync()
        req_g = B.requests_template(GIDS_PAGER)
        req_p = B.requests_template(element_pager(B.plain_read))
        ph = B.PlainHandle(d_data, n, cuda.to_device(np.zeros(1, np.int64)),
                           cuda.to_device(np.zeros(2, np.int64)))
        elems = 512
        n_req = n // elems
        rblocks = 1 if small else 132 * 2048 // 256
        rout_g = cuda.device_array(rblocks * 256 if not small else 256, np.int64)
        rout_p = cuda.device_array(rblocks * 256 if not small else 256, np.int64)
        for n_ids in ((4,) if small else (1 << 15, 1 << 18)):
            ids = cuda.to_device(rng.integers(0, n_req, n_ids))
            res[f"req_plain_{n_ids}"] = (lambda ids=ids: req_p[rblocks, 256 if not small else 64](
                ph, ids, 1, elems, n_req, rout_p), n_ids * 4096)
            res[f"req_gids_{n_ids}"] = (lambda ids=ids: req_g[rblocks, 256 if not small else 64](
                h, ids, 1, elems, n_req, rout_g), n_ids * 4096)
        res["seq_plain"] = (lambda: mb.sequential_reads_plain[blocks, threads](d_data, n, out_p),
                            n * 8)
        res["seq_gids"] = (lambda: mb.sequential_reads_gids[blocks, threads](h, n, out_g), n * 8)
        res["paged1_gids"] = (lambda: mb.paged_sequential_reads_gids[blocks, threads](
            h, n, out_g, 1), n * 8)
        res["rand_plain"] = (lambda: mb.random_reads_plain[blocks, threads](
            d_data, n - 1, 16, 7, out_p), blocks * threads * 16 * 8)
        res["rand_gids"] = (lambda: mb.random_reads_gids[blocks, threads](
            h, n - 1, 16, 7, out_g), blocks * threads * 16 * 8)
        for k, (fn, nbytes) in res.items():   # compile + warm
            fn()
        cuda.synchronize()
        rt.sync()
        rows = {}
        if mode == "profile":
            cuda.profile_start()
            for k, (fn, nbytes) in res.items():
                fn()
                cuda.synchronize()
            cuda.profile_stop()
        else:
            for k, (fn, nbytes) in res.items():
                t = ev_time(fn) if not small else 1.0
                rows[k] = {"ms": t * 1e3, "GBps": nbytes / t / 1e9}
                print(k, rows[k], flush=True)
            # wall time of a bench-like timed run: launches + Runtime.sync (its 0.5 ms sleeps)
            ids = cuda.to_device(rng.integers(0, n_req, 4 if small else 1 << 15))
            for _ in range(2):
                t = time.perf_counter()
                req_g[rblocks, 256 if not small else 64](h, ids, 1, elems, n_req, rout_g)
                rt.sync()
                rows.setdefault("wall_gids_sync_ms", []).append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                req_p[rblocks, 256 if not small else 64](ph, ids, 1, elems, n_req, rout_p)
                cuda.synchronize()
                rows.setdefault("wall_plain_sync_ms", []).append((time.perf_counter() - t) * 1e3)
            print({k: v for k, v in rows.items() if k.startswith("wall")})
        rt.sync()
        for name, k in (("req_g", req_g), ("req_p", req_p),
                        ("seq_g", mb.sequential_reads_gids), ("seq_p", mb.sequential_reads_plain),
                        ("paged", mb.paged_sequential_reads_gids),
                        ("rand_g", mb.random_reads_gids)):
            rows[f"res_{name}"] = mb._kernel_resources(k, 256)
            print(name, rows[f"res_{name}"])
        if out_path:
            with open(out_path, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
