"""Level-synchronous breadth-first search on the GPU, one traversal for every data path.

Each level is one kernel launch. Top-down: a warp takes a frontier vertex ``v``, its lanes read
``v``'s neighbours (``read_neighbour(arg, offsets[v] + k)``, ``WARP_SIZE`` consecutive entries at
a time, so a warp's reads fall on one or two pages and gids coalesces them into one lookup) and
claim every unvisited neighbour with a compare-and-swap on ``parents``; winners set the level and
append the vertex to the next frontier (an atomic counter in device memory). Bottom-up (used by
``direction="auto"`` when the frontier is large, Beamer's direction optimisation): a warp takes an
unvisited vertex and scans its list until some lane finds a neighbour in the frontier.

The warp loops are warp-uniform (every lane runs the same iterations; lanes past the end of a
list re-read the list's last entry and ignore it), so they are correct with 32-lane warps on a
GPU, with the simulator's warps of one, and with its emulated 32-lane warps, where every lane of
a warp must reach each ``gids.read`` together.

Kernels are made per reader by :func:`make_bfs_kernels`; :func:`bfs` runs a search on a
:class:`~.gpu_graph.DeviceGraph` (``DeviceGraph.bfs``); :func:`~.gpu_graph.run_bfs` opens a graph
file, searches and closes.
"""
from __future__ import annotations

import gids  # first: picks GPU or simulator before numba.cuda loads

# isort: split

import functools
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numba import cuda

from gids.device import (
    WARP_SIZE,
    atomic_add,
    atomic_cas,
    ballot_sync,
    laneid,
    lanemask_lt,
    lowest_lane,
    popc,
    register_copy,
    shfl_sync,
)
from workloads.pager import Pager, element_pager

from .bfs import UNREACHED
from .csr_file import CSRGraph
from .gpu_launch import (
    FULL_MASK,
    LANE_BITS,
    THREADS_PER_BLOCK,
    Access,
    launch_geometry,
    report_bad_entry,
)
from .validate import scipy_bfs, traversed_edges, validate_bfs_tree

#: ``counters`` layout (int64[4], device memory): vertices found this level, the sum of their
#: degrees (the next frontier's edges, for the direction heuristic), the frontier's long
#: lists set aside for the whole grid (:data:`LONG_LIST`), and the runs of the frontier that
#: warps have taken so far (``top_down`` hands them out in order, see :func:`bfs`).
FOUND, FOUND_EDGES, N_LONG, RUNS_TAKEN = 0, 1, 2, 3
N_COUNTERS = 4

#: Beamer et al.'s thresholds (the GAP benchmark's defaults): go bottom-up when the frontier's
#: edges exceed ``1/ALPHA`` of the unexplored edges; back top-down when the frontier holds fewer
#: than ``1/BETA`` of the vertices and is shrinking.
ALPHA = 15
BETA = 18

DIRECTIONS = ("top-down", "auto")

#: A top-down level that finds at least this many vertices hands the next level its frontier in
#: vertex order (:func:`_collect_frontier`, one pass over the levels), not in the order they
#: were found (random: every warp appends as it claims). Neighbour lists are stored in vertex
#: order, so warps running at the same time then read lists on the same few pages: through a
#: cache of a quarter of the graph, a Kronecker scale-22 search read each page of a large level
#: about 14 times in discovery order (1.8 M I/Os for 131 k pages). Small
#: frontiers keep the found order, as a pass over every vertex would cost more than they do.
ORDERED_FRONTIER = 1 << 12

#: Top-down levels walk their frontier first to last and last to first in turn. Both big levels
#: of a Kronecker search read nearly every page of the neighbours; through a cache smaller than
#: the graph, a level that walks the same way as the one before finds cached only what it meets
#: last (the clock evicted what the last level read first), one that walks back meets the last
#: level's final pages, still cached, first.
SCAN_BOTH_WAYS = True

#: Top-down, a warp scanning a list longer than this many entries (one 4 KiB page of int64)
#: first touches the next ``WARP_SIZE`` pages of it, one per lane: through gids those misses are
#: served together, where the scan alone would wait for one page at a time (a hub's list of
#: thousands of pages, read by one warp, would set the level's time).
PREFETCH_ENTRIES = 512
PREFETCH_WINDOW = WARP_SIZE * PREFETCH_ENTRIES

