"""``gids bench prefetch``: a batch loop whose compute per batch is about its I/O time, with
and without the next batch's pages loaded ahead (issue 23's prefetch target).

Each batch is ``batch_pages`` pages read nowhere else (so, unprefetched, every read misses):
one thread per page reads an element of it through ``gids.read`` (the read kernel), then a
compute kernel of one warp spins for ``compute`` ns. The compute time is set to the batch's
measured read time, the case where overlap gains most. Rows, each the same batches in a fresh
Runtime:

- ``none``: read batch k, compute; per batch about I/O + compute;
- ``prefetch``: ``rt.prefetch(batch k + 1)`` (host indices) on a side stream, then read batch
  k (after its own prefetch's event) and compute on the main stream: the next batch's I/O
  under this one's compute; per batch about max(I/O, compute) (target: <= 1.15x);
- ``hold``: the same with ``rt.hold(batch k + 1)``; batch k - 1's hold is released on the
  side stream after an event wait for batch k - 1's read, just before batch k + 1's hold (a
  release is a launch on the hold's stream: no wait on the host anywhere in the loop).

The host queues launches and event waits, and waits for nothing but batch k - 2's end before
it issues batch k (a loader's bounded queue: the GPU always has the next batch queued). The
events are made before the clock starts, and so is the first batch's prefetch or hold (the
pipeline's fill): the figure is the loop's steady state.
Every batch size of ``--batch-pages`` (default 8192 and 32768 pages on a GPU) runs all of this on
data of its own: the calls' host cost is about fixed per call, so side by side the sizes show
where it stops mattering (each row says its size).
Columns: batch pages, per batch (ms), I/O and compute per batch, per batch over max(I/O, compute) and over
their sum, and the host's time per batch inside the ``prefetch``, ``hold`` and ``release``
calls (``host_calls_ms``: where it nears the per batch time, the loop waits for the host, not
the GPU). ``--n-ssd 1,4`` adds rows under real-time emulation of that many modelled drives
(``--profile``), their compute calibrated to their own I/O. Every value read is checked
against the data (a row with a wrong value is marked and the command fails).
"""
import argparse
import os
import sys
import time

import gids  # first: picks the GPU or the simulator before numba.cuda loads

# isort: split
import numpy as np
from numba import cuda

from gids.device import now_ns
from workloads.report import command_line, write_report

MODES = ("none", "prefetch", "hold")
#: Batches the host issues ahead of the GPU at most.
AHEAD = 2
DEFAULT_PROFILE = "p5800x"


@cuda.jit
def read_kernel(h, idx, out):
    """out[k] = element idx[k], one thread each."""
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


@cuda.jit
def compute_kernel(ns, sink):
    """One warp spins for ``ns`` nanoseconds: the batch's compute, on few SMs, so that the
    prefetch kernel has the rest."""
    start = now_ns()
    n = 0
    while now_ns() - start < ns:
        n += 1
    if cuda.grid(1) == 0:
        sink[0] = n


def _event():
    """An event without timing (the simulator's take no arguments)."""
    return cuda.event() if gids.SIMULATOR else cuda.event(timing=False)


def _config(quick, o):
    sim = gids.SIMULATOR
    c = {"page_size": 512 if sim else 4096,
         "batch_pages": [8] if sim else ([2048] if quick else [8192, 32768]),
         "batches": 3 if sim else (12 if quick else 24),
         "reps": 1 if sim else 3,
         "n_ssd": [], "profile": DEFAULT_PROFILE, "store": "memory", "dir": None, "seed": 0}
    c.update({k: v for k, v in o.items() if v is not None})
    return c


def _batches(c, batch_pages, rng):
    """Element indices of each batch of ``batch_pages`` pages (one element of each of its
    distinct pages), and the data."""
    n_pages = (c["batches"] + 1) * batch_pages
    elems = c["page_size"] // 8
    data = rng.integers(0, 2**62, n_pages * elems, dtype=np.int64)
    pages = rng.permutation(n_pages).reshape(c["batches"] + 1, batch_pages)
    idx = pages * elems + rng.integers(0, elems, pages.shape)
    return data, [np.sort(b).astype(np.int64) for b in idx]


def _source(c, data):
    if c["store"] == "file":
        path = os.path.join(c["dir"] or "/var/tmp", f"gids_prefetch_{os.getpid()}.bin")
        data.tofile(path)
        return path
    return gids.MemoryStore(data)


