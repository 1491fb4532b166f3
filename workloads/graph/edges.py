"""Edge sources: re-iterable streams of undirected edge chunks.

The CSR writer (:func:`workloads.graph.csr_file.write_csr`) reads its input twice (once to count
degrees, once to distribute the edges), so an input is not an iterator but an object that can
start a fresh pass on demand. Anything with the three members of :class:`EdgeSource` will do; this
module holds the ones over arrays (in memory or memory-mapped ``.npy`` files) and the relabelling
wrapper. The Kronecker generator (:class:`workloads.graph.kronecker.KroneckerEdges`) is another.
"""

from __future__ import annotations

from typing import Iterator, Protocol

import numpy as np

#: Default edge budget per chunk: 2 Mi edges. The CSR writer needs about 50 bytes per chunk
#: edge, so its working set stays near 100 MiB (plus 16 bytes per vertex) whatever the graph's size.
DEFAULT_CHUNK_EDGES = 1 << 21

EdgeChunk = tuple[np.ndarray, np.ndarray]


class EdgeSource(Protocol):
    """What the CSR writer needs from an input graph.

    Attributes
    ----------
    n_vertices : int
        Vertex ids are ``0 <= id < n_vertices``.
    n_edges : int
        Number of input edge tuples (each undirected edge once, as in a Graph500 edge list).

    Notes
    -----
    ``chunks`` must yield the same edges every time it is called: the writer makes two passes.
    """

    n_vertices: int
    n_edges: int

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[EdgeChunk]:
        """Yield ``(src, dst)`` pairs of 1-D int64 arrays of at most ``chunk_edges`` edges."""
        ...


class EdgeArray:
    """An edge list held in an array: ``(E, 2)`` or ``(2, E)``, in memory or memory-mapped.

    Parameters
    ----------
    edges : numpy.ndarray
        Integer array of shape ``(E, 2)`` (one row per edge) or ``(2, E)`` (a row of sources and a
        row of destinations). A ``(2, 2)`` array is read as two edges, one per row. A
        ``np.load(..., mmap_mode="r")`` array works and is read one chunk at a time.
    n_vertices : int, optional
        Number of vertices. Defaults to ``max id + 1``, found by one pass over the array.

    Raises
    ------
    ValueError
        If the array has the wrong shape or dtype, holds a negative id, or an id ``>= n_vertices``.
    """

    def __init__(self, edges: np.ndarray, n_vertices: int | None = None):
        if edges.ndim != 2 or 2 not in edges.shape:
            raise ValueError(f"edge array must have shape (E, 2) or (2, E), got {edges.shape}")
        if not np.issubdtype(edges.dtype, np.integer):
            raise ValueError(f"edge array must hold integers, got dtype {edges.dtype}")
        # (E, 2) wins the tie: a two-edge list is more likely than a graph stored sideways.
        self._columns = edges.T if edges.shape[1] == 2 else edges
        self.n_edges = int(self._columns.shape[1])
        lowest, highest = self._id_range()
        if lowest < 0:
            raise ValueError(f"edge array holds a negative vertex id ({lowest})")
        if n_vertices is None:
            n_vertices = highest + 1
        elif highest >= n_vertices:
            raise ValueError(f"edge array holds vertex id {highest} but n_vertices is {n_vertices}")
        self.n_vertices = int(n_vertices)

    def _id_range(self) -> tuple[int, int]:
        lowest, highest = 0, -1
        for src, dst in self.chunks():
            if src.size:
                lowest = min(lowest, int(src.min()), int(dst.min()))
                highest = max(highest, int(src.max()), int(dst.max()))
        return lowest, highest

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[EdgeChunk]:
        for start in range(0, self.n_edges, chunk_edges):
            stop = min(start + chunk_edges, self.n_edges)
            yield (np.asarray(self._columns[0, start:stop], dtype=np.int64),
                   np.asarray(self._columns[1, start:stop], dtype=np.int64))


def distinct_ids(source: EdgeSource, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> np.ndarray:
    """Sorted distinct vertex ids that occur in ``source`` (int64).

    Memory is bounded by the number of distinct ids plus one chunk: each chunk's distinct ids are
    merged into the running set as soon as the pending ones outgrow it.
    """
    seen = np.empty(0, dtype=np.int64)
    pending: list[np.ndarray] = []
    pending_size = 0
    for src, dst in source.chunks(chunk_edges):
        pending.append(np.unique(np.concatenate((src, dst))))
        pending_size += pending[-1].size
        if pending_size > max(seen.size, chunk_edges):
            seen = np.unique(np.concatenate([seen, *pending]))
            pending, pending_size = [], 0
    return np.unique(np.concatenate([seen, *pending]))


class RelabelledEdges:
    """A view of another source with its vertex ids mapped to ``0 .. len(ids) - 1``.

    Parameters
    ----------
    source : EdgeSource
        The edges with sparse ids (e.g. SNAP ids, which skip numbers).
    ids : numpy.ndarray, optional
        Sorted distinct original ids; vertex ``k`` of the relabelled graph is ``ids[k]``. Found by
        one pass over ``source`` (:func:`distinct_ids`) when not given.

    Notes
    -----
    The mapping keeps the order of the original ids, so relabelling an already dense graph is the
    identity. Each chunk is mapped with a binary search (``np.searchsorted``) into ``ids``.
    """

    def __init__(self, source: EdgeSource, ids: np.ndarray | None = None):
        self._source = source
        self.ids = distinct_ids(source) if ids is None else np.asarray(ids, dtype=np.int64)
        self.n_vertices = int(self.ids.size)
        self.n_edges = source.n_edges

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[EdgeChunk]:
        for src, dst in self._source.chunks(chunk_edges):
            yield self._dense(src), self._dense(dst)

    def _dense(self, original: np.ndarray) -> np.ndarray:
        dense = np.searchsorted(self.ids, original)
        if original.size == 0:
            return dense
        # A given id list that misses an id would silently merge vertices: check every lookup.
        missing = (dense >= self.ids.size) | (self.ids[np.minimum(dense, self.ids.size - 1)] != original)
        if missing.any():
            raise ValueError(f"vertex id {int(original[missing][0])} is not in the id list")
        return dense
