"""``gids bench prefetch`` (workloads/prefetch_bench.py) in the simulator: every row runs and
checks its values; bad options are one line and status 2. (Times mean nothing here.)"""
import json

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
from workloads import bench


def test_every_loop_runs_and_checks_its_values(capsys, tmp_path):
    rc = bench.main(["prefetch", "--batch-pages", "4", "--batches", "3", "--json",
                     "--no-progress", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["sweep"] == "prefetch" and out["simulator"]
    assert [r["mode"] for r in out["rows"]] == ["none", "prefetch", "hold"]
    assert all(r["correct"] for r in out["rows"])
    rows = {r["mode"]: r for r in out["rows"]}
    assert rows["prefetch"]["prefetched"] == 4 * 4 and rows["hold"]["held_pages"] == 4 * 4
    assert rows["none"]["host_calls_ms"] == 0
    assert rows["prefetch"]["host_calls_ms"] > 0 and rows["hold"]["host_calls_ms"] > 0
    assert (tmp_path / "prefetch.json").exists() and (tmp_path / "prefetch.md").exists()


def test_bad_options(capsys):
    assert bench.main(["prefetch", "--batches", "0"]) == 2
    assert "--batches must be >= 1" in capsys.readouterr().err
    assert bench.main(["prefetch", "iops"]) == 2
    assert "run the prefetch sweep on its own" in capsys.readouterr().err
    assert bench.main(["prefetch", "--profile", "floppy"]) == 2
    assert "--profile must be one of" in capsys.readouterr().err
