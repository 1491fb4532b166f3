"""GPU BFS and connected components (workloads.graph.gpu_*) in the simulator, for every data path.

Every search is checked by Graph500's five rules and against scipy's levels; components against
scipy and the CPU reference. Graphs are tiny (the simulator runs one Python thread per CUDA
thread) and the gids caches small: 512-byte pages, a cache smaller than the neighbours array
where evictions are the point.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import gids  # noqa: F401  (first: picks the world before numba.cuda loads)

# isort: split
import numpy as np
import pytest
from numba import cuda

from kernels.platform import WARP_SIZE
from tests.helpers import CompileScript, default_engine, started_early
from workloads.graph import (
    EdgeArray,
    GraphFormatError,
    connected_components_reference,
    generate_kronecker_csr,
    open_csr,
    sample_bfs_roots,
    scipy_bfs,
    traversed_edges,
    write_csr,
)
from workloads.graph.cli import add_bfs_arguments
from workloads.graph.cli import main as cli_main
from workloads.graph.gpu_bfs import make_bfs_kernels, validate_bfs_result
from workloads.graph.gpu_cc import make_cc_kernels, validate_cc_result
from workloads.graph.gpu_graph import (
    DATA_PATHS,
    WHOLE_CACHE_REGISTERS,
    Access,
    DeviceArraySource,
    data_path_options,
    launch_geometry,
    open_device_graph,
    read_device_array,
    read_gids,
    register_data_path,
    run_bfs,
    run_cc,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = 512

# A graph with every awkward case: duplicates (0-1 three times, 4-5 thirty-five times: one list
# longer than a warp), self loops (on 0 twice, on 12, and on 13, whose only edge it is), a cycle,
# a path, a second component, and isolated vertices, the last vertex among them.
SPECIAL_EDGES = ([(0, 1)] * 3 + [(0, 0), (0, 0)] + [(0, k) for k in range(2, 8)]
                 + [(1, 2), (2, 3), (3, 8), (8, 9), (9, 10)] + [(4, 5)] * 35
                 + [(11, 12), (12, 12), (12, 11), (13, 13)])
SPECIAL_N = 20
SPECIAL_COMPONENTS = 2 + 1 + 6       # {0..10}, {11, 12}, {13}, {14} .. {19}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-graphs")
    paths = {"kron6": folder / "kron6.csr", "kron8": folder / "kron8.csr",
             "special": folder / "special.csr", "edgeless": folder / "edgeless.csr"}
    # Scale 6, edge factor 8: 8 pages of neighbours, cheap to read through gids in the simulator.
    generate_kronecker_csr(paths["kron6"], 6, 8, seed=1)
    generate_kronecker_csr(paths["kron8"], 8, 16, seed=2)
    write_csr(paths["special"], EdgeArray(np.array(SPECIAL_EDGES), n_vertices=SPECIAL_N))
    write_csr(paths["edgeless"], EdgeArray(np.empty((0, 2), dtype=np.int64), n_vertices=5))
    return paths


def check_search(graph, result):
    """Five rules, scipy's levels, and Graph500's edge count."""
    validate_bfs_result(graph, result, against_scipy=True)
    assert result.traversed_edges == traversed_edges(graph, scipy_bfs(graph, result.root)[1])
    assert result.seconds > 0


def check_components(graph, result):
    validate_cc_result(graph, result)
    assert np.array_equal(result.labels, connected_components_reference(graph))


# ---------------------------------------------------------------------------------- BFS
def test_bfs_in_gpu_memory_many_roots_both_directions(graphs):
    graph = open_csr(graphs["kron8"])
    with open_device_graph(graph, "memory") as dg:
        for root in sample_bfs_roots(graph, 3, seed=3).tolist():
            check_search(graph, dg.bfs(root))
        for root in sample_bfs_roots(graph, 1, seed=4).tolist():
            result = dg.bfs(root, direction="auto")
            check_search(graph, result)
            assert "B" in result.steps     # the heuristic went bottom-up on this small world
            # One time and one frontier size per level, the root's level first.
            assert len(result.level_seconds) == len(result.level_vertices) == len(result.steps)
            assert result.level_vertices[0] == 1 and sum(result.level_seconds) <= result.seconds


def test_large_frontiers_are_expanded_in_vertex_order(graphs, monkeypatch):
    """With every top-down frontier rebuilt in vertex order (the threshold at 1), searches over
    each path still give the true levels; and the rebuilt queue holds exactly the level's
    vertices, each once."""
    from workloads.graph import gpu_bfs

    monkeypatch.setattr(gpu_bfs, "ORDERED_FRONTIER", 1)
    graph = open_csr(graphs["kron6"])
    roots = sample_bfs_roots(graph, 2, seed=14).tolist()
    for data_path, options in (("memory", {}), ("gids", {"cache_fraction": 0.25, "page_size": PAGE})):
        with open_device_graph(graph, data_path, **options) as dg:
            for root in roots:
                check_search(graph, dg.bfs(root))
    levels = scipy_bfs(graph, roots[0])[1]
    depth = int(np.bincount(levels[levels >= 0]).argmax())
    n = levels.size
    queue = cuda.device_array(n, dtype=np.int64)
    counters = cuda.to_device(np.zeros(2, dtype=np.int64))
    gpu_bfs._collect_frontier[launch_geometry(n // WARP_SIZE)](
        cuda.to_device(levels.astype(np.int64)), depth, queue, counters)
    found = int(counters.copy_to_host()[0])
    assert np.array_equal(np.sort(queue.copy_to_host()[:found]), np.flatnonzero(levels == depth))


def test_long_lists_are_scanned_by_the_whole_grid(graphs, monkeypatch):
    """With the long-list threshold low, hubs' lists go to the grid-wide step (a slice per warp)
    on every path, and searches still give the true levels and Graph500's valid trees."""
    from workloads.graph import gpu_bfs

    monkeypatch.setattr(gpu_bfs, "LONG_LIST", 8)
    monkeypatch.setattr(gpu_bfs, "LONG_SLICE", 3)
    graph = open_csr(graphs["kron6"])      # 26 of its 64 lists are long
    assert (np.diff(graph.offsets) > 8).sum() > 10          # the test has long lists to set aside
    roots = sample_bfs_roots(graph, 2, seed=21).tolist()
    for data_path, options in (("memory", {}), ("gids", {"cache_fraction": 0.25, "page_size": PAGE}),
                               ("cpu_batch", {})):
        with open_device_graph(graph, data_path, **options) as dg:
            for root, direction in zip(roots, ("top-down", "auto")):
                check_search(graph, dg.bfs(root, direction=direction))


