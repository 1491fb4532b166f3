"""GPU IVF search (workloads.vector.gpu_search) in the simulator: the reference's answers, bit for bit.

Kept tiny (one Python thread per CUDA thread; a read through gids costs about a millisecond
there): a few hundred vectors of dimension 8 to 12, a handful of queries, blocks of 32.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gids
from tests.helpers import CompileScript, default_engine, started_early
from workloads.vector import (
    SyntheticClusters,
    build_ivf,
    exact_search,
    gpu_search,
    ivf_search,
    pair_distances,
    probe_lists,
    recall_at_k,
    train_kmeans,
)
from workloads.vector.gpu_search import (
    DataPath,
    GPUSearcher,
    get_data_path,
    pairwise_plan,
    pairwise_sum,
    register_data_path,
    search,
)

PAGE = 512
DELTA = np.float32(0.125)


def _tied_data(n, dim, n_clusters, seed):
    """Clustered vectors with exact ties planted: copies of row 3, and rows 30/31 at +-DELTA from row 40."""
    data = np.asarray(SyntheticClusters(n=n, dim=dim, n_clusters=n_clusters, seed=seed, spread=0.7))
    data[10:15] = data[3]                                  # duplicates of row 3 (distance ties)
    data[40] = np.round(data[40] * 1024) / 1024            # coarse values: c +- DELTA is exact
    data[30], data[31] = data[40], data[40]
    data[30, 0] += DELTA
    data[31, 0] -= DELTA                                    # rows 30 and 31 tie around row 40
    return data


@pytest.fixture(scope="module")
def l2(tmp_path_factory):
    """L2 index over 240 vectors (dim 8) with planted ties, 6 k-means lists plus a duplicate
    centroid (an empty list, and a tie when probing), and queries that hit the ties."""
    data = _tied_data(240, 8, 6, seed=3)
    centroids = train_kmeans(data, 6, n_iter=10, seed=0)
    centroids = np.vstack([centroids, centroids[2:3]])      # list 6 duplicates list 2: empty
    index = build_ivf(tmp_path_factory.mktemp("l2") / "l2.ivf", data, centroids, page_size=PAGE)
    queries = SyntheticClusters(n=240, dim=8, n_clusters=6, seed=3, spread=0.7).queries(4, seed=1)[0]
    queries[0] = data[3]          # six vectors at distance 0: ids 3, 10..14 in that order
    queries[1] = data[40]         # 40 at distance 0, then 30 and 31 tied at DELTA**2
    return index, data, queries


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    data = np.asarray(SyntheticClusters(n=160, dim=12, n_clusters=4, seed=5, spread=0.8))
    data[20:23] = data[7]
    centroids = train_kmeans(data, 4, metric="ip", n_iter=10, seed=0)
    index = build_ivf(tmp_path_factory.mktemp("ip") / "ip.ivf", data, centroids, metric="ip", page_size=PAGE)
    queries = SyntheticClusters(n=160, dim=12, n_clusters=4, seed=5, spread=0.8).queries(3, seed=2)[0]
    queries[0] = data[7]
    return index, data, queries


@pytest.fixture(scope="module")
def runtime():
    with gids.Runtime(cache_pages=64, page_size=PAGE) as rt:
        yield rt


@pytest.fixture(scope="module")
def nvme_runtime():
    """A Runtime on the direct NVMe path, with a cache smaller than the l2 index's vectors."""
    with gids.Runtime("nvme", cache_pages=4, page_size=PAGE) as rt:
        yield rt


def _assert_matches_reference(result, index, queries, k, nprobe):
    want_d, want_i = ivf_search(index, queries, k, nprobe)
    np.testing.assert_array_equal(result.ids, want_i)
    # The kernel adds in numpy's order, so the distances are equal, not merely close: the same
    # bits (-0.0 is not +0.0 here).
    np.testing.assert_array_equal(result.distances.view(np.uint64), want_d.view(np.uint64))


# --- summation order (host only) -------------------------------------------------------------


