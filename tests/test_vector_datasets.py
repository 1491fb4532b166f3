"""Vector data sets: the synthetic generator, and the .fvecs/.bvecs/.ivecs/.npy readers and writers."""

import struct

import numpy as np
import pytest

from workloads.vector import (
    SyntheticClusters,
    VectorFileError,
    iter_row_chunks,
    load_vectors,
    save_vectors,
)

# --- synthetic clustered data -------------------------------------------------------------


def test_synthetic_data_is_float32_and_a_function_of_its_parameters():
    a = SyntheticClusters(n=1000, dim=8, n_clusters=5, seed=3)
    b = SyntheticClusters(n=1000, dim=8, n_clusters=5, seed=3)
    assert a.shape == (1000, 8) and len(a) == 1000 and a.dtype == np.float32
    full = np.asarray(a)
    assert full.dtype == np.float32 and full.shape == (1000, 8)
    np.testing.assert_array_equal(full, np.asarray(b))
    assert not np.array_equal(full, np.asarray(SyntheticClusters(n=1000, dim=8, n_clusters=5, seed=4)))


def test_synthetic_slices_agree_with_the_whole_array_across_block_borders():
    # 70000 rows spans two generation blocks of 65536.
    data = SyntheticClusters(n=70000, dim=3, n_clusters=4, seed=1)
    full = np.asarray(data)
    np.testing.assert_array_equal(data[65530:65540], full[65530:65540])
    rows = np.array([69999, 5, 65536, 5])
    np.testing.assert_array_equal(data[rows], full[rows])
    np.testing.assert_array_equal(data[-1], full[-1])
    assert data[10, 2] == full[10, 2]
    np.testing.assert_array_equal(data[::7000, 1], full[::7000, 1])
    mask = np.zeros(70000, dtype=bool)
    mask[[0, 65535, 65536]] = True
    np.testing.assert_array_equal(data[mask], full[mask])
    chunks = [chunk for _, chunk in iter_row_chunks(data, 30000)]
    np.testing.assert_array_equal(np.concatenate(chunks), full)
    with pytest.raises(IndexError):
        data[70000]


def test_synthetic_points_lie_around_their_centres():
    data = SyntheticClusters(n=2000, dim=16, n_clusters=10, seed=0, spread=0.1)
    points = np.asarray(data)
    to_centres = np.linalg.norm(points[:, None, :] - data.centers[None], axis=2)
    # Noise norm is about spread * sqrt(dim) = 0.4; centres are about sqrt(2 * dim) = 5.7 apart.
    assert to_centres.min(axis=1).max() < 1.0
    assert np.bincount(to_centres.argmin(axis=1), minlength=10).min() > 100


def test_skewed_query_stream_puts_80_percent_of_queries_in_20_percent_of_clusters():
    data = SyntheticClusters(n=10, dim=4, n_clusters=50, seed=2)
    queries, clusters = data.queries(20000, seed=5, skewed=True)
    assert queries.shape == (20000, 4) and queries.dtype == np.float32
    counts = np.sort(np.bincount(clusters, minlength=50))[::-1]
    assert counts[:10].sum() / 20000 == pytest.approx(0.8, abs=0.015)
    _, uniform_clusters = data.queries(20000, seed=5)
    uniform_counts = np.sort(np.bincount(uniform_clusters, minlength=50))[::-1]
    assert uniform_counts[:10].sum() / 20000 < 0.3


def test_queries_are_reproducible_and_fresh_points():
    data = SyntheticClusters(n=500, dim=6, n_clusters=3, seed=0)
    q1, c1 = data.queries(50, seed=1)
    q2, c2 = data.queries(50, seed=1)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(c1, c2)
    assert not np.array_equal(q1, data.queries(50, seed=2)[0])
    assert not (np.asarray(data)[None] == q1[:, None]).all(axis=2).any()


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ValueError, match="n_clusters"):
        SyntheticClusters(n=10, dim=2, n_clusters=0)
    with pytest.raises(ValueError, match="hot_query_share"):
        SyntheticClusters(n=10, dim=2, n_clusters=2).queries(5, skewed=True, hot_query_share=0)


# --- file formats -------------------------------------------------------------------------


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize(
    "fmt, dtype",
    [("fvecs", np.float32), ("bvecs", np.uint8), ("ivecs", np.int32), ("npy", np.float32), ("npy", np.uint8)],
)
def test_round_trip(tmp_path, fmt, dtype, mmap):
    rng = np.random.default_rng(0)
    vectors = rng.integers(0, 256, size=(37, 5)).astype(dtype)
    path = tmp_path / f"v.{fmt}"
    save_vectors(path, vectors, chunk_rows=10)
    loaded = load_vectors(path, mmap=mmap)
    assert loaded.dtype == dtype and loaded.shape == (37, 5)
    np.testing.assert_array_equal(loaded, vectors)


