"""The results page: rendered the same way every time from the figures file, and `update`
replaces a figure (by area and figure) from a benchmark's JSON."""

import json
import random

import pytest

from workloads import results


def _store():
    return {"areas": [{"name": "hit path", "reference": "a plain gather"},
                      {"name": "BFS", "reference": "GPU memory"}],
            "changes": ["a change"],
            "figures": [results.record("hit path", "random hits", 0.49, "x", ">= 0.30x",
                                       "plain gather", 0.49, "cmd a", "2026-12-01", "aaaaaaa", "H200"),
                        results.record("BFS", "whole graph", 0.83, "x", ">= 0.70x", "GPU memory",
                                       0.83, "cmd b", "2026-12-02", "bbbbbbb", "H200")]}


def test_render_is_deterministic_and_shows_every_figure(tmp_path):
    store = _store()
    page = results.render(store)
    path = tmp_path / "figures.json"
    results.save(store, path)
    assert results.render(results.load(path)) == page
    assert page.index("## Hit path") < page.index("## BFS")
    assert "| random hits | 0.49x | >= 0.30x | 0.49x plain gather | H200 | `cmd a` | 2026-12-01 | `aaaaaaa` |" in page


def test_the_checked_in_page_is_the_rendered_store():
    assert open(results.PAGE).read() == results.render(results.load())


def test_update_replaces_a_figure_and_keeps_the_others(tmp_path):
    store_path, page_path, bench = tmp_path / "f.json", tmp_path / "r.md", tmp_path / "b.json"
    results.save(_store(), store_path)
    value = random.uniform(0.1, 0.9)
    results.write_records(bench, [results.record("hit path", "random hits", value, "x",
                                                 ">= 0.30x", "plain gather", value,
                                                 "cmd a --out /tmp/x")])
    assert results.main(["--store", str(store_path), "--page", str(page_path), "update",
                         str(bench), "--commit", "ccccccc", "--date", "2026-12-03",
                         "--change", "hits moved"]) == 0
    store = results.load(store_path)
    hits = [r for r in store["figures"] if r["figure"] == "random hits"]
    assert len(hits) == 1 and hits[0]["value"] == value
    assert (hits[0]["commit"], hits[0]["date"], hits[0]["command"]) == ("ccccccc", "2026-12-03", "cmd a")
    assert [r["figure"] for r in store["figures"]] == ["random hits", "whole graph"]
    assert store["figures"][1] == _store()["figures"][1]
    assert store["changes"][0] == "hits moved"
    assert page_path.read_text() == results.render(store)


def test_update_reads_a_bfs_report_and_refuses_a_simulator_run(tmp_path):
    run = lambda path, frac, teps: {"data_path": path, "teps": {"harmonic_mean_TEPS": teps},  # noqa: E731
                                    "options": {} if frac is None else {"cache_fraction": frac}}
    report = {"command": "bfs", "world": "GPU", "simulator": False,
              "graph": {"metadata": {"scale": 24}},
              "runs": [run("memory", None, 1.2e10), run("gids", 1.0, 1.0e10), run("memory", None, 1.3e10)]}
    recs = {r["figure"]: r for r in results.from_json(report)}
    ratio = recs["scale 24, whole graph cached, warm: gids / GPU memory"]
    assert abs(ratio["value"] - 1.0e10 / 1.25e10) < 1e-12 and ratio["area"] == results.BFS
    with pytest.raises(ValueError, match="simulator"):
        results.from_json({**report, "simulator": True})
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({**report, "simulator": True}))
    store_path = tmp_path / "f.json"
    results.save(_store(), store_path)
    try:
        results.main(["--store", str(store_path), "--page", str(tmp_path / "r.md"), "update", str(path)])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("update took a simulator run")


