"""Every setting of gids, in one table: its default, its environment variable, when it applies.

Users read and change them as ``gids.defaults`` (this module, re-exported), as in KvikIO:

>>> import gids
>>> gids.defaults.get("page_size")
4096
>>> with gids.defaults.set(page_size=65536, daemon_threads=4):
...     rt = gids.Runtime()          # doctest: +SKIP

Each ``GIDS_<NAME>`` environment variable is read once, when this module is imported; no other
module reads one. Settings marked *run* are read when they are used (a new Runtime, a benchmark's
record), so :func:`set` changes them for a ``with`` block; values given to :class:`gids.Runtime`
override them. Settings marked *import* are compiled into kernels (or the daemon's loop) when
their module is imported, so only the environment variable sets them: :func:`set` refuses them.

Name (environment variable, when; default on a GPU / in the simulator): what it trades.

- ``page_size`` (GIDS_PAGE_SIZE, run; 4096): bytes per cache page and per I/O, a power of two
  from 512 B to 64 KiB: fewer, larger requests vs bytes read that nobody uses.
- ``cache_bytes`` (GIDS_CACHE_BYTES, run; 1 GiB / 256 KiB): GPU memory for the page cache vs
  for everything else.
- ``host_cache_bytes`` (GIDS_HOST_CACHE_BYTES, run; 0): pinned, device-mapped host memory of
  the host tier (``rt.host_tier``), pages between the GPU cache and the store; 0: no tier.
- ``host_tier_fill`` (GIDS_HOST_TIER_FILL, run; static): ``victims`` also puts clean pages of
  read-only arrays evicted from the GPU cache into the host tier (freed by clock between
  kernels): reuse kept in RAM vs a page copy to host memory per eviction.
- ``daemon_threads`` (GIDS_DAEMON_THREADS, run; cores - 2 within 1..8 / 1): host threads
  serving the queues; each keeps a core busy while requests flow.
- ``queues`` (GIDS_QUEUES, run; None / 4): queue pairs. Requests in flight keep PCIe busy;
  each entry costs a page of mapped staging memory. None: :func:`default_queues`.
- ``queue_depth`` (GIDS_QUEUE_DEPTH, run; 128 / 32): entries per queue (>= a warp), same trade.
- ``timeout`` (GIDS_TIMEOUT, run; 10 s / 60 s): bound on any one wait inside a kernel; a stuck
  wait becomes an error sooner vs a slow one is not mistaken for stuck.
- ``engine`` (GIDS_ENGINE, run; io_uring): the host daemon's file I/O: ``io_uring`` (a ring
  per daemon thread, many reads in flight each; ``threads`` where the kernel refuses it) or
  ``threads`` (one synchronous pread/pwrite per thread at a time).
- ``engine_depth`` (GIDS_ENGINE_DEPTH, run; 256): entries of each daemon thread's ring
  (rounded up to a power of two): I/Os in flight per thread vs memory pinned for them.
- ``engine_fixed_buffers`` (GIDS_ENGINE_FIXED_BUFFERS, run; 1): each daemon thread registers
  its staging pages with its ring (READ_FIXED / WRITE_FIXED: pinned once, not per I/O; plain
  reads and writes where the kernel refuses, as ``rt.stats()`` says; 0: never): the kernel's
  cost per I/O vs staging memory locked for the rings (RLIMIT_MEMLOCK).
- ``max_registers`` (GIDS_MAX_REGISTERS, import; 128): register cap of ``gids.jit`` kernels
  (0: none): spills on the miss path vs blocks per SM (128: 2 of 256 threads, 80: 3, 64: 4).
- ``sim_warp_size`` (GIDS_SIM_WARP_SIZE, import; 1): simulator only. 32 emulates whole warps,
  slowly, so that tests reach the multi-lane paths (:mod:`kernels.warp`).
- ``bulk_copy_lanes`` (GIDS_BULK_COPY_LANES, import; 8): a warp of at most this many lanes
  copies a page from host memory with the bulk copy (cc >= 9.0; 0: never), fuller warps with
  their own loads: the copy's latency vs its block's one shared buffer.
- ``early_copy`` (GIDS_EARLY_COPY, import; 1): a lone miss on a read-only zero-copy array
  starts its page's bulk copy while its request is out (0: after).
- ``poll_ns`` (GIDS_POLL_NS, import; 1024,1024,8192): the completion poll, ns: first sleep,
  then back-off from min doubling to max: latency vs loads over PCIe.
- ``hot_queue_every`` (GIDS_HOT_QUEUE_EVERY, import; 32): a daemon thread whose last pass found
  one busy queue looks at it again every this many queues (0: never): latency vs fairness.
- ``whole_cache_registers`` (GIDS_WHOLE_CACHE_REGISTERS, import; 64): register cap of the BFS
  kernels where the cache holds every page of the graph (0: ``max_registers``).
- ``bfs_touch`` (GIDS_BFS_TOUCH, import; auto): ``always`` keeps the BFS's touches ahead even
  when every page is resident, to measure what they cost.
- ``bfs_resident_first`` (GIDS_BFS_RESIDENT_FIRST, import; 1): 0 keeps the miss path in the
  BFS's top-down step over a resident graph, to measure what leaving it out gains.
- ``rows_resident_first`` (GIDS_ROWS_RESIDENT_FIRST, run; auto): 1: ``Runtime.gather_rows``
  copies the rows whose pages are resident in a launch without a miss path, then the others
  with it; 0: one launch with it; auto: resident first for gathers of at least 2**16 rows, one
  launch below: registers, occupancy and pins a warp holds in the hit path vs a second launch's
  host cost per gather.
- ``launch_past_dispatcher`` (GIDS_LAUNCH_PAST_DISPATCHER, import; 1): ``gather_rows``
  launches its compiled kernel through the driver (``cuLaunchKernel``) where every argument's
  type is known, the handle's parameters written once and the arrays' from their pointers,
  shapes and strides (:func:`kernels.launch.launch`); 0: numba-cuda's dispatcher at each launch
  (its per-launch typing and marshalling of ~150 parameters, vs relying on more of its
  internals).
- ``hold_fraction`` (GIDS_HOLD_FRACTION, run; 0.5): the most of the cache that
  ``Runtime.hold`` may pin (``0 < f <= 0.9``): pages kept for the next batches vs room for
  everything else.
- ``commit`` (GIDS_COMMIT, run; None: ask git): the commit benchmarks record (a copy of the
  tree on another machine may carry a stale .git).

This module imports nothing from the project but :mod:`kernels.errors`: kernels, host_daemon
and gids all read it.
"""
import contextlib
import os