def test_pairwise_plan_is_numpys_summation_order():
    rng = np.random.default_rng(0)
    for dim in [*range(1, 300), 384, 960, 1000, 1536]:
        q = rng.standard_normal((3, dim)).astype(np.float32) * np.float32(100) ** rng.integers(-1, 2, (3, dim))
        x = rng.standard_normal((3, dim)).astype(np.float32)
        terms = (q.astype(np.float64) - x) ** 2
        want = pair_distances(q, x, "l2")
        got = [pairwise_sum(t) for t in terms]
        assert np.array_equal(got, want), f"dim {dim}: the kernel's summation order is not numpy's"
        # Zeros of both signs: numpy's sum of -0.0 terms only is +0.0 (its reduction starts from
        # +0.0), and an inner product has -0.0 terms where the query is 0 and x < 0.
        for zeros in (np.full(dim, -0.0), np.where(rng.random(dim) < 0.5, -0.0, 0.0)):
            got, want = np.float64(pairwise_sum(zeros)), np.add.reduce(zeros)
            assert got.view(np.uint64) == want.view(np.uint64), f"dim {dim}: {got} is not numpy's {want}"
    lengths, combines, depth = pairwise_plan(960)
    assert lengths.sum() == 960 and lengths.max() <= 128 and combines.sum() == len(lengths) - 1
    assert depth >= 2


def _sum_by_groups(terms, ends):
    """The kernel's register path on the host: 8 accumulators, a group of 8 terms at a time
    (the pairwise sum, before the kernel adds it to +0.0 as numpy does)."""
    stack = []
    acc = None                            # a leaf's first group is assigned, not added to 0.0
    for g, combines in enumerate(ends):
        group = terms[8 * g:8 * g + 8]
        acc = group.copy() if acc is None else acc + group
        if combines >= 0:                 # a leaf ends with this group
            stack.append(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])))
            for _ in range(combines):
                right = stack.pop()
                stack[-1] = stack[-1] + right
            acc = None
    assert len(stack) == 1 and acc is None
    return stack[0]


def test_dims_that_are_multiples_of_8_sum_in_whole_groups_of_8():
    """The register path's premise: for dim % 8 == 0 numpy's leaves are whole groups of 8."""
    rng = np.random.default_rng(1)
    for dim in [*range(8, 2049, 8), 2560, 3072, 4096, 8192]:
        lengths, combines, _ = pairwise_plan(dim)
        assert (lengths % 8 == 0).all(), f"dim {dim}: a leaf of {lengths} is not whole groups of 8"
        ends = gpu_search._group_ends(dim)
        assert len(ends) == dim // 8 and ends[-1] == combines[-1]
        np.testing.assert_array_equal(ends[ends >= 0], combines)
        terms = rng.standard_normal(dim) * 100.0 ** rng.integers(-2, 3, dim)
        assert _sum_by_groups(terms, ends) == np.add.reduce(terms), f"dim {dim}: not numpy's sum"
    for dim in (7, 12, 33, 132):
        with pytest.raises(ValueError, match="whole groups of 8"):
            gpu_search._group_ends(dim)


# --- results --------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("dim", [8, 16, 24, 40, 128, 136, 256, 7, 12, 33])
def test_both_summation_paths_give_numpys_distances(tmp_path, dim, metric):
    """dim % 8 == 0: the register path (40, 136: a last chunk of 8 components; 136, 256: two
    leaves); 7, 12, 33: the general path. Both in the search and in the probing (nprobe 1)."""
    rng = np.random.default_rng(dim)
    n, n_lists = 20, 4
    # Components of mixed magnitudes: another order of the additions would change low bits.
    vectors = (rng.standard_normal((n + 3, dim)) * 100.0 ** rng.integers(-1, 2, (n + 3, dim))).astype(np.float32)
    data, queries = vectors[:n], vectors[n:]
    data[5] = -np.abs(data[5])
    queries[-1] = 0.0     # ip: with row 5 every term is -0.0 (numpy's distance: -(+0.0))
    index = build_ivf(tmp_path / "v.ivf", data, data[:n_lists].copy(), metric=metric, page_size=PAGE)
    with GPUSearcher(index, "memory") as searcher:
        for nprobe in (1, n_lists):
            result = searcher.search(queries, n, nprobe)
            _assert_matches_reference(result, index, queries, n, nprobe)
    if metric == "ip":    # the zero query's: all zero, and compared bit for bit above
        assert (result.distances[-1] == 0).all() and 5 in result.ids[-1]