def test_update_reads_the_host_tier_figures():
    """Issue 23's figures: the tier sweep's targets from bench.json, and a BFS with a host tier
    against zero-copy, apart from the BFS area's own rows."""
    bench_json = {"schema_version": 1, "simulator": False, "command": "gids bench tier",
                  "ceilings": {}, "targets": [
                      {"sweep": "tier", "workload": "zipf", "setting": "Zipf tier row",
                       "ratios": [{"path": "gids", "least": 0.9, "ratio": 1.1}]},
                      {"sweep": "workloads", "workload": "zipf", "setting": "Zipf",
                       "ratios": [{"path": "zero_copy", "least": 2.0, "ratio": 3.0}]}]}
    recs = {r["figure"]: r for r in results.from_json(bench_json)}
    assert recs["Zipf tier row"]["area"] == results.TIER and recs["Zipf tier row"]["value"] == 1.1
    assert recs["Zipf: gids / zero_copy"]["area"] == results.WORKLOADS
    def run(path, teps, **o):
        return {"data_path": path, "teps": {"harmonic_mean_TEPS": teps}, "options": o}
    report = {"command": "bfs", "world": "GPU", "simulator": False,
              "graph": {"metadata": {"scale": 24}},
              "runs": [run("zero_copy", 4e9),
                       run("gids", 6e9, cache_fraction=0.25, host_tier="degree",
                           host_tier_fraction=0.75, storage="file"),
                       run("gids", 5e9, cache_fraction=0.25, host_tier="degree",
                           host_tier_fraction=1.0, host_tier_mode="split", storage="file")]}
    recs = results.from_json(report)
    assert all(r["area"] == results.TIER for r in recs), recs
    ratios = [r for r in recs if r["figure"].endswith("gids / zero-copy")]
    assert len({r["figure"] for r in ratios}) == 2     # one figure per mode
    ratio = next(r for r in ratios if "(split)" not in r["figure"])
    assert abs(ratio["value"] - 1.5) < 1e-12 and ratio["target"] == ">= 1.2x"
    split = next(r for r in ratios if "100 % by degree (split)" in r["figure"])
    assert abs(split["value"] - 1.25) < 1e-12
def test_update_reads_the_tier_sweep_on_emulated_drives():
    """``gids bench tier --ssd``: the Zipf target on each emulated array (its reference the
    MemoryStore row on the same drives) and each emulated row's requests/s, in the host-tier
    area; unemulated rows add no row figures."""
    em = {"ssd": "p5800x", "n_ssd": 4}
    rate = {k: random.uniform(1e5, 1e7) for k in ("memory", "none", "static", "victims")}

    def row(store, tier, fill, rps, emulation=em):
        return {"sweep": "tier", "workload": "zipf", "path": "gids", "x_name": "host_tier_fraction",
                "x": tier, "correct": True, "requests_per_s": rps, "emulation": emulation,
                "params": {"store": store, "cache_fraction": 0.1, "tier_fill": fill,
                           "request_bytes": 4096}}
    ratio = rate["static"] / rate["memory"]
    bench_json = {"schema_version": 1, "simulator": False, "command": "gids bench tier --ssd p5800x",
                  "ceilings": {}, "targets": [
                      {"sweep": "tier", "workload": "zipf", "setting": "Zipf tier row, both on 4 x p5800x (emulated)",
                       "ratios": [{"path": "gids", "least": 0.9, "ratio": ratio}], "emulation": em}],
                  "results": [row("memory", 0.0, None, rate["memory"]),
                              row("cached", 0.0, None, rate["none"]),
                              row("cached", 0.2, "static", rate["static"]),
                              row("cached", 0.2, "victims", rate["victims"]),
                              row("file", 0.2, "static", 1e6, emulation=None)]}
    recs = {r["figure"]: r for r in results.from_json(bench_json)}
    assert all(r["area"] == results.TIER for r in recs.values()) and len(recs) == 5
    target = recs["Zipf tier row, both on 4 x p5800x (emulated)"]
    assert target["value"] == ratio and target["reference"] == "gids over a MemoryStore on 4 x p5800x"
    name = "Zipf(0.99) 4 KiB reads, {}, GPU cache 10 %, {}, on 4 x p5800x (emulated): requests/s"
    for key, store, tier in (("memory", "MemoryStore", "no tier"), ("none", "page-cached file", "no tier"),
                             ("static", "page-cached file", "host tier 20 %"),
                             ("victims", "page-cached file", "host tier 20 % filled by evictions")):
        r = recs[name.format(store, tier)]
        assert (r["value"], r["unit"]) == (rate[key], "requests/s")
    assert "| " + name.format("MemoryStore", "no tier") + " |" in results.render(
        {"areas": [{"name": results.TIER, "reference": ""}], "figures": list(recs.values())})


