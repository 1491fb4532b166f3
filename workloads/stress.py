"""Stress run of the write path: many threads, a small cache, mixed reads and writes, then flush,
and the file checked against a model the host computes without recording any write.

    python -m workloads.stress --seconds 60 --file-gib 16 --cache-fraction 0.01

The file holds ``N`` int64 elements (``N`` a power of two), created sparse, so all zeros. The run
is a sequence of rounds, one kernel each, of ``T`` threads. In round ``r`` (from 1):

- thread ``t`` writes element ``w_r(t) = (a_r * t + b_r) mod N`` (``a_r`` odd, so ``w_r`` is a
  bijection of ``[0, N)`` and no two threads of a round write the same element), the value
  ``value(e, r)``, a hash of (element, round) that is never 0;
- it reads that element back (read-your-own-write: must be ``value(e, r)``);
- it reads ``--reads`` other elements and checks each against the model: the value of the last
  earlier round that wrote it (``e`` was written in round ``s`` iff
  ``j = a_s^-1 * (e - b_s) mod N < T``), or 0. An element that some other thread also writes in
  this round may hold either value; both are accepted (and counted as ambiguous).

After the last round, ``Runtime.flush()`` writes back every dirty page and fsyncs the file; the
host then rebuilds the last (round, value) of every written element from the round parameters
alone and compares: written elements must hold their last value, every other element 0 (checked
by counting the non-zero words of the whole file). Mismatches of either kind are reported; the
exit status is 1 if there is any, or if any round raised (a timeout would be a hang caught).

It scales down to a test in the simulator (``--elements 4096 --threads 64 --rounds 2``).
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

import gids  # first: it picks the GPU or the simulator before numba loads

# isort: split
from numba import cuda

from gids import console
from gids.device import WARP_SIZE

#: Checks counted by the kernel (int64 counters in device memory).
C_CHECKS, C_BAD_OWN, C_BAD_READ, C_AMBIGUOUS = range(4)
MAX_ROUNDS = 1 << 14
_K1 = 2654435761   # Knuth's multiplicative hash constant
_K2 = 2246822519   # xxHash's PRIME32_2


@cuda.jit(device=True)
def value_of(e, r):
    """The value round ``r`` writes into element ``e``: never 0 (0 means never written)."""
    v = (e + 1) * _K1 + r * _K2
    v ^= v >> 29
    return v | 1


def value_np(e, r):
    """:func:`value_of` over an int64 array (same wrap-around arithmetic)."""
    v = (e.astype(np.int64) + 1) * np.int64(_K1) + np.int64(r) * np.int64(_K2)
    v ^= v >> 29
    return v | 1


@cuda.jit(device=True)
def expected_before(e, r, params, mask, threads):
    """Element ``e``'s value before round ``r``: that of the last earlier round writing it."""
    s = r - 1
    while s >= 1:
        j = (params[s, 1] * (e - params[s, 2])) & mask
        if j < threads:
            return value_of(e, s)
        s -= 1
    return 0


@gids.jit   # registers capped, as for every kernel that calls gids.read
def round_kernel(h, r, params, mask, threads, reads, counts):
    """Round ``r``: write, read back, read others (see the module's docstring)."""
    t = cuda.grid(1)
    if t >= threads:
        return
    a = params[r, 0]
    b = params[r, 2]
    e = (a * t + b) & mask
    mine = value_of(e, r)
    gids.write(h, e, mine)
    checks = 1
    bad_own = 0
    bad_read = 0
    ambiguous = 0
    if gids.read(h, e) != mine:
        bad_own = 1
    for k in range(reads):
        e2 = (params[r, 3] * (t * reads + k) + params[r, 4]) & mask
        got = gids.read(h, e2)
        before = expected_before(e2, r, params, mask, threads)
        checks += 1
        written_now = ((params[r, 1] * (e2 - b)) & mask) < threads
        if written_now:
            ambiguous += 1
            if got != before and got != value_of(e2, r):
                bad_read += 1
        elif got != before:
            bad_read += 1
    cuda.atomic.add(counts, C_CHECKS, checks)
    if bad_own:
        cuda.atomic.add(counts, C_BAD_OWN, bad_own)
    if bad_read:
        cuda.atomic.add(counts, C_BAD_READ, bad_read)
    if ambiguous:
        cuda.atomic.add(counts, C_AMBIGUOUS, ambiguous)


