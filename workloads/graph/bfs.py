"""CPU reference algorithms in numpy: level-synchronous BFS, connected components, BFS roots.

These are correctness baselines for the GPU kernels and the host side of tests; they read the
graph through :class:`~workloads.graph.csr_file.CSRGraph` (neighbours usually memory-mapped) and
keep their working set bounded by ``chunk_edges`` plus a few arrays of ``n_vertices``.
"""

from __future__ import annotations

import numpy as np

from .csr_file import CSRGraph, Progress, row_ranges
from .edges import DEFAULT_CHUNK_EDGES

#: Parent / level of a vertex the search did not reach (Graph500's convention for parents).
UNREACHED = -1


def _gather_neighbours(graph: CSRGraph, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All entries of ``vertices`` as ``(src, dst)`` int64 arrays (a segmented gather)."""
    starts = graph.offsets[vertices]
    lengths = graph.offsets[vertices + 1] - starts
    total = int(lengths.sum())
    # Entry i of the output reads neighbours[starts[row] + (i - first entry of row)].
    first_entry = np.cumsum(lengths) - lengths
    index = np.repeat(starts - first_entry, lengths) + np.arange(total, dtype=np.int64)
    return np.repeat(vertices, lengths), np.asarray(graph.neighbours[index], dtype=np.int64)


def _frontier_batches(graph: CSRGraph, frontier: np.ndarray, chunk_edges: int):
    """Split a frontier into consecutive pieces of about ``chunk_edges`` entries each."""
    lengths = graph.offsets[frontier + 1] - graph.offsets[frontier]
    cuts = row_ranges(np.concatenate(([0], np.cumsum(lengths))), chunk_edges)
    for first, stop in zip(cuts[:-1], cuts[1:]):
        yield frontier[first:stop]


def bfs_reference(graph: CSRGraph, root: int, *, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                  progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Level-synchronous, top-down BFS in numpy.

    Parameters
    ----------
    graph : CSRGraph
    root : int
        Search key.
    chunk_edges : int
        Most entries gathered at once; a large frontier is expanded in pieces.
    progress : callable, optional
        ``progress(visited, n_vertices)`` after each level.

    Returns
    -------
    parents : numpy.ndarray
        int64; ``parents[root] == root``, ``-1`` where unreached (Graph500's convention).
    levels : numpy.ndarray
        int64; hops from ``root``, ``-1`` where unreached.

    Notes
    -----
    Each level gathers the frontier's lists, keeps the neighbours not yet visited and, for each,
    the first entry that found it (``np.unique(..., return_index=True)``): the result is
    deterministic, and it is one of the many valid BFS trees, so compare trees by validation and
    levels exactly. Self loops and duplicate edges are harmless: a loop leads back to a visited
    vertex, and a duplicate is one more candidate for a vertex that is claimed once.
    """
    n = graph.n_vertices
    if not 0 <= root < n:
        raise ValueError(f"root {root} is not a vertex (0..{n - 1})")
    parents = np.full(n, UNREACHED, dtype=np.int64)
    levels = np.full(n, UNREACHED, dtype=np.int64)
    parents[root], levels[root] = root, 0
    frontier = np.array([root], dtype=np.int64)
    depth = 0
    visited = 1
    while frontier.size:
        depth += 1
        found = []
        for batch in _frontier_batches(graph, frontier, chunk_edges):
            src, dst = _gather_neighbours(graph, batch)
            fresh = levels[dst] == UNREACHED
            heads, first = np.unique(dst[fresh], return_index=True)
            parents[heads] = src[fresh][first]
            # Mark now, so a later batch of the same level does not claim these vertices again.
            levels[heads] = depth
            found.append(heads)
        frontier = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        visited += frontier.size
        if progress is not None:
            progress(visited, n)
    return parents, levels


def connected_components_reference(graph: CSRGraph, *, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                                   progress: Progress | None = None) -> np.ndarray:
    """Connected components by min-label hooking and pointer jumping (Shiloach-Vishkin style).

    Parameters
    ----------
    graph : CSRGraph
    chunk_edges : int
        Entries processed per step.
    progress : callable, optional
        ``progress(sweep, sweep + 1)`` after each sweep over the edges (the number of sweeps is not
        known in advance; it is small, about log of the diameter).

    Returns
    -------
    numpy.ndarray
        int64 label per vertex: the smallest vertex id in its component.

    Notes
    -----
    Each sweep hooks, for every edge whose ends carry different labels, the larger label onto the
    smaller (``np.minimum.at``); then pointer jumping flattens every chain to its root. Labels only
    decrease and only ever point within a component, so when a sweep finds every edge's ends
    equal, each component holds one label, its smallest vertex. This is the shape a GPU kernel takes
    too (hook, then compress), which makes it a like-for-like baseline.
    """
    labels = np.arange(graph.n_vertices, dtype=np.int64)
    sweep = 0
    while True:
        changed = False
        for src, dst in graph.iter_edges(chunk_edges):
            low, high = labels[src], labels[dst]
            differ = low != high
            if differ.any():
                changed = True
                np.minimum.at(labels, np.maximum(low[differ], high[differ]),
                              np.minimum(low[differ], high[differ]))
        while True:
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped
        sweep += 1
        if progress is not None:
            progress(sweep, sweep + (1 if changed else 0))
        if not changed:
            return labels


def sample_bfs_roots(graph: CSRGraph, n_roots: int = 64, *, seed: int = 0) -> np.ndarray:
    """Graph500 search keys: distinct vertices with at least one edge that is not a self loop.

    Parameters
    ----------
    graph : CSRGraph
    n_roots : int
        Graph500 uses 64. Fewer come back if fewer vertices qualify.
    seed : int
        Same seed, same roots.

    Returns
    -------
    numpy.ndarray
        int64 vertex ids, in sampled order.
    """
    degrees = graph.degrees()
    loop_vertices, loop_counts = graph.self_loops()
    degrees[loop_vertices] -= loop_counts
    candidates = np.flatnonzero(degrees > 0)
    rng = np.random.default_rng(seed)
    return rng.choice(candidates, size=min(n_roots, candidates.size), replace=False).astype(np.int64)
