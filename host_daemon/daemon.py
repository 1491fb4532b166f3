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

File stores are read and written through a storage engine (``engine``): ``io_uring`` (the
default where the kernel allows it: each thread owns a ring from :mod:`host_daemon.uring`, turns
requests into SQEs, submits them in batches and posts completions as CQEs arrive, in any order;
its staging pages are registered with the ring where the kernel takes them: ``fixed_buffers``)
or ``threads`` (one synchronous ``pread``/``pwrite`` per request). Stores in RAM are copied on
the spot by either. See docs/architecture.md, "Storage engines".

Two options, both off by default:

- real-time emulation of an SSD array (``model``, a :class:`host_daemon.ssd_model.SsdModel`):
  each request is timed by the model from the moment the daemon sees it, and its completion is
  posted no earlier than the model's completion time; until then it counts against the
  engine's concurrency (one per thread for ``threads``, the ring's entries for ``io_uring``).
  Completions wait in a min-heap by due time, so one slow request does not hold back later,
  faster ones (completions may then be posted out of ticket order; every GPU thread polls its
  own). Due completions are posted
  after each request the thread serves (with the clock read that timed the request) and
  before each queue, so a completion is late by about one request's service at most;
- tracing (``trace_writer``, a :class:`host_daemon.trace.TraceWriter`): every request is
  recorded (store byte offset, size, queue, op, and four times: seen, the host's part done,
  the device's part done, completion posted; see :mod:`host_daemon.trace`) into a ring per
  thread, which a Python thread drains to the file.
"""
import errno
import os
import threading
import warnings
from collections import namedtuple

import numpy as np
from numba import njit, types

from host_daemon import uring as U
from host_daemon.minheap import heap_pop, heap_push
from host_daemon.ssd_model import SsdModel, model_lock, model_submit, model_unlock
from host_daemon.stores import (
    DIRECT_ALIGN,
    F_COLUMNS,
    FAULT_CRASH,
    FAULT_EIO,
    FAULT_SHORT,
    FAULT_SLOW,
    FAULT_WRITE_CRASH,
    FAULT_WRITE_EIO,
    FAULT_WRITE_SLOW,
    MAP_CHUNK,
    MAP_TRUST_NS,
    MAX_FILES,
    OS_PAGE,
    T_ADDRESS,
    T_FAULTS,
    T_KIND,
    T_MAP,
    T_MAP_BYTES,
    T_MAP_CHECKED,
    T_MAP_RESIDENT,
    T_N_FILES,
    T_NBYTES,
    T_OFFSET,
    FileStore,
    StripedStore,
    count_file_io,
    page_location,
)
from host_daemon.sync import load_acquire, load_word, private_array, store_release, store_word
from host_daemon.trace import TRACE_DTYPE
from host_daemon.uring import (
    S_ERROR,
    S_IN_FLIGHT,
    S_UNSUBMITTED,
    ring_consume,
    ring_cqe,
    ring_prep_rw,
    ring_ready,
    ring_room,
    ring_submit,
    ring_submit_wait,
)
from kernels import layout as L
from kernels import settings
from kernels.errors import DaemonError

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
if U.LINUX:
    _preadv2 = types.ExternalFunction("preadv2", types.intp(types.int32, types.uintp,
                                                             types.int32, types.int64,
                                                             types.int32))
    _mincore = types.ExternalFunction("mincore", types.int32(types.uintp, types.uintp,
                                                             types.uintp))
    _madvise = types.ExternalFunction("madvise", types.int32(types.uintp, types.uintp,
                                                             types.int32))
else:   # no RWF_NOWAIT elsewhere (nor io_uring): every read goes the ring's way, never taken
    @njit(nogil=True, cache=True)
    def _preadv2(fd, iov, count, offset, flags):
        return -1

    @njit(nogil=True, cache=True)
    def _mincore(address, length, vec):
        return -1

    @njit(nogil=True, cache=True)
    def _madvise(address, length, advice):
        return -1
_MADV_POPULATE_READ = 22   # Linux 5.14: map a range's pages (read faults) in one call
#: A mapped chunk's check word: the time of mincore's answer, and this bit once its pages are
#: mapped (MADV_POPULATE_READ).
_POPULATED = 1 << 62
_RWF_NOWAIT = 0x8   # preadv2: fail with EAGAIN rather than wait for the disk
_usleep = types.ExternalFunction("usleep", types.int32(types.uint32))
_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.uintp))
_CLOCK_MONOTONIC = 1   # the clock of Python's time.monotonic_ns()

#: ``njit`` without Numba's reference counting (``_nrt=False``, as Numba does for its own hot
#: string helpers), for code that runs per request, per command or per CQE. With it, a function
#: increfs and decrefs every array it is passed or packs (atomic adds) unless Numba proves the
#: pair redundant, which it does not across branches: in the NVMe controller, 10 to 20 atomic
#: adds per command (callgrind), a third of a thread's samples (perf; each add also waits for
#: the 4 KiB copy's stores to drain). Such functions allocate nothing; nor may what they call,
#: which Numba compiles with the same flag when it compiles it for them first (serve_page and
#: write_page: see :func:`_fault_of`).
njit_without_refcounts = njit(nogil=True, cache=True, _nrt=False)

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
    loop, compiled without reference counting, calls them (:data:`njit_without_refcounts`)."""
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
        _, fd, _, file_offset = page_location(table, array_id, page, page_size)
        return _io_full(fd, src, n, file_offset, True)
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
        _, fd, fd_direct, file_offset = page_location(table, array_id, page, page_size)
        if fd_direct >= 0 and file_offset % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0:
            status = _io_full(fd_direct, dst, n, file_offset, False)
            if status == L.STATUS_IO_ERROR:   # O_DIRECT refused this one: go through the cache
                status = _io_full(fd, dst, n, file_offset, False)
        else:
            status = _io_full(fd, dst, n, file_offset, False)
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
def page_io(table, array_id, page, page_size, buf, op, file_io, clock):
    """Serve one request: OP_READ (:func:`serve_page`) or OP_WRITE (:func:`write_page`) of
    page ``page`` of array ``array_id`` with host buffer ``buf``. Returns (status, source).

    An I/O on a file that completes is counted against its store file in ``file_io`` (the
    thread's per-file counters: :func:`host_daemon.stores.count_file_io`), with the time the
    store call took; stores in RAM are not timed (two clock reads would cost as much as their
    copy).
    """
    on_file = (0 <= array_id < table.shape[0] and table[array_id, T_N_FILES] > 0
               and table[array_id, T_KIND] == L.STORE_KIND_FILE)
    start = _now_ns(clock) if on_file else 0
    if op == L.OP_WRITE:
        status = write_page(table, array_id, page, page_size, buf)
        source = L.SOURCE_STAGING
    elif op == L.OP_READ:
        status, source = serve_page(table, array_id, page, page_size, buf)
    else:
        return L.STATUS_BAD_REQUEST, L.SOURCE_STAGING
    if on_file and status == L.STATUS_OK:
        file = page_location(table, array_id, page, page_size)[0]
        n = min(page_size, table[array_id, T_NBYTES] - page * page_size)
        count_file_io(file_io, table, array_id, file, op == L.OP_WRITE, n,
                      _now_ns(clock) - start)
    return status, source


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
def _time_batch(cq, emu, ring, clock, depth, page_size, n, batch, pend):
    """Under emulation: give the model the ``n`` requests just taken from a queue, under one
    hold of its lock, then post or park each completion; a request handed to the io_uring
    engine (status ``_QUEUED``) only keeps its modelled time (``pend``'s P_DUE), for when its
    CQE arrives.

    One hold for the batch, not one per request: the model's state is shared by every daemon
    thread, and taken per request its lock and cache lines serialised the threads at about
    1.7 M requests/s, whatever the modelled drives allowed (the NVMe controller's emulation,
    locking per batch, served 2.5 times as many). Each request keeps its own arrival time
    (``seen``).
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
        if status == _QUEUED:
            pend[source, P_DUE] = due   # source: the request's row of pend
            continue
        if due > ready:
            park(emu, entry, due, status, source, ticket, seen, ready, due, offset, page_size,
                 op)
        else:
            _post(cq, entry, ticket, status, source)
            if ring.on:
                _record(ring, entry // depth, offset, page_size, seen, ready, due, ready, op)
    # And now, with the clock read that just timed them: a thread serving a backlog otherwise
    # posted due completions late by up to a batch's service, which a replay of the trace
    # cannot know of unless recorded (docs/ssd_models.md, "Replay").
    if emu.size[0] > 0 and emu.due[0] <= ready:
        _post_due(cq, emu, ring, depth, ready)


#: Columns of a row of ``pend``: a request handed to the io_uring engine, by its row
#: (``user_data`` of its SQEs: the queue's index among the thread's times the depth, plus the
#: entry's place in its queue).
P_ENTRY = 0     # its queue entry (global)
P_TICKET = 1
P_SEEN = 2      # when the daemon took it
P_OFFSET = 3    # store byte offset of the page (the trace's and the model's)
P_OP = 4        # OP_READ or OP_WRITE
P_FD = 5        # the descriptor the current SQE uses
P_ALT_FD = 6    # the buffered descriptor to retry on if O_DIRECT refuses (EINVAL), or -1
P_ADDR = 7      # where the rest of the transfer goes (or comes from)
P_FILE_OFFSET = 8   # and where in the file
P_LEFT = 9      # bytes still to transfer
P_DUE = 10      # the model's completion time (emulation)
P_ORDER = 11    # the NVMe controller's fetch order of the command
P_ARRAY = 12    # the array, its store file (index) and the bytes moved: the per-file counts
P_FILE = 13
P_BYTES = 14
P_IOV_BASE = 15  # an iovec for preadv2 (see _ring_page)
P_IOV_LEN = 16
P_IN_RING = 17  # 1 while the request is the ring's (an SQE filled, its last CQE not yet reaped)
P_BUF = 18      # the registered buffer holding P_ADDR's transfer (READ_FIXED), or -1
P_COLUMNS = 19

#: _time_batch's status for a request that is in the io_uring engine's hands.
_QUEUED = -2000
#: Filled SQEs that make the daemon thread submit before its pass over the queues ends.
SUBMIT_BATCH = 32
#: Bounds on one wait in the kernel for a CQE (:func:`end_pass`): with the ring full, and with
#: nothing else to do (a request the GPU posts meanwhile waits up to this long).
FULL_WAIT_NS = 1_000_000
IDLE_WAIT_NS = 20_000
#: How long a stopping thread waits for its ring's reads and writes to end (seconds).
DRAIN_S_MAX = 5.0
#: How long ``HostDaemon.start`` waits for each thread to have enabled its ring (seconds).
READY_WAIT_S = 10.0


@njit(nogil=True, cache=True)
def _on_ring(table, array_id, page, page_size, op):
    """Whether the io_uring engine serves this request: a read or write of a valid page of a
    file store (other stores are memory copies, done on the spot)."""
    if op != L.OP_READ and op != L.OP_WRITE:
        return False
    if array_id < 0 or array_id >= table.shape[0] or table[array_id, T_KIND] != L.STORE_KIND_FILE:
        return False
    return page >= 0 and page * page_size < table[array_id, T_NBYTES]


@njit(nogil=True, cache=True)
def _all_resident(resident, first, count):
    """Whether mincore's bytes ``first`` to ``first + count - 1`` (at address ``resident``) all
    say resident."""
    for p in range(first, first + count):
        if (load_word(resident + (p & ~7)) >> (8 * (p & 7))) & 1 == 0:
            return False
    return True


@njit(nogil=True, cache=True)
def read_resident(table, array_id, file_offset, n, dst, now):
    """Copy ``n`` bytes at ``file_offset`` of a mapped FileStore's file to ``dst`` if every OS
    page of them is in the page cache; returns whether it did. Residency comes from
    ``mincore`` per MAP_CHUNK of the file, asked again once its answer is MAP_TRUST_NS old
    (``now``: a monotonic time); threads asking at once write the same answer. The first time
    a chunk is all resident its pages are mapped in one call (``MADV_POPULATE_READ``, where
    the kernel has it): a page fault per page touched cost more than its copy."""
    base = table[array_id, T_MAP]
    size = table[array_id, T_MAP_BYTES]
    if base == 0 or file_offset + n > size or n <= 0:
        return False
    resident = table[array_id, T_MAP_RESIDENT]
    for chunk in range(file_offset // MAP_CHUNK, (file_offset + n - 1) // MAP_CHUNK + 1):
        at = table[array_id, T_MAP_CHECKED] + 8 * chunk
        word = load_word(at)
        if now - (word & (_POPULATED - 1)) > MAP_TRUST_NS:
            start = chunk * MAP_CHUNK
            length = min(MAP_CHUNK, size - start)
            if _mincore(base + start, length, resident + start // OS_PAGE) != 0:
                return False
            populated = word & _POPULATED
            if populated == 0 and _all_resident(resident, start // OS_PAGE,
                                                -(-length // OS_PAGE)):
                _madvise(base + start, length, _MADV_POPULATE_READ)
                populated = _POPULATED
            store_word(at, now | populated)
    # (mincore's bytes are read eight at a time: the table is padded to a multiple of 8.)
    first = file_offset // OS_PAGE
    if not _all_resident(resident, first, (file_offset + n - 1) // OS_PAGE + 1 - first):
        return False
    _memcpy(dst, base + file_offset, n)
    return True


@njit(nogil=True, cache=True)
def read_on_spot(table, array_id, page, page_size, buf, pend, row, file_io, start, clock):
    """Read page ``page`` of a file store into ``buf`` on the spot if the page cache holds it,
    and count it against its store file (the time since ``start``); returns whether it did.

    A mapped FileStore copies from its mapping (:func:`read_resident`). Another buffered read
    is tried with ``preadv2(RWF_NOWAIT)`` (its iovec in ``pend``'s row ``row``), which copies
    the page if it is cached and refuses (EAGAIN) if it would wait for the disk. An O_DIRECT
    read is never tried here. A cached page then costs a copy, or one system call as with
    ``pread``, instead of an SQE, its submission and its CQE; a read that would wait goes to
    the ring (:func:`_ring_page`). Nothing of the ring's bookkeeping is written for a page read
    here (only ``preadv2``'s iovec): the ``pend`` row of a queue slot is cold, and filling it
    cost about a third of the copy."""
    n = min(page_size, table[array_id, T_NBYTES] - page * page_size)
    file, fd, fd_direct, file_offset = page_location(table, array_id, page, page_size)
    if table[array_id, T_MAP] != 0:
        if not read_resident(table, array_id, file_offset, n, buf, start):
            return False
    elif fd_direct >= 0 and file_offset % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0:
        return False
    else:
        # struct iovec {base, len} in the row itself: two adjacent int64 columns.
        pend[row, P_IOV_BASE] = buf
        pend[row, P_IOV_LEN] = n
        iov = pend.ctypes.data + (row * pend.shape[1] + P_IOV_BASE) * 8
        if _preadv2(fd, iov, 1, file_offset, _RWF_NOWAIT) != n:
            return False
    if n < page_size:
        _memset(buf + n, 0, page_size - n)   # the tail of the last page reads as zeros
    count_file_io(file_io, table, array_id, file, False, n, _now_ns(clock) - start)
    return True


@njit(nogil=True, cache=True)
def _ring_page(uring, pend, row, table, array_id, page, page_size, buf, buf_index, entry,
               ticket, seen, op):
    """Fill an SQE that reads (writes) the page between its store file and ``buf``, and
    ``pend``'s row ``row`` with what the request is: the file and offset from
    :func:`~host_daemon.stores.page_location` (striped or not), O_DIRECT where the page allows
    it, as :func:`serve_page` does; only the array's own bytes are written, and a short last
    page's tail is zeroed now (the read does not reach it). (A read the page cache can serve
    is first tried with :func:`read_on_spot`.) ``buf_index``: the ring's registered buffer
    that holds ``buf``'s page (a READ_FIXED / WRITE_FIXED, see
    :func:`~host_daemon.uring.ring_prep_rw`), or -1."""
    nbytes = table[array_id, T_NBYTES]
    n = min(page_size, nbytes - page * page_size)
    file, fd, fd_direct, file_offset = page_location(table, array_id, page, page_size)
    alt = -1
    if op == L.OP_READ:
        if fd_direct >= 0 and file_offset % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0:
            alt = fd
            fd = fd_direct
        if n < page_size:
            _memset(buf + n, 0, page_size - n)
    p = pend[row]
    p[P_ENTRY] = entry
    p[P_TICKET] = ticket
    p[P_SEEN] = seen
    p[P_OFFSET] = table[array_id, T_OFFSET] + page * page_size
    p[P_OP] = op
    p[P_FD] = fd
    p[P_ALT_FD] = alt
    p[P_ADDR] = buf
    p[P_FILE_OFFSET] = file_offset
    p[P_LEFT] = n
    p[P_DUE] = 0
    p[P_ARRAY] = array_id
    p[P_FILE] = file
    p[P_BYTES] = n
    p[P_IN_RING] = 1
    p[P_BUF] = buf_index
    ring_prep_rw(uring, op == L.OP_WRITE, fd, buf, n, file_offset, buf_index, row)


@njit(nogil=True, cache=True)
def count_ring_io(file_io, table, pend, row, now):
    """Count a request the engine completed (OK) against its store file, with the time from
    the daemon taking it to its CQE."""
    p = pend[row]
    count_file_io(file_io, table, p[P_ARRAY], p[P_FILE], p[P_OP] == L.OP_WRITE, p[P_BYTES],
                  now - p[P_SEEN])


@njit(nogil=True, cache=True)
def cqe_status(uring, pend, row, res):
    """What a CQE (result ``res``) means for the request in ``pend``'s row ``row``: its STATUS_*
    once it has ended, or ``_QUEUED`` when a new SQE carries it on (the rest of a partial
    transfer; an O_DIRECT read the file system refused with EINVAL, once more on the buffered
    descriptor, with a plain READ: the EINVAL may have been the fixed buffer's). The caller has
    room for that SQE: the CQE just reaped freed it."""
    p = pend[row]
    op = p[P_OP]
    if res == -22 and p[P_ALT_FD] >= 0:   # EINVAL: O_DIRECT refused
        p[P_FD] = p[P_ALT_FD]
        p[P_ALT_FD] = -1
        p[P_BUF] = -1
        ring_prep_rw(uring, op == L.OP_WRITE, p[P_FD], p[P_ADDR], p[P_LEFT], p[P_FILE_OFFSET],
                     -1, row)
        return _QUEUED
    if 0 < res < p[P_LEFT]:   # the rest lies in the same registered buffer, if any
        p[P_ADDR] += res
        p[P_FILE_OFFSET] += res
        p[P_LEFT] -= res
        ring_prep_rw(uring, op == L.OP_WRITE, p[P_FD], p[P_ADDR], p[P_LEFT], p[P_FILE_OFFSET],
                     p[P_BUF], row)
        return _QUEUED
    p[P_IN_RING] = 0
    if res < 0:
        return L.STATUS_IO_ERROR
    if res < p[P_LEFT]:   # 0: the transfer stopped at the end of the file
        return L.STATUS_SHORT_WRITE if op == L.OP_WRITE else L.STATUS_SHORT_READ
    return L.STATUS_OK


@njit(nogil=True, cache=True)
def engine_room(limit, ring_on, room, emu_on, not_posted, capacity):
    """At most ``limit`` new requests, held to the engine's concurrency: ``room``, what its ring
    has room for (``ring_on``); under emulation (``emu_on``), ``capacity`` less ``not_posted``
    (parked or in the ring). Shared by the host daemon's and the NVMe controller's loops, at
    every queue visit. Scalars only: passing the ring's and the model's records, inlined or
    not, cost their arrays' reference counts at every visit (a host QD1 round trip of ~4.5 us
    instead of ~0.7)."""
    if ring_on:
        limit = min(limit, room)
    if emu_on:
        limit = min(limit, capacity - not_posted)
    return limit


@njit(nogil=True, cache=True)
def reap_next(uring, pend, table, file_io, now):
    """Reap the ring's next CQE (the caller saw it with ``ring_ready``): ``(row, status)`` of
    the request in ``pend``'s row it was for, status as :func:`cqe_status` says (``_QUEUED``:
    a new SQE carries the request on); a request that ended OK is counted against its store
    file at time ``now``. The part of reaping the host daemon and the NVMe controller share;
    what they post differs. Allocates nothing (the controller's loop has no reference
    counting)."""
    row, res = ring_cqe(uring, 0)
    ring_consume(uring, 1)
    status = cqe_status(uring, pend, row, res)
    if status == L.STATUS_OK:
        count_ring_io(file_io, table, pend, row, now)
    return row, status


@njit(nogil=True, cache=True, inline="always")
def reap_ring(uring, pend, table, file_io, clock, complete, ctx):
    """Reap the CQEs that have arrived (:func:`reap_next` each) and end each request they end
    with ``complete(pend, row, status, now, ctx)``; returns how many ended. The reap loop of
    the host daemon and the NVMe controller alike: ``complete`` (an ``njit`` function, compiled
    into this loop for each caller) and its ``ctx`` tuple are what each posts. Inlined into
    its caller: passed on across a call, a function would be compiled in as the address of its
    Python object, which keeps the caller out of Numba's disk cache."""
    n = ring_ready(uring)
    if n == 0:
        return 0
    now = _now_ns(clock)
    ended = 0
    for _ in range(n):
        row, status = reap_next(uring, pend, table, file_io, now)
        if status != _QUEUED:
            complete(pend, row, status, now, ctx)
            ended += 1
    return ended