#: Top-down, a list longer than this many entries is not scanned by the warp that meets it: it is
#: set aside, and after the level's launch every warp of the grid scans a slice of it
#: (:data:`LONG_SLICE` entries at a time). A Kronecker graph's hubs hold lists of 10^5 entries
#: and more, and one warp scanning one of them alone set the time of its level. Only true hubs:
#: at 8192, where every warp looked at every set-aside list for its slices, a scale-22 search
#: took 67 ms instead of 18; slices are found by bisection.
LONG_LIST = 1 << 16
LONG_SLICE = 1024

#: Where every page of the neighbours is in the gids cache as a search starts (a warm cache
#: that holds the whole array: :attr:`~.gpu_graph.NeighbourSource.all_resident`), the top-down
#: step pins with ``gids.pin_page_if_resident`` and has no call in it; a list that meets a page
#: not resident after all (evicted by another array of the Runtime, say) is set aside for the
#: long lists' launch, which loads it. Why: ``gids.pin_page``'s miss path is a call, and a call
#: makes ptxas keep every value live across it in the few registers a call preserves or spill it
#: at each definition and reload it at each use, taken or not. With the call, at 64 registers,
#: the warm top-down kernel had a 672-byte stack frame and spilled on every list; without it, it
#: needs 56 registers and spills nothing (docs/design-notes.md, "BFS over the cache").
#: The setting ``bfs_resident_first`` (``GIDS_BFS_RESIDENT_FIRST=0``, read at import) keeps
#: the miss path in, to measure the difference.
RESIDENT_FIRST = gids.defaults.get("bfs_resident_first")

#: Registers per SM (every GPU since compute capability 5.0): with THREADS_PER_BLOCK, how many
#: warps an SM runs at once at a register cap (128 -> 2 blocks of 256, 16 warps; 80 -> 3, 24).
REGISTERS_PER_SM = 65536


@cuda.jit(device=True)
def _append_warp(queue, counters, mine, value):
    """Lanes with ``mine`` append their ``value`` to ``queue`` (its length in
    ``counters[FOUND]``) at consecutive slots, in lane order: one atomic per warp, not per
    lane (collective over the full warp)."""
    found = ballot_sync(FULL_MASK, mine) & LANE_BITS
    if found != 0:
        first = lowest_lane(found)
        slot = np.int64(0)
        if laneid() == first:
            slot = atomic_add(counters, FOUND, popc(found))
        slot = shfl_sync(FULL_MASK, slot, first)
        if mine:
            queue[slot + popc(found & lanemask_lt())] = value


class BFSKernels(NamedTuple):
    """The reader-specific kernels of a BFS (see :func:`make_bfs_kernels`)."""

    top_down: object
    long_lists: object
    bottom_up: object


