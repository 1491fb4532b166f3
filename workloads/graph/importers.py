"""Importers: SNAP-style edge-list text files and ``.npy`` edge arrays into the CSR format.

Every input is read as an undirected graph: an edge listed as both (u, v) and (v, u), as directed
SNAP graphs often are, becomes a duplicate; pass ``drop_duplicates=True`` to store it once.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import warnings
from typing import NamedTuple, Sequence

import numpy as np

from .csr_file import CSRHeader, GraphFormatError, Progress, write_csr
from .edges import DEFAULT_CHUNK_EDGES, EdgeArray, EdgeSource, RelabelledEdges


class ImportResult(NamedTuple):
    """What an import wrote.

    Attributes
    ----------
    header : CSRHeader
        The new file's header.
    original_ids : numpy.ndarray or None
        With ``relabel=True``: ``original_ids[k]`` is the input's id of vertex ``k``. Else None.
    """

    header: CSRHeader
    original_ids: np.ndarray | None


def _write(csr_path, source: EdgeSource, relabel: bool, chunk_edges: int, drop_self_loops: bool,
           drop_duplicates: bool, tmp_dir, progress, metadata: dict) -> ImportResult:
    ids = None
    if relabel:
        source = RelabelledEdges(source)
        ids = source.ids
    header = write_csr(csr_path, source, chunk_edges=chunk_edges, drop_self_loops=drop_self_loops,
                       drop_duplicates=drop_duplicates, tmp_dir=tmp_dir, progress=progress,
                       metadata={**metadata, "relabelled": relabel})
    return ImportResult(header, ids)


def import_npy_edges(npy_path: str | os.PathLike, csr_path: str | os.PathLike, *,
                     n_vertices: int | None = None, relabel: bool = False,
                     chunk_edges: int = DEFAULT_CHUNK_EDGES, drop_self_loops: bool = False,
                     drop_duplicates: bool = False, tmp_dir: str | os.PathLike | None = None,
                     progress: Progress | None = None) -> ImportResult:
    """Build a CSR file from a ``.npy`` edge array of shape ``(E, 2)`` or ``(2, E)``.

    Parameters
    ----------
    npy_path : str or os.PathLike
        Integer array, memory-mapped and read one chunk at a time (so it may exceed RAM).
    csr_path : str or os.PathLike
        Output CSR file.
    n_vertices : int, optional
        Defaults to the largest id + 1 (ignored with ``relabel``).
    relabel : bool
        Map the ids that occur to ``0 .. k-1`` in increasing order (for sparse ids).
    chunk_edges, drop_self_loops, drop_duplicates, tmp_dir, progress
        As in :func:`~workloads.graph.csr_file.write_csr`.

    Returns
    -------
    ImportResult

    Raises
    ------
    GraphFormatError
        Not an integer array of shape (E, 2) or (2, E), a negative id, or an id >= ``n_vertices``.
    """
    try:
        edges = np.load(os.fspath(npy_path), mmap_mode="r", allow_pickle=False)
        source = EdgeArray(edges, None if relabel else n_vertices)
    except ValueError as exc:
        raise GraphFormatError(f"{os.fspath(npy_path)}: {exc}") from None
    return _write(csr_path, source, relabel, chunk_edges, drop_self_loops, drop_duplicates,
                  tmp_dir, progress, {"source": os.path.basename(os.fspath(npy_path))})


def _parse_lines(lines: list[str], comments: Sequence[str]) -> np.ndarray:
    with warnings.catch_warnings():
        # A block of nothing but comments is normal (file headers); loadtxt warns about it.
        warnings.simplefilter("ignore", UserWarning)
        return np.loadtxt(lines, dtype=np.int64, comments=list(comments), usecols=(0, 1),
                          ndmin=2)


def import_edge_list(text_path: str | os.PathLike, csr_path: str | os.PathLike, *,
                     n_vertices: int | None = None, relabel: bool = False,
                     comments: Sequence[str] = ("#", "%"), chunk_edges: int = DEFAULT_CHUNK_EDGES,
                     drop_self_loops: bool = False, drop_duplicates: bool = False,
                     tmp_dir: str | os.PathLike | None = None,
                     progress: Progress | None = None) -> ImportResult:
    """Build a CSR file from a SNAP-style edge-list text file.

    The format: one edge per line, two integer ids separated by whitespace (tabs or spaces);
    further columns (weights, timestamps) are ignored; lines starting with a comment marker
    (``#`` for SNAP, ``%`` for KONECT/Matrix Market style) and blank lines are skipped.

    Parameters
    ----------
    text_path : str or os.PathLike
        The edge list (plain text; decompress ``.gz`` files first).
    csr_path : str or os.PathLike
        Output CSR file.
    n_vertices : int, optional
        Defaults to the largest id + 1 (ignored with ``relabel``).
    relabel : bool
        Map the ids that occur to ``0 .. k-1`` in increasing order. SNAP ids often skip numbers
        (e.g. com-Friendster), which would otherwise leave isolated vertices.
    comments : sequence of str
        Comment markers.
    chunk_edges, drop_self_loops, drop_duplicates, tmp_dir, progress
        As in :func:`~workloads.graph.csr_file.write_csr`; ``progress`` also covers the parse,
        counted in bytes of text.

    Returns
    -------
    ImportResult

    Raises
    ------
    GraphFormatError
        A line that is not two integers, with the line range it is in.

    Notes
    -----
    The text is parsed once (``np.loadtxt`` on blocks of ``chunk_edges`` lines) into a binary spill
    file of int64 pairs, which then serves the writer's passes; the spill needs ``16 * E`` bytes
    in ``tmp_dir`` (default: next to ``csr_path``).
    """
    text_path = os.fspath(text_path)
    spill_dir = (os.fspath(tmp_dir) if tmp_dir is not None
                 else os.path.dirname(os.path.abspath(os.fspath(csr_path))))
    text_bytes = max(os.path.getsize(text_path), 1)
    with tempfile.TemporaryFile(dir=spill_dir, prefix=".gids-edges-") as spill:
        n_edges = 0
        with open(text_path, "r", encoding="ascii", errors="replace") as text:
            for block_start in itertools.count(1, chunk_edges):
                lines = list(itertools.islice(text, chunk_edges))
                if not lines:
                    break
                try:
                    pairs = _parse_lines(lines, comments)
                except ValueError as exc:
                    raise GraphFormatError(
                        f"{text_path}: lines {block_start}..{block_start + len(lines) - 1}: "
                        f"not an edge list line ({exc})") from None
                spill.write(pairs.data)
                n_edges += pairs.shape[0]
                if progress is not None:
                    # Bytes of text read so far, on the same scale as the writer's three phases.
                    progress(min(text.buffer.tell(), text_bytes), 4 * text_bytes)
        spill.flush()
        edges = (np.memmap(spill, dtype=np.int64, mode="r", shape=(n_edges, 2)) if n_edges
                 else np.empty((0, 2), dtype=np.int64))
        try:
            source = EdgeArray(edges, None if relabel else n_vertices)
        except ValueError as exc:
            raise GraphFormatError(f"{text_path}: {exc}") from None
        writer_progress = (None if progress is None else
                           lambda done, total: progress(text_bytes + 3 * text_bytes * done // total,
                                                        4 * text_bytes))
        return _write(csr_path, source, relabel, chunk_edges, drop_self_loops, drop_duplicates,
                      tmp_dir, writer_progress, {"source": os.path.basename(text_path)})
