"""Host reference search: exact search, IVF search over probed lists, recall (the issue's cases)."""

import numpy as np
import pytest

from workloads.vector import (
    SyntheticClusters,
    build_ivf,
    exact_search,
    ivf_search,
    pair_distances,
    probe_lists,
    recall_at_k,
    recall_by_nprobe,
    train_kmeans,
)

DATA = SyntheticClusters(n=3000, dim=12, n_clusters=10, seed=5, spread=0.6)
QUERIES, _ = DATA.queries(40, seed=1)


def naive_topk(query, vectors, ids, k, metric):
    """Brute force written independently of the library: float64 distances, sort by (distance, id), pad."""
    query64 = np.asarray(query, dtype=np.float32).astype(np.float64)
    vectors64 = np.asarray(vectors, dtype=np.float64)
    if metric == "l2":
        distances = ((vectors64 - query64) ** 2).sum(axis=1)
    else:
        distances = -(vectors64 * query64).sum(axis=1)
    order = np.lexsort((ids, distances))[:k]
    pad = k - len(order)
    return (
        np.concatenate([distances[order], np.full(pad, np.inf)]),
        np.concatenate([np.asarray(ids, dtype=np.int64)[order], np.full(pad, -1)]),
    )


@pytest.fixture(scope="module", params=["l2", "ip"])
def index(request, tmp_path_factory):
    metric = request.param
    centroids = train_kmeans(DATA, 16, metric=metric, n_iter=8, seed=0)
    return build_ivf(tmp_path_factory.mktemp(metric) / "index.ivf", DATA, centroids, metric=metric, page_size=512)


# --- exact search ---------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_exact_search_matches_a_naive_brute_force(metric):
    vectors = np.asarray(DATA)
    # Small chunks: candidates must survive the merge across many chunks.
    distances, ids = exact_search(QUERIES, DATA, 7, metric=metric, chunk_rows=250)
    assert distances.dtype == np.float64 and ids.dtype == np.int64 and ids.shape == (40, 7)
    for q, query in enumerate(QUERIES):
        want_distances, want_ids = naive_topk(query, vectors, np.arange(3000), 7, metric)
        np.testing.assert_array_equal(ids[q], want_ids)
        np.testing.assert_array_equal(distances[q], want_distances)


def test_exact_search_is_exact_where_float32_scores_cancel():
    # Points crowded far from the origin: the float32 matrix-product scores are dominated by
    # rounding, so nearly everything is shortlisted, and the exact float64 ranking still decides.
    rng = np.random.default_rng(0)
    vectors = (1000 + rng.standard_normal((2000, 8)) * 1e-2).astype(np.float32)
    queries = (1000 + rng.standard_normal((5, 8)) * 1e-2).astype(np.float32)
    _, ids = exact_search(queries, vectors, 10, chunk_rows=300)
    for q, query in enumerate(queries):
        np.testing.assert_array_equal(ids[q], naive_topk(query, vectors, np.arange(2000), 10, "l2")[1])


def test_pair_distance_does_not_depend_on_the_batch():
    vectors = np.asarray(DATA)
    batch = pair_distances(QUERIES[3], vectors)
    alone = np.array([pair_distances(QUERIES[3], vectors[i]) for i in (0, 17, 2999)])
    np.testing.assert_array_equal(batch[[0, 17, 2999]], alone)
    np.testing.assert_array_equal(pair_distances(QUERIES[:, None], vectors[None, :50])[3], batch[:50])


# --- ties and duplicates --------------------------------------------------------------------


