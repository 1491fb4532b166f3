"""Graph500 Kronecker generator, the on-disk CSR format and the importers (pure host code)."""

from __future__ import annotations

import os
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from workloads.graph import (
    FLAG_NO_DUPLICATES,
    FLAG_NO_SELF_LOOPS,
    FLAG_SORTED,
    FLAG_SYMMETRIC,
    SECTION_ALIGN,
    CSRHeader,
    EdgeArray,
    GraphFormatError,
    KroneckerEdges,
    generate_kronecker_csr,
    import_edge_list,
    import_npy_edges,
    kronecker_edges,
    neighbour_dtype_for,
    open_csr,
    read_csr_header,
    scramble_vertices,
    verify_csr,
    write_csr,
)
from workloads.graph.csr_file import HEADER_SIZE


def expected_csr(src, dst, n_vertices, *, drop_self_loops=False, drop_duplicates=False):
    """CSR built the obvious in-memory way, to check the out-of-core writer against."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if drop_self_loops:
        src, dst = src[src != dst], dst[src != dst]
    loop = src == dst
    tails = np.concatenate((src, dst[~loop]))
    heads = np.concatenate((dst, src[~loop]))
    order = np.lexsort((heads, tails))
    tails, heads = tails[order], heads[order]
    if drop_duplicates:
        pairs = np.unique(np.stack((tails, heads), axis=1), axis=0)
        tails, heads = pairs[:, 0], pairs[:, 1]
    offsets = np.concatenate(([0], np.cumsum(np.bincount(tails, minlength=n_vertices))))
    return offsets, heads


def reference_scramble(v: int, scale: int, val0: int, val1: int) -> int:
    """Line-by-line port of graph500 generator/graph_generator.c ``scramble`` (64-bit)."""
    mask = (1 << 64) - 1

    def bitreverse(x):
        return int(f"{x:064b}"[::-1], 2)

    x = (v + val0 + val1) & mask
    x = (x * (val0 | 0x4519840211493211)) & mask
    x = bitreverse(x) >> (64 - scale)
    x = (x * (val1 | 0x3050852102C843A5)) & mask
    return bitreverse(x) >> (64 - scale)


def reference_kronecker_edge(e: int, scale: int, seed: int, a=0.57, b=0.19, c=0.19,
                             scramble=True) -> tuple[int, int]:
    """Edge ``e`` of a Kronecker graph, transcribed from the definition in docs/formats.md with
    Python integers, one round at a time: what the numba kernel must reproduce bit for bit."""
    mask = (1 << 64) - 1
    gamma = 0x9E3779B97F4A7C15
    key, val0, val1 = (int(k) for k in np.random.SeedSequence(seed).generate_state(3, np.uint64))

    def splitmix64(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    def threshold(p):
        return min(round(p * 65536), 65536)

    d = 1 - a - b - c
    row_threshold, top, bottom = threshold(a + b), threshold(a / (a + b)), threshold(c / (c + d))
    u = v = 0
    for k in range(scale):
        z = splitmix64((key + (e * 64 + k // 2 + 1) * gamma) & mask)
        fields = [(z >> (16 * f)) & 0xFFFF for f in range(4)]
        row_draw, col_draw = fields[2 * (k % 2)], fields[2 * (k % 2) + 1]
        row_bit = int(row_draw >= row_threshold)
        col_bit = int(col_draw >= (bottom if row_bit else top))
        u |= row_bit << k
        v |= col_bit << k
    if scramble:
        u, v = (reference_scramble(x, scale, val0, val1) for x in (u, v))
    return u, v


# --- the generator -----------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1, 2, 5, 11, 16])
def test_scramble_is_a_permutation(scale):
    ids = np.arange(1 << scale)
    permuted = scramble_vertices(ids, scale, 0x1234567890ABCDEF, 0xFEDCBA0987654321)
    assert np.array_equal(np.sort(permuted), ids)
    assert scale < 3 or not np.array_equal(permuted, ids)


@pytest.mark.parametrize("scale", [7, 20, 32, 36])
def test_scramble_matches_the_graph500_reference(scale):
    # Scales up to 32 take the 32-bit path, above it the 64-bit one: both must equal the C code.
    val0, val1 = 0x8F3A_1B2C_3D4E_5F60, 0x0123_4567_89AB_CDEF
    ids = np.random.default_rng(scale).integers(0, 1 << scale, 200)
    got = scramble_vertices(ids, scale, val0, val1)
    assert got.tolist() == [reference_scramble(int(v), scale, val0, val1) for v in ids]


@pytest.mark.parametrize("scale, first_edge, scramble", [(1, 0, True), (7, 5, True), (20, 10**9, True),
                                                       (33, 123, True), (40, 2**40, True),
                                                       (12, 77, False)])
def test_kronecker_edges_match_a_transcription_of_the_definition(scale, first_edge, scramble):
    src, dst = kronecker_edges(scale, first_edge, first_edge + 40, seed=scale, scramble=scramble)
    expected = [reference_kronecker_edge(e, scale, scale, scramble=scramble)
                for e in range(first_edge, first_edge + 40)]
    assert list(zip(src.tolist(), dst.tolist())) == expected


def test_kronecker_is_deterministic_and_independent_of_the_chunking():
    whole_src, whole_dst = kronecker_edges(10, 0, 16384, seed=7)
    cuts = [0, 1, 1000, 1001, 9999, 16384]
    pieces = [kronecker_edges(10, a, b, seed=7) for a, b in zip(cuts[:-1], cuts[1:])]
    assert np.array_equal(whole_src, np.concatenate([p[0] for p in pieces]))
    assert np.array_equal(whole_dst, np.concatenate([p[1] for p in pieces]))
    src_again, _ = kronecker_edges(10, 0, 16384, seed=7)
    other_src, _ = kronecker_edges(10, 0, 16384, seed=8)
    assert np.array_equal(whole_src, src_again)
    assert not np.array_equal(whole_src, other_src)
    assert whole_src.dtype == np.int64 and 0 <= whole_src.min() and whole_src.max() < 1024


def test_kronecker_quadrant_frequencies_match_a_b_c_d():
    # Without the scramble, bit k of (src, dst) is round k's quadrant: its frequencies must match
    # A, B, C, D = 0.57, 0.19, 0.19, 0.05 in every round, within binomial noise.
    scale, n_edges = 12, 1 << 16
    src, dst = kronecker_edges(scale, 0, n_edges, seed=3, scramble=False)
    for level in range(scale):
        row, col = (src >> level) & 1, (dst >> level) & 1
        quadrant_counts = np.bincount(2 * row + col, minlength=4)
        expected = np.array([0.57, 0.19, 0.19, 0.05]) * n_edges
        sigma = np.sqrt(expected * (1 - expected / n_edges))
        assert np.all(np.abs(quadrant_counts - expected) < 5 * sigma), (level, quadrant_counts)


def test_kronecker_parameters_are_checked():
    with pytest.raises(ValueError, match="not a distribution"):
        KroneckerEdges(5, a=0.6, b=0.3, c=0.3)
    with pytest.raises(ValueError, match="scale"):
        KroneckerEdges(0)
    with pytest.raises(ValueError, match="edgefactor"):
        KroneckerEdges(5, 0)


def test_kronecker_edges_source_counts():
    source = KroneckerEdges(scale=10, seed=1)
    assert (source.n_vertices, source.n_edges) == (1024, 16384)
    chunks = list(source.chunks(5000))
    assert [c[0].size for c in chunks] == [5000, 5000, 5000, 1384]


# --- the CSR file --------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [6, 8, 10])
def test_generated_csr_matches_the_edge_list(tmp_path, scale):
    path = tmp_path / "g.csr"
    header = generate_kronecker_csr(path, scale, seed=scale, chunk_edges=1500)
    src, dst = kronecker_edges(scale, 0, 16 << scale, seed=scale)
    offsets, neighbours = expected_csr(src, dst, 1 << scale)
    graph = open_csr(path, verify=True)
    assert np.array_equal(graph.offsets, offsets)
    assert np.array_equal(graph.neighbours, neighbours)
    assert header == graph.header
    assert header.n_input_edges == 16 << scale
    assert header.n_self_loops == np.count_nonzero(src == dst)
    assert header.n_edges == 2 * (16 << scale) - header.n_self_loops
    assert header.flags == FLAG_SYMMETRIC | FLAG_SORTED
    assert header.metadata["scale"] == scale and header.metadata["edgefactor"] == 16
    assert graph.degrees().sum() == header.n_edges


def test_csr_bytes_do_not_depend_on_chunk_edges(tmp_path):
    files = []
    for chunk_edges in (1 << 22, 1000, 777):
        files.append(tmp_path / f"g{chunk_edges}.csr")
        generate_kronecker_csr(files[-1], 10, seed=5, chunk_edges=chunk_edges)
    contents = [f.read_bytes() for f in files]
    assert contents[0] == contents[1] == contents[2]


@pytest.mark.parametrize("drop_self_loops, drop_duplicates", [(False, False), (True, True)])
def test_csr_bytes_do_not_depend_on_the_number_of_threads(tmp_path, monkeypatch, drop_self_loops,
                                                          drop_duplicates):
    # Small graphs run in one thread; shrink the smallest task so that here every step is split
    # between three threads (uneven slices, several tasks a range), then compare the bytes.
    from workloads.graph import csr_file, kronecker, parallel
    options = dict(seed=3, chunk_edges=5000, drop_self_loops=drop_self_loops,
                   drop_duplicates=drop_duplicates)
    monkeypatch.setattr(parallel, "N_THREADS", 1)
    generate_kronecker_csr(tmp_path / "one.csr", 11, **options)
    monkeypatch.setattr(parallel, "N_THREADS", 3)
    monkeypatch.setattr(csr_file, "_MIN_ITEMS_PER_TASK", 100)
    monkeypatch.setattr(kronecker, "_MIN_EDGES_PER_TASK", 100)
    generate_kronecker_csr(tmp_path / "three.csr", 11, **options)
    assert (tmp_path / "one.csr").read_bytes() == (tmp_path / "three.csr").read_bytes()
    src, dst = kronecker_edges(11, 0, 16 << 11, seed=3)
    offsets, neighbours = expected_csr(src, dst, 1 << 11, drop_self_loops=drop_self_loops,
                                       drop_duplicates=drop_duplicates)
    graph = open_csr(tmp_path / "three.csr", verify=True)
    assert np.array_equal(graph.offsets, offsets) and np.array_equal(graph.neighbours, neighbours)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_adjacency_list_sort(dtype):
    # Insertion sort up to 32 ids, then one radix pass per byte of the id width: both branches,
    # odd and even numbers of passes, ids using the top bit of the width.
    from workloads.graph.csr_file import _sort_ids
    rng = np.random.default_rng(1)
    for n_bits in (1, 8, 9, 17, 31) + ((40, 63) if dtype == np.int64 else ()):
        for n in (0, 1, 2, 31, 32, 33, 500):
            ids = rng.integers(0, 1 << n_bits, n, dtype=dtype)
            ids[:n // 10] = (1 << n_bits) - 1
            got = ids.copy()
            _sort_ids(got, np.empty(n, dtype=dtype), n_bits)
            assert np.array_equal(got, np.sort(ids)), (n_bits, n)


def test_layout_is_page_aligned_for_a_file_backed_array(tmp_path):
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 7, seed=1)
    graph = open_csr(path)
    section = graph.neighbour_section
    assert section.byte_offset % SECTION_ALIGN == 0 and graph.header.offsets_offset % SECTION_ALIGN == 0
    assert os.path.getsize(path) % SECTION_ALIGN == 0
    assert section.dtype == np.dtype("<i4") and section.n_items == graph.n_edges
    # What a kernel's backing store does: read raw bytes at the section's offset.
    raw = np.fromfile(path, dtype=section.dtype, count=section.n_items, offset=section.byte_offset)
    assert np.array_equal(raw, graph.neighbours)
    v = int(np.argmax(graph.degrees()))
    assert np.array_equal(raw[graph.offsets[v]:graph.offsets[v + 1]], graph.neighbours_of(v))


def test_neighbour_dtype_rule_and_header_round_trip():
    assert neighbour_dtype_for(2**31 - 1) == np.dtype("<i4")
    assert neighbour_dtype_for(2**31) == np.dtype("<i8")
    from workloads.graph.csr_file import section_layout
    n, m = 2**31, 3 * 2**31
    offsets_at, neighbours_at, size = section_layout(n, m, 8)
    header = CSRHeader(n_vertices=n, n_edges=m, n_input_edges=m // 2, n_self_loops=0,
                       neighbour_dtype=np.dtype("<i8"), flags=FLAG_SYMMETRIC, offsets_offset=offsets_at,
                       neighbours_offset=neighbours_at, file_size=size, offsets_crc32=1,
                       neighbours_crc32=2, metadata={"note": "big"})
    assert CSRHeader.unpack(header.pack()) == header


# Hand-made graph: vertex 0 isolated, 1-2 twice, a loop on 3 (twice), 4-5, a loop on 6 only,
# vertex 7 isolated.
SMALL_SRC = [1, 2, 3, 3, 4, 6, 1]
SMALL_DST = [2, 1, 3, 3, 5, 6, 4]


@pytest.mark.parametrize("drop_self_loops", [False, True])
@pytest.mark.parametrize("drop_duplicates", [False, True])
def test_self_loops_duplicates_and_isolated_vertices(tmp_path, drop_self_loops, drop_duplicates):
    path = tmp_path / "small.csr"
    header = write_csr(path, EdgeArray(np.array([SMALL_SRC, SMALL_DST]), n_vertices=8),
                       chunk_edges=3, drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates)
    graph = open_csr(path, verify=True)
    offsets, neighbours = expected_csr(SMALL_SRC, SMALL_DST, 8, drop_self_loops=drop_self_loops,
                                       drop_duplicates=drop_duplicates)
    assert np.array_equal(graph.offsets, offsets) and np.array_equal(graph.neighbours, neighbours)
    assert graph.degrees()[0] == 0 and graph.degrees()[7] == 0
    assert header.n_input_edges == 7
    assert bool(header.flags & FLAG_NO_SELF_LOOPS) == drop_self_loops
    assert bool(header.flags & FLAG_NO_DUPLICATES) == drop_duplicates
    expected_loops = 0 if drop_self_loops else (2 if drop_duplicates else 3)
    assert header.n_self_loops == expected_loops
    assert graph.neighbours_of(1).tolist() == ([2, 4] if drop_duplicates else [2, 2, 4])
    assert graph.neighbours_of(3).tolist() == ([] if drop_self_loops else [3] if drop_duplicates else [3, 3])


@pytest.mark.parametrize("n_vertices", [0, 5])
def test_graph_with_no_edges(tmp_path, n_vertices):
    path = tmp_path / "empty.csr"
    write_csr(path, EdgeArray(np.empty((0, 2), dtype=np.int64), n_vertices=n_vertices))
    graph = open_csr(path, verify=True)
    assert graph.n_vertices == n_vertices and graph.n_edges == 0
    assert np.array_equal(graph.offsets, np.zeros(n_vertices + 1))


def test_memory_stays_within_the_chunk_budget(tmp_path):
    # 64 Ki edges (128 Ki entries) written with a 4 Ki-edge budget: numpy's peak must be a small
    # multiple of the budget, far below what holding the edge list would take (2 MiB of ids).
    chunk_edges = 4096
    generate_kronecker_csr(tmp_path / "warm-up.csr", 4, seed=2)  # lazy imports allocate too
    tracemalloc.start()
    try:
        generate_kronecker_csr(tmp_path / "g.csr", 12, seed=2, chunk_edges=chunk_edges)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    per_vertex = 16 * 4096
    assert peak < 250 * chunk_edges + per_vertex, peak
    generate_kronecker_csr(tmp_path / "big_chunks.csr", 12, seed=2)
    assert (tmp_path / "g.csr").read_bytes() == (tmp_path / "big_chunks.csr").read_bytes()


def test_progress_is_reported_and_monotone(tmp_path):
    calls = []
    generate_kronecker_csr(tmp_path / "g.csr", 8, seed=1, chunk_edges=700,
                           progress=lambda done, total: calls.append((done, total)))
    assert len(calls) > 6
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1][0] == calls[-1][1]


def test_bad_ids_and_failed_writes_leave_no_file(tmp_path):
    path = tmp_path / "bad.csr"

    class OutOfRange:
        n_vertices, n_edges = 4, 2

        def chunks(self, chunk_edges):
            yield np.array([0, 2]), np.array([1, 9])

    with pytest.raises(GraphFormatError, match="vertex id 9"):
        write_csr(path, OutOfRange())
    assert not path.exists() and not (tmp_path / "bad.csr.tmp").exists()
    with pytest.raises(ValueError, match="vertex id 9"):
        EdgeArray(np.array([[0, 1], [2, 9]]), n_vertices=4)

    class Failing:
        n_vertices, n_edges = 10, 4

        def chunks(self, chunk_edges):
            yield np.array([0, 1]), np.array([2, 3])
            raise OSError("disk went away")

    with pytest.raises(OSError, match="disk went away"):
        write_csr(path, Failing())
    assert os.listdir(tmp_path) == []  # neither the output, its .tmp, nor a spill file


# --- corrupt and truncated files -----------------------------------------------------------------

@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 6, seed=4)
    return path


def rewrite(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def refresh_header(path, **changes):
    """Rewrite header fields and fix the header checksum, as a buggy writer would produce."""
    header = read_csr_header(path)
    fields = {**header.__dict__, **changes}
    rewrite(path, 0, CSRHeader(**fields).pack())


@pytest.mark.parametrize("keep_bytes", [0, 100, HEADER_SIZE + 8, 8192 + 4, -4096])
def test_truncated_file_is_reported(graph_file, keep_bytes):
    size = os.path.getsize(graph_file)
    os.truncate(graph_file, keep_bytes % size if keep_bytes >= 0 else size + keep_bytes)
    with pytest.raises(GraphFormatError, match="truncated"):
        open_csr(graph_file)


def test_trailing_bytes_are_reported(graph_file):
    with open(graph_file, "ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(GraphFormatError, match="unexpected bytes after the end"):
        open_csr(graph_file)


def test_bad_magic_is_reported(graph_file, tmp_path):
    rewrite(graph_file, 0, b"NOTAGRPH")
    with pytest.raises(GraphFormatError, match="not a gids CSR graph file"):
        open_csr(graph_file)
    text = tmp_path / "edges.txt"
    text.write_text("0 1\n" * 2000)
    with pytest.raises(GraphFormatError, match="not a gids CSR graph file"):
        open_csr(text)


def test_corrupt_header_is_reported(graph_file):
    rewrite(graph_file, 17, b"\x7f")  # inside n_vertices
    with pytest.raises(GraphFormatError, match="header checksum mismatch"):
        open_csr(graph_file)


def test_unknown_version_is_reported(graph_file):
    refresh_header(graph_file, version=2)
    with pytest.raises(GraphFormatError, match="format version 2"):
        open_csr(graph_file)


def test_corrupt_offsets_are_reported(graph_file):
    rewrite(graph_file, HEADER_SIZE + 8 * 10 + 1, b"\x55")
    with pytest.raises(GraphFormatError, match="offsets section checksum mismatch"):
        open_csr(graph_file)


def test_inconsistent_offsets_are_reported(graph_file):
    # Checksums recomputed, so only the structural check can catch it.
    header = read_csr_header(graph_file)
    offsets = np.fromfile(graph_file, dtype="<i8", count=header.n_vertices + 1, offset=HEADER_SIZE)
    offsets[5], offsets[6] = offsets[6] + 1, offsets[5]
    rewrite(graph_file, HEADER_SIZE, offsets.tobytes())
    refresh_header(graph_file, offsets_crc32=zlib.crc32(offsets.tobytes()))
    with pytest.raises(GraphFormatError, match="inconsistent offsets"):
        open_csr(graph_file)


def test_inconsistent_layout_is_reported(graph_file):
    header = read_csr_header(graph_file)
    refresh_header(graph_file, neighbours_offset=header.neighbours_offset + 4096)
    with pytest.raises(GraphFormatError, match="section layout"):
        open_csr(graph_file)


def test_corrupt_neighbours_are_found_by_verification(graph_file):
    header = read_csr_header(graph_file)
    rewrite(graph_file, header.neighbours_offset + 40, b"\x01")
    graph = open_csr(graph_file)  # opening reads only header and offsets
    with pytest.raises(GraphFormatError, match="neighbours section checksum mismatch"):
        verify_csr(graph)
    with pytest.raises(GraphFormatError, match="neighbours section checksum mismatch"):
        open_csr(graph_file, verify=True)


def test_out_of_range_neighbour_is_found_even_with_a_valid_checksum(graph_file):
    header = read_csr_header(graph_file)
    neighbours = np.fromfile(graph_file, dtype="<i4", count=header.n_edges,
                             offset=header.neighbours_offset)
    neighbours[-1] = header.n_vertices + 3
    rewrite(graph_file, header.neighbours_offset, neighbours.tobytes())
    refresh_header(graph_file, neighbours_crc32=zlib.crc32(neighbours.tobytes()))
    with pytest.raises(GraphFormatError, match="out of range"):
        open_csr(graph_file, verify=True)


def test_header_field_offsets_match_the_documented_layout(graph_file):
    # docs/formats.md (graph section) lists these byte offsets; a GPU-side or C reader relies on them.
    raw = graph_file.read_bytes()[:HEADER_SIZE]
    header = read_csr_header(graph_file)
    assert raw[0:8] == b"GIDSCSR\0"
    assert struct.unpack_from("<IIQQQQ", raw, 8) == (1, header.flags, header.n_vertices,
                                                     header.n_edges, header.n_input_edges,
                                                     header.n_self_loops)
    assert struct.unpack_from("<IIQQQ", raw, 48) == (4, 4096, header.offsets_offset,
                                                    header.neighbours_offset, header.file_size)
    assert struct.unpack_from("<II", raw, 80) == (header.offsets_crc32, header.neighbours_crc32)


# --- importers -----------------------------------------------------------------------------------

SNAP_TEXT = """# Directed graph (each unordered pair of nodes is saved once): example.txt
# Nodes: 6 Edges: 7
# FromNodeId\tToNodeId
10\t20
20\t30
% a KONECT-style comment

