"""Baseline data paths behind one array interface, so that one kernel body runs on each.

A data path is a way for a kernel to get at the elements of an array that lives in a store (a
file, or RAM standing for one). Every path gives kernels the same thing, a handle ``h`` and a
:class:`~workloads.pager.Pager`: device functions that read element ``i`` (flat index),
``pager.read(h, i)``, or a page at a time (``pin``, ``value``, ``unpin``: one cache lookup per
page and warp through gids; on the other paths the path's own ``read(h, i)`` per element, by
:func:`~workloads.pager.element_pager`). A kernel is written once as a *template*, a Python
function of the pager that returns a ``cuda.jit`` kernel, and :meth:`DataPath.kernel`
specialises it for a path by closing over that path's pager (:attr:`DataPath.pager`).

Paths (:data:`PATHS`):

``memory``
    The whole array in GPU memory: the upper bound.
``zero_copy``
    The array in pinned, device-mapped host memory, read by the kernel over PCIe (the analog of
    a full-BAR device). Templates read requests with lanes of a warp side by side, so the
    loads are coalesced.
``gids``
    ``gids.read``, and page-level reads (``gids.pin_page``), through a :class:`gids.Runtime`
    (GPU page cache, host daemon threads).
``nvme``
    The same over the direct NVMe path (``Runtime(backend="nvme")``): NVMe commands in
    submission rings, doorbells, completions by phase tag, an emulated controller.
``cpu_batch``
    The CPU-initiated batch pattern of GPUDirect Storage: the kernel runs, lists the pages it
    needs that are not on the GPU, and exits; the host reads them from the store (``pread``, or
    ``memcpy`` from RAM) with a parallel ``njit`` gather into pinned memory and copies them to
    the GPU; the kernel runs again. A workload whose addresses depend on data read (chains)
    takes one pass per step. Batches are pipelined on two buffers: while the host gathers for
    one batch, the other's kernel and copy run.
``cpu_batch_kvikio``
    The same with KvikIO (cuFile, or its POSIX mode) reading each page straight into GPU
    memory. Only where ``import kvikio`` works, on a GPU, for file stores.

Kernel templates (:func:`gather_template`, :func:`element_chains_template`,
:func:`requests_template`, :func:`timed_requests_template`) take the path's pager and return a
kernel whose first argument is the handle; the first two read single elements
(``pager.read``), the request templates a page at a time. A template must be *restartable*: the
``cpu_batch`` path runs it several times per launch and only the last run's stores count, so it
must assign its outputs (never accumulate into them across launches or use atomics on them), and
a read that misses in a pass returns 0 (later reads of that thread may use addresses computed
from it: the path fetches those pages too, and ignores an out-of-range index in a pass that also
missed).

Example::

    import gids                                 # first: picks GPU or simulator
    from workloads import baselines as B

    for name in B.available_paths():
        path = B.make_path(name, page_size=4096)
        with path.open(data) as arr:            # a numpy array, a gids store or a file path
            out = cuda.device_array(idx.size, data.dtype)
            path.launch(B.gather_template, arr, blocks, 256, [(d_idx, out)])
            assert (out.copy_to_host() == data[idx]).all()
"""
import gids  # first: picks the GPU or the simulator before numba.cuda loads

# isort: split

import collections
import functools
import inspect
import math
import os
import time

import numba
import numpy as np
from numba import cuda, njit, prange

from gids import SIMULATOR
from gids import layout as L
from gids.array import SUPPORTED_DTYPES
from gids.device import device_helper
from gids.errors import ConfigError, IndexOutOfRangeError, StorageIOError
from gids.host import (
    T_COLUMNS,
    FileStore,
    MemoryStore,
    MmapStore,
    Store,
    host_view,
    open_file_store,
    serve_page,
)
from workloads.pager import GIDS_PAGER, element_pager, room_in_page

#: Lanes of a warp, which read requests together (also in the simulator, where they are just 32
#: consecutive threads; no warp intrinsic is used).
GROUP = 32

#: Requests a warp of :func:`requests_template` reads at once, one group of ``GROUP //
#: REQUESTS_PER_WARP`` lanes each. Read one at a time, a request through gids is a dependent
#: chain (the pin's atomic and slot load, the data loads, the unpin) and a warp has one such
#: chain in flight: the bench's 100 %-hit 4 KiB requests reached a third of the all-in-GPU-memory
#: path. With R requests a warp pins their pages in one collective
#: call (one lookup per distinct page, the round trips overlapped), then has all R requests'
#: loads in flight, then unpins in one call: R chains for about the latency of one. 2, not more:
#: through gids a warp may hold R - 1 pins while its last page loads, which needs R cache
#: slots per resident warp (:func:`requests_template`'s notes), and each lane keeps a round's
#: values in registers (:data:`LOADS_PER_ROUND`).
REQUESTS_PER_WARP = 2

#: Loads a lane issues before it adds any of them (four runs of eight): a group of 16 lanes
#: (:data:`REQUESTS_PER_WARP` = 2) reads a 4 KiB page of int64 in one round, so that a warp has
#: both its requests' loads in flight at once; each round waits for its loads (a loop the
#: compiler unrolled by four took four rounds per page). Read one at a time,
#: a 4 KiB request took one round of 16 loads a lane through gids (the compiler unrolled the
#: loop of eight by two) and two of eight on the memory path (not unrolled, each load bounds-
#: checked). The values take 64 registers a lane: the memory path's kernel now takes 128 (no
#: spill; 2 blocks of 256 threads an SM, as the gids kernel at its cap), where it took 80 (3
#: blocks): 8 KiB in flight a warp where it was 2 KiB, 128 KiB an SM where it was 48 KiB
#: (ptxas for sm_90); with it the memory path's 100 %-hit requests read ~4.2 TB/s on the H200.
LOADS_PER_ROUND = 32

# ------------------------------------------------------------------ device helpers

if SIMULATOR:
    def timer_after(value):
        """Nanoseconds now, read after ``value`` is computed (simulator: the host clock)."""
        return time.monotonic_ns()
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def timer_after(typingctx, value):
        """``%globaltimer`` (ns), read only once ``value`` (an int64) is available.

        A plain timer read may be scheduled before the loads whose latency it should close:
        taking the accumulated value as an asm input makes the read wait for them.
        """
        if value != types.int64:
            return None
        sig = types.int64(types.int64)

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
            asm = ir.InlineAsm(fnty, "mov.u64 $0, %globaltimer;", "=l,l", side_effect=True)
            return builder.call(asm, [args[0]])
        return sig, codegen

