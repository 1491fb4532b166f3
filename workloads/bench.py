"""``gids bench``: the data paths of :mod:`workloads.baselines` side by side, with the ceilings
measured in the same run.

Data paths: those of :data:`workloads.baselines.PATHS` that run here (``cpu_batch_kvikio``, one
KvikIO read per page, only when named with ``--paths``).

Sweeps (each over the data paths; ``all`` runs every one):

``workloads``
    Each workload at the default settings: ``uniform`` (independent random requests, data 4x the
    gids cache), ``chains`` (each warp follows a chain of 8 dependent random requests: the next
    request is the first element of the one just read), ``pointer_chase`` (each thread follows a
    chain of 8 dependent random 8-byte reads; a page I/O each for gids and cpu_batch),
    ``zipf`` (Zipf(0.99) requests, a gids cache of 10 % of the data), ``hits`` (requests to a
    warmed set that fits in the gids cache: 100 % hits). Issue 4's four targets are ratios of
    these rows (:data:`TARGETS`): the report ends with them, each ratio and whether it is met.
    ``gids bench workloads --quick`` measures them in a few minutes on the H200.
``iops``
    Uniform random requests against GPU threads (all paths), and for gids queues, queue depth
    and daemon threads; for cpu_batch, host gather threads stand in for daemon threads.
``bandwidth``
    Uniform random requests of 512 B to 1 MiB (gids pages: the request size within 512 B to
    64 KiB; cpu_batch reads whole requests).
``cache``
    Throughput against the share of requests that go to a warmed hot set (0 to 100 %).
``tier``
    The host tier (``Runtime(host_cache_bytes=...)``), issue 23's rows: pointer chasing over
    8-byte elements through a file store whose data all fit the tier (direct mode) against
    zero-copy over RAM (and gids with no tier); Zipf(0.99) requests through a file store, GPU
    cache x host tier sizes (:data:`TIER_GPU_FRACTIONS` x :data:`TIER_HOST_FRACTIONS`, copy
    mode) against today's gids row over a RAM store (cache 10 %, no tier). The tier is filled
    statically before timing: every page, or the pages the run's requests use most (a profile,
    as a graph's reverse PageRank stands for one); one more Zipf row fills a 20 % tier with
    nothing but the GPU cache's evictions (``host_tier_fill="victims"``). With ``--ssd PROFILE``
    (``--n-ssd``, default 1,4) the Zipf rows at a GPU cache of 10 % run again under real-time
    emulation of each array (``Runtime(ssd=..., n_ssd=...)``): no tier, a static 20 % tier, a
    victim-filled 20 % tier, and the ``MemoryStore`` reference, the same requests. The daemon
    still reads the file behind the model, so those rows read it through the page cache (a
    ``cached`` store: ``FileStore(direct=False)``, the file read once beforehand), not with
    ``O_DIRECT``: the modelled drives, not the disk, set the pace. Its targets
    (:data:`TIER_TARGETS`, the Zipf one again on each emulated array) end the report.
``latency``
    One warp, one request at a time (queue depth 1): percentiles. memory, zero_copy and gids are
    timed inside the kernel (``%globaltimer``); cpu_batch on the host, one launch per request
    (its kernel runs, the host gathers and copies, the kernel runs again: that is its QD1 cost).

A *request* is ``request_bytes`` contiguous bytes at a multiple of ``request_bytes``, read by the
32 lanes of a warp side by side (coalesced on every path), a page at a time: through gids a warp
pins each page of a request once (one cache lookup; ``workloads/pager.py``), on the other paths
it reads the same elements through the path's reader. Data are random int64 in [0, 2**40).
Every path runs the same launches: the work is split into launches that fit the cpu_batch
buffer (``batch_bytes``), so cpu_batch runs with batches as large as it is given while the other
paths pay the same few launches. Every result is checked against numpy (``correct``).

In the CUDA simulator the sizes are tiny by default and every figure is labelled a simulator
figure: there they test the harness, not performance.

JSON schema (``schema_version`` 1; every key below is always present, ``null`` where it does not
apply; new keys may be added, none removed or retyped without a new version):

.. code-block:: text

    schema_version  int (1)
    simulator       bool: the figures come from the CUDA simulator, not a GPU
    label           str: "simulator figure" or "GPU figure" (also on every result)
    date            str: ISO 8601 local time the run started
    command         str: the command line
    machine         {hostname str, gpu str, cpu_cores int, python str, numpy str, numba str,
                     numba_cuda str|null, gids str, commit str|null}
    config          {paths [str], sweeps [str], workloads [str], data_bytes int,
                     request_bytes int, cache_fraction float, zipf_cache_fraction float,
                     threads int, block int, requests int, batch_bytes int, reps int,
                     steps int, store str, seed int, iops_threads [int], queues [int],
                     queue_depths [int], daemon_threads [int], request_sizes [int],
                     hit_rates [float], latency_requests int, gather_threads int|null,
                     emulations [{ssd str, n_ssd int}]: the tier sweep's emulated arrays}
    ceilings        {h2d_pinned_Bps float: pinned host-to-device copy, bytes/s;
                     d2d_Bps float: device-to-device copy, bytes read + written per s;
                     bytes int: buffer size measured with}
    paths           {name: {available bool, reason str|null, description str}}
    results         [{sweep str, workload str, path str,
                      x_name str|null, x float|null: the swept variable of this point,
                      params {request_bytes int, page_size int|null, threads int, block int,
                              cache_bytes int|null, batch_bytes int, daemon_threads int|null,
                              queues int|null, queue_depth int|null, gather_threads int|null,
                              steps int, hot_fraction float|null, data_bytes int,
                              store str: "memory", "file" (O_DIRECT) or "cached" (the file
                                         through the page cache, read once beforehand),
                              cache_fraction float|null: the point's own,
                              host_tier_bytes int, tier_mode str|null,
                              tier_fill str|null},
                      requests int: requests (or single reads) in one timed run,
                      request_bytes int: useful bytes per request,
                      bytes int: requests * request_bytes,
                      seconds float|null: median wall time of a timed run, reps int,
                      requests_per_s float|null, bytes_per_s float|null,
                      fraction_of_h2d float|null: bytes_per_s / ceilings.h2d_pinned_Bps,
                      fraction_of_d2d float|null: bytes_per_s / ceilings.d2d_Bps,
                      hit_rate float|null: page reads served without an I/O (gids,
                                           cpu_batch), measured,
                      bytes_to_gpu int|null: bytes the path moved to the GPU (page I/Os),
                      passes int|null: kernel runs (cpu_batch: several per launch),
                      latency_us {p50, p90, p99, mean, max: float}|null,
                      path_stats {str: number}: the path's own counters,
                      correct bool: every value equals numpy's,
                      label str, error str|null: why the point failed,
                      emulation {ssd str, n_ssd int}|null: the SSD array the daemon's
                                completions were timed by (real-time emulation)}]
    plots           [str]: PNG files written (one per sweep; none without matplotlib)
    targets         [{sweep str: "workloads" (issue 4's) or "tier" (issue 23's),
                      workload str, setting str: the run's setting of it,
                      issue_setting bool: the setting is the issue's (4 KiB requests; uniform:
                                          data 4x the gids cache; chains of 8; Zipf: cache 10 %),
                      goal str, ratios [{path str, least float, ratio float|null}]: gids bytes/s
                                        over that path's, in the workloads sweep,
                      met bool|null: every ratio at least its least (null: a row is missing,
                                     failed or wrong),
                      emulation {ssd str, n_ssd int}|null: both rows ran on this emulated
                                array}]
                    (added after version 1's first keys; [] without a workloads sweep)
"""
import gids  # noqa: F401  (first: picks the GPU or the simulator before numba.cuda loads)

# isort: split

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import zlib

import numba
import numpy as np
from numba import cuda

from gids import SIMULATOR
from gids.cli import TraceRecorder, add_trace_argument, existing_dir, nonnegative_int
from gids.console import Progress, say, table
from gids.device import WARP_SIZE
from gids.errors import ConfigError, GidsError
from gids.host import FileStore
from workloads import baselines as B
from workloads.ssd_options import (
    EMULATION_NOTE,
    Emulation,
    add_ssd_arguments,
    emulation_cell,
    emulation_record,
    emulations,
)

SCHEMA_VERSION = 1
SWEEPS = ("workloads", "iops", "bandwidth", "cache", "latency", "tier")
#: The tier sweep's grid (fractions of the data): GPU cache x host tier, for Zipf requests.
TIER_GPU_FRACTIONS = (0.10, 0.25)
TIER_HOST_FRACTIONS = (0.0, 0.20, 0.50)
WORKLOADS = ("uniform", "chains", "pointer_chase", "zipf", "hits")
DTYPE = np.dtype(np.int64)
LABEL = "simulator figure" if SIMULATOR else "GPU figure"
ZIPF_S = 0.99
MIN_GIDS_PAGE, MAX_GIDS_PAGE = 512, 64 << 10