def _gnn_row(label, path, value, emulation=None, key="rows_per_s"):
    row = {"label": label, "path": path, "emulation": emulation}
    if key == "rows_per_s":
        row["rows_per_s"] = value
    else:
        row["epochs"] = [{"epoch_s": value * 2}, {"epoch_s": value}]
    return row


def test_update_reads_gnn_gather_with_emulated_drives_and_the_direct_loader():
    rate = {label: random.uniform(1e5, 1e7) for label in
            ("mmap", "gids 25%", "gids 25% on 4 x p5800x", "direct", "direct on 4 x p5800x")}
    em = {"ssd": "p5800x", "n_ssd": 4}
    report = {"command": "/x/gids/cli.py gnn --gather-only --scale 22 --json o.json",
              "mode": "gather", "fanouts": [10, 5, 5], "scale": 22,
              "rows": [_gnn_row(k, k.split()[0], v, em if "on 4" in k else None)
                       for k, v in rate.items()]}
    report["rows"][3]["loader"] = {"threads": 64, "o_direct": True}
    recs = {r["figure"]: r for r in results.from_json(report)}
    assert recs["feature gather, scale 22, gids 25% cache / mmap"]["value"] == \
        rate["gids 25%"] / rate["mmap"]
    assert recs["feature gather, scale 22, gids 25% cache on 4 x p5800x / direct on 4 x "
                "p5800x"]["value"] == rate["gids 25% on 4 x p5800x"] / rate["direct on 4 x p5800x"]
    assert recs["feature gather, scale 22, gids 25% cache / direct"]["ratio"] == \
        rate["gids 25%"] / rate["direct"]
    direct = recs["feature gather, scale 22, direct loader (O_DIRECT, 64 threads) on the "
                  "machine's disk"]
    assert direct["value"] == rate["direct"] / 1e3 and direct["unit"] == "k rows/s"
    assert all(r["command"] == "gids gnn --gather-only --scale 22" for r in recs.values())
    mapped = {r["figure"] for r in results.from_json({**report, "storage": "mmap"})}
    assert "feature gather, scale 22, gids 25% cache (mmap store) / mmap" in mapped


def test_update_reads_a_gnn_training_run():
    epoch = {label: random.uniform(1, 50) for label in
             ("mmap", "memory", "gids 25%", "gids 25% loader", "gids 100% loader")}
    report = {"command": "gids gnn --scale 22", "mode": "train", "fanouts": [15, 10, 5],
              "scale": 22, "rows": [_gnn_row(k, k.split()[0], v, key="epochs")
                                    for k, v in epoch.items()]}
    recs = {r["figure"]: r for r in results.from_json(report)}
    speedup = recs["epoch, scale 22, gids 25% loader / mmap: speed-up"]
    assert speedup["value"] == epoch["mmap"] / epoch["gids 25% loader"]
    assert speedup["target"] == ">= 2x"
    assert recs["epoch, scale 22, gids 100% loader / memory: speed-up"]["value"] == \
        epoch["memory"] / epoch["gids 100% loader"]
    assert "epoch, scale 22, gids 25% / mmap: speed-up" in recs
    mapped = {r["figure"] for r in results.from_json({**report, "storage": "mmap"})}
    assert "epoch, scale 22, gids 25% loader (mmap store) / mmap: speed-up" in mapped


