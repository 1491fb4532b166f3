"""The results page: rendered the same way every time from the figures file, and `update`
replaces a figure (by area and figure) from a benchmark's JSON."""

import json
import random

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
    try:
        results.from_json({**report, "simulator": True})
    except ValueError as exc:
        assert "simulator" in str(exc)
    else:
        raise AssertionError("a simulator run was taken as a figure")
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
                           host_tier_fraction=0.75, storage="file")]}
    recs = results.from_json(report)
    assert all(r["area"] == results.TIER for r in recs), recs
    ratio = next(r for r in recs if r["figure"].endswith("gids / zero-copy"))
    assert abs(ratio["value"] - 1.5) < 1e-12 and ratio["target"] == ">= 1.2x"
