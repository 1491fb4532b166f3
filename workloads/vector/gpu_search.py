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
One block per query (grid-stride over queries). For each probed list, the block takes tiles
of ``threads`` vectors; it stages a tile's components a chunk of up to 32 components per vector
at a time into shared memory, a page per warp at a time: the warp pins the page once (one cache
lookup) and copies what the chunk needs of it, consecutive lanes on consecutive components
(:class:`Pager`; a 4 KiB page of dim-128 vectors is then 4 lookups per tile, where reading 32
elements per ``gids.read`` call took 32, and those lookups bounded the search on the H200).
Then each thread adds its vector's terms from shared memory. Each thread keeps its own sorted top ``k`` in
local memory, across all the query's lists; at the end the block merges them in ``k`` rounds,
each finding the least ``(distance, id)`` among the threads' heads in shared memory.

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
from numba import cuda, float32, float64, int64

from kernels.platform import WARP_SIZE
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
]

#: Largest ``k`` (and ``nprobe``) the kernel takes: each thread keeps ``k`` candidates in local
#: memory (16 bytes each).
MAX_K = 1024
# numpy's pairwise summation: blocks of at most 128 terms, added with 8 accumulators.
_PAIRWISE_BLOCK = 128
_UNROLL = 8
# Components of each tile vector staged in shared memory at once: 32 float32 a vector keeps a
# warp's reads within one 128-byte run, and a tile of 128 vectors at 16.5 KiB.
_CHUNK = 32
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
def _read_gids(h, i):
    """Reader of the ``"gids"`` data path: element ``i`` through the page cache."""
    return gids.read(h, i)


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
    READ, PIN, VALUE, UNPIN, PAGE_ELEMS = PAGER
    T = int(threads)
    N_WARPS = max(1, T // WARP_SIZE)
    DC = min(DIM, _CHUNK)
    STRIDE = DC + 1          # odd row stride: a thread per row reads distinct banks
    TILE = T * STRIDE
    LEAF_LEN, LEAF_COMBINES, DEPTH = pairwise_plan(DIM)
    UNROLL = _UNROLL
    ACC = _UNROLL + 1        # 8 accumulators and the leaf's sum (array sizes must be constants)
    # The register path (DIM a multiple of 8): 8 terms at a time into 8 accumulators held in
    # registers (a tuple), the plan looked up once per group. Chunks (DC, then a multiple of 8)
    # start at multiples of DC and the last one's length DIM - d0 is a multiple of 8 too, so a
    # group never straddles two chunks.
    REGS = DIM % _UNROLL == 0
    GROUP_ENDS = _group_ends(DIM) if REGS else np.zeros(1, dtype=np.int64)
    ZERO8 = (0.0,) * _UNROLL
    WARP = WARP_SIZE
    PAD = np.int64(_PAD_ID)
    INF = math.inf

    @_device
    def term(qv, x):
        """One term of a distance from a query and a vector component, rounded as numpy rounds it."""
        if IS_IP:
            return _mul_rn(qv, x)
        diff = qv - x
        return _mul_rn(diff, diff)

    @_device
    def add8(acc, leaf_start, queries, q, d, tile, at):
        """The 8 accumulators after the terms of components ``d .. d+7`` (tile elements ``at ..``).

        A leaf's first 8 terms are assigned, not added to 0.0, as numpy starts its accumulators:
        0.0 + -0.0 is +0.0, and an inner-product term can be -0.0.
        """
        # Views, so the 8 element indices are constants: numba adds a negative-index fix-up
        # to every variable index, which costs more than the term itself.
        qv = queries[q, d:d + UNROLL]
        xv = tile[at:at + UNROLL]
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

    @gids.jit
    def kernel(h, queries, probes, list_starts, list_lengths, id_starts, ids, k, out_d, out_i):
        tile = cuda.shared.array(TILE, float32)
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
        nprobe = probes.shape[1]
        pe = PAGE_ELEMS(h)
        for q in range(cuda.blockIdx.x, queries.shape[0], cuda.gridDim.x):
            count = 0
            for p in range(nprobe):
                lst = probes[q, p]
                start = list_starts[lst]
                length = list_lengths[lst]
                id0 = id_starts[lst]
                for j0 in range(0, length, T):
                    nv = min(T, length - j0)
                    base = start + j0 * DIM
                    # The tile is elements lo .. hi - 1, on pages p0, p0 + pe, ... (n_pages).
                    lo = base
                    hi = base + nv * DIM
                    p0 = lo - (lo & (pe - 1))
                    n_pages = (hi - p0 + pe - 1) // pe
                    # Touch every page of the tile first, one per thread: the misses are then
                    # in flight together instead of met one page at a time by the staging
                    # below. Threads past the tile's pages touch its last one (whole warps reach
                    # the reader). For an in-memory reader it is a dead load.
                    READ(h, max(lo, p0 + min(tid, n_pages - 1) * pe))
                    state[0] = 0
                    state[1] = 0
                    state[2] = 0
                    acc8 = ZERO8     # register path; a placeholder: a leaf's first group assigns
                    leaf_start = True
                    sp = 0
                    for d0 in range(0, DIM, DC):
                        dc = min(DC, DIM - d0)
                        cuda.syncthreads()   # the previous chunk is consumed
                        # Stage components d0 .. d0 + dc - 1 of the tile's vectors, a page per
                        # warp at a time: one pin per page (the whole warp names the same
                        # element, so one lookup), then the warp copies what it needs of the
                        # page, each vector's part of the chunk with consecutive lanes on
                        # consecutive components.
                        for pg in range(warp, n_pages, N_WARPS):     # warp-uniform
                            a = max(lo, p0 + pg * pe)
                            b = min(hi, p0 + (pg + 1) * pe)
                            at = PIN(h, a)
                            if at >= 0:
                                for v in range((a - base) // DIM, (b - 1 - base) // DIM + 1):
                                    e0 = base + v * DIM + d0
                                    for u0 in range(0, dc, WARP):
                                        u = u0 + lane
                                        e = e0 + u
                                        mine = u < dc and e >= a and e < b
                                        # Every lane reads (a reader may need whole warps);
                                        # a lane with nothing here reads the page's first.
                                        x = VALUE(h, at + (e - a if mine else 0))
                                        if mine:
                                            tile[v * STRIDE + u] = x
                            UNPIN(h, a, at)
                        cuda.syncthreads()
                        if tid < nv:
                            row = tid * STRIDE
                            if REGS:
                                for u in range(0, dc, UNROLL):
                                    acc8 = add8(acc8, leaf_start, queries, q, d0 + u, tile, row + u)
                                    combines = GROUP_ENDS[(d0 + u) // UNROLL]
                                    leaf_start = combines >= 0   # a leaf ends with this group
                                    if leaf_start:
                                        sp = _push(stack, sp, _tree8(acc8), combines)
                            else:
                                for u in range(dc):
                                    feed(acc, stack, state, term(queries[q, d0 + u], tile[row + u]))
                    if tid < nv:
                        # numpy adds the pairwise sum to the reduction's identity, +0.0
                        # (not folded away: x + 0.0 is not x for x = -0.0).
                        total = 0.0 + stack[0]
                        dist = -total if IS_IP else total
                        count = _insert(best_d, best_i, count, k, dist, ids[id0 + j0 + tid])
            # Merge the threads' lists: round r finds the block's r-th best. Every thread scans
            # all heads itself (broadcast reads of shared memory) rather than a tree reduction:
            # two barriers a round instead of log2(threads) + 2. Ids are unique within a query,
            # so the owner recognises its head by id and moves on.
            pos = 0
            for r in range(k):
                head_d = INF
                head_i = PAD
                if pos < count:
                    head_d = best_d[pos]
                    head_i = best_i[pos]
                red_d[tid] = head_d
                red_i[tid] = head_i
                cuda.syncthreads()
                win_d = red_d[0]
                win_i = red_i[0]
                for t in range(1, T):
                    if _before(red_d[t], red_i[t], win_d, win_i):
                        win_d = red_d[t]
                        win_i = red_i[t]
                if tid == 0:
                    out_d[q, r] = win_d
                    out_i[q, r] = -1 if win_i == PAD else win_i
                if pos < count and head_i == win_i:
                    pos += 1
                cuda.syncthreads()   # red_* are written again in the next round

    return kernel


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
    The kernel's arguments are ``(h, queries, probes, list_starts, list_lengths, id_starts,
    ids, k, out_d, out_i)``: the data path's handle; the queries as float64 ``(n_queries,
    dim)`` (float32 values widened); the probed lists, int64 ``(n_queries, nprobe)``; the
    index's list table and ids (int64); ``k``; and the outputs, float64 and int64
    ``(n_queries, k)``. Launch ``[blocks, threads]``: a block per query, grid-stride.
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
        Most blocks per launch (grid-stride over queries). Default: one per query, at most
        65536 on a GPU and 4 in the simulator.
    group_queries : bool, default True
        Scan the queries in the order of their probed lists (sorted by nearest list, then the
        next), not in the order given, so that blocks running at the same time read the same
        lists: through a cache smaller than the index, each list's pages are then read about
        once per batch instead of once per query that probes it. The results are the same, in
        the caller's order; the sort is timed with the search. Every data path does it.
    **options
        Passed to the data path's ``open`` (e.g. ``storage="mmap"`` for ``"gids"``,
        ``batch_pages=`` for ``"cpu_batch"``); a path ignores options it does not take.
    """

    def __init__(self, index, data_path="gids", *, runtime=None, threads=None, blocks=None,
                 group_queries=True, **options):
        self.index = index
        self.group_queries = bool(group_queries)
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
            self._list_starts = cuda.to_device(np.asarray(index.list_starts, dtype=np.int64))
            self._list_lengths = cuda.to_device(np.asarray(index.list_lengths, dtype=np.int64))
            self._id_starts = cuda.to_device(np.asarray(index.id_starts, dtype=np.int64))
            self._ids = cuda.to_device(np.ascontiguousarray(index.ids, dtype=np.int64))
            # Probing searches the centroids as one list whose ids are the list numbers.
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

    def _blocks(self, n_queries):
        return max(1, min(n_queries, self.max_blocks))

    def _probe_gpu(self, d_queries, nprobe):
        """Probe on the GPU: the search kernel over the centroids as one list, ids = list numbers."""
        n_queries = d_queries.shape[0]
        one_list = cuda.to_device(np.zeros((n_queries, 1), dtype=np.int64))
        out_d = cuda.device_array((n_queries, nprobe), dtype=np.float64)
        probes = cuda.device_array((n_queries, nprobe), dtype=np.int64)
        kernel = self._template(nprobe)(read_memory)
        kernel[self._blocks(n_queries), self.threads](
            self._centroids, d_queries, one_list, self._one_list_start, self._one_list_length,
            self._one_list_start, self._list_numbers, np.int64(nprobe), out_d, probes)
        return probes

    def _scan(self, d_queries, d_probes, k):
        """The search proper, on the data path; returns the device outputs."""
        n_queries = d_queries.shape[0]
        out_d = cuda.device_array((n_queries, k), dtype=np.float64)
        out_i = cuda.device_array((n_queries, k), dtype=np.int64)
        self.source.launch(self._template(k), self._blocks(n_queries), self.threads,
                           (d_queries, d_probes, self._list_starts, self._list_lengths,
                            self._id_starts, self._ids, np.int64(k), out_d, out_i))
        return out_d, out_i

    def warmup(self, k: int = 10, nprobe: int = 1) -> None:
        """Compile the kernels a search with this ``k`` and ``nprobe`` uses.

        Runs them on one query (the first centroid), so a cache may hold a few pages afterwards:
        ``runtime.invalidate()`` before a cold measurement.
        """
        self._check_open()
        query = cuda.to_device(np.asarray(self.index.centroids[:1], dtype=np.float64))
        probes = self._probe_gpu(query, _check_nprobe(nprobe, self.index.n_lists))
        self._scan(query, probes, _check_k(k))

    def _check_open(self):
        if self.source is None:
            raise ValueError("this GPUSearcher is closed")

    # -- search
    def search(self, queries, k: int, nprobe: int, *, probe: str = "gpu") -> SearchResult:
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
        d_queries = cuda.to_device(queries.astype(np.float64))   # exact: float32 -> float64
        if probe == "gpu":
            d_probes = self._probe_gpu(d_queries, nprobe)
        else:
            d_probes = cuda.to_device(probe_lists(queries, index.centroids, nprobe, index.metric))
        probes = d_probes.copy_to_host()
        order = None
        if self.group_queries and n_queries > 1:
            # Queries that probe the same lists run side by side (see ``group_queries``).
            order = np.lexsort(probes[:, ::-1].T)
            d_queries = cuda.to_device(queries.astype(np.float64)[order])
            d_probes = cuda.to_device(probes[order])
        probed = time.perf_counter()
        out_d, out_i = self._scan(d_queries, d_probes, k)
        distances = out_d.copy_to_host()
        ids = out_i.copy_to_host()
        if order is not None:
            distances[order] = distances.copy()
            ids[order] = ids.copy()
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
