"""``HostDaemon``: CPU threads that serve the GPU's page requests.

Each thread runs one ``njit(nogil=True)`` loop (no Python, no GIL) over its share of the
queues: queue ``q`` is served by thread ``q % n_threads``, so every queue has exactly one
consumer and the host needs no locks. For each queue the thread keeps the next ticket it
expects; when that ticket's submission record is published (acquire load of its sequence word)
it reads the page from the array's store into the entry's staging buffer (or, for a zero-copy
store, just notes where the page is), writes the completion and publishes it (release store).
Requests of one queue are served in ticket order.

An idle thread spins for a while, then sleeps in short naps so that an idle Runtime costs no
CPU; the first request after a nap waits up to one nap.
"""
import ctypes
import threading

import numpy as np
from numba import njit

from gids import layout as L
from host_daemon.stores import (DIRECT_ALIGN, T_ADDRESS, T_FD, T_FD_DIRECT, T_KIND, T_NBYTES,
                                 T_OFFSET)
from host_daemon.sync import load_acquire, store_release

_libc = ctypes.CDLL(None, use_errno=True)
# Addresses travel as size_t: the same registers as pointers in the x86-64 and AArch64 ABIs,
# and Numba passes integers to size_t parameters without casts.
_pread = _libc.pread
_pread.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int64]
_pread.restype = ctypes.c_ssize_t
_memcpy = _libc.memcpy
_memcpy.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t]
_memcpy.restype = ctypes.c_size_t
_memset = _libc.memset
_memset.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_size_t]
_memset.restype = ctypes.c_size_t
_usleep = _libc.usleep
_usleep.argtypes = [ctypes.c_uint]
_usleep.restype = ctypes.c_int

#: Empty polls over all of a thread's queues before it starts napping.
SPIN_POLLS = 20000
#: Length of one nap (microseconds).
NAP_US = 50
#: Requests served from one queue before the thread looks at its next queue (fairness).
BATCH = 32


@njit(nogil=True)
def _pread_full(fd, dst, n, offset):
    """Read exactly ``n`` bytes or return a STATUS_* code."""
    got = 0
    while got < n:
        r = _pread(fd, dst + got, n - got, offset + got)
        if r < 0:
            return L.STATUS_IO_ERROR
        if r == 0:
            return L.STATUS_SHORT_READ
        got += r
    return L.STATUS_OK


@njit(nogil=True)
def serve_page(table, array_id, page, page_size, dst):
    """Put page ``page`` of array ``array_id`` at host address ``dst`` (a staging buffer).

    Returns (status, source): source is SOURCE_STAGING, or for a zero-copy store the word
    offset of the page in the store's mapped buffer (nothing is copied then).
    """
    if array_id < 0 or array_id >= table.shape[0]:
        return L.STATUS_BAD_REQUEST, L.SOURCE_STAGING
    nbytes = table[array_id, T_NBYTES]
    start = page * page_size
    if page < 0 or start >= nbytes:
        return L.STATUS_BAD_REQUEST, L.SOURCE_STAGING
    n = min(page_size, nbytes - start)
    offset = table[array_id, T_OFFSET] + start
    kind = table[array_id, T_KIND]
    if kind == L.STORE_KIND_ZERO_COPY and offset % 8 == 0:
        return L.STATUS_OK, offset // 8
    status = L.STATUS_OK
    if kind == L.STORE_KIND_FILE:
        fd_direct = table[array_id, T_FD_DIRECT]
        if fd_direct >= 0 and offset % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0:
            status = _pread_full(fd_direct, dst, n, offset)
            if status == L.STATUS_IO_ERROR:   # O_DIRECT refused this one: go through the cache
                status = _pread_full(table[array_id, T_FD], dst, n, offset)
        else:
            status = _pread_full(table[array_id, T_FD], dst, n, offset)
    else:
        _memcpy(dst, table[array_id, T_ADDRESS] + offset, n)
    if n < page_size:
        _memset(dst + n, 0, page_size - n)   # the tail of the last page reads as zeros
    return status, L.SOURCE_STAGING


