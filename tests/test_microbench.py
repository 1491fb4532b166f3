"""The register-cap comparison of the hit benchmarks (``python -m workloads.microbench hits``)
runs in the simulator at tiny sizes: one labelled row per cap, every value checked against the
plain kernel's. Its times mean nothing there; on a GPU it is the figure."""
import json
import os

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
import pytest

from kernels.platform import SIMULATOR
from workloads import microbench


@pytest.mark.skipif(not SIMULATOR, reason="tiny sizes: a check that the sweep runs")
def test_hit_benchmarks_compare_register_caps(tmp_path):
    res = microbench.hits_suite(str(tmp_path), caps=(128, 80, 64))
    assert [row["max_registers"] for row in res["caps"]] == [128, 80, 64]
    assert res["paged_sequential"]["same_result"]        # a page per warp: the same sum
    assert res["paged_sequential_4"]["same_result"]      # four pages per warp call: the same
    assert res["paged_sequential_8"]["same_result"]
    for row in res["caps"]:   # the page-level kernel at each cap: the same sums
        assert all(row["paged"][key]["same_result"] for key, _ in microbench.PAGED_VARIANTS)
    for part in [res] + res["caps"]:
        assert part["random"]["same_result"] and part["sequential"]["same_result"]
        assert part["random"]["misses_during_timing"] == 0
        assert part["random"]["hits_during_timing"] > 0
    assert [row["label"] for row in res["caps"]] == [
        "registers capped at 128", "registers capped at 80", "registers capped at 64"]
    with open(os.path.join(tmp_path, "hits_suite.json")) as f:
        assert json.load(f)["meta"]["command"].endswith("--caps 128,80,64")
    table = open(os.path.join(tmp_path, "hits_suite.md")).read()
    for cap in (128, 80, 64):
        assert f"registers capped at {cap}" in table


@pytest.mark.skipif(not SIMULATOR, reason="tiny sizes: a check that the comparison runs")
def test_load_flavors_read_what_plain_reads_in_every_pattern(tmp_path):
    assert microbench.main(["loads", "--out", str(tmp_path)]) == 0
    with open(os.path.join(tmp_path, "loads_suite.json")) as f:
        rows = json.load(f)["rows"]
    flavors = ("plain",) + microbench.LOAD_FLAVORS
    assert [(r["pattern"], r["flavor"]) for r in rows] == [
        (p, f) for p in ("sequential", "random 8 B", "pages 4 KiB") for f in flavors]
    assert all(r["correct"] for r in rows)
    assert "`global.cg`" in open(os.path.join(tmp_path, "loads_suite.md")).read()


@pytest.mark.skipif(not SIMULATOR, reason="tiny sizes: a check that the comparison runs")
def test_miss_benchmark_compares_pages_per_warp_and_times_the_misses(tmp_path):
    rows = microbench.misses_suite(str(tmp_path))
    assert [row["per_warp"] for row in rows] == [False, True]
    for row in rows:
        assert row["correct"]
        # One I/O per page. In the simulator a warp is one thread, so the 32 readers of a page
        # are 32 lookups (one loads, the others wait for it): misses >= I/Os.
        assert row["ios"] == row["pages"] <= row["misses"]
        # The kernels' own account of the misses: every I/O took some time, and a miss's slow
        # path includes its I/O (in total: the misses that waited for another's I/O pull the
        # mean miss below the mean I/O).
        io_us, miss_us = row["io_latency_us"] * row["ios"], row["miss_latency_us"] * row["misses"]
        assert 0 < io_us <= miss_us * (1 + 1e-9)
    with open(os.path.join(tmp_path, "misses_suite.json")) as f:
        assert len(json.load(f)["rows"]) == 2


def test_stats_time_the_misses_and_not_the_hits():
    """io_ns and miss_ns are added on the slow path only: a kernel of hits adds nothing."""
    import numpy as np
    data = np.arange(4096, dtype=np.int64)
    with gids.Runtime(cache_pages=8, page_size=4096) as rt:
        arr = rt.open_array(gids.MemoryStore(data), np.int64, shape=data.shape)
        assert (rt.gather(arr, np.array([5, 7])).copy_to_host() == [5, 7]).all()
        first = rt.stats()
        assert first.ios == 1 and first.io_ns > 0 and first.miss_ns >= first.io_ns
        # The request's submission is part of its I/O time; its copy comes after it, and both
        # are within the miss.
        assert 0 < first.submit_ns <= first.io_ns and first.copy_ns > 0 and first.claim_ns > 0
        assert first.io_ns + first.copy_ns + first.claim_ns <= first.miss_ns
        assert (rt.gather(arr, np.array([9])).copy_to_host() == [9]).all()
        delta = rt.stats() - first
        assert delta.hits == 1 and delta.misses == 0
        assert delta.io_ns == 0 and delta.miss_ns == 0 and delta.slot_retries == 0
        assert delta.submit_ns == 0 and delta.copy_ns == 0 and delta.claim_ns == 0