@functools.lru_cache(maxsize=None)
def make_bfs_kernels(source, max_registers=None, resident=False) -> BFSKernels:
    """BFS kernels specialised for one data path's reader (or pager).

    Parameters
    ----------
    source : numba.cuda device function or Pager
        ``read_neighbour(arg, k)``: entry ``k`` of the neighbours array (see
        :mod:`.gpu_graph`), or a :class:`~workloads.pager.Pager` that reads it a
        page at a time (the gids paths: one cache lookup per page and warp). A plain reader
        gets :func:`~workloads.pager.element_pager`. Each distinct reader gets its
        own compiled kernels (cached here).
    max_registers : int, optional
        Register cap of the kernels (default: ``gids.jit``'s); the source's ``max_registers``
        (see ``gpu_graph.WHOLE_CACHE_REGISTERS``).
    resident : bool
        For a pager whose pages are all expected in the cache (the source's
        :attr:`~.gpu_graph.NeighbourSource.all_resident`): ``top_down`` pins with
        ``pin_if_resident`` and has no call in it, and a list that meets a page not resident
        is set aside in ``long_lists`` with the hubs' lists, for ``long_lists`` (which pins
        with ``pin``: loads) to scan whole after the launch. See :data:`RESIDENT_FIRST`.

    Returns
    -------
    BFSKernels
        ``top_down[grid](arg, offsets, frontier, n_frontier, next_frontier, counters, parents,
        levels, depth, count_edges, bad, long_lists, run, backwards, touch)`` expands
        ``frontier[:n_frontier]`` (vertices at level ``depth``) in runs of ``run`` vertices a
        warp, last run first if ``backwards``, touching the pages ahead of its reads only if
        ``touch`` (:attr:`~workloads.graph.gpu_graph.NeighbourSource.touch_ahead`), summing
        the new frontier's degrees only if ``count_edges`` and setting lists longer than
        :data:`LONG_LIST` aside in ``long_lists``; ``long_lists[grid](arg, offsets,
        long_lists, first_slice, ...)`` scans those; ``bottom_up[grid](arg, offsets, counters,
        parents, levels, depth, bad)`` gives every unvisited vertex with a neighbour at level
        ``depth`` level ``depth + 1``.
    """
    pager = source if isinstance(source, Pager) else element_pager(source)
    jit = gids.jit(max_registers=max_registers) if max_registers else gids.jit
    read_neighbour, VALUE, UNPIN_AFTER, PAGE_ELEMS = (
        pager.read, pager.value, pager.unpin_after, pager.page_elems)
    resident = bool(resident) and isinstance(source, Pager)

    @cuda.jit(device=True)
    def claim(offsets, v, k, u, valid, next_frontier, counters, parents, levels, depth,
              count_edges, bad):
        """The lanes with ``valid`` claim neighbour ``u`` (entry ``k``) for ``v`` if it is
        unvisited, and the warp appends what it claimed to the next frontier (collective)."""
        claimed = False
        if valid:
            if u < 0 or u >= parents.size:
                report_bad_entry(bad, k, u)
            # The plain load filters the common case (already visited) without an atomic.
            elif (parents[u] == UNREACHED
                  and atomic_cas(parents, u, UNREACHED, v) == UNREACHED):
                levels[u] = depth + 1
                claimed = True
                if count_edges:
                    atomic_add(counters, FOUND_EDGES, offsets[u + 1] - offsets[u])
        _append_warp(next_frontier, counters, claimed, u)

    @cuda.jit(device=True)
    def scan_entries(arg, offsets, v, lo, hi, held, at, used, prefetch, next_frontier,
                     counters, parents, levels, depth, count_edges, bad):
        """:func:`scan` for a plain reader (:func:`~workloads.pager.element_pager`: no page
        is pinned, no call is made): one loop over the list's segments of ``WARP_SIZE``,
        cut at the element pager's pages as the scan has always cut them: past a cut, a long
        list's segments are aligned (for int64, 256 bytes: two 128-byte lines, where a segment
        at any offset spans three), which is what the zero-copy path's PCIe reads want."""
        lane = laneid()
        pe = PAGE_ELEMS(arg)
        base = lo
        while base < hi:
            seg_end = min(hi, base + WARP_SIZE, base - (base & (pe - 1)) + pe)
            k = base + lane
            # Lanes past the segment read its last entry: the whole warp reads together.
            u = np.int64(read_neighbour(arg, k if k < seg_end else seg_end - 1))
            claim(offsets, v, k, u, k < seg_end, next_frontier, counters, parents, levels,
                  depth, count_edges, bad)
            base = seg_end
        return held, at, used, False

    def make_scan_pages(resident):
        """:func:`scan` for a pager; ``resident``: pinning with ``pin_if_resident``, without
        touches ahead, and leaving the list at its first page not resident (see
        :func:`make_bfs_kernels`)."""
        pin = pager.pin_if_resident if resident else pager.pin

        @cuda.jit(device=True)
        def scan_pages(arg, offsets, v, lo, hi, held, at, used, prefetch, next_frontier, counters,
                       parents, levels, depth, count_edges, bad):
            """:func:`scan` for a pager (gids): the list a page at a time.

            Two loops: the outer one takes a page (the calls: a pin, a prefetch), the inner one
            scans the page's part of the list, ``WARP_SIZE`` entries at a time, with no call in it.
            A value live across a call must sit in one of the few registers that a call preserves,
            or be spilled to local memory, and ptxas reloads a spilled value at each use: with the
            calls in the one scanning loop, the loop's counters were spilled and reloaded at every
            segment, calls taken or not (at 64 registers, a fifth of the instructions that a
            scale-22 level executed). The inner loop runs on values made for it, which no call crosses.
            """
            lane = laneid()
            pe = PAGE_ELEMS(arg)
            long_list = not resident and prefetch and hi - lo > PREFETCH_ENTRIES
            touched = lo
            base = lo
            while base < hi:
                if long_list and base >= touched:
                    # A long list: each lane touches one page of the next window, so the warp's
                    # misses are in flight together instead of one page at a time. The held pin is
                    # given back first: a warp never waits on the cache while it holds a page.
                    if held >= 0:
                        UNPIN_AFTER(arg, held, at, used)
                        held = -1
                    used = np.int64(0)
                    p = base + lane * PREFETCH_ENTRIES
                    read_neighbour(arg, p if p < hi else hi - 1)
                    touched = base + PREFETCH_WINDOW
                page_first = base - (base & (pe - 1))
                if held < 0 or held - (held & (pe - 1)) != page_first:
                    if held >= 0:
                        UNPIN_AFTER(arg, held, at, used)
                    held = base
                    at = pin(arg, base)
                    used = np.int64(0)
                    if resident and at < 0:
                        return np.int64(-1), at, used, True     # not resident: set aside
                page_end = min(hi, page_first + pe)
                if long_list and touched < page_end:
                    page_end = touched
                # The page's part of the list: a count of entries (none if the pin failed, the
                # error recorded), the cache index of the first, a copy of ``v`` (copies, so that
                # ptxas does not merge them with values a call crosses: kernels.platform.
                # register_copy), and the page's own xor of its entries.
                n_here = page_end - base if at >= 0 else np.int64(0)
                cache_first = register_copy(at + (base - held))
                me = register_copy(v)
                seen = np.int64(0)
                j = np.int64(0)
                while j < n_here:
                    seg = min(n_here, j + WARP_SIZE)
                    # Lanes past the segment read its last entry: the whole warp reads together.
                    valid = j + lane < seg
                    u = np.int64(VALUE(arg, cache_first + (j + lane if valid else seg - 1)))
                    seen ^= u
                    claim(offsets, me, base + j + lane, u, valid, next_frontier, counters, parents,
                          levels, depth, count_edges, bad)
                    j = seg
                used ^= seen
                base = page_end
            return held, at, used, False

        return scan_pages

    #: ``scan(arg, offsets, v, lo, hi, held, at, used, prefetch, ...)``: the warp claims the
    #: unvisited neighbours among entries ``lo .. hi - 1`` of ``v``'s list and appends them to
    #: the next frontier. ``held``/``at``: the element whose page the warp holds pinned and
    #: where it is (``held`` -1: none; ``at`` < 0: its pin failed, the error recorded); the pin
    #: is kept for the next call while the list goes on on the same page. ``used``: the xor of
    #: every entry the lane read under that pin, which its unpin waits for
    #: (``Pager.unpin_after``: no fence, where ``unpin`` fences the claims' stores and atomics
    #: too). Returns the new ``(held, at, used, left)``, ``left`` True where a resident scan
    #: (``scan_top_down`` of ``resident`` kernels) stopped at a page not resident, holding no
    #: pin. Plain readers keep one loop: with the pager's two, the all-in-GPU-memory search ran
    #: 4 % slower, a baseline made worse for nothing.
    scan = make_scan_pages(False) if isinstance(source, Pager) else scan_entries
    scan_top_down = make_scan_pages(True) if resident else scan

    @jit
    def top_down(arg, offsets, frontier, n_frontier, next_frontier, counters, parents, levels,
                 depth, count_edges, bad, long_lists, run, backwards, touch):
        lane = laneid()
        n_runs = (n_frontier + run - 1) // run
        # A warp takes ``run`` (at most WARP_SIZE) consecutive frontier vertices at a time: in a
        # vertex-ordered frontier their lists are neighbours on storage, so the page the warp
        # holds pinned serves several lists (one lookup per page, not per list). Runs are
        # handed out by a counter, so the grid as a whole walks the frontier in order (first
        # to last, or last to first if ``backwards``), whatever order its blocks run in.
        while True:
            r = np.int64(0)
            if lane == 0:
                r = atomic_add(counters, RUNS_TAKEN, 1)
            r = shfl_sync(FULL_MASK, r, 0)
            if r >= n_runs:
                break
            if backwards:
                r = n_runs - 1 - r
            c0 = r * run
            c1 = min(c0 + run, n_frontier)
            # Each lane touches the first entry of one of the run's lists: the misses on their
            # first pages are in flight together, where the scan below has one page in flight.
            # A lane without such a list re-reads another lane's entry; none at all: no touch.
            g = c0 + lane
            first = np.int64(-1)
            if g < c1:
                w = frontier[g]
                if 0 < offsets[w + 1] - offsets[w] <= LONG_LIST:
                    first = offsets[w]
            have = ballot_sync(FULL_MASK, first >= 0) & LANE_BITS
            if not resident and touch and have != 0:
                donor = shfl_sync(FULL_MASK, first, lowest_lane(have))
                read_neighbour(arg, first if first >= 0 else donor)
            held = np.int64(-1)
            at = np.int64(-1)
            used = np.int64(0)
            for f in range(c0, c1):
                v = frontier[f]
                if offsets[v + 1] - offsets[v] > LONG_LIST:
                    if lane == 0:   # for the whole grid, after this launch
                        long_lists[atomic_add(counters, N_LONG, 1)] = v
                    continue
                held, at, used, left = scan_top_down(
                    arg, offsets, v, offsets[v], offsets[v + 1], held, at, used, touch,
                    next_frontier, counters, parents, levels, depth, count_edges, bad)
                if left and lane == 0:
                    # A page of the list was not resident: the list goes to the long lists'
                    # launch, which scans it whole (its claims so far stand; claiming again
                    # finds them taken).
                    long_lists[atomic_add(counters, N_LONG, 1)] = v
            if held >= 0:
                UNPIN_AFTER(arg, held, at, used)

    @jit
    def long_lists_step(arg, offsets, long_lists, first_slice, next_frontier, counters, parents,
                        levels, depth, count_edges, bad):
        """The lists ``top_down`` set aside, scanned by every warp, a slice at a time: slice
        ``s`` of them all is in list ``j`` with ``first_slice[j] <= s < first_slice[j + 1]``."""
        warp = cuda.grid(1) // WARP_SIZE
        n_warps = cuda.gridsize(1) // WARP_SIZE
        n_long = first_slice.size - 1
        held = np.int64(-1)
        at = np.int64(-1)
        used = np.int64(0)
        for s in range(warp, first_slice[n_long], n_warps):
            lo_j = 0                 # the list of slice s, by bisection
            hi_j = n_long - 1
            while lo_j < hi_j:
                mid = (lo_j + hi_j + 1) // 2
                if first_slice[mid] <= s:
                    lo_j = mid
                else:
                    hi_j = mid - 1
            v = long_lists[lo_j]
            end = offsets[v + 1]
            lo = offsets[v] + (s - first_slice[lo_j]) * LONG_SLICE
            held, at, used, _ = scan(arg, offsets, v, lo, min(lo + LONG_SLICE, end), held,
                                     at, used, False, next_frontier, counters, parents, levels,
                                     depth, count_edges, bad)
        if held >= 0:
            UNPIN_AFTER(arg, held, at, used)

    @jit
    def bottom_up(arg, offsets, counters, parents, levels, depth, bad):
        lane = laneid()
        warp = cuda.grid(1) // WARP_SIZE
        n_warps = cuda.gridsize(1) // WARP_SIZE
        n = parents.size
        for v in range(warp, n, n_warps):
            # Only this warp writes levels[v] in this launch: the test is the same for all lanes.
            if levels[v] != UNREACHED:
                continue
            start = offsets[v]
            end = offsets[v + 1]
            parent = np.int64(-1)
            for base in range(start, end, WARP_SIZE):
                k = base + lane
                valid = k < end
                u = np.int64(read_neighbour(arg, k if valid else end - 1))
                in_frontier = False
                if valid:
                    if u < 0 or u >= n:
                        report_bad_entry(bad, k, u)
                    else:
                        # Vertices found in this launch get depth + 1, never depth: no race.
                        in_frontier = levels[u] == depth
                hits = ballot_sync(FULL_MASK, in_frontier) & LANE_BITS
                if hits != 0:
                    parent = shfl_sync(FULL_MASK, u, lowest_lane(hits))
                    break
            if parent >= 0 and lane == 0:
                parents[v] = parent
                levels[v] = depth + 1
                atomic_add(counters, FOUND, 1)
                atomic_add(counters, FOUND_EDGES, end - start)

    return BFSKernels(top_down, long_lists_step, bottom_up)