def test_bfs_through_gids_whole_graph_cached(graphs):
    graph = open_csr(graphs["kron6"])
    with open_device_graph(graph, "gids", cache_fraction=1.0, page_size=PAGE) as dg:
        # A cache of every page: the traversal kernels get the whole-cache register cap.
        assert dg.source.max_registers == WHOLE_CACHE_REGISTERS
        n_pages = dg.source.array.n_pages
        for root in sample_bfs_roots(graph, 2, seed=5).tolist():
            result = dg.bfs(root)
            check_search(graph, result)
            # Cold cache that holds everything: each page read at most once, nothing evicted.
            assert 0 < result.stats["ios"] <= n_pages and result.stats["evictions"] == 0


def test_bfs_through_gids_cache_smaller_than_the_edges(graphs):
    graph = open_csr(graphs["kron6"])
    with gids.Runtime(cache_pages=2, page_size=PAGE) as rt:     # 2 slots for 8 pages of data
        for root, direction in zip(sample_bfs_roots(graph, 2, seed=6).tolist(),
                                   ["top-down", "auto"]):
            result = run_bfs(graphs["kron6"], root, runtime=rt, direction=direction)
            check_search(graph, result)
            assert result.stats["evictions"] > 0 and result.stats["ios"] > 8
        rt.gather(rt.open_array(np.arange(10, dtype=np.int64)), [3])   # still usable after


def test_bfs_awkward_graph_both_paths(graphs):
    graph = open_csr(graphs["special"])
    gids_options = {"cache_fraction": 0.5, "page_size": PAGE}
    for data_path, options in (("memory", {}), ("gids", gids_options)):
        with open_device_graph(graph, data_path, **options) as dg:
            for root, direction in ((0, "top-down"), (10, "auto"), (11, "top-down"),
                                    (13, "top-down"), (SPECIAL_N - 1, "auto")):
                result = dg.bfs(root, direction=direction)
                check_search(graph, result)
            assert result.traversed_edges == 0 and result.teps == 0.0   # an isolated root
            assert dg.bfs(13).traversed_edges == 1                      # only a self loop


def test_edgeless_graph(graphs):
    for data_path in ("memory", "gids"):
        result = run_bfs(graphs["edgeless"], 2, data_path=data_path)
        assert result.levels.tolist() == [-1, -1, 0, -1, -1] and result.traversed_edges == 0
        assert run_cc(graphs["edgeless"], data_path=data_path).n_components == 5


