"""IVF index: k-means training, the on-disk layout, build and open, and malformed files."""

import struct
import sys

import numpy as np
import pytest

from workloads.vector import (
    IndexFormatError,
    SyntheticClusters,
    assign_lists,
    build_ivf,
    load_vectors,
    open_ivf,
    save_vectors,
    train_kmeans,
)
from workloads.vector.ivf import FORMAT_VERSION, HEADER_NBYTES, MAGIC

DATA = SyntheticClusters(n=1500, dim=5, n_clusters=6, seed=11, spread=0.3)


@pytest.fixture(scope="module")
def centroids():
    return train_kmeans(DATA, 12, n_iter=10, seed=0)


@pytest.fixture()
def index_path(tmp_path, centroids):
    # 5 float32 = 20-byte rows on 512-byte pages: lists straddle pages, as in general.
    build_ivf(tmp_path / "small.ivf", DATA, centroids, page_size=512, chunk_rows=400)
    return tmp_path / "small.ivf"


# --- k-means --------------------------------------------------------------------------------


def test_kmeans_is_deterministic_by_seed():
    a = train_kmeans(DATA, 8, n_iter=5, seed=1)
    assert a.shape == (8, 5) and a.dtype == np.float32
    np.testing.assert_array_equal(a, train_kmeans(DATA, 8, n_iter=5, seed=1))
    assert not np.array_equal(a, train_kmeans(DATA, 8, n_iter=5, seed=2))


def test_kmeans_finds_well_separated_clusters():
    data = SyntheticClusters(n=3000, dim=8, n_clusters=6, seed=3, spread=0.1)
    centroids = train_kmeans(data, 24, n_iter=25, seed=0)
    # Points lie about spread * sqrt(dim) = 0.28 from their centre; centres about 4 apart.
    nearest = np.linalg.norm(data.centers[:, None] - centroids[None], axis=2).min(axis=1)
    assert nearest.max() < 0.3


def test_kmeans_survives_fewer_distinct_points_than_lists():
    points = np.repeat(np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]], dtype=np.float32), 40, axis=0)
    centroids = train_kmeans(points, 5, n_iter=10, seed=0)
    assert np.isfinite(centroids).all()
    # Empty clusters are refilled by splitting a centroid into two perturbed copies (1/1024 relative).
    nearest = np.linalg.norm(points[::40, None] - centroids[None], axis=2).min(axis=1)
    assert nearest.max() < 0.02


def test_kmeans_ip_centroids_are_unit_length():
    centroids = train_kmeans(DATA, 6, metric="ip", n_iter=5, seed=0)
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1.0, rtol=1e-6)


def test_kmeans_reports_progress_and_checks_sizes():
    calls = []
    train_kmeans(DATA, 4, n_iter=3, sample_size=200, seed=0, progress=lambda *a: calls.append(a))
    assert calls and calls[-1] == ("train", 3, 3)
    with pytest.raises(ValueError, match="sample"):
        train_kmeans(DATA, 10, sample_size=5)
    with pytest.raises(ValueError, match="sample"):
        train_kmeans(np.zeros((3, 2), dtype=np.float32), 4)
    with pytest.raises(ValueError, match="NaN"):
        train_kmeans(np.array([[0.0, 1.0], [np.inf, 0.0]]), 1)


def test_kmeans_faiss_backend():
    pytest.importorskip("faiss")
    centroids = train_kmeans(DATA, 6, n_iter=5, seed=0, backend="faiss")
    assert centroids.shape == (6, 5) and centroids.dtype == np.float32 and np.isfinite(centroids).all()
    np.testing.assert_array_equal(centroids, train_kmeans(DATA, 6, n_iter=5, seed=0, backend="faiss"))


