"""``HostDaemon``: CPU threads that serve the GPU's page requests.

Each thread runs one ``njit(nogil=True)`` loop (no Python, no GIL) over its share of the
queues: queue ``q`` is served by thread ``q % n_threads``, so every queue has exactly one
consumer and the host needs no locks. For each queue the thread keeps the next ticket it
expects; when that ticket's submission record is published (acquire load of its sequence word)
it serves it by its op word: OP_READ reads the page from the array's store into the entry's
staging buffer (or, for a zero-copy store, just notes where the page is); OP_WRITE writes the
staging buffer to the store (a dirty page evicted from the GPU cache: ``pwrite``, or ``memcpy``
into a memory, mmap or zero-copy store). It then writes the completion and publishes it (release
store). Requests of one queue are served in ticket order. Writes are not made durable here:
``Runtime.flush`` does that (``fsync``) for every written store.

An idle thread spins for a while, then sleeps in short naps so that an idle Runtime costs no
CPU; the first request after a nap waits up to one nap.

Two options, both off by default:

- real-time emulation of an SSD array (``model``, a :class:`host_daemon.ssd_model.SsdModel`):
  each request is timed by the model from the moment the daemon sees it, and its completion is
  posted no earlier than the model's completion time. Completions wait in a min-heap by due
  time, so one slow request does not hold back later, faster ones (completions may then be
  posted out of ticket order; every GPU thread polls its own). Due completions are posted
  after each request the thread serves (with the clock read that timed the request) and
  before each queue, so a completion is late by about one request's service at most;
- tracing (``trace_writer``, a :class:`host_daemon.trace.TraceWriter`): every request is
  recorded (store byte offset, size, queue, op, and four times: seen, the host's part done,
  the device's part done, completion posted; see :mod:`host_daemon.trace`) into a ring per
  thread, which a Python thread drains to the file.
"""
import threading
from collections import namedtuple

import numpy as np
from numba import njit, types

from kernels import layout as L
from kernels import settings
from kernels.errors import DaemonError
from host_daemon.minheap import heap_pop, heap_push
from host_daemon.ssd_model import SsdModel, model_lock, model_submit, model_unlock
from host_daemon.stores import (DIRECT_ALIGN, FAULT_CRASH, FAULT_EIO, FAULT_SHORT, FAULT_SLOW,
                                 FAULT_WRITE_CRASH, FAULT_WRITE_EIO, FAULT_WRITE_SLOW, T_ADDRESS,
                                 T_FAULTS, T_FD, T_FD_DIRECT, T_KIND, T_NBYTES, T_OFFSET)
from host_daemon.sync import load_acquire, load_word, private_array, store_release
from host_daemon.trace import TRACE_DTYPE

#: The queue records' words, compiled from their one definition in ``gids.layout`` (``sq_word``
#: for ``workloads.emulation_bench``, whose threads play the GPU).
sq_tag = njit(L.sq_tag)
sq_word = njit(L.sq_word)
sq_fields = njit(L.sq_fields)
cq_seq = njit(L.cq_seq)
cq_word = njit(L.cq_word)
cq_fields = njit(L.cq_fields)

# libc functions declared by symbol name, not as ctypes pointers: Numba then caches the daemon's
# compiled loop on disk (a ctypes pointer is a "dynamic global" that forbids caching, and every
# process would compile it again). Addresses travel as size_t (uintp): the same registers as
# pointers in the x86-64 and AArch64 ABIs.
_pread = types.ExternalFunction("pread", types.intp(types.int32, types.uintp, types.uintp,
                                                     types.int64))
_pwrite = types.ExternalFunction("pwrite", types.intp(types.int32, types.uintp, types.uintp,
                                                       types.int64))
_memcpy = types.ExternalFunction("memcpy", types.uintp(types.uintp, types.uintp, types.uintp))
_memset = types.ExternalFunction("memset", types.uintp(types.uintp, types.int32, types.uintp))
_usleep = types.ExternalFunction("usleep", types.int32(types.uint32))
_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.uintp))
_CLOCK_MONOTONIC = 1   # the clock of Python's time.monotonic_ns()