@njit_without_refcounts
def _complete_request(pend, row, status, now, ctx):
    """Post the GPU completion of the request in ``pend``'s row ``row``, ended with
    ``status`` at ``now`` (or park it until its modelled time), and record it. ``ctx``: the
    host daemon's (cq, emu, ring, depth, page_size)."""
    cq, emu, ring, depth, page_size = ctx
    p = pend[row]
    op = p[P_OP]
    entry = p[P_ENTRY]
    due = p[P_DUE]
    if emu.on and due > now:
        park(emu, entry, due, status, L.SOURCE_STAGING, p[P_TICKET], p[P_SEEN], now, due,
             p[P_OFFSET], page_size, op)
    else:
        _post(cq, entry, p[P_TICKET], status, L.SOURCE_STAGING)
        if ring.on:
            # Without a model the file is the device: its part ends with the CQE.
            device = max(due, now) if emu.on else now
            ready = now if emu.on else p[P_SEEN]
            _record(ring, entry // depth, p[P_OFFSET], page_size, p[P_SEEN], ready, device,
                    now, op)


@njit_without_refcounts
def _reap(uring, pend, cq, emu, ring, clock, depth, page_size, table, file_io):
    """The host daemon's :func:`reap_ring`: the CQEs that have arrived become GPU completions
    (any order). A partial transfer continues where it stopped (a new SQE), an O_DIRECT read
    the file system refuses (EINVAL) is retried on the buffered descriptor; an error is the
    request's status (I/O error; a transfer that stops short: short read or write).
    (Compiled without reference counting: called before each queue while I/Os are out, it
    would otherwise count references to every array of ``emu`` and ``ring`` it packs.)"""
    return reap_ring(uring, pend, table, file_io, clock, _complete_request,
                     (cq, emu, ring, depth, page_size))