# Defaults per world: a GPU run reads 8 GiB per point (4 with --quick); a simulator run is a
# harness test.
#
# On a GPU a timed run must be long next to the fixed costs of a launch (tens of us of Python
# dispatch per kernel, a sync at the end), or those set the ratios between the paths: on the
# H200 the all-in-GPU-memory path reads 4 KiB requests at ~2.5 TB/s, ~1.7 ms per 2**20
# requests, and a run of 2**16 requests (the old --quick) took a few hundred us, less than one
# launch and sync of the gids path cost (~1 ms: a hits row timed that way read gids at 0.30x
# memory where CUDA events gave 0.5x). So: 2**21 requests per run (2**20 with --quick),
# and launches of ``batch_bytes`` = 512 MiB of pages, ~0.2 ms each on the memory path (work is
# cut to the cpu_batch buffer on every path; --quick's 128 MiB launches ran ~50 us there, about
# what launching them cost).
_CORES = os.cpu_count() or 8
GPU_DEFAULTS = dict(
    data_bytes=2 << 30, request_bytes=4096, threads=132 * 2048, block=256, requests=1 << 21,
    batch_bytes=512 << 20, reps=3, latency_requests=1000,
    iops_threads=[1 << 10, 1 << 12, 1 << 14, 1 << 16, 132 * 2048],
    queues=[16, 32, 64, 128, 256], queue_depths=[32, 64, 128, 256],
    daemon_threads=sorted({1, 2, 4, 8, max(1, _CORES - 2)}),
    request_sizes=[512, 2048, 8192, 32768, 131072, 524288, 1 << 20],
    hit_rates=[0.0, 0.25, 0.5, 0.75, 0.9, 1.0])
SIM_DEFAULTS = dict(
    data_bytes=32 << 10, request_bytes=512, threads=64, block=32, requests=16,
    batch_bytes=16 << 10, reps=1, latency_requests=3,
    iops_threads=[32, 64], queues=[2, 4], queue_depths=[32], daemon_threads=[1, 2],
    request_sizes=[256, 512, 2048], hit_rates=[0.0, 1.0])
#: ``--quick`` on a GPU: a first, short run (a few minutes with every sweep, most of it compiling
#: kernels: at the H200's rates the reps and untimed launches of the workloads sweep read data
#: for ~10 s, every sweep together for ~1 min; an estimate). Less data and fewer
#: sweep points than the defaults, but launches as large (512 MiB of pages) and timed runs still
#: long next to a launch's fixed costs: 2**20 requests of 4 KiB, ~1.7 ms on the memory path.
GPU_QUICK = dict(
    data_bytes=512 << 20, requests=1 << 20, batch_bytes=512 << 20, reps=3, latency_requests=200,
    iops_threads=[1 << 12, 1 << 15, 132 * 2048], queues=[32, 128], queue_depths=[32, 128],
    daemon_threads=sorted({1, 4, max(1, _CORES - 2)}), request_sizes=[512, 4096, 65536, 1 << 20],
    hit_rates=[0.0, 0.5, 0.9, 1.0])
DEFAULTS = SIM_DEFAULTS if SIMULATOR else GPU_DEFAULTS


# ------------------------------------------------------------------ configuration

@dataclasses.dataclass
class BenchConfig:
    """What one ``gids bench`` run measures (see :func:`make_config` for the checks)."""

    paths: list
    sweeps: list
    workloads: list
    data_bytes: int
    request_bytes: int
    threads: int
    block: int
    requests: int
    batch_bytes: int
    reps: int
    latency_requests: int
    iops_threads: list
    queues: list
    queue_depths: list
    daemon_threads: list
    request_sizes: list
    hit_rates: list
    cache_fraction: float = 0.25
    zipf_cache_fraction: float = 0.10
    steps: int = 8
    store: str = "memory"
    dir: str = None
    seed: int = 0
    gather_threads: int = None
    emulations: list = dataclasses.field(default_factory=list)   # of ssd_options.Emulation

    def to_json(self):
        d = dataclasses.asdict(self)
        d.pop("dir")   # a local folder, not part of what was measured
        d["emulations"] = [emulation_record(e) for e in self.emulations]
        return d


def _int_at_least(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"gids bench: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_threads(name, threads):
    threads = _int_at_least(name, threads, 1)
    if threads % B.GROUP:
        raise ConfigError(f"gids bench: {name} must be a multiple of {B.GROUP} (a warp reads "
                          f"each request), got {threads}")
    return threads


def _check_request(name, nbytes, data_bytes):
    nbytes = _int_at_least(name, nbytes, 1)
    if nbytes % DTYPE.itemsize:
        raise ConfigError(f"gids bench: {name} {nbytes} is not a multiple of the element size "
                          f"({DTYPE.itemsize} bytes of {DTYPE})")
    if nbytes > data_bytes:
        raise ConfigError(f"gids bench: {name} {nbytes} is larger than the data "
                          f"({data_bytes} bytes)")
    return nbytes


def make_config(quick=False, **options):
    """A checked :class:`BenchConfig`: the world's defaults updated with ``options``.

    ``quick`` takes the smaller GPU defaults (:data:`GPU_QUICK`; no change in the simulator).

    Raises
    ------
    ConfigError
        An unknown path, sweep or workload; zero or negative threads, requests or sizes; a
        thread count that is not a whole number of warps; a request size that is not a multiple
        of the element size or larger than the data; a hit rate outside [0, 1]; emulated SSD
        arrays without the tier sweep and the gids path to run them, or of an unknown profile.
    """
    values = dict(DEFAULTS)
    if quick and not SIMULATOR:
        values.update(GPU_QUICK)
    values.update(paths=None, sweeps=list(SWEEPS), workloads=list(WORKLOADS))
    unknown = set(options) - {f.name for f in dataclasses.fields(BenchConfig)}
    if unknown:
        raise ConfigError(f"gids bench: unknown option(s) {sorted(unknown)}")
    values.update({k: v for k, v in options.items() if v is not None})
    if values["paths"] is None:
        # KvikIO reads a page per call (tens of thousands a second where measured): it runs
        # when named, not in every sweep by default.
        values["paths"] = [p for p in B.available_paths() if p != "cpu_batch_kvikio"]
    c = BenchConfig(**values)
    c.paths = [B.check_path_name(p) for p in c.paths]
    if not c.paths:
        raise ConfigError("gids bench: no data path to run")
    for p in c.paths:
        reason = B.PATHS[p].unavailable_reason()
        if reason:
            raise ConfigError(f"gids bench: data path {p!r} is not available here: {reason}")
    if "all" in c.sweeps:
        c.sweeps = list(SWEEPS)
    for s in c.sweeps:
        if s not in SWEEPS:
            raise ConfigError(f"gids bench: unknown sweep {s!r}; choose from "
                              f"{', '.join(SWEEPS)} or all")
    for w in c.workloads:
        if w not in WORKLOADS:
            raise ConfigError(f"gids bench: unknown workload {w!r}; choose from "
                              f"{', '.join(WORKLOADS)}")
    c.data_bytes = _int_at_least("data_bytes", c.data_bytes, 1)
    c.request_bytes = _check_request("request_bytes", c.request_bytes, c.data_bytes)
    c.request_sizes = [_check_request("request size", r, c.data_bytes) for r in c.request_sizes]
    c.block = _int_at_least("block (threads per block)", c.block, 1)
    if c.block % B.GROUP or c.block > 1024:
        raise ConfigError(f"gids bench: block must be a multiple of {B.GROUP} up to 1024 "
                          f"threads, got {c.block}")
    c.threads = _check_threads("threads", c.threads)
    c.iops_threads = [_check_threads("threads", t) for t in c.iops_threads]
    c.requests = _int_at_least("requests", c.requests, 1)
    c.batch_bytes = _int_at_least("batch_bytes", c.batch_bytes, 1)
    c.reps = _int_at_least("reps", c.reps, 1)
    c.steps = _int_at_least("steps", c.steps, 1)
    c.latency_requests = _int_at_least("latency_requests", c.latency_requests, 1)
    c.queues = [_int_at_least("queues", q, 1) for q in c.queues]
    c.queue_depths = [_int_at_least("queue depth", q, WARP_SIZE) for q in c.queue_depths]
    c.daemon_threads = [_int_at_least("daemon threads", t, 1) for t in c.daemon_threads]
    for name in ("cache_fraction", "zipf_cache_fraction"):
        v = getattr(c, name)
        if not 0 < v <= 1:
            raise ConfigError(f"gids bench: {name} must be in (0, 1], got {v}")
    c.hit_rates = [float(h) for h in c.hit_rates]
    if any(not 0 <= h <= 1 for h in c.hit_rates):
        raise ConfigError(f"gids bench: hit rates must be in [0, 1], got {c.hit_rates}")
    if c.store not in ("memory", "file"):
        raise ConfigError(f"gids bench: store must be 'memory' or 'file', got {c.store!r}")
    if c.gather_threads is not None:
        c.gather_threads = _int_at_least("gather_threads", c.gather_threads, 1)
    c.emulations = _check_emulations(c)
    largest = max([c.request_bytes] + c.request_sizes)
    if c.data_bytes < 2 * largest:
        raise ConfigError(f"gids bench: data_bytes {c.data_bytes} must hold at least two of the "
                          f"largest request ({largest} bytes)")
    # A launch's distinct pages must fit the cpu_batch buffer, with room for one chain's
    # speculative reads (see baselines): at least three chains' worth.
    need = 3 * max(c.steps * _batch_page(c.request_bytes), _batch_page(largest))
    if c.batch_bytes < need:
        raise ConfigError(f"gids bench: batch_bytes {c.batch_bytes} is too small: a launch "
                          f"needs room for 3 chains of {c.steps} requests of "
                          f"{c.request_bytes} bytes and 3 of the largest request: give at least "
                          f"{need}")
    return c


def _check_emulations(c):
    """The config's emulated arrays, checked: each an :class:`Emulation` of a known profile,
    run only where the tier sweep runs gids (its Zipf rows are what they emulate)."""
    out = []
    for e in c.emulations:
        if not isinstance(e, Emulation):
            raise ConfigError(f"gids bench: an emulated array is an ssd_options.Emulation, got "
                              f"{e!r}")
        if e.profile not in gids.ssd_profiles():
            raise ConfigError(f"gids bench: unknown SSD profile {e.profile!r}; choose from "
                              f"{', '.join(gids.ssd_profiles())}")
        _int_at_least("n_ssd", e.n_ssd, 1)
        out.append(e)
    if out and ("tier" not in c.sweeps or "gids" not in c.paths):
        raise ConfigError("gids bench: --ssd emulates drives under the tier sweep's gids rows: "
                          "run the tier sweep with the gids path")
    return out


def _gids_page(request_bytes):
    """The gids page for a request size: the request's power-of-two floor, within 512 B-64 KiB."""
    p = 1 << (int(request_bytes).bit_length() - 1)
    return min(max(p, MIN_GIDS_PAGE), MAX_GIDS_PAGE)


def _batch_page(request_bytes):
    """The cpu_batch page for a request size: the request's power-of-two floor."""
    return max(DTYPE.itemsize, 1 << (int(request_bytes).bit_length() - 1))


# ------------------------------------------------------------------ data and access patterns

def make_data(nbytes, seed):
    """Random int64 in [0, 2**40): small enough that no sum of a run overflows."""
    return np.random.default_rng(seed).integers(0, 1 << 40, nbytes // DTYPE.itemsize,
                                                dtype=DTYPE)


def zipf_ids(n, count, rng, s=ZIPF_S):
    """``count`` ids in [0, n) with P(rank k) ~ 1 / k**s; ranks are a random permutation."""
    cdf = np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64) ** s)
    ranks = np.searchsorted(cdf / cdf[-1], rng.random(count), side="right")
    return rng.permutation(n)[np.minimum(ranks, n - 1)].astype(np.int64)


