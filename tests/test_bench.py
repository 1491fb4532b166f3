"""``gids bench`` in the simulator: every sweep runs and checks its values, the JSON schema is
stable, every figure is labelled a simulator figure, bad arguments get clear errors."""
import argparse
import json

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
import numpy as np
import pytest

from gids.errors import ConfigError
from kernels.platform import SIMULATOR
from workloads import baselines as B
from workloads import bench, results
from workloads.ssd_options import Emulation, runtime_emulation

# The documented schema (bench's module docstring), version 1: keys and their types.
NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_INT = (int, type(None))
OPT_STR = (str, type(None))
TOP = {"schema_version": int, "simulator": bool, "label": str, "date": str, "command": str,
       "machine": dict, "config": dict, "ceilings": dict, "paths": dict, "results": list,
       "plots": list, "targets": list}
MACHINE = {"hostname": str, "gpu": str, "cpu_cores": int, "python": str, "numpy": str,
           "numba": str, "numba_cuda": OPT_STR, "gids": str, "commit": OPT_STR}
CONFIG = {"paths": list, "sweeps": list, "workloads": list, "data_bytes": int,
          "request_bytes": int, "cache_fraction": float, "zipf_cache_fraction": float,
          "threads": int, "block": int, "requests": int, "batch_bytes": int, "reps": int,
          "steps": int, "store": str, "seed": int, "iops_threads": list, "queues": list,
          "queue_depths": list, "daemon_threads": list, "request_sizes": list,
          "hit_rates": list, "latency_requests": int, "gather_threads": OPT_INT,
          "emulations": list}
CEILINGS = {"h2d_pinned_Bps": float, "d2d_Bps": float, "bytes": int}
PATH_INFO = {"available": bool, "reason": OPT_STR, "description": str}
ROW = {"sweep": str, "workload": str, "path": str, "x_name": OPT_STR, "x": OPT_NUM,
       "params": dict, "requests": int, "request_bytes": int, "bytes": int,
       "seconds": OPT_NUM, "reps": int, "requests_per_s": OPT_NUM, "bytes_per_s": OPT_NUM,
       "fraction_of_h2d": OPT_NUM, "fraction_of_d2d": OPT_NUM, "hit_rate": OPT_NUM,
       "bytes_to_gpu": OPT_INT, "passes": OPT_INT, "latency_us": (dict, type(None)),
       "path_stats": dict, "correct": bool, "label": str, "error": OPT_STR,
       "emulation": (dict, type(None))}
PARAMS = {"request_bytes": int, "page_size": OPT_INT, "threads": int, "block": int,
          "cache_bytes": OPT_INT, "batch_bytes": int, "daemon_threads": OPT_INT,
          "queues": OPT_INT, "queue_depth": OPT_INT, "gather_threads": OPT_INT, "steps": int,
          "hot_fraction": OPT_NUM, "data_bytes": int, "store": str, "cache_fraction": OPT_NUM,
          "host_tier_bytes": int, "tier_mode": OPT_STR, "tier_fill": OPT_STR}
LATENCY = {"p50": float, "p90": float, "p99": float, "mean": float, "max": float}
TARGET = {"sweep": str, "workload": str, "setting": str, "issue_setting": bool, "goal": str, "ratios": list,
          "met": (bool, type(None)), "emulation": (dict, type(None))}
RATIO = {"path": str, "least": float, "ratio": OPT_NUM}


def _check(obj, spec, where):
    assert set(obj) == set(spec), f"{where}: keys {sorted(obj)} != {sorted(spec)}"
    for key, types in spec.items():
        value = obj[key]
        assert isinstance(value, types) and not (isinstance(value, bool) and bool not in
                                                 (types if isinstance(types, tuple) else
                                                  (types,))), \
            f"{where}.{key}: {value!r} is not {types}"


@pytest.fixture(scope="module")
def result():
    """One run of every sweep at the smallest sizes (a few points each, launches of one warp)."""
    config = bench.make_config(
        sweeps=["all"], requests=8, reps=1, steps=4, threads=32, iops_threads=[32], queues=[4],
        queue_depths=[32], daemon_threads=[1], request_sizes=[256, 1024], hit_rates=[0.5],
        latency_requests=2)
    return bench.run_bench(config, command="pytest", progress=False)