def round_params(n, rounds, seed):
    """Per round: a (odd), a^-1 mod n, b, c (odd), d; row 0 unused (the initial zeros)."""
    rng = np.random.default_rng(seed)
    p = np.zeros((rounds + 1, 5), dtype=np.int64)
    for r in range(1, rounds + 1):
        a = int(rng.integers(0, n)) | 1
        p[r] = (a, pow(a, -1, n), int(rng.integers(0, n)), int(rng.integers(0, n)) | 1,
                int(rng.integers(0, n)))
    return p


def verify_file(path, n, threads, params, rounds, chunk=1 << 24):
    """Compare the file with the model; returns (mismatches, written elements)."""
    j = np.arange(threads, dtype=np.int64)
    elems = np.concatenate([(params[r, 0] * j + params[r, 2]) & (n - 1)
                            for r in range(rounds, 0, -1)])            # newest round first
    which = np.repeat(np.arange(rounds, 0, -1), threads)
    uniq, first = np.unique(elems, return_index=True)                  # first = newest
    want = np.empty(uniq.size, dtype=np.int64)
    for r in range(1, rounds + 1):
        sel = which[first] == r
        want[sel] = value_np(uniq[sel], r)
    data = np.memmap(path, dtype=np.int64, mode="r", shape=(n,))
    got = np.asarray(data[uniq])
    wrong = int(np.count_nonzero(got != want))
    nonzero = sum(int(np.count_nonzero(data[k:k + chunk])) for k in range(0, n, chunk))
    stray = nonzero - int(np.count_nonzero(got))   # non-zero words nobody wrote
    del data
    return wrong + stray, int(uniq.size)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m workloads.stress", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0,
                   help="run rounds until this much time has passed (default 60)")
    p.add_argument("--rounds", type=int, default=None, help="run exactly this many rounds instead")
    p.add_argument("--file-gib", type=float, default=16.0, help="file size (default 16 GiB)")
    p.add_argument("--elements", type=int, default=None,
                   help="file size in int64 elements instead (rounded down to a power of two)")
    p.add_argument("--cache-fraction", type=float, default=0.01,
                   help="cache size as a fraction of the file (default 0.01)")
    p.add_argument("--threads", type=int, default=1 << 20, help="threads per round (default 1 M)")
    p.add_argument("--reads", type=int, default=2, help="other elements read per thread and round")
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--timeout", type=float, default=None, help="Runtime timeout (s)")
    p.add_argument("--daemon-threads", type=int, default=None)
    p.add_argument("--engine", choices=["io_uring", "threads"], default=None,
                   help="the daemon's storage engine (default: gids.defaults, io_uring)")
    p.add_argument("--direct", action="store_true",
                   help="read aligned pages with O_DIRECT (default: through the page cache; "
                        "an O_DIRECT read of a page written back recently makes the kernel write "
                        "it to disk first, which would time the disk, not the runtime)")
    p.add_argument("--dir", default=None, help="where to create the file (default: the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here too")
    return p.parse_args(argv)