from kernels.errors import ConfigError

#: The setting's value is chosen by the world (GPU or simulator) when it is read.
_WORLD = object()


def _gpu_daemon_threads():
    return max(1, min(8, (os.cpu_count() or 2) - 2))


#: name -> (GPU default, simulator default). A callable default is called when read.
_WORLD_DEFAULTS = {
    "cache_bytes": (1 << 30, 256 << 10),
    "daemon_threads": (_gpu_daemon_threads, 1),
    "queues": (None, 4),    # None: default_queues(page_size, queue_depth)
    "queue_depth": (128, 32),
    "timeout": (10.0, 60.0),   # the simulator is ~1e5 times slower than a GPU
}


def _int(low, high=None):
    def parse(text):
        value = int(text)
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"from {low} to {high}"
            raise ValueError(f"must be an integer {bound}")
        return value
    return parse


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise ValueError("must be a number > 0")
    return value


def _one_of(*choices):
    def parse(text):
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text
    return parse


def _warp_size(text):
    if text not in ("1", "32"):
        raise ValueError("must be 1 or 32")
    return int(text)


def _flag(text):
    return _int(0)(text) != 0


def _poll_ns(text):
    values = tuple(int(v) for v in text.split(","))
    if len(values) != 3 or min(values) < 0:
        raise ValueError("must be 3 non-negative integers separated by commas")
    return values


def _fraction(text):
    value = float(text)
    if not 0 < value <= 0.9:
        raise ValueError("must be a number > 0 and <= 0.9")
    return value


def _auto_or_flag(text):
    return "auto" if text == "auto" else _flag(text)


def _registers(text):
    return _int(0, 255)(text) or None     # 0: no cap