def test_every_point_runs_and_checks_its_values(result):
    rows = result["results"]
    assert {r["sweep"] for r in rows} == set(bench.SWEEPS)
    assert {r["workload"] for r in rows if r["sweep"] == "workloads"} == set(bench.WORKLOADS)
    assert {r["path"] for r in rows} == set(B.available_paths())
    bad = [(r["sweep"], r["workload"], r["path"], r["x"], r["error"]) for r in rows
           if not r["correct"]]
    assert not bad
    for r in rows:
        assert r["seconds"] > 0 and r["requests_per_s"] > 0
        assert r["fraction_of_h2d"] == pytest.approx(r["bytes_per_s"] /
                                                     result["ceilings"]["h2d_pinned_Bps"])
    # The all-hit workload never goes to the store once the hot set is in the gids cache.
    hits = [r for r in rows if r["workload"] == "hits" and r["path"] == "gids"][0]
    assert hits["hit_rate"] == 1.0 and hits["path_stats"]["ios"] == 0
    # A dependent chain costs cpu_batch one pass per step (+1) per launch.
    chains = [r for r in rows if r["workload"] == "chains" and r["path"] == "cpu_batch"][0]
    assert chains["passes"] >= chains["params"]["steps"] + 1
    lat = [r for r in rows if r["sweep"] == "latency"]
    assert all(r["latency_us"]["p50"] > 0 for r in lat)
    # The tier sweep: pages in the host tier are served from it (direct, or copied).
    tier = {(r["workload"], r["params"]["store"], r["params"]["cache_fraction"], r["x"]): r
            for r in rows if r["sweep"] == "tier" and r["path"] == "gids"
            and r["params"]["tier_fill"] != "victims"}
    assert [r for r in rows if r["params"].get("tier_fill") == "victims"]
    assert tier[("pointer_chase", "file", None, 1.0)]["path_stats"]["tier_direct"] > 0
    assert tier[("pointer_chase", "file", None, 1.0)]["path_stats"]["ios"] == 0
    assert tier[("zipf", "file", 0.25, 0.5)]["path_stats"]["tier_hits"] > 0
    assert tier[("zipf", "memory", 0.10, 0.0)]["path_stats"]["tier_hits"] == 0


def test_json_schema_is_stable(result):
    result = json.loads(json.dumps(result))      # what a machine reads back
    _check(result, TOP, "top")
    assert result["schema_version"] == bench.SCHEMA_VERSION == 1
    _check(result["machine"], MACHINE, "machine")
    _check(result["config"], CONFIG, "config")
    _check(result["ceilings"], CEILINGS, "ceilings")
    assert set(result["paths"]) == set(B.PATHS)
    for name, info in result["paths"].items():
        _check(info, PATH_INFO, f"paths.{name}")
    for k, row in enumerate(result["results"]):
        _check(row, ROW, f"results[{k}]")
        _check(row["params"], PARAMS, f"results[{k}].params")
        if row["latency_us"] is not None:
            _check(row["latency_us"], LATENCY, f"results[{k}].latency_us")
    assert [(t["sweep"], t["workload"]) for t in result["targets"]] == [
        ("workloads", "uniform"), ("workloads", "chains"), ("workloads", "zipf"),
        ("workloads", "hits"), ("tier", "pointer_chase"), ("tier", "zipf")]
    for k, target in enumerate(result["targets"]):
        _check(target, TARGET, f"targets[{k}]")
        for ratio in target["ratios"]:
            _check(ratio, RATIO, f"targets[{k}].ratios")


def test_every_figure_is_labelled_a_simulator_figure(result, tmp_path):
    assert SIMULATOR and result["simulator"] is True
    assert result["label"] == "simulator figure"
    assert all(r["label"] == "simulator figure" for r in result["results"])
    table = bench.format_table(result)
    assert table.startswith("**SIMULATOR FIGURES")
    assert "(simulator figures)" in table and table.rstrip().endswith(
        "**(simulator figures: not GPU measurements)**")
    rows_table = table.split("| sweep |", 1)[1].split("\n\n", 1)[0]
    body = [line for line in rows_table.splitlines() if line.startswith("| ")]
    assert len(body) == len(result["results"])
    assert all(line.rstrip().endswith("| simulator |") for line in body)
    assert "Issue 4's targets" in table
    files = bench.write_outputs(dict(result), str(tmp_path))
    assert (tmp_path / "bench.json").exists() and (tmp_path / "bench.md").exists()
    try:
        import matplotlib  # noqa: F401
        assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
            f"bench_{s}.png" for s in bench.SWEEPS)
    except ImportError:
        assert not list(tmp_path.glob("*.png"))
    assert len(files) >= 2


