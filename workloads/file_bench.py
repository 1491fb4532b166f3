"""``gids bench files``: gids on real files, each storage engine side by side, against the disk's
own ceiling measured in the same run.

Rows (4 KiB random reads of distinct pages: every read a miss):

- ``probe``: the engine alone, no GPU: one thread's ring at ``--ceiling-depth`` (256) reads in
  flight, O_DIRECT, waiting for CQEs as the daemon does (``ring_submit_wait``): what one daemon
  thread could get from the disk; a row with ``t`` threads is a fraction (``of probe``) of
  ``t`` probes, at most the ceiling;
- ``host``: the daemon alone, no GPU: one io_uring daemon thread serving the Runtime's queues
  (count and depth), a host thread posting requests into them as the GPU would
  (:func:`host_daemon_run`): the daemon's own cost beside the probe's, without the GPU's;
- ``ceiling``: the disk alone, O_DIRECT, no GPU: io_uring at high depth from several threads
  (one ring per thread) and synchronous ``pread`` from many threads; of these and the probe,
  the way with the best median over the run's probes is the disk's ceiling;
- ``direct``: ``rt.gather`` all-miss through an O_DIRECT ``FileStore``, each engine at each
  daemon thread count (1, 2, 4, 8); the io_uring rows run in ``--direct-rounds`` rounds spread
  over the O_DIRECT rows, their fractions pooled over every round's runs (:func:`pool_rounds`);
- ``cached``: the same file read through the page cache (``FileStore(direct=False)``, warmed),
  beside the ``MemoryStore`` staging-copy path (``zero_copy=False``) at the same thread count:
  the engine's own cost over a memcpy. The rows run in turn for ``--cached-rounds`` rounds;
  ``of_memory`` is the median of the rounds' ratios (``of_memory_rounds``), a row's rate the
  median of its rounds' (:func:`merge_rounds`);
- ``emulated``: ``ssd="980pro"`` with ``n_ssd`` 1 and 4, a page-cached file behind the model
  (so the disk is not the limit), each engine, beside the model's own IOPS for that load (a
  closed-loop replay at the run's concurrency: the engine's capacity, at most the GPU queues'
  entries), and beside the ``no model`` row (the same engine and threads on the same pages
  without the model: the host's own ceiling): ``of_host`` and ``bound`` (:func:`what_bounds`:
  model, host or engine);
- ``host emulated``: the same with the GPU taken out (io_uring daemon threads driven from a
  host thread, no model and each drive count): where these reach the model and the GPU rows
  do not, the GPU's side bounds those;
- ``kvikio``: KvikIO (``CuFile.pread`` per page, all in flight) reading the same pages into GPU
  memory, where ``import kvikio`` works; otherwise the row says why not.

A virtual disk's rate moves between runs by more than the differences measured here, so the
``host`` and ``direct`` rows are not held against one ceiling taken at the start: each of their
timed runs lies between two probes of the disk (the probe and the ceiling rows again,
``--probe-pages`` reads each, the ways in an order that turns from probe to probe; all in
``result['probes']``, each row's own in ``probes``), and a
row's ``of_ceiling`` and ``of_probe`` are the median over its runs of the run's rate over the
mean of the two probes around it (:func:`bracketed`); each run's rate is kept
(``rep_pages_per_s``), and the run's ceiling is the median of its probes. A probe's ceiling is
the rate of the disk's best way of reading over the whole run (``ceiling_way``), not of the
fastest way at that probe, whose noisy maximum would read high (:func:`settle_ceiling`).

Each gids row also says, over its timed runs: the engine's mean I/O time (``engine I/O us``:
from the daemon taking a request to its CQE, or to its copy or ``pread`` returning) and the
GPU's (``GPU I/O us``: from a request published to its completion seen, queueing for the
daemon included), the requests in flight per daemon thread (mean, by Little's law from the
engine's time and the rate; peak, counted by the ring), and the daemon threads' CPU time per
page (from ``/proc``); the probe and ceiling rows give their threads' CPU per page, the host
row also its passes over the queues and queue visits per page.

Every gids row is checked against the file's bytes (``correct``). Writes ``files.json`` and
``files.md`` into ``--out``. In the CUDA simulator sizes are tiny and the figures test the
harness only.
"""
import collections
import itertools
import os
import sys
import tempfile
import threading
import time

import gids  # first: picks the GPU or the simulator before numba.cuda loads

# isort: split
import numpy as np
from numba import cuda, njit, types

from gids import SIMULATOR, FileStore, MemoryStore, defaults, replay
from gids import layout as L
from gids.host import (
    DIRECT_ALIGN,
    IORING_OP_READ,
    T_COLUMNS,
    HostDaemon,
    SsdModel,
    UringRing,
    ring_consume,
    ring_cqe,
    ring_prep,
    ring_ready,
    ring_room,
    ring_submit_wait,
    ssd_profile,
    synthetic_trace,
    uring_probe,
)
from workloads.report import command_line, write_report

PAGE = 4096
ENGINES = ("io_uring", "threads")
#: files.json's layout: 2 when every O_DIRECT row carries its probes and bracketed fractions
#: (``of_ceiling``, ``of_probe``), and the emulated rows their host ceiling and ``bound``; 3
#: when each probe's ``ceiling`` is the disk's best way of reading over the run
#: (``ceiling_way``, :func:`settle_ceiling`), not the fastest way at that probe; 4 when the
#: page-cached rows run in rounds (``of_memory`` paired per round, :func:`merge_rounds`); 5 when
#: the O_DIRECT io_uring rows run in rounds too (fractions over every round's runs,
#: :func:`pool_rounds`).
VERSION = 5