@njit(nogil=True, cache=True)
def _drain(uring, clock):
    """Wait (bounded: DRAIN_S_MAX) for the ring's requests in flight to end, so that no read
    lands in a staging page after the thread has gone; their completions are not posted."""
    start = _now_ns(clock)
    while uring.state[S_IN_FLIGHT] > 0 and _now_ns(clock) - start < DRAIN_S_MAX * 1e9:
        n = ring_ready(uring)
        if n > 0:
            ring_consume(uring, n)
        else:
            _usleep(NAP_US)


@njit(nogil=True, cache=True)
def ring_usable(uring):
    """Whether requests go to the io_uring engine: a ring, and no hard error on it yet."""
    return uring.on and uring.state[S_ERROR] == 0


@njit(nogil=True, cache=True)
def abandon_ring(uring):
    """After a hard ``io_uring_enter`` error (S_ERROR), once the caller has completed every
    request the ring held (``pend`` rows with P_IN_RING) with an error: empty the ring's
    counts, so that the thread serves its later requests synchronously (:func:`ring_usable`)
    and does not wait for the ring when it stops. I/Os the kernel had already taken may still
    complete into their buffers; with the ring's descriptor broken nothing can wait for them."""
    uring.state[S_UNSUBMITTED] = 0
    uring.state[S_IN_FLIGHT] = 0