def test_bfs_and_components_through_the_nvme_path(graphs):
    """The nvme data path: gids' source over a Runtime(backend="nvme"), misses as NVMe commands."""
    graph = open_csr(graphs["kron6"])
    with open_device_graph(graph, "nvme", cache_fraction=0.25, page_size=PAGE) as dg:
        assert dg.source.max_registers is None      # gids.jit's cap below a whole cache
        assert dg.source.name == "nvme" and dg.source.runtime.backend == "nvme"
        assert dg.source.label.startswith("gids NVMe path, cache 25%")
        for root, direction in zip(sample_bfs_roots(graph, 2, seed=13).tolist(),
                                   ["top-down", "auto"]):
            result = dg.bfs(root, direction=direction)
            check_search(graph, result)
            assert result.stats["evictions"] > 0 and result.stats["ios"] > 8
        check_components(graph, dg.connected_components())
        # Every miss went to the emulated controller as an NVMe read command.
        assert dg.source.runtime.daemon.counters["commands"] > 0
    # A Runtime of one's own (with emulated drives), and the awkward and edgeless graphs.
    special = open_csr(graphs["special"])
    with gids.Runtime("nvme", cache_pages=2, page_size=PAGE, ssd="ideal", n_ssd=2) as rt:
        for root, direction in ((0, "top-down"), (10, "auto")):
            check_search(special, run_bfs(special, root, runtime=rt, data_path="nvme",
                                          direction=direction))
        check_components(special, run_cc(special, runtime=rt, data_path="nvme"))
    assert run_cc(graphs["edgeless"], data_path="nvme").n_components == 5


def test_nvme_path_refuses_a_host_runtime(graphs):
    with gids.Runtime(cache_pages=2, page_size=PAGE) as rt:
        with pytest.raises(ValueError, match="backend='nvme'"):
            run_bfs(graphs["kron6"], 0, runtime=rt, data_path="nvme")
    with pytest.raises(ValueError, match="backend='nvme'"):
        open_device_graph(graphs["kron6"], "nvme", runtime_options={"backend": "host"})


# ---------------------------------------------------------------------------------- CC
def test_components_in_gpu_memory(graphs):
    for name in ("kron8", "special"):
        graph = open_csr(graphs[name])
        result = run_cc(graph, data_path="memory")
        check_components(graph, result)
    assert result.n_components == SPECIAL_COMPONENTS


def test_components_through_gids_with_evictions(graphs):
    for name, fraction in (("kron6", 0.25), ("special", 0.5)):
        graph = open_csr(graphs[name])
        result = run_cc(graphs[name], data_path="gids", cache_fraction=fraction, page_size=PAGE)
        check_components(graph, result)
        if name == "kron6":
            assert result.stats["evictions"] > 0
            # Sorted lists: the hook stops at the first neighbour >= v, so it reads about half.
            assert result.stats["lookups"] < 0.75 * graph.n_edges


# ---------------------------------------------------------------------------------- errors
def test_truncated_or_corrupt_graph_raises_graph_format_error(graphs, tmp_path):
    truncated = tmp_path / "truncated.csr"
    shutil.copy(graphs["kron6"], truncated)
    os.truncate(truncated, os.path.getsize(truncated) - 4096)
    for data_path in ("gids", "memory"):
        with pytest.raises(GraphFormatError, match="truncated"):
            run_bfs(truncated, 0, data_path=data_path)
    with pytest.raises(GraphFormatError, match="not a gids CSR graph"):
        run_cc(_garbage(tmp_path), data_path="memory")

    # A neighbour id out of range (the offsets and header intact, so opening succeeds): the
    # kernels check every id before using it, and the host raises after the launch.
    graph = open_csr(graphs["kron6"])
    root = int(sample_bfs_roots(graph, 1, seed=0)[0])
    corrupt = tmp_path / "corrupt.csr"
    shutil.copy(graphs["kron6"], corrupt)
    entry = int(graph.offsets[root])
    with open(corrupt, "r+b") as f:
        f.seek(graph.header.neighbours_offset + entry * 4)
        f.write(np.int32(graph.n_vertices + 5).tobytes())
    for data_path in ("memory", "gids"):
        with pytest.raises(GraphFormatError, match=f"entry {entry} holds vertex id 69"):
            run_bfs(corrupt, root, data_path=data_path, direction="top-down")
        with pytest.raises(GraphFormatError, match="outside"):
            run_cc(corrupt, data_path=data_path)
    with pytest.raises(GraphFormatError, match="checksum"):
        open_device_graph(corrupt, "memory", verify=True)


def _garbage(tmp_path):
    path = tmp_path / "garbage.csr"
    path.write_bytes(b"x" * 8192)
    return path


def test_option_errors(graphs):
    with pytest.raises(ValueError, match="not both"):
        with gids.Runtime(cache_pages=2, page_size=PAGE) as rt:
            run_bfs(graphs["kron6"], 0, runtime=rt, cache_fraction=0.5)
    with pytest.raises(ValueError, match="with a cache"):
        run_bfs(graphs["kron6"], 0, data_path="memory", cache_fraction=0.5)
    with pytest.raises(ValueError, match="unknown data path"):
        run_bfs(graphs["kron6"], 0, data_path="spdk")
    with pytest.raises(ValueError, match="not a vertex"):
        run_bfs(graphs["kron6"], 64, data_path="memory")
    with pytest.raises(ValueError, match="direction"):
        run_bfs(graphs["kron6"], 0, data_path="memory", direction="bottom-up")


