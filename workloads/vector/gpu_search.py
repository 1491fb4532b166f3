"""GPU IVF search: posting-list vectors read through the gids page cache, or from GPU memory.

One search code serves every *data path*. The kernel is made by a factory that closes over a
small device function, the *reader*, ``read(h, i) -> float32``: element ``i`` (flat index in the
index's vectors section) of whatever the data path hands the kernel as its first argument ``h``.
Three are built in:

``"gids"``
    ``h`` is the :class:`~gids.StorageArray` handle of the vectors section, opened from the
    index file; the reader is :data:`GIDS_PAGER`, which reads a page at a time
    (``gids.pin_page``; see :class:`Pager`). Misses are served by the Runtime's host daemon.
``"nvme"``
    The same over a Runtime with ``backend="nvme"``: misses go as NVMe read commands to the
    emulated NVMe controller (the direct NVMe path).
``"memory"``
    ``h`` is a plain device array holding the whole vectors section (the "all in GPU memory"
    upper bound); ``read`` is ``h[i]`` (:func:`read_memory`).

Everything else (probing, distances, top-k, merging, padding) is the same code, so a
difference in results between data paths is a bug in a reader, and a difference in time is the
data path's cost.

Baselines. The kernel is also a *kernel template* in the sense of ``workloads/baselines.py``
(:func:`search_template`: ``template(read)`` returns the kernel, handle first), and it is
restartable: it only assigns its outputs, and no loop bound depends on a value read, so the
CPU-initiated batch path may run it several times per launch. Any name that is not registered
here (:data:`DATA_PATHS`, :func:`register_data_path`) is looked up in ``baselines.PATHS``
(``zero_copy``, ``cpu_batch`` ...) and runs through that path's own ``open`` and ``launch``
(:class:`VectorSource` is the contract).

What the search computes
------------------------
The same as :func:`workloads.vector.reference.ivf_search`, bit for bit:

probing
    The ``nprobe`` nearest centroids per query, ties to the lower list number. By default on the
    GPU, by the search kernel itself: the centroids (in GPU memory) are searched as one list
    whose ids are the list numbers, with ``k = nprobe`` and the in-memory reader, so probing
    obeys exactly the ranking rule below (``probe="host"`` calls
    :func:`~workloads.vector.reference.probe_lists` instead; both give the same lists). On the
    GPU because a real search would not send every batch of queries back to the CPU, and
    because the kernel is already exact.
distances
    Squared L2 ``sum((q - x)^2)`` or negative inner product ``-sum(q * x)``, in float64 from the
    float32 values, as the reference's :func:`~workloads.vector.reference.pair_distances`.
    Each term is exact or rounded once, as in numpy (``(q - x)`` and ``q * x`` of two float32 in
    float64; the square rounded by ``dmul_rn``, which the compiler may not fuse into an FMA), and
    the terms are added in numpy's pairwise-summation order (:func:`pairwise_plan`), then added
    to +0.0 as numpy's reduction adds them to its identity (a sum of -0.0 terms only, as an
    inner product can have, is +0.0), so every distance equals numpy's exactly, bit for bit,
    and ties and near-ties are ranked as the reference ranks them. (numpy's order is an
    implementation detail of numpy; ``tests/test_vector_gpu.py`` checks it against the numpy in
    use.) The price is float64 arithmetic: cheap on an H200
    (half the float32 rate), 1/64 of it on consumer GPUs, where a float32 variant would be
    needed.
ranking
    Ascending ``(distance, id)``; fewer than ``k`` candidates are padded with id ``-1`` and
    distance ``+inf``.

How the kernel works
--------------------
The unit of work is a probed list and the queries that probe it, not a query. The host sorts
the batch's (query, probe) pairs by list and cuts each list's run into *items* of at most
32 queries (:func:`work_items`); one block takes an item at a time (grid-stride), in list
order, so the items of one list run side by side and share its pages in the cache. A block
stages its item's queries in shared memory (float32 rows), then takes the list a tile of
vectors at a time (40 vectors of dim 128; :func:`_item_shape`): each warp stages pages of the
tile, a page per lookup (:class:`Pager`: the warp pins the page once and copies its part of
the tile, consecutive lanes on consecutive elements), and then each query's ``G`` threads
compute its distances to the tile's vectors (vectors ``g, g + G, ...``), each thread keeping
its own sorted top ``k`` in local memory across the list. At the end of the list each query's
``G`` lists are merged in ``k`` rounds into its partial top ``k`` for that probe, written to
``(n_queries, nprobe, k)`` arrays; a second kernel (:func:`_merge_kernel`, a thread per query)
merges a query's ``nprobe`` partial lists into its answer. Under a skewed query stream a hot
list is read once per 32 of its queries instead of once per query; each distance is still one
thread's, computed in numpy's order.

The terms are added in one of two ways, chosen when the kernel is compiled. When the
dimension is a multiple of 8 (most are), every leaf of numpy's summation plan is whole groups
of 8 terms (:func:`_group_ends`), so a thread adds its terms 8 at a time into numpy's 8
interleaved accumulators kept as scalars, in registers, and looks at the plan once per group,
in a constant table: only where a leaf ends are the 8 summed and pushed onto the small stack of
partial sums. Other dimensions take the general path, a term at a time through a state machine
(leaf, position, accumulators, stack) in local memory, since arrays indexed by a variable live
there: exact too, but slow; with it for every dimension the search was compute-bound (H200,
all vectors in GPU memory, dim 128: ~370 GB/s of vectors read). The probing kernel is the same
kernel over the centroids: it takes the same path.

The ids of the stored vectors are kept in GPU memory (8 bytes per vector, 1/16 of a 128-dim
float32 vector): ranking by ``(distance, id)`` needs them in the kernel.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import gids  # first: picks GPU or simulator before numba.cuda loads

# isort: split
from numba import cuda, float32, float64, int64

from gids.device import WARP_SIZE
from workloads.pager import ELEMENT_PAGE, GIDS_PAGER, Pager, element_pager  # noqa: F401

from .reference import _as_queries, _check_k, probe_lists

__all__ = [
    "DataPath",
    "data_path_names",
    "search_template",
    "VectorSource",
    "GPUSearcher",
    "SearchResult",
    "DATA_PATHS",
    "MAX_K",
    "get_data_path",
    "pairwise_plan",
    "pairwise_sum",
    "read_memory",
    "register_data_path",
    "search",
    "work_items",
]

#: Largest ``k`` (and ``nprobe``) the kernel takes: each thread keeps ``k`` candidates in local
#: memory (16 bytes each).
MAX_K = 1024
# numpy's pairwise summation: blocks of at most 128 terms, added with 8 accumulators.
_PAIRWISE_BLOCK = 128
_UNROLL = 8
# Shared memory for one work item's staged rows (its queries and a tile of vectors, float32):
# with the merge's arrays the block stays under the 48 KiB of static shared memory.
_SHARED_ROWS_BYTES = 40 << 10
_MAX_ITEM_QUERIES = 32     # queries of one list that one block scans it for
_MAX_TILE = 64             # vectors staged at once
_PAD_ID = np.iinfo(np.int64).max   # sorts after every real id at distance +inf


# ------------------------------------------------------------------ summation order

def pairwise_plan(dim: int) -> tuple[np.ndarray, np.ndarray, int]:
    """numpy's pairwise-summation tree for ``dim`` terms, as leaves in order.

    ``np.add.reduce`` over a contiguous row of float64 sums blocks of at most 128 terms with 8
    interleaved accumulators and splits longer rows in two halves (the first a multiple of 8
    long), recursively. The kernel streams the terms in index order, so it needs the tree as a
    sequence: the leaves (blocks) left to right, and after each leaf how many pairwise
    additions of the two partial sums on top of a stack complete.

    Parameters
    ----------
    dim : int
        Terms per sum (the vector dimension), >= 1.

    Returns
    -------
    leaf_lengths : ndarray of int64
        Terms in each leaf block, in order; they sum to ``dim``.
    combines : ndarray of int64
        Additions of the stack's top two partial sums to do after each leaf.
    stack_depth : int
        Partial sums held at once at most.
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    lengths: list[int] = []
    combines: list[int] = []

    def split(n: int) -> None:
        if n <= _PAIRWISE_BLOCK:
            lengths.append(n)
            combines.append(0)
            return
        half = n // 2
        half -= half % _UNROLL
        split(half)
        split(n - half)
        combines[-1] += 1   # this node's addition, after its right subtree's last leaf

    split(int(dim))
    depth = held = 0
    for c in combines:
        held += 1
        depth = max(depth, held)
        held -= c
    return np.array(lengths, dtype=np.int64), np.array(combines, dtype=np.int64), depth