def test_zipf_reads_through_a_cache_of_a_tenth_of_the_data(result):
    """The issue's Zipf setting: a gids cache of 10 % of the data (25 % elsewhere: data 4x the
    cache), in the row's parameters, the table's cache column and the target's setting."""
    data = result["config"]["data_bytes"]
    table = bench.format_table(result)
    for r in result["results"]:
        if r["path"] == "gids" and r["sweep"] == "workloads":
            frac = 0.10 if r["workload"] == "zipf" else 0.25
            cache = r["params"]["cache_bytes"]
            assert 0 <= data * frac - cache < r["params"]["page_size"]      # whole pages
            assert (f"| workloads | {r['workload']} | gids |  | {100 * cache / data:.3g} % |"
                    in table)
    zipf = [t for t in result["targets"] if t["workload"] == "zipf"][0]
    assert zipf["setting"] == "Zipf(0.99) 512 B reads, gids cache 10 % of the data"


def _row(workload, path, rps, correct=True):
    return {"sweep": "workloads", "workload": workload, "path": path, "requests_per_s": rps,
            "bytes_per_s": rps * 4096, "correct": correct, "error": None}


def test_targets_are_ratios_of_the_workload_rows():
    """Issue 4's four targets from the rows they compare: each ratio, met or missed, and no
    verdict where a row is missing or wrong; off the issue's settings is said so."""
    config = dict(sweeps=["workloads"], workloads=list(bench.WORKLOADS), request_bytes=4096,
                  cache_fraction=0.25, zipf_cache_fraction=0.10, steps=8)
    rows = [_row("uniform", "gids", 9.0), _row("uniform", "cpu_batch", 4.5),
            _row("uniform", "zero_copy", 12.0),
            _row("chains", "gids", 9.0), _row("chains", "cpu_batch", 3.1),
            _row("zipf", "gids", 30.0), _row("zipf", "zero_copy", 14.0, correct=False),
            _row("hits", "gids", 80.0), _row("hits", "memory", 160.0)]
    result = {"config": config, "results": rows}
    got = {t["workload"]: t for t in bench.evaluate_targets(result)}
    assert got["uniform"]["met"] is True and got["uniform"]["issue_setting"]
    assert [x["ratio"] for x in got["uniform"]["ratios"]] == [2.0, 0.75]
    assert got["uniform"]["setting"] == "uniform random 4 KiB reads, data 4x the gids cache"
    assert got["chains"]["met"] is False and got["chains"]["ratios"][0]["least"] == 3.0
    assert got["zipf"]["met"] is None and got["zipf"]["ratios"][0]["ratio"] is None
    assert got["hits"]["met"] is True and got["hits"]["ratios"][0]["ratio"] == 0.5
    lines = bench.format_targets(dict(result, targets=list(got.values())))
    assert any("gids >= 1x cpu_batch (2.00x) and >= 0.5x zero_copy (0.75x) | **yes** |" in line
               for line in lines)
    assert any(line.startswith("| Zipf(0.99) 4 KiB reads, gids cache 10 % of the data |")
               and "| WRONG |" in line and line.endswith("| - |") for line in lines)
    config["zipf_cache_fraction"] = 0.25
    zipf = [t for t in bench.evaluate_targets(result) if t["workload"] == "zipf"][0]
    assert not zipf["issue_setting"] and "cache 25 %" in zipf["setting"]
    assert bench.evaluate_targets(dict(result, config=dict(config, sweeps=["iops"]))) == []