@pytest.mark.parametrize("data_path, nprobes", [("memory", (1, 2, 7)), ("gids", (7,)),
                                               ("nvme", (7,))])
def test_l2_matches_reference_with_ties(l2, runtime, nvme_runtime, data_path, nprobes):
    index, data, queries = l2
    if data_path != "memory":
        queries = queries[:2]     # the two with planted ties: reads through gids are slow here
    rt = nvme_runtime if data_path == "nvme" else runtime
    with GPUSearcher(index, data_path, runtime=rt) as searcher:
        for nprobe in nprobes:
            result = searcher.search(queries, 10, nprobe)
            _assert_matches_reference(result, index, queries, 10, nprobe)
    assert list(result.ids[0, :6]) == [3, 10, 11, 12, 13, 14]
    assert list(result.ids[1, :3]) == [40, 30, 31] and result.distances[1, 1] == result.distances[1, 2]
    # Every list probed: the exact search, so recall@10 is 1.
    assert recall_at_k(result.ids, exact_search(queries, data, 10)[1], 10) == 1.0
    assert result.data_path == data_path and result.seconds > 0 and result.simulator == gids.SIMULATOR


@pytest.mark.parametrize("data_path", ["memory", "gids"])
def test_inner_product_matches_reference(ip, runtime, data_path):
    index, data, queries = ip
    result = search(index, queries[:2], 6, 2, runtime=runtime, data_path=data_path)
    _assert_matches_reference(result, index, queries[:2], 6, 2)
    row = list(result.ids[0])
    if 7 in row:                              # the copies of row 7 tie: together, by id
        at = row.index(7)
        assert row[at:at + 4] == [7, 20, 21, 22] or row[at:] == [7, 20, 21, 22][:len(row) - at]


def test_long_vectors_are_staged_in_chunks_and_summed_in_numpys_order(tmp_path):
    """dim 200: seven shared-memory chunks per vector, and two leaves of numpy's summation tree."""
    data = SyntheticClusters(n=48, dim=200, n_clusters=2, seed=9, spread=3.0)
    index = build_ivf(tmp_path / "long.ivf", data, train_kmeans(data, 2, n_iter=5, seed=0), page_size=PAGE)
    queries = data.queries(2, seed=4)[0]
    assert len(pairwise_plan(200)[0]) == 2
    result = search(index, queries, 5, 2, data_path="memory")
    _assert_matches_reference(result, index, queries, 5, 2)


def test_k_larger_than_the_probed_lists_is_padded(l2):
    index, _, queries = l2
    k = 48                                    # more than some probed lists hold, fewer than others
    result = search(index, queries, k, 1, data_path="memory")
    _assert_matches_reference(result, index, queries, k, 1)
    found = result.ids >= 0
    lengths = index.list_lengths[probe_lists(queries, index.centroids, 1)[:, 0]]
    assert (lengths < k).any() and (lengths >= k).any()
    np.testing.assert_array_equal(found.sum(axis=1), np.minimum(lengths, k))
    assert (result.distances[~found] == np.inf).all() and np.isfinite(result.distances[found]).all()


def test_gpu_probing_is_probe_lists_with_centroid_ties(l2):
    index, _, queries = l2
    near_tied = np.vstack([queries, index.centroids[2] + np.float32(0.01)])
    with GPUSearcher(index, "memory") as searcher:
        from numba import cuda
        d_queries = cuda.to_device(near_tied.astype(np.float32))
        for nprobe in (1, 2, 7):
            got = searcher._probe_gpu(d_queries, nprobe).copy_to_host()
            np.testing.assert_array_equal(got, probe_lists(near_tied, index.centroids, nprobe))
        assert list(got[-1, :2]) == [2, 6]     # the duplicate centroids tie: lower list first
        host = searcher.search(queries, 10, 3, probe="host")
        gpu = searcher.search(queries, 10, 3, probe="gpu")
    np.testing.assert_array_equal(host.ids, gpu.ids)
    assert host.list_pages_per_query == gpu.list_pages_per_query