def _run_loop(rt, a, batches, mode, compute_ns):
    """The timed loop over ``batches[:-1]`` (the last is only ever prefetched). Returns (seconds
    per batch, host seconds per batch inside the prefetch, hold and release calls, outputs)."""
    main = gids.side_stream()
    side = gids.side_stream()
    sink = cuda.device_array(1, dtype=np.int64)
    d_batches = [cuda.to_device(b) for b in batches]
    outs = [cuda.device_array(b.size, dtype=np.int64) for b in batches]
    threads = 128 if not gids.SIMULATOR else 8
    # Made before the clock starts: an event's creation (and its destruction, later) is host
    # work the loop need not do.
    loaded = [_event() for _ in batches]     # batch k's prefetch or hold has run (on side)
    finished = [_event() for _ in batches]   # batch k's read and compute have run (on main)
    holds = {}
    in_calls = 0.0                           # host seconds inside prefetch / hold / release

    def ahead(k):
        """Start loading batch k on the side stream; its event, which main waits for."""
        nonlocal in_calls
        t = time.perf_counter()
        if mode == "prefetch":
            rt.prefetch(a, batches[k], stream=side)
        else:
            holds[k] = rt.hold(a, batches[k], stream=side)
        in_calls += time.perf_counter() - t
        loaded[k].record(side)

    # The first batch's load fills the pipeline: done before the clock starts, so that the
    # figure is the loop's steady state.
    if mode != "none":
        ahead(0)
    cuda.synchronize()
    side.synchronize()
    in_calls = 0.0
    start = time.perf_counter()
    for k in range(len(batches) - 1):
        if k >= AHEAD:
            # As a loader's bounded queue: the host issues batch k once batch k - AHEAD has
            # run, which keeps the GPU's queue full and the staging pool at its steady size.
            finished[k - AHEAD].synchronize()
        if mode != "none":
            # Batch k + 1 loads while batch k computes, not earlier: more batches ahead than
            # the cache holds would evict each other. Side waits for batch k - 1's read (no
            # wait on the host); its hold goes on side before batch k + 1's.
            if k:
                finished[k - 1].wait(side)
                if mode == "hold":
                    t = time.perf_counter()
                    holds.pop(k - 1).release()
                    in_calls += time.perf_counter() - t
            ahead(k + 1)
            loaded[k].wait(main)
        n = batches[k].size
        read_kernel[(n + threads - 1) // threads, threads, main](a.handle, d_batches[k], outs[k])
        compute_kernel[1, 32, main](compute_ns, sink)
        finished[k].record(main)
    main.synchronize()
    side.synchronize()
    seconds = (time.perf_counter() - start) / (len(batches) - 1)
    for hold in holds.values():
        hold.release()
    rt.sync()
    return seconds, in_calls / (len(batches) - 1), [o.copy_to_host() for o in outs[:-1]]


def _io_seconds(rt, a, batches):
    """Seconds per batch of the reads alone (every one a miss), on fresh pages."""
    rt.invalidate()
    main = gids.side_stream()
    threads = 128 if not gids.SIMULATOR else 8
    d = [cuda.to_device(b) for b in batches[:-1]]
    outs = [cuda.device_array(b.size, dtype=np.int64) for b in d]
    cuda.synchronize()
    start = time.perf_counter()
    for b, o in zip(d, outs):
        read_kernel[(b.size + threads - 1) // threads, threads, main](a.handle, b, o)
    main.synchronize()
    rt.sync()
    return (time.perf_counter() - start) / len(d)


def run_prefetch(o, command="gids bench prefetch", progress=True):
    c = _config(o.pop("quick", False), o)
    rng = np.random.default_rng(c["seed"])
    rows = []
    for batch_pages in c["batch_pages"]:
        rows += _run_size(c, batch_pages, rng, progress)
    return {"version": 2, "sweep": "prefetch", "command": command,
            "simulator": gids.SIMULATOR, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "config": {k: c[k] for k in ("page_size", "batch_pages", "batches", "reps",
                                         "profile", "store")},
            "target_vs_max": 1.15, "rows": rows}


def _run_size(c, batch_pages, rng, progress):
    """The rows of one batch size: each loop, on the RAM store and under each emulation."""
    data, batches = _batches(c, batch_pages, rng)
    ref = [data[b] for b in batches[:-1]]
    cache_pages = 4 * batch_pages     # two batches held or loading, room for the rest
    source = _source(c, data)
    rows = []
    emulations = [None] + [n for n in c["n_ssd"]]
    try:
        for n_ssd in emulations:
            opts = {} if n_ssd is None else {"ssd": c["profile"], "n_ssd": n_ssd}
            with gids.Runtime(cache_pages=cache_pages, page_size=c["page_size"], **opts) as rt:
                a = rt.open_array(source, np.int64, shape=data.shape)
                for mode in MODES:                             # compile and warm up
                    _run_loop(rt, a, batches[:3], mode, 0)
                io_s = min(_io_seconds(rt, a, batches) for _ in range(c["reps"]))
                compute_ns = int(io_s * 1e9)
                for mode in MODES:
                    best = None
                    correct = True
                    for _ in range(c["reps"]):
                        rt.invalidate()
                        rt.reset_stats()
                        seconds, host_s, outs = _run_loop(rt, a, batches, mode, compute_ns)
                        correct &= all(np.array_equal(x, y) for x, y in zip(outs, ref, strict=True))
                        if best is None or seconds < best:
                            best, best_host = seconds, host_s
                    s = rt.stats()
                    compute_s = compute_ns / 1e9
                    rows.append({
                        "batch_pages": batch_pages, "mode": mode,
                        "emulation": None if n_ssd is None else
                        {"ssd": c["profile"], "n_ssd": n_ssd},
                        "per_batch_ms": best * 1e3, "io_ms": io_s * 1e3,
                        "compute_ms": compute_s * 1e3, "host_calls_ms": best_host * 1e3,
                        "vs_max": best / max(io_s, compute_s),
                        "vs_sum": best / (io_s + compute_s),
                        "misses": s.misses, "hits": s.hits, "prefetched": s.prefetched,
                        "held_pages": s.held_pages, "correct": bool(correct)})
                    if progress:
                        sys.stderr.write(f"prefetch bench: {_label(rows[-1])} "
                                         f"{best * 1e3:.2f} ms/batch\n")
    finally:
        if isinstance(source, str):
            os.unlink(source)
    return rows


def _label(row):
    e = row["emulation"]
    return f"{row['batch_pages']} pages, {row['mode']}" + \
        ("" if e is None else f" ({e['n_ssd']} x {e['ssd']})")


def format_prefetch(result):
    """The report: one table, the rows of each batch size together (a blank-celled separator
    row between sizes), then the target per prefetch row."""
    lines = ["gids bench prefetch" + (" (simulator: times mean nothing)" if result["simulator"]
                                      else ""),
             "", ("| batch pages | loop | SSDs | per batch ms | I/O ms | compute ms "
                  "| / max(I/O, compute) | / sum | host ms in calls | misses | correct |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    size = None
    for r in result["rows"]:
        e = r["emulation"]
        if size is not None and r["batch_pages"] != size:
            lines.append("| | | | | | | | | | | |")
        size = r["batch_pages"]
        lines.append(f"| {size} | {r['mode']} "
                     f"| {'-' if e is None else str(e['n_ssd']) + ' x ' + e['ssd']} "
                     f"| {r['per_batch_ms']:.3f} | {r['io_ms']:.3f} | {r['compute_ms']:.3f} "
                     f"| {r['vs_max']:.2f}x | {r['vs_sum']:.2f}x | {r['host_calls_ms']:.3f} "
                     f"| {r['misses']} "
                     f"| {'yes' if r['correct'] else 'NO'} |")
    met = [r for r in result["rows"] if r["mode"] == "prefetch"]
    lines.append("")
    for r in met:
        ok = r["vs_max"] <= result["target_vs_max"]
        lines.append(f"target: {_label(r)} per batch {r['vs_max']:.2f}x max(I/O, compute) "
                     f"(<= {result['target_vs_max']}x): {'met' if ok else 'missed'}")
    return "\n".join(lines) + "\n"


def _page_counts(text):
    """``--batch-pages``: a comma-separated list of page counts, each >= 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"pages per batch must be integers >= 1, got {text!r}")
    return values


def add_prefetch_arguments(p):
    """``gids bench prefetch`` options (the bench parser takes them; other sweeps ignore them).
    ``--n-ssd``, ``--profile``, ``--reps``, ``--store``, ``--dir``, ``--seed`` are shared."""
    g = p.add_argument_group("prefetch sweep")
    g.add_argument("--batch-pages", type=_page_counts,
                   help="pages per batch, a comma-separated list: each size runs every loop "
                        "(default 8192,32768; --quick 2048)")
    g.add_argument("--batches", type=int, help="batches per timed loop (default 24)")


def cmd_prefetch(args):
    o = {"batch_pages": args.batch_pages, "batches": args.batches, "reps": args.reps,
         "n_ssd": args.n_ssd, "profile": args.profile, "store": args.store, "dir": args.dir,
         "seed": args.seed, "quick": args.quick}
    for name in ("batches", "reps"):
        if o[name] is not None and o[name] < 1:
            sys.stderr.write(f"gids bench: error: --{name.replace('_', '-')} must be >= 1\n")
            return 2
    if o["profile"] is not None and o["profile"] not in gids.ssd_profiles():
        sys.stderr.write(f"gids bench: error: --profile must be one of "
                         f"{', '.join(gids.ssd_profiles())}\n")
        return 2
    result = run_prefetch(o, command=command_line(args), progress=not args.no_progress)
    return write_report(args, "prefetch", result, format_prefetch(result))