@pytest.mark.parametrize("options, message", [
    (dict(paths=["spdk"]), "unknown data path 'spdk'; choose from memory, zero_copy, gids, nvme"),
    (dict(threads=0), "threads must be an integer >= 1, got 0"),
    (dict(threads=48), "threads must be a multiple of 32"),
    (dict(iops_threads=[64, 0]), "threads must be an integer >= 1, got 0"),
    (dict(request_bytes=100), "request_bytes 100 is not a multiple of the element size "
                              r"\(8 bytes of int64\)"),
    (dict(request_sizes=[512, 1020]), "request size 1020 is not a multiple of the element"),
    (dict(sweeps=["speed"]), "unknown sweep 'speed'"),
    (dict(workloads=["random"]), "unknown workload 'random'"),
    (dict(hit_rates=[0.5, 1.5]), r"hit rates must be in \[0, 1\]"),
    (dict(daemon_threads=[0]), "daemon threads must be an integer >= 1"),
    (dict(block=48), "block must be a multiple of 32"),
    (dict(batch_bytes=1024), "batch_bytes 1024 is too small"),
    (dict(request_bytes=1 << 30), "larger than the data"),
    (dict(bogus=1), r"unknown option\(s\) \['bogus'\]"),
])
def test_bad_arguments_get_clear_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        bench.make_config(**options)


def test_command_line_errors_and_registration(capsys):
    parser = argparse.ArgumentParser(prog="gids")
    sub = parser.add_subparsers(dest="cmd", required=True)
    bench.add_bench_arguments(sub)
    args = parser.parse_args(["bench", "iops", "latency", "--paths", "memory,gids"])
    assert args.func is bench.cmd_bench and args.sweeps == ["iops", "latency"]
    assert args.paths == ["memory", "gids"]
    assert parser.parse_args(["bench", "--request-bytes", "4K"]).request_bytes == 4096

    assert bench.main(["--paths", "memory,spdk"]) == 2
    assert "gids bench: error: unknown data path 'spdk'" in capsys.readouterr().err
    assert bench.main(["--threads", "0"]) == 2
    assert "threads must be an integer >= 1" in capsys.readouterr().err
    assert bench.main(["--request-bytes", "1001"]) == 2
    assert "not a multiple of the element size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench.main(["--request-bytes", "4X"])
    assert exc.value.code == 2
    assert "not a size: '4X'" in capsys.readouterr().err