@njit(nogil=True, cache=True, inline="always")
def fail_ring(uring, pend, clock, complete, ctx):
    """The answer to a hard ``io_uring_enter`` error, the host daemon's and the NVMe
    controller's: each request the ring held ends now with STATUS_IO_ERROR through
    ``complete`` (as :func:`reap_ring` ends them: the kernel's caller gets StorageIOError, not
    its bounded timeout); then :func:`abandon_ring`. Inlined, as :func:`reap_ring` is."""
    now = _now_ns(clock)
    for row in range(pend.shape[0]):
        if pend[row, P_IN_RING]:
            pend[row, P_IN_RING] = 0
            complete(pend, row, L.STATUS_IO_ERROR, now, ctx)
    abandon_ring(uring)


@njit_without_refcounts
def _fail_ring(uring, pend, cq, emu, ring, clock, depth, page_size):
    """The host daemon's :func:`fail_ring`."""
    fail_ring(uring, pend, clock, _complete_request, (cq, emu, ring, depth, page_size))


@njit(nogil=True, cache=True)
def end_pass(uring, progressed, emu, clock):
    """The end of a daemon thread's pass over its queues, with the io_uring engine: submit what
    the pass filled; and when the ring is full (no request can be taken before a CQE comes
    back) or the pass found nothing to do while I/Os are out, wait in the same
    ``io_uring_enter`` for a CQE (:func:`~host_daemon.uring.ring_submit_wait`), at most
    FULL_WAIT_NS or IDLE_WAIT_NS and never past the next modelled completion, rather than spin
    over the queues. Returns what the ``io_uring_enter`` did (:func:`ring_submit`): negative
    for a hard error."""
    out = uring.state[S_UNSUBMITTED] + uring.state[S_IN_FLIGHT]
    full = ring_room(uring) == 0
    if out > 0 and (full or not progressed):
        wait_ns = FULL_WAIT_NS if full else IDLE_WAIT_NS
        if emu.on and emu.size[0] > 0:
            wait_ns = min(wait_ns, emu.due[0] - _now_ns(clock))
        if wait_ns > 0:
            return ring_submit_wait(uring, wait_ns)
    if uring.state[S_UNSUBMITTED] > 0:
        return ring_submit(uring)
    return 0


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
                 served, emu, ring, clock, hot_every, file_io, uring, pend,
                 capacity):
    """The daemon thread's loop: serve ``my_queues`` until ``stop[0]`` becomes non-zero, then
    wait for its ring's requests still in flight (:func:`_drain`)."""
    _serve_loop(my_queues, heads, sq, cq, staging_address, depth, page_size, table, stop,
                served, emu, ring, clock, hot_every, file_io, uring, pend, capacity)
    if uring.on:
        _drain(uring, clock)