@functools.lru_cache(maxsize=None)
def _resident_warps(max_registers=None) -> int:
    """Warps the GPU runs at once in a traversal kernel capped at ``max_registers`` (default
    ``gids.jit``'s cap; a few in the simulator)."""
    if gids.SIMULATOR:
        return 4
    cap = max_registers or gids.MAX_REGISTERS or 255
    blocks = max(1, REGISTERS_PER_SM // (cap * THREADS_PER_BLOCK))
    return (blocks * (THREADS_PER_BLOCK // WARP_SIZE)
            * cuda.get_current_device().MULTIPROCESSOR_COUNT)


def frontier_run(n_frontier: int, max_registers=None) -> int:
    """Consecutive frontier vertices one warp takes at a time in a top-down step: up to
    ``WARP_SIZE`` (lists that share pages share one pin), but no more than keeps every warp the
    GPU runs at once busy (at the kernels' register cap): a small frontier gets a warp per
    vertex."""
    return int(max(1, min(WARP_SIZE, n_frontier // _resident_warps(max_registers))))


@gids.jit
def _start_search(parents, levels, frontier, root):
    """Every vertex unvisited except the root (its own parent, level 0), the first frontier."""
    for v in range(cuda.grid(1), parents.size, cuda.gridsize(1)):
        parents[v] = root if v == root else UNREACHED
        levels[v] = 0 if v == root else UNREACHED
    if cuda.grid(1) == 0:
        frontier[0] = root


@gids.jit
def _collect_frontier(levels, depth, frontier, counters):
    """The vertices at level ``depth`` as a queue, in vertex order (see :data:`ORDERED_FRONTIER`).

    A warp takes 32 consecutive vertices and its finds take consecutive slots (one atomic per
    warp), so the queue is sorted within each warp's finds and, as warps run in about the order
    of their vertices, nearly sorted overall.
    """
    lane = laneid()
    n = levels.size
    for base in range(cuda.grid(1) - lane, n, cuda.gridsize(1)):   # warp-uniform
        v = base + lane
        _append_warp(frontier, counters, v < n and levels[v] == depth, v)


def _warm_up(dg, kernels: BFSKernels, counters) -> None:
    """Compile every BFS kernel for this graph's argument types with launches that do nothing.

    Numba compiles a kernel at its first launch (seconds for one that inlines ``gids.read``), so
    the first search would otherwise time the compiler. Empty vertex arrays (the kernels loop over
    their sizes) and an empty frontier give the same types as a search and no work.
    """
    none = cuda.device_array(0, dtype=np.int64)
    one = dg.scratch("bfs-warm-up", 1, 1)[0]
    _start_search[1, 1](none, none, one, 0)
    _collect_frontier[1, 1](none, 0, one, counters)
    counters.copy_to_device(np.zeros(N_COUNTERS, dtype=np.int64))
    kernels.top_down[1, WARP_SIZE](dg.source.arg, dg.offsets, one, 0, one, counters, none, none,
                                   0, False, dg.bad, one, 1, False, True)
    kernels.long_lists[1, WARP_SIZE](dg.source.arg, dg.offsets, one, one, one, counters, none,
                                     none, 0, False, dg.bad)
    kernels.bottom_up[1, WARP_SIZE](dg.source.arg, dg.offsets, counters, none, none, 0, dg.bad)
    cuda.synchronize()


@dataclass
class BFSResult:
    """One search.

    Attributes
    ----------
    root : int
    parents, levels : numpy.ndarray
        int64, Graph500's convention: ``parents[root] == root``, -1 where unreached.
    seconds : float
        From the first launch to the end of the last level (kernels, the per-level count read
        back and error checks); not the copy of parents and levels to the host, nor setup.
    traversed_edges : int
        Graph500's m: input edges in the component searched (:func:`~.validate.traversed_edges`).
    depth : int
        Highest level reached.
    steps : str
        One letter per level: ``T`` top-down, ``B`` bottom-up.
    data_path : str
        The source's label.
    stats : dict or None
        The data path's counters for this search (gids: lookups, hits, I/Os, evictions ...).
    level_seconds : list of float
        Time of each level (its launches, the count read back and the error check), in
        ``steps`` order: where a slow search spends its time (one level of a few hubs, or
        every level alike).
    level_vertices : list of int
        Each level's frontier, the vertices it expanded (top-down) or that were at the level
        before it (bottom-up).
    """

    root: int
    parents: np.ndarray
    levels: np.ndarray
    seconds: float
    traversed_edges: int
    depth: int
    steps: str
    data_path: str
    stats: dict | None = field(default=None)
    level_seconds: list = field(default_factory=list)
    level_vertices: list = field(default_factory=list)

    @property
    def teps(self) -> float:
        """Traversed edges per second (0 for a search that traversed none)."""
        return self.traversed_edges / self.seconds if self.traversed_edges else 0.0


def bfs(device_graph, root: int, *, direction: str = "top-down",
        alpha: float = ALPHA, beta: float = BETA) -> BFSResult:
    """Breadth-first search from ``root`` on the GPU.

    Parameters
    ----------
    device_graph : DeviceGraph
        From :func:`~.gpu_graph.open_device_graph`.
    root : int
    direction : {"top-down", "auto"}
        ``"top-down"`` expands the frontier every level (what BaM runs). ``"auto"`` switches to
        bottom-up steps while the frontier is large (Beamer's heuristic with ``alpha``, ``beta``),
        which reads fewer neighbours in the middle levels of a small-world graph.
    alpha, beta : float
        Thresholds of the heuristic (see :data:`ALPHA`, :data:`BETA`).

    Returns
    -------
    BFSResult

    Raises
    ------
    ValueError
        ``root`` is not a vertex, or an unknown ``direction``.
    GraphFormatError
        A neighbour id out of range (a corrupt neighbours section).
    gids.GidsError
        An error of the gids data path (I/O error, timeout).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    dg = device_graph
    graph, source = dg.graph, dg.source
    n = graph.n_vertices
    root = int(root)
    if not 0 <= root < n:
        raise ValueError(f"root {root} is not a vertex (0..{n - 1})")
    source.begin_search(cold=dg.cold_cache)
    variant = (source.pager or source.reader, source.max_registers,
               RESIDENT_FIRST and source.all_resident)
    kernels = make_bfs_kernels(*variant)
    # Kept on the DeviceGraph between searches: four arrays of n, allocated once, not per root.
    parents, levels, frontier, next_frontier, long_lists = dg.scratch("bfs", 5, n)
    counters = dg.scratch("bfs-counters", 1, N_COUNTERS)[0]
    zeros = np.zeros(N_COUNTERS, dtype=np.int64)
    host_offsets = graph.offsets
    if dg.first_use(("bfs",) + variant):
        _warm_up(dg, kernels, counters)
    dg.reset_bad()

    start = time.perf_counter()
    _start_search[launch_geometry(n // WARP_SIZE)](parents, levels, frontier, root)
    n_frontier = 1
    frontier_edges = int(host_offsets[root + 1] - host_offsets[root])
    unexplored_edges = graph.n_edges - frontier_edges
    depth = 0
    steps = []
    bottom_up = False
    growing = True
    queue_ready = True      # frontier[:n_frontier] is the current level (not after bottom-up)
    level_seconds, level_vertices = [], []
    backwards = False
    while n_frontier > 0:
        level_start = time.perf_counter()
        if direction == "auto":
            if not bottom_up and frontier_edges > unexplored_edges / alpha:
                bottom_up = True
            elif bottom_up and n_frontier < n / beta and not growing:
                bottom_up = False
        counters.copy_to_device(zeros)
        counts = None       # the counters on the host, once read after this level's launches
        if bottom_up:
            source.before_launch(Access("unvisited", levels=levels))
            kernels.bottom_up[launch_geometry(n)](source.arg, dg.offsets, counters, parents,
                                                  levels, depth, dg.bad)
        else:
            if not queue_ready:
                _collect_frontier[launch_geometry(n // WARP_SIZE, whole=True)](
                    levels, depth, frontier, counters)
                counters.copy_to_device(zeros)
            source.before_launch(Access("frontier", vertices=frontier, count=n_frontier))
            run = frontier_run(n_frontier, source.max_registers)
            kernels.top_down[launch_geometry(-(-n_frontier // run))](
                source.arg, dg.offsets, frontier, n_frontier, next_frontier, counters, parents,
                levels, depth, direction == "auto", dg.bad, long_lists, run, backwards,
                source.touch_ahead)
            # The next top-down level walks its frontier the other way (see SCAN_BOTH_WAYS).
            backwards = SCAN_BOTH_WAYS and not backwards
            counts = counters.copy_to_host()
            n_long = int(counts[N_LONG])
            if n_long:
                # The hubs' lists, set aside by top_down (with, for resident kernels, the lists
                # that met a page not resident): every warp scans slices of them.
                hubs = long_lists[:n_long].copy_to_host()
                slices = (host_offsets[hubs + 1] - host_offsets[hubs] + LONG_SLICE - 1) // LONG_SLICE
                first_slice = cuda.to_device(np.concatenate([[0], np.cumsum(slices)]).astype(np.int64))
                kernels.long_lists[launch_geometry(int(slices.sum()))](
                    source.arg, dg.offsets, long_lists, first_slice, next_frontier, counters,
                    parents, levels, depth, direction == "auto", dg.bad)
                counts = None    # the long lists' finds are counted too
        dg.check()
        if counts is None:
            counts = counters.copy_to_host()
        found, frontier_edges = int(counts[FOUND]), int(counts[FOUND_EDGES])
        steps.append("B" if bottom_up else "T")
        level_seconds.append(time.perf_counter() - level_start)
        level_vertices.append(n_frontier)
        if not bottom_up:
            frontier, next_frontier = next_frontier, frontier
        # After a bottom-up step there is no queue; after a large top-down level the queue is
        # rebuilt in vertex order (ORDERED_FRONTIER). Either way the next top-down level
        # collects it from the levels.
        queue_ready = not bottom_up and found < ORDERED_FRONTIER
        unexplored_edges -= frontier_edges
        growing = found > n_frontier
        n_frontier = found
        depth += 1
    seconds = time.perf_counter() - start

    stats = source.end_search()
    parents_h = parents.copy_to_host()
    levels_h = levels.copy_to_host()
    return BFSResult(root=root, parents=parents_h, levels=levels_h, seconds=seconds,
                     traversed_edges=traversed_edges(graph, levels_h), depth=depth - 1,
                     steps="".join(steps), data_path=source.label, stats=stats,
                     level_seconds=level_seconds, level_vertices=level_vertices)


class ReferenceMismatchError(AssertionError):
    """A BFS's levels differ from scipy's (raised by :func:`validate_bfs_result`)."""


def validate_bfs_result(graph: CSRGraph, result: BFSResult, *, against_scipy: bool = False
                        ) -> None:
    """Check a search by Graph500's five rules and, optionally, against scipy's levels.

    Parameters
    ----------
    graph : CSRGraph
    result : BFSResult
    against_scipy : bool
        Also compare the levels with ``scipy.sparse.csgraph.breadth_first_order``'s (loads the
        graph into memory: for tests and modest graphs). The five rules already pin the levels
        to the true distances; this is an independent second opinion.

    Raises
    ------
    BFSValidationError
        A rule is broken (with ``.rule`` and ``.vertex``).
    ReferenceMismatchError
        The levels differ from scipy's.
    """
    validate_bfs_tree(graph, result.root, result.parents, result.levels)
    if against_scipy:
        _, expected = scipy_bfs(graph, result.root)
        differ = np.flatnonzero(expected != result.levels)
        if differ.size:
            v = int(differ[0])
            raise ReferenceMismatchError(
                f"BFS from {result.root}: vertex {v} at level {int(result.levels[v])}, scipy "
                f"says {int(expected[v])} ({differ.size} vertices differ)")