30 10 1.5 1200000000
40\t40
50 10
10\t20
  70   50
"""


def test_import_snap_edge_list(tmp_path):
    text = tmp_path / "edges.txt"
    text.write_text(SNAP_TEXT)
    src = [10, 20, 30, 40, 50, 10, 70]
    dst = [20, 30, 10, 40, 10, 20, 50]
    result = import_edge_list(text, tmp_path / "plain.csr", chunk_edges=2)
    assert result.original_ids is None and result.header.n_vertices == 71
    graph = open_csr(tmp_path / "plain.csr", verify=True)
    offsets, neighbours = expected_csr(src, dst, 71)
    assert np.array_equal(graph.offsets, offsets) and np.array_equal(graph.neighbours, neighbours)

    calls = []
    result = import_edge_list(text, tmp_path / "dense.csr", relabel=True, chunk_edges=2,
                              progress=lambda done, total: calls.append((done, total)))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1][0] == calls[-1][1]
    assert result.original_ids.tolist() == [10, 20, 30, 40, 50, 70]
    graph = open_csr(tmp_path / "dense.csr", verify=True)
    dense = {v: k for k, v in enumerate(result.original_ids.tolist())}
    offsets, neighbours = expected_csr([dense[v] for v in src], [dense[v] for v in dst], 6)
    assert np.array_equal(graph.offsets, offsets) and np.array_equal(graph.neighbours, neighbours)
    assert graph.header.metadata["relabelled"] is True


def test_import_bad_edge_list_names_the_lines(tmp_path):
    text = tmp_path / "bad.txt"
    text.write_text("# header\n0 1\n1 2\n2 x\n3 4\n")
    with pytest.raises(GraphFormatError, match=r"lines 3\.\.4"):
        import_edge_list(text, tmp_path / "bad.csr", chunk_edges=2)
    text.write_text("0 1\n5\n")
    with pytest.raises(GraphFormatError, match="bad.txt"):
        import_edge_list(text, tmp_path / "bad.csr")
    text.write_text("0 1\n-3 2\n")
    with pytest.raises(GraphFormatError, match="negative vertex id"):
        import_edge_list(text, tmp_path / "bad.csr")
    assert not (tmp_path / "bad.csr").exists()


@pytest.mark.parametrize("transpose", [False, True])
def test_import_npy_edges(tmp_path, transpose):
    src, dst = kronecker_edges(7, 0, 2048, seed=9)
    edges = np.stack((src, dst), axis=0 if transpose else 1).astype(np.int32)
    np.save(tmp_path / "edges.npy", edges)
    result = import_npy_edges(tmp_path / "edges.npy", tmp_path / "g.csr", n_vertices=128,
                              chunk_edges=500)
    assert result.header.n_vertices == 128 and result.original_ids is None
    generate_kronecker_csr(tmp_path / "direct.csr", 7, edgefactor=16, seed=9)
    graph, direct = open_csr(tmp_path / "g.csr"), open_csr(tmp_path / "direct.csr")
    assert np.array_equal(graph.offsets, direct.offsets)
    assert np.array_equal(graph.neighbours, direct.neighbours)


def test_import_npy_relabel_and_errors(tmp_path):
    np.save(tmp_path / "sparse.npy", np.array([[1000, 5], [5, 70000], [70000, 1000]]))
    result = import_npy_edges(tmp_path / "sparse.npy", tmp_path / "g.csr", relabel=True)
    assert result.original_ids.tolist() == [5, 1000, 70000]
    graph = open_csr(tmp_path / "g.csr")
    assert graph.n_vertices == 3 and graph.degrees().tolist() == [2, 2, 2]

    np.save(tmp_path / "float.npy", np.ones((4, 2)))
    with pytest.raises(GraphFormatError, match="integers"):
        import_npy_edges(tmp_path / "float.npy", tmp_path / "x.csr")
    np.save(tmp_path / "shape.npy", np.ones((4, 3), dtype=np.int64))
    with pytest.raises(GraphFormatError, match=r"shape \(E, 2\) or \(2, E\)"):
        import_npy_edges(tmp_path / "shape.npy", tmp_path / "x.csr")
    with pytest.raises(GraphFormatError, match="n_vertices is 10"):
        import_npy_edges(tmp_path / "sparse.npy", tmp_path / "x.csr", n_vertices=10)
