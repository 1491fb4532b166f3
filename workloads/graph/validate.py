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

import numpy as np

from .bfs import UNREACHED
from .csr_file import CSRGraph, Progress
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


def _scan_edges(graph: CSRGraph, root: int, levels: np.ndarray, *, parents: np.ndarray | None,
                chunk_edges: int, progress: Progress | None) -> None:
    """Rules 3, 4 and 5 in one pass over the entries (rule 5 via parents, or via levels)."""
    reached = levels >= 0
    has_link = np.zeros(graph.n_vertices, dtype=bool)  # a parent edge, or a neighbour one level up
    for src, dst in graph.iter_edges(chunk_edges, progress):
        src_level, dst_level = levels[src], levels[dst]
        crossing = (src_level >= 0) != (dst_level >= 0)
        if crossing.any():
            i = int(np.flatnonzero(crossing)[0])
            raise BFSValidationError(4, f"edge ({src[i]}, {dst[i]}) leaves the tree: levels "
                                        f"{src_level[i]} and {dst_level[i]}", int(src[i]))
        too_far = np.abs(src_level - dst_level) > 1
        if too_far.any():
            i = int(np.flatnonzero(too_far)[0])
            raise BFSValidationError(3, f"edge ({src[i]}, {dst[i]}) joins levels {src_level[i]} and "
                                        f"{dst_level[i]}", int(src[i]))
        linked = (dst == parents[src]) if parents is not None else (dst_level == src_level - 1)
        has_link[src[linked]] = True
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
