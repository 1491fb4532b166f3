"""Connected components on the GPU: one pass of concurrent union-find over the edges, then
pointer jumping. Same reader abstraction as the BFS (:mod:`.gpu_graph`).

Hooking (as ECL-CC, Jaiganesh and Burtscher, HPDC 2018): a warp takes a vertex ``v`` and its
lanes read ``v``'s neighbours; for each neighbour ``u < v`` a lane finds both roots and links the
larger root under the smaller with a compare-and-swap that succeeds only while the larger is still
a root; when it fails, another thread linked that root first, and the lane retries from where it
now points. Every successful CAS links a root to a smaller id, so the forest never has a cycle,
and once every edge has been seen its ends share a tree. The smallest vertex of a component is
never linked under anything (nothing smaller is in its component), so it is the root: after
pointer jumping, every label is the smallest vertex of its component, exactly what
:func:`~.bfs.connected_components_reference` returns.

The graph is stored symmetric, so the entry ``u`` in ``v``'s list with ``u < v`` covers the edge
``{u, v}``; the lists are sorted (``FLAG_SORTED``), so a warp stops reading ``v``'s list at its
first entry ``>= v``: about half of the neighbours array is read, once.
"""
from __future__ import annotations

import gids  # first: picks GPU or simulator before numba.cuda loads

# isort: split

import functools
import time
from dataclasses import dataclass

import numpy as np
from numba import cuda

from gids.device import WARP_SIZE, atomic_cas, ballot_sync, laneid

from .csr_file import FLAG_SORTED, CSRGraph
from .gpu_launch import FULL_MASK, Access, launch_geometry, report_bad_entry
from .validate import same_partition, scipy_components


@cuda.jit(device=True)
def _find(labels, x):
    """Root of ``x``'s tree (labels only ever point to smaller ids, so this ends)."""
    parent = labels[x]
    while parent != x:
        x = parent
        parent = labels[x]
    return x


@cuda.jit(device=True)
def _union(labels, a, b):
    """Put ``a`` and ``b`` in one tree: link the larger root under the smaller, lock-free."""
    ra = _find(labels, a)
    rb = _find(labels, b)
    while ra != rb:
        if ra < rb:
            ra, rb = rb, ra
        seen = atomic_cas(labels, ra, ra, rb)
        if seen == ra:
            return
        # ra was linked by another thread meanwhile: go on from its new root (a smaller id).
        ra = _find(labels, seen)
        rb = _find(labels, rb)


@functools.lru_cache(maxsize=None)
def make_cc_kernels(read_neighbour):
    """The hooking kernel specialised for one data path's reader.

    Parameters
    ----------
    read_neighbour : numba.cuda device function
        ``read_neighbour(arg, k)``: entry ``k`` of the neighbours array (see :mod:`.gpu_graph`).

    Returns
    -------
    numba.cuda kernel
        ``hook[grid](arg, offsets, labels, sorted_lists, bad)``: ``labels`` must start as
        ``arange(n)``; afterwards each vertex's root is the smallest vertex of its component.
    """

    @gids.jit
    def hook(arg, offsets, labels, sorted_lists, bad):
        lane = laneid()
        warp = cuda.grid(1) // WARP_SIZE
        n_warps = cuda.gridsize(1) // WARP_SIZE
        n = labels.size
        for v in range(warp, n, n_warps):
            start = offsets[v]
            end = offsets[v + 1]
            for base in range(start, end, WARP_SIZE):
                k = base + lane
                valid = k < end
                # Lanes past the end re-read the last entry, so the whole warp reads together.
                u = np.int64(read_neighbour(arg, k if valid else end - 1))
                past_v = False
                if valid:
                    if u < 0 or u >= n:
                        report_bad_entry(bad, k, u)
                    elif u < v:
                        _union(labels, v, u)
                    else:
                        past_v = True
                # Sorted: the rest of the list is >= v, covered from the other end. The
                # ballot keeps the whole warp in the loop together.
                if sorted_lists and ballot_sync(FULL_MASK, past_v) != 0:
                    break

    return hook


@gids.jit
def _compress(labels):
    """Pointer jumping: every label becomes its root (runs alone, after hooking)."""
    for v in range(cuda.grid(1), labels.size, cuda.gridsize(1)):
        labels[v] = _find(labels, v)


