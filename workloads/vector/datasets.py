"""Vector data for the IVF demo: a synthetic clustered generator and file formats.

Everything here hands out *row sources*: 2-D array-likes (numpy arrays, read-only
memmaps, :class:`SyntheticClusters`) that consumers read a slice of rows at a
time through :func:`iter_row_chunks`, so a data set larger than RAM streams.

File formats
------------
``.fvecs`` / ``.ivecs`` / ``.bvecs``
    The ANN-benchmark formats (SIFT1M, GIST1M, BIGANN, ...): each row is a
    little-endian int32 dimension ``d`` followed by ``d`` components (float32,
    int32 or uint8). ``.ivecs`` usually holds ground-truth neighbour ids.
``.npy``
    A 2-D numeric numpy array.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np

__all__ = [
    "VectorFileError",
    "SyntheticClusters",
    "iter_row_chunks",
    "load_vectors",
    "save_vectors",
    "source_shape",
]

# Component dtype of each row-prefixed format.
_XVECS_COMPONENTS = {
    "fvecs": np.dtype("<f4"),
    "ivecs": np.dtype("<i4"),
    "bvecs": np.dtype("u1"),
}
_FORMATS = (*_XVECS_COMPONENTS, "npy")

# Rows per generated block of SyntheticClusters. Fixed (not a parameter) so the
# data is a function of (n, dim, n_clusters, seed, spread) alone, however it is sliced.
_SYNTHETIC_BLOCK_ROWS = 65536


class VectorFileError(ValueError):
    """A vector file is malformed, truncated, or not of the format asked for."""


class SyntheticClusters:
    """A lazy ``(n, dim)`` float32 array of points around Gaussian cluster centres.

    Centres are drawn from N(0, 1) per coordinate; each point picks a cluster
    uniformly at random and adds N(0, ``spread``\\ :sup:`2`) noise per coordinate.
    Rows are generated on demand in fixed blocks of 65536 from a seed derived
    from ``(seed, block number)``, so any slice is reproducible on its own and
    a data set of any size streams without being held in memory.

    Parameters
    ----------
    n : int
        Number of vectors.
    dim : int
        Dimension.
    n_clusters : int
        Number of cluster centres.
    seed : int, optional
        Seed; the same parameters give the same data on every run.
    spread : float, optional
        Standard deviation of the per-coordinate noise around a centre (centres
        are about ``sqrt(2 * dim)`` apart). It sets how hard the data is for
        IVF; see the table below.

    Notes
    -----
    How hard the data is, measured: recall@10 of an IVF index with 128 lists
    (``train_kmeans(data, 128, n_iter=8, seed=0)``) on
    ``SyntheticClusters(50_000, dim, 200, seed=1, spread=...)`` for 300
    queries (``queries(300, seed=2)``), at nprobe 1 / 4 / 16:

    ======  ==================  ==================
    spread  dim 32              dim 128
    ======  ==================  ==================
    0.5     0.97 / 1.00 / 1.00  0.99 / 1.00 / 1.00
    1.0     0.75 / 0.87 / 0.97  0.99 / 1.00 / 1.00
    1.5     0.28 / 0.51 / 0.81  0.90 / 0.95 / 0.99
    2.0     0.17 / 0.37 / 0.69  0.52 / 0.61 / 0.77
    ======  ==================  ==================

    The default 1.5 gives a real recall-versus-nprobe trade-off at both dimensions.

    Supports ``len``, ``shape``, ``dtype``, ``ndim``, indexing by an int, a slice,
    an integer array or a boolean mask (optionally followed by a column index),
    and ``np.asarray(data)`` (which generates everything: mind the size).
    Random row access generates every 65536-row block it touches; the most recent
    block is cached, so reading in order costs one generation per block.

    Examples
    --------
    >>> data = SyntheticClusters(n=100_000, dim=64, n_clusters=100, seed=1)
    >>> data[:5].shape
    (5, 64)
    >>> queries, clusters = data.queries(1000, seed=2, skewed=True)
    """

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, n: int, dim: int, n_clusters: int, seed: int = 0, *, spread: float = 1.5):
        for name, value in (("n", n), ("dim", dim), ("n_clusters", n_clusters)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if not spread >= 0:
            raise ValueError(f"spread must be >= 0, got {spread!r}")
        self.n = int(n)
        self.dim = int(dim)
        self.n_clusters = int(n_clusters)
        self.seed = int(seed)
        self.spread = float(spread)
        self._cached_block: tuple[int, np.ndarray] | None = None

    def __repr__(self) -> str:
        return (
            f"SyntheticClusters(n={self.n}, dim={self.dim}, n_clusters={self.n_clusters}, "
            f"seed={self.seed}, spread={self.spread})"
        )

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.dim)

    def __len__(self) -> int:
        return self.n

    @cached_property
    def centers(self) -> np.ndarray:
        """The ``(n_clusters, dim)`` float32 cluster centres."""
        rng = np.random.default_rng([self.seed, 0])
        return rng.standard_normal((self.n_clusters, self.dim), dtype=np.float32)

    def __array__(self, dtype=None, copy=None):
        rows = self._rows(np.arange(self.n))
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def __getitem__(self, key):
        row_key, column_key = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(row_key, (int, np.integer)):
            row = int(row_key) + (self.n if row_key < 0 else 0)
            if not 0 <= row < self.n:
                raise IndexError(f"row {row_key} out of range for {self.n} rows")
            result = self._rows(np.array([row]))[0]
        else:
            if isinstance(row_key, slice):
                rows = np.arange(*row_key.indices(self.n))
            else:
                rows = np.asarray(row_key)
                if rows.dtype == bool:
                    if rows.shape != (self.n,):
                        raise IndexError(f"boolean row mask must have shape ({self.n},)")
                    rows = np.flatnonzero(rows)
                elif rows.dtype.kind not in "iu" or rows.ndim != 1:
                    raise IndexError("rows must be an int, a slice, a 1-D integer array or a boolean mask")
                rows = np.where(rows < 0, rows + self.n, rows)
                if rows.size and (rows.min() < 0 or rows.max() >= self.n):
                    raise IndexError(f"row index out of range for {self.n} rows")
            result = self._rows(rows)
            if column_key:
                column_key = (slice(None), *column_key)
        return result[column_key] if column_key else result

    def queries(
        self,
        n_queries: int,
        seed: int = 0,
        *,
        skewed: bool = False,
        hot_query_share: float = 0.8,
        hot_cluster_share: float = 0.2,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw queries from the same distribution as the data.

        Parameters
        ----------
        n_queries : int
            Number of queries.
        seed : int, optional
            Query seed, independent of the data seed (the data is unchanged).
        skewed : bool, optional
            If False, each query picks a cluster uniformly. If True, a random
            ``hot_cluster_share`` of the clusters (at least one) receives a
            ``hot_query_share`` of the queries and the other clusters the rest,
            uniformly within each group: the default is the 80/20 stream that
            makes a page cache pay off.
        hot_query_share, hot_cluster_share : float, optional
            Shares in (0, 1] used when ``skewed``.

        Returns
        -------
        queries : ndarray, shape (n_queries, dim), float32
            Cluster centre plus fresh noise with the data's ``spread``; a query
            is never a copy of a data row.
        clusters : ndarray, shape (n_queries,), int64
            The cluster each query was drawn around, in stream order.
        """
        if int(n_queries) != n_queries or n_queries < 1:
            raise ValueError(f"n_queries must be a positive integer, got {n_queries!r}")
        rng = np.random.default_rng([self.seed, 2, seed])
        if skewed:
            for name, share in (("hot_query_share", hot_query_share), ("hot_cluster_share", hot_cluster_share)):
                if not 0 < share <= 1:
                    raise ValueError(f"{name} must be in (0, 1], got {share!r}")
            n_hot = max(1, round(hot_cluster_share * self.n_clusters))
            by_heat = rng.permutation(self.n_clusters)
            hot, cold = by_heat[:n_hot], by_heat[n_hot:]
            hot_pick = hot[rng.integers(len(hot), size=n_queries)]
            if len(cold) == 0:
                clusters = hot_pick
            else:
                cold_pick = cold[rng.integers(len(cold), size=n_queries)]
                clusters = np.where(rng.random(n_queries) < hot_query_share, hot_pick, cold_pick)
        else:
            clusters = rng.integers(self.n_clusters, size=n_queries)
        queries = rng.standard_normal((n_queries, self.dim), dtype=np.float32)
        queries *= np.float32(self.spread)
        queries += self.centers[clusters]
        return queries, clusters.astype(np.int64)

    def _block(self, block_no: int) -> np.ndarray:
        if self._cached_block is not None and self._cached_block[0] == block_no:
            return self._cached_block[1]
        start = block_no * _SYNTHETIC_BLOCK_ROWS
        n_rows = min(_SYNTHETIC_BLOCK_ROWS, self.n - start)
        rng = np.random.default_rng([self.seed, 1, block_no])
        clusters = rng.integers(self.n_clusters, size=n_rows)
        vectors = rng.standard_normal((n_rows, self.dim), dtype=np.float32)
        vectors *= np.float32(self.spread)
        vectors += self.centers[clusters]
        self._cached_block = (block_no, vectors)
        return vectors

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if len(rows) == 0:
            return out
        # Visit the blocks in order, each once, whatever order the rows come in.
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        first, last = sorted_rows[0] // _SYNTHETIC_BLOCK_ROWS, sorted_rows[-1] // _SYNTHETIC_BLOCK_ROWS
        edges = np.searchsorted(sorted_rows, np.arange(first, last + 2) * _SYNTHETIC_BLOCK_ROWS)
        for block_no, lo, hi in zip(range(first, last + 1), edges[:-1], edges[1:]):
            if lo < hi:
                block = self._block(block_no)
                out[order[lo:hi]] = block[sorted_rows[lo:hi] - block_no * _SYNTHETIC_BLOCK_ROWS]
        return out