def test_fvecs_bytes_are_the_benchmark_layout(tmp_path):
    path = tmp_path / "two.fvecs"
    save_vectors(path, np.array([[1.5, -2.0], [3.0, 0.25]], dtype=np.float64))
    assert path.read_bytes() == struct.pack("<iff", 2, 1.5, -2.0) + struct.pack("<iff", 2, 3.0, 0.25)


def test_save_streams_a_lazy_source(tmp_path):
    data = SyntheticClusters(n=300, dim=4, n_clusters=3, seed=9)
    save_vectors(tmp_path / "s.npy", data, chunk_rows=64)
    save_vectors(tmp_path / "s.fvecs", data, chunk_rows=64)
    np.testing.assert_array_equal(load_vectors(tmp_path / "s.npy"), np.asarray(data))
    np.testing.assert_array_equal(load_vectors(tmp_path / "s.fvecs"), np.asarray(data))


def _fvecs(path, rows):
    path.write_bytes(b"".join(struct.pack(f"<i{len(r)}f", len(r), *r) for r in rows))
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "too short"),
        (struct.pack("<i", -3) + b"\0" * 12, "dimension -3"),
        (struct.pack("<i", 1000) + b"\0" * 12, "dimension 1000"),
        ((struct.pack("<ifff", 3, 1, 2, 3) * 2)[:-2], "not a whole number"),
    ],
)
def test_malformed_fvecs_is_refused(tmp_path, content, message):
    path = tmp_path / "bad.fvecs"
    path.write_bytes(content)
    with pytest.raises(VectorFileError, match=message):
        load_vectors(path)


def test_a_row_with_another_dimension_is_refused(tmp_path):
    good = [[1.0, 2.0]] * 4
    last_bad = _fvecs(tmp_path / "last.fvecs", good)
    raw = bytearray(last_bad.read_bytes())
    raw[36:40] = struct.pack("<i", 7)  # the dimension word of row 3
    last_bad.write_bytes(bytes(raw))
    with pytest.raises(VectorFileError, match="row 3 declares dimension 7"):
        load_vectors(last_bad)
    middle_bad = tmp_path / "middle.fvecs"
    raw = bytearray(_fvecs(middle_bad, good).read_bytes())
    raw[12:16] = struct.pack("<i", 7)  # row 1: only a full read sees it
    middle_bad.write_bytes(bytes(raw))
    with pytest.raises(VectorFileError, match="row 1 declares dimension 7"):
        load_vectors(middle_bad, mmap=False)


def test_a_file_of_another_vecs_type_is_refused(tmp_path):
    fvecs = _fvecs(tmp_path / "x.fvecs", [[float(i)] * 128 for i in range(11)])
    with pytest.raises(VectorFileError):
        load_vectors(fvecs, format="bvecs")


def test_npy_problems_are_refused(tmp_path):
    np.save(tmp_path / "one_d.npy", np.arange(5.0))
    with pytest.raises(VectorFileError, match="2-D"):
        load_vectors(tmp_path / "one_d.npy")
    np.save(tmp_path / "text.npy", np.array([["a", "b"]]))
    with pytest.raises(VectorFileError, match="numeric"):
        load_vectors(tmp_path / "text.npy")
    np.save(tmp_path / "cut.npy", np.ones((100, 4), dtype=np.float32))
    cut = tmp_path / "cut.npy"
    cut.write_bytes(cut.read_bytes()[:-8])
    for mmap in (True, False):
        with pytest.raises(VectorFileError, match="not a readable"):
            load_vectors(cut, mmap=mmap)
    (tmp_path / "junk.npy").write_bytes(b"not an array at all")
    with pytest.raises(VectorFileError, match="not a readable"):
        load_vectors(tmp_path / "junk.npy")


def test_unknown_suffix_is_refused(tmp_path):
    with pytest.raises(VectorFileError, match="format="):
        load_vectors(tmp_path / "vectors.bin")


def test_writers_refuse_values_the_format_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="row 1"):
        save_vectors(tmp_path / "b.bvecs", np.array([[1, 2], [3, 256]]))
    with pytest.raises(ValueError, match="not an integer"):
        save_vectors(tmp_path / "i.ivecs", np.array([[1.5, 2.0]]))
    with pytest.raises(ValueError, match="NaN"):
        save_vectors(tmp_path / "f.fvecs", np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="no rows"):
        save_vectors(tmp_path / "e.fvecs", np.zeros((0, 3)))


def test_iter_row_chunks_refuses_non_2d_sources():
    with pytest.raises(ValueError, match="2-D"):
        list(iter_row_chunks(np.zeros(5), 2))