def chain_ids(data, starts, steps, elems, n_req):
    """The requests each chain of :func:`baselines.requests_template` reads: (items, steps)."""
    ids = np.empty((starts.size, steps), dtype=np.int64)
    r = starts.astype(np.int64)
    for s in range(steps):
        ids[:, s] = r
        r = data[r * elems] % n_req
    return ids


def expected_warp_sums(data, starts, steps, elems, n_req, n_warps, request_sums=None):
    """What the lanes of each warp of a ``requests`` kernel add up to (int64, wrapping)."""
    if request_sums is None:
        request_sums = data[:n_req * elems].reshape(n_req, elems).sum(axis=1)
    item_sums = request_sums[chain_ids(data, starts, steps, elems, n_req)].sum(axis=1)
    totals = np.zeros(n_warps, dtype=np.int64)
    np.add.at(totals, np.arange(starts.size) % n_warps, item_sums)
    return totals


def element_chain_values(data, starts, steps):
    """The values :func:`baselines.element_chains_template` stores, (chains, steps)."""
    out = np.empty((starts.size, steps), dtype=data.dtype)
    i = starts.astype(np.int64)
    for s in range(steps):
        out[:, s] = data[i]
        i = out[:, s].astype(np.int64) % data.size
    return out


# ------------------------------------------------------------------ plans: launches + check

@dataclasses.dataclass
class Plan:
    """One timed run: the launches, what they amount to, and how to check them."""

    template: object
    griddim: int
    blockdim: int
    batches: list
    check: object           # () -> bool
    requests: int
    request_bytes: int
    warm: list = None       # launches run before timing (a hot set to load)
    ids: object = None      # the first request (or element) of each chain: a tier's profile


def _grid(threads, block, work_threads):
    """Blocks for ``threads`` threads, no more than the work can use (whole blocks)."""
    threads = min(threads, max(block, math.ceil(work_threads / block) * block))
    return math.ceil(threads / block)