def iter_row_chunks(source, chunk_rows: int, dtype=np.float32) -> Iterator[tuple[int, np.ndarray]]:
    """Read a 2-D row source in contiguous chunks.

    Parameters
    ----------
    source : array-like, shape (n, dim)
        A numpy array, memmap, :class:`SyntheticClusters`, or anything with
        ``shape`` and row slicing.
    chunk_rows : int
        Rows per chunk (the last may be shorter).
    dtype : dtype or None, optional
        Cast each chunk to this dtype; None keeps the source's dtype.

    Yields
    ------
    start : int
        Index of the chunk's first row.
    chunk : ndarray, shape (rows, dim)
        C-contiguous copy (or view) of ``source[start:start + rows]``.

    Raises
    ------
    ValueError
        If the source is not 2-D, or (for a floating ``dtype``) a chunk holds
        NaN or infinity: distances to such rows are meaningless, so they are
        refused where they are read rather than silently ranked last.
    """
    n_rows, _ = source_shape(source)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    check_finite = dtype is not None and np.dtype(dtype).kind == "f"
    for start in range(0, n_rows, chunk_rows):
        stop = min(start + chunk_rows, n_rows)
        chunk = np.ascontiguousarray(source[start:stop], dtype=dtype)
        if check_finite and not np.isfinite(chunk).all():
            bad = start + int(np.flatnonzero(~np.isfinite(chunk).all(axis=1))[0])
            raise ValueError(f"row {bad} holds NaN or infinity")
        yield start, chunk


