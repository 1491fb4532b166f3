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
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple

import numpy as np

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


def _check_ids(src: np.ndarray, dst: np.ndarray, n_vertices: int) -> None:
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n_vertices):
        bad = np.concatenate((src, dst))
        bad = bad[(bad < 0) | (bad >= n_vertices)][0]
        raise GraphFormatError(f"edge input holds vertex id {bad}, outside 0..{n_vertices - 1}")


def _both_directions(src: np.ndarray, dst: np.ndarray, drop_self_loops: bool):
    """CSR entries of an edge chunk as ``(tails, heads)``: u->v and v->u, a loop u->u once."""
    loop = src == dst
    if drop_self_loops:
        src, dst = src[~loop], dst[~loop]
        return np.concatenate((src, dst)), np.concatenate((dst, src))
    return np.concatenate((src, dst[~loop])), np.concatenate((dst, src[~loop]))


def _sort_rows(tails: np.ndarray, heads: np.ndarray, first: int, stop: int, n_vertices: int):
    """Sort entries by (tail, head); tails lie in ``first .. stop - 1``."""
    head_bits = max(int(n_vertices - 1).bit_length(), 1)
    tail_bits = max(int(stop - first - 1).bit_length(), 1)
    if head_bits + tail_bits <= 63:
        # One int64 sort on a packed key is several times faster than a two-key lexsort.
        key = ((tails - first) << head_bits) | heads
        key.sort()
        return (key >> head_bits) + first, key & ((1 << head_bits) - 1)
    order = np.lexsort((heads, tails))
    return tails[order], heads[order]


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
    3. per range: gather its pieces from the spill file, sort by (vertex, neighbour), drop
       duplicates if asked, and append the neighbours to the output in vertex order.

    Memory: ``16 * n_vertices`` bytes (degrees, offsets) plus about 100 bytes per ``chunk_edges``
    (measured with tracemalloc; about 200 for chunks under 16 Ki edges, where fixed-size
    temporaries of the Kronecker generator weigh in).
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
    # range split needs: the exact offsets come out of step 3.
    counts = np.zeros(n_vertices, dtype=np.int64)
    n_input_edges = 0
    for src, dst in source.chunks(chunk_edges):
        _check_ids(src, dst, n_vertices)
        n_input_edges += src.size
        loop = src == dst
        if drop_self_loops:
            src, dst = src[~loop], dst[~loop]
            loop = loop[~loop]
        np.add.at(counts, src, 1)
        np.add.at(counts, dst[~loop], 1)  # a self loop is stored once, in its vertex's list
        report(min(n_input_edges, phase_total), 3 * phase_total)
    bounds = row_ranges(np.concatenate(([0], np.cumsum(counts))), chunk_edges)
    del counts
    n_ranges = bounds.size - 1

    tmp_path = path + ".tmp"
    spill_dir = os.fspath(tmp_dir) if tmp_dir is not None else os.path.dirname(os.path.abspath(path))
    try:
        with tempfile.TemporaryFile(dir=spill_dir, prefix=".gids-csr-spill-") as spill, \
                open(tmp_path, "wb") as out:
            # Pass 2: spill entries as (tail, head) pairs, grouped by vertex range per chunk;
            # piece_counts[c, k] is chunk c's number of entries in range k.
            piece_counts = []
            done = 0
            for src, dst in source.chunks(chunk_edges):
                done += src.size
                tails, heads = _both_directions(src, dst, drop_self_loops)
                del src, dst  # each chunk's arrays are dropped as soon as possible: peak memory
                # numpy sorts 16-bit keys by radix, several times faster than 64-bit ones.
                which_range = (np.searchsorted(bounds, tails, side="right") - 1).astype(
                    np.uint16 if n_ranges <= 1 << 16 else np.int64)
                piece_counts.append(np.bincount(which_range, minlength=n_ranges))
                order = np.argsort(which_range, kind="stable")
                del which_range
                pairs = np.empty((tails.size, 2), dtype=dtype)
                pairs[:, 0], pairs[:, 1] = tails.astype(dtype)[order], heads.astype(dtype)[order]
                del tails, heads, order
                spill.write(pairs.data)
                del pairs
                report(phase_total + min(done, phase_total), 3 * phase_total)
            spill.flush()
            piece_counts = np.array(piece_counts, dtype=np.int64).reshape(len(piece_counts), n_ranges)
            # Pieces lie chunk after chunk, range after range within a chunk.
            piece_starts = (np.cumsum(piece_counts) - piece_counts.ravel()).reshape(piece_counts.shape)
            n_spilled = int(piece_counts.sum())
            spilled = (np.memmap(spill, dtype=dtype, mode="r", shape=(n_spilled, 2)) if n_spilled
                       else np.empty((0, 2), dtype=dtype))

            # Step 3: sort each range and append its neighbours; the offsets fall out as we go.
            offsets_offset, neighbours_offset, _ = section_layout(n_vertices, 0, dtype.itemsize)
            out.seek(neighbours_offset)
            offsets = np.zeros(n_vertices + 1, dtype=np.int64)
            written = n_self_loops = 0
            neighbours_crc = 0
            for k in range(n_ranges):
                first, stop = int(bounds[k]), int(bounds[k + 1])
                pieces = [spilled[s:s + c] for s, c in zip(piece_starts[:, k], piece_counts[:, k])]
                pairs = np.concatenate(pieces) if pieces else np.empty((0, 2), dtype=dtype)
                tails, heads = _sort_rows(pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64),
                                          first, stop, n_vertices)
                del pairs, pieces
                if drop_duplicates and tails.size:
                    first_of_run = np.ones(tails.size, dtype=bool)
                    first_of_run[1:] = (tails[1:] != tails[:-1]) | (heads[1:] != heads[:-1])
                    tails, heads = tails[first_of_run], heads[first_of_run]
                per_vertex = np.bincount(tails - first, minlength=stop - first)
                offsets[first + 1:stop + 1] = written + np.cumsum(per_vertex)
                block = heads.astype(dtype)
                out.write(block.data)
                neighbours_crc = zlib.crc32(block.data, neighbours_crc)
                n_self_loops += int(np.count_nonzero(tails == heads))
                written += block.size
                report(2 * phase_total + phase_total * int(bounds[k + 1]) // max(n_vertices, 1),
                       3 * phase_total)
            del spilled

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
