"""The on-disk CSR graph format: one definition, a streaming writer, a reader, a verifier.

Byte layout (all integers little-endian; full description in ``docs/formats.md (graph section)``)::

    0      header, 4096 bytes: fixed fields (96 bytes), reserved zeros, JSON metadata at 256
    4096   offsets section: (n_vertices + 1) int64, offsets[v] .. offsets[v+1] index v's neighbours
    A      neighbours section: n_edges int32 (n_vertices < 2**31) or int64, at A = 4096-aligned
    end    zero padding to a multiple of 4096 bytes

Both sections start on a 4096-byte boundary, so a GPU kernel can keep ``offsets`` in device memory
and read ``neighbours[offsets[v]:offsets[v+1]]`` through the page cache from a file-backed array
that starts at ``neighbours_offset``, with pages that line up with the file's pages (and with
O_DIRECT's alignment rules); the padded end means the last page is a whole page.

The graph is undirected and stored symmetric: an input edge (u, v) with u != v appears as v in u's
list and as u in v's list; a self loop (u, u) appears once, in u's list. Adjacency lists are sorted
ascending. Duplicates and self loops are kept unless the writer is told to drop them (Graph500 keeps
them; its BFS must tolerate them).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple

import numpy as np
from numba import njit

from . import parallel
from .edges import DEFAULT_CHUNK_EDGES, EdgeSource

MAGIC = b"GIDSCSR\x00"
FORMAT_VERSION = 1
HEADER_SIZE = 4096
SECTION_ALIGN = 4096
METADATA_OFFSET = 256
MAX_METADATA_BYTES = HEADER_SIZE - METADATA_OFFSET

#: Every undirected edge is stored in both endpoints' lists (self loops once).
FLAG_SYMMETRIC = 1 << 0
#: Each adjacency list is sorted ascending.
FLAG_SORTED = 1 << 1
#: Self loops were dropped when the file was built.
FLAG_NO_SELF_LOOPS = 1 << 2
#: Repeated edges were dropped when the file was built.
FLAG_NO_DUPLICATES = 1 << 3
_KNOWN_FLAGS = FLAG_SYMMETRIC | FLAG_SORTED | FLAG_NO_SELF_LOOPS | FLAG_NO_DUPLICATES

# magic, version, flags, n_vertices, n_edges, n_input_edges, n_self_loops, neighbour_itemsize,
# section_align, offsets_offset, neighbours_offset, file_size, offsets_crc32, neighbours_crc32,
# metadata_len, header_crc32
_FIXED = struct.Struct("<8sIIQQQQIIQQQIIII")
_HEADER_CRC_AT = _FIXED.size - 4
assert _FIXED.size == 96 and METADATA_OFFSET >= _FIXED.size

_OFFSET_DTYPE = np.dtype("<i8")
_INT32_DTYPE, _INT64_DTYPE = np.dtype("<i4"), np.dtype("<i8")

Progress = Callable[[int, int], None]


class GraphFormatError(ValueError):
    """A graph file or edge-list input is malformed: bad magic, truncated, corrupt, inconsistent."""


def neighbour_dtype_for(n_vertices: int) -> np.dtype:
    """On-disk neighbour dtype: int32 when every id fits (``n_vertices < 2**31``), else int64."""
    return _INT32_DTYPE if n_vertices < 2**31 else _INT64_DTYPE


def _align_up(n: int, alignment: int = SECTION_ALIGN) -> int:
    return -(-n // alignment) * alignment


def section_layout(n_vertices: int, n_edges: int, itemsize: int) -> tuple[int, int, int]:
    """Byte layout of a file: ``(offsets_offset, neighbours_offset, file_size)``."""
    offsets_offset = HEADER_SIZE
    neighbours_offset = _align_up(offsets_offset + (n_vertices + 1) * _OFFSET_DTYPE.itemsize)
    file_size = _align_up(neighbours_offset + n_edges * itemsize)
    return offsets_offset, neighbours_offset, file_size


@dataclass(frozen=True)
class CSRHeader:
    """The fixed header of a CSR file (see ``docs/formats.md (graph section)`` for the byte layout).

    Attributes
    ----------
    n_vertices : int
    n_edges : int
        Entries in the neighbours section (directed arcs): two per non-loop edge, one per loop.
    n_input_edges : int
        Edge tuples read from the input, before any were dropped: Graph500's M.
    n_self_loops : int
        Self-loop entries stored in the neighbours section.
    neighbour_dtype : numpy.dtype
        ``<i4`` or ``<i8``.
    flags : int
        ``FLAG_*`` bits.
    offsets_offset, neighbours_offset, file_size : int
        Byte offsets of the sections and total size, all multiples of 4096.
    offsets_crc32, neighbours_crc32 : int
        zlib CRC-32 of each section's bytes (padding excluded).
    metadata : dict
        Free-form provenance (e.g. the generator's parameters), stored as JSON.
    """

    n_vertices: int
    n_edges: int
    n_input_edges: int
    n_self_loops: int
    neighbour_dtype: np.dtype
    flags: int
    offsets_offset: int
    neighbours_offset: int
    file_size: int
    offsets_crc32: int
    neighbours_crc32: int
    metadata: dict = field(default_factory=dict)
    version: int = FORMAT_VERSION

    def pack(self) -> bytes:
        """The 4096-byte header block, checksum filled in."""
        meta = json.dumps(self.metadata, sort_keys=True).encode() if self.metadata else b""
        if len(meta) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is {len(meta)} bytes of JSON; at most {MAX_METADATA_BYTES} fit")
        block = bytearray(HEADER_SIZE)
        _FIXED.pack_into(block, 0, MAGIC, self.version, self.flags, self.n_vertices, self.n_edges,
                         self.n_input_edges, self.n_self_loops, self.neighbour_dtype.itemsize,
                         SECTION_ALIGN, self.offsets_offset, self.neighbours_offset, self.file_size,
                         self.offsets_crc32, self.neighbours_crc32, len(meta), 0)
        block[METADATA_OFFSET:METADATA_OFFSET + len(meta)] = meta
        # The CRC covers the whole block with its own field zeroed, reserved bytes included.
        struct.pack_into("<I", block, _HEADER_CRC_AT, zlib.crc32(block))
        return bytes(block)

    @classmethod
    def unpack(cls, block: bytes, where: str = "<header>") -> "CSRHeader":
        """Parse and check a header block; ``where`` names the file in error messages.

        Raises
        ------
        GraphFormatError
            Wrong magic, unknown version or flags, bad checksum, or a layout that does not add up.
        """
        if len(block) < HEADER_SIZE:
            raise GraphFormatError(f"{where}: truncated: {len(block)} bytes, shorter than the "
                                   f"{HEADER_SIZE}-byte header")
        (magic, version, flags, n_vertices, n_edges, n_input_edges, n_self_loops, itemsize, align,
         offsets_offset, neighbours_offset, file_size, offsets_crc, neighbours_crc, meta_len,
         header_crc) = _FIXED.unpack_from(block)
        if magic != MAGIC:
            raise GraphFormatError(f"{where}: not a gids CSR graph file (magic {magic!r}, "
                                   f"expected {MAGIC!r})")
        if version != FORMAT_VERSION:
            raise GraphFormatError(f"{where}: format version {version}; this reader knows "
                                   f"version {FORMAT_VERSION}")
        zeroed = bytearray(block[:HEADER_SIZE])
        struct.pack_into("<I", zeroed, _HEADER_CRC_AT, 0)
        if zlib.crc32(zeroed) != header_crc:
            raise GraphFormatError(f"{where}: header checksum mismatch: the header is corrupt")
        # Past the checksum, a mismatch means a writer bug or a crafted file; still say what.
        if flags & ~_KNOWN_FLAGS:
            raise GraphFormatError(f"{where}: unknown flag bits {flags & ~_KNOWN_FLAGS:#x}")
        if itemsize != neighbour_dtype_for(n_vertices).itemsize:
            raise GraphFormatError(f"{where}: neighbour itemsize {itemsize} does not match "
                                   f"n_vertices={n_vertices}")
        if align != SECTION_ALIGN:
            raise GraphFormatError(f"{where}: section alignment {align}, expected {SECTION_ALIGN}")
        expected = section_layout(n_vertices, n_edges, itemsize)
        if (offsets_offset, neighbours_offset, file_size) != expected:
            raise GraphFormatError(
                f"{where}: section layout (offsets at {offsets_offset}, neighbours at "
                f"{neighbours_offset}, size {file_size}) does not match n_vertices={n_vertices}, "
                f"n_edges={n_edges}: expected {expected}")
        if n_self_loops > n_edges or meta_len > MAX_METADATA_BYTES:
            raise GraphFormatError(f"{where}: inconsistent counts in header")
        try:
            meta_bytes = bytes(block[METADATA_OFFSET:METADATA_OFFSET + meta_len])
            metadata = json.loads(meta_bytes) if meta_len else {}
        except ValueError as exc:
            raise GraphFormatError(f"{where}: metadata is not valid JSON: {exc}") from None
        return cls(n_vertices=n_vertices, n_edges=n_edges, n_input_edges=n_input_edges,
                   n_self_loops=n_self_loops, neighbour_dtype=neighbour_dtype_for(n_vertices),
                   flags=flags, offsets_offset=offsets_offset, neighbours_offset=neighbours_offset,
                   file_size=file_size, offsets_crc32=offsets_crc, neighbours_crc32=neighbours_crc,
                   metadata=metadata, version=version)


class NeighbourSection(NamedTuple):
    """Where the neighbours array lies in its file: what a file-backed device array needs."""

    path: str
    byte_offset: int
    n_items: int
    dtype: np.dtype


def row_ranges(offsets: np.ndarray, max_entries: int) -> np.ndarray:
    """Split vertices into consecutive ranges of at most ``max_entries`` adjacency entries.

    Parameters
    ----------
    offsets : numpy.ndarray
        CSR offsets (or any cumulative count starting at 0), length ``n_vertices + 1``.
    max_entries : int
        Entry budget per range.

    Returns
    -------
    numpy.ndarray
        Vertex boundaries ``b`` (int64, ``b[0] == 0``, ``b[-1] == n_vertices``); range ``k`` is
        ``b[k] .. b[k+1] - 1``. A vertex whose own list exceeds the budget gets a range that
        exceeds it: one adjacency list is the unit of work.
    """
    n_vertices = offsets.size - 1
    total = int(offsets[-1])
    targets = np.arange(1, -(-total // max_entries), dtype=np.int64) * max_entries
    cuts = np.searchsorted(offsets, targets, side="right") - 1
    return np.unique(np.concatenate(([0], cuts, [n_vertices])).astype(np.int64))


class CSRGraph:
    """An undirected graph in CSR form: ``offsets`` in memory, ``neighbours`` usually a memmap.

    Parameters
    ----------
    offsets : numpy.ndarray
        int64, length ``n_vertices + 1``; the neighbours of ``v`` are
        ``neighbours[offsets[v]:offsets[v+1]]``.
    neighbours : numpy.ndarray
        Integer ids (an ``np.memmap`` of the file's neighbours section when opened from a file).
    header : CSRHeader, optional
        The file's header, when the graph came from one.
    path : str, optional
        The file it came from.

    Notes
    -----
    Use :func:`open_csr` to open a file. Building one directly from arrays is for tests and small
    in-memory graphs; nothing checks that such arrays are symmetric.
    """

    def __init__(self, offsets: np.ndarray, neighbours: np.ndarray, *,
                 header: CSRHeader | None = None, path: str | None = None):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.neighbours = neighbours
        self.header = header
        self.path = path
        self._self_loops: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n_vertices(self) -> int:
        return self.offsets.size - 1

    @property
    def n_edges(self) -> int:
        """Stored entries (directed arcs), not input edges: see :class:`CSRHeader`."""
        return int(self.offsets[-1])

    @property
    def neighbour_section(self) -> NeighbourSection:
        """Path, byte offset, length and dtype of the neighbours array in the file."""
        if self.header is None or self.path is None:
            raise ValueError("graph was not opened from a file")
        return NeighbourSection(self.path, self.header.neighbours_offset, self.header.n_edges,
                                self.header.neighbour_dtype)

    def degrees(self) -> np.ndarray:
        """Entries per vertex (a self loop counts once), int64."""
        return np.diff(self.offsets)

    def neighbours_of(self, v: int) -> np.ndarray:
        return np.asarray(self.neighbours[self.offsets[v]:self.offsets[v + 1]])

    def row_ranges(self, max_entries: int = DEFAULT_CHUNK_EDGES) -> np.ndarray:
        """Vertex ranges of bounded size for a chunked scan (see :func:`row_ranges`)."""
        return row_ranges(self.offsets, max_entries)

    def edges_of_rows(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """All entries of vertices ``first .. stop - 1`` as ``(src, dst)`` int64 arrays."""
        src = np.repeat(np.arange(first, stop, dtype=np.int64), np.diff(self.offsets[first:stop + 1]))
        dst = np.asarray(self.neighbours[self.offsets[first]:self.offsets[stop]], dtype=np.int64)
        return src, dst

    def iter_edges(self, max_entries: int = DEFAULT_CHUNK_EDGES,
                   progress: Progress | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield every entry as ``(src, dst)`` chunks of about ``max_entries``, in vertex order."""
        bounds = self.row_ranges(max_entries)
        for first, stop in zip(bounds[:-1], bounds[1:]):
            yield self.edges_of_rows(int(first), int(stop))
            if progress is not None:
                progress(int(self.offsets[stop]), self.n_edges)

    def self_loops(self) -> tuple[np.ndarray, np.ndarray]:
        """Vertices that have self loops and how many each, ``(vertices, counts)``.

        One scan of the neighbours (skipped when the header says there are none); the result is
        kept, as TEPS counting and root sampling ask for it once per root.
        """
        if self._self_loops is None:
            if self.header is not None and self.header.n_self_loops == 0:
                empty = np.empty(0, dtype=np.int64)
                self._self_loops = (empty, empty)
            else:
                found = [src[src == dst] for src, dst in self.iter_edges()]
                looped = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
                self._self_loops = np.unique(looped, return_counts=True)
        return self._self_loops

    def to_scipy(self):
        """The adjacency as a ``scipy.sparse.csr_matrix`` (all ones; reads all neighbours into RAM)."""
        from scipy.sparse import csr_matrix  # scipy is a test/host-analysis dependency only

        n = self.n_vertices
        # float64 is what csgraph converts to anyway; a narrower dtype could wrap to an explicit
        # zero if scipy summed a heavily repeated edge.
        return csr_matrix((np.ones(self.n_edges), np.asarray(self.neighbours), self.offsets),
                          shape=(n, n))


def _as_ids(ids: np.ndarray) -> np.ndarray:
    """An edge source's ids as the one array type the kernels are compiled for."""
    return np.ascontiguousarray(ids, dtype=np.int64)


def _check_ids(src: np.ndarray, dst: np.ndarray, n_vertices: int) -> None:
    slices = parallel.split(src.size, _MIN_ITEMS_PER_TASK)
    n_bad = sum(parallel.run_all(_count_bad_ids, [(src[lo:hi], dst[lo:hi], np.uint64(n_vertices))
                                                  for lo, hi in slices]))
    if n_bad:
        bad = np.concatenate((src, dst))
        bad = bad[(bad < 0) | (bad >= n_vertices)][0]
        raise GraphFormatError(f"edge input holds vertex id {bad}, outside 0..{n_vertices - 1}")


# --- the writer's kernels ------------------------------------------------------------------------
#
# Plain serial loops compiled by numba (``nogil``, so that several run at once on slices of the
# work: see workloads/graph/parallel.py) and cached on disk (``cache=True``: compiling them all
# takes a few seconds, loading them a fraction of one). An input edge (u, v) makes two CSR
# entries, u->v in u's list and v->u in v's, except a self loop, which makes one entry (or none
# with ``drop_self_loops``).

# Below this many items a piece of work runs in the calling thread alone.
_MIN_ITEMS_PER_TASK = 1 << 16


@njit(nogil=True, cache=True)
def _count_bad_ids(src, dst, n_vertices):
    """Ids outside ``0 .. n_vertices - 1`` (a negative id, read as unsigned, is out of range too)."""
    n_bad = 0
    for i in range(src.size):
        n_bad += (np.uint64(src[i]) >= n_vertices) + (np.uint64(dst[i]) >= n_vertices)
    return n_bad


@njit(nogil=True, cache=True)
def _count_entries(src, dst, drop_self_loops, counts, lo, hi):
    """Add to ``counts[x]`` the entries of vertices ``lo <= x < hi`` that the edges make.

    Threads are given disjoint vertex slices ``lo .. hi - 1`` and each reads every edge, so no two
    ever add to the same counter (and each one's counters lie together, friendly to its cache).
    """
    for i in range(src.size):
        u, v = src[i], dst[i]
        if u != v:
            if lo <= u < hi:
                counts[u] += 1
            if lo <= v < hi:
                counts[v] += 1
        elif not drop_self_loops and lo <= u < hi:
            counts[u] += 1


@njit(nogil=True, cache=True)
def _range_of(x, bounds, first_range, shift):
    """The vertex range ``k`` with ``bounds[k] <= x < bounds[k + 1]``.

    ``first_range[x >> shift]`` is the range of the first vertex of ``x``'s block of ``2**shift``
    vertices; ranges are far wider than blocks, so the walk forward is rarely more than one step.
    """
    k = first_range[x >> shift]
    while bounds[k + 1] <= x:
        k += 1
    return k


@njit(nogil=True, cache=True)
def _count_by_range(src, dst, drop_self_loops, bounds, first_range, shift, counts):
    """``counts[k]`` += the number of entries the edges put in vertex range ``k``."""
    for i in range(src.size):
        u, v = src[i], dst[i]
        if u != v or not drop_self_loops:
            counts[_range_of(u, bounds, first_range, shift)] += 1
        if u != v:
            counts[_range_of(v, bounds, first_range, shift)] += 1


@njit(nogil=True, cache=True)
def _spill_by_range(src, dst, drop_self_loops, bounds, first_range, shift, next_slot, pairs):
    """Write each entry as a (tail, head) row of ``pairs`` at ``next_slot[its range]``, bumping it."""
    for i in range(src.size):
        u, v = src[i], dst[i]
        if u != v or not drop_self_loops:
            k = _range_of(u, bounds, first_range, shift)
            pairs[next_slot[k], 0] = u
            pairs[next_slot[k], 1] = v
            next_slot[k] += 1
        if u != v:
            k = _range_of(v, bounds, first_range, shift)
            pairs[next_slot[k], 0] = v
            pairs[next_slot[k], 1] = u
            next_slot[k] += 1


@njit(nogil=True, cache=True)
def _sort_ids(a, scratch, n_bits):
    """Sort ``a`` (ids in ``0 .. 2**n_bits - 1``) in place; ``scratch`` is as long as ``a`` or longer.

    Insertion sort for short lists (most adjacency lists), else a least-significant-digit radix
    sort, one pass per byte of the ids: linear time, however long the list (a hub of a scale-26
    graph has millions of neighbours). Written out because numba's ``np.sort`` takes seconds to
    compile (so does this function if it swaps array variables or assigns whole slices, hence
    the plain loops).
    """
    n = a.size
    if n <= 32:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return
    digit_start = np.empty(257, dtype=np.int64)
    for shift in range(0, n_bits, 8):
        for d in range(257):
            digit_start[d] = 0
        for i in range(n):
            digit_start[((a[i] >> shift) & 255) + 1] += 1
        for d in range(256):
            digit_start[d + 1] += digit_start[d]
        for i in range(n):  # stable: keeps the order of the previous passes within a digit
            d = (a[i] >> shift) & 255
            scratch[digit_start[d]] = a[i]
            digit_start[d] += 1
        for i in range(n):
            a[i] = scratch[i]


@njit(nogil=True, cache=True)
def _sort_rows(pairs, first, row_start, r0, r1, drop_duplicates, n_bits, heads, row_length):
    """Build the sorted adjacency lists of vertices ``first + r0 .. first + r1 - 1``.

    ``pairs`` holds the (tail, head) entries of a vertex range starting at ``first`` in any order;
    row ``r`` (vertex ``first + r``) gets the slots ``row_start[r] .. row_start[r + 1] - 1`` of
    ``heads`` (its entry count from pass 1, an upper bound when duplicates are dropped). Threads
    are given disjoint row blocks and each reads all of ``pairs``, keeping its own rows' entries.

    Each row is sorted, stripped of duplicates if asked, and moved down so that the block's kept
    entries are contiguous from ``row_start[r0]``; ``row_length[r]`` gets the kept count.
    Returns ``(kept entries, self loops kept)``.
    """
    next_slot = row_start[r0:r1].copy()
    lo, hi = first + r0, first + r1
    for i in range(pairs.shape[0]):
        tail = pairs[i, 0]
        if lo <= tail < hi:
            heads[next_slot[tail - lo]] = pairs[i, 1]
            next_slot[tail - lo] += 1
    longest = 0
    for r in range(r0, r1):
        longest = max(longest, row_start[r + 1] - row_start[r])
    scratch = np.empty(longest, dtype=heads.dtype)
    kept = row_start[r0]  # where the next kept entry goes: never past the one being read
    n_loops = 0
    for r in range(r0, r1):
        row = heads[row_start[r]:row_start[r + 1]]
        _sort_ids(row, scratch, n_bits)
        row_kept = 0
        for j in range(row.size):
            head = row[j]
            if drop_duplicates and row_kept > 0 and head == heads[kept + row_kept - 1]:
                continue
            heads[kept + row_kept] = head  # at or before row[j]: nothing unread is overwritten
            n_loops += head == first + r
            row_kept += 1
        row_length[r] = row_kept
        kept += row_kept
    return kept - row_start[r0], n_loops


def _range_lookup(bounds: np.ndarray, n_vertices: int) -> tuple[np.ndarray, int]:
    """``(first_range, shift)`` for :func:`_range_of`: at most 65536 blocks of ``2**shift``
    vertices."""
    shift = max(int(n_vertices - 1).bit_length() - 16, 0)
    block_first_vertex = np.arange(0, n_vertices, 1 << shift, dtype=np.int64)
    return np.searchsorted(bounds, block_first_vertex, side="right") - 1, shift


def _group_by_range(src: np.ndarray, dst: np.ndarray, drop_self_loops: bool, bounds: np.ndarray,
                    lookup: tuple[np.ndarray, int], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's CSR entries as (tail, head) rows grouped by vertex range, and the group sizes.

    A counting sort on the range, in two passes over each thread's slice of the edges: count the
    slice's entries per range, then write each where its range's part of the slice starts.
    Ranges come one after another, and within a range the slices in order.
    """
    first_range, shift = lookup
    n_ranges = bounds.size - 1
    slices = parallel.split(src.size, _MIN_ITEMS_PER_TASK)
    per_slice = np.zeros((len(slices), n_ranges), dtype=np.int64)
    parallel.run_all(_count_by_range, [
        (src[lo:hi], dst[lo:hi], drop_self_loops, bounds, first_range, shift, per_slice[t])
        for t, (lo, hi) in enumerate(slices)])
    in_order = per_slice.T.ravel()  # range 0: slice 0, slice 1, ...; range 1: ...
    first_slot = (np.cumsum(in_order) - in_order).reshape(n_ranges, len(slices)).T.copy()
    pairs = np.empty((int(in_order.sum()), 2), dtype=dtype)
    parallel.run_all(_spill_by_range, [
        (src[lo:hi], dst[lo:hi], drop_self_loops, bounds, first_range, shift, first_slot[t], pairs)
        for t, (lo, hi) in enumerate(slices)])
    return pairs, per_slice.sum(axis=0)


def _sort_range(pairs: np.ndarray, first: int, slot_ends: np.ndarray, drop_duplicates: bool,
                id_bits: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The neighbours of vertices ``first .. first + slot_ends.size - 2``, in order, from their
    (tail, head) entries in any order: ``(heads, entries per vertex, self loops)``.

    ``slot_ends`` are pass 1's cumulative entry counts of those vertices (plus the one after), so
    every vertex has its slots; threads take blocks of vertices with about equal numbers of
    entries (:func:`_sort_rows`).
    """
    row_start = slot_ends - slot_ends[0]
    n_rows, n_slots = row_start.size - 1, int(row_start[-1])
    n_tasks = len(parallel.split(n_slots, _MIN_ITEMS_PER_TASK))
    cuts = np.searchsorted(row_start, np.arange(1, n_tasks) * n_slots // n_tasks)
    cuts = np.unique(np.concatenate(([0], cuts, [n_rows])))
    heads = np.empty(n_slots, dtype=pairs.dtype)
    row_length = np.empty(n_rows, dtype=np.int64)
    blocks = parallel.run_all(_sort_rows, [
        (pairs, first, row_start, r0, r1, drop_duplicates, id_bits, heads, row_length)
        for r0, r1 in zip(cuts[:-1], cuts[1:])])
    if drop_duplicates:  # close the gaps duplicates left at the end of each block
        heads = np.concatenate([heads[row_start[r0]:row_start[r0] + n_kept]
                                for r0, (n_kept, _) in zip(cuts[:-1], blocks)])
    return heads, row_length, sum(n_loops for _, n_loops in blocks)


class _Appender:
    """Appends arrays to a file from a second thread, so that writing (and checksumming) one block
    overlaps making the next. One block at most is in flight: :meth:`append` first waits for the
    previous one, and :meth:`wait` re-raises a failed write.
    """

    def __init__(self, file, checksum: bool = False):
        self.file = file
        self.checksum = checksum
        self.crc = 0  # zlib CRC-32 of everything appended, with checksum=True
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gids-csr-writer")
        self._pending = None

    def _write(self, block: np.ndarray) -> None:
        self.file.write(block.data)  # both calls release the GIL for large buffers
        if self.checksum:
            self.crc = zlib.crc32(block.data, self.crc)

    def append(self, block: np.ndarray) -> None:
        self.wait()
        self._pending = self._thread.submit(self._write, block)

    def wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def __enter__(self) -> "_Appender":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                self.wait()
        finally:
            self._thread.shutdown(wait=True)  # never leave a write running on a closing file


def _read_pieces(spill, starts: np.ndarray, counts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Read the spilled (tail, head) pairs ``starts[i] .. starts[i] + counts[i] - 1`` for all ``i``
    into one array (``readinto`` copies straight from the page cache, no mapping)."""
    pairs = np.empty((int(counts.sum()), 2), dtype=dtype)
    at = 0
    for start, count in zip(starts.tolist(), counts.tolist()):
        if count:
            spill.seek(start * pairs.itemsize * 2)
            piece = memoryview(pairs[at:at + count]).cast("B")
            if spill.readinto(piece) != piece.nbytes:
                raise OSError(f"{spill.name}: spill file shorter than what was written to it")
            at += count
    return pairs


def write_csr(path: str | os.PathLike, source: EdgeSource, *,
              chunk_edges: int = DEFAULT_CHUNK_EDGES, drop_self_loops: bool = False,
              drop_duplicates: bool = False, tmp_dir: str | os.PathLike | None = None,
              progress: Progress | None = None, metadata: dict | None = None) -> CSRHeader:
    """Build a CSR file from an edge source, out of core, in bounded memory.

    Parameters
    ----------
    path : str or os.PathLike
        Output file. Written as ``path + ".tmp"``, then renamed; the header goes in last, so an
        interrupted write never leaves a file that opens.
    source : EdgeSource
        The undirected input edges (read twice).
    chunk_edges : int
        Memory budget: edges read per step, and CSR entries sorted per step.
    drop_self_loops, drop_duplicates : bool
        Make the stored graph simple. Both default to False (Graph500 keeps them).
    tmp_dir : str or os.PathLike, optional
        Directory for the spill file (default: the output's directory). It holds every entry once,
        ``2 * n_edges * itemsize`` bytes, and is removed at the end.
    progress : callable, optional
        ``progress(done, total)``: three equal phases (count, distribute, sort and write).
    metadata : dict, optional
        JSON-serialisable provenance, stored in the header (at most 3840 bytes of JSON).

    Returns
    -------
    CSRHeader

    Raises
    ------
    GraphFormatError
        If an edge holds an id outside ``0 .. n_vertices - 1``.

    Notes
    -----
    An external distribution sort, so no step needs memory proportional to the edge count:

    1. count each vertex's entries (one pass over the input);
    2. cut the vertices into ranges of about ``chunk_edges`` entries, and append every entry to a
       spill file, grouped by range within each input chunk (second pass);
    3. per range: gather its pieces from the spill file, place each entry in its vertex's slots
       (known from step 1), sort each vertex's list, drop duplicates if asked, and append the
       neighbours to the output in vertex order.

    The per-entry work runs in numba kernels on all cores (:mod:`workloads.graph.parallel`), and
    the spill and output files are written from a second thread while the next block is made.

    Memory: ``16 * n_vertices`` bytes (entry counts, offsets) plus about 50 bytes per
    ``chunk_edges`` (measured with tracemalloc; more for chunks under 64 Ki edges, where the
    per-chunk bookkeeping weighs in).
    The file's bytes depend only on the edges, never on ``chunk_edges``.
    """
    path = os.fspath(path)
    n_vertices = int(source.n_vertices)
    if n_vertices < 0 or chunk_edges < 1:
        raise ValueError(f"need n_vertices >= 0 and chunk_edges >= 1, got {n_vertices}, {chunk_edges}")
    dtype = neighbour_dtype_for(n_vertices)
    phase_total = max(int(source.n_edges), 1)
    report = progress if progress is not None else (lambda done, total: None)

    # Pass 1: entries per vertex. With drop_duplicates these are upper bounds, which is all the
    # range split and the slots of step 3 need: the exact offsets come out of step 3.
    counts = np.zeros(n_vertices, dtype=np.int64)
    n_input_edges = 0
    for src, dst in source.chunks(chunk_edges):
        src, dst = _as_ids(src), _as_ids(dst)
        _check_ids(src, dst, n_vertices)
        n_input_edges += src.size
        n_tasks = len(parallel.split(src.size, _MIN_ITEMS_PER_TASK))
        parallel.run_all(_count_entries, [(src, dst, drop_self_loops, counts, lo, hi)
                                          for lo, hi in parallel.split(n_vertices, 1, n_tasks)])
        report(min(n_input_edges, phase_total), 3 * phase_total)
    # slot_ends[v] .. slot_ends[v + 1] - 1: the places of v's entries, before duplicates go.
    slot_ends = np.zeros(n_vertices + 1, dtype=np.int64)
    np.cumsum(counts, out=slot_ends[1:])
    del counts
    bounds = row_ranges(slot_ends, chunk_edges)
    n_ranges = bounds.size - 1
    lookup = _range_lookup(bounds, n_vertices)

    tmp_path = path + ".tmp"
    spill_dir = os.fspath(tmp_dir) if tmp_dir is not None else os.path.dirname(os.path.abspath(path))
    try:
        with tempfile.TemporaryFile(dir=spill_dir, prefix=".gids-csr-spill-") as spill, \
                open(tmp_path, "wb") as out:
            # Pass 2: spill entries as (tail, head) pairs, grouped by vertex range per chunk;
            # piece_counts[c, k] is chunk c's number of entries in range k. A chunk is written
            # while the next one is made (_Appender).
            piece_counts = []
            done = 0
            with _Appender(spill) as spill_writer:
                for src, dst in source.chunks(chunk_edges):
                    done += src.size
                    pairs, chunk_piece_counts = _group_by_range(
                        _as_ids(src), _as_ids(dst), drop_self_loops, bounds, lookup, dtype)
                    del src, dst  # each chunk's arrays are dropped as soon as possible: peak memory
                    piece_counts.append(chunk_piece_counts)
                    spill_writer.append(pairs)
                    del pairs
                    report(phase_total + min(done, phase_total), 3 * phase_total)
            spill.flush()
            piece_counts = np.array(piece_counts, dtype=np.int64).reshape(len(piece_counts), n_ranges)
            # Pieces lie chunk after chunk, range after range within a chunk.
            piece_starts = (np.cumsum(piece_counts) - piece_counts.ravel()).reshape(piece_counts.shape)

            # Step 3: per range, gather its pieces, sort them into adjacency lists and append
            # the neighbours; the offsets fall out as we go.
            offsets_offset, neighbours_offset, _ = section_layout(n_vertices, 0, dtype.itemsize)
            out.seek(neighbours_offset)
            offsets = np.zeros(n_vertices + 1, dtype=np.int64)
            written = n_self_loops = 0
            id_bits = max(int(n_vertices - 1).bit_length(), 1)
            # A range is written while the next one is sorted (_Appender).
            with _Appender(out, checksum=True) as neighbours_writer:
                for k in range(n_ranges):
                    first, stop = int(bounds[k]), int(bounds[k + 1])
                    pairs = _read_pieces(spill, piece_starts[:, k], piece_counts[:, k], dtype)
                    heads, row_length, loops = _sort_range(pairs, first, slot_ends[first:stop + 1],
                                                           drop_duplicates, id_bits)
                    del pairs
                    offsets[first + 1:stop + 1] = written + np.cumsum(row_length)
                    neighbours_writer.append(heads)
                    n_self_loops += loops
                    written += heads.size
                    report(2 * phase_total + phase_total * stop // max(n_vertices, 1),
                           3 * phase_total)
            neighbours_crc = neighbours_writer.crc

            _, _, file_size = section_layout(n_vertices, written, dtype.itemsize)
            # Extends with zeros: the end padding (and, with no edges, the gap after offsets).
            out.truncate(file_size)
            disk_offsets = offsets.astype(_OFFSET_DTYPE)
            out.seek(offsets_offset)
            out.write(disk_offsets.data)
            flags = (FLAG_SYMMETRIC | FLAG_SORTED | (FLAG_NO_SELF_LOOPS if drop_self_loops else 0)
                     | (FLAG_NO_DUPLICATES if drop_duplicates else 0))
            header = CSRHeader(n_vertices=n_vertices, n_edges=written, n_input_edges=n_input_edges,
                               n_self_loops=n_self_loops, neighbour_dtype=dtype, flags=flags,
                               offsets_offset=offsets_offset, neighbours_offset=neighbours_offset,
                               file_size=file_size, offsets_crc32=zlib.crc32(disk_offsets.data),
                               neighbours_crc32=neighbours_crc, metadata=metadata or {})
            out.seek(0)
            out.write(header.pack())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    report(3 * phase_total, 3 * phase_total)
    return header


def read_csr_header(path: str | os.PathLike) -> CSRHeader:
    """Read and check a CSR file's header, including that the file size matches it.

    Raises
    ------
    GraphFormatError
        Not a gids CSR file, corrupt header, or truncated (or over-long) file.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header = CSRHeader.unpack(f.read(HEADER_SIZE), path)
    if size < header.file_size:
        raise GraphFormatError(f"{path}: truncated: file is {size} bytes, its header says "
                               f"{header.file_size}")
    if size > header.file_size:
        raise GraphFormatError(f"{path}: {size - header.file_size} unexpected bytes after the end "
                               f"of the graph (file is {size} bytes, header says {header.file_size})")
    return header


def open_csr(path: str | os.PathLike, *, verify: bool = False,
             progress: Progress | None = None) -> CSRGraph:
    """Open a CSR file: offsets read into memory, neighbours memory-mapped read-only.

    Parameters
    ----------
    path : str or os.PathLike
    verify : bool
        Also scan the whole neighbours section (checksum, id range, sorted lists, loop count): see
        :func:`verify_csr`. Off by default, as it reads the whole file; opening always checks the
        header, the size, the offsets' checksum and that the offsets are consistent.
    progress : callable, optional
        ``progress(done, total)`` for the verification scan.

    Returns
    -------
    CSRGraph

    Raises
    ------
    GraphFormatError
        Bad magic, unknown version, corrupt header or offsets, truncated file, or offsets that do not
        start at 0, decrease, or do not end at ``n_edges``.
    """
    path = os.fspath(path)
    header = read_csr_header(path)
    n = header.n_vertices
    raw_offsets = np.fromfile(path, dtype=_OFFSET_DTYPE, count=n + 1, offset=header.offsets_offset)
    if zlib.crc32(raw_offsets.data) != header.offsets_crc32:
        raise GraphFormatError(f"{path}: offsets section checksum mismatch: the file is corrupt")
    offsets = raw_offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != header.n_edges or np.any(offsets[1:] < offsets[:-1]):
        raise GraphFormatError(f"{path}: inconsistent offsets: they must rise from 0 to "
                               f"n_edges={header.n_edges}")
    neighbours = (np.memmap(path, dtype=header.neighbour_dtype, mode="r",
                            offset=header.neighbours_offset, shape=(header.n_edges,))
                  if header.n_edges else np.empty(0, dtype=header.neighbour_dtype))
    graph = CSRGraph(offsets, neighbours, header=header, path=path)
    if verify:
        verify_csr(graph, progress=progress)
    return graph


def verify_csr(graph: CSRGraph, *, chunk_edges: int = DEFAULT_CHUNK_EDGES,
               progress: Progress | None = None) -> None:
    """Scan a file's neighbours section and check it against its header.

    Checks the CRC-32, that every id is in range, that lists are sorted (``FLAG_SORTED``), that
    there are no loops or duplicates where the flags promise so, and the self-loop count. Symmetry
    is not checked (it would need a second, out-of-order pass).

    Raises
    ------
    GraphFormatError
        Checksum mismatch (naming the first structural problem, if one was seen), else the first
        structural problem.
    ValueError
        If the graph did not come from a file.
    """
    header = graph.header
    if header is None:
        raise ValueError("verify_csr needs a graph opened from a file")
    crc = loops = 0
    problem = None  # the first one found; a checksum mismatch, if any, is reported ahead of it
    bounds = graph.row_ranges(chunk_edges)
    for first, stop in zip(bounds[:-1], bounds[1:]):
        raw = graph.neighbours[graph.offsets[first]:graph.offsets[stop]]
        crc = zlib.crc32(np.ascontiguousarray(raw).data, crc)
        src, dst = graph.edges_of_rows(int(first), int(stop))
        same_row = src[1:] == src[:-1]
        loops += int(np.count_nonzero(src == dst))
        if problem is None:
            if dst.size and (dst.min() < 0 or dst.max() >= graph.n_vertices):
                problem = (f"neighbour id out of range 0..{graph.n_vertices - 1} in the lists of "
                           f"vertices {first}..{stop - 1}")
            elif header.flags & FLAG_SORTED and np.any(same_row & (dst[1:] < dst[:-1])):
                problem = f"an adjacency list of vertices {first}..{stop - 1} is not sorted"
            elif header.flags & FLAG_NO_DUPLICATES and np.any(same_row & (dst[1:] == dst[:-1])):
                problem = f"duplicate edge in the lists of vertices {first}..{stop - 1}"
        if progress is not None:
            progress(int(graph.offsets[stop]), graph.n_edges)
    if crc != header.neighbours_crc32:
        detail = f" ({problem})" if problem else ""
        raise GraphFormatError(f"{graph.path}: neighbours section checksum mismatch: the file is "
                               f"corrupt{detail}")
    if problem is None and (loops != header.n_self_loops or (loops and header.flags & FLAG_NO_SELF_LOOPS)):
        problem = f"{loops} self loops stored, header says {header.n_self_loops}"
    if problem is not None:
        raise GraphFormatError(f"{graph.path}: {problem}")