def test_update_reads_a_gather_only_gnn_report_with_its_hit_rate():
    row = lambda label, path, rate, hits=None: {"label": label, "path": path,  # noqa: E731
                                                "rows_per_s": rate, "hit_rate": hits}
    report = {"command": "gids gnn --gather-only --json x.json", "mode": "gather",
              "simulator": False, "scale": 20, "fanouts": [10, 5, 5], "rows_resident_first": "auto",
              "rows": [row("gids 25%", "gids", 6e6, 0.4), row("gids 100%", "gids", 9e6, 1.0),
                       row("memory", "memory", 1e7), row("mmap", "mmap", 1e6)]}
    recs = {r["figure"]: r for r in results.from_json(report)}
    whole = recs["feature gather, scale 20, gids 100% cache / memory"]
    assert abs(whole["value"] - 0.9) < 1e-12 and whole["target"] == ">= 0.8x"
    assert recs["feature gather, scale 20, gids 25% cache / mmap"]["value"] == 6.0
    hits = recs["feature gather, scale 20, gids 100% cache: hit rate of the timed batches"]
    assert hits["value"] == 100.0 and hits["unit"] == "%"
    one_launch = {r["figure"] for r in results.from_json({**report, "rows_resident_first": False})}
    assert "feature gather, scale 20, gids 100% cache / memory" in one_launch
    two = {r["figure"] for r in results.from_json({**report, "rows_resident_first": True})}
    assert "feature gather, scale 20, gids 100% cache / memory, resident first " \
           "(GIDS_ROWS_RESIDENT_FIRST=1)" in two


def test_update_reads_the_prefetch_bench(tmp_path):
    """Rows of each batch size are figures of their own; the prefetch and hold loops' host
    time in calls too; a version 1 file (no size in its rows) takes its config's."""
    def row(size, mode, e, vs_max):
        return {"batch_pages": size, "mode": mode, "emulation": e, "vs_max": vs_max,
                "per_batch_ms": 2.0, "host_calls_ms": 0.5 if mode != "none" else 0.0,
                "correct": True}
    report = {"version": 2, "sweep": "prefetch", "simulator": False, "target_vs_max": 1.15,
              "command": "gids bench prefetch --n-ssd 1 --out /x",
              "config": {"batch_pages": [8192, 32768]},
              "rows": [row(8192, "none", None, 1.9), row(8192, "prefetch", None, 1.1),
                       row(32768, "prefetch", None, 1.02),
                       row(8192, "hold", {"ssd": "p5800x", "n_ssd": 4}, 1.05)]}
    recs = {r["figure"]: r for r in results.from_json(report)}
    fig = recs["batch loop of 8192 pages, compute = I/O, RAM store, prefetch: per batch / "
               "max(I/O, compute)"]
    assert fig["value"] == 1.1 and fig["target"] == "<= 1.15x" and fig["area"] == results.PREFETCH
    assert fig["command"] == "gids bench prefetch --n-ssd 1"
    assert recs["batch loop of 32768 pages, compute = I/O, RAM store, prefetch: per batch / "
                "max(I/O, compute)"]["value"] == 1.02
    assert "batch loop of 8192 pages, compute = I/O, emulated p5800x x4, hold: per batch / " \
        "max(I/O, compute)" in recs
    host = recs["batch loop of 8192 pages, compute = I/O, RAM store, prefetch: host time in "
                "its calls per batch"]
    assert host["value"] == 0.5 and host["unit"] == "ms" and host["ratio"] == 0.25
    assert not any("none: host time" in f for f in recs)
    assert len(recs) == 4 + 3
    old = {"version": 1, "sweep": "prefetch", "simulator": False, "config": {"batch_pages": 8192},
           "rows": [{k: v for k, v in row(0, "prefetch", None, 1.2).items()
                     if k != "batch_pages"}]}
    assert results.from_json(old)[0]["figure"] == \
        "batch loop of 8192 pages, compute = I/O, RAM store, prefetch: per batch / max(I/O, compute)"
    with pytest.raises(ValueError, match="simulator"):
        results.from_json({**report, "simulator": True})
    store = {"areas": [{"name": results.PREFETCH, "reference": ""}], "changes": [],
             "figures": []}
    assert len(results.merge(store, results.from_json(report))) == 7
    assert "batch loop of 32768 pages, compute = I/O, RAM store, prefetch" in results.render(store)