#: name -> (default or _WORLD, parser of the environment's text, "run" or "import").
_TABLE = {
    "page_size": (4096, _int(512, 64 << 10), "run"),
    "cache_bytes": (_WORLD, _int(1), "run"),
    "host_cache_bytes": (0, _int(0), "run"),
    "host_tier_fill": ("static", _one_of("static", "victims"), "run"),
    "daemon_threads": (_WORLD, _int(1), "run"),
    "queues": (_WORLD, _int(1), "run"),
    "queue_depth": (_WORLD, _int(1), "run"),
    "timeout": (_WORLD, _positive_float, "run"),
    "engine": ("io_uring", _one_of("io_uring", "threads"), "run"),
    "engine_depth": (256, _int(1), "run"),
    "engine_fixed_buffers": (True, _flag, "run"),
    "max_registers": (128, _registers, "import"),
    "sim_warp_size": (1, _warp_size, "import"),
    "bulk_copy_lanes": (8, _int(0), "import"),
    "early_copy": (True, _flag, "import"),
    "poll_ns": ((1024, 1024, 8192), _poll_ns, "import"),
    "hot_queue_every": (32, _int(0), "import"),
    "whole_cache_registers": (64, _registers, "import"),
    "bfs_touch": ("auto", _one_of("auto", "always"), "import"),
    "bfs_resident_first": (True, _flag, "import"),
    "rows_resident_first": ("auto", _auto_or_flag, "run"),
    "launch_past_dispatcher": (True, _flag, "import"),
    "commit": (None, str, "run"),
    "hold_fraction": (0.5, _fraction, "run"),
}


def env_name(name):
    """The environment variable of setting ``name``."""
    return "GIDS_" + name.upper()


def _from_environment():
    values = {}
    for name, (default, parse, _) in _TABLE.items():
        text = os.environ.get(env_name(name), "").strip()
        if not text:
            values[name] = default
            continue
        try:
            value = parse(text)
        except ValueError as exc:
            raise ConfigError(f"gids: {env_name(name)}={text!r}: {exc}") from None
        values[name] = value
    return values


_settings = _from_environment()


def _simulator():
    from numba import config  # read when asked: the world may be chosen after this import
    return bool(config.ENABLE_CUDASIM)


def get(name):
    """The current value of setting ``name``."""
    if name not in _settings:
        raise KeyError(f"gids: no setting {name!r}; settings are {sorted(_settings)}")
    value = _settings[name]
    if value is _WORLD:
        value = _WORLD_DEFAULTS[name][1 if _simulator() else 0]
        if callable(value):
            value = value()
    return value


def all_settings():
    """Every setting's current value, by name."""
    return {name: get(name) for name in _settings}


def when(name):
    """``"run"`` if :func:`set` changes setting ``name``, ``"import"`` if only its environment
    variable does (it is compiled in when its module is imported)."""
    return _TABLE[name][2]


@contextlib.contextmanager
def set(**changes):   # noqa: A001 - mirrors kvikio.defaults.set
    """Change settings inside a ``with`` block (restored on exit). Only *run* settings."""
    unknown = [k for k in changes if k not in _settings]
    if unknown:
        raise KeyError(f"gids: no setting(s) {unknown}; settings are {sorted(_settings)}")
    fixed = [k for k in changes if when(k) != "run"]
    if fixed:
        raise ConfigError(f"gids: {', '.join(fixed)} take(s) effect at import (compiled in); "
                          f"set {', '.join(env_name(k) for k in fixed)} before starting Python")
    saved = dict(_settings)
    _settings.update(changes)
    try:
        yield
    finally:
        _settings.clear()
        _settings.update(saved)


#: Mapped host memory the default queue count keeps its staging buffers within.
STAGING_BUDGET = 256 << 20


def default_queues(page_size, queue_depth):
    """The queue count used when ``queues`` is None: as many as keep the staging buffers
    (queues x depth pages of mapped host memory) within :data:`STAGING_BUDGET`, at most 512
    (4 KiB pages: 512; 64 KiB: 32). Requests in flight are what keeps PCIe busy."""
    return max(1, min(512, STAGING_BUDGET // (queue_depth * page_size)))