def test_cache_smaller_than_the_vectors_evicts_and_stays_exact(l2):
    index, _, queries = l2
    pages = index.vectors_nbytes // PAGE
    with gids.Runtime(cache_pages=4, page_size=PAGE) as rt:
        assert rt.cache_slots < pages
        result = search(index, queries[:2], 10, 3, runtime=rt, data_path="gids")
    _assert_matches_reference(result, index, queries[:2], 10, 3)
    assert result.evictions > 0
    assert result.ios >= 4 and result.pages_per_query == result.ios / 2
    assert 0 < result.hit_rate < 1


def test_work_items_split_each_probed_list_into_runs_of_its_queries():
    """Every (query, probe) pair is in exactly one item, items of a list hold only its queries,
    no item holds more than per_item, and unprobed lists get none."""
    rng = np.random.default_rng(5)
    probes = np.stack([rng.choice(9, 3, replace=False) for _ in range(50)]).astype(np.int64)
    probes[probes == 4] = 5          # list 4 is probed by nobody (duplicates in a row are fine here)
    pair_q, pair_p, items = gpu_search.work_items(probes, 9, 4)
    seen = np.zeros(probes.shape, dtype=int)
    for lst, first, n in items:
        assert 1 <= n <= 4
        q, p = pair_q[first:first + n], pair_p[first:first + n]
        assert (probes[q, p] == lst).all()
        seen[q, p] += 1
    assert (seen == 1).all()
    assert 4 not in items[:, 0] and list(items[:, 0]) == sorted(items[:, 0])
    full = np.bincount(probes.ravel(), minlength=9)
    for lst in range(9):
        assert np.count_nonzero(items[:, 0] == lst) == -(-full[lst] // 4)


def test_queries_in_any_order_get_the_same_results(l2):
    """The kernel scans lists, not queries: reversing the batch reverses the answers, bit for bit."""
    index, _, queries = l2
    with GPUSearcher(index, "memory") as searcher:
        a = searcher.search(queries, 10, 2)
        b = searcher.search(queries[::-1].copy(), 10, 2)
    _assert_matches_reference(a, index, queries, 10, 2)
    assert np.array_equal(a.ids, b.ids[::-1])
    assert np.array_equal(a.distances.view(np.int64), b.distances[::-1].view(np.int64))


def test_dimension_mismatch_is_refused_before_any_kernel(l2, monkeypatch):
    index, _, queries = l2

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was launched")

    wrong = np.zeros((2, index.dim + 1), dtype=np.float32)
    monkeypatch.setattr(gpu_search, "GPUSearcher", no_kernel)     # search() must not even open
    with pytest.raises(ValueError, match="dimension mismatch: the queries have dimension 9 but the index has dimension 8"):
        search(index, wrong, 10, 1, data_path="gids")
    monkeypatch.undo()
    with GPUSearcher(index, "memory") as searcher:
        monkeypatch.setattr(searcher, "_probe_gpu", no_kernel)
        monkeypatch.setattr(searcher, "_scan", no_kernel)
        with pytest.raises(ValueError, match="dimension mismatch"):
            searcher.search(wrong, 10, 1)
        with pytest.raises(ValueError, match="nprobe"):
            searcher.search(queries, 10, index.n_lists + 1)
        with pytest.raises(ValueError, match="k must be"):
            searcher.search(queries, 0, 1)


def test_nvme_path_reads_through_an_nvme_runtime(l2, runtime):
    index, _, queries = l2
    # Its own Runtime (default cache) when given none: NVMe commands to the emulated controller.
    with GPUSearcher(index, "nvme") as searcher:
        assert searcher.source.runtime.backend == "nvme"
        result = searcher.search(queries[2:3], 10, 2)
        assert searcher.source.runtime.daemon.counters["commands"] == result.ios > 0
    _assert_matches_reference(result, index, queries[2:3], 10, 2)
    assert result.data_path == "nvme"
    # A Runtime of the other backend would measure one path under the other's name.
    with pytest.raises(ValueError, match="backend='nvme', not 'host'"):
        GPUSearcher(index, "nvme", runtime=runtime)


def test_data_path_registry():
    assert gpu_search.data_path_names()[:3] == ["gids", "memory", "nvme"]
    assert get_data_path("nvme").backend == "nvme" and get_data_path("memory").backend is None
    assert get_data_path("memory").open is gpu_search._MemorySource
    with pytest.raises(ValueError, match="unknown data path 'spdk'"):
        get_data_path("spdk")
    with pytest.raises(ValueError, match="already registered"):
        register_data_path(DataPath("gids", gpu_search._MemorySource))


def test_a_registered_data_path_runs_the_same_search(l2, monkeypatch):
    """The hook for other paths: a source with its own reader and launch, the same kernel."""
    index, _, queries = l2
    launched = []

    class Source(gpu_search._MemorySource):
        def launch(self, template, griddim, blockdim, args):
            launched.append(args[3].copy_to_host())          # the work items
            super().launch(template, griddim, blockdim, args)

    monkeypatch.setitem(gpu_search.DATA_PATHS, "test-copy", DataPath("test-copy", Source))
    result = search(index, queries, 5, 2, data_path="test-copy")
    _assert_matches_reference(result, index, queries, 5, 2)
    # The work: the probed lists, each for the queries that probe it.
    probed = probe_lists(queries, index.centroids, 2)
    np.testing.assert_array_equal(launched[0][:, 0], np.unique(probed))
    assert result.data_path == "test-copy" and result.ios == 0 and result.hit_rate is None


@pytest.mark.parametrize("name", ["zero_copy", "cpu_batch"])
def test_baseline_paths_run_the_search_template(l2, name):
    """workloads.baselines paths take the search kernel as a template (cpu_batch reruns it)."""
    baselines = pytest.importorskip("workloads.baselines")
    if name not in baselines.PATHS:
        pytest.skip(f"workloads.baselines has no {name!r} path")
    index, _, queries = l2
    pages = index.vectors_nbytes // PAGE
    result = search(index, queries[2:3], 10, 2, data_path=name, batch_pages=pages)
    _assert_matches_reference(result, index, queries[2:3], 10, 2)
    if name == "cpu_batch":
        assert 0 < result.ios <= pages


# --- command line ---------------------------------------------------------------------------


def test_search_command(tmp_path, capsys):
    from workloads.vector.cli import main

    out = tmp_path / "search.json"
    status = main(["search", "--n", "120", "--dim", "8", "--lists", "3", "--queries", "2",
                   "--nprobe", "1,3,8", "--data-path", "gids,memory", "--cache-fraction", "0.5",
                   "--no-faiss", "--json", str(out)])
    assert status == 0
    text = capsys.readouterr()
    assert "simulator figures" in text.out and "QPS (simulator)" in text.out
    assert "nprobe [8] dropped" in text.err
    report = json.loads(out.read_text())
    assert report["simulator"] is True and report["faiss"] is None
    assert report["recall_queries"] == 2   # the simulator's default: every query
    rows = {(r["nprobe"], r["data_path"]): r for r in report["rows"]}
    assert set(rows) == {(1, "gids"), (1, "memory"), (3, "gids"), (3, "memory")}
    assert rows[3, "gids"]["recall"] == rows[3, "memory"]["recall"] == 1.0
    assert rows[1, "gids"]["recall"] == rows[1, "memory"]["recall"]
    assert rows[3, "gids"]["ios"] > 0 and rows[3, "memory"]["hit_rate"] is None


def test_search_command_emulated_ssd_rows(tmp_path, capsys):
    """--ssd / --n-ssd: gids and nvme rows once unemulated and once per drive count."""
    from workloads.vector.cli import main

    out = tmp_path / "search.json"
    status = main(["search", "--n", "120", "--dim", "8", "--lists", "3", "--queries", "1",
                   "--nprobe", "3", "--data-path", "gids,nvme,memory", "--cache-fraction", "0.5",
                   "--ssd", "ideal", "--n-ssd", "1,2", "--no-faiss", "--json", str(out)])
    text = capsys.readouterr()
    assert status == 0, text.err
    lines = text.out.splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("---")][0] + 1
    cells = [line.split() for line in lines[start:start + 7]]
    assert [c[1:3] for c in cells] == [["gids", "-"], ["gids", "1"], ["gids", "2"],
                                       ["nvme", "-"], ["nvme", "1"], ["nvme", "2"],
                                       ["memory", "-"]]
    assert "real-time emulation" in text.out
    report = json.loads(out.read_text())
    assert report["emulations"] == [{"ssd": "ideal", "n_ssd": 1}, {"ssd": "ideal", "n_ssd": 2}]
    rows = report["rows"]
    assert [(r["data_path"], r["emulation"] and r["emulation"]["n_ssd"]) for r in rows] == [
        ("gids", None), ("gids", 1), ("gids", 2), ("nvme", None), ("nvme", 1), ("nvme", 2),
        ("memory", None)]
    assert all(r["emulation"]["ssd"] == "ideal" for r in rows if r["emulation"])
    # The engine column: the Runtime rows' storage engine (--storage file) and, for io_uring,
    # its ring's depth; "-" for a path that reads the file without one.
    engine, depth, cell = default_engine()
    assert [(r["engine"], r["engine_depth"]) for r in rows] == (
        [(engine, depth)] * 6 + [("-", None)])
    assert "engine" in lines[start - 2]
    assert [c[3 if c[2] == "-" else 5] for c in cells] == [cell] * 6 + ["-"]
    # Every list probed: the exact answer on every row, read from storage on the Runtime rows.
    assert all(r["recall"] == 1.0 for r in rows)
    assert all(r["ios"] > 0 for r in rows if r["data_path"] != "memory")

    assert main(["search", "--n", "60", "--dim", "8", "--lists", "2", "--n-ssd", "2"]) == 2
    assert "--n-ssd needs --ssd" in capsys.readouterr().err
    assert main(["search", "--data-path", "memory", "--ssd", "ideal"]) == 2
    assert "--data-path has neither" in capsys.readouterr().err