def run(args):
    """Run the stress test; returns the results dict (``ok`` says whether it passed)."""
    elements = args.elements if args.elements else int(args.file_gib * (1 << 30)) // 8
    n = 1 << math.floor(math.log2(elements))
    threads = min(args.threads, n)
    page_size = args.page_size or gids.defaults.get("page_size")
    cache_pages = max(int(n * 8 * args.cache_fraction) // page_size, WARP_SIZE)
    max_rounds = args.rounds if args.rounds is not None else MAX_ROUNDS - 1
    # Generous: 1 M threads over a cache of 1 % keep every slot busy, and one unlucky thread
    # may lose the race for a slot many times before it wins one (that is not a hang).
    timeout = args.timeout or 60.0
    params = round_params(n, max_rounds, args.seed)
    folder = tempfile.mkdtemp(prefix="gids-stress-", dir=args.dir)
    path = os.path.join(folder, "stress.bin")
    with open(path, "wb") as f:
        f.truncate(n * 8)   # sparse: all zeros, no time to write
    result = {"file_bytes": n * 8, "elements": n, "threads": threads, "reads_per_thread": args.reads,
                  "page_size": page_size, "cache_pages": cache_pages,
                  "cache_fraction": cache_pages * page_size / (n * 8), "simulator": gids.SIMULATOR,
                  "seconds": None if args.rounds is not None else args.seconds}
    try:
        with gids.Runtime(cache_pages=cache_pages, page_size=page_size, timeout=timeout,
                          daemon_threads=args.daemon_threads, engine=args.engine) as rt:
            result["engine"] = rt.daemon.engine
            result["engine_note"] = rt.daemon.engine_note
            a = rt.open_array(path, np.int64, shape=n, mode="r+", direct=args.direct)
            d_params = cuda.to_device(params)
            counts = cuda.to_device(np.zeros(4, dtype=np.int64))
            block = 32 if gids.SIMULATOR else 256
            grid = (threads + block - 1) // block
            start = time.monotonic()
            rounds = 0
            compile_s = None
            while rounds < max_rounds:
                t0 = time.monotonic()
                round_kernel[grid, block](a.handle, rounds + 1, d_params, n - 1, threads,
                                          args.reads, counts)
                rt.sync()
                rounds += 1
                if compile_s is None:
                    compile_s = time.monotonic() - t0   # the first round includes compiling
                    start = time.monotonic()
                print(f"round {rounds}: {time.monotonic() - t0:.2f} s", flush=True)
                if args.rounds is None and time.monotonic() - start >= args.seconds:
                    break
            run_s = time.monotonic() - start
            t0 = time.monotonic()
            rt.flush()
            flush_s = time.monotonic() - t0
            stats = rt.stats()
            c = counts.copy_to_host()
        t0 = time.monotonic()
        mismatches, written = verify_file(path, n, threads, params, rounds)
        verify_s = time.monotonic() - t0
    finally:
        if not args.keep:
            os.remove(path)
            os.rmdir(folder)
    ops_writes = rounds * threads
    ops_reads = rounds * threads * (1 + args.reads)
    result.update(
        rounds=rounds, first_round_s=compile_s, run_s=run_s, flush_s=flush_s, verify_s=verify_s,
        writes=ops_writes, reads=ops_reads, checks=int(c[C_CHECKS]),
        ambiguous_reads=int(c[C_AMBIGUOUS]), bad_own_reads=int(c[C_BAD_OWN]),
        bad_reads=int(c[C_BAD_READ]), file_mismatches=mismatches, elements_written=written,
        ios=stats.ios, bytes_read=stats.bytes_read, evictions=stats.evictions,
        writebacks=stats.writebacks, flushed=stats.flushed, bytes_written=stats.bytes_written,
        hits=stats.hits, misses=stats.misses, hangs=0)
    result["ok"] = (result["bad_own_reads"] == 0 and result["bad_reads"] == 0
                    and mismatches == 0)
    return result


def table(r):
    """The run's result as a two-column table (measure, value)."""
    per_round = (r["writes"] + r["reads"]) / max(r["rounds"], 1)
    rate = (f"{(r['rounds'] - 1) * per_round / r['run_s']:,.0f}/s after round 1"
            if r["rounds"] > 1 and r["run_s"] > 0 else "one round")
    rows = [
        ("file", f"{r['file_bytes'] / 2**30:.3g} GiB, {r['elements']:,} int64"),
        ("cache", (f"{r['cache_pages']:,} pages of {r['page_size']} B "
                   f"({r['cache_fraction']:.2%} of the file)")),
        ("threads x rounds", (f"{r['threads']:,} x {r['rounds']}  "
                              f"(first round incl. compile {r['first_round_s']:.1f} s, "
                              f"then {r['run_s']:.1f} s)")),
        ("operations", f"{r['writes']:,} writes, {r['reads']:,} reads ({rate})"),
        ("lookups", f"{r['hits'] + r['misses']:,} (hits {r['hits']:,})"),
        ("bytes", f"read {r['bytes_read']:,}, written {r['bytes_written']:,}"),
        ("evictions", f"{r['evictions']:,}"),
        ("storage engine", r.get("engine", "-") + (f" ({r['engine_note']})"
                                                   if r.get("engine_note") else "")),
        ("write-backs", (f"{r['writebacks']:,} on eviction, {r['flushed']:,} by flush "
                         f"({r['flush_s']:.1f} s incl. fsync)")),
        ("checks in kernels", (f"{r['checks']:,} ({r['ambiguous_reads']:,} of elements also "
                               "written that round)")),
        ("mismatches", (f"own writes {r['bad_own_reads']}, reads {r['bad_reads']}, "
                        f"file {r['file_mismatches']} (over {r['elements_written']:,} written "
                        f"elements, verified in {r['verify_s']:.1f} s)")),
        ("hangs", f"{r['hangs']} (every round returned; a timeout would have raised)"),
        ("result", "PASS" if r["ok"] else "FAIL"),
    ]
    return console.table(["measure", "value"], rows, left=(0, 1))


def main(argv=None):
    args = parse_args(argv)
    try:
        result = run(args)
    except gids.GidsError as exc:   # a timeout here is a hang the runtime caught
        print(f"FAIL: {type(exc).__name__}: {exc}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ok": False, "error": f"{type(exc).__name__}: {exc}"}, f, indent=1)
        return 1
    print(table(result), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
