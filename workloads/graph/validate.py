"""BFS validation (Graph500's five rules), scipy references, component comparison, TEPS.

Graph500 (specification v3.0, section "Validation") checks a BFS result with five rules:

1. the BFS tree is a tree and does not contain cycles;
2. each tree edge connects vertices whose BFS levels differ by exactly one;
3. every edge of the input has ends whose levels differ by at most one, or neither end is in the
   tree;
4. the BFS tree spans an entire connected component's vertices;
5. a vertex and its parent are joined by an edge of the original graph.

Every input edge is stored in both endpoints' lists, so a scan of the CSR entries sees each input
edge at least once from each end; the edge rules (3, 4, 5) are checked in one chunked scan.
The scipy references load the whole graph into memory: they are for tests and modest graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from . import parallel
from .bfs import UNREACHED
from .csr_file import CSRGraph, GraphFormatError, Progress
from .edges import DEFAULT_CHUNK_EDGES

RULES = {
    1: "the BFS tree is a tree rooted at the search key, without cycles",
    2: "each tree edge joins vertices whose levels differ by exactly one",
    3: "every edge's ends have levels differing by at most one, or neither end is reached",
    4: "the BFS tree spans the whole connected component of the search key",
    5: "each vertex and its parent are joined by an edge of the graph",
}


class BFSValidationError(Exception):
    """A BFS result broke a Graph500 rule.

    Attributes
    ----------
    rule : int
        1 to 5, numbered as in :data:`RULES` (the Graph500 specification's order).
    vertex : int or None
        A vertex where the rule fails, to start debugging from.
    """

    def __init__(self, rule: int, message: str, vertex: int | None = None):
        super().__init__(f"Graph500 BFS rule {rule} ({RULES[rule]}) broken: {message}")
        self.rule = rule
        self.vertex = vertex


def tree_depths(parents: np.ndarray, root: int) -> np.ndarray:
    """Depth of every vertex in a parent-pointer tree, by pointer jumping.

    Parameters
    ----------
    parents : numpy.ndarray
        ``parents[root] == root``; ``-1`` (or any negative value) for vertices not in the tree.
    root : int

    Returns
    -------
    numpy.ndarray
        int64 depths; ``-1`` for vertices not in the tree.

    Raises
    ------
    BFSValidationError
        Rule 1: the root is not its own parent, a parent is out of range or not in the tree, or
        following parents from some vertex never reaches the root (a cycle).

    Notes
    -----
    ``ceil(log2(n)) + 1`` rounds of ``depth += depth[jump]; jump = jump[jump]`` reach the root from
    any vertex of a tree; a vertex that has not, after that many, sits on or above a cycle. Cost:
    O(n log depth) in a few arrays of n, independent of the edges.
    """
    parents = np.asarray(parents)
    n = parents.size
    if not 0 <= root < n or parents[root] != root:
        raise BFSValidationError(1, f"parent of the root {root} is not the root itself", root)
    in_tree = parents >= 0
    if np.any(parents >= n):
        bad = int(np.flatnonzero(parents >= n)[0])
        raise BFSValidationError(1, f"parent of {bad} is {int(parents[bad])}, not a vertex", bad)
    jump = np.where(in_tree, parents, np.arange(n)).astype(np.int64)
    orphan = in_tree & ~in_tree[jump]
    if orphan.any():
        bad = int(np.flatnonzero(orphan)[0])
        raise BFSValidationError(1, f"vertex {bad} has parent {int(parents[bad])}, which is not in "
                                    "the tree", bad)
    depth = in_tree.astype(np.int64)
    depth[root] = 0
    for _ in range(max(n - 1, 1).bit_length() + 1):
        if np.all(jump[in_tree] == root):
            break
        depth += depth[jump]
        jump = jump[jump]
    else:
        stuck = in_tree & (jump != root)
        if stuck.any():
            bad = int(np.flatnonzero(stuck)[0])
            raise BFSValidationError(1, f"following parents from {bad} never reaches the root "
                                        f"{root}: a cycle", bad)
    depth[~in_tree] = UNREACHED
    return depth


def _check_levels_shape(graph: CSRGraph, name: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (graph.n_vertices,) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array of shape ({graph.n_vertices},), got "
                         f"{values.dtype} {values.shape}")
    return values.astype(np.int64, copy=False)


@numba.njit(nogil=True, cache=True)
def _scan_rows(offsets, neighbours, base, first, stop, levels, parents, use_parents, has_link):
    """Rules 3 and 4 over the entries of vertices ``first .. stop - 1`` (``neighbours`` holds the
    entries from ``base`` on), and ``has_link[v]`` for rule 5: an edge to ``parents[v]`` (with
    ``use_parents``) or to a neighbour one level up. Returns the first entry whose ends are not
    both in the tree or both out, the first whose levels differ by more than one, and the first
    neighbour id outside ``0 .. n - 1`` (-1: none of that kind)."""
    n = levels.size
    leaves = -1
    too_far = -1
    bad_id = -1
    for v in range(first, stop):
        level = levels[v]
        linked = False
        for e in range(offsets[v], offsets[v + 1]):
            u = np.int64(neighbours[e - base])
            if u < 0 or u >= n:
                if bad_id < 0:
                    bad_id = e
                continue
            other = levels[u]
            if (level >= 0) != (other >= 0):
                if leaves < 0:
                    leaves = e
            elif abs(level - other) > 1:
                if too_far < 0:
                    too_far = e
            if use_parents:
                linked = linked or u == parents[v]
            else:
                linked = linked or other == level - 1
        if linked:
            has_link[v] = True
    return leaves, too_far, bad_id


def _entry(graph: CSRGraph, entry: int) -> tuple[int, int]:
    """``(src, dst)`` of neighbours entry ``entry``: the vertex whose list holds it, and it."""
    src = int(np.searchsorted(graph.offsets, entry, side="right") - 1)
    return src, int(graph.neighbours[entry])


def _scan_edges(graph: CSRGraph, root: int, levels: np.ndarray, *, parents: np.ndarray | None,
                chunk_edges: int, progress: Progress | None) -> None:
    """Rules 3, 4 and 5 in one pass over the entries (rule 5 via parents, or via levels).

    Chunk by chunk of the neighbours (a graph need not fit in memory), each chunk's vertices
    split over :data:`~.parallel.N_THREADS` threads running :func:`_scan_rows`; a chunk with
    entries that break rule 4 reports its first such entry, else one that breaks rule 3, as a
    scan in entry order would."""
    reached = levels >= 0
    has_link = np.zeros(graph.n_vertices, dtype=np.bool_)  # a parent edge, or a neighbour one level up
    use_parents = parents is not None
    parent_of = parents if use_parents else np.zeros(1, dtype=np.int64)
    offsets = np.ascontiguousarray(graph.offsets, dtype=np.int64)
    bounds = graph.row_ranges(chunk_edges)
    for first, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        base = int(offsets[first])
        chunk = np.asarray(graph.neighbours[base:int(offsets[stop])])
        slices = [(first + a, first + b) for a, b in parallel.split(stop - first, 4096)]
        found = parallel.run_all(
            lambda a, b: _scan_rows(offsets, chunk, base, a, b, levels, parent_of, use_parents,
                                    has_link), slices)
        bad_ids = [f[2] for f in found if f[2] >= 0]
        if bad_ids:
            src, dst = _entry(graph, min(bad_ids))
            raise GraphFormatError(f"a neighbour of vertex {src} is {dst}, not a vertex id "
                                   f"(0..{graph.n_vertices - 1})")
        leaves = [f[0] for f in found if f[0] >= 0]
        if leaves:
            src, dst = _entry(graph, min(leaves))
            raise BFSValidationError(4, f"edge ({src}, {dst}) leaves the tree: levels "
                                        f"{levels[src]} and {levels[dst]}", src)
        too_far = [f[1] for f in found if f[1] >= 0]
        if too_far:
            src, dst = _entry(graph, min(too_far))
            raise BFSValidationError(3, f"edge ({src}, {dst}) joins levels {levels[src]} and "
                                        f"{levels[dst]}", src)
        if progress is not None:
            progress(int(offsets[stop]), graph.n_edges)
    missing = reached & ~has_link
    missing[root] = False
    if missing.any():
        bad = int(np.flatnonzero(missing)[0])
        detail = (f"vertex {bad} has parent {int(parents[bad])} but no edge to it" if parents is not None
                  else f"vertex {bad} at level {int(levels[bad])} has no neighbour at level "
                       f"{int(levels[bad]) - 1}")
        raise BFSValidationError(5, detail, bad)


def validate_bfs_tree(graph: CSRGraph, root: int, parents: np.ndarray,
                      levels: np.ndarray | None = None, *, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                      progress: Progress | None = None) -> np.ndarray:
    """Check a BFS parent array by Graph500's five rules.

    Parameters
    ----------
    graph : CSRGraph
    root : int
        The search key.
    parents : numpy.ndarray
        Integer, one per vertex: ``parents[root] == root``, a negative value where unreached.
    levels : numpy.ndarray, optional
        Levels the BFS reported alongside the tree (negative where unreached); rule 2 is checked on
        them. Without them, levels are derived from the tree, which satisfies rule 2 by
        construction, as in the Graph500 reference validator.
    chunk_edges : int
        Entries scanned per step.
    progress : callable, optional
        ``progress(done, total)`` over the edge scan.

    Returns
    -------
    numpy.ndarray
        The levels (int64, -1 where unreached), equal to the true BFS distances once valid.

    Raises
    ------
    BFSValidationError
        With the rule number and an offending vertex.
    ValueError
        If ``parents`` or ``levels`` has the wrong shape or dtype.
    """
    parents = _check_levels_shape(graph, "parents", parents)
    depths = tree_depths(parents, root)
    if levels is None:
        levels = depths
    else:
        levels = _check_levels_shape(graph, "levels", levels)
        levels = np.where(levels < 0, UNREACHED, levels)
        if levels[root] != 0:
            raise BFSValidationError(2, f"the root {root} has level {int(levels[root])}", root)
        disagree = (levels >= 0) != (depths >= 0)
        disagree[parents >= 0] |= levels[parents >= 0] != levels[parents[parents >= 0]] + 1
        disagree[root] = False
        if disagree.any():
            bad = int(np.flatnonzero(disagree)[0])
            raise BFSValidationError(2, f"vertex {bad} at level {int(levels[bad])} has parent "
                                        f"{int(parents[bad])} at level "
                                        f"{int(levels[parents[bad]]) if parents[bad] >= 0 else 'none'}",
                                     bad)
    _scan_edges(graph, root, levels, parents=parents, chunk_edges=chunk_edges, progress=progress)
    return levels


def validate_bfs_levels(graph: CSRGraph, root: int, levels: np.ndarray, *,
                        chunk_edges: int = DEFAULT_CHUNK_EDGES,
                        progress: Progress | None = None) -> None:
    """Check a BFS that reports levels only (no parents), by the rules that still apply.

    Rules 3 and 4 as in :func:`validate_bfs_tree`; rules 1, 2 and 5 become "the root alone has
    level 0, and every other reached vertex has a neighbour exactly one level closer" (it has a
    valid parent). Together these pin the levels to the true BFS distances.

    Raises
    ------
    BFSValidationError
        Rule 1 (root not at level 0, or another vertex at 0), 3, 4 or 5 (no neighbour one level
        closer).
    """
    levels = _check_levels_shape(graph, "levels", levels)
    levels = np.where(levels < 0, UNREACHED, levels)
    if not 0 <= root < graph.n_vertices or levels[root] != 0:
        raise BFSValidationError(1, f"the root {root} is not at level 0", root)
    at_zero = np.flatnonzero(levels == 0)
    if at_zero.size != 1:
        bad = int(at_zero[at_zero != root][0])
        raise BFSValidationError(1, f"vertex {bad} is at level 0 but is not the root", bad)
    _scan_edges(graph, root, levels, parents=None, chunk_edges=chunk_edges, progress=progress)


def scipy_bfs(graph: CSRGraph, root: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference BFS by ``scipy.sparse.csgraph.breadth_first_order``.

    Returns
    -------
    parents, levels : numpy.ndarray
        int64, in Graph500's convention (``parents[root] == root``, -1 where unreached); levels
        are the tree's depths.
    """
    from scipy.sparse.csgraph import breadth_first_order

    # The stored graph is symmetric, so the directed traversal is the undirected one, without
    # scipy forming A + A.T.
    _, predecessors = breadth_first_order(graph.to_scipy(), root, directed=True,
                                          return_predecessors=True)
    parents = predecessors.astype(np.int64)
    parents[parents < 0] = UNREACHED  # scipy marks both the root and unreached with -9999
    parents[root] = root
    return parents, tree_depths(parents, root)


