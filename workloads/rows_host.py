"""The host's Python cost of one ``Runtime.gather_rows`` call, with its kernel launches stubbed.

``NUMBA_ENABLE_CUDASIM=1 python -m workloads.rows_host [--calls N] [--batch R] [--profile]``
runs in the CUDA simulator, on a machine with no GPU: every launch of the row kernels is a
no-op (``gids.rows.launch``, :func:`kernels.launch.launch` on a GPU, is stubbed), so what is
timed is ``gids/rows.py``'s own work per call (checks, interop, grid, bookkeeping): the part of
the GPU's host cost that does not depend on numba-cuda's launch. Cases: device row indices
(int64) into one device ``out``; the same with a new ``out`` object each call over the same
memory (a loader's slice of one buffer); host row indices (numpy int64, uploaded through the
staging pool) into one ``out``. Prints microseconds per call (median and least of blocks of
1000 calls) and, with ``--profile``, cProfile's top entries for the first case.
"""
import argparse
import cProfile
import pstats
import sys
import time

import numpy as np

import gids


def _no_launch(kernel, griddim, blockdim, stream, *args):
    """Stands for ``kernels.launch.launch``: launches nothing."""


def _stub_launches(rows_module):
    """Make ``rows_module``'s (``gids.rows``) kernel launches no-ops; returns a function that
    puts them back."""
    saved = rows_module.launch
    rows_module.launch = _no_launch

    def restore():
        rows_module.launch = saved
    return restore


def _us_per_call(call, n_calls, block=1000):
    """``(median, least)`` over blocks of ``block`` calls of the microseconds per call (the
    least: the block that other processes on a shared machine disturbed least)."""
    call()
    per_block = []
    for _ in range(max(1, n_calls // block)):
        t0 = time.perf_counter_ns()
        for _ in range(block):
            call()
        per_block.append((time.perf_counter_ns() - t0) / block / 1e3)
    return float(np.median(per_block)), float(np.min(per_block))


def cases(batch, n_rows=4096, width=16, seed=3):
    """``(runtime, [(name, call)])``: gathers of ``batch`` rows of an ``n_rows`` x ``width``
    float32 array (the width does not change the host's work) through an open Runtime, which
    the caller closes."""
    from numba import cuda
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n_rows, width)).astype(np.float32)
    rt = gids.Runtime(cache_bytes=2 * data.nbytes, page_size=4096)
    a = rt.open_array(data)
    host_rows = rng.integers(0, n_rows, size=batch).astype(np.int64)
    dev_rows = cuda.to_device(host_rows)
    out = cuda.device_array((batch, width), dtype=np.float32)
    buffer = cuda.device_array((batch + 1, width), dtype=np.float32)
    return rt, [
        ("device int64 rows, the same out", lambda: rt.gather_rows(a, dev_rows, out=out)),
        ("device int64 rows, a new out slice each call",
         lambda: rt.gather_rows(a, dev_rows, out=buffer[:batch])),
        ("host int64 rows, the same out", lambda: rt.gather_rows(a, host_rows, out=out)),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.rows_host")
    parser.add_argument("--calls", type=int, default=10_000, help="calls per case (10000)")
    parser.add_argument("--batch", type=int, default=32768,
                        help="rows per gather (32768: a GNN batch's feature gather)")
    parser.add_argument("--profile", action="store_true", help="cProfile the first case")
    args = parser.parse_args(argv)
    if not gids.SIMULATOR:
        print("workloads.rows_host: run it in the simulator (NUMBA_ENABLE_CUDASIM=1)",
              file=sys.stderr)
        return 2
    from gids import rows
    restore = _stub_launches(rows)
    rt, timed = cases(args.batch)
    try:
        for name, call in timed:
            median, least = _us_per_call(call, args.calls)
            print(f"{name}: {median:.2f} us per call (median of blocks of 1000 calls; "
                  f"least {least:.2f})", flush=True)
        if args.profile:
            name, call = timed[0]
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                call()
            prof.disable()
            print(f"\ncProfile, {name}, {args.calls} calls:")
            pstats.Stats(prof).sort_stats("tottime").print_stats(40)
    finally:
        rt.close()
        restore()
    return 0


if __name__ == "__main__":
    sys.exit(main())