# ---------------------------------------------------------------------------------- the hooks
class RecordingSource(DeviceArraySource):
    """A data path as a colleague would add one: a kernel-addressable array, plus a look at the
    accesses announced before each launch (where a CPU-initiated batch path would stage data)."""

    def __init__(self, graph):
        # Mapped pinned host memory: the zero-copy baseline's shape, with the same reader.
        mapped = cuda.mapped_array(graph.n_edges, dtype=graph.neighbours.dtype)
        mapped[:] = graph.neighbours
        super().__init__(mapped, "recording", "recording (mapped host memory)")
        self.accesses = []

    def before_launch(self, access: Access) -> None:
        self.accesses.append((access.kind, access.count))


def test_registered_data_path_and_launch_hook(graphs):
    graph = open_csr(graphs["kron6"])
    register_data_path("recording", RecordingSource)
    try:
        with open_device_graph(graph, "recording") as dg:
            root = int(sample_bfs_roots(graph, 1, seed=9)[0])
            result = dg.bfs(root)
            check_search(graph, result)
            # One top-down launch per level, announced with that level's frontier size.
            per_level = np.bincount(result.levels[result.levels >= 0])
            assert dg.source.accesses == [("frontier", int(c)) for c in per_level]
            dg.source.accesses.clear()
            dg.bfs(root, direction="auto")
            assert {kind for kind, _ in dg.source.accesses} == {"frontier", "unvisited"}
            check_components(graph, dg.connected_components())
            assert dg.source.accesses[-1] == ("all", 0)
    finally:
        DATA_PATHS.pop("recording")
    # One compiled traversal per reader, shared by every path that uses it.
    assert make_bfs_kernels(read_device_array) is make_bfs_kernels(read_device_array)
    assert make_bfs_kernels(read_gids) is not make_bfs_kernels(read_device_array)
    assert make_bfs_kernels(read_gids, 80) is not make_bfs_kernels(read_gids)   # a cap apiece
    assert make_cc_kernels(read_device_array) is make_cc_kernels(read_device_array)


# ---------------------------------------------------------------------------------- zero_copy, cpu_batch
def test_bfs_and_components_zero_copy_and_cpu_batch(graphs):
    graph = open_csr(graphs["kron6"])
    roots = sample_bfs_roots(graph, 2, seed=11).tolist()
    for data_path in ("zero_copy", "cpu_batch"):
        with open_device_graph(graph, data_path) as dg:
            for root in roots:
                for direction in ("top-down", "auto"):
                    result = dg.bfs(root, direction=direction)
                    check_search(graph, result)
                    if data_path == "cpu_batch":
                        # One batch per level, each read from the store, none bigger than the
                        # neighbours array.
                        assert result.stats["batches"] == len(result.steps)
                        assert 0 < result.stats["pages_fetched"] <= (
                            len(result.steps) * dg.source.n_pages)
            check_components(graph, dg.connected_components())
            if data_path == "cpu_batch":
                # Components read every list: one batch of every page.
                assert dg.source.end_search()["pages_fetched"] == dg.source.n_pages
    # The awkward graph (a list longer than a warp, self loops, isolated roots) and an edgeless one.
    special = open_csr(graphs["special"])
    for data_path in ("zero_copy", "cpu_batch"):
        with open_device_graph(special, data_path) as dg:
            for root, direction in ((0, "top-down"), (10, "auto"), (SPECIAL_N - 1, "top-down")):
                check_search(special, dg.bfs(root, direction=direction))
            assert dg.bfs(13).traversed_edges == 1
            check_components(special, dg.connected_components())
        result = run_bfs(graphs["edgeless"], 2, data_path=data_path)
        assert result.levels.tolist() == [-1, -1, 0, -1, -1]
        assert run_cc(graphs["edgeless"], data_path=data_path).n_components == 5