def test_a_search_in_query_batches_is_figures_of_its_own():
    rows = [{"data_path": "gids", "nprobe": 8, "recall": 0.97, "qps": 5e4},
            {"data_path": "memory", "nprobe": 8, "recall": 0.97, "qps": 1e5}]
    plain = {r["figure"] for r in results.from_json({"faiss": None, "rows": rows})}
    batched = {r["figure"]: r for r in results.from_json(
        {"faiss": None, "rows": rows, "query_batch": 1000, "prefetch": True})}
    assert "gids QPS, nprobe 8" in plain
    fig = "gids QPS, nprobe 8, query batches of 1000, the next prefetched"
    assert fig in batched and batched[fig]["value"] == 5e4
    assert not plain & set(batched)


def test_update_reads_the_files_bench_with_its_probe_and_engine_columns():
    """files.json (``gids bench files``): the ceiling, the probe, each direct row against both,
    and the engine's own columns become figures; a row without the new columns (an older run)
    still reads."""
    probe, ceiling = random.uniform(50e3, 90e3), 100e3
    direct = {"kind": "direct", "engine": "io_uring", "threads": 1, "pages_per_s": 0.8 * probe,
              "of_ceiling": 0.8 * probe / ceiling, "of_probe": 0.8, "engine_io_us": 900.0,
              "gpu_io_us": 1200.0, "in_flight_peak": 256, "daemon_cpu_us_per_page": 1.5}
    old = {"kind": "direct", "engine": "threads", "threads": 1, "pages_per_s": 20e3}
    host = {"kind": "host", "engine": "io_uring", "threads": 1, "pages_per_s": 0.9 * probe,
            "daemon_cpu_us_per_page": random.uniform(2, 5), "buffers": "registered buffers: yes"}
    # The same without registered buffers (engine_fixed_buffers on: the plain rows beside).
    plain_host = dict(host, pages_per_s=0.8 * probe, buffers="registered buffers: no (off)")
    plain = dict(direct, kind="direct plain buffers", pages_per_s=0.7 * probe,
                 daemon_cpu_us_per_page=2.5)
    d = {"sweep": "files", "command": "gids bench files --out /tmp/x", "simulator": False,
         "ceiling_pages_per_s": ceiling, "probe_pages_per_s": probe,
         "rows": [{"kind": "probe", "engine": "io_uring", "threads": 1, "pages_per_s": probe,
                   "daemon_cpu_us_per_page": 3.0}, host, plain_host, direct, plain, old]}
    recs = {r["figure"]: r for r in results.from_json(d)}
    assert abs(recs["probe: the engine alone, one thread's ring at depth, no GPU"]["ratio"]
               - probe / ceiling) < 1e-12
    what = "gids all-miss from an O_DIRECT file, io_uring, 1 daemon thread(s)"
    assert recs[f"{what}, of the probe"]["ratio"] == 0.8
    assert recs[f"{what}: engine I/O time (taken to CQE)"]["value"] == 900.0
    assert recs[f"{what}: peak in flight per thread"]["value"] == 256
    assert "gids all-miss from an O_DIRECT file, threads, 1 daemon thread(s)" in recs
    assert recs["probe: its thread's CPU per page"]["value"] == 3.0
    what = ("the daemon driven from the host (no GPU), O_DIRECT file, io_uring, "
            "1 daemon thread(s)")
    assert abs(recs[what]["ratio"] - 0.9 * probe / ceiling) < 1e-12
    assert recs[f"{what}: daemon CPU per page"]["value"] == host["daemon_cpu_us_per_page"]
    assert recs[f"{what} (registered buffers: no (off))"]["value"] == 0.8 * probe / 1e3
    what = ("gids all-miss from an O_DIRECT file, io_uring, 1 daemon thread(s), plain buffers "
            "(engine_fixed_buffers=0)")
    assert recs[what]["value"] == 0.7 * probe / 1e3
    assert recs[f"{what}: daemon CPU per page"]["value"] == 2.5
    assert recs["gids all-miss from an O_DIRECT file, io_uring, 1 daemon thread(s)"]["value"] \
        == 0.8 * probe / 1e3
    assert all(r["command"] == "gids bench files" for r in recs.values())