@njit(nogil=True)
def serve_queues(my_queues, heads, sq, cq, staging_address, depth, page_size, table, stop,
                 served):
    """The daemon thread's loop: serve ``my_queues`` until ``stop[0]`` becomes non-zero."""
    idle = 0
    while load_acquire(stop, 0) == 0:
        progressed = False
        for k in range(my_queues.shape[0]):
            q = my_queues[k]
            for _ in range(BATCH):
                ticket = heads[k]
                entry = q * depth + ticket % depth
                rec = entry * L.SQ_WORDS
                if load_acquire(sq, rec + L.SQ_SEQ) != ticket + 1:
                    break
                status, source = serve_page(table, sq[rec + L.SQ_ARRAY], sq[rec + L.SQ_PAGE],
                                            page_size, staging_address + entry * page_size)
                crec = entry * L.CQ_WORDS
                cq[crec + L.CQ_STATUS] = status
                cq[crec + L.CQ_SOURCE] = source
                store_release(cq, crec + L.CQ_SEQ, ticket + 1)
                heads[k] = ticket + 1
                served[0] += 1
                progressed = True
        if progressed:
            idle = 0
        else:
            idle += 1
            if idle > SPIN_POLLS:
                _usleep(NAP_US)


class HostDaemon:
    """N threads serving the request queues of one Runtime.

    Parameters
    ----------
    sq, cq : numpy.ndarray of int64
        Host views of the submission and completion rings (mapped memory), laid out as in
        :mod:`gids.layout`, ``n_queues * depth`` records each.
    staging : numpy.ndarray
        Host view of the staging pages, ``n_queues * depth * page_size`` bytes.
    table : numpy.ndarray of int64, shape (MAX_ARRAYS, T_COLUMNS)
        The store table; the Runtime fills a row per open array before any kernel uses it.
    n_queues, depth, page_size : int
    n_threads : int
        Daemon threads; each takes ``n_queues / n_threads`` queues. More threads serve more
        requests per second until they contend for cores or memory bandwidth.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, sq, cq, staging, table, n_queues, depth, page_size, n_threads):
        if n_threads < 1:
            raise ValueError(f"gids: daemon_threads must be >= 1, got {n_threads}")
        self.sq, self.cq, self.staging, self.table = sq, cq, staging, table
        self.n_queues, self.depth, self.page_size = n_queues, depth, page_size
        self.n_threads = min(n_threads, n_queues)
        self._stop = np.zeros(1, dtype=np.int64)
        self._threads = []
        self._errors = []
        self._served = [np.zeros(1, dtype=np.int64) for _ in range(self.n_threads)]
        self._heads = [None] * self.n_threads

    @property
    def running(self):
        return any(t.is_alive() for t in self._threads)

    @property
    def served(self):
        """Requests served since start."""
        return int(sum(s[0] for s in self._served))

    def start(self):
        if self._threads:
            raise RuntimeError("gids: HostDaemon already started")
        # Compile the loop here, before any thread runs it: compiling is Python work that holds
        # the GIL, and in the simulator it would crawl behind the spinning kernel threads.
        self._stop[0] = 1
        serve_queues(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), self.sq, self.cq,
                     self.staging.ctypes.data, self.depth, self.page_size, self.table, self._stop,
                     np.zeros(1, dtype=np.int64))
        self._stop[0] = 0
        for k in range(self.n_threads):
            my_queues = np.arange(k, self.n_queues, self.n_threads, dtype=np.int64)
            self._heads[k] = np.zeros(len(my_queues), dtype=np.int64)
            t = threading.Thread(target=self._run, args=(k, my_queues), daemon=True,
                                 name=f"gids-daemon-{k}")
            self._threads.append(t)
            t.start()
        return self

    def _run(self, k, my_queues):
        try:
            serve_queues(my_queues, self._heads[k], self.sq, self.cq,
                         self.staging.ctypes.data, self.depth, self.page_size, self.table,
                         self._stop, self._served[k])
        except BaseException as exc:   # reported by check(); a dead thread must not go unseen
            self._errors.append((k, exc))

    def check(self):
        """Raise if a daemon thread died (the kernels it served would time out)."""
        from gids.errors import DaemonError   # host_daemon -> gids.errors only: a leaf module
        if self._errors:
            k, exc = self._errors[0]
            raise DaemonError(f"gids: daemon thread {k} died: {exc!r}") from exc
        if self._threads and not all(t.is_alive() for t in self._threads) and not self._stop[0]:
            raise DaemonError("gids: a daemon thread exited unexpectedly")

    def stop(self, timeout=5.0):
        """Ask every thread to stop and join them; raises if one does not stop in time."""
        from gids.errors import DaemonError
        store_flag = self._stop
        store_flag[0] = 1
        stuck = []
        for t in self._threads:
            t.join(timeout)
            if t.is_alive():
                stuck.append(t.name)
        self._threads = []
        if stuck:
            raise DaemonError(f"gids: daemon threads did not stop within {timeout} s: {stuck}")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