def pairwise_sum(terms) -> float:
    """Sum float64 ``terms`` in the kernel's order (the plan, streamed): a host model of it.

    Equal to ``np.add.reduce(terms)`` bit for bit where numpy sums pairwise as modelled by
    :func:`pairwise_plan`; the tests compare the two.
    """
    terms = np.asarray(terms, dtype=np.float64)
    lengths, combines, _ = pairwise_plan(len(terms))
    stack: list[float] = []
    at = 0
    for n, c in zip(lengths.tolist(), combines.tolist()):
        block = terms[at:at + n]
        at += n
        n8 = n - n % _UNROLL if n >= _UNROLL else 0
        if n8:
            acc = block[:_UNROLL].copy()
            for i in range(_UNROLL, n8, _UNROLL):
                acc += block[i:i + _UNROLL]
            res = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        else:
            res = np.float64(-0.0)
        for x in block[n8:]:
            res += x
        stack.append(res)
        for _ in range(c):
            right = stack.pop()
            stack[-1] = stack[-1] + right
    return float(0.0 + stack[0])   # numpy's reduction starts from +0.0: -0.0 comes out +0.0


# ------------------------------------------------------------------ device code

def _device(fn):
    """``@cuda.jit(device=True)`` on a GPU; the plain Python function in the simulator.

    There every call of a device function goes through a wrapper that swaps the module's
    ``cuda`` global in and out (about 15 us, a hundred times the arithmetic of these helpers).
    Only for functions that use nothing of ``cuda.*``.
    """
    return fn if gids.SIMULATOR else cuda.jit(device=True)(fn)


if gids.SIMULATOR:
    # Python floats are IEEE doubles and never fused; libdevice has only stubs here.
    def _mul_rn(a, b):
        return a * b
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _mul_rn(a, b):
        # Rounded product that NVVM may not contract with the following add into an FMA
        # (contraction is on by default): numpy rounds the square before adding it.
        return libdevice.dmul_rn(a, b)


@_device
def read_memory(h, i):
    """Reader of the ``"memory"`` data path: element ``i`` of a device (or mapped) array ``h``."""
    return h[i]


@_device
def _before(d1, i1, d2, i2):
    """``(d1, i1) < (d2, i2)``: the ranking order."""
    return d1 < d2 or (d1 == d2 and i1 < i2)


@_device
def _insert(best_d, best_i, count, k, d, i):
    """Insert ``(d, i)`` into a thread's sorted top-k of ``count`` entries; returns the new count."""
    if count < k:
        pos = count
        count += 1
    elif _before(d, i, best_d[k - 1], best_i[k - 1]):
        pos = k - 1
    else:
        return count
    while pos > 0 and _before(d, i, best_d[pos - 1], best_i[pos - 1]):
        best_d[pos] = best_d[pos - 1]
        best_i[pos] = best_i[pos - 1]
        pos -= 1
    best_d[pos] = d
    best_i[pos] = i
    return count


@_device
def _tree8(acc):
    """numpy's sum of its 8 accumulators (an array or a tuple of 8)."""
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))


@_device
def _push(stack, sp, leaf_sum, combines):
    """Push a leaf's sum onto the stack of partial sums (``sp`` held) and do the ``combines``
    pairwise additions that complete after that leaf; returns the new depth."""
    stack[sp] = leaf_sum
    sp += 1
    for _ in range(combines):
        sp -= 1
        stack[sp - 1] = stack[sp - 1] + stack[sp]
    return sp