#: What one daemon thread needs for real-time emulation: ``on`` (0 or 1), the shared model's
#: state and parameters, and the thread's heap of pending completions (due time -> entry) with
#: what each pending entry will post and what its trace record will say.
Emulation = namedtuple("Emulation", ["on", "state", "params", "due", "entry", "size",
                                     "status", "source", "ticket", "seen", "ready", "device",
                                     "offset", "nbytes", "op"])
#: One thread's trace ring: record fields (``seen``, ``ready``, ``device``, ``done``: the
#: record's issue, ready, device and complete times), ``head`` (written here), ``tail``
#: (written by the drain thread), ``dropped`` (records lost because the ring was full), ``on``.
TraceRing = namedtuple("TraceRing", ["on", "offset", "nbytes", "queue", "seen", "ready",
                                     "device", "done", "op", "head", "tail", "dropped"])

#: serve_page's / write_page's answer for a crash fault: the thread's loop returns without posting.
_CRASH = -1000

#: Records per thread's trace ring; the drain thread empties it every DRAIN_S seconds.
TRACE_RING = 1 << 18
DRAIN_S = 0.01

#: Empty polls over all of a thread's queues before it starts napping.
SPIN_POLLS = 20000
#: Length of one nap (microseconds).
NAP_US = 50
#: Requests served from one queue before the thread looks at its next queue (fairness).
BATCH = 32
#: While a single queue of a thread has requests, the thread looks at it again every this many
#: queues of a pass (see :func:`serve_queues`; 0: never). The setting ``hot_queue_every``
#: (``GIDS_HOT_QUEUE_EVERY``), read at import.
HOT_QUEUE_EVERY = settings.get("hot_queue_every")


@njit(nogil=True, cache=True)
def _io_full(fd, buf, n, offset, write):
    """``pread`` (or, with ``write``, ``pwrite``) exactly ``n`` bytes, or return a STATUS_*
    code."""
    done = 0
    while done < n:
        if write:
            r = _pwrite(fd, buf + done, n - done, offset + done)
        else:
            r = _pread(fd, buf + done, n - done, offset + done)
        if r < 0:
            return L.STATUS_IO_ERROR
        if r == 0:
            return L.STATUS_SHORT_WRITE if write else L.STATUS_SHORT_READ
        done += r
    return L.STATUS_OK


@njit(nogil=True, cache=True)
def _fault_of(table, array_id, page):
    """A FaultyStore page's (code, argument): two int64 in its fault table, read in place.

    Nothing serve_page and write_page call may allocate: the NVMe controller's per-command
    loop, compiled without reference counting, calls them (``nvme_controller._per_command``)."""
    at = table[array_id, T_FAULTS] + 16 * page
    return load_word(at), load_word(at + 8)


@njit(nogil=True, cache=True)
def write_page(table, array_id, page, page_size, src):
    """Write page ``page`` of array ``array_id`` from host address ``src`` (a staging buffer).

    Only the array's own bytes are written (the tail of its last page is not). Returns a
    STATUS_* code.
    """
    if array_id < 0 or array_id >= table.shape[0]:
        return L.STATUS_BAD_REQUEST
    nbytes = table[array_id, T_NBYTES]
    start = page * page_size
    if page < 0 or start >= nbytes:
        return L.STATUS_BAD_REQUEST
    n = min(page_size, nbytes - start)
    offset = table[array_id, T_OFFSET] + start
    kind = table[array_id, T_KIND]
    if kind == L.STORE_KIND_FILE:
        # The buffered descriptor: no O_DIRECT alignment rules (see FileStore's notes).
        return _io_full(table[array_id, T_FD], src, n, offset, True)
    if kind == L.STORE_KIND_FAULTY:
        code, argument = _fault_of(table, array_id, page)
        if code == FAULT_WRITE_EIO:
            return L.STATUS_IO_ERROR
        if code == FAULT_WRITE_CRASH:
            return _CRASH
        if code == FAULT_WRITE_SLOW or code == FAULT_SLOW:
            _usleep(argument)
    _memcpy(table[array_id, T_ADDRESS] + offset, src, n)
    return L.STATUS_OK


