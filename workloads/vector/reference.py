"""Host reference search: exact top-k, IVF search over the probed lists, recall.

This module defines the ranking the GPU search kernel must reproduce.

Ranking rule
------------
distance
    ``metric="l2"``: squared Euclidean distance ``sum((q - x) ** 2)``.
    ``metric="ip"``: *negative* inner product ``-sum(q * x)``, so that for both
    metrics smaller is better and padding is ``+inf``.
    Computed per pair in float64 from float32 values (queries are rounded to
    float32 first, as a kernel receives them) by :func:`pair_distances`, whose
    result for a pair does not depend on what else is in the batch.
order
    Ascending ``(distance, id)``: equal distances, e.g. duplicate vectors, are
    ranked by the smaller id first.
padding
    When fewer than ``k`` candidates exist (``k`` larger than the data set, or
    than the probed lists together), the missing places hold id ``-1`` and
    distance ``+inf``, after every real result.
probing
    :func:`probe_lists` takes the ``nprobe`` centroids nearest to the query
    under the same rule, with the list number as the id: a tie between two
    centroids goes to the lower list number.

A GPU kernel that accumulates in float64 agrees with this exactly except where
two distinct candidates' distances differ in the last bits; one accumulating in
float32 can also swap candidates (or centroids) whose distances differ by about
float32 rounding. Exact ties, as between duplicate vectors, are ties in any
precision, so the id rule settles them the same way everywhere.

How the search is fast and still exact
--------------------------------------
Scores come from a float32 matrix product (BLAS), which is fast but rounded and
batch-dependent. A rigorous bound on that rounding (``2 (dim + 4) u (|q| + |x|)^2``
with ``u = 2^-24``) shortlists every candidate that could still enter the top k;
only those get their exact float64 distance, and the (distance, id) order is
applied to exact distances only. The shortlist is usually a few more than k per
query; data with very many exact ties (e.g. thousands of copies of one vector)
makes it longer, which costs time but never correctness.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .datasets import iter_row_chunks, source_shape

__all__ = [
    "METRICS",
    "pair_distances",
    "exact_search",
    "probe_lists",
    "ivf_search",
    "recall_at_k",
    "recall_by_nprobe",
]

METRICS = ("l2", "ip")

Progress = Callable[[str, int, int], None]

_FLOAT32_UNIT_ROUNDOFF = 2.0**-24
# Largest query-block x vector-block score matrix (float32 elements) and largest
# batch of exact pair distances (float64 elements): bounds the working memory.
_SCORE_BLOCK_ELEMENTS = 1 << 22
_QUERY_BLOCK_ROWS = 1024


def pair_distances(a, b, metric: str = "l2") -> np.ndarray:
    """Distance between each row of ``a`` and the matching row of ``b``: the ranking's definition.

    Parameters
    ----------
    a, b : array-like, shape (..., dim)
        Broadcastable arrays of vectors.
    metric : {"l2", "ip"}
        Squared L2 distance, or negative inner product.

    Returns
    -------
    ndarray of float64, shape (...)

    Notes
    -----
    The difference (or product) is formed in float64 and reduced along the last
    axis with numpy's pairwise sum, whose result for a row depends only on that
    row: a pair gets the same distance in any batch, which is what lets ties be
    broken by id consistently.
    """
    metric = _check_metric(metric)
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if metric == "l2":
        diff = a64 - b64
        np.square(diff, out=diff)
        return diff.sum(axis=-1)
    return -(a64 * b64).sum(axis=-1)


def exact_search(
    queries,
    vectors,
    k: int,
    *,
    metric: str = "l2",
    ids=None,
    chunk_rows: int = 65536,
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by brute force, streaming the vectors.

    Parameters
    ----------
    queries : array-like, shape (n_queries, dim) or (dim,)
        Held in memory, rounded to float32. A 1-D array is one query.
    vectors : array-like, shape (n, dim)
        Any row source (array, memmap, :class:`~workloads.vector.datasets.SyntheticClusters`);
        read ``chunk_rows`` rows at a time, so it may be larger than RAM.
    k : int
        Neighbours per query; larger than ``n`` is allowed (padded).
    metric : {"l2", "ip"}
        See the module's ranking rule.
    ids : array-like of int, shape (n,), optional
        The id of each vector (default: its row number). Ties are broken by
        id, so ids should be unique and non-negative.
    chunk_rows : int, optional
        Vectors read per step.
    progress : callable, optional
        Called as ``progress("exact_search", rows_done, n_rows)`` after each chunk.

    Returns
    -------
    distances : ndarray of float64, shape (n_queries, k)
    ids : ndarray of int64, shape (n_queries, k)
        Ascending by (distance, id); padding is id -1 with distance +inf.

    Raises
    ------
    ValueError
        On a dimension mismatch, a bad ``k`` or metric, or NaN/infinity in the
        queries or vectors.
    """
    n_rows, dim = source_shape(vectors)
    metric = _check_metric(metric)
    queries = _as_queries(queries, dim, "the vectors have")
    k = _check_k(k)
    if ids is not None:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape != (n_rows,):
            raise ValueError(f"ids has shape {ids.shape} but there are {n_rows} vectors")
    topk = _RunningTopK(queries, k, metric)
    for start, chunk in iter_row_chunks(vectors, chunk_rows):
        stop = start + len(chunk)
        topk.add(chunk, np.arange(start, stop, dtype=np.int64) if ids is None else ids[start:stop])
        if progress is not None:
            progress("exact_search", stop, n_rows)
    return topk.distances, topk.ids


