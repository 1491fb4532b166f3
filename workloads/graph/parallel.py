"""Run the graph builders' numba kernels on several cores: a thread pool over slices of the work.

The Kronecker generator and the CSR writer do their per-element work in small ``numba.njit``
kernels compiled with ``nogil=True``: each is a plain serial loop over a slice, and several run
side by side in Python threads. This keeps the kernels simple: no ``parallel=True``/``prange``,
whose compilation costs seconds and whose default threading layer (workqueue) is not safe to
enter from two threads at once. Each task fills its own part of the output, so results never
depend on the number of threads.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # respects taskset / cgroup cpusets
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: Threads the graph builders use. Work is always split the same way for a given value, and the
#: results (graph files included) are the same for every value; set it to 1 to time one core.
N_THREADS = _usable_cpus()

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size != N_THREADS:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=N_THREADS, thread_name_prefix="gids-graph")
            _pool_size = N_THREADS
        return _pool


def _forget_pool_in_child() -> None:
    # A forked child inherits the pool object but not its threads: start a fresh one on demand.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def split(n: int, min_items: int, parts: int | None = None) -> list[tuple[int, int]]:
    """``[0, n)`` cut into at most ``parts`` (default :data:`N_THREADS`) near-equal slices of at
    least ``min_items`` items each (one slice when ``n`` is small; ``[(0, 0)]`` when ``n == 0``)."""
    parts = max(1, min(parts or N_THREADS, n // max(min_items, 1)))
    cuts = [n * i // parts for i in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def run_all(task: Callable, arguments: Sequence[tuple]) -> list:
    """``[task(*a) for a in arguments]``, on the thread pool when there is more than one.

    A single task runs in the calling thread: small inputs (tests, small graphs) cost no thread
    hand-over at all.
    """
    if len(arguments) == 1:
        return [task(*arguments[0])]
    return list(_executor().map(lambda a: task(*a), arguments))