def _group_ends(dim: int) -> np.ndarray:
    """The summation plan for the register path, by groups of 8 terms (``dim`` a multiple of 8).

    Then every leaf of :func:`pairwise_plan` is a multiple of 8 long (a split keeps its first
    half a multiple of 8, so the second is one too), so leaves start and end on group
    boundaries and have no remainder terms. Entry ``g``: the pairwise additions to do after
    group ``g`` (terms ``8g .. 8g+7``) where a leaf ends with it, else -1; a leaf starts at
    group 0 and after each group that ends one.
    """
    lengths, combines, _ = pairwise_plan(dim)
    if dim % _UNROLL or (lengths % _UNROLL).any():
        raise ValueError(f"dim {dim}: the plan's leaves are not whole groups of {_UNROLL}")
    ends = np.full(dim // _UNROLL, -1, dtype=np.int64)
    ends[np.cumsum(lengths) // _UNROLL - 1] = combines
    return ends


def _item_shape(dim: int, threads: int) -> tuple[int, int, int]:
    """``(Q, G, V)`` of the kernel for ``dim`` and ``threads``: queries per work item, threads
    per query (``Q * G == threads``) and vectors per tile.

    The item's queries and one tile of vectors are staged in shared memory as float32 rows of
    ``dim`` components (padded to an odd stride), within :data:`_SHARED_ROWS_BYTES`: up to 32
    queries and 64 vectors, fewer for long vectors (dim 128: 32 and 40; dim 960: 4 and 6).
    """
    stride = _stride(dim)
    rows = max(2, _SHARED_ROWS_BYTES // (4 * stride))
    q = min(_MAX_ITEM_QUERIES, int(threads), 1 << ((rows // 2).bit_length() - 1))
    v = max(1, min(_MAX_TILE, rows - q))
    if v >= 8:
        v -= v % 8
    return q, int(threads) // q, v


def _stride(dim: int) -> int:
    """Shared-memory row stride of a ``dim``-vector: odd, so that threads reading column ``d``
    of different rows hit different banks."""
    return int(dim) | 1


@lru_cache(maxsize=None)
def _search_kernel(source, dim: int, metric: str, k_cap: int, threads: int):
    """The search kernel for one reader (or :class:`Pager`), dimension, metric, top-k capacity
    and block size.

    Compile-time constants (the closure) size the shared and local arrays and fix the
    summation plan; ``k`` itself is a kernel argument up to ``k_cap``.
    """
    DIM = int(dim)
    IS_IP = metric == "ip"
    KCAP = int(k_cap)
    PAGER = source if isinstance(source, Pager) else element_pager(source)
    READ, PIN, VALUE, UNPIN, PAGE_ELEMS = (PAGER.read, PAGER.pin, PAGER.value, PAGER.unpin,
                                         PAGER.page_elems)
    T = int(threads)
    N_WARPS = max(1, T // WARP_SIZE)
    Q, G, V = _item_shape(DIM, T)
    STRIDE = _stride(DIM)
    Q_ROWS = Q * STRIDE
    X_ROWS = V * STRIDE
    LEAF_LEN, LEAF_COMBINES, DEPTH = pairwise_plan(DIM)
    UNROLL = _UNROLL
    ACC = _UNROLL + 1        # 8 accumulators and the leaf's sum (array sizes must be constants)
    # The register path (DIM a multiple of 8): 8 terms at a time into 8 accumulators held in
    # registers (a tuple), the plan looked up once per group.
    REGS = DIM % _UNROLL == 0
    GROUP_ENDS = _group_ends(DIM) if REGS else np.zeros(1, dtype=np.int64)
    ZERO8 = (0.0,) * _UNROLL
    WARP = WARP_SIZE
    PAD = np.int64(_PAD_ID)
    INF = math.inf

    @_device
    def term(qv, x):
        """One term of a distance from a query and a vector component (both float32), in
        float64, rounded as numpy rounds it."""
        if IS_IP:
            return _mul_rn(float64(qv), float64(x))
        diff = float64(qv) - float64(x)
        return _mul_rn(diff, diff)

    @_device
    def add8(acc, leaf_start, qs, qa, xs, xa):
        """The 8 accumulators after the terms of components ``qs[qa ..]`` and ``xs[xa ..]``.

        A leaf's first 8 terms are assigned, not added to 0.0, as numpy starts its accumulators:
        0.0 + -0.0 is +0.0, and an inner-product term can be -0.0.
        """
        # Views, so the 8 element indices are constants: numba adds a negative-index fix-up
        # to every variable index, which costs more than the term itself.
        qv = qs[qa:qa + UNROLL]
        xv = xs[xa:xa + UNROLL]
        t = (term(qv[0], xv[0]), term(qv[1], xv[1]), term(qv[2], xv[2]), term(qv[3], xv[3]),
             term(qv[4], xv[4]), term(qv[5], xv[5]), term(qv[6], xv[6]), term(qv[7], xv[7]))
        if leaf_start:
            return t
        return (acc[0] + t[0], acc[1] + t[1], acc[2] + t[2], acc[3] + t[3],
                acc[4] + t[4], acc[5] + t[5], acc[6] + t[6], acc[7] + t[7])

    @_device
    def feed(acc, stack, state, t):
        """The general path: add the next term ``t`` of a distance in numpy's pairwise order,
        one term at a time, in local memory (state: leaf, position in it, stack depth)."""
        leaf = state[0]
        p = state[1]
        n = LEAF_LEN[leaf]
        n8 = n - n % UNROLL if n >= UNROLL else 0
        if p < n8:
            if p < UNROLL:
                acc[p] = t
            else:
                acc[p % UNROLL] += t
        else:
            if p == n8:
                acc[UNROLL] = _tree8(acc) if n8 > 0 else -0.0
            acc[UNROLL] += t
        p += 1
        if p == n:
            if n8 == n:
                acc[UNROLL] = _tree8(acc)
            state[2] = _push(stack, state[2], acc[UNROLL], LEAF_COMBINES[leaf])
            state[0] = leaf + 1
            p = 0
        state[1] = p

    @_device
    def distance(qs, qa, xs, xa, acc, stack, state):
        """The distance of the query at ``qs[qa ..]`` and the vector at ``xs[xa ..]``, as numpy
        computes it (see the module notes)."""
        if REGS:
            acc8 = ZERO8     # a placeholder: a leaf's first group assigns
            leaf_start = True
            sp = 0
            for u in range(0, DIM, UNROLL):
                acc8 = add8(acc8, leaf_start, qs, qa + u, xs, xa + u)
                combines = GROUP_ENDS[u // UNROLL]
                leaf_start = combines >= 0   # a leaf ends with this group
                if leaf_start:
                    sp = _push(stack, sp, _tree8(acc8), combines)
        else:
            state[0] = 0
            state[1] = 0
            state[2] = 0
            for u in range(DIM):
                feed(acc, stack, state, term(qs[qa + u], xs[xa + u]))
        # numpy adds the pairwise sum to the reduction's identity, +0.0 (not folded away:
        # x + 0.0 is not x for x = -0.0).
        total = 0.0 + stack[0]
        return -total if IS_IP else total

    @gids.jit
    def kernel(h, queries, pair_q, pair_p, items, list_starts, list_lengths, id_starts, ids, k,
               part_d, part_i):
        qs = cuda.shared.array(Q_ROWS, float32)
        xs = cuda.shared.array(X_ROWS, float32)
        red_d = cuda.shared.array(T, float64)
        red_i = cuda.shared.array(T, int64)
        best_d = cuda.local.array(KCAP, float64)
        best_i = cuda.local.array(KCAP, int64)
        acc = cuda.local.array(ACC, float64)
        stack = cuda.local.array(DEPTH, float64)
        state = cuda.local.array(3, int64)
        tid = cuda.threadIdx.x
        lane = tid % WARP
        warp = tid // WARP
        qi = tid // G            # this thread's query in the item
        g = tid % G              # and its share of each tile: vectors g, g + G, ...
        pe = PAGE_ELEMS(h)
        for it in range(cuda.blockIdx.x, items.shape[0], cuda.gridDim.x):
            lst = items[it, 0]
            first = items[it, 1]
            m = items[it, 2]
            start = list_starts[lst]
            length = list_lengths[lst]
            id0 = id_starts[lst]
            cuda.syncthreads()   # the previous item is done with qs and red_*
            # The item's queries into shared memory, consecutive threads on consecutive
            # components (float32: the queries are float32 values, so this is exact).
            for e in range(tid, m * DIM, T):
                r = e // DIM
                d = e - r * DIM
                qs[r * STRIDE + d] = queries[pair_q[first + r], d]
            count = 0
            for j0 in range(0, length, V):
                nv = min(V, length - j0)
                # The tile is elements lo .. hi - 1, on pages p0, p0 + pe, ... (n_pages).
                lo = start + j0 * DIM
                hi = lo + nv * DIM
                p0 = lo - (lo & (pe - 1))
                n_pages = (hi - p0 + pe - 1) // pe
                # Touch every page of the tile first, one per thread: the misses are then in
                # flight together instead of met one page at a time by the staging below.
                # Threads past the tile's pages touch its last one (whole warps reach the
                # reader). For an in-memory reader it is a dead load.
                READ(h, max(lo, p0 + min(tid, n_pages - 1) * pe))
                cuda.syncthreads()   # the previous tile is consumed
                # Stage the tile a page per warp at a time: one pin per page (the whole warp
                # names the same element, so one lookup), then the warp copies the page's part
                # of the tile, consecutive lanes on consecutive elements.
                for pg in range(warp, n_pages, N_WARPS):     # warp-uniform
                    a = max(lo, p0 + pg * pe)
                    b = min(hi, p0 + (pg + 1) * pe)
                    at = PIN(h, a)
                    if at >= 0:
                        for e0 in range(a, b, WARP):
                            e = e0 + lane
                            mine = e < b
                            # Every lane reads (a reader may need whole warps); a lane past the
                            # page's part reads its first element.
                            x = VALUE(h, at + (e - a if mine else 0))
                            if mine:
                                off = e - lo
                                v = off // DIM
                                xs[v * STRIDE + off - v * DIM] = x
                    UNPIN(h, a, at)
                cuda.syncthreads()
                if qi < m:
                    for v in range(g, nv, G):
                        dist = distance(qs, qi * STRIDE, xs, v * STRIDE, acc, stack, state)
                        count = _insert(best_d, best_i, count, k, dist, ids[id0 + j0 + v])
            # Merge the G lists of each query: round r finds its r-th best. Each thread scans
            # its group's heads itself (broadcast reads of shared memory). Ids are unique
            # within a list, so the owner recognises its head by id and moves on.
            pos = 0
            base = qi * G
            for r in range(k):
                head_d = INF
                head_i = PAD
                if pos < count:
                    head_d = best_d[pos]
                    head_i = best_i[pos]
                red_d[tid] = head_d
                red_i[tid] = head_i
                cuda.syncthreads()
                win_d = red_d[base]
                win_i = red_i[base]
                for t in range(base + 1, base + G):
                    if _before(red_d[t], red_i[t], win_d, win_i):
                        win_d = red_d[t]
                        win_i = red_i[t]
                if g == 0 and qi < m:
                    q = pair_q[first + qi]
                    p = pair_p[first + qi]
                    part_d[q, p, r] = win_d
                    part_i[q, p, r] = win_i
                if pos < count and head_i == win_i:
                    pos += 1
                cuda.syncthreads()   # red_* are written again in the next round

    return kernel


@lru_cache(maxsize=None)
def _merge_kernel(p_cap: int):
    """The kernel that merges each query's ``nprobe`` partial top-k (one per probed list,
    each sorted) into its top-k; ``nprobe <= p_cap``. One thread per query."""
    PCAP = int(p_cap)
    PAD = np.int64(_PAD_ID)
    INF = math.inf

    @cuda.jit
    def merge(part_d, part_i, k, out_d, out_i):
        pos = cuda.local.array(PCAP, int64)
        n_lists = part_d.shape[1]
        for q in range(cuda.grid(1), part_d.shape[0], cuda.gridsize(1)):
            for p in range(n_lists):
                pos[p] = 0
            for r in range(k):
                win_d = INF
                win_i = PAD
                win_p = -1
                for p in range(n_lists):
                    j = pos[p]
                    if j < k and (win_p < 0 or _before(part_d[q, p, j], part_i[q, p, j], win_d, win_i)):
                        win_d = part_d[q, p, j]
                        win_i = part_i[q, p, j]
                        win_p = p
                out_d[q, r] = win_d
                out_i[q, r] = -1 if win_i == PAD else win_i
                if win_p >= 0:
                    pos[win_p] += 1

    return merge


def work_items(probes: np.ndarray, n_lists: int, per_item: int):
    """The search kernel's work for a batch: which list each block scans for which queries.

    Parameters
    ----------
    probes : ndarray of int64, shape (n_queries, nprobe)
        The lists each query probes (``probes[q, p]``: its ``p``-th nearest).
    n_lists : int
    per_item : int
        Most queries one item scans its list for.

    Returns
    -------
    pair_q, pair_p : ndarray of int64, shape (n_queries * nprobe,)
        Every (query, probe) pair, sorted by the list probed (then query): the queries of a
        list are consecutive.
    items : ndarray of int64, shape (n_items, 3)
        ``(list, first pair, pairs)``: each list that some query probes, split into runs of
        at most ``per_item`` of its pairs, in list order (so the items that read one list run
        side by side and share its pages in the cache).
    """
    n_queries, nprobe = probes.shape
    flat = np.ascontiguousarray(probes, dtype=np.int64).ravel()
    order = np.argsort(flat, kind="stable")
    pair_q = order // nprobe
    pair_p = order % nprobe
    counts = np.bincount(flat, minlength=n_lists)
    first = np.cumsum(counts) - counts
    listed = np.flatnonzero(counts)
    runs = -(-counts[listed] // per_item)
    item_list = np.repeat(listed, runs)
    run = np.arange(int(runs.sum())) - np.repeat(np.cumsum(runs) - runs, runs)
    items = np.stack([item_list, first[item_list] + run * per_item,
                      np.minimum(per_item, counts[item_list] - run * per_item)], axis=1)
    return pair_q.astype(np.int64), pair_p.astype(np.int64), np.ascontiguousarray(items, dtype=np.int64)


def _k_capacity(k: int) -> int:
    """Local top-k size compiled for ``k``: the next power of two >= 8, so few variants compile."""
    return max(8, 1 << (int(k) - 1).bit_length())


# ------------------------------------------------------------------ data paths

def search_template(dim: int, metric: str, k_cap: int, threads: int):
    """The search kernel as a kernel template: ``template(read)`` returns the kernel for ``read``.

    The form ``workloads/baselines.py`` specialises and launches kernels in; the same
    parameters give the same template object (baselines caches kernels by template).

    Parameters
    ----------
    dim : int
    metric : {"l2", "ip"}
    k_cap : int
        Largest ``k`` the kernel takes (the size of each thread's top-k).
    threads : int
        The block size the kernel must be launched with (a power of two).

    Notes
    -----
    The kernel's arguments are ``(h, queries, pair_q, pair_p, items, list_starts,
    list_lengths, id_starts, ids, k, part_d, part_i)``: the data path's handle; the queries,
    float32 ``(n_queries, dim)``; the work of :func:`work_items` (int64); the index's list table
    and ids (int64); ``k``; and the outputs, each query's partial top ``k`` per probe, float64
    and int64 ``(n_queries, nprobe, k)`` (merge them with :func:`_merge_kernel`). Launch
    ``[blocks, threads]``: a block per item, grid-stride.
    """
    return _template(int(dim), str(metric), int(k_cap), int(threads))


@lru_cache(maxsize=None)
def _template(dim, metric, k_cap, threads):
    def template(read):
        return _search_kernel(read, dim, metric, k_cap, threads)

    template.__name__ = template.__qualname__ = f"ivf_search_d{dim}_{metric}_k{k_cap}_t{threads}"
    return template


class VectorSource:
    """The vectors section of an index on one data path: what the search kernel reads.

    Made by :attr:`DataPath.open` outside any timed region. Per search the driver calls
    :meth:`begin`, then :meth:`launch` once, then :meth:`io`.

    Attributes
    ----------
    reader : device function or Pager
        ``read(h, i) -> float32``, element ``i`` of the vectors section (the layout of
        ``docs/formats.md``), or a :class:`Pager` that reads it a page at a time. The kernel
        calls either with whole warps (every lane, the same page for a pin, consecutive ``i`` on
        consecutive lanes for values); a reader may rely on that (``gids.read`` does).
    """

    reader = None

    def begin(self) -> None:
        """Start counting I/O for one search."""

    def launch(self, template, griddim: int, blockdim: int, args: tuple) -> None:
        """Run ``template(self.reader)`` with ``(handle, *args)``, wait for it, raise its errors."""
        raise NotImplementedError

    def prefetch(self, elements) -> None:
        """Start loading the pages of these elements of the section, without waiting (a hint:
        paths with no cache to load into do nothing)."""

    def io(self) -> Optional[dict]:
        """``{"ios", "hit_rate", "evictions"}`` since :meth:`begin`, or None for a path without I/O.

        ``ios``: pages read from storage; ``hit_rate``: cache hits / lookups (None where the path
        has no cache).
        """
        return None

    def close(self) -> None:
        """Free what ``open`` allocated."""


@dataclass(frozen=True)
class DataPath:
    """A way for the search kernel to read vector elements.

    Attributes
    ----------
    name : str
        What ``data_path=`` and ``gids search --data-path`` call it.
    open : callable
        ``open(index, runtime=None, **options) -> VectorSource``: makes the index's vectors
        available on this path (opens the file, copies to the device ...). Options a path does
        not know are ignored.
    description : str
        One line for the CLI's help.
    backend : str or None
        The :class:`gids.Runtime` backend the path reads through (``"host"``, ``"nvme"``), or
        None for a path without a Runtime. A caller that makes the Runtime itself (to size its
        cache, to emulate SSDs) makes it with this backend.
    """

    name: str
    open: Callable[..., VectorSource]
    description: str = ""
    backend: Optional[str] = None


_OPENED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Runtime -> {section: StorageArray}


class _GidsSource(VectorSource):
    """The vectors section through a Runtime of ``backend`` (the ``gids`` and ``nvme`` paths)."""

    reader = GIDS_PAGER

    def __init__(self, index, runtime=None, storage="file", backend="host", **_):
        if runtime is not None and runtime.backend != backend:
            # The result rows are named after the data path: a Runtime of the other backend
            # would measure one path under the other's name.
            raise ValueError(f"the {_BACKEND_PATHS[backend]} data path reads through a Runtime "
                             f"with backend={backend!r}, not {runtime.backend!r}")
        self._own = runtime is None
        if runtime is None:
            runtime = gids.Runtime(backend, page_size=min(index.page_size, 64 << 10))
        if index.page_size % runtime.page_size:
            warnings.warn(
                f"the runtime's page size {runtime.page_size} does not divide the index's "
                f"{index.page_size}: lists do not start on cache pages, so a list costs up to one "
                f"page more", stacklevel=3)
        self.runtime = runtime
        self._before = None
        self._side = None
        # One StorageArray per runtime and section: a Runtime holds at most 256 arrays, and
        # every search() on a shared runtime would otherwise open another.
        key = (str(Path(index.path).resolve()), index.vectors_offset, index.vectors_nbytes, storage)
        opened = _OPENED.setdefault(runtime, {})
        try:
            if key not in opened:
                opened[key] = runtime.open_array(index.path, np.float32,
                                                 shape=index.vectors_nbytes // 4,
                                                 offset=index.vectors_offset, storage=storage)
        except BaseException:
            self.close()
            raise
        self.array = opened[key]

    def begin(self):
        self._before = self.runtime.stats()

    def launch(self, template, griddim, blockdim, args):
        # The handle is taken now: opening arrays later can move the page tables.
        template(self.reader)[griddim, blockdim](self.array.handle, *args)
        self.runtime.sync()

    def prefetch(self, elements):
        # On a stream of its own, so that it overlaps the scan on the default stream.
        if self._side is None:
            self._side = gids.side_stream()
        self.runtime.prefetch(self.array, elements, stream=self._side)

    def io(self):
        delta = self.runtime.stats() - self._before
        return {"ios": delta.ios, "hit_rate": delta.hit_rate, "evictions": delta.evictions,
                "io_latency_us": delta.io_latency_us, "miss_latency_us": delta.miss_latency_us,
                "slot_retries": delta.slot_retries}

    def close(self):
        if self._own:
            self.runtime.close()


class _MemorySource(VectorSource):
    reader = staticmethod(read_memory)

    def __init__(self, index, runtime=None, **_):
        self.vectors = cuda.to_device(np.ascontiguousarray(index.vectors, dtype=np.float32))

    def launch(self, template, griddim, blockdim, args):
        template(self.reader)[griddim, blockdim](self.vectors, *args)
        cuda.synchronize()

    def close(self):
        self.vectors = None


class _BaselineSource(VectorSource):
    """A path of ``workloads.baselines`` over the index's vectors section (its open and launch)."""

    def __init__(self, name, index, runtime=None, storage="file", **options):
        from workloads import baselines

        options.setdefault("page_size", min(index.page_size, 64 << 10))
        self.path = baselines.make_path(name, **options)
        self.reader = self.path.reader
        # ``storage`` as for gids (a path that reads the file while it runs reads what gids reads).
        self.array = self.path.open(str(index.path), np.float32, shape=index.vectors_nbytes // 4,
                                    offset=index.vectors_offset, storage=storage)
        self._cost = {}

    def begin(self):
        self.array.reset_counters()
        self._cost = {}

    def launch(self, template, griddim, blockdim, args):
        self._cost = self.path.launch(template, self.array, griddim, blockdim, [tuple(args)]) or {}

    def io(self):
        counts = {**self._cost, **self.array.stats()}
        ios = counts.get("ios", counts.get("pages_fetched"))
        if ios is None:
            return None
        return {"ios": int(ios), "hit_rate": counts.get("hit_rate"),
                "evictions": int(counts.get("evictions", 0))}

    def close(self):
        self.array.close()


#: Data paths by name; extend with :func:`register_data_path`.
DATA_PATHS: dict[str, DataPath] = {}


def register_data_path(path: DataPath, *, replace: bool = False) -> DataPath:
    """Make ``path`` available as ``data_path=path.name`` (and to ``gids search``).

    Raises
    ------
    ValueError
        If the name is taken and ``replace`` is false.
    """
    if path.name in DATA_PATHS and not replace:
        raise ValueError(f"data path {path.name!r} is already registered")
    DATA_PATHS[path.name] = path
    return path


def _baseline_paths() -> dict:
    try:
        from workloads import baselines
    except ImportError:
        return {}
    return {name: cls for name, cls in baselines.PATHS.items() if name not in DATA_PATHS}


def data_path_names() -> list[str]:
    """Every name :func:`get_data_path` takes: the registered paths, then the baselines'."""
    return [*DATA_PATHS, *_baseline_paths()]


def get_data_path(name) -> DataPath:
    """The :class:`DataPath` called ``name``: registered here, else a ``workloads.baselines`` path.

    A DataPath is returned as is.

    Raises
    ------
    ValueError
        For an unknown name, or a baselines path that cannot run here (e.g. KvikIO missing).
    """
    if isinstance(name, DataPath):
        return name
    if name in DATA_PATHS:
        return DATA_PATHS[name]
    cls = _baseline_paths().get(name)
    if cls is None:
        raise ValueError(f"unknown data path {name!r}; known: {', '.join(data_path_names())}")
    reason = cls.unavailable_reason()
    if reason:
        raise ValueError(f"data path {name!r} cannot run here: {reason}")
    return DataPath(name, lambda index, runtime=None, **options: _BaselineSource(name, index, **options),
                    cls.description)


#: Data path name of each Runtime backend.
_BACKEND_PATHS = {"host": "gids", "nvme": "nvme"}

register_data_path(DataPath("gids", _GidsSource,
                            "vectors read from the index file through the gids page cache",
                            backend="host"))
register_data_path(DataPath("memory", _MemorySource, "all vectors in GPU memory (the upper bound)"))
# After "memory": the names' order is the CLI's and the tests' (gids, memory first).
register_data_path(DataPath("nvme", functools.partial(_GidsSource, backend="nvme"),
                            "the gids page cache over the direct NVMe path (emulated controller)",
                            backend="nvme"))


# ------------------------------------------------------------------ host driver

@dataclass
class SearchResult:
    """The answer of one batch search and what it cost.

    Attributes
    ----------
    ids : ndarray of int64, shape (n_queries, k)
        Ascending by (distance, id); padding -1.
    distances : ndarray of float64, shape (n_queries, k)
        Padding +inf. Equal to the reference's (see the module notes).
    seconds : float
        Wall time from sending the queries to having the results on the host, probing
        included, opening the data path excluded. On a GPU the first search with a new ``k``
        (or ``nprobe`` bucket) also compiles its kernels: call :meth:`GPUSearcher.warmup` first
        for a timing.
    probe_seconds : float
        The probing part of ``seconds``.
    ios : int
        Pages read from storage during the search (gids: the Runtime's I/O counter; a batch
        path: pages fetched; 0 for paths that read no pages).
    pages_per_query : float
        ``ios / n_queries``.
    list_pages_per_query : float
        Pages the probed lists occupy, per query: what a search would read with no cache.
    hit_rate : float or None
        Cache hits / lookups during the search; None for paths without a cache.
    evictions : int
    data_path : str
    nprobe, k : int
    miss_path : dict or None
        For the paths that read through a Runtime: where the misses' time went, as the kernels
        measured it (``io_latency_us``: mean submission-to-completion time of a request;
        ``miss_latency_us``: mean time of a miss's whole slow path, waits for other warps'
        loads included; ``slot_retries``: rounds a loader found no evictable slot). See
        :class:`gids.Stats`.
    simulator : bool
        True when the kernels ran in Numba's CUDA simulator: times are not GPU figures.
    """

    ids: np.ndarray
    distances: np.ndarray
    seconds: float
    probe_seconds: float
    ios: int
    pages_per_query: float
    list_pages_per_query: float
    hit_rate: Optional[float]
    evictions: int
    data_path: str
    nprobe: int
    k: int
    miss_path: Optional[dict] = None
    simulator: bool = field(default_factory=lambda: bool(gids.SIMULATOR))

    @property
    def n_queries(self) -> int:
        return len(self.ids)

    @property
    def qps(self) -> float:
        """Queries per second (of the simulator when ``simulator``)."""
        return self.n_queries / self.seconds if self.seconds > 0 else math.inf

    def summary(self) -> dict:
        """The figures without the result arrays (JSON-ready)."""
        out = {key: value for key, value in asdict(self).items() if key not in ("ids", "distances")}
        out.update(n_queries=self.n_queries, qps=self.qps)
        return out


class GPUSearcher:
    """An IVF index made ready for batch searches on the GPU over one data path.

    Puts the centroids, list table and ids in GPU memory and opens the data path (for
    ``"gids"``: the index file's vectors section in a Runtime; for ``"memory"``: a device copy
    of the vectors). Use as a context manager, or call :meth:`close`.

    Parameters
    ----------
    index : IVFIndex
        From :func:`~workloads.vector.ivf.open_ivf` or ``build_ivf``.
    data_path : str or DataPath
        ``"gids"`` (default), ``"nvme"``, ``"memory"``, any registered with
        :func:`register_data_path`, or a path of ``workloads.baselines`` (``"zero_copy"``,
        ``"cpu_batch"`` ...).
    runtime : gids.Runtime, optional
        For ``"gids"`` (``"nvme"``): the Runtime to read through, with ``backend="host"``
        (``"nvme"``; its page size should divide the index's). Default: a new one with the
        index's page size and the default cache size, closed with the searcher.
    threads : int, optional
        Threads per block: a power of two, a multiple of the warp size. Default 128 on a GPU,
        32 in the simulator.
    blocks : int, optional
        Most blocks per launch (grid-stride over the work items, one item being one list
        scanned for up to 32 of the queries that probe it). Default: one per item, at most
        65536 on a GPU and 4 in the simulator.
    **options
        Passed to the data path's ``open`` (e.g. ``storage="mmap"`` for ``"gids"``,
        ``batch_pages=`` for ``"cpu_batch"``); a path ignores options it does not take.
    """

    def __init__(self, index, data_path="gids", *, runtime=None, threads=None, blocks=None,
                 **options):
        self.index = index
        self.path = get_data_path(data_path)
        threads = (32 if gids.SIMULATOR else 128) if threads is None else int(threads)
        if threads < 1 or threads & (threads - 1) or threads % WARP_SIZE:
            raise ValueError(f"threads must be a power of two and a multiple of the warp size "
                             f"({WARP_SIZE}), got {threads}")
        self.threads = threads
        self.max_blocks = (4 if gids.SIMULATOR else 1 << 16) if blocks is None else max(1, int(blocks))
        self.source = None
        self.source = self.path.open(index, runtime=runtime, **options)
        try:
            n_lists = index.n_lists
            self._centroids = cuda.to_device(np.ascontiguousarray(index.centroids, dtype=np.float32).reshape(-1))
            # Probing scans the centroids as one list, for every query.
            self._one_list = cuda.to_device(np.zeros(1, dtype=np.int64))
            self._list_starts = cuda.to_device(np.asarray(index.list_starts, dtype=np.int64))
            self._list_lengths = cuda.to_device(np.asarray(index.list_lengths, dtype=np.int64))
            self._id_starts = cuda.to_device(np.asarray(index.id_starts, dtype=np.int64))
            self._ids = cuda.to_device(np.ascontiguousarray(index.ids, dtype=np.int64))
            # ... whose ids are the list numbers.
            self._one_list_start = cuda.to_device(np.zeros(1, dtype=np.int64))
            self._one_list_length = cuda.to_device(np.array([n_lists], dtype=np.int64))
            self._list_numbers = cuda.to_device(np.arange(n_lists, dtype=np.int64))
        except BaseException:
            self.close()
            raise

    # -- life cycle
    def close(self) -> None:
        """Close the data path (and the Runtime it made, if any). Idempotent."""
        if self.source is not None:
            source, self.source = self.source, None
            source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- kernels
    def _template(self, k):
        return search_template(self.index.dim, self.index.metric, _k_capacity(k), self.threads)

    def _blocks(self, n_items):
        return max(1, min(n_items, self.max_blocks))

    def _work(self, probes, n_lists):
        """The kernel's work for ``probes`` (host array, ``(n_queries, nprobe)``): the pairs
        (query, probe) sorted by list, and the items (list, first pair, pairs), on the device."""
        pair_q, pair_p, items = work_items(probes, n_lists, _item_shape(self.index.dim, self.threads)[0])
        return cuda.to_device(pair_q), cuda.to_device(pair_p), cuda.to_device(items)

    def _merge(self, part_d, part_i, k):
        n_queries, nprobe = part_d.shape[:2]
        out_d = cuda.device_array((n_queries, k), dtype=np.float64)
        out_i = cuda.device_array((n_queries, k), dtype=np.int64)
        threads = 32 if gids.SIMULATOR else 128
        blocks = max(1, min(-(-n_queries // threads), 4 if gids.SIMULATOR else 4096))
        _merge_kernel(_k_capacity(nprobe))[blocks, threads](part_d, part_i, np.int64(k), out_d, out_i)
        return out_d, out_i

    def _probe_gpu(self, d_queries, nprobe):
        """Probe on the GPU: the search kernel over the centroids as one list, ids = list numbers.

        ``d_queries``: float32 ``(n_queries, dim)`` on the device. Returns the probed lists,
        int64 ``(n_queries, nprobe)`` on the device."""
        n_queries = d_queries.shape[0]
        pair_q, pair_p, items = self._work(np.zeros((n_queries, 1), dtype=np.int64), 1)
        part_d = cuda.device_array((n_queries, 1, nprobe), dtype=np.float64)
        part_i = cuda.device_array((n_queries, 1, nprobe), dtype=np.int64)
        kernel = self._template(nprobe)(read_memory)
        kernel[self._blocks(items.shape[0]), self.threads](
            self._centroids, d_queries, pair_q, pair_p, items, self._one_list_start,
            self._one_list_length, self._one_list_start, self._list_numbers, np.int64(nprobe),
            part_d, part_i)
        return self._merge(part_d, part_i, nprobe)[1]

    def _scan(self, d_queries, probes, k):
        """The search proper, on the data path: each probed list scanned once for every
        32 queries that probe it, then each query's lists merged. ``probes`` is on the host.
        Returns the device outputs."""
        n_queries, nprobe = probes.shape
        pair_q, pair_p, items = self._work(probes, self.index.n_lists)
        part_d = cuda.device_array((n_queries, nprobe, k), dtype=np.float64)
        part_i = cuda.device_array((n_queries, nprobe, k), dtype=np.int64)
        self.source.launch(self._template(k), self._blocks(items.shape[0]), self.threads,
                           (d_queries, pair_q, pair_p, items, self._list_starts,
                            self._list_lengths, self._id_starts, self._ids, np.int64(k),
                            part_d, part_i))
        return self._merge(part_d, part_i, k)

    def warmup(self, k: int = 10, nprobe: int = 1) -> None:
        """Compile the kernels a search with this ``k`` and ``nprobe`` uses.

        Runs them on one query (the first centroid), so a cache may hold a few pages afterwards:
        ``runtime.invalidate()`` before a cold measurement.
        """
        self._check_open()
        query = cuda.to_device(np.ascontiguousarray(self.index.centroids[:1], dtype=np.float32))
        probes = self._probe_gpu(query, _check_nprobe(nprobe, self.index.n_lists))
        self._scan(query, probes.copy_to_host(), _check_k(k))

    def _check_open(self):
        if self.source is None:
            raise ValueError("this GPUSearcher is closed")

    # -- search
    def _list_elements(self, lists):
        """One element index per page of the vectors of ``lists`` (what a scan of them reads)."""
        index = self.index
        step = max(1, self.source_page_elems)
        parts = [np.arange(index.list_starts[l], index.list_starts[l] +
                           index.list_lengths[l] * index.dim, step) for l in np.unique(lists)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    @property
    def source_page_elems(self) -> int:
        runtime = getattr(self.source, "runtime", None)
        return (runtime.page_size if runtime is not None else self.index.page_size) // 4

    def search(self, queries, k: int, nprobe: int, *, probe: str = "gpu",
               query_batch: Optional[int] = None, prefetch: bool = True) -> SearchResult:
        """Search a batch of queries.

        Parameters
        ----------
        queries : array-like, shape (n_queries, dim) or (dim,)
            Rounded to float32 first, as the reference does.
        k : int
            Results per query, 1 to :data:`MAX_K`.
        nprobe : int
            Lists scanned per query, 1 to ``index.n_lists``.
        probe : {"gpu", "host"}
            Pick the lists with the search kernel over the centroids in GPU memory, or with
            :func:`~workloads.vector.reference.probe_lists` on the host. Same lists either way.
        query_batch : int, optional
            Scan the queries this many at a time (default: all in one launch).
        prefetch : bool
            With ``query_batch``: while a batch is scanned, load the pages of the next batch's
            probed lists (``Runtime.prefetch`` on a side stream; paths without a cache ignore
            it).

        Returns
        -------
        SearchResult

        Raises
        ------
        ValueError
            On a dimension mismatch between the queries and the index, a bad ``k``, ``nprobe``
            or ``probe``, or NaN/infinity in the queries; before any kernel runs.
        gids.GidsError
            If a read through gids failed (raised by ``Runtime.sync`` after the kernel).
        """
        self._check_open()
        index = self.index
        queries = _as_queries(queries, index.dim, "the index has")
        k = _check_k(k)
        if k > MAX_K:
            raise ValueError(f"k must be at most {MAX_K}, got {k}")
        nprobe = _check_nprobe(nprobe, index.n_lists)
        if probe not in ("gpu", "host"):
            raise ValueError(f"probe must be 'gpu' or 'host', got {probe!r}")
        n_queries = len(queries)
        if n_queries == 0:
            return SearchResult(np.zeros((0, k), np.int64), np.zeros((0, k)), 0.0, 0.0, 0, 0.0,
                                0.0, None, 0, self.path.name, nprobe, k)
        self.source.begin()

        start = time.perf_counter()
        d_queries = cuda.to_device(queries)    # float32, as the reference rounds them
        if probe == "gpu":
            probes = self._probe_gpu(d_queries, nprobe).copy_to_host()
        else:
            probes = probe_lists(queries, index.centroids, nprobe, index.metric)
        probed = time.perf_counter()
        if query_batch is not None and query_batch < 1:
            raise ValueError(f"query_batch must be >= 1, got {query_batch}")
        step = query_batch or n_queries
        starts = range(0, n_queries, step)
        if prefetch and len(starts) > 1:
            self.source.prefetch(self._list_elements(probes[:step]))
        parts = []
        for b in starts:
            if prefetch and b + step < n_queries:
                self.source.prefetch(self._list_elements(probes[b + step:b + 2 * step]))
            out_d, out_i = self._scan(d_queries[b:b + step], probes[b:b + step], k)
            parts.append((out_d.copy_to_host(), out_i.copy_to_host()))
        distances = np.concatenate([d for d, _ in parts])
        ids = np.concatenate([i for _, i in parts])
        seconds = time.perf_counter() - start

        io = self.source.io()
        ios = io["ios"] if io else 0
        return SearchResult(
            ids=ids,
            distances=distances,
            seconds=seconds,
            probe_seconds=probed - start,
            ios=ios,
            pages_per_query=ios / n_queries,
            list_pages_per_query=float(index.list_pages[probes].sum(axis=1).mean()),
            hit_rate=io["hit_rate"] if io else None,
            evictions=io["evictions"] if io else 0,
            data_path=self.path.name,
            nprobe=nprobe,
            k=k,
            miss_path=({key: io[key] for key in ("io_latency_us", "miss_latency_us", "slot_retries")}
                       if io and "io_latency_us" in io else None),
        )


def _check_nprobe(nprobe, n_lists: int) -> int:
    if int(nprobe) != nprobe or not 1 <= nprobe <= min(n_lists, MAX_K):
        raise ValueError(f"nprobe must be an integer from 1 to the number of lists "
                         f"({min(n_lists, MAX_K)}), got {nprobe!r}")
    return int(nprobe)


def search(index, queries, k: int, nprobe: int, runtime=None, data_path="gids", *,
           probe: str = "gpu", threads: Optional[int] = None, **options) -> SearchResult:
    """Search an IVF index on the GPU: the top ``k`` of each query among its ``nprobe`` lists.

    A one-shot :class:`GPUSearcher`: opens the data path, searches, closes. For repeated
    searches (and timings without setup), keep a :class:`GPUSearcher`.

    Parameters
    ----------
    index : IVFIndex
    queries : array-like, shape (n_queries, dim) or (dim,)
    k : int
    nprobe : int
    runtime : gids.Runtime, optional
        For ``data_path="gids"`` or ``"nvme"`` (default: a temporary one of that path's backend
        with the index's page size).
    data_path : {"gids", "nvme", "memory"} or a registered name
    probe : {"gpu", "host"}
    threads : int, optional
    **options
        For the data path (``storage=`` for gids).

    Returns
    -------
    SearchResult
        ``ids``, ``distances`` (as :func:`~workloads.vector.reference.ivf_search` gives them),
        ``seconds``, ``pages_per_query``, ``hit_rate`` and more.

    Raises
    ------
    ValueError
        On a dimension mismatch (or another bad argument), before anything is opened or run.
    """
    # Checked here too so a bad call opens nothing and launches nothing.
    _as_queries(queries, index.dim, "the index has")
    get_data_path(data_path)
    with GPUSearcher(index, data_path, runtime=runtime, threads=threads, **options) as searcher:
        return searcher.search(queries, k, nprobe, probe=probe)