def test_update_reads_the_rows_launch_suite():
    # The largest gather's host cost per call, each gids setting against torch.index_select;
    # a row whose values were wrong is no figure.
    from workloads.results import from_json
    row = {"calls": 200, "host_us_p90": 1.0, "us_per_call_with_sync": 1.0, "auto_picks_this": None}
    d = {"meta": {"date": "2026-12-03", "gpu": "NVIDIA H200",
                  "command": "python -m workloads.microbench rows-launch --calls 200"},
         "rows": [dict(row, case="torch.index_select (GPU memory)", rows=32768,
                       host_us_median=75.0, correct=True),
                  dict(row, case="gids gather_rows, rows_resident_first=0", rows=32768,
                       host_us_median=150.0, correct=True),
                  dict(row, case="gids gather_rows, rows_resident_first=1", rows=32768,
                       host_us_median=300.0, correct=False),
                  dict(row, case="gids gather_rows, rows_resident_first=0", rows=1,
                       host_us_median=40.0, correct=True)]}
    recs = from_json(d)
    assert len(recs) == 1
    assert recs[0]["value"] == 150.0 and recs[0]["ratio"] == 2.0
    assert "32,768 rows" in recs[0]["figure"] and recs[0]["command"].endswith("--calls 200")


def test_update_reads_the_gpu_tests_summary():
    from workloads.results import from_json
    d = {"date": "2026-12-03", "command": "python -m workloads.gpu_tests", "passed": 9,
         "failed": 1, "error": 0,
         "files": [{"file": "tests/test_a.py", "exit": 0, "seconds": 3.0, "passed": 8},
                   {"file": "tests/test_b.py", "exit": 1, "seconds": 3.0, "passed": 1,
                    "failed": 1},
                   {"file": "tests/test_c.py", "exit": "timeout", "seconds": 300.0}]}
    (r,) = from_json(d)
    assert r["value"] == 9 and r["ratio"] == 0.9 and "tests/test_c.py" in r["reference"]


def test_update_reads_the_stress_run():
    # The command is the one asked for (60 s), not the timed rounds' 61.8 s; operations/s
    # leaves out the first round (it compiles).
    from workloads.results import from_json
    d = {"file_bytes": 1 << 34, "cache_fraction": 0.00999999, "engine": "io_uring",
         "seconds": 60.0, "rounds": 4, "run_s": 61.8, "writes": 400, "reads": 1200,
         "bad_own_reads": 0, "bad_reads": 0, "file_mismatches": 1, "hangs": 0,
         "simulator": False, "ok": False}
    ops, bad = from_json(d)
    assert ops["value"] == pytest.approx(1200 / 61.8 / 1e6)
    assert bad["value"] == 1 and bad["target"] == "0"
    assert ops["command"] == ("python -m workloads.stress --seconds 60 --file-gib 16 "
                              "--cache-fraction 0.01 --engine io_uring")