def test_thread_rows_label_each_figure_with_its_own_thread_count():
    """The NVMe rows are measured at other thread counts than the host rows: each figure
    stands at the count it was measured at, '-' where a series has none."""
    def rows(counts, base):
        return [{"daemon_threads": n, "Mpages_per_s": base + n} for n in counts]
    r = {"all_miss_zero_copy": rows((1, 2, 4, 8, 14), 10.0),
         "all_miss_copy": rows((1, 2, 4, 8, 14), 0.5),
         "all_miss_nvme": rows((4, 8, 14), 0.25)}
    line, _, _, _, header, _, *table = microbench.format_thread_rows(r)[:-1]
    assert line.endswith("1: 11.00 zc / 1.50 copy, 2: 12.00 zc / 2.50 copy, "
                         "4: 14.00 zc / 4.50 copy / 4.25 nvme, 8: 18.00 zc / 8.50 copy / "
                         "8.25 nvme, 14: 24.00 zc / 14.50 copy / 14.25 nvme")
    assert header.startswith("| threads | zero-copy | copy | NVMe")
    assert table[0] == "| 1 | 11.00 | 1.50 | - |"
    assert table[2] == "| 4 | 14.00 | 4.50 | 4.25 |"
    assert table[-1] == "| 14 | 24.00 | 14.50 | 14.25 |"


@pytest.mark.skipif(not SIMULATOR, reason="tiny sizes: a check that the A/B runs")
def test_latency_ab_runs_each_variant_in_a_process_of_its_own(tmp_path):
    variants = {"before": "GIDS_BULK_COPY_LANES=0 GIDS_EARLY_COPY=0 GIDS_POLL_NS=0,1024,8192 "
                          "GIDS_HOT_QUEUE_EVERY=0",
                "defaults": ""}
    rows = microbench.latency_suite(str(tmp_path), variants=variants, n_misses=8)
    assert [r["variant"] for r in rows] == ["before", "defaults"]
    before, defaults = rows[0]["settings"], rows[1]["settings"]
    assert before == {"bulk_copy_lanes": 0, "early_copy": False, "poll_ns": [0, 1024, 8192],
                      "hot_queue_every": 0}
    assert defaults["hot_queue_every"] > 0 and defaults["bulk_copy_lanes"] > 0
    assert defaults["early_copy"]
    for r in rows:
        for key in ("zero_copy", "copy"):
            assert r[key]["ios"] == 8 and r[key]["bulk_copies"] == 0   # never in the simulator
            assert r[key]["early_copies"] == 0
            assert r[key]["values_ok"]
            p = [r[key][f"p{q}_us"] for q in (10, 25, 50, 75, 90, 99)]
            assert p == sorted(p)
            hist = r[key]["histogram_us"]
            assert sum(hist["counts"]) + hist["above"] == 8   # every miss in one bin
            assert len(hist["bin_edges"]) == len(hist["counts"]) + 1
    with open(os.path.join(tmp_path, "latency_suite.json")) as f:
        assert len(json.load(f)["rows"]) == 2


@pytest.mark.skipif(not SIMULATOR, reason="a few launches: a check that the suite runs")
def test_launch_cost_suite_times_each_case(tmp_path):
    assert microbench.main(["launch", "--out", str(tmp_path), "--launches", "3"]) == 0
    with open(os.path.join(tmp_path, "launch_suite.json")) as f:
        res = json.load(f)
    assert [r["case"] for r in res["rows"]] == [
        "gids handle (kept per handle object)", "gids handle, a fresh handle object each launch",
        "one device array", "idle Runtime.sync()"]
    assert all(r["correct"] and r["host_us_median"] > 0 for r in res["rows"])
    assert all(r["gpu_us_median"] > 0 for r in res["rows"][:3])
    assert "times mean nothing" in open(os.path.join(tmp_path, "launch_suite.md")).read()


@pytest.mark.skipif(not SIMULATOR, reason="a few calls: a check that the suite runs")
def test_rows_launch_suite_times_each_case(tmp_path):
    pytest.importorskip("torch")
    assert microbench.main(["rows-launch", "--out", str(tmp_path), "--calls", "2"]) == 0
    with open(os.path.join(tmp_path, "rows_launch_suite.json")) as f:
        res = json.load(f)
    cases = ["torch.index_select (GPU memory)", "gids gather_rows, rows_resident_first=0",
             "gids gather_rows, rows_resident_first=1",
             "gids gather_rows, rows_resident_first=auto, a new index tensor and out slice each call"]
    assert [r["case"] for r in res["rows"]] == cases * 2
    assert all(r["correct"] and r["host_us_median"] > 0 for r in res["rows"])
    # auto picks one launch for these small gathers
    assert [r["auto_picks_this"] for r in res["rows"][:4]] == [None, True, False, None]