@gids.jit
def _identity(labels):
    for v in range(cuda.grid(1), labels.size, cuda.gridsize(1)):
        labels[v] = v


@dataclass
class CCResult:
    """Connected components of a graph.

    Attributes
    ----------
    labels : numpy.ndarray
        int64 per vertex: the smallest vertex id of its component.
    n_components : int
    seconds : float
        From the first launch to the end of pointer jumping (not the copy of labels to the host).
    input_edges : int
        Input edge tuples of the graph (Graph500's M, or the stored edges' count when unknown).
    data_path : str
    stats : dict or None
        The data path's counters (gids: lookups, hits, I/Os ...).
    """

    labels: np.ndarray
    n_components: int
    seconds: float
    input_edges: int
    data_path: str
    stats: dict | None = None

    @property
    def edges_per_second(self) -> float:
        return self.input_edges / self.seconds if self.seconds > 0 else 0.0


def _input_edges(graph: CSRGraph) -> int:
    if graph.header is not None:
        return int(graph.header.n_input_edges)
    loops = int(graph.self_loops()[1].sum())
    return (graph.n_edges + loops) // 2


def connected_components(device_graph) -> CCResult:
    """Connected components on the GPU (hook once over the edges, then pointer jumping).

    Parameters
    ----------
    device_graph : DeviceGraph
        From :func:`~.gpu_graph.open_device_graph`.

    Returns
    -------
    CCResult

    Raises
    ------
    GraphFormatError
        A neighbour id out of range (a corrupt neighbours section).
    gids.GidsError
        An error of the gids data path.
    """
    dg = device_graph
    graph, source = dg.graph, dg.source
    n = graph.n_vertices
    hook = make_cc_kernels(source.reader)
    # Files always have sorted lists; an in-memory CSRGraph may not.
    sorted_lists = graph.header is not None and bool(graph.header.flags & FLAG_SORTED)
    labels = dg.scratch("cc", 1, n)[0]
    if dg.first_use(("cc", source.reader)):
        # Compile outside the timed region: launches over no vertices, same argument types.
        none = cuda.device_array(0, dtype=np.int64)
        _identity[1, 1](none)
        hook[1, WARP_SIZE](source.arg, dg.offsets, none, sorted_lists, dg.bad)
        _compress[1, 1](none)
        cuda.synchronize()
    dg.reset_bad()
    source.begin_search(cold=dg.cold_cache)

    start = time.perf_counter()
    _identity[launch_geometry(n // WARP_SIZE)](labels)
    source.before_launch(Access("all"))
    hook[launch_geometry(n)](source.arg, dg.offsets, labels, sorted_lists, dg.bad)
    dg.check()
    _compress[launch_geometry(n // WARP_SIZE)](labels)
    cuda.synchronize()
    seconds = time.perf_counter() - start

    stats = source.end_search()
    labels_h = labels.copy_to_host()
    n_components = int(np.count_nonzero(labels_h == np.arange(n)))
    return CCResult(labels=labels_h, n_components=n_components, seconds=seconds,
                    input_edges=_input_edges(graph), data_path=source.label, stats=stats)


class ComponentsMismatchError(AssertionError):
    """GPU components differ from scipy's (raised by :func:`validate_cc_result`)."""


def validate_cc_result(graph: CSRGraph, result: CCResult) -> None:
    """Compare with ``scipy.sparse.csgraph.connected_components`` (loads the graph in memory).

    Checks the partition and the labelling convention (each label is the smallest vertex of its
    component).

    Raises
    ------
    ComponentsMismatchError
    """
    n_expected, expected = scipy_components(graph)
    if result.n_components != n_expected or not same_partition(result.labels, expected):
        raise ComponentsMismatchError(
            f"{result.n_components} components, scipy finds {n_expected}, or the partitions "
            "differ")
    # The smallest vertex of each scipy component is that component's label.
    smallest = np.full(n_expected, graph.n_vertices, dtype=np.int64)
    np.minimum.at(smallest, expected, np.arange(graph.n_vertices))
    differ = np.flatnonzero(result.labels != smallest[expected])
    if differ.size:
        v = int(differ[0])
        raise ComponentsMismatchError(
            f"vertex {v} has label {int(result.labels[v])}, not the smallest vertex of its "
            f"component, {int(smallest[expected[v]])}")