from gids.device import atomic_add, atomic_cas  # noqa: E402

# ------------------------------------------------------------------ kernel templates
#
# A template takes its path's pager (workloads/pager.py) and returns the kernel. Templates that
# read single elements use ``pager.read``; the request templates read a request a page at a
# time (``_request_sum``), so that through gids a 4 KiB request costs one cache lookup per warp
# where 16 ``gids.read`` calls cost 16 (what bounded the bench's hit and Zipf figures on the
# H200), while every other path reads the same elements through its reader, as before.

def gather_template(pager):
    """``out[k] = a[idx[k]]`` (grid-stride). Kernel ``(h, idx, out)``."""
    read = pager.read

    @gids.jit
    def gather(h, idx, out):
        start = cuda.grid(1)
        for k in range(start, idx.size, cuda.gridsize(1)):
            out[k] = read(h, idx[k])
    return gather


def element_chains_template(pager):
    """Each thread follows chains of ``steps`` dependent single-element reads.

    Kernel ``(h, starts, steps, n, out)``: chain ``c`` starts at element ``starts[c]``; each
    value read, as an integer modulo ``n``, is the next index; ``out[c * steps + s]`` is the
    value read at step ``s``. Values must be non-negative.
    """
    read = pager.read

    @gids.jit
    def element_chains(h, starts, steps, n, out):
        start = cuda.grid(1)
        for c in range(start, starts.size, cuda.gridsize(1)):
            i = starts[c]
            for s in range(steps):
                v = read(h, i)
                out[c * steps + s] = v
                i = np.int64(v) % n
    return element_chains