_pread = types.ExternalFunction("pread", types.intp(types.int32, types.uintp, types.uintp,
                                                     types.int64))


def default_options():
    sim = SIMULATOR
    return {"file_bytes": (256 << 10) if sim else (4 << 30),
            "pages": 24 if sim else 200_000,
            "daemon_threads": [1, 2] if sim else [1, 2, 4, 8],
            "emulated_threads": 1 if sim else 4,
            "n_ssd": [1, 4], "profile": "980pro",
            "ceiling_depth": 8 if sim else 256,
            "ceiling_threads": [2] if sim else [4],
            "pread_threads": 2 if sim else 64,
            "probe_pages": 16 if sim else 20_000,
            "reps": 1 if sim else 3, "cached_rounds": 1 if sim else 3,
            "direct_rounds": 1 if sim else 3, "dir": None,
            "seed": 0}


@njit(nogil=True, cache=True)
def _next(x):
    x ^= (x << 13) & 0x7FFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0x7FFFFFFFFFFFFFFF
    return x


@njit(nogil=True, cache=True)
def _uring_random_reads(r, fd, buf, n_reads, n_pages, page, depth, seed):
    """``n_reads`` random page reads through ring ``r``, ``depth`` in flight; returns failures."""
    x = seed | 1
    issued = 0
    done = 0
    failed = 0
    while done < n_reads:
        while issued < n_reads and ring_room(r) > 0:
            x = _next(x)
            slot = issued % depth
            ring_prep(r, IORING_OP_READ, fd, buf + slot * page, page,
                      (x % n_pages) * page, 0, slot)
            issued += 1
        ring_submit_wait(r, 1_000_000)
        n = ring_ready(r)
        for i in range(n):
            _, res = ring_cqe(r, i)
            if res != page:
                failed += 1
        ring_consume(r, n)
        done += n
    return failed


@njit(nogil=True, cache=True)
def _pread_random_reads(fd, buf, n_reads, n_pages, page, seed):
    x = seed | 1
    failed = 0
    for _ in range(n_reads):
        x = _next(x)
        if _pread(fd, buf, page, (x % n_pages) * page) != page:
            failed += 1
    return failed