@njit(nogil=True, cache=True)
def _serve_loop(my_queues, heads, sq, cq, staging_address, depth, page_size, table, stop,
                served, emu, ring, clock, hot_every, file_io, uring, pend, capacity):
    """:func:`serve_queues`' loop (returns on ``stop``, or when a crash fault kills the thread).

    When the last pass found requests on one queue only (one warp missing at a time, say), that
    queue is looked at again every ``hot_every`` queues of the next pass (0: never;
    :data:`HOT_QUEUE_EVERY`), so that its next request waits for a few dozen queue checks
    rather than up to a whole pass (512 queues: ~1.4 us). With requests on several queues,
    passes are as without it. (An argument, not the global: ``cache=True`` would keep a
    global's value from the run that compiled the loop.) The serving code stays in this one
    loop, over a precomputed order of visits: a helper called per queue with the emulation and
    trace tuples cost ~150 ns per queue in reference counts, and a second visit loop per queue
    doubled the cost of a pass. (Under emulation a visit that found requests calls
    :func:`_time_batch` once: a cost per batch, not per visit.) ``file_io``: the thread's
    per-file I/O counters (:func:`page_io`; for the engine's I/Os, :func:`_reap`). ``served``:
    the requests served (word 0), the passes made (word 1) and the queues visited (word 2,
    added once per pass).

    With the io_uring engine (``uring.on``) a file store's reads and writes become SQEs
    (:func:`_ring_page`), submitted SUBMIT_BATCH at a time and at the end of each pass with one
    ``io_uring_enter`` each, and their completions are posted as their CQEs arrive
    (:func:`_reap`, before each queue). At most the ring's entries are out at once: a thread
    whose ring is full takes no new request until CQEs come back; it ends the pass at that
    queue (:func:`end_pass` waits for a CQE) and starts the next pass there. Under emulation a
    request counts against ``capacity`` (the engine's concurrency: 1 for a thread of the
    ``threads`` engine, which would wait for its drive; the ring's entries for io_uring) until
    its modelled completion is posted.
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
    first = 0         # the visit a pass starts at: where a pass cut by a full ring stopped
    while load_acquire(stop, 0) == 0:
        served[1] += 1
        progressed = False
        busy = -1         # a queue that had requests in this pass ...
        several = False   # ... and whether another one had too
        j = first
        first = 0
        visited = n_visits
        for v in range(n_visits):
            # Due completions are posted before each queue, not once per pass: a pass over
            # many busy queues takes long enough to post them late (with 512 queues the
            # emulated wall time ran up to 35 % past the model's).
            if emu.on and emu.size[0] > 0 and _post_due(cq, emu, ring, depth,
                                                        _now_ns(clock)) > 0:
                progressed = True
            if uring.on and uring.state[S_IN_FLIGHT] > 0 and _reap(
                    uring, pend, cq, emu, ring, clock, depth, page_size, table, file_io) > 0:
                progressed = True
            if uring.on and ring_room(uring) == 0:
                # No request can be taken before a CQE comes back: end the pass here and wait
                # for one in the kernel (end_pass), then go on from this visit. Visiting the
                # other queues meanwhile only polled the ring, at a core's full time.
                first = j
                several = True
                visited = v
                break
            k = order[j]
            j = j + 1 if j + 1 < n_visits else 0
            limit = BATCH
            if k < 0:     # a look at the hot queue: one request at most
                k = -1 - k
                limit = 1
            limit = engine_room(limit, uring.on, ring_room(uring), emu.on, emu.size[0]
                                + uring.state[S_IN_FLIGHT] + uring.state[S_UNSUBMITTED],
                                capacity)
            q = my_queues[k]
            n = 0
            while n < limit:
                ticket = heads[k]
                slot = ticket % depth
                entry = q * depth + slot
                # The request is one word, its tag the ticket's turn (gids.layout).
                word = load_acquire(sq, entry * L.SQ_WORDS + L.SQ_WORD)
                tag, array_id, page, op = sq_fields(word)
                if tag != sq_tag(ticket, depth):
                    break
                seen = _now_ns(clock) if timed else 0
                buf = staging_address + entry * page_size
                source = L.SOURCE_STAGING
                if ring_usable(uring) and _on_ring(table, array_id, page, page_size, op):
                    pend_row = k * depth + slot
                    # (its time is the per-file counts' too, so read the clock)
                    start = seen if timed else _now_ns(clock)
                    if op == L.OP_READ and read_on_spot(table, array_id, page, page_size, buf,
                                                        pend, pend_row, file_io, start, clock):
                        status = L.STATUS_OK
                    else:   # (registered buffer k: the queue's staging, _register_staging)
                        _ring_page(uring, pend, pend_row, table, array_id, page, page_size,
                                   buf, k, entry, ticket, start, op)
                        status = _QUEUED
                        source = pend_row
                else:
                    status, source = page_io(table, array_id, page, page_size, buf, op, file_io,
                                             clock)
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
                elif status != _QUEUED:
                    _post(cq, entry, ticket, status, source)
                    if ring.on:
                        # No model: the store is the device, and the host has no part of its own.
                        done = _now_ns(clock)
                        _record(ring, q, offset, page_size, seen, seen, done, done, op)
                heads[k] = ticket + 1
                served[0] += 1
                n += 1
            if emu.on and n > 0:
                _time_batch(cq, emu, ring, clock, depth, page_size, n, batch, pend)
            # Submitted only now, after the model has timed them: no CQE comes back before its
            # request has its due time.
            if uring.on and uring.state[S_UNSUBMITTED] >= SUBMIT_BATCH and ring_submit(
                    uring) < 0:
                _fail_ring(uring, pend, cq, emu, ring, clock, depth, page_size)
            if n > 0:
                progressed = True
                if busy < 0:
                    busy = k
                elif busy != k:
                    several = True
        served[2] += visited
        if uring.on and end_pass(uring, progressed, emu, clock) < 0:
            _fail_ring(uring, pend, cq, emu, ring, clock, depth, page_size)
        new_hot = busy if hot_every > 0 and not several else -1
        if new_hot != hot:
            hot = new_hot
            n_visits = _visit_order(order, n_queues, hot, hot_every)
            first = 0
        if progressed or emu.size[0] > 0 or (uring.on and uring.state[S_IN_FLIGHT] > 0):
            idle = 0   # completions pending: keep polling, never nap past a due time or a CQE
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


#: The storage engines of the daemon's file I/O (see :func:`resolve_engine`).
ENGINES = ("io_uring", "threads")
#: Bound on one host-side ring wait (a flush's write or fsync), seconds.
HOST_RING_TIMEOUT_S = 120.0
_NO_PEND = np.zeros((1, P_COLUMNS), dtype=np.int64)
_fallback_said = set()


def _ring_entries(depth):
    """The SQ entries the kernel gives for ``depth`` (a power of two, up to 32768)."""
    return 1 << max(0, (int(depth) - 1).bit_length())


def resolve_engine(engine):
    """The engine to use for ``engine`` and a note saying why it differs, if it does.

    io_uring falls back to threads where the kernel refuses a ring (no io_uring, a seccomp
    filter, ``kernel.io_uring_disabled``): said once per process as a warning, and kept in the
    note that ``rt.stats()`` and ``gids info`` show."""
    if engine != "io_uring":
        return engine, ""
    reason = U.probe()
    if reason is None:
        return "io_uring", ""
    note = f"io_uring unavailable ({reason}); using the threads engine"
    if note not in _fallback_said:
        _fallback_said.add(note)
        warnings.warn(f"gids: {note}", RuntimeWarning, stacklevel=3)
    return "threads", note


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
    engine : {"io_uring", "threads"}
        How file stores are read and written: each thread with an io_uring ring of
        ``engine_depth`` entries (many I/Os in flight per thread), or one synchronous
        ``pread``/``pwrite`` at a time. io_uring falls back to threads where the kernel refuses
        it (:func:`resolve_engine`; :attr:`engine` says which runs, :attr:`engine_note` why).
    engine_depth : int
        Ring entries per thread (rounded up to a power of two).
    fixed_buffers : bool, optional
        Register each thread's staging pages with its ring (one buffer per queue) and read and
        write them with READ_FIXED / WRITE_FIXED: the kernel then pins them once, not per I/O.
        Where the kernel refuses (memory it cannot pin, RLIMIT_MEMLOCK) the ring uses plain
        reads and writes; :attr:`buffers_note` says which. None: the setting
        ``engine_fixed_buffers``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    #: Whether the staging pages are the engine's buffers (the NVMe controller's are not: its
    #: commands name addresses anywhere in the DMA window).
    REGISTERS_STAGING = True

    def __init__(self, sq, cq, staging, table, n_queues, depth, page_size, n_threads,
                 model=None, trace_writer=None, engine="io_uring", engine_depth=256,
                 fixed_buffers=None):
        if n_threads < 1:
            raise ValueError(f"gids: daemon_threads must be >= 1, got {n_threads}")
        if engine not in ENGINES:
            raise ValueError(f"gids: engine must be one of {ENGINES}, got {engine!r}")
        if engine_depth < 1:
            raise ValueError(f"gids: engine_depth must be >= 1, got {engine_depth}")
        #: The engine asked for, the one in use, and why they differ ("" when they do not).
        self.engine_requested = engine
        self.engine, self.engine_note = resolve_engine(engine)
        self.engine_depth = int(engine_depth)
        self.fixed_buffers = bool(settings.get("engine_fixed_buffers") if fixed_buffers is None
                                  else fixed_buffers) and self.REGISTERS_STAGING
        #: Why the rings have no registered buffers ("" when they have, or none were asked).
        self._buffers_refused = ""
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
        # [requests served, passes over the thread's queues, queues visited] per thread.
        self._served = [private_array(3) for _ in range(self.n_threads)]
        self._heads = [None] * self.n_threads
        n_entries = n_queues * depth
        self._emu = [_emulation(model, n_entries) for _ in range(self.n_threads)]
        self._rings = [_trace_ring(trace_writer is not None) for _ in range(self.n_threads)]
        self._clocks = [private_array(2) for _ in range(self.n_threads)]
        # The io_uring engine's rings (one per thread, made in start()) and a host-side ring for
        # flush's writes and fsyncs; the threads engine's stand-ins have the same types.
        self._urings = [None] * self.n_threads
        self._pend = [None] * self.n_threads
        self._host_ring = None
        self._engine_error = ""
        # I/Os per store file (rows: T_FILE_SLOT + file; columns F_*), counted per thread.
        self._file_io = [private_array((MAX_FILES, F_COLUMNS)) for _ in range(self.n_threads)]

    @property
    def running(self):
        return any(t.is_alive() for t in self._threads)

    @property
    def served(self):
        """Requests served since start."""
        return int(sum(s[0] for s in self._served))

    @property
    def passes(self):
        """Passes over their queues the threads have made since start (all together)."""
        return int(sum(s[1] for s in self._served))

    @property
    def visits(self):
        """Queues the threads' passes have looked at since start (all together)."""
        return int(sum(s[2] for s in self._served))

    def file_io(self):
        """I/Os per store file since start: int64 [MAX_FILES, F_COLUMNS] (rows as the table's
        ``T_FILE_SLOT`` plus the file's index, columns ``host_daemon.stores.F_*``); read it
        once no request is in flight (after the kernels finished)."""
        return np.sum(self._file_io, axis=0)

    def reset_file_io(self):
        for counts in self._file_io:
            counts[:] = 0

    @property
    def capacity(self):
        """Requests the engine can have in flight, all threads together (under emulation a
        request counts until its modelled completion is posted): a thread each for
        ``threads``, a ring's entries each for ``io_uring``."""
        return self.n_threads * self._thread_capacity()

    def _thread_capacity(self):
        if self.engine != "io_uring":
            return 1
        rings = [r for r in self._urings if r is not None]
        return rings[0].entries if rings else _ring_entries(self.engine_depth)

    @property
    def engine_counters(self):
        """io_uring's ``submits`` (io_uring_enter calls that submitted), ``sqes`` (SQEs they
        took), ``waits`` (calls that waited for a CQE), summed over threads, and per thread
        ``peak_in_flight`` and ``waits_per_thread``, since start, and ``rings``: how each
        thread's ring was set up (:attr:`~host_daemon.uring.Ring.setup_name`); zeros (and
        empty lists) for the threads engine."""
        rings = [r for r in self._urings if r is not None and r.args is not None]
        per = {c: [int(r.args.state[c]) for r in rings]
               for c in (U.S_SUBMITS, U.S_SUBMITTED, U.S_WAITS, U.S_PEAK_IN_FLIGHT)}
        return {"submits": sum(per[U.S_SUBMITS]), "sqes": sum(per[U.S_SUBMITTED]),
                "waits": sum(per[U.S_WAITS]), "peak_in_flight": per[U.S_PEAK_IN_FLIGHT],
                "waits_per_thread": per[U.S_WAITS], "rings": [r.setup_name for r in rings]}

    @property
    def buffers_note(self):
        """Whether the io_uring engine's rings read and write through registered buffers:
        "registered buffers: yes", "registered buffers: no (why)", or "" for the threads
        engine (or before start)."""
        if self.engine != "io_uring" or not self._threads or not self.REGISTERS_STAGING:
            return ""
        if self._buffers_refused:
            return f"registered buffers: no ({self._buffers_refused})"
        return f"registered buffers: {'yes' if self.fixed_buffers else 'no (off)'}"

    @property
    def engine_error(self):
        """Why a daemon thread's ring stopped working (a hard ``io_uring_enter`` error: every
        request it held failed with an I/O error, and the thread serves later requests
        synchronously; or the thread could not enable it), or "" while every ring works."""
        for k, ring in enumerate(self._urings):
            if ring is not None and ring.args is not None and ring.args.state[U.S_ERROR]:
                err = -int(ring.args.state[U.S_ERROR])
                return (f"io_uring failed on daemon thread {k}'s ring: "
                        f"{os.strerror(err)} (errno {err}); its requests failed and it served "
                        "the rest without the ring")
        return self._engine_error   # a ring that failed before the last stop

    def follow(self, previous):
        """This daemon replaces ``previous`` (stopped) on the same queues: its ``engine_error``
        stays this one's until a ring of this one fails."""
        self._engine_error = previous.engine_error

    def cpu_seconds(self):
        """CPU time (user + system, seconds) the daemon's threads have used since they started,
        from ``/proc`` (clock-tick resolution); None where there is no ``/proc/self/task``."""
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = 0
        for t in self._threads:
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    after_name = f.read().rsplit(")", 1)[1].split()
            except (OSError, AttributeError, IndexError):
                return None
            total += int(after_name[11]) + int(after_name[12])   # utime, stime
        return total / tick

    def write_store(self, store, offset, data):
        """Write ``data`` at byte ``offset`` of ``store`` from the host (``Runtime.flush``):
        through the engine's host ring for a file store (each stripe file's part for a striped
        one) under io_uring, else ``store.write_bytes``. Raises OSError."""
        ring = self._host_uring(store)
        if ring is None:
            return store.write_bytes(offset, data)
        if not store.writable:
            raise OSError(f"gids: {store.name} was opened read-only")
        view = memoryview(data).cast("B")
        if isinstance(store, StripedStore):
            if offset + len(view) > store.nbytes:
                raise OSError(f"gids: write past the end of {store.name}")
            for f, at, start, n in store._pieces(offset, len(view)):
                self.write_store(store.files[f], at, view[start:start + n])
            return
        n = ring.pwrite(store.fileno(), view, offset)
        if n < len(view):
            raise OSError(f"gids: short write to {store.name} at byte {offset + n}")

    def sync_store(self, store):
        """Make ``store``'s writes durable: an fsync submitted to the engine's host ring for
        each file of a file store under io_uring, else ``store.sync()``. Raises OSError."""
        ring = self._host_uring(store)
        if ring is None:
            return store.sync()
        if store.writable:
            for f in (store.files if isinstance(store, StripedStore) else [store]):
                ring.fsync(f.fileno())

    def _host_uring(self, store):
        if self.engine != "io_uring" or not isinstance(store, (FileStore, StripedStore)):
            return None
        if self._host_ring is None:
            self._host_ring = U.HostRing(entries=8, timeout=HOST_RING_TIMEOUT_S)
        return self._host_ring

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
            if self.engine == "io_uring":
                self._pend[k] = np.zeros((len(my_queues) * self.depth, P_COLUMNS), np.int64)
        if self.engine == "io_uring":
            self._make_rings()
        if self.trace_writer is not None and hasattr(self.trace_writer, "set_engine"):
            self.trace_writer.set_engine(self.engine, self.capacity)
        ready = [threading.Event() for _ in range(self.n_threads)]
        for k in range(self.n_threads):
            my_queues = np.arange(k, self.n_queues, self.n_threads, dtype=np.int64)
            t = threading.Thread(target=self._run, args=(k, my_queues, ready[k]), daemon=True,
                                 name=f"gids-daemon-{k}")
            self._threads.append(t)
            t.start()
        # Each thread's first act is to enable its ring: once start returns, every ring is
        # owned by its thread (or known to have failed: engine_error). Bounded: a thread the
        # OS starts late still serves when it runs.
        for event in ready:
            event.wait(READY_WAIT_S)
        if self.trace_writer is not None:
            self._drain_stop.clear()
            self._drainer = threading.Thread(target=self._drain_loop, daemon=True,
                                             name="gids-trace-drain")
            self._drainer.start()
        return self

    def _make_rings(self):
        """A ring per thread; if the kernel refuses one (the probe's ring was allowed, these
        may not be: memory locked for rings, a limit on rings), every thread uses the threads
        engine instead, said as for a failed probe."""
        try:
            for k in range(self.n_threads):
                self._urings[k] = U.Ring(_ring_entries(self.engine_depth), owned=True)
        except OSError as exc:
            for ring in self._urings:
                if ring is not None:
                    ring.close()
            self._urings = [None] * self.n_threads
            self.engine = "threads"
            self.engine_note = (f"io_uring rings for {self.n_threads} threads could not be set "
                                f"up ({exc.strerror or exc}); using the threads engine")
            warnings.warn(f"gids: {self.engine_note}", RuntimeWarning, stacklevel=3)
            return
        self._buffers_refused = ""
        if self.fixed_buffers:
            self._register_staging()

    def _register_staging(self):
        """Register thread k's staging pages with its ring: buffer i is the pages of its i-th
        queue (``_serve_loop`` names a page's buffer by its queue). If a ring refuses, no ring
        uses registered buffers (one engine state to report), said once per reason."""
        span = self.depth * self.page_size
        base = self.staging.ctypes.data
        for k, ring in enumerate(self._urings):
            queues = range(k, self.n_queues, self.n_threads)
            why = ring.register_buffers([(base + q * span, span) for q in queues])
            if why is not None:
                self._buffers_refused = f"IORING_REGISTER_BUFFERS: {why}"
                for r in self._urings:   # the kernel keeps them until the ring closes
                    r.args.state[U.S_FIXED] = 0
                if why not in _fallback_said:
                    _fallback_said.add(why)
                    warnings.warn(f"gids: io_uring {self._buffers_refused}; plain reads and "
                                  "writes instead", RuntimeWarning, stacklevel=4)
                return

    def _queue_state(self, n):
        """The state thread k keeps per queue it serves: the next ticket of each."""
        return private_array(n)

    def _serve(self, k, my_queues, heads):
        """Thread ``k``'s loop over ``my_queues`` (returns once ``_stop`` is set)."""
        serve_queues(my_queues, heads, self.sq, self.cq, self.staging.ctypes.data, self.depth,
                     self.page_size, self.table, self._stop, self._served[k], self._emu[k],
                     self._rings[k], self._clocks[k], HOT_QUEUE_EVERY, self._file_io[k],
                     *self._engine_args(k))

    def _engine_args(self, k):
        """Thread ``k``'s ring, its rows of requests in the ring, and its capacity (stand-ins
        of the same types without a ring: one compiled loop serves both engines)."""
        ring = self._urings[k]
        if ring is None:
            return U.stand_in(), _NO_PEND, self._thread_capacity()
        return ring.args, self._pend[k], ring.entries

    def _run(self, k, my_queues, ready):
        ring = self._urings[k]
        if ring is not None:
            try:
                ring.enable()   # this thread is the ring's one issuer
            except OSError as exc:   # a hard ring error: the thread serves without it
                ring.args.state[U.S_ERROR] = -(exc.errno or errno.EIO)
        ready.set()
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
        # A ring whose thread is gone and which has nothing in flight can go; one that still
        # has I/O out (its thread stuck, or the drain's bound passed) must keep its staging
        # pages alive, like a stuck thread.
        stuck = list(stuck)
        self._engine_error = self.engine_error   # kept past the rings (a restart makes new ones)
        for k, ring in enumerate(self._urings):
            if ring is None or ring.args is None:
                continue
            if ring.in_flight > 0:
                stuck.append(f"gids-daemon-{k} (io_uring: {ring.in_flight} I/Os in flight)")
            elif not any(t.name == f"gids-daemon-{k}" for t in self._threads):
                ring.close()
                self._urings[k] = None
        if self._host_ring is not None:
            self._host_ring.close()
            self._host_ring = None
        if stuck:
            raise DaemonError(f"gids: daemon threads did not stop within {timeout} s: "
                              f"{[getattr(t, 'name', t) for t in stuck]}")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