@functools.lru_cache(maxsize=None)
def _request_sum(pager):
    """``request_sum(h, base, elems, sub, lanes, live, want_first) -> (total, first)`` for
    ``pager``.

    A group of ``lanes`` lanes (``GROUP``, a whole warp, or ``GROUP // REQUESTS_PER_WARP``, one
    of :func:`requests_template`'s groups) reads one request, elements ``base .. base + elems -
    1``, a page at a time: it pins the page holding the next element it needs (every lane of
    the group names the same element), lane ``sub`` of the group adds elements ``sub, sub +
    lanes, ...`` of what the request has on that page (a group's loads are contiguous), and the
    group gives the pin back once its sum holds them (``Pager.unpin_after``). A request may
    start anywhere in a page and span any number of pages (requests larger than the page, or
    not aligned to it): each page is pinned once. ``total`` is the lane's sum, 0 unless
    ``live`` (a group with no request of its own pins and unpins with the others but adds
    nothing); ``first`` is element ``base``, read by every lane while its page is pinned
    (``want_first``: a chain's next address), else 0.

    Collective over the warp: its lanes call it together, each group with its own ``base`` and
    every group taking as many pages (one group, or groups whose requests each lie in one page),
    so that the groups' pins are one ``pin`` call, as are their unpins: through gids, one lookup
    per distinct page (:func:`gids.pin_page`), the groups' round trips overlapped.
    """
    pin, value, unpin_after, page_elems = (pager.pin, pager.value, pager.unpin_after,
                                           pager.page_elems)

    @device_helper
    def eight(h, k, stride):
        """Elements at ``k, k + stride, ..., k + 7 * stride`` of a pinned page, as a tuple: all
        eight loads come before any use of them."""
        return (value(h, k), value(h, k + stride), value(h, k + 2 * stride),
                value(h, k + 3 * stride), value(h, k + 4 * stride), value(h, k + 5 * stride),
                value(h, k + 6 * stride), value(h, k + 7 * stride))

    @device_helper
    def add8(a):
        return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))

    @device_helper
    def page_sum(h, k, stop, stride):
        """The sum of elements ``k, k + stride, ...`` of a pinned page, up to ``k + stop``
        (exclusive): rounds of LOADS_PER_ROUND loads, then one of sixteen, one of eight and
        single loads for what is left. A round's loads are all issued before any is added."""
        total = 0
        j = 0
        while j + (LOADS_PER_ROUND - 1) * stride < stop:
            a = eight(h, k + j, stride)
            b = eight(h, k + j + 8 * stride, stride)
            c = eight(h, k + j + 16 * stride, stride)
            d = eight(h, k + j + 24 * stride, stride)
            total += (add8(a) + add8(b)) + (add8(c) + add8(d))
            j += LOADS_PER_ROUND * stride
        if j + 15 * stride < stop:
            a = eight(h, k + j, stride)
            b = eight(h, k + j + 8 * stride, stride)
            total += add8(a) + add8(b)
            j += 16 * stride
        if j + 7 * stride < stop:
            total += add8(eight(h, k + j, stride))
            j += 8 * stride
        while j < stop:
            total += value(h, k + j)
            j += stride
        return total

    @device_helper
    def request_sum(h, base, elems, sub, lanes, live, want_first):
        pe = page_elems(h)
        total = 0
        first = 0
        e = 0
        while e < elems:
            i = base + e
            at = pin(h, i)
            n = min(room_in_page(pe, i), elems - e)
            if at >= 0:      # else the page could not be had: the path recorded why
                stop = n - sub if live else 0
                # The stride a constant in each branch: the loads' addresses fold into their
                # offsets, where a stride in a register took an add per load.
                if lanes == GROUP:
                    total += page_sum(h, at + sub, stop, GROUP)
                else:
                    total += page_sum(h, at + sub, stop, GROUP // REQUESTS_PER_WARP)
                if want_first and e == 0:
                    first = value(h, at)
            # ``total + first`` depends on every element read under the pin: the unpin waits
            # for those loads rather than fencing (gids.unpin_page_after).
            unpin_after(h, i, at, total + first)
            e += n
        return total, first
    return request_sum


def requests_template(pager):
    """Warps read whole requests (runs of ``elems`` elements), several at once where each lies
    in one page, lanes side by side, a page at a time.

    Kernel ``(h, starts, steps, elems, n_req, out)``. Item ``k`` is a chain of ``steps``
    requests starting at request ``starts[k]``; request ``r`` is elements ``[r * elems, (r + 1)
    * elems)``. With ``steps > 1`` the next request is the first element of the one just read,
    as an integer modulo ``n_req`` (non-negative data). Warp ``w`` of ``n_warps`` takes items
    ``w, w + n_warps, w + 2 * n_warps, ...``:

    - where ``elems`` divides the pager's page (no request crosses a page: the bench's 4 KiB
      requests), :data:`REQUESTS_PER_WARP` (R) of them at a time, one group of ``32 / R``
      lanes each, the groups' chains in lockstep: a step's R pages are pinned in one call,
      their loads are in flight together, then they are unpinned in one call;
    - otherwise one at a time, by the whole warp.

    A lane reads elements ``l, l + 32 / R, ...`` (or ``l, l + 32, ...``) of each page of its
    group's request, so that a group's loads are contiguous, and adds them up; ``out[t]`` is
    thread ``t``'s sum (integer data: wrapping, order-free, so that the sum of a warp's lanes
    checks exactly against numpy: ``bench.expected_warp_sums``). Through gids each page of a
    step is one lookup per warp (:func:`_request_sum`).

    Notes
    -----
    A warp with fewer than R items left (an item count not a multiple of R) gives its idle
    groups its first item of the step: they follow that chain, pinning the same pages (no
    other lookup, no other page fetched), and add nothing.

    Through gids a warp pinning R pages in one call may hold the pins of those that hit while
    another loads (:func:`gids.pin_page`'s notes). Every warp is sure to progress while the
    cache has R slots for each warp resident at once: then a warp that waits for a slot, holding
    fewer than R, cannot have every slot held by warps that wait too. The Runtime's minimum (one
    warp's 32 pages) makes that sure only for up to 32 / R warps at a time; a kernel of many
    warps over a cache near that minimum can end in :class:`~gids.errors.CacheExhaustedError`
    after the timeout (never a hang). An H200 holds at most 132 x 64 warps (2,112 with this
    kernel's 128-register cap and 256-thread blocks): for R = 2, 16,896 pages of 4 KiB (66 MiB)
    at the very most, against the bench's gids caches of 205 MiB and more at its default 2 GiB
    of data (51 MiB with ``--quick``'s 512 MiB, above the 4,224 pages of 2,112 warps). In the
    simulator a thread is a warp of one and pins one page a call (its group's), so it never
    holds a pin while waiting; with emulated 32-lane warps, blocks run one at a time.
    """
    request_sum = _request_sum(pager)
    page_elems = pager.page_elems

    @gids.jit
    def requests(h, starts, steps, elems, n_req, out):
        t = cuda.grid(1)
        lane = cuda.threadIdx.x % GROUP
        n_warps = cuda.gridsize(1) // GROUP
        # R requests at once only where none crosses a page: every group then takes one page
        # a step, so the groups' pins (and unpins) are one call.
        groups = 1
        if elems > 0 and page_elems(h) % elems == 0:
            groups = REQUESTS_PER_WARP
        lanes = GROUP // groups
        group = lane // lanes
        sub = lane - group * lanes
        acc = 0
        k0 = t // GROUP             # the warp's item for group 0 in this round
        while k0 < starts.size:
            k = k0 + group * n_warps
            live = k < starts.size
            if not live:
                k = k0              # group 0's chain: the same pages, nothing added
            r = starts[k]
            for s in range(steps):
                total, first = request_sum(h, r * elems, elems, sub, lanes, live, s + 1 < steps)
                acc += total
                r = np.int64(first) % n_req
            k0 += groups * n_warps
        if t < out.size:
            out[t] = acc
    return requests


def timed_requests_template(pager):
    """One warp reads requests one after another, a page at a time, and times each: queue
    depth 1 (one request at a time, by the whole warp, whatever its size).

    Kernel ``(h, ids, elems, t0, t1, out)``, launched as one block of 32 threads: lane ``l``
    stores its start and end times of request ``k`` at ``t0[k * 32 + l]``, ``t1[k * 32 + l]``
    (request latency: the latest end minus the earliest start), and its sum at ``out[l]``.
    """
    request_sum = _request_sum(pager)

    @gids.jit
    def timed_requests(h, ids, elems, t0, t1, out):
        lane = cuda.threadIdx.x
        acc = 0
        for k in range(ids.size):
            start = timer_after(acc)
            total, _ = request_sum(h, ids[k] * elems, elems, lane, GROUP, True, False)
            acc += total
            t0[k * GROUP + lane] = start
            t1[k * GROUP + lane] = timer_after(acc)
        out[lane] = acc
    return timed_requests


TEMPLATES = {
    "gather": gather_template,
    "element_chains": element_chains_template,
    "requests": requests_template,
    "timed_requests": timed_requests_template,
}

# ------------------------------------------------------------------ readers

#: The handle of the ``memory`` and ``zero_copy`` paths.
PlainHandle = collections.namedtuple("PlainHandle", [
    "data",     # the elements (device memory, or mapped host memory), 1-D
    "n_elems",
    "zero",     # one element holding 0: what an out-of-range read returns
    "err",      # int64[2]: [1 if a read was out of range, that index]
])


@cuda.jit(device=True)
def plain_read(h, i):
    """Element ``i`` of a device or mapped array, bounds-checked like ``gids.read``."""
    if i < 0 or i >= h.n_elems:
        h.err[0] = 1
        h.err[1] = i
        return h.zero[0]
    return h.data[i]


# cpu_batch page table entries and counter words.
ABSENT = -1       # page_slot[p]: page p is not in the batch buffer
REQUESTED = -2    # page_slot[p]: a thread has listed p in this pass
C_COUNT = 0       # slots used + pages listed in this pass (may pass the capacity)
C_MISSED = 1      # 1 if a read in this pass found its page absent
C_BAD = 2         # 1 if a read was out of range
C_BAD_INDEX = 3   # such an index
N_COUNTERS = 4

#: The handle of the ``cpu_batch`` paths.
BatchHandle = collections.namedtuple("BatchHandle", [
    "buf",         # the batch buffer: capacity pages of elements (device memory)
    "page_slot",   # int64 per page of the array: its slot in buf, ABSENT or REQUESTED
    "req",         # int64 per slot: the page it holds (the request list the host reads)
    "ctr",         # int64[N_COUNTERS]
    "zero",
    "n_elems",
    "shift",       # log2(elements per page)
    "capacity",    # slots in buf
])


@cuda.jit(device=True)
def batch_read(h, i):
    """Element ``i`` if its page is in the batch buffer; else list the page and return 0."""
    if i < 0 or i >= h.n_elems:
        h.ctr[C_BAD] = 1
        h.ctr[C_BAD_INDEX] = i
        return h.zero[0]
    page = i >> h.shift
    s = h.page_slot[page]
    if s >= 0:
        return h.buf[(s << h.shift) + (i & ((1 << h.shift) - 1))]
    if h.ctr[C_MISSED] == 0:      # read first: a store per miss to one word would serialise
        h.ctr[C_MISSED] = 1
    if s == ABSENT and atomic_cas(h.page_slot, page, ABSENT, REQUESTED) == ABSENT:
        k = atomic_add(h.ctr, C_COUNT, 1)
        if k < h.capacity:
            h.req[k] = page
        else:
            h.page_slot[page] = ABSENT   # no room in this pass: listed again in the next
    return h.zero[0]


@gids.jit
def _assign_slots(page_slot, req, lo, hi):
    k = lo + cuda.grid(1)
    if k < hi:
        page_slot[req[k]] = k


@gids.jit
def _clear_slots(page_slot, req, n):
    k = cuda.grid(1)
    if k < n:
        page_slot[req[k]] = ABSENT


@njit(parallel=True, nogil=True)
def gather_pages(table, pages, page_size, dst_address):
    """Read ``pages`` of the array in row 0 of ``table`` to consecutive pages at ``dst_address``.

    One ``pread`` (file store) or ``memcpy`` (RAM) per page, spread over Numba's threads; the
    daemon's own ``serve_page`` does the read, so both paths read a store the same way.
    Returns each page's status (``layout.STATUS_*``).
    """
    n = pages.shape[0]
    status = np.zeros(n, dtype=np.int64)
    for k in prange(n):
        s, _ = serve_page(table, 0, pages[k], page_size, dst_address + k * page_size)
        status[k] = s
    return status



#: Public names of the cpu_batch page-table kernels and option checks, for other batch paths
#: (``assign_slots[grid](page_slot, req, lo, hi)``: ``page_slot[req[k]] = k`` for ``lo <= k <
#: hi``; ``clear_slots[grid](page_slot, req, n)``: those of ``req[:n]`` back to ``ABSENT``).
assign_slots = _assign_slots
clear_slots = _clear_slots
# ------------------------------------------------------------------ sources

def open_store(source, dtype=None, shape=None, offset=0, storage="file"):
    """A store for ``source`` as the paths open it: ``(store, dtype, shape, offset, owned)``.

    ``source`` is a numpy array, a gids store or a file path (as :meth:`DataPath.open` takes,
    a path read as ``storage`` says); ``owned``: the store was made here, and the caller closes
    it. For code outside this module that reads a store the way the paths do (e.g. with
    :func:`gather_pages`).
    """
    return _open_source(source, dtype, shape, offset, storage)


def gather_table(store, offset, nbytes):
    """The one-row daemon table :func:`gather_pages` reads: ``nbytes`` at ``offset`` of ``store``.

    A zero-copy memory store is read by copying (as the cpu_batch path does): zero-copy serving
    is gids's own.
    """
    if isinstance(store, MemoryStore) and store.zero_copy:
        store = MemoryStore(store.data, zero_copy=False)
    table = np.zeros((1, T_COLUMNS), dtype=np.int64)
    table[0] = store.table_row(offset, nbytes)
    return table


def _open_source(source, dtype, shape, offset, storage="file"):
    """(store, dtype, shape, offset, owned) for a numpy array, a gids store or a file path (read
    as ``storage`` says: :func:`host_daemon.stores.open_file_store`)."""
    if isinstance(source, np.ndarray):
        if dtype is not None and np.dtype(dtype) != source.dtype:
            raise ConfigError(f"gids: dtype {np.dtype(dtype)} given for an array of "
                              f"{source.dtype}")
        dtype = source.dtype
        shape = source.shape if shape is None else shape
        store, owned = MemoryStore(source), True
    elif isinstance(source, Store):
        store, owned = source, False
    elif isinstance(source, (str, os.PathLike)):
        store, owned = open_file_store(source, storage), True
    else:
        raise ConfigError(f"gids: cannot open {type(source).__name__}: give a numpy array, a "
                          "gids store or a file path")
    try:
        if dtype is None:
            raise ConfigError("gids: give a dtype for a store or a file")
        dtype = np.dtype(dtype)
        if dtype not in SUPPORTED_DTYPES:
            raise ConfigError(f"gids: unsupported dtype {dtype}; supported: "
                              f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")
        offset = int(offset)
        if offset < 0:
            raise ConfigError(f"gids: offset must be >= 0, got {offset}")
        if shape is None:
            shape = ((store.nbytes - offset) // dtype.itemsize,)
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        size = int(np.prod(shape, dtype=np.int64))
        if size <= 0:
            raise ConfigError("gids: an array must have at least one element")
        if offset + size * dtype.itemsize > store.nbytes:
            raise ConfigError(f"gids: {store.name} is too short: {store.nbytes} bytes, but shape "
                              f"{shape} of {dtype} at offset {offset} needs "
                              f"{offset + size * dtype.itemsize}")
    except BaseException:
        if owned:
            store.close()
        raise
    return store, dtype, shape, offset, owned


def _host_elements(store, dtype, size, offset):
    """The array's elements as a host numpy array (a view where the store is in RAM)."""
    nbytes = size * dtype.itemsize
    if isinstance(store, (MemoryStore, MmapStore)):
        raw = store.data[offset:offset + nbytes]
        if offset % dtype.itemsize == 0:
            return raw.view(dtype)
        return raw.copy().view(dtype)
    return np.fromfile(store.path, dtype=dtype, count=size, offset=offset)


def _check_page_size(page_size, dtype, lo=1, hi=1 << 30):
    page_size = int(page_size)
    if page_size < lo or page_size > hi or page_size & (page_size - 1):
        raise ConfigError(f"gids: page_size must be a power of two from {lo} to {hi} bytes, "
                          f"got {page_size}")
    if page_size % dtype.itemsize:
        raise ConfigError(f"gids: page_size {page_size} is not a multiple of the element size "
                          f"({dtype.itemsize} bytes of {dtype})")
    return page_size


def _positive_int(name, value, minimum=1):
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ConfigError(f"gids: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# ------------------------------------------------------------------ opened arrays

class OpenedArray:
    """An array opened on a data path. Pass :attr:`handle` to the path's kernels.

    Attributes
    ----------
    path : DataPath
    handle : namedtuple
        What kernels receive as ``h``.
    dtype, shape, size, nbytes
        As for a numpy array.
    store : gids store
        Where the elements live.
    """

    def __init__(self, path, store, dtype, shape, offset, owned):
        self.path = path
        self.store = store
        self.dtype = dtype
        self.shape = shape
        self.offset = offset
        self._owned = owned
        self.handle = None

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def stats(self):
        """Counters since the last :meth:`reset` (a dict; keys depend on the path)."""
        return {}

    def reset(self):
        """Drop cached pages and zero the counters (between timed runs)."""
        self.reset_counters()

    def reset_counters(self):
        """Zero the counters of :meth:`stats`, keeping cached pages."""

    def close(self):
        if self._owned:
            self.store.close()
            self._owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"{type(self).__name__}(path={self.path.name!r}, shape={self.shape}, "
                f"dtype={self.dtype}, store={self.store.name!r})")


class _PlainArray(OpenedArray):
    def __init__(self, path, store, dtype, shape, offset, owned, data):
        super().__init__(path, store, dtype, shape, offset, owned)
        self._data = data
        self._err = cuda.to_device(np.zeros(2, dtype=np.int64))
        self.handle = PlainHandle(data=data, n_elems=self.size,
                                  zero=cuda.to_device(np.zeros(1, dtype=dtype)), err=self._err)

    def check(self):
        err = self._err.copy_to_host()
        if err[0]:
            self._err.copy_to_device(np.zeros(2, dtype=np.int64))
            raise IndexOutOfRangeError(f"gids: a kernel read index {int(err[1])} of an array of "
                                       f"{self.size} elements ({self.path.name} path)")


class _GidsArray(OpenedArray):
    def __init__(self, path, store, dtype, shape, offset, owned, runtime):
        super().__init__(path, store, dtype, shape, offset, owned)
        self.runtime = runtime
        self.array = runtime.open_array(store, dtype, shape=shape, offset=offset)
        self.handle = self.array.handle

    def stats(self):
        s = self.runtime.stats()
        return {"hits": s.hits, "misses": s.misses, "ios": s.ios, "evictions": s.evictions,
                "hit_rate": s.hit_rate, "bytes_to_gpu": s.bytes_read, "tier_hits": s.tier_hits,
                "tier_direct": s.tier_direct, "tier_fills": s.tier_fills}

    def reset(self):
        # The host tier is filled once (static fill): each timed run starts from it.
        self.runtime.invalidate(keep_host_tier=True)
        self.runtime.reset_stats()

    def reset_counters(self):
        self.runtime.reset_stats()

    def close(self):
        try:
            self.runtime.close()
        finally:
            super().close()


class _BatchState:
    """One batch buffer of the cpu_batch path, with its page table, request list and stream."""

    def __init__(self, arr, capacity, epp):
        n_pages = math.ceil(arr.size / epp)
        self.stream = cuda.stream()
        self.buf = cuda.device_array(capacity * epp, dtype=arr.dtype)
        self.staging = cuda.pinned_array(capacity * epp, dtype=arr.dtype)
        self.page_slot = cuda.to_device(np.full(n_pages, ABSENT, dtype=np.int64))
        self.req = cuda.device_array(capacity, dtype=np.int64)
        self.req_host = cuda.pinned_array(capacity, dtype=np.int64)
        self.ctr = cuda.to_device(np.zeros(N_COUNTERS, dtype=np.int64))
        self.ctr_host = cuda.pinned_array(N_COUNTERS, dtype=np.int64)
        self.handle = BatchHandle(buf=self.buf, page_slot=self.page_slot, req=self.req,
                                  ctr=self.ctr, zero=cuda.to_device(np.zeros(1, arr.dtype)),
                                  n_elems=arr.size, shift=epp.bit_length() - 1,
                                  capacity=capacity)
        self.used = 0          # slots holding pages for the current batch
        self.args = None       # the current batch's kernel arguments
        self.passes = 0


class _BatchArray(OpenedArray):
    def __init__(self, path, store, dtype, shape, offset, owned):
        super().__init__(path, store, dtype, shape, offset, owned)
        page_size = path.page_size
        self.page_size = page_size
        self.epp = page_size // dtype.itemsize
        self.n_pages = math.ceil(self.size / self.epp)
        # The store's row of the daemon's table, so the gather reads it as the daemon would.
        # A zero-copy memory store is read by copying here: zero-copy serving is gids's own.
        row_store = store
        if isinstance(store, MemoryStore) and store.zero_copy:
            row_store = MemoryStore(store.data, zero_copy=False)
        self.table = np.zeros((1, T_COLUMNS), dtype=np.int64)
        self.table[0] = row_store.table_row(offset, self.nbytes)
        capacity = min(path.batch_pages, self.n_pages)
        # Two buffers: one batch's host gather overlaps the other's kernel and copy.
        self.states = [_BatchState(self, capacity, self.epp) for _ in range(2)]
        self.handle = self.states[0].handle   # for inspection; launch() uses each state's own
        self._counts = {"passes": 0, "pages_fetched": 0, "gather_seconds": 0.0}

    def stats(self):
        d = dict(self._counts)
        d["bytes_to_gpu"] = d["pages_fetched"] * self.page_size
        return d

    def reset_counters(self):
        # Nothing to drop: a batch's pages leave the buffer when its launch ends.
        self._counts = {"passes": 0, "pages_fetched": 0, "gather_seconds": 0.0}


# ------------------------------------------------------------------ data paths

_KERNELS = {}   # (template, pager) -> kernel

class DataPath:
    """A way for kernels to read an array; subclasses are the paths of :data:`PATHS`.

    Use :meth:`open` to put an array on the path, :meth:`kernel` to specialise a kernel
    template with the path's pager, and :meth:`launch` to run it.
    """

    #: Name in :data:`PATHS` and in results.
    name = None
    #: One line for tables and ``--help``.
    description = ""
    #: The ``@cuda.jit(device=True)`` function ``read(h, i)`` kernels call (a staticmethod:
    #: a Numba dispatcher would otherwise bind to the instance like a method).
    reader = None
    #: True where one launch runs the kernel several times (cpu_batch).
    multi_pass = False

    @classmethod
    def unavailable_reason(cls):
        """Why the path cannot run in this process, or None."""
        return None

    def open(self, source, dtype=None, shape=None, offset=0, storage="file"):
        """Put an array on this path.

        Parameters
        ----------
        source : numpy.ndarray, gids store (FileStore, MemoryStore, MmapStore) or path
            Where the elements are. A path is read as ``storage`` says.
        dtype : numpy dtype, optional
            Element type (needed for a store or a path).
        shape : int or tuple, optional
            Default: all whole elements of the store after ``offset``.
        offset : int
            Byte offset of element 0 in the store.
        storage : {"file", "mmap", "memory"}
            For a path: ``pread`` (``O_DIRECT`` where aligned), a mapping, or a copy of the file
            in RAM, as ``Runtime.open_array``'s ``storage``. Compare paths over the same one: a
            baseline reading the disk beside gids reading RAM measures the disk.

        Returns
        -------
        OpenedArray
            A context manager; closing it frees what the path allocated.
        """
        reason = self.unavailable_reason()
        if reason:
            raise ConfigError(f"gids: data path {self.name!r} is not available here: {reason}")
        store, dtype, shape, offset, owned = _open_source(source, dtype, shape, offset, storage)
        try:
            return self._open(store, dtype, shape, offset, owned)
        except BaseException:
            if owned:
                store.close()
            raise

    def _open(self, store, dtype, shape, offset, owned):
        raise NotImplementedError

    @property
    def pager(self):
        """The :class:`~workloads.pager.Pager` kernel templates get: by default
        :func:`~workloads.pager.element_pager` over :attr:`reader` (every value a read); a
        path with a page cache of its own gives real page pins (gids: ``GIDS_PAGER``)."""
        return element_pager(self.reader)

    def kernel(self, template):
        """``template(self.pager)``: the template's kernel for this path.

        Shared by every path object with the same pager (a Numba dispatcher compiles once per
        argument types; a gids kernel takes seconds to compile on a GPU).
        """
        key = (template, self.pager)
        if key not in _KERNELS:
            _KERNELS[key] = template(self.pager)
        return _KERNELS[key]

    def launch(self, template, array, griddim, blockdim, batches):
        """Run the template's kernel once per batch of arguments, and wait for all of them.

        Parameters
        ----------
        template : callable
            A kernel template (``template(pager)`` returns a kernel ``(h, *args)``).
        array : OpenedArray
            Opened on this path.
        griddim, blockdim : int
            Launch configuration of each kernel.
        batches : sequence of tuple
            Each tuple is a launch's arguments after the handle.

        Returns
        -------
        dict
            What the launch cost beyond the kernels: ``passes`` (kernel runs), and for
            cpu_batch ``pages_fetched``.

        Raises
        ------
        IndexOutOfRangeError, StorageIOError, GidsTimeoutError
            A read out of range, a store that could not be read, a wait that ran out.
        """
        if array.path is not self:
            raise ConfigError(f"gids: this array was opened on the {array.path.name!r} path, "
                              f"not {self.name!r}")
        griddim = _positive_int("griddim", griddim)
        blockdim = _positive_int("blockdim (threads per block)", blockdim)
        batches = list(batches)
        return self._launch(self.kernel(template), array, griddim, blockdim, batches)

    def _launch(self, kernel, array, griddim, blockdim, batches):
        for args in batches:
            kernel[griddim, blockdim](array.handle, *args)
        cuda.synchronize()
        array.check()
        return {"passes": len(batches)}

    def __repr__(self):
        return f"{type(self).__name__}()"


class MemoryPath(DataPath):
    """The whole array in GPU memory (the upper bound)."""

    name = "memory"
    description = "all in GPU memory (upper bound)"
    reader = staticmethod(plain_read)

    def _open(self, store, dtype, shape, offset, owned):
        size = int(np.prod(shape, dtype=np.int64))
        host = _host_elements(store, dtype, size, offset)
        return _PlainArray(self, store, dtype, shape, offset, owned, cuda.to_device(host))


class ZeroCopyPath(DataPath):
    """The array in pinned, device-mapped host memory, read by kernels over PCIe."""

    name = "zero_copy"
    description = "zero-copy reads of pinned host memory (full-BAR analog)"
    reader = staticmethod(plain_read)

    def _open(self, store, dtype, shape, offset, owned):
        size = int(np.prod(shape, dtype=np.int64))
        mapped = cuda.mapped_array(size, dtype=dtype)
        host_view(mapped)[:] = _host_elements(store, dtype, size, offset)
        return _PlainArray(self, store, dtype, shape, offset, owned, mapped)


class GidsPath(DataPath):
    """``gids.read`` through a :class:`gids.Runtime` (one Runtime per opened array).

    Parameters
    ----------
    cache_bytes, cache_pages, page_size, daemon_threads, queues, queue_depth, timeout, \
    host_cache_bytes, host_tier_fill
        As for :class:`gids.Runtime` (``None``: its default).
    ssd, n_ssd : optional
        Time the daemon's completions by this SSD array in real time (``None``: complete as
        soon as the page is read); the daemon still reads the store, so a store that is not
        much faster than the modelled array sets the pace instead.
    zero_copy_serve : bool
        For a numpy source: serve misses by handing the GPU the page's address in pinned RAM
        (``True``) or by a daemon ``memcpy`` into staging (``False``).
    trace : callable, optional
        Called once per Runtime the path opens, for its ``trace=`` file (e.g.
        :class:`gids.cli.TraceRecorder`, which joins them); None (the default): no trace.
    """

    name = "gids"
    description = "gids: GPU page cache, misses served by host daemon threads"

    def __init__(self, cache_bytes=None, cache_pages=None, page_size=None, daemon_threads=None,
                 queues=None, queue_depth=None, timeout=None, zero_copy_serve=True, trace=None,
                 host_cache_bytes=None, host_tier_fill=None, ssd=None, n_ssd=None):
        self.options = dict(cache_bytes=cache_bytes, cache_pages=cache_pages,
                            page_size=page_size, daemon_threads=daemon_threads, queues=queues,
                            queue_depth=queue_depth, timeout=timeout,
                            host_cache_bytes=host_cache_bytes, host_tier_fill=host_tier_fill,
                            ssd=ssd, n_ssd=n_ssd)
        self.zero_copy_serve = bool(zero_copy_serve)
        self.trace = trace

    @property
    def reader(self):
        return gids.read

    @property
    def pager(self):
        # Page-level reads: a warp pins a page once and reads what it needs of it.
        return GIDS_PAGER

    def _open(self, store, dtype, shape, offset, owned):
        if owned and isinstance(store, MemoryStore) and not self.zero_copy_serve:
            store = MemoryStore(store.data, zero_copy=False)
        options = {k: v for k, v in self.options.items() if v is not None}
        if self.trace is not None:
            options["trace"] = self.trace()
        runtime = gids.Runtime(**options)
        try:
            return _GidsArray(self, store, dtype, shape, offset, owned, runtime)
        except BaseException:
            runtime.close()
            raise

    def _launch(self, kernel, array, griddim, blockdim, batches):
        for args in batches:
            kernel[griddim, blockdim](array.handle, *args)
        array.runtime.sync()
        return {"passes": len(batches)}


class NvmePath(GidsPath):
    """``gids.read`` through a :class:`gids.Runtime` on the direct NVMe path (``backend="nvme"``):
    kernels write NVMe read commands into submission rings and ring doorbells; an emulated NVMe
    controller (host threads) serves them into bounce buffers and posts completions.

    Parameters
    ----------
    cache_bytes, cache_pages, page_size, daemon_threads, queues, queue_depth, timeout
        As for :class:`gids.Runtime`; ``daemon_threads`` are the controller's threads.
    ssd, n_ssd : optional
        Time the commands by this SSD array (``None``: complete as soon as the data is read).
    """

    name = "nvme"
    description = "gids, direct NVMe path: kernels write NVMe commands, emulated controller serves"

    def __init__(self, cache_bytes=None, cache_pages=None, page_size=None, daemon_threads=None,
                 queues=None, queue_depth=None, timeout=None, ssd=None, n_ssd=None, trace=None):
        super().__init__(cache_bytes=cache_bytes, cache_pages=cache_pages, page_size=page_size,
                         daemon_threads=daemon_threads, queues=queues, queue_depth=queue_depth,
                         timeout=timeout, trace=trace, ssd=ssd, n_ssd=n_ssd)
        self.options.update(backend="nvme")


class CpuBatchPath(DataPath):
    """The CPU-initiated batch pattern (GPUDirect Storage style), gathered by host threads.

    Parameters
    ----------
    page_size : int
        Bytes the host reads per listed page (a power of two, a multiple of the element).
    batch_pages : int
        Pages each of the two batch buffers holds: all the distinct pages one launch reads must
        fit (the launch fails with a :class:`ConfigError` naming the numbers otherwise).
    gather_threads : int, optional
        Host threads of the parallel gather (``numba.set_num_threads``); default all.
    """

    name = "cpu_batch"
    description = "CPU-initiated batch: kernel lists pages, host gathers + copies, kernel reruns"
    reader = staticmethod(batch_read)
    multi_pass = True

    def __init__(self, page_size=4096, batch_pages=None, gather_threads=None):
        self.page_size = int(page_size)
        if batch_pages is None:
            batch_pages = 64 if SIMULATOR else 1 << 17
        self.batch_pages = _positive_int("batch_pages", batch_pages)
        if gather_threads is not None:
            gather_threads = _positive_int("gather_threads", gather_threads)
            if gather_threads > numba.config.NUMBA_NUM_THREADS:
                raise ConfigError(f"gids: gather_threads must be at most "
                                  f"{numba.config.NUMBA_NUM_THREADS} (Numba's thread pool; set "
                                  f"NUMBA_NUM_THREADS to change it), got {gather_threads}")
        self.gather_threads = gather_threads

    def _open(self, store, dtype, shape, offset, owned):
        _check_page_size(self.page_size, dtype)
        return _BatchArray(self, store, dtype, shape, offset, owned)

    # -- one pass ------------------------------------------------------------------------------
    def _start_pass(self, kernel, arr, st, griddim, blockdim):
        st.ctr_host[:] = (st.used, 0, 0, 0)
        st.ctr.copy_to_device(st.ctr_host, stream=st.stream)
        kernel[griddim, blockdim, st.stream](st.handle, *st.args)
        st.ctr.copy_to_host(st.ctr_host, stream=st.stream)
        st.passes += 1

    def _fetch(self, arr, st, lo, hi):
        """Bring pages ``req[lo:hi]`` into slots ``lo..hi-1`` of the state's buffer (queued on
        its stream)."""
        st.req[lo:hi].copy_to_host(st.req_host[lo:hi], stream=st.stream)
        st.stream.synchronize()
        pages = st.req_host[lo:hi]
        epp = arr.epp
        if self.gather_threads is not None:
            numba.set_num_threads(self.gather_threads)
        t = time.perf_counter()
        status = gather_pages(arr.table, pages, arr.page_size,
                              st.staging.ctypes.data + lo * arr.page_size)
        arr._counts["gather_seconds"] += time.perf_counter() - t
        bad = np.flatnonzero(status != L.STATUS_OK)
        if bad.size:
            page = int(pages[bad[0]])
            raise StorageIOError(f"gids: cpu_batch could not read page {page} of "
                                 f"{arr.store.name} (status {int(status[bad[0]])})",
                                 path=getattr(arr.store, "path", None), page=page)
        st.buf[lo * epp:hi * epp].copy_to_device(st.staging[lo * epp:hi * epp], stream=st.stream)

    def _step(self, kernel, arr, st, griddim, blockdim):
        """After a pass: finish the batch (True), or fetch what it listed and run it again."""
        st.stream.synchronize()
        count, missed, bad, bad_index = (int(x) for x in st.ctr_host)
        if not missed:
            if st.used:
                _clear_slots[math.ceil(st.used / 256), 256, st.stream](st.page_slot, st.req,
                                                                       st.used)
            arr._counts["passes"] += st.passes
            st.used, st.passes = 0, 0
            if bad:
                raise IndexOutOfRangeError(f"gids: a kernel read index {bad_index} of an array "
                                           f"of {arr.size} elements ({self.name} path)")
            return True
        hi = min(count, st.handle.capacity)
        if hi == st.used:
            raise ConfigError(
                f"gids: one {self.name} launch reads more distinct pages than its buffer holds "
                f"({st.handle.capacity} pages of {arr.page_size} bytes): give more batch_pages "
                "or split the work into smaller launches")
        self._fetch(arr, st, st.used, hi)
        _assign_slots[math.ceil((hi - st.used) / 256), 256, st.stream](st.page_slot, st.req,
                                                                       st.used, hi)
        arr._counts["pages_fetched"] += hi - st.used
        st.used = hi
        self._start_pass(kernel, arr, st, griddim, blockdim)
        return False

    def _launch(self, kernel, arr, griddim, blockdim, batches):
        passes_before = arr._counts["passes"]
        pending = iter(batches)
        active = []
        try:
            for st in arr.states:
                args = next(pending, None)
                if args is None:
                    break
                st.args = args
                self._start_pass(kernel, arr, st, griddim, blockdim)
                active.append(st)
            # Round robin over the two buffers: while the host gathers for one, the GPU runs
            # the other's kernel and copy.
            while active:
                for st in list(active):
                    if self._step(kernel, arr, st, griddim, blockdim):
                        args = next(pending, None)
                        if args is None:
                            active.remove(st)
                        else:
                            st.args = args
                            self._start_pass(kernel, arr, st, griddim, blockdim)
        except BaseException:
            self._abandon(arr)
            raise
        return {"passes": arr._counts["passes"] - passes_before}

    def _abandon(self, arr):
        """After an error: empty both buffers so the array can be used again."""
        cuda.synchronize()
        for st in arr.states:
            st.page_slot.copy_to_device(np.full(st.page_slot.size, ABSENT, dtype=np.int64))
            st.used, st.passes, st.args = 0, 0, None


def _kvikio_reason():
    if SIMULATOR:
        return "the CUDA simulator has no GPU memory for KvikIO to read into"
    try:
        import kvikio  # noqa: F401
    except Exception as exc:   # ImportError, or a CUDA library that fails to load
        return f"import kvikio failed ({type(exc).__name__}: {exc})"
    return None


class KvikioBatchPath(CpuBatchPath):
    """The cpu_batch pattern with KvikIO reading each listed page straight into GPU memory.

    Needs a file store (``FileStore`` or a path). One ``CuFile.pread`` per page, all in flight
    at once on KvikIO's thread pool; cuFile (GPUDirect Storage) where the system has it, else
    KvikIO's POSIX mode (``pread`` into a bounce buffer, then a copy).
    """

    name = "cpu_batch_kvikio"
    description = "CPU-initiated batch read by KvikIO (cuFile / POSIX) into GPU memory"

    @classmethod
    def unavailable_reason(cls):
        return _kvikio_reason()

    def _open(self, store, dtype, shape, offset, owned):
        if not isinstance(store, FileStore):
            raise ConfigError("gids: the cpu_batch_kvikio path reads files: give a path or a "
                              f"FileStore, not a {type(store).__name__}")
        import kvikio
        arr = super()._open(store, dtype, shape, offset, owned)
        arr.cufile = kvikio.CuFile(store.path, "r")
        return arr

    def _fetch(self, arr, st, lo, hi):
        st.req[lo:hi].copy_to_host(st.req_host[lo:hi], stream=st.stream)
        st.stream.synchronize()
        epp, page_size = arr.epp, arr.page_size
        t = time.perf_counter()
        futures = []
        for k in range(lo, hi):
            page = int(st.req_host[k])
            n = min(page_size, arr.nbytes - page * page_size)
            futures.append((page, n, arr.cufile.pread(st.buf[k * epp:(k + 1) * epp], n,
                                                       arr.offset + page * page_size)))
        for page, n, fut in futures:
            got = fut.get()
            if got != n:
                raise StorageIOError(f"gids: KvikIO read {got} of {n} bytes of page {page} of "
                                     f"{arr.store.name}", path=arr.store.path, page=page)
        arr._counts["gather_seconds"] += time.perf_counter() - t


#: Every data path, by name (whether or not it can run here: see :func:`available_paths`).
PATHS = {cls.name: cls for cls in (MemoryPath, ZeroCopyPath, GidsPath, NvmePath, CpuBatchPath,
                                   KvikioBatchPath)}

#: The paths that run a :class:`gids.Runtime` (page cache options, Runtime statistics).
RUNTIME_PATHS = ("gids", "nvme")


def available_paths():
    """Names of the paths that can run in this process, in :data:`PATHS` order."""
    return [name for name, cls in PATHS.items() if cls.unavailable_reason() is None]


def check_path_name(name):
    """``name`` if it is a known path, else a :class:`ConfigError` listing the known ones."""
    if name not in PATHS:
        raise ConfigError(f"gids: unknown data path {name!r}; choose from "
                          f"{', '.join(PATHS)}")
    return name


def make_path(name, **options):
    """A :class:`DataPath` by name, given the options it takes (others are ignored).

    Parameters
    ----------
    name : str
        A key of :data:`PATHS`.
    **options
        Constructor arguments; each path takes the ones its class names (``page_size``,
        ``cache_bytes``, ``batch_pages``, ...), so one set of options can make every path.

    Raises
    ------
    ConfigError
        Unknown name, or a bad option value.
    """
    cls = PATHS[check_path_name(name)]
    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in options.items() if k in accepted})


#: Public names of the option checks (``check_page_size(page_size, dtype)``,
#: ``positive_int(name, value)``), for paths built on this module elsewhere.
check_page_size = _check_page_size
positive_int = _positive_int