def probe_lists(queries, centroids, nprobe: int, metric: str = "l2") -> np.ndarray:
    """The lists an IVF search scans: the ``nprobe`` nearest centroids per query.

    Parameters
    ----------
    queries : array-like, shape (n_queries, dim) or (dim,)
    centroids : array-like, shape (n_lists, dim)
    nprobe : int
        1 to ``n_lists``; ``n_lists`` scans everything (an exact search).
    metric : {"l2", "ip"}

    Returns
    -------
    ndarray of int64, shape (n_queries, nprobe)
        List numbers, nearest first; ties go to the lower list number.
    """
    n_lists, dim = source_shape(centroids)
    queries = _as_queries(queries, dim, "the centroids have")
    if int(nprobe) != nprobe or not 1 <= nprobe <= n_lists:
        raise ValueError(f"nprobe must be an integer from 1 to the number of lists ({n_lists}), got {nprobe!r}")
    return exact_search(queries, centroids, int(nprobe), metric=metric)[1]


def ivf_search(index, queries, k: int, nprobe: int, *, progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Search an on-disk IVF index on the host: the reference for the GPU kernel.

    Picks each query's lists with :func:`probe_lists`, then ranks every vector
    of those lists exactly (see the module's ranking rule). Lists are visited in
    list order, each read once for all the queries that probe it, as a
    list-major GPU schedule would.

    Parameters
    ----------
    index : IVFIndex
        From :func:`workloads.vector.ivf.open_ivf` (or ``build_ivf``).
    queries : array-like, shape (n_queries, dim) or (dim,)
    k : int
        Results per query. If the probed lists hold fewer than ``k`` vectors
        together, the rest is padding (id -1, distance +inf).
    nprobe : int
        Lists scanned per query, 1 to ``index.n_lists``.
    progress : callable, optional
        Called as ``progress("ivf_search", lists_done, lists_to_scan)``.

    Returns
    -------
    distances : ndarray of float64, shape (n_queries, k)
    ids : ndarray of int64, shape (n_queries, k)

    Raises
    ------
    ValueError
        If the queries' dimension is not the index's, or on a bad ``k`` or ``nprobe``.
    """
    queries = _as_queries(queries, index.dim, "the index has")
    k = _check_k(k)
    probes = probe_lists(queries, index.centroids, nprobe, index.metric)
    topk = _RunningTopK(queries, k, index.metric)
    flat_lists = probes.ravel()
    order = np.argsort(flat_lists, kind="stable")
    sorted_lists = flat_lists[order]
    query_of = order // probes.shape[1]
    group_starts = np.flatnonzero(np.r_[True, sorted_lists[1:] != sorted_lists[:-1]])
    group_ends = np.r_[group_starts[1:], len(sorted_lists)]
    for done, (lo, hi) in enumerate(zip(group_starts, group_ends), start=1):
        list_no = int(sorted_lists[lo])
        topk.add(index.list_vectors(list_no), index.list_ids(list_no), query_of[lo:hi])
        if progress is not None:
            progress("ivf_search", done, len(group_starts))
    return topk.distances, topk.ids


def recall_at_k(found_ids, true_ids, k: int = 10) -> float:
    """Mean recall@k: the share of each query's true k nearest found in its first k results.

    Parameters
    ----------
    found_ids : array-like of int, shape (n_queries, >= k)
        Search results, best first.
    true_ids : array-like of int, shape (n_queries, >= k)
        Exact neighbours, best first (e.g. from :func:`exact_search`, or an
        ``.ivecs`` ground-truth file).
    k : int, optional

    Returns
    -------
    float
        Mean over queries of ``|found[:k] & true[:k]| / (valid ids in true[:k])``.
        Padding (-1) is never a hit and not counted in the denominator, so a
        query with fewer than k real neighbours can still reach 1.0.

    Raises
    ------
    ValueError
        On mismatched shapes, fewer than k columns, or a query with no valid
        true neighbour.

    Notes
    -----
    Ground truth made under another tie rule (e.g. a benchmark's ``.ivecs``)
    can differ from ours among exactly tied neighbours at the k-th place; that
    shows as recall slightly below 1.0 even for an exact search.
    """
    k = _check_k(k)
    found = np.asarray(found_ids)
    true = np.asarray(true_ids)
    if found.ndim != 2 or true.ndim != 2 or len(found) != len(true):
        raise ValueError(f"found_ids {found.shape} and true_ids {true.shape} must be 2-D with one row per query")
    if found.shape[1] < k or true.shape[1] < k:
        raise ValueError(f"recall@{k} needs at least {k} columns, got found {found.shape[1]} and true {true.shape[1]}")
    found = found[:, :k].astype(np.int64)
    true = true[:, :k].astype(np.int64)
    valid = true >= 0
    n_valid = valid.sum(axis=1)
    if (n_valid == 0).any():
        raise ValueError(f"query {int(np.flatnonzero(n_valid == 0)[0])} has no valid true neighbour")
    hits = np.empty(len(true), dtype=np.int64)
    block = max(1, _SCORE_BLOCK_ELEMENTS // (k * k))
    for q0 in range(0, len(true), block):
        q1 = q0 + block
        found_each_true = (found[q0:q1, :, None] == true[q0:q1, None, :]).any(axis=1)
        hits[q0:q1] = (found_each_true & valid[q0:q1]).sum(axis=1)
    return float(np.mean(hits / n_valid))


def recall_by_nprobe(
    index,
    queries,
    nprobes: Sequence[int],
    k: int = 10,
    *,
    true_ids=None,
    progress: Progress | None = None,
) -> list[dict]:
    """Recall@k and I/O cost of IVF search for several ``nprobe`` values: the demo's report.

    Parameters
    ----------
    index : IVFIndex
    queries : array-like, shape (n_queries, dim)
    nprobes : sequence of int
    k : int, optional
    true_ids : array-like of int, shape (n_queries, >= k), optional
        Ground truth. Default: an IVF search that probes every list, which
        ranks every indexed vector and so is the exact search.
    progress : callable, optional
        Called as ``progress("recall", nprobes_done, len(nprobes))``.

    Returns
    -------
    list of dict
        One per ``nprobe``: ``nprobe``, ``recall`` (recall@k), ``vectors_per_query``
        (mean vectors ranked) and ``pages_per_query`` (mean list pages read:
        the I/Os per query with a cold cache, centroids and ids not counted).
    """
    if true_ids is None:
        true_ids = ivf_search(index, queries, k, index.n_lists)[1]
    report = []
    for done, nprobe in enumerate(nprobes, start=1):
        found_ids = ivf_search(index, queries, k, nprobe)[1]
        probes = probe_lists(queries, index.centroids, nprobe, index.metric)
        report.append(
            {
                "nprobe": int(nprobe),
                "recall": recall_at_k(found_ids, true_ids, k),
                "vectors_per_query": float(index.list_lengths[probes].sum(axis=1).mean()),
                "pages_per_query": float(index.list_pages[probes].sum(axis=1).mean()),
            }
        )
        if progress is not None:
            progress("recall", done, len(nprobes))
    return report


class _RunningTopK:
    """Exact top-k of a fixed set of queries, fed blocks of candidate vectors.

    ``distances`` / ``ids`` always hold each query's exact top k (under the
    module's rule) among all candidates offered so far, padded with (+inf, -1).
    """

    def __init__(self, queries: np.ndarray, k: int, metric: str):
        self.queries = queries
        self.k = k
        self.metric = metric
        self.query_sq_norms = np.einsum("ij,ij->i", queries, queries, dtype=np.float64)
        self.query_norms = np.sqrt(self.query_sq_norms)
        self.distances = np.full((len(queries), k), np.inf)
        self.ids = np.full((len(queries), k), -1, dtype=np.int64)

    def add(self, vectors: np.ndarray, ids: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Offer ``vectors`` (float32, C-contiguous) with their ``ids`` to the queries ``rows`` (default all)."""
        if rows is None:
            rows = np.arange(len(self.queries))
        if len(vectors) == 0 or len(rows) == 0:
            return
        sq_norms = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
        # Few vectors (centroids): take many queries per block so each BLAS call stays large.
        query_step = min(len(rows), max(_QUERY_BLOCK_ROWS, _SCORE_BLOCK_ELEMENTS // len(vectors)))
        vector_step = max(1, _SCORE_BLOCK_ELEMENTS // query_step)
        for x0 in range(0, len(vectors), vector_step):
            block = slice(x0, x0 + vector_step)
            for q0 in range(0, len(rows), query_step):
                self._add_block(rows[q0 : q0 + query_step], vectors[block], ids[block], sq_norms[block])

    def _add_block(self, rows, vectors, ids, sq_norms) -> None:
        queries = self.queries[rows]
        # approx: the float32 BLAS score, minus a per-query offset (|q|^2 for L2) that
        # does not change the ranking, so the big matrix skips one addition.
        approx = queries @ vectors.T
        if self.metric == "l2":
            approx *= -2
            approx += sq_norms.astype(np.float32)
            offset = self.query_sq_norms[rows]
        else:
            np.negative(approx, out=approx)
            offset = 0.0
        # |approx + offset - exact distance| <= error for every pair in the block.
        dim = queries.shape[1]
        error = 2 * (dim + 4) * _FLOAT32_UNIT_ROUNDOFF * (self.query_norms[rows] + np.sqrt(sq_norms.max())) ** 2
        # A vector can be dropped if k others are surely (strictly) nearer: the k
        # already kept (exact distances), or the block's own k best by approx.
        threshold = self.distances[rows, self.k - 1] - offset + error
        if approx.shape[1] >= self.k:
            block_kth = np.partition(approx, self.k - 1, axis=1)[:, self.k - 1]
            threshold = np.minimum(threshold, block_kth + 2 * error)
        query_idx, vector_idx = np.nonzero(approx <= threshold[:, None])
        pair_step = max(1, _SCORE_BLOCK_ELEMENTS // dim)
        for p0 in range(0, len(query_idx), pair_step):
            qi = query_idx[p0 : p0 + pair_step]
            xi = vector_idx[p0 : p0 + pair_step]
            self._merge(rows, qi, pair_distances(queries[qi], vectors[xi], self.metric), ids[xi])

    def _merge(self, rows, query_idx, distances, ids) -> None:
        """Replace the top k of ``rows`` by the top k of (itself + the new candidates)."""
        n_rows = len(rows)
        all_query = np.concatenate([np.repeat(np.arange(n_rows), self.k), query_idx])
        all_distance = np.concatenate([self.distances[rows].ravel(), distances])
        all_id = np.concatenate([self.ids[rows].ravel(), ids])
        order = np.lexsort((all_id, all_distance, all_query))
        # Every query has at least k entries (its current top k), so taking the
        # first k of each query's run gives exactly k per query, in query order.
        counts = np.bincount(all_query, minlength=n_rows)
        rank = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
        keep = order[rank < self.k]
        self.distances[rows] = all_distance[keep].reshape(n_rows, self.k)
        self.ids[rows] = all_id[keep].reshape(n_rows, self.k)


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return metric


def _check_k(k: int) -> int:
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _as_queries(queries, dim: int, against: str) -> np.ndarray:
    """Queries as a C-contiguous float32 (n_queries, dim) matrix, or a clear error."""
    array = np.asarray(queries)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ValueError(f"queries must be 1-D (one query) or 2-D (n_queries x dim), got shape {array.shape}")
    if array.shape[1] != dim:
        raise ValueError(f"dimension mismatch: the queries have dimension {array.shape[1]} but {against} dimension {dim}")
    if array.dtype.kind not in "fiu":
        raise ValueError(f"queries must be real numbers, got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError(f"query {int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])} holds NaN or infinity")
    return array