def test_equal_distances_are_ranked_by_id():
    vectors = np.array([[1, 0], [0, 1], [-1, 0], [0, -1], [1, 0], [2, 0]], dtype=np.float32)
    distances, ids = exact_search(np.array([[0.0, 0.0], [1.0, 0.0]]), vectors, 6)
    np.testing.assert_array_equal(ids[0], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(distances[0], [1, 1, 1, 1, 1, 4])
    np.testing.assert_array_equal(ids[1], [0, 4, 5, 1, 3, 2])  # duplicates 0 and 4 first, by id
    _, ids_ip = exact_search(np.array([1.0, 0.0]), vectors, 3, metric="ip")
    np.testing.assert_array_equal(ids_ip[0], [5, 0, 4])


def test_many_duplicates_and_ties_match_brute_force_in_ivf_and_exact(tmp_path):
    # Small integer coordinates: hundreds of exact duplicates and exactly tied distances.
    rng = np.random.default_rng(2)
    vectors = rng.integers(0, 3, size=(1200, 4)).astype(np.float32)
    vectors[100:700] = vectors[50]  # 600 copies of one vector
    queries = np.concatenate([vectors[:1], vectors[50:51], rng.integers(0, 3, size=(8, 4))]).astype(np.float32)
    index = build_ivf(tmp_path / "ties.ivf", vectors, train_kmeans(vectors, 6, n_iter=5, seed=0), page_size=512)
    exact_distances, exact_ids = exact_search(queries, vectors, 20, chunk_rows=128)
    ivf_distances, ivf_ids = ivf_search(index, queries, 20, nprobe=index.n_lists)
    probes = probe_lists(queries, index.centroids, 2)
    partial_ids = ivf_search(index, queries, 20, nprobe=2)[1]
    for q, query in enumerate(queries):
        np.testing.assert_array_equal(exact_ids[q], naive_topk(query, vectors, np.arange(1200), 20, "l2")[1])
        lists = [index.list_ids(int(l)) for l in probes[q]]
        candidates = np.concatenate(lists)
        np.testing.assert_array_equal(partial_ids[q], naive_topk(query, vectors[candidates], candidates, 20, "l2")[1])
    np.testing.assert_array_equal(ivf_ids, exact_ids)
    np.testing.assert_array_equal(ivf_distances, exact_distances)
    np.testing.assert_array_equal(exact_ids[1], [50, *range(100, 119)])  # query = the duplicated vector


# --- IVF search -----------------------------------------------------------------------------


def test_recall_is_one_when_every_list_is_probed(index):
    exact_distances, exact_ids = exact_search(QUERIES, DATA, 10, metric=index.metric)
    distances, ids = ivf_search(index, QUERIES, 10, nprobe=index.n_lists)
    assert recall_at_k(ids, exact_ids, 10) == 1.0
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_array_equal(distances, exact_distances)


def test_ivf_top_k_equals_brute_force_over_the_probed_lists(index):
    vectors = np.asarray(DATA)
    nprobe = 3
    probes = probe_lists(QUERIES, index.centroids, nprobe, index.metric)
    distances, ids = ivf_search(index, QUERIES, 10, nprobe)
    for q, query in enumerate(QUERIES):
        # The probe choice itself: the nprobe nearest centroids, ties to the lower list number.
        np.testing.assert_array_equal(probes[q], naive_topk(query, index.centroids, np.arange(16), nprobe, index.metric)[1])
        candidates = np.concatenate([index.list_ids(int(l)) for l in probes[q]])
        want_distances, want_ids = naive_topk(query, vectors[candidates], candidates, 10, index.metric)
        np.testing.assert_array_equal(ids[q], want_ids)
        np.testing.assert_array_equal(distances[q], want_distances)


def test_k_larger_than_the_probed_lists_is_padded(index):
    query = QUERIES[0]
    list_no = int(probe_lists(query, index.centroids, 1, index.metric)[0, 0])
    length = int(index.list_lengths[list_no])
    distances, ids = ivf_search(index, query, length + 5, nprobe=1)
    assert set(ids[0, :length]) == set(index.list_ids(list_no))
    assert np.isfinite(distances[0, :length]).all()
    np.testing.assert_array_equal(ids[0, length:], -1)
    np.testing.assert_array_equal(distances[0, length:], np.inf)
    distances, ids = exact_search(query, np.asarray(DATA)[:3], 5)
    np.testing.assert_array_equal(ids[0, 3:], [-1, -1])


def test_dimension_mismatch_is_a_clear_error(index):
    wrong = np.zeros((2, 13), dtype=np.float32)
    with pytest.raises(ValueError, match="dimension mismatch: the queries have dimension 13 but the index has dimension 12"):
        ivf_search(index, wrong, 10, nprobe=2)
    with pytest.raises(ValueError, match="dimension mismatch"):
        exact_search(wrong, DATA, 10)
    with pytest.raises(ValueError, match="dimension mismatch"):
        probe_lists(wrong, index.centroids, 2)


def test_bad_arguments_are_clear_errors(index):
    with pytest.raises(ValueError, match="nprobe"):
        ivf_search(index, QUERIES, 10, nprobe=0)
    with pytest.raises(ValueError, match="nprobe"):
        ivf_search(index, QUERIES, 10, nprobe=index.n_lists + 1)
    with pytest.raises(ValueError, match="k must be"):
        ivf_search(index, QUERIES, 0, nprobe=1)
    with pytest.raises(ValueError, match="metric"):
        exact_search(QUERIES, DATA, 3, metric="cosine")
    with pytest.raises(ValueError, match="query 1 holds NaN"):
        exact_search(np.array([[0.0] * 12, [np.nan] * 12]), DATA, 3)


def test_recall_report_counts_pages_and_reaches_exact(index):
    exact_ids = exact_search(QUERIES, DATA, 10, metric=index.metric)[1]
    report = recall_by_nprobe(index, QUERIES, [1, 4, index.n_lists], k=10, true_ids=exact_ids)
    assert [row["nprobe"] for row in report] == [1, 4, 16]
    assert report[0]["recall"] <= report[1]["recall"] <= report[2]["recall"] == 1.0
    assert report[2]["vectors_per_query"] == 3000
    assert report[2]["pages_per_query"] == index.list_pages.sum() == index.vectors_nbytes // index.page_size
    assert recall_by_nprobe(index, QUERIES, [index.n_lists])[0]["recall"] == 1.0


# --- recall ---------------------------------------------------------------------------------


def test_recall_at_k():
    true = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert recall_at_k(true, true, 4) == 1.0
    assert recall_at_k(np.array([[4, 3, 9, 9], [8, 0, 0, 0]]), true, 4) == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert recall_at_k(np.array([[1, 9], [9, 9]]), true, 1) == 0.5
    # Padding is never a hit; a query with fewer true neighbours than k is scored on those it has.
    assert recall_at_k(np.array([[3, -1, -1]]), np.array([[3, -1, -1]]), 3) == 1.0
    with pytest.raises(ValueError, match="columns"):
        recall_at_k(true[:, :2], true, 4)
    with pytest.raises(ValueError, match="no valid"):
        recall_at_k(np.array([[1]]), np.array([[-1]]), 1)
