"""Default settings of new Runtimes, readable and changeable for a scope, as in KvikIO.

>>> import gids
>>> gids.defaults.get("page_size")
4096
>>> with gids.defaults.set(page_size=65536, daemon_threads=4):
...     rt = gids.Runtime()          # doctest: +SKIP

Values given to :class:`gids.Runtime` override these.
"""
import contextlib
import os

from kernels.platform import SIMULATOR

_settings = {
    # Bytes per cache page and per I/O: a power of two from 512 B to 64 KiB.
    "page_size": 4096,
    # GPU memory for the page cache (bytes). The simulator runs tiny caches.
    "cache_bytes": (256 << 10) if SIMULATOR else (1 << 30),
    # Host threads serving the queues. Each keeps a core busy while requests flow.
    "daemon_threads": 1 if SIMULATOR else max(1, min(8, (os.cpu_count() or 2) - 2)),
    # Submission/completion queue pairs, and entries per queue (>= a warp). None: as many as
    # keep the staging buffers (queues x depth pages of mapped host memory) within 256 MiB,
    # at most 512 (4 KiB pages: 512; 64 KiB: 32). Requests in flight are what keeps PCIe busy:
    # all-miss 4 KiB reads on the H200 ran at 4.2 M pages/s with 128 queues, 11.2 M with 512.
    "queues": 4 if SIMULATOR else None,
    "queue_depth": 32 if SIMULATOR else 128,
    # Bound (seconds) on any one wait inside a kernel: for a queue entry, a completion, a
    # free slot, another thread's load. The simulator is ~1e5 times slower than a GPU.
    "timeout": 60.0 if SIMULATOR else 10.0,
    # The host daemon's file I/O: "io_uring" (a ring per daemon thread, many reads in flight
    # each; falls back to "threads", saying so, where the kernel refuses it) or "threads" (one
    # synchronous pread/pwrite per thread at a time). GIDS_ENGINE sets it.
    "engine": os.environ.get("GIDS_ENGINE", "io_uring"),
    # Entries of each daemon thread's ring (rounded up to a power of two): I/Os a thread keeps
    # in flight. GIDS_ENGINE_DEPTH sets it.
    "engine_depth": int(os.environ.get("GIDS_ENGINE_DEPTH", "256")),
}


#: Mapped host memory the default queue count keeps its staging buffers within.
STAGING_BUDGET = 256 << 20


def default_queues(page_size, queue_depth):
    """The queue count used when ``queues`` is None (see the setting's comment)."""
    return max(1, min(512, STAGING_BUDGET // (queue_depth * page_size)))


def get(name):
    """The current default of setting ``name``."""
    if name not in _settings:
        raise KeyError(f"gids: no setting {name!r}; settings are {sorted(_settings)}")
    return _settings[name]


def all_settings():
    return dict(_settings)


@contextlib.contextmanager
def set(**changes):   # noqa: A001 - mirrors kvikio.defaults.set
    """Change defaults inside a ``with`` block (restored on exit)."""
    unknown = [k for k in changes if k not in _settings]
    if unknown:
        raise KeyError(f"gids: no setting(s) {unknown}; settings are {sorted(_settings)}")
    saved = dict(_settings)
    _settings.update(changes)
    try:
        yield
    finally:
        _settings.clear()
        _settings.update(saved)