def scipy_components(graph: CSRGraph) -> tuple[int, np.ndarray]:
    """Reference connected components by ``scipy.sparse.csgraph.connected_components``.

    Returns
    -------
    n_components : int
    labels : numpy.ndarray
        Component label per vertex (scipy's numbering).
    """
    from scipy.sparse.csgraph import connected_components

    n_components, labels = connected_components(graph.to_scipy(), directed=False)
    return int(n_components), labels.astype(np.int64)


def same_partition(labels_a: np.ndarray, labels_b: np.ndarray) -> bool:
    """Whether two component labellings describe the same partition, whatever the label values.

    True exactly when the pairs ``(labels_a[v], labels_b[v])`` define a one-to-one map between the
    two label sets: as many distinct pairs as distinct labels on either side.
    """
    labels_a, labels_b = np.asarray(labels_a), np.asarray(labels_b)
    if labels_a.shape != labels_b.shape:
        return False
    if labels_a.size == 0:
        return True
    pairs = np.unique(np.stack((labels_a, labels_b), axis=1), axis=0)
    return len(pairs) == len(np.unique(labels_a)) == len(np.unique(labels_b))


def traversed_edges(graph: CSRGraph, levels_or_parents: np.ndarray) -> int:
    """Graph500's edge count for TEPS: input edges within the component the search reached.

    Parameters
    ----------
    graph : CSRGraph
    levels_or_parents : numpy.ndarray
        Any per-vertex array that is negative exactly where the search did not reach.

    Returns
    -------
    int
        Edge tuples with an end in the reached component, counting self loops and repeated edges
        (as the specification says); for a file built with drops, the edges that remain.

    Notes
    -----
    A non-loop edge is stored twice within the component and a loop once, so the count is
    ``(sum of reached degrees + reached loop entries) / 2``. The loop term comes from
    :meth:`CSRGraph.self_loops`, free when the header says there are none.
    """
    reached = np.asarray(levels_or_parents) >= 0
    loop_vertices, loop_counts = graph.self_loops()
    entries = int(graph.degrees()[reached].sum()) + int(loop_counts[reached[loop_vertices]].sum())
    return entries // 2