def test_search_command_measures_recall_over_the_first_queries(tmp_path, capsys):
    """--recall-queries N: the ground truth (the host's exact search) for the first N only."""
    from workloads.vector.cli import main

    out = tmp_path / "search.json"
    status = main(["search", "--n", "120", "--dim", "8", "--lists", "3", "--queries", "5",
                   "--recall-queries", "2", "--nprobe", "3", "--data-path", "memory",
                   "--no-faiss", "--json", str(out)])
    text = capsys.readouterr()
    assert status == 0, text.err
    assert "recall@10 over the first 2 queries" in text.out
    report = json.loads(out.read_text())
    assert report["queries"] == 5 and report["recall_queries"] == 2
    assert report["rows"][0]["recall"] == 1.0 and report["rows"][0]["n_queries"] == 5
    assert main(["search", "--recall-queries", "-1"]) == 2
    assert "--recall-queries must be >= 0" in capsys.readouterr().err


def test_search_command_rejects_bad_ssd_options(capsys):
    from workloads.vector.cli import main

    for argv, message in ((["--ssd", "floppy"], "invalid choice: 'floppy'"),
                          (["--ssd", "ideal", "--n-ssd", "0"], "drive counts must be")):
        with pytest.raises(SystemExit) as exc:
            main(["search", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_search_command_refuses_queries_of_another_dimension(tmp_path, capsys):
    from workloads.vector import save_vectors
    from workloads.vector.cli import main

    save_vectors(tmp_path / "q.npy", np.zeros((2, 5), dtype=np.float32))
    status = main(["search", "--n", "60", "--dim", "8", "--lists", "2", "--query-file",
                   str(tmp_path / "q.npy"), "--data-path", "memory", "--no-faiss"])
    assert status == 2
    assert "dimension mismatch: the queries have dimension 5 but the index has dimension 8" in capsys.readouterr().err


def test_search_arguments_register_on_any_parser():
    import argparse

    from workloads.vector.cli import add_search_arguments, cmd_search

    parser = argparse.ArgumentParser(prog="gids")
    add_search_arguments(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["search", "--index", "x.ivf", "--nprobe", "1,4", "--data-path", "memory",
                              "--skewed", "--k", "5"])
    assert args.func is cmd_search and args.nprobe == [1, 4] and args.data_path == ["memory"]
    assert args.skewed and args.k == 5 and args.index == "x.ivf"
    with pytest.raises(SystemExit):
        parser.parse_args(["search", "--nprobe", "0"])


def test_faiss_column_where_faiss_imports(l2):
    pytest.importorskip("faiss")
    from workloads.vector.cli import _faiss_rows

    index, data, queries = l2
    truth = exact_search(queries, data, 10)[1]
    rows = _faiss_rows(index, queries, truth, 10, 10, [1, index.n_lists])
    assert rows[index.n_lists]["recall"] == 1.0 and rows[1]["qps"] > 0


# --- warps of 32 -----------------------------------------------------------------------------

WARP32_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import gids
    from numba import cuda
    from tests import polite_simulator
    polite_simulator.install()
    from kernels import warp
    from kernels.platform import WARP_SIZE
    from workloads.vector import ivf_search, open_ivf
    from workloads.vector import gpu_search as gs
    assert WARP_SIZE == 32

    @cuda.jit(device=True)
    def read_in_step(src, i):
        # A rendezvous of the whole warp at every read, as gids.read has: a lane left out
        # (or a wholly idle warp let in) would hang or fail here.
        warp.syncwarp(warp.activemask())
        return src[i]

    class InStep(gs._MemorySource):
        reader = staticmethod(read_in_step)

    gs.register_data_path(gs.DataPath("in-step", InStep))
    index = open_ivf(sys.argv[1])
    queries = np.load(sys.argv[2])
    want_d, want_i = ivf_search(index, queries, 10, 2)
    for threads in (32, 64):      # 64: tiles that leave the second warp wholly idle
        r = gs.search(index, queries, 10, 2, data_path="in-step", threads=threads)
        assert np.array_equal(r.ids, want_i) and np.array_equal(r.distances, want_d)
    print("WARP32_OK")
''')


def test_whole_warps_call_the_reader_with_emulated_32_lane_warps(l2, tmp_path):
    """Idle lanes of a partly busy warp still call the reader (gids.read needs the whole warp)."""
    index, _, queries = l2
    np.save(tmp_path / "q.npy", queries[1:2])
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GIDS_SIM_WARP_SIZE="32")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", WARP32_SCRIPT, str(index.path), str(tmp_path / "q.npy")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert "WARP32_OK" in proc.stdout, proc.stderr[-3000:]


# --- the real compiler ----------------------------------------------------------------------

PTX_SCRIPT = textwrap.dedent('''
    import os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    from tests.helpers import fake_handle
    import gids
    from workloads.vector import gpu_search as gs

    h = fake_handle(np.float32)
    vec, mat = types.int64[::1], types.int64[:, ::1]
    f64 = types.float64[:, ::1]
    # dim 12: the general summation path; 200 and 128: the register path. gids reads pages
    # (GIDS_PAGER, what the gids path uses) and elements (any plain reader).
    for reader, src, dim, metric in ((gs.read_memory, types.float32[::1], 12, "ip"),
                                     (gids.read, typeof(h), 200, "l2"),
                                     (gs.GIDS_PAGER, typeof(h), 128, "l2"),
                                     (gs.read_memory, types.float32[::1], 128, "ip")):
        kernel = gs._search_kernel(reader, dim, metric, 16, 128)
        f32 = types.float32[:, ::1]
        sig = (src, f32, vec, vec, mat, vec, vec, vec, vec, types.int64,
               types.float64[:, :, ::1], types.int64[:, :, ::1])
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        # numpy rounds each square before adding it: a fused multiply-add would not.
        assert "mul.rn.f64" in ptx and not re.search(r"fma\\.rn\\.f64", ptx), "FMA in the distance"
        assert "bar.sync" in ptx
    merge = gs._merge_kernel(8)
    ptx, _ = cuda.compile_ptx(merge.py_func, (types.float64[:, :, ::1], types.int64[:, :, ::1],
                                              types.int64, f64, mat), cc=(9, 0))
    print("SEARCH_PTX_OK")
''')


SEARCH_PTX = CompileScript(PTX_SCRIPT)


@started_early(SEARCH_PTX)
def test_search_kernels_compile_for_the_gpu_without_fma():
    """The simulator runs the kernel as Python: only the real compiler checks its typing."""
    proc = SEARCH_PTX.result()
    assert "SEARCH_PTX_OK" in proc.stdout, proc.stderr[-3000:]