@njit(nogil=True, cache=True)
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
    # A page whose word offset does not fit the completion word (gids.layout.CQ_MAX_SOURCE:
    # 4 TiB) is copied through staging like a misaligned one.
    if kind == L.STORE_KIND_ZERO_COPY and offset % 8 == 0 and offset // 8 <= L.CQ_MAX_SOURCE:
        return L.STATUS_OK, offset // 8
    status = L.STATUS_OK
    if kind == L.STORE_KIND_FILE:
        fd_direct = table[array_id, T_FD_DIRECT]
        if fd_direct >= 0 and offset % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0:
            status = _io_full(fd_direct, dst, n, offset, False)
            if status == L.STATUS_IO_ERROR:   # O_DIRECT refused this one: go through the cache
                status = _io_full(table[array_id, T_FD], dst, n, offset, False)
        else:
            status = _io_full(table[array_id, T_FD], dst, n, offset, False)
    elif kind == L.STORE_KIND_FAULTY:
        code, argument = _fault_of(table, array_id, page)
        if code == FAULT_EIO:
            return L.STATUS_IO_ERROR, L.SOURCE_STAGING
        if code == FAULT_CRASH:
            return _CRASH, L.SOURCE_STAGING
        if code == FAULT_SLOW:
            _usleep(argument)
        if code == FAULT_SHORT:
            _memcpy(dst, table[array_id, T_ADDRESS] + offset, n // 2)
            return L.STATUS_SHORT_READ, L.SOURCE_STAGING
        _memcpy(dst, table[array_id, T_ADDRESS] + offset, n)
    else:
        _memcpy(dst, table[array_id, T_ADDRESS] + offset, n)
    if n < page_size:
        _memset(dst + n, 0, page_size - n)   # the tail of the last page reads as zeros
    return status, L.SOURCE_STAGING


@njit(nogil=True, cache=True)
def _now_ns(ts):
    _clock_gettime(_CLOCK_MONOTONIC, ts.ctypes.data)
    return ts[0] * 1_000_000_000 + ts[1]


@njit(nogil=True, cache=True)
def _record(ring, queue, offset, nbytes, seen, ready, device, done, op):
    """Append one I/O to the trace ring (dropped, and counted, if the ring is full): seen
    (issue), the host's part done, the device's part done, posted (see host_daemon.trace)."""
    head = ring.head[0]
    cap = ring.offset.shape[0]
    if head - load_acquire(ring.tail, 0) >= cap:
        ring.dropped[0] += 1
        return
    k = head % cap
    ring.offset[k] = offset
    ring.nbytes[k] = nbytes
    ring.queue[k] = queue
    ring.seen[k] = seen
    ring.ready[k] = ready
    ring.device[k] = device
    ring.done[k] = done
    ring.op[k] = op
    store_release(ring.head, 0, head + 1)


@njit(nogil=True, cache=True)
def park(emu, entry, due, status, source, ticket, seen, ready, device, offset, nbytes, op):
    """Hold entry ``entry``'s completion in the thread's heap until ``due`` (ns): what it will
    post, and what its trace record will say (``device``: the model's completion time, which
    ``due`` may exceed)."""
    emu.status[entry] = status
    emu.source[entry] = source
    emu.ticket[entry] = ticket
    emu.seen[entry] = seen
    emu.ready[entry] = ready
    emu.device[entry] = device
    emu.offset[entry] = offset
    emu.nbytes[entry] = nbytes
    emu.op[entry] = op
    emu.size[0] = heap_push(emu.due, emu.entry, emu.size[0], due, entry)


@njit(nogil=True, cache=True)
def _post(cq, entry, ticket, status, source):
    """Answer ``ticket`` in entry ``entry``'s completion word (``gids.layout``, ``cq_word``):
    one release store, which the GPU reads with one acquire load."""
    store_release(cq, entry * L.CQ_WORDS + L.CQ_WORD, cq_word(cq_seq(ticket), status, source))


@njit(nogil=True, cache=True)
def _post_due(cq, emu, ring, depth, now):
    """Post every pending completion whose due time has come; return how many."""
    n = 0
    while emu.size[0] > 0 and emu.due[0] <= now:
        _, entry, size = heap_pop(emu.due, emu.entry, emu.size[0])
        emu.size[0] = size
        _post(cq, entry, emu.ticket[entry], emu.status[entry], emu.source[entry])
        if ring.on:
            _record(ring, entry // depth, emu.offset[entry], emu.nbytes[entry], emu.seen[entry],
                    emu.ready[entry], emu.device[entry], now, emu.op[entry])
        n += 1
    return n


#: Columns of a row of :func:`_time_batch`'s batch (int64): one request served from a queue.
B_ENTRY, B_TICKET, B_STATUS, B_SOURCE, B_SEEN, B_OFFSET, B_OP, B_DUE = range(8)
B_COLUMNS = 8


@njit(nogil=True, cache=True)
def _time_batch(cq, emu, ring, clock, q, depth, page_size, n, batch):
    """Under emulation: give the model the ``n`` requests just served from queue ``q`` (their
    pages are in staging), under one hold of its lock, then post or park each completion.

    One hold for the batch, not one per request: the model's state is shared by every daemon
    thread, and taken per request its lock and cache lines serialised the threads at about
    1.7 M requests/s, whatever the modelled drives allowed (4 emulated P5800X, scale-24 BFS on
    the H200, 2026-12-02: 1.73 M I/Os/s, where the NVMe controller's emulation, locking per
    batch, served 4.3 M). Each request keeps its own arrival time (``seen``).
    """
    model_lock(emu.state)
    for i in range(n):
        batch[i, B_DUE] = model_submit(emu.state, emu.params, batch[i, B_SEEN],
                                       batch[i, B_OFFSET], page_size)
    model_unlock(emu.state)
    # The host's own part (the store calls, the model's timing) ends here; each modelled
    # drive's at its due time: a completion is posted after both.
    ready = _now_ns(clock)
    for i in range(n):
        entry, ticket, status, source, seen, offset, op, due = batch[i]
        if due > ready:
            park(emu, entry, due, status, source, ticket, seen, ready, due, offset, page_size,
                 op)
        else:
            _post(cq, entry, ticket, status, source)
            if ring.on:
                _record(ring, q, offset, page_size, seen, ready, due, ready, op)
    # And now, with the clock read that just timed them: a thread serving a backlog otherwise
    # posted due completions late by up to a batch's service, which a replay of the trace
    # cannot know of unless recorded (docs/ssd_models.md, "Replay").
    if emu.size[0] > 0 and emu.due[0] <= ready:
        _post_due(cq, emu, ring, depth, ready)


@njit(nogil=True, cache=True)
def _visit_order(order, n_queues, hot, hot_every):
    """Fill ``order`` with a pass's visits (see :func:`serve_queues`); return how many."""
    n = 0
    for k in range(n_queues):
        if hot >= 0 and k != hot and k % hot_every == 0:
            order[n] = -1 - hot
            n += 1
        order[n] = k
        n += 1
    return n


@njit(nogil=True, cache=True)
def serve_queues(my_queues, heads, sq, cq, staging_address, depth, page_size, table, stop,
                 served, emu, ring, clock, hot_every):
    """The daemon thread's loop: serve ``my_queues`` until ``stop[0]`` becomes non-zero.

    When the last pass found requests on one queue only (one warp missing at a time, say), that
    queue is looked at again every ``hot_every`` queues of the next pass (0: never;
    :data:`HOT_QUEUE_EVERY`), so that its next request waits for a few dozen queue checks
    rather than up to a whole pass (512 queues: ~1.4 us). With requests on several queues,
    passes are as without it. (An argument, not the global: ``cache=True`` would keep a
    global's value from the run that compiled the loop.) The serving code stays in this one
    loop, over a precomputed order of visits: a helper called per queue with the emulation and
    trace tuples cost ~150 ns per queue in reference counts, and a second visit loop per queue
    doubled the cost of a pass. (Under emulation a visit that found requests calls
    :func:`_time_batch` once: a cost per batch, not per visit.)
    """
    idle = 0
    timed = emu.on or ring.on
    n_queues = my_queues.shape[0]
    # One queue's batch of requests, served and waiting for the model (emulation only): a row
    # per request, columns B_*.
    batch = np.empty((BATCH, B_COLUMNS), dtype=np.int64)
    # The pass's visits, as indices into my_queues: each queue once, and while one queue is hot
    # (the only one with requests in the last pass) a look at it, as -1 - index, before every
    # hot_every-th queue. Rebuilt only when the hot queue changes.
    order = np.empty(n_queues + n_queues // max(hot_every, 1) + 1, dtype=np.int64)
    n_visits = _visit_order(order, n_queues, -1, hot_every)
    hot = -1          # the one queue (index into my_queues) that had requests in the last pass
    while load_acquire(stop, 0) == 0:
        progressed = False
        busy = -1         # a queue that had requests in this pass ...
        several = False   # ... and whether another one had too
        for j in range(n_visits):
            # Due completions are posted before each queue, not once per pass: a pass over
            # many busy queues takes long enough to post them late (with 512 queues the
            # emulated wall time ran up to 35 % past the model's).
            if emu.on and emu.size[0] > 0 and _post_due(cq, emu, ring, depth,
                                                        _now_ns(clock)) > 0:
                progressed = True
            k = order[j]
            limit = BATCH
            if k < 0:     # a look at the hot queue: one request at most
                k = -1 - k
                limit = 1
            q = my_queues[k]
            n = 0
            while n < limit:
                ticket = heads[k]
                entry = q * depth + ticket % depth
                # The request is one word, its tag the ticket's turn (gids.layout).
                word = load_acquire(sq, entry * L.SQ_WORDS + L.SQ_WORD)
                tag, array_id, page, op = sq_fields(word)
                if tag != sq_tag(ticket, depth):
                    break
                seen = _now_ns(clock) if timed else 0
                buf = staging_address + entry * page_size
                if op == L.OP_WRITE:
                    status = write_page(table, array_id, page, page_size, buf)
                    source = L.SOURCE_STAGING
                elif op == L.OP_READ:
                    status, source = serve_page(table, array_id, page, page_size, buf)
                else:
                    status, source = L.STATUS_BAD_REQUEST, L.SOURCE_STAGING
                if status == _CRASH:
                    return
                offset = 0
                if timed and 0 <= array_id < table.shape[0]:
                    offset = table[array_id, T_OFFSET] + page * page_size
                if emu.on:
                    # Timed by the model below, for the queue's whole batch at once.
                    row = batch[n]
                    row[B_ENTRY] = entry
                    row[B_TICKET] = ticket
                    row[B_STATUS] = status
                    row[B_SOURCE] = source
                    row[B_SEEN] = seen
                    row[B_OFFSET] = offset
                    row[B_OP] = op
                else:
                    _post(cq, entry, ticket, status, source)
                    if ring.on:
                        # No model: the store is the device, and the host has no part of its own.
                        done = _now_ns(clock)
                        _record(ring, q, offset, page_size, seen, seen, done, done, op)
                heads[k] = ticket + 1
                served[0] += 1
                n += 1
            if emu.on and n > 0:
                _time_batch(cq, emu, ring, clock, q, depth, page_size, n, batch)
            if n > 0:
                progressed = True
                if busy < 0:
                    busy = k
                elif busy != k:
                    several = True
        new_hot = busy if hot_every > 0 and not several else -1
        if new_hot != hot:
            hot = new_hot
            n_visits = _visit_order(order, n_queues, hot, hot_every)
        if progressed or emu.size[0] > 0:
            idle = 0   # completions pending: keep polling the clock, never nap past a due time
        else:
            idle += 1
            if idle > SPIN_POLLS:
                _usleep(NAP_US)


def _emulation(model, n_entries):
    """Per-thread emulation state; an ``on=0`` stand-in (same types) when there is no model."""
    size = n_entries if model is not None else 1
    state, params = (model if model is not None else SsdModel("ideal")).njit_args()
    z = lambda: np.zeros(size, dtype=np.int64)   # noqa: E731
    return Emulation(on=int(model is not None), state=state, params=params, due=z(), entry=z(),
                     size=private_array(1), status=z(), source=z(), ticket=z(),
                     seen=z(), ready=z(), device=z(), offset=z(), nbytes=z(), op=z())


def _trace_ring(on):
    size = TRACE_RING if on else 1
    z = lambda: np.zeros(size, dtype=np.int64)   # noqa: E731
    # head: written by the thread per record; tail: by the drain thread, every DRAIN_S.
    return TraceRing(on=int(on), offset=z(), nbytes=z(), queue=z(), seen=z(), ready=z(),
                     device=z(), done=z(), op=z(), head=private_array(1), tail=private_array(1),
                     dropped=private_array(1))


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
    model : host_daemon.ssd_model.SsdModel, optional
        Emulate this SSD array in real time: completions are posted no earlier than the model
        says. All threads share the model (it holds a lock for the ~50 ns of each call).
    trace_writer : host_daemon.trace.TraceWriter, optional
        Record every request to this trace (drained from per-thread rings every 10 ms; records
        that find a ring full are counted in :attr:`trace_dropped`).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, sq, cq, staging, table, n_queues, depth, page_size, n_threads,
                 model=None, trace_writer=None):
        if n_threads < 1:
            raise ValueError(f"gids: daemon_threads must be >= 1, got {n_threads}")
        self.sq, self.cq, self.staging, self.table = sq, cq, staging, table
        self.n_queues, self.depth, self.page_size = n_queues, depth, page_size
        self.n_threads = min(n_threads, n_queues)
        self.model = model
        self.trace_writer = trace_writer
        # Read by every thread on every pass: on a line no thread writes (private_array).
        self._stop = private_array(1)
        self._threads = []
        self._drainer = None
        self._drain_stop = threading.Event()
        self._drain_lock = threading.Lock()   # the drain thread and sync() both drain
        self._errors = []
        # Words each thread writes per request or per clock read: each on memory of its own
        # (private_array), or threads slow each other down through shared cache lines.
        self._served = [private_array(1) for _ in range(self.n_threads)]
        self._heads = [None] * self.n_threads
        n_entries = n_queues * depth
        self._emu = [_emulation(model, n_entries) for _ in range(self.n_threads)]
        self._rings = [_trace_ring(trace_writer is not None) for _ in range(self.n_threads)]
        self._clocks = [private_array(2) for _ in range(self.n_threads)]

    @property
    def running(self):
        return any(t.is_alive() for t in self._threads)

    @property
    def served(self):
        """Requests served since start."""
        return int(sum(s[0] for s in self._served))

    @property
    def trace_dropped(self):
        """Trace records lost to full rings (0 unless the drain thread fell behind)."""
        return int(sum(r.dropped[0] for r in self._rings))

    def start(self):
        if self._threads:
            raise RuntimeError("gids: HostDaemon already started")
        # Compile the loop here, before any thread runs it: compiling is Python work that holds
        # the GIL, and in the simulator it would crawl behind the spinning kernel threads.
        self._stop[0] = 1
        self._serve(0, np.zeros(0, dtype=np.int64), self._queue_state(0))
        self._stop[0] = 0
        for k in range(self.n_threads):
            my_queues = np.arange(k, self.n_queues, self.n_threads, dtype=np.int64)
            self._heads[k] = self._queue_state(len(my_queues))
            t = threading.Thread(target=self._run, args=(k, my_queues), daemon=True,
                                 name=f"gids-daemon-{k}")
            self._threads.append(t)
            t.start()
        if self.trace_writer is not None:
            self._drain_stop.clear()
            self._drainer = threading.Thread(target=self._drain_loop, daemon=True,
                                             name="gids-trace-drain")
            self._drainer.start()
        return self

    def _queue_state(self, n):
        """The state thread k keeps per queue it serves: the next ticket of each."""
        return private_array(n)

    def _serve(self, k, my_queues, heads):
        """Thread ``k``'s loop over ``my_queues`` (returns once ``_stop`` is set)."""
        serve_queues(my_queues, heads, self.sq, self.cq, self.staging.ctypes.data, self.depth,
                     self.page_size, self.table, self._stop, self._served[k], self._emu[k],
                     self._rings[k], self._clocks[k], HOT_QUEUE_EVERY)

    def _run(self, k, my_queues):
        try:
            self._serve(k, my_queues, self._heads[k])
        except BaseException as exc:   # reported by check(); a dead thread must not go unseen
            self._errors.append((k, exc))

    def drain_trace(self):
        """Move the records in the threads' rings to the trace file (safe while running)."""
        if self.trace_writer is None:
            return
        with self._drain_lock:
            self._drain_rings()

    def _drain_rings(self):
        for ring in self._rings:
            head, tail = int(ring.head[0]), int(ring.tail[0])
            if head == tail:
                continue
            cap = ring.offset.shape[0]
            k = np.arange(tail, head) % cap
            records = np.zeros(head - tail, dtype=TRACE_DTYPE)
            records["offset"] = ring.offset[k]
            records["nbytes"] = ring.nbytes[k]
            records["queue"] = ring.queue[k]
            records["issue_ns"] = ring.seen[k]
            records["ready_ns"] = ring.ready[k]
            records["device_ns"] = ring.device[k]
            records["complete_ns"] = ring.done[k]
            records["op"] = ring.op[k]
            ring.tail[0] = head   # the ring's slots are free once copied out
            self.trace_writer.append(records)

    def _drain_loop(self):
        while not self._drain_stop.wait(DRAIN_S):
            self.drain_trace()

    def check(self):
        """Raise if a daemon thread died (the kernels it served would time out)."""
        if self._errors:
            k, exc = self._errors[0]
            raise DaemonError(f"gids: daemon thread {k} died: {exc!r}") from exc
        if self._threads and not all(t.is_alive() for t in self._threads) and not self._stop[0]:
            raise DaemonError("gids: a daemon thread exited unexpectedly")

    def stop(self, timeout=5.0):
        """Ask every thread to stop and join them; raises if one does not stop in time
        (``timeout=None``: wait for as long as they take).

        Completions still pending under emulation are not posted (no kernel waits for them once
        the Runtime stops); the trace is drained to its file. Threads that did not stop stay in
        the list, so that a later ``stop`` waits for them again.
        """
        self._stop[0] = 1
        stuck = []
        for t in self._threads:
            t.join(timeout)
            if t.is_alive():
                stuck.append(t)
        self._threads = stuck
        if self._drainer is not None:
            self._drain_stop.set()
            self._drainer.join(timeout)
            self._drainer = None
        self.drain_trace()
        for emu in self._emu:
            emu.size[0] = 0
        if stuck:
            raise DaemonError(f"gids: daemon threads did not stop within {timeout} s: "
                              f"{[t.name for t in stuck]}")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