def source_shape(source) -> tuple[int, int]:
    """Return ``(n_rows, dim)`` of a 2-D row source, or raise a clear ValueError."""
    shape = getattr(source, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"expected a 2-D array of vectors (rows x dim), got shape {shape}")
    return int(shape[0]), int(shape[1])


def load_vectors(path, *, format: str | None = None, mmap: bool = True) -> np.ndarray:
    """Load vectors from a ``.fvecs``, ``.bvecs``, ``.ivecs`` or ``.npy`` file.

    Parameters
    ----------
    path : str or Path
        The file.
    format : {"fvecs", "bvecs", "ivecs", "npy"}, optional
        Overrides the format implied by the file's suffix.
    mmap : bool, optional
        If True (default), return a read-only memory map: nothing is read until
        used, so files larger than RAM work with the streaming consumers. If
        False, read the whole file into a C-contiguous array.

    Returns
    -------
    ndarray, shape (n, dim)
        float32 (fvecs), uint8 (bvecs), int32 (ivecs), or the stored dtype
        (npy). For a memory-mapped ``*vecs`` file this is a strided view that
        skips the per-row dimension words; consumers copy rows out in chunks.

    Raises
    ------
    VectorFileError
        On an unknown suffix, or a malformed file: empty, a size that is not a
        whole number of rows, a non-positive or impossible dimension, a row
        whose dimension word disagrees with the first, an unreadable or non-2-D
        or non-numeric ``.npy``.

    Notes
    -----
    With ``mmap=True`` a ``*vecs`` file's size and the dimension words of its
    first and last rows are checked (which catches truncation and a file of
    another ``*vecs`` type); the words in between are only checked with
    ``mmap=False``, which reads them anyway.
    """
    path = Path(path)
    fmt = _format_of(path, format)
    if fmt == "npy":
        return _load_npy(path, mmap)
    return _load_xvecs(path, fmt, mmap)