def test_cpu_batch_stages_the_frontier_pages_and_catches_a_missing_one(graphs):
    graph = open_csr(graphs["kron6"])
    with open_device_graph(graph, "cpu_batch", page_size=PAGE) as dg:
        source = dg.source
        offsets = np.asarray(graph.offsets)
        epp = PAGE // np.asarray(graph.neighbours).dtype.itemsize
        root = int(sample_bfs_roots(graph, 1, seed=12)[0])
        frontier = cuda.to_device(np.array([root], dtype=np.int64))
        expected = np.arange(offsets[root] // epp, (offsets[root + 1] - 1) // epp + 1)
        assert np.array_equal(source._pages(Access("frontier", vertices=frontier, count=1)),
                              expected)
        # A page the launch reads but the host did not stage is an error, not a silent 0.
        real = source._pages
        source._pages = lambda access: np.zeros(0, dtype=np.int64)
        with pytest.raises(RuntimeError, match="not staged"):
            dg.bfs(root)
        source._pages = real
        check_search(graph, dg.bfs(root))       # usable again afterwards
    with pytest.raises(ValueError, match="cache_fraction"):
        run_bfs(graphs["kron6"], 0, data_path="cpu_batch", cache_fraction=0.5)


def test_cpu_batch_reads_the_file_as_storage_says(graphs):
    """``storage`` reaches the cpu_batch gather as it reaches gids (the CLI's --storage), so the
    two read the same medium; the traversal is valid over each."""
    graph = open_csr(graphs["kron6"])
    root = int(sample_bfs_roots(graph, 1, seed=13)[0])
    assert data_path_options("cpu_batch", storage="memory") == {"storage": "memory"}
    assert data_path_options("memory", storage="memory") == {}
    for storage, kind in (("memory", "MemoryStore"), ("mmap", "MmapStore")):
        with open_device_graph(graph, "cpu_batch", storage=storage) as dg:
            assert type(dg.source.store).__name__ == kind
            check_search(graph, dg.bfs(root))


# ---------------------------------------------------------------------------------- the CLI
def test_cli_bfs_and_cc(tmp_path, capsys):
    out = tmp_path / "bfs.json"
    status = cli_main(["bfs", "--scale", "5", "--edgefactor", "4", "--roots", "2",
                       "--data-path", "gids,memory", "--cache-fractions", "1,0.5",
                       "--validate", "scipy", "--json", str(out), "--dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "simulator figures" in captured.out and "hmean TEPS" in captured.out
    lines = captured.out.splitlines()
    rows = lines[[i for i, line in enumerate(lines) if line.startswith("---")][0] + 1:]
    engine, depth, cell = default_engine()
    assert [row.split()[:4] for row in rows] == [["gids", "-", cell, "100%"],
                                                 ["gids", "-", cell, "50%"],
                                                 ["memory", "-", "memory", "-"]]
    assert "emulation" not in captured.out.split("valid")[-1]     # no emulated rows, no note
    assert "root 2/2" in captured.err                              # progress on stderr
    assert "slowest level" in captured.err
    report = json.loads(out.read_text())
    assert report["simulator"] and len(report["runs"]) == 3
    assert all(s["valid"] for run in report["runs"] for s in run["searches"])
    assert report["runs"][1]["options"]["cache_fraction"] == 0.5
    search = report["runs"][0]["searches"][0]
    assert len(search["level_seconds"]) == len(search["level_vertices"]) == len(search["steps"])

    graph_path = tmp_path / "g.csr"
    generate_kronecker_csr(graph_path, 5, 4, seed=7)
    status = cli_main(["cc", "--graph", str(graph_path), "--data-path", "memory,gids",
                       "--cache-fractions", "0.5", "--json", str(tmp_path / "cc.json")])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "components" in captured.out and "simulator figures" in captured.out
    runs = json.loads((tmp_path / "cc.json").read_text())["runs"]
    assert [r["valid"] for r in runs] == [True, True]
    assert [(r["engine"], r["engine_depth"]) for r in runs] == [("memory", None),
                                                                (engine, depth)]
    assert runs[0]["n_components"] == runs[1]["n_components"]

    assert cli_main(["bfs", "--graph", str(tmp_path / "missing.csr")]) == 2


def test_cli_warm_up_search_makes_the_first_timed_search_warm(tmp_path, capsys):
    """Every path runs one untimed search first; with --warm-cache and a cache that holds the
    graph, the timed searches, the first one included, then read nothing from storage."""
    graph_path = tmp_path / "g.csr"
    generate_kronecker_csr(graph_path, 5, 4, seed=9)
    out = tmp_path / "bfs.json"
    status = cli_main(["bfs", "--graph", str(graph_path), "--roots", "2", "--data-path", "gids",
                       "--cache-fractions", "1", "--warm-cache", "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "warm-up search from root" in captured.err and "(untimed)" in captured.err
    searches = json.loads(out.read_text())["runs"][0]["searches"]
    assert len(searches) == 2 and all(s["valid"] for s in searches)
    assert [s["stats"]["ios"] for s in searches] == [0, 0]


def test_touches_ahead_stop_once_every_page_is_resident(graphs):
    """A gids source touches pages ahead of its reads while some page is not resident: cold
    searches always, warm ones until the cache holds the whole array (then a touch is a lookup
    for nothing). Searches give the same levels either way."""
    g = open_csr(graphs["kron6"])
    with open_device_graph(g, "gids", cold_cache=False, cache_fraction=1.0,
                           page_size=PAGE) as dg:
        src = dg.source
        assert src.array.resident_pages() == 0
        src.begin_search(cold=False)
        assert src.touch_ahead
        root = int(np.argmax(np.diff(g.offsets)))
        first = dg.bfs(root)
        assert 0 < src.array.resident_pages() <= src.array.n_pages
        src.begin_search(cold=True)
        assert src.touch_ahead and src.array.resident_pages() == 0
        # Fill every page, as a warm-up search of a connected graph would.
        rt = src.runtime
        rt.gather(src.array, np.arange(0, src.array.size, 64))
        assert src.array.resident_pages() == src.array.n_pages
        src.begin_search(cold=False)
        assert not src.touch_ahead
        again = dg.bfs(root)
        check_search(g, again)
        assert np.array_equal(again.levels, first.levels)
        assert again.stats["ios"] == 0


@pytest.mark.parametrize("prefill", [0, 2])
def test_resident_top_down_sets_aside_lists_whose_pages_are_not_resident(graphs, monkeypatch,
                                                                         prefill):
    """The top-down step without a miss path (a warm cache holding the whole array:
    ``gpu_bfs.RESIDENT_FIRST``), run where pages are missing after all: none resident, or every
    other one. Lists that meet a page not resident go to the long lists' launch, which loads
    them; the levels are scipy's and nothing is left pinned."""
    g = open_csr(graphs["kron8"])
    with open_device_graph(g, "gids", cold_cache=False, cache_fraction=1.0,
                           page_size=PAGE) as dg:
        src = dg.source
        begin = src.begin_search

        def begin_as_if_resident(cold=True):
            begin(cold=True)
            if prefill:      # every other page in
                per_page = PAGE // src.array.dtype.itemsize
                src.runtime.gather(src.array, np.arange(0, src.array.size, prefill * per_page))
            src.all_resident, src.touch_ahead = True, False

        monkeypatch.setattr(src, "begin_search", begin_as_if_resident)
        for root in sample_bfs_roots(g, 2, seed=prefill):
            result = dg.bfs(int(root))
            check_search(g, result)
            assert result.stats["ios"] > 0
        state = src.runtime._page_state.copy_to_host()
        assert not (state & gids.layout.PAGE_REF_MASK).any()


def test_cli_emulated_ssd_rows(tmp_path, capsys):
    """--ssd / --n-ssd: gids and nvme rows once unemulated and once per drive count."""
    graph_path = tmp_path / "g.csr"
    generate_kronecker_csr(graph_path, 4, 4, seed=8)
    out = tmp_path / "bfs.json"
    status = cli_main(["bfs", "--graph", str(graph_path), "--roots", "1",
                       "--data-path", "gids,nvme,memory", "--cache-fractions", "0.5",
                       "--ssd", "ideal", "--n-ssd", "1,2", "--validate", "scipy",
                       "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    lines = captured.out.splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("---")][0] + 1
    rows = [line.split() for line in lines[start:start + 7]]
    assert [row[:2] for row in rows] == [["gids", "-"], ["gids", "1"], ["gids", "2"],
                                         ["nvme", "-"], ["nvme", "1"], ["nvme", "2"],
                                         ["memory", "-"]]
    assert all(row[2:4] == ["x", "ideal"] for row in rows if row[1] != "-")
    assert all(row[-1] == "1/1" for row in rows)                   # every search valid
    assert "real-time emulation" in captured.out and "emulated 2 x ideal" in captured.err
    report = json.loads(out.read_text())
    one, two = {"ssd": "ideal", "n_ssd": 1}, {"ssd": "ideal", "n_ssd": 2}
    assert report["config"]["emulations"] == [one, two]
    assert [(r["data_path"], r["emulation"]) for r in report["runs"]] == [
        ("gids", None), ("gids", one), ("gids", two), ("nvme", None), ("nvme", one),
        ("nvme", two), ("memory", None)]
    # The engine column: the Runtime rows' storage engine (--storage file), memory for RAM.
    # (with the ring's depth for io_uring: the reads a daemon thread keeps in flight).
    engine, depth, cell = default_engine()
    assert [(r["engine"], r["engine_depth"]) for r in report["runs"]] == (
        [(engine, depth)] * 6 + [("memory", None)])
    assert [row[2 if row[1] == "-" else 4] for row in rows] == [cell] * 6 + ["memory"]
    assert "engine" in lines[start - 2]
    assert all(s["valid"] for run in report["runs"] for s in run["searches"])

    # cc: the default drive counts are 1 and 4.
    status = cli_main(["cc", "--graph", str(graph_path), "--data-path", "nvme",
                       "--cache-fractions", "0.5", "--ssd", "ideal",
                       "--json", str(tmp_path / "cc.json")])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    runs = json.loads((tmp_path / "cc.json").read_text())["runs"]
    assert [r["emulation"] for r in runs] == [None, {"ssd": "ideal", "n_ssd": 1},
                                              {"ssd": "ideal", "n_ssd": 4}]
    assert all(r["valid"] for r in runs) and len({r["n_components"] for r in runs}) == 1

    # --n-ssd alone has no model to emulate, and --ssd nothing to emulate it under.
    assert cli_main(["cc", "--graph", str(graph_path), "--n-ssd", "2"]) == 2
    assert "--n-ssd needs --ssd" in capsys.readouterr().err
    assert cli_main(["bfs", "--graph", str(graph_path), "--data-path", "memory",
                     "--ssd", "ideal"]) == 2
    assert "--data-path has neither" in capsys.readouterr().err


def test_cli_rejects_bad_ssd_options(capsys):
    for argv, message in ((["--ssd", "floppy"], "invalid choice: 'floppy'"),
                          (["--ssd", "ideal", "--n-ssd", "0"], "drive counts must be"),
                          (["--ssd", "ideal", "--n-ssd", "1,x"], "not a list of drive counts")):
        for command in ("bfs", "cc"):
            with pytest.raises(SystemExit) as exc:
                cli_main([command, "--scale", "4", *argv])
            assert exc.value.code == 2 and message in capsys.readouterr().err


def test_cli_registers_on_a_parser():
    import argparse
    parser = argparse.ArgumentParser(prog="gids")
    add_bfs_arguments(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["bfs", "--scale", "4", "--data-path", "memory"])
    assert args.func.__name__ == "cmd_bfs" and args.data_path == ["memory"]
    assert args.cache_fractions == [1.0, 0.5, 0.25, 0.1]
    with pytest.raises(SystemExit):
        parser.parse_args(["cc", "--scale", "4", "--cache-fractions", "0,2"])


# ---------------------------------------------------------------------------------- other worlds
_WARP32 = textwrap.dedent('''
    import sys
    import gids
    import numpy as np
    import kernels.warp as warp
    warp._RENDEZVOUS_TIMEOUT = 20.0     # a lane left behind fails in 20 s, not 120
    from numba import cuda
    from tests import polite_simulator
    polite_simulator.install()
    from kernels.platform import WARP_SIZE
    from workloads.graph import open_csr
    from workloads.graph.gpu_graph import DeviceArraySource, DeviceGraph, open_device_graph
    from workloads.graph.gpu_bfs import validate_bfs_result
    from workloads.graph.gpu_cc import validate_cc_result
    sys.setswitchinterval(1e-4)
    assert WARP_SIZE == 32

    @cuda.jit(device=True)
    def read_in_step(neighbours, k):
        # A rendezvous of the whole warp at every read, as gids.read has: a warp loop that let
        # lanes drift apart would hang here.
        warp.syncwarp(warp.activemask())
        return neighbours[k]

    graph = open_csr(sys.argv[1])
    source = DeviceArraySource(cuda.to_device(np.asarray(graph.neighbours)), "in-step")
    source.reader = read_in_step
    dg = DeviceGraph(graph, source)
    for root, direction in ((0, "top-down"), (10, "auto"), (19, "top-down")):
        validate_bfs_result(graph, dg.bfs(root, direction=direction), against_scipy=True)
    # Every frontier rebuilt in vertex order (the warp-aggregated collection of the levels).
    from workloads.graph import gpu_bfs
    gpu_bfs.ORDERED_FRONTIER = 1
    validate_bfs_result(graph, dg.bfs(0), against_scipy=True)
    # Lists longer than 4 scanned by the whole grid, 3 entries a warp.
    gpu_bfs.LONG_LIST, gpu_bfs.LONG_SLICE = 4, 3
    validate_bfs_result(graph, dg.bfs(0), against_scipy=True)
    # Through gids: a page per lookup, the pin kept across lists, with 32-lane warps.
    with open_device_graph(graph, "gids", cache_fraction=0.5, page_size=512) as gdg:
        for root in (0, 10):
            validate_bfs_result(graph, gdg.bfs(root), against_scipy=True)
            # Every pin given back (the scan's unpins wait on the entries read, no fence).
            rt = gdg.source.runtime
            state = rt._page_state.copy_to_host()[:rt._n_pages]
            assert not (state & gids.layout.PAGE_REF_MASK).any(), root
    validate_cc_result(graph, dg.connected_components())
    print("WARP32_OK")
''')


def test_warp_cooperative_loops_with_emulated_32_lane_warps(graphs):
    """The warp loops keep all 32 lanes together (lists longer than a warp, early exits)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GIDS_SIM_WARP_SIZE="32")
    proc = subprocess.run([sys.executable, "-c", _WARP32, str(graphs["special"])], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert "WARP32_OK" in proc.stdout, proc.stderr[-3000:]


_PTX = textwrap.dedent(r'''
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    import gids
    from tests.helpers import fake_handle
    from workloads.graph.gpu_graph import read_device_array
    from workloads.pager import GIDS_PAGER
    from workloads.graph.gpu_bfs import make_bfs_kernels
    from workloads.graph.gpu_cc import make_cc_kernels

    h = fake_handle(np.int32)
    i64, n = types.int64[::1], types.int64
    memory = types.int32[::1]
    # Every kernel with the plain reader; with the gids pager (large, and slow to compile) the
    # top-down kernel, which shows that a kernel closing over it compiles.
    k = make_bfs_kernels(read_device_array)
    ptx, _ = cuda.compile_ptx(k.top_down.py_func,
                              (memory, i64, i64, n, i64, i64, i64, i64, n, types.boolean, i64,
                               i64, n, types.boolean, types.boolean), cc=(9, 0))
    assert "atom.global.cas.b64" in ptx and "vote.sync.ballot" in ptx and "shfl.sync" in ptx
    ptx, _ = cuda.compile_ptx(k.long_lists.py_func,
                              (memory, i64, i64, i64, i64, i64, i64, i64, n, types.boolean, i64),
                              cc=(9, 0))
    assert "atom.global.cas.b64" in ptx and "vote.sync.ballot" in ptx and "shfl.sync" in ptx
    ptx, _ = cuda.compile_ptx(k.bottom_up.py_func, (memory, i64, i64, i64, i64, n, i64), cc=(9, 0))
    assert "vote.sync.ballot" in ptx and "shfl.sync" in ptx
    ptx, _ = cuda.compile_ptx(make_cc_kernels(read_device_array).py_func,
                              (memory, i64, i64, types.boolean, i64), cc=(9, 0))
    assert "atom.global.cas.b64" in ptx and "vote.sync.ballot" in ptx
    # The gids path's top-down step reads a page per lookup (pin, weak L2 loads, unpin).
    k = make_bfs_kernels(GIDS_PAGER)
    ptx, _ = cuda.compile_ptx(k.top_down.py_func,
                              (typeof(h), i64, i64, n, i64, i64, i64, i64, n, types.boolean, i64,
                               i64, n, types.boolean, types.boolean), cc=(9, 0))
    assert "match.any.sync" in ptx and "atom.global.cas.b64" in ptx
    assert "ld.global.cg" in ptx and "red.release.gpu.global.add.u64" in ptx   # 64-bit page words
    # The loop that reads a pinned page's entries (ld.global.cg) and claims neighbours (the CAS)
    # makes no call: a value live across the miss path's call is spilled at every use
    # (scan_pages). The innermost loop holding both, found by its back edge in the kernel body.
    import re

    def scan_loop(ptx):
        lines = [l.strip() for l in ptx.splitlines()]
        entry = next(i for i, l in enumerate(lines) if l.startswith(".visible .entry"))
        end = next((i for i, l in enumerate(lines) if i > entry and ".func" in l), len(lines))
        body = lines[entry:end]
        labels = {l[:-1]: i for i, l in enumerate(body) if re.match(r"^\$L__\w+:$", l)}
        loops = sorted((src - labels[m.group(1)], labels[m.group(1)], src)
                       for src, l in enumerate(body)
                       for m in [re.search(r"bra(?:\.uni)?\s+(\$L__\w+);", l)]
                       if m and m.group(1) in labels and labels[m.group(1)] < src)
        lo, hi = next((lo, hi) for _, lo, hi in loops
                      if any("ld.global.cg" in l for l in body[lo:hi])
                      and any("atom.global.cas.b64" in l for l in body[lo:hi]))
        return body[lo:hi]

    assert not any(l.startswith("call") for l in scan_loop(ptx)), "a call in the scan"
    # The same step over a direct-mode host tier (GIDS_TIER_PAGER): an entry comes from the
    # cache (ld.global.cg) or in place from the tier (a plain load), still with no call.
    from workloads.pager import GIDS_TIER_PAGER
    k = make_bfs_kernels(GIDS_TIER_PAGER)
    ptx, _ = cuda.compile_ptx(k.top_down.py_func,
                              (typeof(h), i64, i64, n, i64, i64, i64, i64, n, types.boolean, i64,
                               i64, n, types.boolean, types.boolean), cc=(9, 0))
    scan = scan_loop(ptx)
    assert not any(l.startswith("call") for l in scan), "a call in the tier pager's scan"
    assert any(re.match(r"ld\.global\.(u32|b32|s32)\s", l) for l in scan), "no tier load"
    # Its top-down step for a warm cache that holds every page (gpu_bfs.RESIDENT_FIRST): pins
    # without the miss path, so no call at all, and the lists it sets aside go to long_lists.
    k = make_bfs_kernels(GIDS_PAGER, None, True)
    ptx, _ = cuda.compile_ptx(k.top_down.py_func,
                              (typeof(h), i64, i64, n, i64, i64, i64, i64, n, types.boolean, i64,
                               i64, n, types.boolean, types.boolean), cc=(9, 0))
    assert "match.any.sync" in ptx and "atom.global.cas.b64" in ptx and "ld.global.cg" in ptx
    assert not re.search(r"^\s*call", ptx, re.M), "a call in the resident top-down kernel"
    print("PTX_OK")
''')
_PTX_RUN = CompileScript(_PTX)


@started_early(_PTX_RUN)
def test_kernels_compile_for_a_gpu():
    """The traversal kernels, specialised for both readers, compile to PTX (no GPU needed)."""
    proc = _PTX_RUN.result()
    assert "PTX_OK" in proc.stdout, proc.stderr[-3000:]
