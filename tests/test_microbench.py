"""The register-cap comparison of the hit benchmarks (``python -m workloads.microbench hits``)
runs in the simulator at tiny sizes: one labelled row per cap, every value checked against the
plain kernel's. Its times mean nothing there; on a GPU it is the figure."""
import json
import os

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)
import pytest

from kernels.platform import SIMULATOR
from workloads import microbench


@pytest.mark.skipif(not SIMULATOR, reason="tiny sizes: a check that the sweep runs")
def test_hit_benchmarks_compare_register_caps(tmp_path):
    res = microbench.hits_suite(str(tmp_path), caps=(128, 80, 64))
    assert [row["max_registers"] for row in res["caps"]] == [128, 80, 64]
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