def test_kmeans_faiss_backend_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` raise ImportError
    with pytest.raises(ImportError, match="faiss-cpu"):
        train_kmeans(DATA, 4, backend="faiss")


# --- layout ---------------------------------------------------------------------------------


def test_header_bytes_follow_the_documented_layout(index_path, centroids):
    raw = index_path.read_bytes()
    index = open_ivf(index_path)
    assert raw[:8] == MAGIC
    version, header_nbytes, dim, metric = struct.unpack_from("<4I", raw, 8)
    assert (version, header_nbytes, dim, metric) == (FORMAT_VERSION, HEADER_NBYTES, 5, 0)
    fields = struct.unpack_from("<8Q", raw, 24)
    n_vectors, n_lists, page_size, c_off, t_off, i_off, v_off, v_nbytes = fields
    assert (n_vectors, n_lists, page_size) == (1500, 12, 512)
    assert (v_off, v_nbytes) == (index.vectors_offset, index.vectors_nbytes)
    assert raw[88:HEADER_NBYTES] == bytes(HEADER_NBYTES - 88)
    assert c_off == HEADER_NBYTES and t_off % 64 == 0 and i_off % 64 == 0 and v_off % page_size == 0
    np.testing.assert_array_equal(np.frombuffer(raw, "<f4", 12 * 5, c_off).reshape(12, 5), centroids)
    table = np.frombuffer(raw, "<i8", 12 * 3, t_off).reshape(12, 3)
    np.testing.assert_array_equal(table, np.stack([index.list_starts, index.list_lengths, index.id_starts], axis=1))
    np.testing.assert_array_equal(np.frombuffer(raw, "<i8", 1500, i_off), index.ids)
    assert len(raw) == v_off + v_nbytes


def test_lists_are_page_aligned_runs_of_their_vectors(index_path):
    index = open_ivf(index_path)
    source = np.asarray(DATA)
    assert (index.list_starts * 4 % index.page_size == 0).all()
    assert index.list_lengths.sum() == 1500
    np.testing.assert_array_equal(np.sort(index.ids), np.arange(1500))
    labels = assign_lists(DATA, index.centroids)
    raw = index_path.read_bytes()
    for list_no in range(index.n_lists):
        ids = index.list_ids(list_no)
        assert (np.diff(ids) > 0).all() and (labels[ids] == list_no).all()
        # Read the list as the kernel will: a contiguous run of float32 from the list's start element.
        start, length = index.list_starts[list_no], index.list_lengths[list_no]
        run = np.frombuffer(raw, "<f4", length * 5, index.vectors_offset + start * 4)
        np.testing.assert_array_equal(run.reshape(length, 5), source[ids])
        np.testing.assert_array_equal(index.list_vectors(list_no), source[ids])
        # The fewest pages: the run starts on a page, so it spans ceil(bytes / page) of them.
        first_page = start * 4 // index.page_size
        last_page = (start * 4 + max(length * 20, 1) - 1) // index.page_size
        assert index.list_pages[list_no] == (last_page - first_page + 1 if length else 0)
        # Padding up to the next list is zeros.
        end = start + length * 5
        next_start = index.list_starts[list_no + 1] if list_no + 1 < index.n_lists else len(index.vectors)
        assert not index.vectors[end:next_start].any()


def test_empty_lists_take_no_space(tmp_path):
    far = np.full((1, 5), 1000.0, dtype=np.float32)
    centroids = np.concatenate([far, train_kmeans(DATA, 3, n_iter=5, seed=0), far])
    index = build_ivf(tmp_path / "e.ivf", DATA, centroids, page_size=512)
    assert index.list_lengths[0] == 0 and index.list_lengths[4] == 0
    assert index.list_starts[0] == 0 and index.list_starts[1] == 0
    assert index.list_starts[4] * 4 == index.vectors_nbytes
    assert index.list_vectors(0).shape == (0, 5) and index.list_ids(4).shape == (0,)


def test_build_from_a_vecs_file_gives_the_same_index(tmp_path, centroids, index_path):
    save_vectors(tmp_path / "base.fvecs", DATA)
    build_ivf(tmp_path / "from_file.ivf", load_vectors(tmp_path / "base.fvecs"), centroids, page_size=512)
    assert (tmp_path / "from_file.ivf").read_bytes() == index_path.read_bytes()


def test_build_records_metric_and_reports_progress(tmp_path):
    calls = []
    index = build_ivf(
        tmp_path / "ip.ivf", DATA, train_kmeans(DATA, 4, metric="ip", n_iter=3), metric="ip",
        chunk_rows=500, progress=lambda *a: calls.append(a),
    )
    assert open_ivf(index.path).metric == "ip"
    assert ("assign", 1500, 1500) in calls and calls[-1] == ("write", 1500, 1500)


def test_build_refuses_bad_input_and_leaves_no_file(tmp_path, centroids):
    with pytest.raises(ValueError, match="dimension mismatch"):
        build_ivf(tmp_path / "x.ivf", DATA, centroids[:, :4])
    with pytest.raises(ValueError, match="power of two"):
        build_ivf(tmp_path / "x.ivf", DATA, centroids, page_size=100)
    vectors = np.asarray(DATA).copy()
    vectors[1400, 2] = np.nan
    with pytest.raises(ValueError, match="row 1400"):
        build_ivf(tmp_path / "x.ivf", vectors, centroids)
    assert list(tmp_path.iterdir()) == []


# --- malformed index files ------------------------------------------------------------------


def _patch(path, offset, fmt, *values):
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, *values)
    path.write_bytes(bytes(raw))


def test_open_refuses_a_file_that_is_not_an_index(tmp_path):
    (tmp_path / "short").write_bytes(b"GIDSIVF\0")
    with pytest.raises(IndexFormatError, match="too short"):
        open_ivf(tmp_path / "short")
    (tmp_path / "other").write_bytes(bytes(4096))
    with pytest.raises(IndexFormatError, match="not a gids IVF index"):
        open_ivf(tmp_path / "other")


def test_open_refuses_another_version(index_path):
    _patch(index_path, 8, "<I", FORMAT_VERSION + 1)
    with pytest.raises(IndexFormatError, match="version"):
        open_ivf(index_path)


def test_open_refuses_a_truncated_file(index_path):
    index_path.write_bytes(index_path.read_bytes()[:-1])
    with pytest.raises(IndexFormatError, match="truncated"):
        open_ivf(index_path)


def test_open_refuses_trailing_bytes(index_path):
    index_path.write_bytes(index_path.read_bytes() + b"\0")
    with pytest.raises(IndexFormatError, match="trailing"):
        open_ivf(index_path)


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (20, "<I", 7, "metric code"),
        (40, "<Q", 300, "page size"),
        (24, "<Q", 2000, "offsets"),  # n_vectors: the vectors section would start elsewhere
        (56, "<Q", 64, "offsets"),
    ],
)
def test_open_refuses_a_corrupt_header(index_path, offset, fmt, value, message):
    _patch(index_path, offset, fmt, value)
    with pytest.raises(IndexFormatError, match=message):
        open_ivf(index_path)


def test_open_refuses_a_corrupt_list_table(index_path):
    index = open_ivf(index_path)
    table_offset = struct.unpack_from("<Q", index_path.read_bytes(), 56)[0]
    lengths = index.list_lengths
    # Move one vector from list 0 to list 1: lengths still add up, but list 1's start is wrong.
    _patch(index_path, table_offset + 8, "<q", lengths[0] - 1)
    _patch(index_path, table_offset + 24 + 8, "<q", lengths[1] + 1)
    with pytest.raises(IndexFormatError, match="list 1 has"):
        open_ivf(index_path)
    _patch(index_path, table_offset + 8, "<q", lengths[0])
    with pytest.raises(IndexFormatError, match="add up"):
        open_ivf(index_path)