def test_cli_prints_json(capsys):
    rc = bench.main(["latency", "--paths", "memory", "--latency-requests", "2", "--json",
                     "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["command"].startswith("python -m workloads.bench latency")
    assert [r["path"] for r in out["results"]] == ["memory"]


def test_access_patterns():
    rng = np.random.default_rng(0)
    ids = bench.zipf_ids(1000, 20000, rng)
    assert ids.min() >= 0 and ids.max() < 1000
    counts = np.sort(np.bincount(ids, minlength=1000))[::-1]
    assert counts[0] > 20 * np.median(counts)        # a heavy head
    assert bench.parse_size("1M") == 1 << 20 and bench.parse_size("512") == 512


def test_emulated_tier_points_are_planned_after_the_tier_sweep():
    """``--ssd``: each emulated array adds the Zipf target's rows (MemoryStore; page-cached
    file without a tier, with a static 20 % tier, with a victim-filled one), GPU cache 10 %."""
    arrays = [Emulation("p5800x", 1), Emulation("p5800x", 4)]
    config = bench.make_config(sweeps=["tier"], paths=["gids"], emulations=arrays)
    assert config.to_json()["emulations"] == [{"ssd": "p5800x", "n_ssd": 1},
                                              {"ssd": "p5800x", "n_ssd": 4}]
    points = bench.plan_points(config)
    plain = [p for p in points if p.emulation is None]
    assert plain == bench.plan_points(bench.make_config(sweeps=["tier"], paths=["gids"]))
    emulated = points[len(plain):]
    assert [(p.emulation, p.store, p.host_tier_fraction, p.tier_fill) for p in emulated] == [
        (e, store, tier, fill) for e in arrays for store, tier, fill in (
            ("memory", 0.0, "static"), ("cached", 0.0, "static"), ("cached", 0.2, "static"),
            ("cached", 0.2, "victims"))]
    assert {(p.workload, p.path, p.cache_fraction) for p in emulated} == {("zipf", "gids", 0.1)}


def test_emulated_tier_rows_run_on_the_modelled_drives_and_reach_the_results_page(tmp_path):
    """The emulated rows at the smallest sizes: right values, a Runtime with the SSD model, the
    page-cached file, their ``emulation`` in the JSON; the Zipf target per array, the table's
    SSDs column and note, and the results page's figures."""
    array = Emulation("p5800x", 1)
    config = bench.make_config(sweeps=["tier"], paths=["gids"], requests=8, reps=1, steps=4,
                               emulations=[array])
    runner = bench.Runner(config)
    rows = []
    try:
        runner.ceilings = bench.measure_ceilings(1 << 16, reps=1)
        for pt in bench.emulated_tier_points(array):
            rows.append(runner.run_point(pt))
            options = runner._path_options(pt, config.request_bytes)
            _, arr = runner.arrays.get("gids", options, pt.store)   # the point's own, still open
            assert runtime_emulation(arr.runtime) == array
            if pt.store == "cached":
                assert isinstance(arr.store, gids.FileStore) and not arr.store.direct_enabled
    finally:
        runner.close()
    assert [r["error"] for r in rows] == [None] * 4 and all(r["correct"] for r in rows)
    assert all(r["emulation"] == {"ssd": "p5800x", "n_ssd": 1} for r in rows)
    assert [r["params"]["store"] for r in rows] == ["memory", "cached", "cached", "cached"]
    assert rows[2]["path_stats"]["tier_hits"] > 0 and rows[1]["path_stats"]["tier_hits"] == 0
    result = {"schema_version": 1, "simulator": True, "label": "simulator figure",
              "date": "2026-12-03T00:00:00", "command": "pytest",
              "machine": bench.machine_info(), "config": config.to_json(),
              "ceilings": runner.ceilings, "results": rows, "plots": []}
    result["targets"] = bench.evaluate_targets(json.loads(json.dumps(result)))
    zipf = [t for t in result["targets"] if t["emulation"] is not None]
    assert len(zipf) == 1 and zipf[0]["emulation"] == {"ssd": "p5800x", "n_ssd": 1}
    assert zipf[0]["setting"].endswith("both on 1 x p5800x (emulated)")
    want = rows[2]["bytes_per_s"] / rows[0]["bytes_per_s"]
    assert zipf[0]["ratios"][0]["ratio"] == pytest.approx(want)
    table = bench.format_table(result)
    assert "| page-cached file store | 9.38 % | 1 x p5800x |" in table.replace(
        "host_tier_fraction=0, ", "")
    assert "read through the page cache" in table and "not with O_DIRECT" in table
    written = bench.write_outputs(dict(result), str(tmp_path))   # the plot too, where it can
    assert json.loads((tmp_path / "bench.json").read_text())["results"][3]["emulation"] == {
        "ssd": "p5800x", "n_ssd": 1} and str(tmp_path / "bench.md") in written
    recs = results.from_json(dict(result, simulator=False))
    tier = {r["figure"]: r for r in recs if r["area"] == results.TIER}
    assert tier[zipf[0]["setting"]]["value"] == pytest.approx(want)
    assert tier[zipf[0]["setting"]]["reference"] == "gids over a MemoryStore on 1 x p5800x"
    emulated = [f for f in tier if f.endswith("on 1 x p5800x (emulated): requests/s")]
    assert len(emulated) == 4
    assert ("Zipf(0.99) 512 B reads, page-cached file, GPU cache 10 %, host tier 20 % "
            "filled by evictions, on 1 x p5800x (emulated): requests/s") in emulated


@pytest.mark.parametrize("argv, message", [
    (["tier", "--n-ssd", "1,4"], "--n-ssd needs --ssd PROFILE"),
    (["iops", "--ssd", "p5800x"], "--ssd emulates drives under the tier sweep's gids rows"),
    (["tier", "--paths", "memory", "--ssd", "p5800x"], "the tier sweep with the gids path"),
    (["files", "--ssd", "p5800x"], "the files sweep takes its drive model from --profile"),
])
def test_emulation_mistakes_are_one_line_and_exit_2(argv, message, capsys):
    assert bench.main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gids bench: error: ") and message in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        bench.main(["tier", "--ssd", "nosuchdrive"])
    assert exc.value.code == 2