@dataclass(frozen=True)
class TEPSStatistics:
    """Graph500's TEPS summary over the searches of one run (names as its output keys)."""

    min_TEPS: float
    firstquartile_TEPS: float
    median_TEPS: float
    thirdquartile_TEPS: float
    max_TEPS: float
    harmonic_mean_TEPS: float
    harmonic_stddev_TEPS: float


def _teps(edges_traversed, times) -> np.ndarray:
    edges = np.asarray(edges_traversed, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    if edges.shape != times.shape or edges.ndim != 1 or edges.size == 0:
        raise ValueError("edges_traversed and times must be equal-length, non-empty 1-D sequences")
    if np.any(times <= 0) or np.any(edges <= 0):
        raise ValueError("every search needs a positive time and a positive edge count")
    return edges / times


def teps_harmonic_mean(edges_traversed, times) -> float:
    """Graph500's headline figure: the harmonic mean of per-search TEPS.

    Parameters
    ----------
    edges_traversed : sequence of int
        Per search, :func:`traversed_edges` (input edges in the reached component).
    times : sequence of float
        Per search, seconds.

    Returns
    -------
    float
        ``n / sum(1 / TEPS_k)`` with ``TEPS_k = edges_k / time_k``. The harmonic mean is the
        right mean for rates: it is total work over total time when each search does equal work.
    """
    teps = _teps(edges_traversed, times)
    return float(teps.size / np.sum(1.0 / teps))


def teps_statistics(edges_traversed, times) -> TEPSStatistics:
    """All of Graph500's TEPS statistics, as the reference code prints them.

    The harmonic standard deviation follows the reference (Norris 1940):
    ``std(1/TEPS, ddof=1) * hmean**2 / sqrt(n - 1)``; it is 0 for a single search.
    """
    teps = _teps(edges_traversed, times)
    hmean = teps_harmonic_mean(edges_traversed, times)
    n = teps.size
    hstddev = (float(np.std(1.0 / teps, ddof=1) * hmean**2 / np.sqrt(n - 1)) if n > 1 else 0.0)
    q1, median, q3 = np.quantile(teps, [0.25, 0.5, 0.75])
    return TEPSStatistics(float(teps.min()), float(q1), float(median), float(q3), float(teps.max()),
                          hmean, hstddev)