def requests_plan(data, starts, steps, request_bytes, threads, block, batch_bytes,
                  page_bytes, request_sums=None, warm_ids=None):
    """A run of :func:`baselines.requests_template` over ``starts`` (chains of ``steps``)."""
    elems = request_bytes // DTYPE.itemsize
    n_req = data.size // elems
    pages_per_request = max(1, math.ceil(request_bytes / page_bytes))
    # Chains of garbage addresses (after a miss in a pass) take up to ``steps`` slots more.
    capacity = max(1, batch_bytes // page_bytes)
    per_launch = max(1, (capacity - 2 * steps) // (steps * pages_per_request))
    griddim = _grid(threads, block, per_launch * B.GROUP)
    n_threads = griddim * block
    if request_sums is None:
        request_sums = data[:n_req * elems].reshape(n_req, elems).sum(axis=1)

    def launches(ids, n_steps):
        chunks = [ids[i:i + per_launch] for i in range(0, ids.size, per_launch)]
        outs = [cuda.device_array(n_threads, dtype=np.int64) for _ in chunks]
        return chunks, outs, [(cuda.to_device(c), n_steps, elems, n_req, o)
                              for c, o in zip(chunks, outs)]

    chunks, outs, batches = launches(starts.astype(np.int64), steps)

    def check():
        for c, o in zip(chunks, outs):
            want = expected_warp_sums(data, c, steps, elems, n_req, n_threads // B.GROUP,
                                      request_sums)
            if not np.array_equal(o.copy_to_host().reshape(-1, B.GROUP).sum(axis=1), want):
                return False
        return True

    warm = launches(np.asarray(warm_ids, dtype=np.int64), 1)[2] if warm_ids is not None else None
    plan = Plan(B.requests_template, griddim, block, batches, check, starts.size * steps,
                request_bytes, warm)
    plan.ids = starts.astype(np.int64)
    return plan


def pointer_chase_plan(data, starts, steps, threads, block, batch_bytes, page_bytes):
    """A run of :func:`baselines.element_chains_template`: one chain per thread."""
    capacity = max(1, batch_bytes // page_bytes)
    per_launch = max(1, (capacity - 2 * steps) // steps)
    griddim = _grid(threads, block, per_launch)
    chunks = [starts[i:i + per_launch].astype(np.int64) for i in range(0, starts.size, per_launch)]
    outs = [cuda.device_array(c.size * steps, dtype=data.dtype) for c in chunks]
    batches = [(cuda.to_device(c), steps, data.size, o) for c, o in zip(chunks, outs)]

    def check():
        return all(np.array_equal(o.copy_to_host().reshape(-1, steps),
                                  element_chain_values(data, c, steps))
                   for c, o in zip(chunks, outs))

    plan = Plan(B.element_chains_template, griddim, block, batches, check, starts.size * steps,
                DTYPE.itemsize)
    plan.ids = starts.astype(np.int64)
    return plan


# ------------------------------------------------------------------ ceilings

def measure_ceilings(nbytes, reps=5):
    """Pinned host-to-device copy (bytes/s) and device-to-device copy (bytes read + written/s)."""
    host = cuda.pinned_array(nbytes, dtype=np.uint8)
    host[:] = 1
    dev = cuda.device_array(nbytes, dtype=np.uint8)
    dev2 = cuda.device_array(nbytes, dtype=np.uint8)

    def best(fn):
        fn()            # first touch, context set-up
        cuda.synchronize()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            cuda.synchronize()
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    h2d = best(lambda: dev.copy_to_device(host))
    d2d = best(lambda: dev2.copy_to_device(dev))
    return {"h2d_pinned_Bps": nbytes / h2d, "d2d_Bps": 2 * nbytes / d2d, "bytes": int(nbytes)}


# ------------------------------------------------------------------ the run

@dataclasses.dataclass
class Point:
    """One measurement to make: a workload on a path with some settings."""

    sweep: str
    workload: str
    path: str
    x_name: str = None
    x: float = None
    request_bytes: int = None
    threads: int = None
    cache_fraction: float = None
    daemon_threads: int = None
    queues: int = None
    queue_depth: int = None
    gather_threads: int = None
    hot_fraction: float = None
    requests: int = None
    host_tier_fraction: float = None   # tier sweep: host tier / data (0: none)
    tier_mode: str = "copy"
    tier_fill: str = "static"          # "victims": the GPU cache's evictions fill the tier
    store: str = None                  # "memory", "file", "cached" (page cache); None: config's
    emulation: Emulation = None        # the SSD array timing the daemon's completions


def plan_points(c):
    """Every :class:`Point` of the configured sweeps, in run order."""
    pts = []
    if "workloads" in c.sweeps:
        for w in c.workloads:
            for p in c.paths:
                pts.append(Point("workloads", w, p,
                                 cache_fraction=c.zipf_cache_fraction if w == "zipf" else None))
    if "iops" in c.sweeps:
        for t in c.iops_threads:
            for p in c.paths:
                pts.append(Point("iops", "uniform", p, "threads", t, threads=t))
        if "gids" in c.paths:
            for q in c.queues:
                pts.append(Point("iops", "uniform", "gids", "queues", q, queues=q))
            for d in c.queue_depths:
                pts.append(Point("iops", "uniform", "gids", "queue_depth", d, queue_depth=d))
        for n in c.daemon_threads:
            if "gids" in c.paths:
                pts.append(Point("iops", "uniform", "gids", "daemon_threads", n,
                                 daemon_threads=n))
            # cpu_batch's host threads are its gather threads (Numba's pool bounds them);
            # KvikIO's own thread pool is not swept.
            if "cpu_batch" in c.paths and n <= numba.config.NUMBA_NUM_THREADS:
                pts.append(Point("iops", "uniform", "cpu_batch", "daemon_threads", n,
                                 gather_threads=n))
    if "bandwidth" in c.sweeps:
        for r in c.request_sizes:
            # The same bytes at every size (requests * request_bytes as at the default size).
            n = max(1, c.requests * c.request_bytes // r)
            for p in c.paths:
                pts.append(Point("bandwidth", "uniform", p, "request_bytes", r,
                                 request_bytes=r, requests=n))
    if "cache" in c.sweeps:
        for h in c.hit_rates:
            for p in c.paths:
                pts.append(Point("cache", "hot_cold", p, "hot_fraction", h, hot_fraction=h))
    if "latency" in c.sweeps:
        for p in c.paths:
            pts.append(Point("latency", "qd1", p))
    if "tier" in c.sweeps:
        pts += tier_points(c)
    return pts


def tier_points(c):
    """The tier sweep's points (issue 23): its targets' rows, then the Zipf grid."""
    x = "host_tier_fraction"
    pts = []
    if "zero_copy" in c.paths:
        pts.append(Point("tier", "pointer_chase", "zero_copy", store="memory"))
    if "gids" in c.paths:
        pts += [Point("tier", "pointer_chase", "gids", x, 0.0, store="file",
                      host_tier_fraction=0.0),
                Point("tier", "pointer_chase", "gids", x, 1.0, store="file",
                      host_tier_fraction=1.0, tier_mode="direct"),
                # Today's gids row over a RAM store: the Zipf target's reference.
                Point("tier", "zipf", "gids", x, 0.0, cache_fraction=TIER_GPU_FRACTIONS[0],
                      store="memory", host_tier_fraction=0.0)]
        for g in TIER_GPU_FRACTIONS:
            for t in TIER_HOST_FRACTIONS:
                pts.append(Point("tier", "zipf", "gids", x, t, cache_fraction=g, store="file",
                                 host_tier_fraction=t))
        # The tier as a victim cache (nothing added: what the GPU cache evicts fills it).
        pts.append(Point("tier", "zipf", "gids", x, TIER_HOST_FRACTIONS[1],
                         cache_fraction=TIER_GPU_FRACTIONS[0], store="file",
                         host_tier_fraction=TIER_HOST_FRACTIONS[1], tier_fill="victims"))
        for e in c.emulations:
            pts += emulated_tier_points(e)
    return pts


def emulated_tier_points(emulation):
    """The Zipf target's rows on one emulated SSD array: the ``MemoryStore`` reference, then
    the file (page-cached: the model, not the disk, is the limit) at a GPU cache of 10 % with
    no tier, a static 20 % tier and a victim-filled one."""
    x, g, t = "host_tier_fraction", TIER_GPU_FRACTIONS[0], TIER_HOST_FRACTIONS[1]
    zipf = {"cache_fraction": g, "emulation": emulation}
    return [Point("tier", "zipf", "gids", x, 0.0, store="memory", host_tier_fraction=0.0, **zipf),
            Point("tier", "zipf", "gids", x, 0.0, store="cached", host_tier_fraction=0.0, **zipf),
            Point("tier", "zipf", "gids", x, t, store="cached", host_tier_fraction=t, **zipf),
            Point("tier", "zipf", "gids", x, t, store="cached", host_tier_fraction=t,
                  tier_fill="victims", **zipf)]


class _Arrays:
    """Arrays opened on paths, reused while a point needs the same path settings."""

    def __init__(self, source_for, trace=None):
        self._source_for = source_for
        self._trace = trace   # the gids paths' trace= files, one per Runtime (or None)
        self._open = {}   # path name -> (key, path, array)

    def get(self, name, options, store=None):
        key = (tuple(sorted(options.items())), store)
        held = self._open.get(name)
        if held is not None and held[0] == key:
            return held[1], held[2]
        if held is not None:
            held[2].close()
            del self._open[name]
        path = B.make_path(name, **options, trace=self._trace)
        src, dtype = self._source_for(name, store)
        arr = path.open(src, dtype=dtype)
        self._open[name] = (key, path, arr)
        return path, arr

    def close(self):
        for _, _, arr in self._open.values():
            arr.close()
        self._open.clear()


class Runner:
    """Runs the points of a :class:`BenchConfig` and collects the results."""

    def __init__(self, config, log=None, trace=None):
        self.c = config
        self.log = log or (lambda msg: None)
        self.data = make_data(config.data_bytes, config.seed)
        self._file = None
        self._cached = None   # the page-cached FileStore of the emulated rows, made on first use
        self._tmpdir = None
        self._sums = {}
        needs_file = (config.store == "file" or "cpu_batch_kvikio" in config.paths
                      or "tier" in config.sweeps)
        if needs_file:
            self._tmpdir = tempfile.TemporaryDirectory(dir=config.dir, prefix="gids-bench-")
            self._file = os.path.join(self._tmpdir.name, "data.bin")
            self.data.tofile(self._file)
        self.arrays = _Arrays(self._source_for, trace)
        self.ceilings = None

    def _source_for(self, path_name, store=None):
        if store == "cached":
            return self._cached_store(), DTYPE
        if (store or self.c.store) == "file" or path_name == "cpu_batch_kvikio":
            return self._file, DTYPE
        return self.data, None

    def _cached_store(self):
        """The data file read through the page cache (one store, shared by the points that
        ask for it), every page of it read once first so that the page cache holds it."""
        if self._cached is None:
            with open(self._file, "rb") as f:
                while f.read(64 << 20):
                    pass
            self._cached = FileStore(self._file, direct=False)
        return self._cached

    def close(self):
        self.arrays.close()
        if self._cached is not None:
            self._cached.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()

    def request_sums(self, request_bytes):
        if request_bytes not in self._sums:
            elems = request_bytes // DTYPE.itemsize
            n_req = self.data.size // elems
            self._sums[request_bytes] = self.data[:n_req * elems].reshape(n_req, elems).sum(1)
        return self._sums[request_bytes]

    # -- one point -----------------------------------------------------------------------------
    def _path_options(self, pt, request_bytes):
        c = self.c
        if pt.path in B.RUNTIME_PATHS:
            frac = pt.cache_fraction or c.cache_fraction
            page = _gids_page(request_bytes)
            cache_pages = max(WARP_SIZE, int(c.data_bytes * frac) // page)
            opts = dict(page_size=page, cache_pages=cache_pages)
            for k in ("daemon_threads", "queues", "queue_depth"):
                if getattr(pt, k) is not None:
                    opts[k] = getattr(pt, k)
            if pt.host_tier_fraction:
                opts["host_cache_bytes"] = math.ceil(c.data_bytes * pt.host_tier_fraction
                                                     / page) * page
                opts["host_tier_fill"] = pt.tier_fill
            if pt.emulation is not None:
                opts.update(pt.emulation.runtime_options)
            return opts
        if pt.path.startswith("cpu_batch"):
            page = _batch_page(request_bytes)
            opts = dict(page_size=page, batch_pages=max(1, c.batch_bytes // page))
            g = pt.gather_threads if pt.gather_threads is not None else c.gather_threads
            if g is not None:
                opts["gather_threads"] = g
            return opts
        return {}

    def _plan(self, pt, request_bytes, threads, page_bytes, cache_bytes, rng):
        c, data = self.c, self.data
        elems = request_bytes // DTYPE.itemsize
        n_req = data.size // elems
        sums = self.request_sums(request_bytes)
        args = dict(threads=threads, block=c.block, batch_bytes=c.batch_bytes,
                    page_bytes=page_bytes, request_sums=sums)
        n = pt.requests or c.requests
        w = pt.workload
        if w == "uniform":
            return requests_plan(data, rng.integers(0, n_req, n), 1, request_bytes, **args)
        if w == "chains":
            return requests_plan(data, rng.integers(0, n_req, max(1, n // c.steps)), c.steps,
                                 request_bytes, **args)
        if w == "zipf":
            return requests_plan(data, zipf_ids(n_req, n, rng), 1, request_bytes, **args)
        if w == "pointer_chase":
            starts = rng.integers(0, data.size, max(1, n // c.steps))
            return pointer_chase_plan(data, starts, c.steps, threads, c.block, c.batch_bytes,
                                      page_bytes)
        # hits and hot_cold: a hot set of at most half the gids cache, warmed before timing
        n_hot = max(1, min(n_req // 2, cache_bytes // 2 // request_bytes))
        hot = rng.choice(n_req, n_hot, replace=False)
        frac = 1.0 if w == "hits" else pt.hot_fraction
        is_hot = rng.random(n) < frac
        cold = np.setdiff1d(np.arange(n_req), hot)
        ids = np.where(is_hot, hot[rng.integers(0, n_hot, n)],
                       cold[rng.integers(0, cold.size, n)] if cold.size else 0)
        return requests_plan(data, ids, 1, request_bytes, warm_ids=hot, **args)

    def run_point(self, pt):
        c = self.c
        request_bytes = pt.request_bytes or c.request_bytes
        threads = pt.threads or c.threads
        options = self._path_options(pt, request_bytes)
        # Launches are cut to the cpu_batch buffer's pages on every path: the same launches.
        page_bytes = _batch_page(request_bytes)
        # The same ids on every path: the generator is seeded by the point, not the path.
        rng = np.random.default_rng([c.seed, zlib.crc32(
            f"{pt.sweep}/{pt.workload}/{pt.x_name}/{pt.x}".encode())])
        frac = pt.cache_fraction or c.cache_fraction
        cache_bytes = int(c.data_bytes * frac)
        row = self._row_skeleton(pt, request_bytes, threads, options, cache_bytes)
        try:
            path, arr = self.arrays.get(pt.path, options, pt.store)
            path_page = options.get("page_size") or request_bytes
            if pt.sweep == "latency":
                self._latency(path, arr, request_bytes, path_page, rng, row)
            else:
                plan = self._plan(pt, request_bytes, threads, page_bytes, cache_bytes, rng)
                if pt.host_tier_fraction:
                    self._fill_tier(arr, pt, plan, path_page)
                # Page-sized reads the run makes on this path (a single read is one).
                per = 1 if pt.workload == "pointer_chase" else math.ceil(request_bytes / path_page)
                self._timed(path, arr, plan, plan.requests * per, row)
        except (GidsError, OSError) as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["correct"] = False
            self.arrays.close()   # a failed Runtime is recovered, but start the next one clean
        return row

    def _fill_tier(self, arr, pt, plan, page):
        """Fill the point's host tier (static): every page if they fit, else the pages the
        plan's requests use most; and set its mode."""
        tier = arr.runtime.host_tier
        n_pages = arr.array.n_pages
        tier.clear()
        tier.set_mode(arr.array, pt.tier_mode)
        arr.handle = arr.array.handle   # the mode is in the handle
        if pt.tier_fill == "victims":
            return          # the timed runs' evictions fill it
        if tier.capacity >= n_pages:
            pages = np.arange(n_pages)
        else:
            used = np.bincount(plan.ids * plan.request_bytes // page, minlength=n_pages)
            pages = np.argsort(-used, kind="stable")[:tier.capacity]
        tier.add(arr.array, pages)

    def _row_skeleton(self, pt, request_bytes, threads, options, cache_bytes):
        c = self.c
        return {
            "sweep": pt.sweep, "workload": pt.workload, "path": pt.path,
            "x_name": pt.x_name, "x": None if pt.x is None else float(pt.x),
            "params": {
                "request_bytes": int(request_bytes),
                "page_size": options.get("page_size"),
                "threads": int(threads), "block": int(c.block),
                "cache_bytes": (options["cache_pages"] * options["page_size"]
                                if pt.path in B.RUNTIME_PATHS else None),
                "batch_bytes": int(c.batch_bytes),
                "daemon_threads": (options.get("daemon_threads",
                                               gids.defaults.get("daemon_threads"))
                                   if pt.path in B.RUNTIME_PATHS else None),
                "queues": ((options.get("queues") or gids.defaults.get("queues")
                            or gids.defaults.default_queues(
                                options.get("page_size") or gids.defaults.get("page_size"),
                                options.get("queue_depth") or gids.defaults.get("queue_depth")))
                           if pt.path in B.RUNTIME_PATHS else None),
                "queue_depth": (options.get("queue_depth", gids.defaults.get("queue_depth"))
                                if pt.path in B.RUNTIME_PATHS else None),
                "gather_threads": (options.get("gather_threads",
                                               numba.config.NUMBA_NUM_THREADS)
                                   if pt.path.startswith("cpu_batch") else None),
                "steps": int(c.steps if pt.workload in ("chains", "pointer_chase") else 1),
                "hot_fraction": pt.hot_fraction if pt.workload != "hits" else 1.0,
                "data_bytes": int(c.data_bytes),
                "store": pt.store or c.store,
                "cache_fraction": pt.cache_fraction,
                "host_tier_bytes": options.get("host_cache_bytes", 0),
                "tier_mode": pt.tier_mode if pt.host_tier_fraction else None,
                "tier_fill": pt.tier_fill if pt.host_tier_fraction else None,
            },
            "requests": 0, "request_bytes": int(request_bytes), "bytes": 0,
            "seconds": None, "reps": int(c.reps), "requests_per_s": None, "bytes_per_s": None,
            "fraction_of_h2d": None, "fraction_of_d2d": None, "hit_rate": None,
            "bytes_to_gpu": None, "passes": None, "latency_us": None, "path_stats": {},
            "correct": False, "label": LABEL, "error": None,
            "emulation": emulation_record(pt.emulation),
        }

    def _rates(self, row, seconds):
        row["seconds"] = float(seconds)
        row["requests_per_s"] = row["requests"] / seconds if seconds > 0 else None
        row["bytes_per_s"] = row["bytes"] / seconds if seconds > 0 else None
        if row["bytes_per_s"] is not None and self.ceilings:
            row["fraction_of_h2d"] = row["bytes_per_s"] / self.ceilings["h2d_pinned_Bps"]
            row["fraction_of_d2d"] = row["bytes_per_s"] / self.ceilings["d2d_Bps"]

    def _stats_into(self, row, arr, page_reads):
        st = arr.stats()
        row["path_stats"] = {k: (float(v) if isinstance(v, float) else int(v))
                             for k, v in st.items()}
        fetched = st.get("ios", st.get("pages_fetched"))
        if fetched is not None and page_reads:
            row["hit_rate"] = max(0.0, 1.0 - fetched / page_reads)
        if "bytes_to_gpu" in st:
            row["bytes_to_gpu"] = int(st["bytes_to_gpu"])

    def _timed(self, path, arr, plan, page_reads, row):
        c = self.c
        row["requests"] = int(plan.requests)
        row["request_bytes"] = int(plan.request_bytes)
        row["bytes"] = int(plan.requests * plan.request_bytes)

        def prepare():
            arr.reset()
            if plan.warm:   # load the hot set; count only what the timed run does
                path.launch(plan.template, arr, plan.griddim, plan.blockdim, plan.warm)
                arr.reset_counters()

        if not SIMULATOR:   # one untimed launch: compiles the kernel, touches every buffer
            path.launch(plan.template, arr, plan.griddim, plan.blockdim, plan.batches[:1])
        times = []
        info = {}
        for _ in range(c.reps):
            prepare()
            t = time.perf_counter()
            info = path.launch(plan.template, arr, plan.griddim, plan.blockdim, plan.batches)
            times.append(time.perf_counter() - t)
        self._stats_into(row, arr, page_reads)
        row["passes"] = int(info.get("passes", 0))
        self._rates(row, float(np.median(times)))
        row["correct"] = bool(plan.check())

    def _latency(self, path, arr, request_bytes, path_page, rng, row):
        c = self.c
        elems = request_bytes // DTYPE.itemsize
        n_req = self.data.size // elems
        n = min(c.latency_requests, n_req)
        ids = rng.choice(n_req, n, replace=False).astype(np.int64)
        tmpl = B.timed_requests_template
        t0 = cuda.device_array(n * B.GROUP, dtype=np.int64)
        t1 = cuda.device_array(n * B.GROUP, dtype=np.int64)
        out = cuda.device_array(B.GROUP, dtype=np.int64)
        d_ids = cuda.to_device(ids)
        if not SIMULATOR:   # compile (the simulator has nothing to compile)
            path.launch(tmpl, arr, 1, B.GROUP, [(d_ids[:1], elems, t0, t1, out)])
        arr.reset()
        total = 0
        if path.multi_pass:
            # QD1 for the batch pattern is one launch per request: list, gather, copy, rerun.
            lat = np.empty(n)
            for k in range(n):
                t = time.perf_counter()
                path.launch(tmpl, arr, 1, B.GROUP, [(d_ids[k:k + 1], elems, t0, t1, out)])
                lat[k] = (time.perf_counter() - t) * 1e6
                total += int(out.copy_to_host().sum())
            seconds = lat.sum() / 1e6
        else:
            t = time.perf_counter()
            path.launch(tmpl, arr, 1, B.GROUP, [(d_ids, elems, t0, t1, out)])
            seconds = time.perf_counter() - t
            starts = t0.copy_to_host().reshape(n, B.GROUP).min(axis=1)
            ends = t1.copy_to_host().reshape(n, B.GROUP).max(axis=1)
            lat = (ends - starts) / 1e3
            total = int(out.copy_to_host().sum())
        row["requests"] = int(n)
        row["bytes"] = int(n * request_bytes)
        row["params"]["threads"] = B.GROUP
        self._stats_into(row, arr, n * math.ceil(request_bytes / path_page))
        row["passes"] = None
        row["latency_us"] = {"p50": float(np.percentile(lat, 50)),
                             "p90": float(np.percentile(lat, 90)),
                             "p99": float(np.percentile(lat, 99)),
                             "mean": float(np.mean(lat)), "max": float(np.max(lat))}
        self._rates(row, seconds)
        row["correct"] = total == int(self.request_sums(request_bytes)[ids].sum())


# ------------------------------------------------------------------ progress, machine

def _git_commit():
    """The checkout's short commit hash, or None (no git, not a checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                             capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info():
    """Where the figures come from."""
    gpu = "CUDA simulator (no GPU)"
    if not SIMULATOR:
        name = cuda.get_current_device().name
        gpu = name.decode() if isinstance(name, bytes) else str(name)
    try:
        from importlib.metadata import version
        numba_cuda = version("numba-cuda")
    except Exception:
        numba_cuda = None
    # The setting ``commit`` (GIDS_COMMIT) wins: a copy of the working tree on another machine
    # may carry a stale .git.
    commit = gids.defaults.get("commit") or _git_commit()
    return {"hostname": platform.node(), "gpu": gpu, "cpu_cores": os.cpu_count() or 0,
            "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "numba_cuda": numba_cuda, "gids": gids.__version__,
            "commit": commit}


# ------------------------------------------------------------------ the whole run

def run_bench(config, command="gids bench", progress=True, stream=None, trace=None):
    """Measure the ceilings and every point of ``config``; return the JSON-ready dict.

    Parameters
    ----------
    config : BenchConfig
    command : str
        Recorded as ``command``.
    progress : bool
        Draw a progress bar on ``stream`` (default stderr).
    trace : callable, optional
        The ``trace=`` file of each Runtime the gids and nvme paths open
        (:class:`gids.cli.TraceRecorder`); None: no trace.
    """
    if SIMULATOR:
        sys.setswitchinterval(1e-4)   # simulator kernel <-> daemon handshakes go faster
    result = {
        "schema_version": SCHEMA_VERSION, "simulator": bool(SIMULATOR), "label": LABEL,
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command,
        "machine": machine_info(), "config": config.to_json(), "ceilings": None,
        "paths": {name: {"available": cls.unavailable_reason() is None,
                         "reason": cls.unavailable_reason(), "description": cls.description}
                  for name, cls in B.PATHS.items()},
        "results": [], "plots": [], "targets": [],
    }
    points = plan_points(config)
    steps = len(points) + 1
    bar = Progress("gids bench", stream=stream, enabled=progress)
    bar(0, steps, "ceilings")
    runner = Runner(config, trace=trace)
    try:
        ceiling_bytes = (1 << 20) if SIMULATOR else (1 << 30)
        runner.ceilings = result["ceilings"] = measure_ceilings(ceiling_bytes)
        for done, pt in enumerate(points, start=1):
            label = f"{pt.sweep} {pt.workload} {pt.path}" + (
                f" {pt.x_name}={pt.x:g}" if pt.x is not None else "") + (
                f" on {pt.emulation.label}" if pt.emulation is not None else "")
            bar(done, steps, label)
            row = runner.run_point(pt)
            result["results"].append(row)
            if not row["correct"]:
                say(f"gids bench: {label}: NOT CORRECT", stream=stream)
        bar(steps, steps, "done")
    finally:
        runner.close()
        bar.finish()
    result["targets"] = evaluate_targets(result)
    return result


# ------------------------------------------------------------------ issue 4's targets

@dataclasses.dataclass(frozen=True)
class Target:
    """One of issue 4's targets: on ``workload`` (the ``workloads`` sweep), gids's bytes/s over
    each ``path``'s must be at least ``least``, for every ``(path, least)`` of ``bounds``."""

    workload: str
    bounds: tuple


#: Issue 4's targets, in the issue's order. Ratios of bytes/s of the same requests (so of
#: requests/s too); "all-in-GPU-memory bandwidth" is the memory path's row.
TARGETS = (
    Target("uniform", (("cpu_batch", 1.0), ("zero_copy", 0.5))),
    Target("chains", (("cpu_batch", 3.0),)),
    Target("zipf", (("zero_copy", 2.0),)),
    Target("hits", (("memory", 0.5),)),
)
#: The issue's settings for them: 4 KiB requests; uniform: data 4x the gids cache; chains of 8
#: dependent requests; Zipf(0.99) through a cache of 10 % of the data.
ISSUE_SETTINGS = dict(request_bytes=4096, cache_fraction=0.25, steps=8, zipf_cache_fraction=0.10)


def _size_text(nbytes):
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def target_setting(workload, config):
    """``(text, issue_setting)``: what the run's ``config`` (a dict, as in the JSON) made of
    ``workload``, and whether that is the issue's setting (:data:`ISSUE_SETTINGS`)."""
    size = _size_text(config["request_bytes"])
    ok = config["request_bytes"] == ISSUE_SETTINGS["request_bytes"]
    if workload == "uniform":
        cf = config["cache_fraction"]
        ok = ok and cf == ISSUE_SETTINGS["cache_fraction"]
        return f"uniform random {size} reads, data {1 / cf:.3g}x the gids cache", ok
    if workload == "chains":
        ok = ok and config["steps"] == ISSUE_SETTINGS["steps"]
        return f"chains of {config['steps']} dependent {size} reads", ok
    if workload == "zipf":
        zcf = config["zipf_cache_fraction"]
        ok = ok and zcf == ISSUE_SETTINGS["zipf_cache_fraction"]
        return f"Zipf({ZIPF_S}) {size} reads, gids cache {100 * zcf:.3g} % of the data", ok
    if workload == "hits":
        return f"100 % hits, {size} reads", ok
    raise ValueError(f"no target on workload {workload!r}")


def _usable(row):
    return row is not None and row["correct"] and bool(row["bytes_per_s"])


def evaluate_targets(result):
    """Issue 4's targets from a run's ``workloads`` rows and issue 23's from its ``tier`` rows
    (``result`` as :func:`run_bench` returns it, or its JSON read back): the ``targets`` list
    of the JSON schema (a tier target has ``"sweep": "tier"``)."""
    return _workload_targets(result) + evaluate_tier_targets(result)


#: Issue 23's host-tier targets: (workload, setting, the row that must be fast, the reference
#: row, least ratio of their bytes/s). Rows are named by (path, store, gids cache fraction or
#: None, host tier fraction or None, "static" / "victims" or None without a tier). On each
#: emulated SSD array the Zipf target is measured again (:data:`EMULATED_TIER_TARGET`).
TIER_TARGETS = (
    ("pointer_chase", ("pointer chasing, 8-byte elements, file store in a host tier (direct) "
                       "vs zero-copy over RAM"), ("gids", "file", None, 1.0, "static"),
     ("zero_copy", "memory", None, None, None), 0.8),
    ("zipf", (f"Zipf({ZIPF_S}) 4 KiB reads, file store, GPU cache 10 % + host tier 20 % vs "
              "gids over RAM, cache 10 %, no tier"), ("gids", "file", 0.10, 0.20, "static"),
     ("gids", "memory", 0.10, 0.0, None), 0.9),
)


#: The Zipf target on an emulated SSD array: the file is read through the page cache there
#: (store "cached"), the reference is gids over a MemoryStore on the same array.
EMULATED_TIER_TARGET = (
    "zipf", (f"Zipf({ZIPF_S}) 4 KiB reads, page-cached file, GPU cache 10 % + host tier "
             "20 % vs gids over a MemoryStore, cache 10 %, no tier"),
    ("gids", "cached", 0.10, 0.20, "static"), ("gids", "memory", 0.10, 0.0, None), 0.9)


def _tier_key(row):
    p = row["params"]
    cache = p.get("cache_fraction") if row["workload"] == "zipf" else None
    tier = row["x"] if row["x_name"] == "host_tier_fraction" else None
    e = row.get("emulation")
    return (row["workload"], row["path"], p.get("store"), cache, tier, p.get("tier_fill"),
            None if e is None else (e["ssd"], e["n_ssd"]))


def evaluate_tier_targets(result):
    """Issue 23's targets (:data:`TIER_TARGETS`) from the ``tier`` sweep's rows, then the Zipf
    one on each emulated SSD array of the run (:data:`EMULATED_TIER_TARGET`), both of its rows
    on that array; its setting ends "both on N x PROFILE (emulated)"."""
    config = result["config"]
    if "tier" not in config["sweeps"]:
        return []
    rows = {_tier_key(r): r for r in result["results"] if r["sweep"] == "tier"}
    runs = [(t, None) for t in TIER_TARGETS] + [
        (EMULATED_TIER_TARGET, e) for e in config.get("emulations", [])]
    out = []
    for (workload, setting, mine_key, other_key, least), e in runs:
        array = None if e is None else (e["ssd"], e["n_ssd"])
        mine = rows.get((workload, *mine_key, array))
        other = rows.get((workload, *other_key, array))
        ratio = (mine["bytes_per_s"] / other["bytes_per_s"]
                 if _usable(mine) and _usable(other) else None)
        where = "" if e is None else f", both on {emulation_cell(e)} (emulated)"
        out.append({"sweep": "tier", "workload": workload, "setting": setting + where,
                    "issue_setting": config["request_bytes"] == 4096,
                    "goal": f"gids >= {least:g}x {other_key[0]} ({other_key[1]} store)",
                    "ratios": [{"path": other_key[0], "least": least, "ratio": ratio}],
                    "met": None if ratio is None else ratio >= least,
                    "emulation": e})
    return out


def _workload_targets(result):
    c = result["config"]
    if "workloads" not in c["sweeps"]:
        return []
    rows = {(r["workload"], r["path"]): r for r in result["results"] if r["sweep"] == "workloads"}
    out = []
    for t in TARGETS:
        if t.workload not in c["workloads"]:
            continue
        setting, issue = target_setting(t.workload, c)
        mine = rows.get((t.workload, "gids"))
        ratios = []
        for path, least in t.bounds:
            other = rows.get((t.workload, path))
            ratio = (mine["bytes_per_s"] / other["bytes_per_s"]
                     if _usable(mine) and _usable(other) else None)
            ratios.append({"path": path, "least": float(least), "ratio": ratio})
        met = (None if any(r["ratio"] is None for r in ratios)
               else all(r["ratio"] >= r["least"] for r in ratios))
        goal = "gids >= " + " and >= ".join(f"{least:g}x {path}" for path, least in t.bounds)
        out.append({"sweep": "workloads", "workload": t.workload, "setting": setting,
                    "issue_setting": issue,
                    "goal": goal, "ratios": ratios, "met": met, "emulation": None})
    return out


def format_targets(result):
    """Issue 4's targets as a Markdown table: the rows they compare, each ratio, met or not."""
    # A result written before targets were part of the JSON gets them computed here.
    targets = result["targets"] if "targets" in result else evaluate_targets(result)
    tier = [t for t in targets if t.get("sweep") == "tier"]
    targets = [t for t in targets if t.get("sweep") != "tier"]
    lines = _format_tier_targets(tier)
    if not targets:
        return lines
    rows = {(r["workload"], r["path"]): r for r in result["results"] if r["sweep"] == "workloads"}
    paths = ["memory", "zero_copy", "gids", "cpu_batch"]
    lines += ["", "Issue 4's targets (gids's bytes/s over the named path's, same requests; "
                 "requests/s per path):", ""]
    table_rows = []
    for t in targets:
        cells = []
        for p in paths:
            r = rows.get((t["workload"], p))
            cells.append("-" if r is None else
                         _fmt_rate(r["requests_per_s"]) if r["correct"] else
                         ("ERROR" if r["error"] else "WRONG"))
        goal = "gids " + " and ".join(
            f">= {x['least']:g}x {x['path']} "
            f"({'-' if x['ratio'] is None else format(x['ratio'], '.2f') + 'x'})"
            for x in t["ratios"])
        met = {True: "**yes**", False: "no", None: "-"}[t["met"]]
        name = t["setting"] + ("" if t["issue_setting"] else " (not the issue's setting)")
        table_rows.append([name, *cells, goal, met])
    lines += table(["workload", *paths, "target (ratio)", "met"], table_rows,
                   markdown=True).splitlines()
    return lines


def _format_tier_targets(targets):
    if not targets:
        return []
    rows = [[t["setting"], t["goal"],
             "-" if t["ratios"][0]["ratio"] is None else f"{t['ratios'][0]['ratio']:.2f}x",
             {True: "**yes**", False: "no", None: "-"}[t["met"]]] for t in targets]
    return ["", "Issue 23's host-tier targets (bytes/s of the same requests):", "",
            *table(["workload", "target", "ratio", "met"], rows, markdown=True).splitlines()]


# ------------------------------------------------------------------ reporting

#: How the table names a row's store.
STORE_NAMES = {"cached": "page-cached file"}


def _fmt_rate(v, unit=""):
    if v is None:
        return "-"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g} {suffix}{unit}"
    return f"{v:.3g} {unit}".strip()


def _fmt_frac(v):
    return "-" if v is None else f"{v:.3g}"


def format_table(result):
    """The results as a Markdown table (with the ceilings and, in the simulator, a warning)."""
    sim = result["simulator"]
    c = result["ceilings"] or {}
    lines = []
    if sim:
        lines += ["**SIMULATOR FIGURES: the CUDA simulator ran these (Python threads, tiny sizes);",
                  "they test the harness and are not GPU measurements.**", ""]
    m = result["machine"]
    lines.append(f"gids bench, {result['date']}, {m['gpu']}, {m['cpu_cores']} CPU cores, "
                 f"commit {m['commit']}, `{result['command']}`")
    if c:
        lines.append(f"Ceilings in this run{' (simulator figures)' if sim else ''}: pinned H2D "
                     f"copy {c['h2d_pinned_Bps'] / 1e9:.3g} GB/s; device-to-device copy "
                     f"{c['d2d_Bps'] / 1e9:.3g} GB/s (read + write).")
    rows = []
    for r in result["results"]:
        x = "" if r["x"] is None else f"{r['x_name']}={r['x']:g}"
        if r["sweep"] == "tier":
            fill = r["params"].get("tier_fill")
            store = STORE_NAMES.get(r["params"]["store"], r["params"]["store"])
            x = ", ".join(filter(None, [x, f"{store} store",
                                        "victim fill" if fill == "victims" else ""]))
        lat = r["latency_us"]
        lat_s = "-" if lat is None else f"{lat['p50']:.3g} / {lat['p99']:.3g}"
        ok = "yes" if r["correct"] else ("ERROR" if r["error"] else "WRONG")
        hit = "-" if r["hit_rate"] is None else f"{r['hit_rate']:.2f}"
        cache = r["params"]["cache_bytes"]     # of the data, for the paths with a page cache
        cache_s = "-" if cache is None else f"{100 * cache / r['params']['data_bytes']:.3g} %"
        rows.append([r["sweep"], r["workload"], r["path"], x, cache_s,
                     emulation_cell(r.get("emulation")),
                     _fmt_rate(r["requests_per_s"]), _fmt_rate(r["bytes_per_s"], "B/s"),
                     _fmt_frac(r["fraction_of_h2d"]), _fmt_frac(r["fraction_of_d2d"]), hit, lat_s,
                     ok, "simulator" if sim else "GPU"])
    lines += ["", table(["sweep", "workload", "path", "x", "gids cache", "SSDs", "requests/s",
                         "bytes/s", "of H2D", "of D2D", "hit rate", "p50 / p99 us", "ok",
                         "figure"], rows, markdown=True)]
    if any(r.get("emulation") for r in result["results"]):
        lines += ["", EMULATION_NOTE + ". An emulated row's daemon still reads its store: its "
                  "file is read through the page cache (a page-cached file store, read once "
                  "beforehand), not with O_DIRECT, so that the modelled drives and not the "
                  "disk set the pace."]
    errors = [r for r in result["results"] if r["error"]]
    for r in errors:
        lines.append(f"\nerror in {r['sweep']}/{r['workload']}/{r['path']} x={r['x']}: "
                     f"{r['error']}")
    lines += format_targets(result)
    if sim:
        lines += ["", "**(simulator figures: not GPU measurements)**"]
    return "\n".join(lines) + "\n"


def write_plots(result, out_dir):
    """One PNG per sweep in ``out_dir``; returns the files written ([] without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return []
    sim = result["simulator"]
    title_tag = " [SIMULATOR figure: not a GPU measurement]" if sim else ""
    # One colour per path in every plot.
    colour = {p: f"C{k}" for k, p in enumerate(B.PATHS)}
    c = result["ceilings"] or {}
    files = []
    rows = result["results"]
    for sweep in SWEEPS:
        mine = [r for r in rows if r["sweep"] == sweep and r["seconds"] is not None]
        if not mine:
            continue
        if sweep in ("workloads", "latency"):
            fig, ax = plt.subplots(figsize=(9, 4.5))
            groups = sorted({r["workload"] for r in mine}, key=[r["workload"] for r in mine].index)
            paths = sorted({r["path"] for r in mine}, key=[r["path"] for r in mine].index)
            width = 0.8 / max(1, len(paths))
            for j, p in enumerate(paths):
                ys = []
                for g in groups:
                    hit = [r for r in mine if r["workload"] == g and r["path"] == p]
                    if sweep == "latency":
                        ys.append(hit[0]["latency_us"]["p50"] if hit else 0)
                    else:
                        ys.append(hit[0]["requests_per_s"] if hit else 0)
                ax.bar(np.arange(len(groups)) + j * width, ys, width, label=p, color=colour[p])
            ax.set_xticks(np.arange(len(groups)) + width * (len(paths) - 1) / 2)
            ax.set_xticklabels(groups)
            ax.set_yscale("log")
            ax.set_ylabel("p50 latency (us)" if sweep == "latency" else "requests/s")
        else:
            names = sorted({r["x_name"] for r in mine}, key=[r["x_name"] for r in mine].index)
            fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.5), squeeze=False)
            for ax, name in zip(axes[0], names):
                # One line per path and emulated SSD array (dashed: emulated).
                lines = {(r["path"], emulation_cell(r.get("emulation")))
                         for r in mine if r["x_name"] == name}
                for p, ssds in sorted(lines):
                    pts = [r for r in mine if r["x_name"] == name and r["path"] == p
                           and emulation_cell(r.get("emulation")) == ssds]
                    ys = [r["bytes_per_s"] / 1e9 if sweep == "bandwidth" else r["requests_per_s"]
                          for r in pts]
                    ax.plot([r["x"] for r in pts], ys, marker="o",
                            label=p if ssds == "-" else f"{p} on {ssds}", color=colour[p],
                            ls="-" if ssds == "-" else "--")
                if sweep == "bandwidth" and c:
                    ax.axhline(c["h2d_pinned_Bps"] / 1e9, ls="--", color="gray",
                               label="pinned H2D copy")
                    ax.set_xscale("log", base=2)
                if name in ("threads", "queues", "queue_depth", "daemon_threads"):
                    ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_xlabel(name)
                ax.set_ylabel("GB/s" if sweep == "bandwidth" else "requests/s")
                ax.legend(fontsize=8)
        if sweep in ("workloads", "latency"):
            ax.legend(fontsize=8)
        fig.suptitle(f"gids bench: {sweep}{title_tag}", fontsize=10)
        if sim:
            fig.text(0.5, 0.5, "SIMULATOR", ha="center", va="center", fontsize=60, alpha=0.12,
                     rotation=20, color="red")
        fig.text(0.01, 0.01, f"{result['machine']['gpu']}, {result['date']}, "
                             f"{result['label']}", fontsize=7)
        fig.tight_layout()
        name = os.path.join(out_dir, f"bench_{sweep}.png")
        fig.savefig(name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def write_outputs(result, out_dir):
    """bench.json, bench.md and the PNGs into ``out_dir``; returns the files written."""
    os.makedirs(out_dir, exist_ok=True)
    result["plots"] = [os.path.basename(p) for p in write_plots(result, out_dir)]
    files = [os.path.join(out_dir, p) for p in result["plots"]]
    with open(os.path.join(out_dir, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out_dir, "bench.md"), "w") as f:
        f.write(format_table(result))
    return files + [os.path.join(out_dir, "bench.json"), os.path.join(out_dir, "bench.md")]


# ------------------------------------------------------------------ command line

def _int_list(text):
    try:
        return [parse_size(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _float_list(text):
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None


def parse_size(text):
    """``"4096"``, ``"4K"``, ``"1M"``, ``"2G"`` (binary units) -> int."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    try:
        return int(float(t) * mult) if "." in t else int(t) * mult
    except ValueError:
        raise ValueError(f"not a size: {text!r} (give bytes, or 4K, 1M, 2G)") from None


def _size(text):
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_bench_arguments(subparsers):
    """Register the ``bench`` subcommand on an ``argparse`` subparsers object.

    The parser it adds calls :func:`cmd_bench` through ``set_defaults(func=...)``.
    """
    p = subparsers.add_parser(
        "bench", help="compare the data paths (GPU memory, zero-copy, gids, CPU batch)",
        description="Measure the data paths over sweeps, with the PCIe and device-copy "
                    "ceilings of the same run. In the CUDA simulator sizes are tiny and every "
                    "figure is labelled a simulator figure.")
    p.add_argument("sweeps", nargs="*", default=["all"], metavar="SWEEP",
                   help=f"any of {', '.join(SWEEPS)}, or all (default); or files alone (gids "
                        "on a real file, each storage engine: workloads/file_bench.py); or "
                        "prefetch alone (a batch loop with the next batch prefetched or held: "
                        "workloads/prefetch_bench.py)")
    p.add_argument("--paths", type=lambda s: [x for x in s.split(",") if x],
                   help=f"comma list of {', '.join(B.PATHS)} (default: those available here, "
                        "but cpu_batch_kvikio only when named)")
    p.add_argument("--workloads", type=lambda s: [x for x in s.split(",") if x],
                   help=f"for the workloads sweep: comma list of {', '.join(WORKLOADS)}")
    g = DEFAULTS
    p.add_argument("--data-bytes", type=_size, help=f"data size (default {g['data_bytes']})")
    p.add_argument("--request-bytes", type=_size,
                   help=f"request size (default {g['request_bytes']})")
    p.add_argument("--cache-fraction", type=float,
                   help="gids cache / data (default 0.25: data 4x the cache)")
    p.add_argument("--zipf-cache-fraction", type=float,
                   help="gids cache / data for the zipf workload (default 0.10, the issue's)")
    p.add_argument("--threads", type=_size, help=f"GPU threads (default {g['threads']})")
    p.add_argument("--block", type=int, help=f"threads per block (default {g['block']})")
    p.add_argument("--requests", type=_size, help=f"requests per run (default {g['requests']})")
    p.add_argument("--batch-bytes", type=_size,
                   help=f"cpu_batch buffer, and the work per launch (default {g['batch_bytes']})")
    p.add_argument("--reps", type=int, help=f"timed runs per point (median; default {g['reps']})")
    p.add_argument("--steps", type=int, help="reads per chain (default 8)")
    p.add_argument("--iops-threads", type=_int_list, help="iops sweep: GPU thread counts")
    p.add_argument("--queues", type=_int_list, help="iops sweep: gids queue counts")
    p.add_argument("--queue-depths", type=_int_list, help="iops sweep: gids queue depths")
    p.add_argument("--daemon-threads", type=_int_list,
                   help="iops sweep: gids daemon threads (and cpu_batch gather threads)")
    p.add_argument("--gather-threads", type=int, help="cpu_batch gather threads elsewhere")
    p.add_argument("--request-sizes", type=_int_list, help="bandwidth sweep: request sizes")
    p.add_argument("--hit-rates", type=_float_list,
                   help="cache sweep: shares of requests to the warmed hot set")
    p.add_argument("--latency-requests", type=int, help="latency sweep: requests timed")
    p.add_argument("--store", choices=["memory", "file"], default=None,
                   help="where the data live: RAM (default) or a file in --dir")
    p.add_argument("--dir", type=existing_dir, default=None,
                   help="folder for the data file (default: temp)")
    p.add_argument("--seed", type=nonnegative_int, default=None)
    p.add_argument("--out", default=None,
                   help="write bench.json, bench.md and one PNG per sweep into this folder")
    p.add_argument("--quick", action="store_true",
                   help="smaller GPU sizes and fewer sweep points (a first run)")
    p.add_argument("--json", action="store_true", help="print the JSON, not the table")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_trace_argument(p)
    add_ssd_arguments(p, runs="the tier sweep's Zipf target rows (gids, GPU cache a tenth of "
                              "the data; the file read through the page cache)",
                      n_ssd_also="; also the files and prefetch sweeps' drive counts (their "
                                 "model: --profile)")
    from workloads.file_bench import add_files_arguments
    add_files_arguments(p)
    from workloads.prefetch_bench import add_prefetch_arguments
    add_prefetch_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


_CONFIG_ARGS = ("paths", "workloads", "data_bytes", "request_bytes", "cache_fraction",
                "zipf_cache_fraction",
                "threads", "block", "requests", "batch_bytes", "reps", "steps",
                "iops_threads", "queues", "queue_depths", "daemon_threads", "gather_threads",
                "request_sizes", "hit_rates", "latency_requests", "store", "dir", "seed")


def cmd_bench(args):
    """Run ``gids bench`` from parsed arguments; 0 if every result is correct, 1 if one is
    not, 2 for a bad argument."""
    for own in ("files", "prefetch"):   # their own rows and reports (file_bench, prefetch_bench)
        if own not in args.sweeps:
            continue
        if len(args.sweeps) > 1:
            sys.stderr.write(f"gids bench: error: run the {own} sweep on its own\n")
            return 2
        if getattr(args, "ssd", None) is not None:
            sys.stderr.write(f"gids bench: error: the {own} sweep takes its drive model from "
                             "--profile, not --ssd\n")
            return 2
        if own == "files":
            from workloads.file_bench import cmd_files
            return cmd_files(args)
        from workloads.prefetch_bench import cmd_prefetch
        return cmd_prefetch(args)
    options = {k: getattr(args, k) for k in _CONFIG_ARGS if getattr(args, k, None) is not None}
    try:
        options["emulations"] = emulations(args)
        config = make_config(quick=getattr(args, "quick", False),
                             sweeps=list(args.sweeps) or ["all"], **options)
    except ValueError as exc:    # a ConfigError, or emulations()'s --n-ssd without --ssd
        message = str(exc).removeprefix("gids bench: ").removeprefix("gids: ")
        sys.stderr.write(f"gids bench: error: {message}\n")
        return 2
    command = getattr(args, "command", None) or " ".join(
        ["gids"] + [shlex.quote(a) for a in sys.argv[1:]])
    with TraceRecorder(getattr(args, "trace", None)) as trace:
        result = run_bench(config, command=command, progress=not args.no_progress,
                           trace=trace if trace.path else None)
    if args.out:
        write_outputs(result, args.out)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table(result), end="")
        if args.out:
            plots = result["plots"] or ["none: matplotlib is not importable "
                                        "(pip install 'gids[plot]')"]
            print(f"\nwrote {args.out}/bench.json, bench.md; plots: {', '.join(plots)}")
    return 0 if all(r["correct"] for r in result["results"]) else 1


def main(argv=None):
    """``python -m workloads.bench ...``: the same as ``gids bench ...``."""
    parser = argparse.ArgumentParser(prog="python -m workloads.bench")
    sub = parser.add_subparsers(dest="cmd")
    add_bench_arguments(sub).prog = "python -m workloads.bench"
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(["bench"] + argv)
    args.command = " ".join(["python -m workloads.bench"] + [shlex.quote(a) for a in argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