def _aligned(nbytes):
    raw = np.zeros(nbytes + DIRECT_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % DIRECT_ALIGN
    return raw[start:start + nbytes]


def _parallel(n_threads, work):
    """Run ``work(k)`` in ``n_threads`` threads at once; (seconds, results, the threads' CPU
    seconds together)."""
    out = [None] * n_threads
    cpu = [0.0] * n_threads

    def run(k):
        c = time.thread_time()
        out[k] = work(k)
        cpu[k] = time.thread_time() - c
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t, out, sum(cpu)


def uring_row(path, n_reads, depth, threads=1, seed=0):
    """``n_reads`` random 4 KiB reads of ``path``, O_DIRECT, through ``threads`` rings (one per
    thread) at ``depth`` reads in flight each: the probe row (one thread) or a ceiling row,
    with the threads' CPU us per page."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    n_pages = os.path.getsize(path) // PAGE
    # Each thread's ring is set up as a daemon thread's is: its own (owned, enabled by it).
    rings = [UringRing(depth, owned=True) for _ in range(threads)]
    bufs = [_aligned(depth * PAGE) for _ in range(threads)]
    per = n_reads // threads

    def reads(k):
        rings[k].enable()
        return _uring_random_reads(rings[k].args, fd, bufs[k].ctypes.data, per, n_pages, PAGE,
                                   depth, seed * 1000 + k + 7)
    try:
        with UringRing(8) as warm:   # compile, warm (into a buffer that outlives the reads)
            scratch = _aligned(8 * PAGE)
            _uring_random_reads(warm.args, fd, scratch.ctypes.data, 8, n_pages, PAGE, 8, 1)
        secs, failed, cpu = _parallel(threads, reads)
    finally:
        for r in rings:
            r.close()
        os.close(fd)
    return {"kind": "probe" if threads == 1 else "ceiling", "engine": "io_uring",
            "threads": threads, "depth": depth, "pages": per * threads, "seconds": secs,
            "pages_per_s": per * threads / secs, "correct": sum(failed) == 0,
            "daemon_cpu_us_per_page": cpu / (per * threads) * 1e6}


def disk_ceiling(path, n_reads, o, seed=None, turn=0):
    """The disk's 4 KiB random-read IOPS, O_DIRECT: the probe row (io_uring, one thread at
    depth), rows for io_uring at depth from several threads, and one for pread from many
    threads (a disk that serves synchronous reads better than a ring shows it here). The ways
    run one after another, starting at the ``turn``-th (mod their count), so that probes with
    turning ``turn`` give no way the place right after a timed run or the last place every
    time (a virtual disk reads differently after a pause or a burst); rows in that order."""
    seed = o["seed"] if seed is None else seed
    ways = []
    if uring_probe() is None:
        ways += [lambda t=t: uring_row(path, n_reads, o["ceiling_depth"], t, seed)
                 for t in [1, *o["ceiling_threads"]]]
    ways.append(lambda: _pread_row(path, n_reads, o["pread_threads"], seed))
    turn %= len(ways)
    return [way() for way in ways[turn:] + ways[:turn]]


def _pread_row(path, n_reads, threads, seed):
    """``n_reads`` random 4 KiB reads of ``path``, O_DIRECT, by ``threads`` threads each
    calling ``pread`` (one read in flight each): a ceiling row."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    n_pages = os.path.getsize(path) // PAGE
    try:
        bufs = [_aligned(PAGE) for _ in range(threads)]
        per = max(1, n_reads // threads)
        _pread_random_reads(fd, bufs[0].ctypes.data, 8, n_pages, PAGE, 1)
        secs, failed, cpu = _parallel(threads, lambda k: _pread_random_reads(
            fd, bufs[k].ctypes.data, per, n_pages, PAGE, seed * 1000 + k + 99))
    finally:
        os.close(fd)
    return {"kind": "ceiling", "engine": "pread", "threads": threads, "depth": 1,
            "pages": per * threads, "seconds": secs, "pages_per_s": per * threads / secs,
            "correct": sum(failed) == 0,
            "daemon_cpu_us_per_page": cpu / (per * threads) * 1e6}


def disk_now(path, o, t0, seed, turn=0):
    """One probe of the disk between timed runs: :func:`disk_ceiling` at ``o['probe_pages']``
    reads a row, its ways starting at the ``turn``-th. ``probe``: one thread's
    ring (None without io_uring); ``ways``: each way of reading the disk (rings at depth,
    many ``pread`` threads) and its rate, in the order read; ``best_now``: the
    fastest way this time and ``ceiling_max`` its rate; ``at``: seconds since ``t0``. Each
    probe's ``ceiling`` is set once every probe is in (:func:`settle_ceiling`)."""
    rows = disk_ceiling(path, o["probe_pages"], o, seed, turn)
    probe = next((r["pages_per_s"] for r in rows if r["kind"] == "probe"), None)
    ways = {f"{r['engine']} x{r['threads']}": r["pages_per_s"] for r in rows}
    best = max(ways, key=ways.get)
    return {"at": time.perf_counter() - t0, "probe": probe, "ways": ways, "best_now": best,
            "ceiling_max": ways[best], "correct": all(r["correct"] for r in rows)}


def settle_ceiling(probes):
    """Set each probe's ``ceiling`` to the rate of the disk's best way of reading, the one
    with the highest median over all ``probes``, and return that way's name.

    Not the fastest way at each probe: each way's rate is a short, noisy sample, and the
    largest of several noisy samples is biased upwards (by about one standard deviation for
    three ways), so a run at exactly the disk's rate would read as a few per cent short of it.
    One way, the same at every probe, is an unbiased sample of the disk as it was then."""
    if not probes:
        return None
    way = max(probes[0]["ways"], key=lambda w: np.median([p["ways"][w] for p in probes]))
    for p in probes:
        p["ceiling"] = p["ways"][way]
    return way


def run_ratios(rates, refs):
    """``rates[i] / mean(refs[i], refs[i + 1])`` for each timed run: the run against the disk
    probed just before and just after it (the runs and probes alternate, a probe first and
    last), so that the disk drifting between runs moves rate and reference together. None
    without a rate or a reference."""
    if not rates or len(refs) != len(rates) + 1 or any(r is None for r in refs):
        return None
    return [rate / ((a + b) / 2) for rate, a, b in zip(rates, refs[:-1], refs[1:])]


def _median(xs):
    """The median of ``xs``, or None for None."""
    return None if xs is None else float(np.median(xs))


def bracketed(rates, refs):
    """The median of :func:`run_ratios` (None where it is None)."""
    return _median(run_ratios(rates, refs))


def merge_rounds(runs):
    """One row of the same row run in several rounds: the round with the median rate stands
    for them (its figures), with every round's rate (``round_pages_per_s``) and timed runs
    (``rep_pages_per_s``); correct if every round was, failed if one failed."""
    failed = next((r for r in runs if not r.get("pages_per_s")), None)
    if failed is not None:
        return failed
    rates = [r["pages_per_s"] for r in runs]
    row = dict(sorted(runs, key=lambda r: r["pages_per_s"])[(len(runs) - 1) // 2])
    row.update(rounds=len(runs), round_pages_per_s=rates,
               pages_per_s=float(np.median(rates)),
               rep_pages_per_s=[x for r in runs for x in r.get("rep_pages_per_s", [])],
               correct=all(r["correct"] for r in runs))
    return row


def of_disk(row):
    """A row's fractions of the disk from its probes (``row['probes']``, around each timed
    run, their ``ceiling`` settled): ``of_ceiling`` (of the disk's best way of reading it),
    ``of_ceiling_max`` (of the fastest way at each probe: the same noisy maximum a single
    probe would give, kept to show the estimator's bias) and ``of_probe`` (of ``threads``
    probes, one thread's ring each, at most that ceiling)."""
    rates, probes = row.get("rep_pages_per_s"), row.get("probes") or []
    refs = {"of_ceiling": [p["ceiling"] for p in probes],
            "of_ceiling_max": [p["ceiling_max"] for p in probes],
            "of_probe": [None if p["probe"] is None
                         else min(row["threads"] * p["probe"], p["ceiling"]) for p in probes]}
    for key, ref in refs.items():
        row[key + "_runs"] = run_ratios(rates, ref)
        row[key] = _median(row[key + "_runs"])
    return row


def pool_rounds(runs):
    """One O_DIRECT row run in several rounds, each round's runs between its own probes
    (:func:`of_disk` done on each): :func:`merge_rounds`, its fractions the median over every
    round's runs (``of_ceiling_runs`` and the like, each round's ``of_ceiling`` in
    ``of_ceiling_rounds``) and every round's probes in ``probes``: runs spread over minutes
    average the disk's slower moves, which the probes around each run do not pair away."""
    row = merge_rounds(runs)
    if not row.get("pages_per_s"):
        return row
    for key in ("of_ceiling", "of_ceiling_max", "of_probe"):
        rounds = [r.get(key + "_runs") for r in runs]
        pooled = None if None in rounds else [x for xs in rounds for x in xs]
        row[key + "_runs"] = pooled
        row[key] = _median(pooled)
    row["of_ceiling_rounds"] = [r.get("of_ceiling") for r in runs]
    row["probes"] = [p for r in runs for p in r.get("probes") or []]
    return row


def thread_cpu_ns(native_id):
    """CPU time a thread of this process has used: (ns from ``/proc/self/task/ID/schedstat``,
    its system share from ``stat``'s clock ticks), or None where there is no ``/proc``."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            ns = int(f.read().split()[0])
        with open(f"/proc/self/task/{native_id}/stat") as f:
            ticks = [int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13]]
    except (OSError, ValueError, IndexError):
        return None
    return ns, ticks[1] / max(1, sum(ticks))


def _last_reads_correct(path, sq, cq, staging, sample=1000):
    """Whether a sample of the queue entries' last reads completed OK with the file's bytes:
    each entry's request word still names its page, its staging page holds what was read."""
    entries = np.flatnonzero(sq[L.SQ_WORD::L.SQ_WORDS])
    entries = np.random.default_rng(0).permutation(entries)[:sample]
    with open(path, "rb") as f:
        for e in entries:
            _, _, page, _ = L.sq_fields(int(sq[e * L.SQ_WORDS + L.SQ_WORD]))
            if L.cq_fields(int(cq[e * L.CQ_WORDS + L.CQ_WORD]))[1] != L.STATUS_OK:
                return False
            f.seek(page * PAGE)
            if f.read(PAGE) != staging[e * PAGE:(e + 1) * PAGE].tobytes():
                return False
    return len(entries) > 0


def host_daemon_run(path, pages, threads=1, queues=512, depth=128, engine_depth=256,
                    engine="io_uring", direct=True, seed=0, fixed_buffers=None, reps=1,
                    between=None, ssd=None, n_ssd=1):
    """The daemon alone, no GPU: ``reps`` timed runs of ``pages`` random 4 KiB reads of file
    ``path`` through a :class:`HostDaemon` on ``queues`` x ``depth`` queues, a host thread
    playing the GPU as ``workloads.emulation_bench.drive`` does (a warp's 32 tickets at a time
    per queue, up to the queue's depth in flight: what a large gather keeps posted). Returns the
    median run's pages/s (each run's in ``rep_pages_per_s``), the daemon threads' CPU us per
    page (``/proc``'s schedstat), the engine's counts per page, and whether its rings used
    registered buffers (``fixed_buffers``: None, the setting). ``between()``, if given, is
    called before the first run and after each (the daemon idle), its results kept in
    ``probes``. ``ssd``, ``n_ssd``: emulate those drives in real time, as ``Runtime(ssd=...)``
    does (the reads still go to the file)."""
    from workloads.emulation_bench import drive
    store = FileStore(path, direct=direct)
    nbytes = os.path.getsize(path) - os.path.getsize(path) % PAGE
    n_pages = nbytes // PAGE
    table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
    table[0] = store.table_row(0, nbytes)
    n = queues * depth
    sq = np.zeros(n * L.SQ_WORDS, dtype=np.int64)
    cq = np.zeros(n * L.CQ_WORDS, dtype=np.int64)
    staging = _aligned(n * PAGE)
    staging[:] = 0   # mapped in now, as the Runtime's pinned staging is: no page faults timed
    mine = np.arange(queues, dtype=np.int64)
    state, times = np.zeros((queues, 2), dtype=np.int64), np.zeros(4, dtype=np.int64)
    drive(mine, sq, cq, depth, n_pages, 0, state, times, seed)   # compile before timing
    model = None if ssd is None else SsdModel(ssd, n_ssd=n_ssd, stripe_bytes=PAGE)
    daemon = HostDaemon(sq, cq, staging, table, queues, depth, PAGE, threads, model=model,
                        engine=engine, engine_depth=engine_depth, fixed_buffers=fixed_buffers)
    try:
        with daemon:
            ids = [t.native_id for t in daemon._threads]
            probes = [between()] if between else []
            cpu0 = [thread_cpu_ns(i) for i in ids]
            passes0, visits0 = daemon.passes, daemon.visits
            runs, driver_cpu = [], 0.0
            for k in range(reps):
                t0, c0 = time.perf_counter(), time.thread_time()
                drive(mine, sq, cq, depth, n_pages, pages, state, times, seed + 1 + k)
                runs.append(time.perf_counter() - t0)
                driver_cpu += time.thread_time() - c0
                if between:   # the daemon naps meanwhile; its CPU then is counted, and small
                    probes.append(between())
            cpu = [thread_cpu_ns(i) for i in ids]
            passes, visits = daemon.passes - passes0, daemon.visits - visits0
            counters = daemon.engine_counters
            buffers = daemon.buffers_note
    finally:
        store.close()
    cpu_ns = (None if None in cpu or None in cpu0
              else sum(b[0] - a[0] for a, b in zip(cpu0, cpu)))
    secs, total = float(np.median(runs)), pages * reps
    return {"kind": "host", "engine": daemon.engine, "threads": threads,
            "store": "file O_DIRECT" if direct else "file page cache", "ssd": ssd, "n_ssd": n_ssd,
            "queues": queues, "depth": depth, "pages": pages, "seconds": secs,
            "pages_per_s": pages / secs, "rep_pages_per_s": [pages / t for t in runs],
            "probes": probes, "correct": _last_reads_correct(path, sq, cq, staging),
            "daemon_cpu_us_per_page": None if cpu_ns is None else cpu_ns / total / 1e3,
            "passes_per_page": passes / total, "visits_per_page": visits / total,
            "driver_busy": driver_cpu / sum(runs),
            "daemon_system_share": None if None in cpu else float(np.mean([c[1] for c in cpu])),
            "waits_per_page": counters["waits"] / total,
            "submits_per_page": counters["submits"] / total,
            "in_flight_peak": max(counters["peak_in_flight"] or [0]), "buffers": buffers,
            "capacity": daemon.capacity}


def _gids_row(kind, store_or_path, ref, o, engine, threads, label, between=None, **runtime):
    """``rt.gather`` of ``o['pages']`` distinct random pages (one int64 each), all misses (the
    cache is invalidated before each rep); the median rep's pages/s (each rep's in
    ``rep_pages_per_s``). ``between()``, if given, is called before the first timed rep and
    after each (the GPU and the daemon idle), its results kept in ``probes``."""
    n_pages = ref.size * 8 // PAGE
    pages = min(o["pages"], n_pages)
    cache_pages = max(64, min(pages, 65536))
    rng = np.random.default_rng(o["seed"] + threads)
    row = {"kind": kind, "engine": engine, "threads": threads, "store": label, "pages": pages}
    try:
        with gids.Runtime(cache_pages=cache_pages, page_size=PAGE, daemon_threads=threads,
                          engine=engine, **runtime) as rt:
            a = rt.open_array(store_or_path, np.int64, shape=ref.shape)
            row["engine_used"] = rt.daemon.engine
            row["capacity"] = rt.daemon.capacity
            row["buffers"] = rt.stats().engine_buffers
            times, correct, probes = [], True, []
            for rep in range(o["reps"] + 1):        # the first: compile and warm, not timed
                idx = rng.permutation(n_pages)[:pages] * (PAGE // 8) + rng.integers(
                    0, PAGE // 8, pages)
                d_idx = cuda.to_device(idx)
                rt.invalidate()
                if rep == 1:
                    rt.sync()
                    before, cpu_before = rt.stats(), rt.daemon.cpu_seconds()
                if rep and between:
                    rt.sync()
                    probes.append(between())
                t = time.perf_counter()
                got = rt.gather(a, d_idx)
                rt.sync()
                secs = time.perf_counter() - t
                correct &= bool((got.copy_to_host() == ref[idx]).all())
                if rep:
                    times.append(secs)
            if between:
                probes.append(between())
            stats = rt.stats() - before
            cpu = rt.daemon.cpu_seconds()
            counters = rt.daemon.engine_counters
        secs = float(np.median(times))
        if between:
            row["probes"] = probes
        row.update(seconds=secs, pages_per_s=pages / secs,
                   rep_pages_per_s=[pages / t for t in times], correct=correct,
                   **engine_figures(stats, counters, sum(times), threads,
                                    None if cpu is None or cpu_before is None
                                    else cpu - cpu_before))
    except Exception as exc:   # one row's failure is reported, not the end of the sweep
        row.update(seconds=None, pages_per_s=None, correct=False,
                   error=f"{type(exc).__name__}: {exc}")
    finally:
        if hasattr(store_or_path, "close"):
            store_or_path.close()
    return row


def engine_figures(stats, counters, seconds, threads, cpu_seconds):
    """A gids row's I/O figures over its timed runs (``stats``: their difference): the engine's
    and the GPU's mean I/O us, in flight per thread (mean by Little's law, peak as counted),
    and the daemon's CPU us per page."""
    reads = sum(f.reads for f in stats.files)
    engine_us = (sum(f.read_ns for f in stats.files) / reads / 1e3) if reads else None
    pages = stats.ios
    peaks = counters.get("peak_in_flight") or []
    return {"engine_io_us": engine_us, "gpu_io_us": stats.io_latency_us if pages else None,
            "in_flight_mean": (reads / seconds * engine_us / 1e6 / threads
                               if engine_us is not None and seconds > 0 else None),
            "in_flight_peak": max(peaks) if peaks else None,
            "daemon_cpu_us_per_page": (cpu_seconds / pages * 1e6
                                       if cpu_seconds is not None and pages else None),
            "daemon_busy": (cpu_seconds / seconds / threads
                            if cpu_seconds is not None and seconds > 0 else None),
            "ring_waits": counters.get("waits")}


#: An emulated row at this fraction of the model or more does what the model says; one at this
#: fraction of its host ceiling (no model) or more is held by the host, not by the emulation.
MODEL_BOUND, HOST_BOUND = 0.90, 0.85


def what_bounds(row, host):
    """What holds an emulated row back: ``model`` (it reaches the model's IOPS), ``host`` (the
    same engine and threads with no model, ``host``'s row, is barely faster: the daemon's CPU
    and copies are the limit), else ``engine`` (the emulation's own cost in the engine: parking
    requests, timing their completions). Also its fraction of that host ceiling."""
    rate, ceiling = row.get("pages_per_s"), host.get("pages_per_s")
    of_host = rate / ceiling if rate and ceiling else None
    if row.get("of_model") is not None and row["of_model"] >= MODEL_BOUND:
        bound = "model"
    elif of_host is None:
        bound = None
    else:
        bound = "host" if of_host >= HOST_BOUND else "engine"
    return {"host_pages_per_s": ceiling, "of_host": of_host, "bound": bound}


def model_iops(profile, n_ssd, in_flight, n=20000):
    """The model's 4 KiB random-read IOPS with ``in_flight`` requests kept out (closed loop)."""
    trace = synthetic_trace(n, queue_depth=max(1, in_flight), nbytes=PAGE)
    return replay(trace, profile, n_ssd=n_ssd, mode="closed").iops


def kvikio_row(path, ref, o):
    try:
        if SIMULATOR:
            raise RuntimeError("the CUDA simulator has no GPU memory for KvikIO to read into")
        import kvikio
    except Exception as exc:
        return {"kind": "kvikio", "engine": "kvikio", "skipped": f"{type(exc).__name__}: {exc}",
                "pages_per_s": None, "correct": True}
    n_pages = ref.size * 8 // PAGE
    pages = min(o["pages"], n_pages)
    rng = np.random.default_rng(o["seed"] + 77)
    chosen = rng.permutation(n_pages)[:pages]
    buf = cuda.device_array(pages * PAGE // 8, dtype=np.int64)
    f = kvikio.CuFile(path, "r")
    times = []
    for rep in range(o["reps"] + 1):
        t = time.perf_counter()
        futures = [f.pread(buf[k * PAGE // 8:(k + 1) * PAGE // 8], PAGE, int(p) * PAGE)
                   for k, p in enumerate(chosen)]
        ok = all(fut.get() == PAGE for fut in futures)
        cuda.synchronize()
        if rep:
            times.append(time.perf_counter() - t)
    f.close()
    got = buf.copy_to_host().reshape(pages, PAGE // 8)[:, 0]
    correct = ok and bool((got == ref[chosen * (PAGE // 8)]).all())
    secs = float(np.median(times))
    return {"kind": "kvikio", "engine": "kvikio", "threads": None, "pages": pages,
            "seconds": secs, "pages_per_s": pages / secs, "correct": correct}


def _write_file(path, nbytes, seed):
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        left = nbytes
        while left:
            n = min(left, 64 << 20)
            f.write(rng.integers(0, 1 << 62, n // 8, dtype=np.int64).tobytes())
            left -= n


def run_files(o, command="gids bench files", progress=True):
    o = {**default_options(), **{k: v for k, v in o.items() if v is not None}}
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if progress else (lambda m: None)
    result = {"sweep": "files", "version": VERSION, "command": command, "simulator": SIMULATOR,
              "label": "simulator figure" if SIMULATOR else "GPU figure",
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "options": o,
              "uring": uring_probe() or "available", "rows": [], "probe_pages_per_s": None}
    rows = result["rows"]
    with tempfile.TemporaryDirectory(dir=o["dir"]) as tmp:
        path = os.path.join(tmp, "files.bin")
        nbytes = o["file_bytes"] - o["file_bytes"] % PAGE
        say(f"files: writing {nbytes:,} bytes to {path}")
        _write_file(path, nbytes, o["seed"])
        ref = np.fromfile(path, dtype=np.int64)
        store = FileStore(path)
        result["direct"] = store.direct_enabled
        store.close()
        # The page cache must not hold the file for the direct rows: drop it (best effort).
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        say("files: disk ceiling")
        rows += disk_ceiling(path, max(o["pages"], 64), o)
        # Every O_DIRECT row below is timed between probes of the disk (probe, run, probe, run,
        # ..., probe) and reported against them (:func:`bracketed`): a virtio or cloud disk
        # moves between runs, and a ceiling taken once at the start would move the ratios.
        t0, seeds = time.perf_counter(), itertools.count(o["seed"] * 1000 + 500)
        probes = result["probes"] = []

        def between():   # each probe's ways in a turning order
            probes.append(disk_now(path, o, t0, next(seeds), turn=len(probes)))
            return probes[-1]
        queues = defaults.get("queues") or defaults.default_queues(
            PAGE, defaults.get("queue_depth"))
        # Registered buffers as set, and (if that is on) without them: the same daemon alone,
        # then through the GPU at one thread.
        fixed = [None] + ([False] if defaults.get("engine_fixed_buffers") else [])
        for f in fixed:
            say("files: the daemon driven from the host (no GPU), io_uring x1"
                + (", plain buffers" if f is False else ""))
            rows.append(host_daemon_run(
                path, o["pages"], 1, queues, defaults.get("queue_depth"),
                engine_depth=defaults.get("engine_depth"), seed=o["seed"], fixed_buffers=f,
                reps=o["reps"], between=between))
        # The io_uring rows, which carry the targets, in rounds spread over this part; the
        # threads rows once (slow, and only beside them).
        direct = collections.defaultdict(list)
        for k in range(o["direct_rounds"]):
            which = f", round {k + 1}" if o["direct_rounds"] > 1 else ""
            for engine in ENGINES if k == 0 else ("io_uring",):
                for t in o["daemon_threads"]:
                    say(f"files: direct {engine} x{t}{which}")
                    direct["direct", engine, t].append(_gids_row(
                        "direct", FileStore(path, direct=True), ref, o, engine, t,
                        "file O_DIRECT", between))
                    if engine == "io_uring" and t == 1 and len(fixed) > 1:
                        say(f"files: direct io_uring x1, plain buffers{which}")
                        with defaults.set(engine_fixed_buffers=False):
                            direct["plain", engine, t].append(_gids_row(
                                "direct plain buffers", FileStore(path, direct=True), ref,
                                o, engine, t, "file O_DIRECT", between))
        # The disk's best way of reading it over the whole run, then each row against the
        # probes around its own runs; the run's disk: the median of its probes.
        result["ceiling_way"] = settle_ceiling(probes)
        for r in rows + [r for runs in direct.values() for r in runs]:
            if "probes" in r:
                of_disk(r)
        rows += [pool_rounds(runs) for runs in direct.values()]
        result["ceiling_pages_per_s"] = float(np.median([p["ceiling"] for p in probes]))
        if probes[0]["probe"] is not None:
            result["probe_pages_per_s"] = float(np.median([p["probe"] for p in probes]))
        # Page-cached: read the whole file once so it is in the page cache.
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
        t = max(o["daemon_threads"])
        # The memory copy and the page-cached rows in turn, round after round: the machine
        # moves between rows seconds apart as a virtual disk does (one row over the other read
        # 0.78 in one round and 1.00 in the next), so each round's ratio is paired and the
        # median of the rounds taken.
        runs = collections.defaultdict(list)
        for k in range(o["cached_rounds"]):
            say(f"files: page-cached file and memory copy x{t}, round {k + 1}")
            mem = _gids_row("cached", MemoryStore(ref, zero_copy=False), ref, o, "threads", t,
                            "MemoryStore copy")
            # A memory store is copied by the daemon thread, whatever the engine.
            mem["engine"] = mem["engine_used"] = "memcpy"
            runs["memcpy"].append(mem)
            for engine in ENGINES:
                runs[engine].append(_gids_row(
                    "cached", FileStore(path, direct=False), ref, o, engine, t,
                    "file page cache" + (" (mapped)" if engine == "io_uring" else "")))
        rows.append(merge_rounds(runs["memcpy"]))
        for engine in ENGINES:
            row = merge_rounds(runs[engine])
            row["of_memory_rounds"] = [r["pages_per_s"] / m["pages_per_s"] for r, m in
                                       zip(runs[engine], runs["memcpy"])
                                       if r["pages_per_s"] and m["pages_per_s"]]
            row["of_memory"] = (float(np.median(row["of_memory_rounds"]))
                                if row["of_memory_rounds"] else None)
            rows.append(row)
        queue_entries = queues * defaults.get("queue_depth")
        te = o["emulated_threads"]
        # The host's own ceiling for the emulated rows: the same engine and daemon threads
        # serving the same pages from the page-cached file with no model.
        host = {}
        for engine in ENGINES:
            say(f"files: no model (the emulated rows' host ceiling), {engine} x{te}")
            host[engine] = _gids_row("no model", FileStore(path, direct=False), ref, o,
                                     engine, te, "file page cache")
            rows.append(host[engine])
        for n_ssd in o["n_ssd"]:
            for engine in ENGINES:
                say(f"files: emulated {o['profile']} x{n_ssd}, {engine} x{te}")
                row = _gids_row("emulated", FileStore(path, direct=False), ref, o, engine, te,
                                "file page cache", ssd=o["profile"], n_ssd=n_ssd)
                row.update(profile=o["profile"], n_ssd=n_ssd)
                cap = row.get("capacity")
                if cap:
                    load = min(cap, queue_entries)
                    row["model_pages_per_s"] = model_iops(o["profile"], n_ssd, load)
                    row["model_in_flight"] = load
                    row["of_model"] = (row["pages_per_s"] / row["model_pages_per_s"]
                                       if row["pages_per_s"] else None)
                row.update(what_bounds(row, host[engine]))
                rows.append(row)
        # The same with the GPU taken out: io_uring daemon threads driven from a host thread,
        # with no model and under each drive count. Where these reach the model and the rows
        # above do not, the GPU's side (the gather's kernel and its queues) is what bounds them.
        alone = None
        for n_ssd in [None, *o["n_ssd"]]:
            say(f"files: driven from the host, emulated {o['profile']} x{n_ssd}, io_uring x{te}"
                if n_ssd else f"files: driven from the host, no model, io_uring x{te}")
            row = host_daemon_run(path, o["pages"], te, queues, defaults.get("queue_depth"),
                                  engine_depth=defaults.get("engine_depth"), direct=False,
                                  seed=o["seed"], reps=o["reps"],
                                  ssd=o["profile"] if n_ssd else None, n_ssd=n_ssd or 1)
            row["kind"] = "host emulated"
            if n_ssd is None:
                alone = row
            else:
                load = min(row["capacity"], queue_entries)
                row.update(profile=o["profile"], model_in_flight=load,
                           model_pages_per_s=model_iops(o["profile"], n_ssd, load))
                row["of_model"] = row["pages_per_s"] / row["model_pages_per_s"]
                row.update(what_bounds(row, alone))
            rows.append(row)
        say("files: kvikio")
        rows.append(kvikio_row(path, ref, o))
    return result


def _f(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def format_files(result):
    probes = result.get("probes") or []
    ceilings = [p["ceiling"] for p in probes]
    bests = collections.Counter(p["best_now"] for p in probes).most_common()
    spread = (f" (median of {len(ceilings)} probes between the timed runs, "
              f"{_f(min(ceilings))} to {_f(max(ceilings))}, by the best way over the run: "
              f"{result.get('ceiling_way')}; fastest at each probe: "
              f"{', '.join(f'{way} {n}x' for way, n in bests)}; each O_DIRECT row's "
              "fractions are of the probes just before and after each of its runs, the median "
              "over its runs, of every round's where it ran in rounds)" if ceilings else "")
    lines = [f"# gids bench files ({result['label']})", "",
             f"command: `{result['command']}`  ",
             f"io_uring: {result['uring']}; O_DIRECT: {result.get('direct')}; disk ceiling "
             f"{_f(result.get('ceiling_pages_per_s'))} pages/s{spread}", "",
             f"probe (one thread's ring, no GPU) {_f(result.get('probe_pages_per_s'))} pages/s",
             "",
             "| row | engine | threads | store | pages/s | of ceiling | of probe | of memory "
             "| model pages/s | of model | of host | bound | engine I/O us | GPU I/O us "
             "| in flight/thread mean | peak | daemon CPU us/page | daemon busy | correct |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        kind = r["kind"] + (f" {r['profile']} x{r['n_ssd']}" if r.get("profile") else "")
        if r["kind"] == "host emulated" and not r.get("ssd"):
            kind = "host, no model"
        engine = r.get("engine_used") or r["engine"]
        if r.get("engine_used") and r["engine_used"] != r["engine"]:
            engine = f"{r['engine']} -> {r['engine_used']}"
        if r["kind"] in ("ceiling", "probe"):
            engine += f" depth {r['depth']}"
        if r.get("buffers", "").endswith("yes"):
            engine += " (registered buffers)"
        lines.append(
            f"| {kind} | {engine} | {_f(r.get('threads'), '{}')} | {r.get('store', '-')} | "
            f"{_f(r.get('pages_per_s'))} | {_f(r.get('of_ceiling'), '{:.2f}')} | "
            f"{_f(r.get('of_probe'), '{:.2f}')} | "
            f"{_f(r.get('of_memory'), '{:.2f}')} | {_f(r.get('model_pages_per_s'))} | "
            f"{_f(r.get('of_model'), '{:.2f}')} | {_f(r.get('of_host'), '{:.2f}')} | "
            f"{r.get('bound') or '-'} | {_f(r.get('engine_io_us'), '{:.1f}')} | "
            f"{_f(r.get('gpu_io_us'), '{:.1f}')} | {_f(r.get('in_flight_mean'), '{:.1f}')} | "
            f"{_f(r.get('in_flight_peak'), '{}')} | "
            f"{_f(r.get('daemon_cpu_us_per_page'), '{:.2f}')} | "
            f"{_f(r.get('daemon_busy'), '{:.2f}')} | {'yes' if r.get('correct') else 'NO'} |")
        if r.get("skipped"):
            lines.append(f"\nkvikio skipped: {r['skipped']}\n")
        if r.get("error"):
            lines.append(f"\nerror: {r['error']}\n")
    return "\n".join(lines) + "\n"


def add_files_arguments(p):
    """``gids bench files`` options (the bench parser takes them; other sweeps ignore them).
    ``--n-ssd`` (the emulated drive counts, default 1,4) is the bench parser's own
    (:func:`workloads.ssd_options.add_ssd_arguments`)."""
    g = p.add_argument_group("files sweep")
    g.add_argument("--file-bytes", type=int, help="size of the data file (default 4 GiB)")
    g.add_argument("--pages", type=int, help="distinct pages read per timed run (200,000)")
    g.add_argument("--emulated-threads", type=int, help="daemon threads of the emulated rows")
    g.add_argument("--profile", help="emulated drive profile (default 980pro)")
    g.add_argument("--ceiling-depth", type=int, help="io_uring depth of the ceiling row (256)")
    g.add_argument("--probe-pages", type=int, help="reads of each probe of the disk between "
                   "the timed O_DIRECT runs, per way of reading it (20,000)")
    g.add_argument("--cached-rounds", type=int, help="rounds of the memory-copy and "
                   "page-cached rows, in turn (3)")
    g.add_argument("--direct-rounds", type=int, help="rounds of the O_DIRECT io_uring rows, "
                   "their fractions over every round's runs (3)")


def cmd_files(args):
    o = {"file_bytes": args.file_bytes, "pages": args.pages,
         "emulated_threads": args.emulated_threads, "n_ssd": args.n_ssd,
         "profile": args.profile, "ceiling_depth": args.ceiling_depth,
         "probe_pages": args.probe_pages, "cached_rounds": args.cached_rounds,
         "direct_rounds": args.direct_rounds,
         "daemon_threads": args.daemon_threads, "reps": args.reps, "dir": args.dir,
         "seed": args.seed}
    for name in ("file_bytes", "pages", "emulated_threads", "ceiling_depth", "probe_pages",
                 "cached_rounds", "direct_rounds", "reps"):
        if o[name] is not None and o[name] < 1:
            sys.stderr.write(f"gids bench: error: --{name.replace('_', '-')} must be >= 1\n")
            return 2
    if o["profile"] is not None:
        try:
            ssd_profile(o["profile"])
        except ValueError as exc:
            sys.stderr.write(f"gids bench: error: {exc}\n")
            return 2
    result = run_files(o, command=command_line(args), progress=not args.no_progress)
    return write_report(args, "files", result, format_files(result))