def save_vectors(path, vectors, *, format: str | None = None, chunk_rows: int = 65536) -> None:
    """Write a 2-D row source to ``.fvecs``, ``.bvecs``, ``.ivecs`` or ``.npy``, streaming.

    Parameters
    ----------
    path : str or Path
        Destination; its suffix picks the format unless ``format`` is given.
    vectors : array-like, shape (n, dim)
        Any row source (a memmap or :class:`SyntheticClusters` is read in chunks).
    format : {"fvecs", "bvecs", "ivecs", "npy"}, optional
        Overrides the suffix.
    chunk_rows : int, optional
        Rows read and written per step.

    Raises
    ------
    VectorFileError
        On an unknown suffix.
    ValueError
        If there are no rows; if values do not fit the format exactly (bvecs
        needs integers 0..255, ivecs int32 integers); if fvecs input holds NaN
        or infinity. float64 input to fvecs is rounded to float32.

    Notes
    -----
    ``.npy`` keeps the source's dtype; the ``*vecs`` formats cast to theirs.
    """
    path = Path(path)
    fmt = _format_of(path, format)
    n_rows, dim = source_shape(vectors)
    if n_rows == 0:
        raise ValueError("no rows to write (these formats cannot represent an empty set)")
    if fmt == "npy":
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(vectors.dtype), shape=(n_rows, dim))
        for start, chunk in iter_row_chunks(vectors, chunk_rows, dtype=None):
            out[start : start + len(chunk)] = chunk
        out.flush()
        del out
        return
    component = _XVECS_COMPONENTS[fmt]
    row_dtype = np.dtype([("dim", "<i4"), ("vector", component, (dim,))])
    with open(path, "wb") as f:
        for start, chunk in iter_row_chunks(vectors, chunk_rows, dtype=np.float32 if fmt == "fvecs" else None):
            rows = np.empty(len(chunk), dtype=row_dtype)
            rows["dim"] = dim
            rows["vector"] = _cast_exactly(chunk, component, fmt, start)
            f.write(rows.tobytes())


def _cast_exactly(chunk: np.ndarray, component: np.dtype, fmt: str, start: int) -> np.ndarray:
    if component.kind == "f":
        return chunk
    with np.errstate(invalid="ignore"):
        cast = chunk.astype(component)
        fits = cast == chunk
    if not fits.all():
        bad = start + int(np.flatnonzero(~fits.all(axis=1))[0])
        info = np.iinfo(component)
        raise ValueError(f"row {bad} has a value that is not an integer in [{info.min}, {info.max}], as .{fmt} needs")
    return cast


def _format_of(path: Path, format: str | None) -> str:
    fmt = format if format is not None else path.suffix.lower().lstrip(".")
    if fmt not in _FORMATS:
        hint = "" if format is not None else "; pass format="
        raise VectorFileError(f"{path}: unknown vector format {fmt!r} (expected one of {', '.join(_FORMATS)}{hint})")
    return fmt


def _load_npy(path: Path, mmap: bool) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise VectorFileError(f"{path}: not a readable .npy file ({exc})") from exc
    if not isinstance(array, np.ndarray):
        raise VectorFileError(f"{path}: holds an archive of several arrays, not one .npy array")
    if array.ndim != 2:
        raise VectorFileError(f"{path}: expected a 2-D array (rows x dim), found shape {array.shape}")
    if array.dtype.kind not in "fiu":
        raise VectorFileError(f"{path}: expected a real numeric dtype, found {array.dtype}")
    return array


def _load_xvecs(path: Path, fmt: str, mmap: bool) -> np.ndarray:
    component = _XVECS_COMPONENTS[fmt]
    size = os.path.getsize(path)
    if size < 4:
        raise VectorFileError(f"{path}: {size} bytes is too short for .{fmt} (each row starts with a 4-byte dimension)")
    with open(path, "rb") as f:
        dim = int.from_bytes(f.read(4), "little", signed=True)
    if dim <= 0 or 4 + dim * component.itemsize > size:
        raise VectorFileError(
            f"{path}: first row declares dimension {dim}, impossible in a {size}-byte .{fmt} file "
            f"(truncated, or a file of another format?)"
        )
    row_dtype = np.dtype([("dim", "<i4"), ("vector", component, (dim,))])
    if size % row_dtype.itemsize:
        raise VectorFileError(
            f"{path}: {size} bytes is not a whole number of {row_dtype.itemsize}-byte rows "
            f"(4 + {dim} x {component.itemsize}): truncated, or not a .{fmt} file"
        )
    n_rows = size // row_dtype.itemsize
    if mmap:
        rows = np.memmap(path, dtype=row_dtype, mode="r", shape=(n_rows,))
        checked_rows = np.array([0, n_rows - 1])
    else:
        rows = np.fromfile(path, dtype=row_dtype)
        checked_rows = np.arange(n_rows)
    dims = np.asarray(rows["dim"][checked_rows])
    if (dims != dim).any():
        bad = int(np.flatnonzero(dims != dim)[0])
        raise VectorFileError(
            f"{path}: row {int(checked_rows[bad])} declares dimension {int(dims[bad])} but the first row {dim} "
            f"(corrupt, or not a .{fmt} file)"
        )
    vectors = rows["vector"]
    return vectors if mmap else np.ascontiguousarray(vectors)
