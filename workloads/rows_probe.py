"""A row gather watched while it runs, for a gather that does not end (GPU only).

``python -m workloads.rows_probe [--width 300] [--rows 8000] [--gathers 20000]
[--cache-mib 2] [--seconds 60] [--interval 2] [--timeout 10]`` gathers ``--gathers`` random rows
of a ``--rows`` x ``--width`` float32 array (a ``MemoryStore``, 4 KiB pages, one launch) and,
every ``--interval`` seconds while the kernel runs, copies the page-state words and the error
record out on a non-blocking stream of their own (CuPy's), printing one JSON line a look:
pages BUSY (being loaded), VALID, ERROR, referenced, the largest count, and words no step of
the protocol makes for long (BUSY with VALID; a count above every lane of the grid: one that
ran below zero into the state bits). If the gather has not ended after ``--seconds`` it asks the
kernels to stop (``Runtime.abort``: every bounded wait gives up) and looks again: a kernel that
still runs then has lanes waiting without a bound. The last line is the verdict, with the
error ``Runtime.sync`` raised. The whole run takes at most about ``--seconds`` + 3 timeouts.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import gids
from gids import layout as L


def _look(rt, words, err, stream, lanes):
    """One copy of the page words and the error record on ``stream``: a dict of counts."""
    rt._page_state.copy_to_host(words, stream=stream)
    rt._err.copy_to_host(err, stream=stream)
    stream.synchronize()
    state = words[:rt._n_pages]
    refs = state & L.PAGE_REF_MASK
    busy = (state & L.PAGE_BUSY) != 0
    valid = (state & L.PAGE_VALID) != 0
    odd = np.flatnonzero((busy & valid) | (refs > lanes))
    return {"busy": int(busy.sum()), "valid": int(valid.sum()),
            "error": int(((state & L.PAGE_ERROR) != 0).sum()),
            "referenced": int((refs != 0).sum()), "max_refs": int(refs.max(initial=0)),
            "odd_words": [f"{int(p)}:{int(state[p]):#x}" for p in odd[:8]], "n_odd": len(odd),
            "err_record": [int(x) for x in err]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m workloads.rows_probe", description=__doc__)
    ap.add_argument("--width", type=int, default=300)
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--gathers", type=int, default=20000)
    ap.add_argument("--cache-mib", type=float, default=2)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=2)
    ap.add_argument("--timeout", type=float, default=10, help="the Runtime's wait bound (s)")
    args = ap.parse_args(argv)
    import cupy as cp
    from numba import cuda

    rng = np.random.default_rng(0)
    data = rng.standard_normal((args.rows, args.width)).astype(np.float32)
    rows = rng.integers(0, args.rows, size=args.gathers)
    side = cp.cuda.Stream(non_blocking=True)
    stream = cuda.external_stream(side.ptr)
    with gids.defaults.set(rows_resident_first=False), \
            gids.Runtime(cache_bytes=int(args.cache_mib * (1 << 20)),
                         timeout=args.timeout) as rt:
        a = rt.open_array(data)
        words = cuda.pinned_array(rt._page_state.size, dtype=np.uint64)
        err = cuda.pinned_array(L.ERR_WORDS, dtype=np.int64)
        lanes = 132 * 2048   # more than any grid's lanes: a count above it ran below zero
        start = time.monotonic()
        got = rt.gather_rows(a, rows)
        ended = False
        while time.monotonic() - start < args.seconds:
            ended = rt._kernels.streams_done()
            print(json.dumps({"t": round(time.monotonic() - start, 1), "ended": ended,
                              **_look(rt, words, err, stream, lanes)}), flush=True)
            if ended:
                break
            time.sleep(args.interval)
        aborted = False
        if not ended:
            rt.abort()
            aborted = True
            limit = time.monotonic() + 3 * args.timeout
            while not ended and time.monotonic() < limit:
                time.sleep(args.interval)
                ended = rt._kernels.streams_done()
            print(json.dumps({"t": round(time.monotonic() - start, 1), "after_abort": True,
                              "ended": ended, **_look(rt, words, err, stream, lanes)}),
                  flush=True)
        if not ended:
            print(json.dumps({"verdict": "still running after abort: lanes that wait without "
                                         "a bound"}), flush=True)
            os._exit(3)   # closing the Runtime would wait for the kernel
        try:
            rt.sync()
            right = bool((got.copy_to_host() == data[rows]).all())
            print(json.dumps({"verdict": "ended", "aborted": aborted, "right": right,
                              "seconds": round(time.monotonic() - start, 1)}), flush=True)
        except gids.GidsError as exc:
            print(json.dumps({"verdict": "ended with an error", "aborted": aborted,
                              "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
