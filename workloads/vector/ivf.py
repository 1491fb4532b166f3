"""IVF index: k-means training, list assignment, and the on-disk file (build and open).

An IVF ("inverted file") index splits the vectors into ``n_lists`` posting lists,
one per k-means centroid; a search ranks only the vectors of the ``nprobe``
lists whose centroids are nearest the query. Here the centroids and the list
table are small and live in GPU memory, while the lists' full-precision float32
vectors stay on storage, each list a contiguous, page-aligned run that a kernel
reads through the gids page cache.

Typical use::

    centroids = train_kmeans(vectors, n_lists=1024, seed=0)
    index = build_ivf("base.ivf", vectors, centroids, page_size=4096)
    # later, or in another process
    index = open_ivf("base.ivf")
    # the runtime maps the vectors section as one file-backed float32 array:
    section = runtime.open_array(index.path, np.float32, shape=index.vectors_nbytes // 4,
                                 offset=index.vectors_offset)
    # and a kernel reads component d of vector j of list l as
    #   gids.read(section.handle, list_starts[l] + j * dim + d)
    # with index.centroids, index.list_starts and index.list_lengths copied to GPU memory.

The byte layout is in ``docs/formats.md (vector section)``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .datasets import iter_row_chunks, source_shape
from .reference import Progress, _check_metric, exact_search, probe_lists

__all__ = [
    "IndexFormatError",
    "IVFIndex",
    "train_kmeans",
    "assign_lists",
    "build_ivf",
    "open_ivf",
    "MAGIC",
    "FORMAT_VERSION",
    "HEADER_NBYTES",
    "LIST_TABLE_DTYPE",
]

MAGIC = b"GIDSIVF\0"
FORMAT_VERSION = 1
HEADER_NBYTES = 128
# Small sections start on 64-byte (cache-line) boundaries; the vectors section
# and every list in it on a page boundary.
_SECTION_ALIGNMENT = 64
# The gids runtime's smallest page, and the sector size O_DIRECT reads need.
_MIN_PAGE_SIZE = 512
_HEADER = struct.Struct("<8sIIIIQQQQQQQQ")
_METRIC_CODES = {"l2": 0, "ip": 1}
# int64 rather than uint64: numpy promotes uint64 mixed with int64 to float64,
# which would silently lose exactness in index arithmetic.
LIST_TABLE_DTYPE = np.dtype([("start", "<i8"), ("length", "<i8"), ("id_start", "<i8")])

# As in faiss: k-means trains on at most this many sampled vectors per centroid
# by default; more adds time, not quality.
_MAX_SAMPLE_PER_CENTROID = 256
# Relative perturbation that splits a centroid in two to refill an empty cluster (faiss's value).
_SPLIT_EPS = 1.0 / 1024


class IndexFormatError(ValueError):
    """An IVF index file is malformed, truncated, or of an unsupported version."""


@dataclass(frozen=True, eq=False)
class IVFIndex:
    """An opened IVF index file.

    Attributes
    ----------
    path : Path
    dim : int
    metric : {"l2", "ip"}
    n_vectors, n_lists : int
    page_size : int
        Bytes; the vectors section and every list start on a multiple of it.
    centroids : ndarray, float32, shape (n_lists, dim)
        In memory (small): what a kernel keeps in GPU memory to pick lists.
    list_starts : ndarray, int64, shape (n_lists,)
        Element (float32) index of each list's first component in the vectors
        section; ``list_starts * 4`` is a multiple of ``page_size``.
    list_lengths : ndarray, int64, shape (n_lists,)
        Vectors per list (lists may be empty).
    id_starts : ndarray, int64, shape (n_lists,)
        Index in ``ids`` of each list's first id (the running sum of lengths).
    ids : ndarray, int64, shape (n_vectors,)
        Read-only memmap: the id (row number in the build input) of every
        stored vector, list by list, ascending within a list.
    vectors : ndarray, float32, shape (vectors_nbytes // 4,)
        Read-only memmap of the whole vectors section, padding included.
    vectors_offset, vectors_nbytes : int
        Byte offset and size of the vectors section in the file: what the
        runtime needs to map it as one file-backed float32 array.
    """

    path: Path
    dim: int
    metric: str
    n_vectors: int
    n_lists: int
    page_size: int
    centroids: np.ndarray
    list_starts: np.ndarray
    list_lengths: np.ndarray
    id_starts: np.ndarray
    ids: np.ndarray
    vectors: np.ndarray
    vectors_offset: int
    vectors_nbytes: int

    @property
    def list_pages(self) -> np.ndarray:
        """Pages each list occupies, the fewest its bytes can: reading list ``l`` costs ``list_pages[l]`` page reads."""
        return -(-(self.list_lengths * self.dim * 4) // self.page_size)

    def list_vectors(self, list_no: int) -> np.ndarray:
        """The ``(length, dim)`` float32 vectors of one list (a view of the memmap)."""
        start, length = int(self.list_starts[list_no]), int(self.list_lengths[list_no])
        return self.vectors[start : start + length * self.dim].reshape(length, self.dim)

    def list_ids(self, list_no: int) -> np.ndarray:
        """The int64 ids of one list's vectors, in stored order."""
        start = int(self.id_starts[list_no])
        return self.ids[start : start + int(self.list_lengths[list_no])]


def train_kmeans(
    vectors,
    n_lists: int,
    *,
    metric: str = "l2",
    n_iter: int = 20,
    sample_size: int | None = None,
    seed: int = 0,
    backend: str = "numpy",
    progress: Progress | None = None,
) -> np.ndarray:
    """Train IVF centroids with k-means on a random sample of the vectors.

    Parameters
    ----------
    vectors : array-like, shape (n, dim)
        Any row source; only the sample is read into memory.
    n_lists : int
        Number of centroids (posting lists).
    metric : {"l2", "ip"}
        ``"ip"`` trains spherical k-means (centroids normalised to unit length
        after each update), for which nearest-by-L2 and largest-inner-product
        assignment agree, so the lists suit inner-product search.
    n_iter : int, optional
        Maximum Lloyd iterations; the numpy backend stops early once no
        assignment changes.
    sample_size : int, optional
        Training vectors, drawn without replacement; default
        ``min(n, 256 * n_lists)``. Must be between ``n_lists`` and ``n``.
    seed : int, optional
        Fixes the sample and the initial centroids: the same seed, data and
        backend give the same centroids on a given machine.
    backend : {"numpy", "faiss"}, optional
        ``"faiss"`` runs ``faiss.Kmeans`` on the same sample (much faster for
        large ``n_lists``; install the optional ``faiss-cpu``). Its
        initialisation differs, so its centroids differ from numpy's.
    progress : callable, optional
        Called as ``progress("train", iterations_done, n_iter)``.

    Returns
    -------
    ndarray, float32, shape (n_lists, dim)

    Raises
    ------
    ValueError
        On bad sizes, metric or backend, or NaN/infinity in the sample.
    ImportError
        If ``backend="faiss"`` and faiss is not installed.

    Notes
    -----
    The numpy backend is Lloyd's algorithm: random distinct sample points as
    initial centroids, assignment by :func:`~workloads.vector.reference.probe_lists`
    (the rule the search uses), centroids as float64 means. A cluster left empty
    is refilled as faiss does: a large cluster's centroid is split in two by a
    small symmetric perturbation. With fewer distinct points than ``n_lists``,
    some centroids necessarily end up duplicated and their lists empty.
    """
    n_rows, dim = source_shape(vectors)
    metric = _check_metric(metric)
    for name, value in (("n_lists", n_lists), ("n_iter", n_iter)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if backend not in ("numpy", "faiss"):
        raise ValueError(f"backend must be 'numpy' or 'faiss', got {backend!r}")
    if sample_size is None:
        sample_size = min(n_rows, _MAX_SAMPLE_PER_CENTROID * n_lists)
    if not n_lists <= sample_size <= n_rows:
        raise ValueError(
            f"k-means with {n_lists} lists needs a sample of {n_lists} to n = {n_rows} vectors, got {sample_size}"
        )
    rng = np.random.default_rng(seed)
    sample = _read_sample(vectors, sample_size, rng)
    if backend == "faiss":
        centroids = _train_faiss(sample, n_lists, metric, n_iter, seed)
        if progress is not None:
            progress("train", n_iter, n_iter)
        return centroids
    return _train_numpy(sample, n_lists, metric, n_iter, rng, progress)


def assign_lists(
    vectors,
    centroids,
    *,
    metric: str = "l2",
    chunk_rows: int = 65536,
    progress: Progress | None = None,
) -> np.ndarray:
    """The list (nearest centroid) of every vector, streaming the vectors.

    Parameters
    ----------
    vectors : array-like, shape (n, dim)
    centroids : ndarray, shape (n_lists, dim)
    metric : {"l2", "ip"}
    chunk_rows : int, optional
        Vectors assigned per step.
    progress : callable, optional
        Called as ``progress("assign", rows_done, n)``.

    Returns
    -------
    ndarray, int64, shape (n,)
        By :func:`~workloads.vector.reference.probe_lists` with ``nprobe=1``, so a
        query equal to an indexed vector probes that vector's list first.
    """
    n_rows, dim = source_shape(vectors)
    centroids = _as_centroids(centroids, dim)
    labels = np.empty(n_rows, dtype=np.int64)
    for start, chunk in iter_row_chunks(vectors, chunk_rows):
        stop = start + len(chunk)
        labels[start:stop] = probe_lists(chunk, centroids, 1, metric)[:, 0]
        if progress is not None:
            progress("assign", stop, n_rows)
    return labels


def build_ivf(
    path,
    vectors,
    centroids,
    *,
    metric: str = "l2",
    page_size: int = 4096,
    chunk_rows: int = 65536,
    progress: Progress | None = None,
) -> IVFIndex:
    """Assign the vectors to lists and write the index file, streaming.

    Parameters
    ----------
    path : str or Path
        Destination. Written as ``<path>.partial`` and renamed when complete, so
        ``path`` never holds a half-written index.
    vectors : array-like, shape (n, dim)
        Any row source; it is read twice (assign, then write), ``chunk_rows`` at
        a time. A vector's id is its row number.
    centroids : ndarray, shape (n_lists, dim)
        E.g. from :func:`train_kmeans` (with the same ``metric``).
    metric : {"l2", "ip"}
        Recorded in the file; decides assignment and search.
    page_size : int, optional
        Bytes; a power of two, at least 512. Use the gids cache page size (or a
        multiple of it): then every list starts on a cache page and reading a
        list touches ``ceil(length * dim * 4 / page_size)`` pages, the fewest possible.
    chunk_rows : int, optional
        Vectors assigned per step.
    progress : callable, optional
        Called as ``progress("assign", rows_done, n)`` then ``progress("write", rows_done, n)``.

    Returns
    -------
    IVFIndex
        The written file, opened.

    Raises
    ------
    ValueError
        On a dimension mismatch, a bad page size or metric, no vectors, or
        NaN/infinity in the vectors or centroids.

    Notes
    -----
    Memory: up to 32 bytes per vector (its list, id, rank and destination, int64)
    besides one chunk; 8 while writing.
    The vectors section is filled through a writable memmap of the
    pre-sized file, each source chunk scattered to its lists' places, so the
    source is read sequentially once more and never held whole.
    """
    path = Path(path)
    n_rows, dim = source_shape(vectors)
    if n_rows == 0:
        raise ValueError("no vectors to index")
    metric = _check_metric(metric)
    if int(page_size) != page_size or page_size < _MIN_PAGE_SIZE or page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two of at least {_MIN_PAGE_SIZE} bytes, got {page_size!r}")
    centroids = _as_centroids(centroids, dim)
    n_lists = len(centroids)

    labels = assign_lists(vectors, centroids, metric=metric, chunk_rows=chunk_rows, progress=progress)
    list_lengths = np.bincount(labels, minlength=n_lists).astype(np.int64)
    ids = np.argsort(labels, kind="stable")  # grouped by list, ascending within a list
    id_starts = np.cumsum(list_lengths) - list_lengths
    centroids_offset, list_table_offset, ids_offset, vectors_offset = _section_offsets(dim, n_rows, n_lists, page_size)
    list_starts, vectors_nbytes = _list_starts(list_lengths, dim, page_size)
    # Element index, in the vectors section, of each input row's first component.
    rank_in_list = np.empty(n_rows, dtype=np.int64)
    rank_in_list[ids] = np.arange(n_rows) - np.repeat(id_starts, list_lengths)
    destinations = list_starts[labels] + rank_in_list * dim
    del labels, rank_in_list

    table = np.empty(n_lists, dtype=LIST_TABLE_DTYPE)
    table["start"], table["length"], table["id_start"] = list_starts, list_lengths, id_starts
    header = _HEADER.pack(
        MAGIC, FORMAT_VERSION, HEADER_NBYTES, dim, _METRIC_CODES[metric], n_rows, n_lists, page_size,
        centroids_offset, list_table_offset, ids_offset, vectors_offset, vectors_nbytes,
    ).ljust(HEADER_NBYTES, b"\0")

    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as f:
            f.write(header)
            for offset, section in (
                (centroids_offset, centroids.astype("<f4", copy=False)),
                (list_table_offset, table),
                (ids_offset, ids.astype("<i8", copy=False)),
            ):
                f.seek(offset)  # skipped bytes read back as zeros
                f.write(section.reshape(-1).view(np.uint8))
            f.truncate(vectors_offset + vectors_nbytes)
        del ids, table
        out = np.memmap(partial, dtype="<f4", mode="r+", offset=vectors_offset, shape=(vectors_nbytes // 4,))
        columns = np.arange(dim)
        # Small chunks: the scatter index is 8 bytes per element written.
        for start, chunk in iter_row_chunks(vectors, max(1, (1 << 21) // dim)):
            stop = start + len(chunk)
            out[destinations[start:stop, None] + columns] = chunk
            if progress is not None:
                progress("write", stop, n_rows)
        out.flush()
        del out
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return open_ivf(path)


def open_ivf(path) -> IVFIndex:
    """Open an IVF index file, checking its structure.

    Reads the header, centroids and list table into memory and memory-maps the
    ids and the vectors section (nothing of those is read until used).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    IVFIndex

    Raises
    ------
    IndexFormatError
        If the file is not an index (magic), of another format version, shorter
        or longer than its header says, or its header or list table disagree with
        the layout (see ``docs/formats.md (vector section)``), or a centroid is not finite.
    FileNotFoundError
        If there is no file.

    Notes
    -----
    Every offset, list start and the file size are checked against the layout;
    the ids' values are not (that would read the whole section).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_NBYTES)
    if len(head) < _HEADER.size:
        raise IndexFormatError(f"{path}: {size} bytes is too short for an IVF index header")
    (magic, version, header_nbytes, dim, metric_code, n_vectors, n_lists, page_size,
     *stored_offsets, vectors_nbytes) = _HEADER.unpack_from(head)
    if magic != MAGIC:
        raise IndexFormatError(f"{path}: not a gids IVF index (starts with {magic!r}, expected {MAGIC!r})")
    if version != FORMAT_VERSION:
        raise IndexFormatError(f"{path}: IVF format version {version}; this code reads version {FORMAT_VERSION}")
    if header_nbytes != HEADER_NBYTES or len(head) < HEADER_NBYTES:
        raise IndexFormatError(f"{path}: header of {min(header_nbytes, len(head))} bytes, expected {HEADER_NBYTES}")
    metric = {code: name for name, code in _METRIC_CODES.items()}.get(metric_code)
    if metric is None:
        raise IndexFormatError(f"{path}: unknown metric code {metric_code}")
    if dim < 1 or n_vectors < 1 or n_lists < 1:
        raise IndexFormatError(f"{path}: dim {dim}, n_vectors {n_vectors} and n_lists {n_lists} must all be >= 1")
    if page_size < _MIN_PAGE_SIZE or page_size & (page_size - 1):
        raise IndexFormatError(f"{path}: page size {page_size} is not a power of two >= {_MIN_PAGE_SIZE}")
    expected_offsets = _section_offsets(dim, n_vectors, n_lists, page_size)
    if tuple(stored_offsets) != expected_offsets:
        raise IndexFormatError(
            f"{path}: section offsets {tuple(stored_offsets)} differ from the version-{FORMAT_VERSION} layout "
            f"{expected_offsets} for these sizes (corrupt header)"
        )
    centroids_offset, list_table_offset, ids_offset, vectors_offset = expected_offsets
    if size != vectors_offset + vectors_nbytes:
        problem = "truncated" if size < vectors_offset + vectors_nbytes else "has trailing bytes"
        raise IndexFormatError(f"{path}: {size} bytes but the header describes {vectors_offset + vectors_nbytes}: {problem}")

    table = np.fromfile(path, dtype=LIST_TABLE_DTYPE, count=n_lists, offset=list_table_offset)
    list_lengths = table["length"].astype(np.int64)
    if (list_lengths < 0).any() or list_lengths.sum() != n_vectors:
        raise IndexFormatError(f"{path}: list lengths are negative or do not add up to n_vectors = {n_vectors}")
    list_starts, expected_nbytes = _list_starts(list_lengths, dim, page_size)
    id_starts = np.cumsum(list_lengths) - list_lengths
    for field, expected in (("start", list_starts), ("id_start", id_starts)):
        wrong = np.flatnonzero(table[field] != expected)
        if wrong.size:
            raise IndexFormatError(
                f"{path}: list {wrong[0]} has {field} {table[field][wrong[0]]}, the layout gives {expected[wrong[0]]}"
            )
    if vectors_nbytes != expected_nbytes:
        raise IndexFormatError(f"{path}: vectors section of {vectors_nbytes} bytes, the list table gives {expected_nbytes}")
    centroids = np.fromfile(path, dtype="<f4", count=n_lists * dim, offset=centroids_offset).reshape(n_lists, dim)
    if not np.isfinite(centroids).all():
        raise IndexFormatError(f"{path}: a centroid holds NaN or infinity")
    return IVFIndex(
        path=path,
        dim=dim,
        metric=metric,
        n_vectors=n_vectors,
        n_lists=n_lists,
        page_size=page_size,
        centroids=centroids,
        list_starts=list_starts,
        list_lengths=list_lengths,
        id_starts=id_starts,
        ids=np.memmap(path, dtype="<i8", mode="r", offset=ids_offset, shape=(n_vectors,)),
        vectors=np.memmap(path, dtype="<f4", mode="r", offset=vectors_offset, shape=(vectors_nbytes // 4,)),
        vectors_offset=vectors_offset,
        vectors_nbytes=vectors_nbytes,
    )


def _align(value, alignment: int):
    """Round ``value`` (int or int array) up to a multiple of ``alignment``."""
    return -(-value // alignment) * alignment


def _section_offsets(dim: int, n_vectors: int, n_lists: int, page_size: int) -> tuple[int, int, int, int]:
    """Byte offsets of the centroids, list table, ids and vectors sections."""
    centroids_offset = HEADER_NBYTES
    list_table_offset = _align(centroids_offset + n_lists * dim * 4, _SECTION_ALIGNMENT)
    ids_offset = _align(list_table_offset + n_lists * LIST_TABLE_DTYPE.itemsize, _SECTION_ALIGNMENT)
    vectors_offset = _align(ids_offset + n_vectors * 8, page_size)
    return centroids_offset, list_table_offset, ids_offset, vectors_offset


def _list_starts(list_lengths: np.ndarray, dim: int, page_size: int) -> tuple[np.ndarray, int]:
    """Each list's start element in the vectors section, and the section's size in bytes.

    Lists follow each other in list order, each padded up to a whole page; an
    empty list takes no space (its start is where the next list starts).
    """
    padded_nbytes = _align(list_lengths * (dim * 4), page_size)
    start_nbytes = np.cumsum(padded_nbytes) - padded_nbytes
    return start_nbytes // 4, int(padded_nbytes.sum())


def _as_centroids(centroids, dim: int) -> np.ndarray:
    array = np.asarray(centroids)
    if array.ndim != 2 or len(array) == 0:
        raise ValueError(f"centroids must be a non-empty 2-D array (n_lists x dim), got shape {array.shape}")
    if array.shape[1] != dim:
        raise ValueError(f"dimension mismatch: the centroids have dimension {array.shape[1]} but the vectors {dim}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError("a centroid holds NaN or infinity")
    return array


def _read_sample(vectors, sample_size: int, rng: np.random.Generator) -> np.ndarray:
    n_rows, dim = source_shape(vectors)
    if sample_size == n_rows:
        sample = np.empty((n_rows, dim), dtype=np.float32)
        for start, chunk in iter_row_chunks(vectors, 65536):
            sample[start : start + len(chunk)] = chunk
        return sample
    # Sorted rows: a memmapped source is then read front to back.
    rows = np.sort(rng.choice(n_rows, size=sample_size, replace=False))
    sample = np.ascontiguousarray(vectors[rows], dtype=np.float32)
    if not np.isfinite(sample).all():
        raise ValueError(f"row {int(rows[np.flatnonzero(~np.isfinite(sample).all(axis=1))[0]])} holds NaN or infinity")
    return sample


def _train_numpy(sample, n_lists, metric, n_iter, rng, progress) -> np.ndarray:
    centroids = sample[rng.choice(len(sample), size=n_lists, replace=False)]
    if metric == "ip":
        centroids = _unit_rows(centroids)
    previous_labels = None
    for iteration in range(1, n_iter + 1):
        labels = exact_search(sample, centroids, 1, metric=metric)[1][:, 0]
        if previous_labels is not None and np.array_equal(labels, previous_labels):
            # Converged: the update would give the same centroids.
            if progress is not None:
                progress("train", n_iter, n_iter)
            break
        centroids = _update_centroids(sample, labels, centroids, rng, metric)
        previous_labels = labels
        if progress is not None:
            progress("train", iteration, n_iter)
    return centroids


def _update_centroids(sample, labels, centroids, rng, metric) -> np.ndarray:
    n_lists, dim = centroids.shape
    counts = np.bincount(labels, minlength=n_lists)
    filled = np.flatnonzero(counts)
    order = np.argsort(labels, kind="stable")
    sums = np.add.reduceat(sample[order], (np.cumsum(counts) - counts)[filled], axis=0, dtype=np.float64)
    updated = centroids.astype(np.float64)
    updated[filled] = sums / counts[filled, None]
    split_direction = np.where(np.arange(dim) % 2 == 0, _SPLIT_EPS, -_SPLIT_EPS)
    for empty in np.flatnonzero(counts == 0):
        # Split a cluster chosen with probability growing with its size (as faiss);
        # if every cluster has at most one point there is nothing to split.
        weights = np.maximum(counts - 1, 0).astype(np.float64)
        if weights.sum() == 0:
            break
        donor = rng.choice(n_lists, p=weights / weights.sum())
        updated[empty] = updated[donor] * (1 + split_direction)
        updated[donor] = updated[donor] * (1 - split_direction)
        counts[empty] = counts[donor] // 2
        counts[donor] -= counts[empty]
    if metric == "ip":
        updated = _unit_rows(updated)
    return updated.astype(np.float32)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1)


def _train_faiss(sample, n_lists, metric, n_iter, seed) -> np.ndarray:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError("train_kmeans(backend='faiss') needs faiss: pip install faiss-cpu") from exc
    kmeans = faiss.Kmeans(
        sample.shape[1],
        n_lists,
        niter=n_iter,
        seed=seed % 2**31,  # faiss takes a C int
        spherical=metric == "ip",
        # The sample is already drawn: stop faiss from subsampling or warning about its size.
        max_points_per_centroid=-(-len(sample) // n_lists),
        min_points_per_centroid=1,
        verbose=False,
    )
    kmeans.train(sample)
    return np.ascontiguousarray(kmeans.centroids, dtype=np.float32)
