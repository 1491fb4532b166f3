"""``gids bench prefetch`` (workloads/prefetch_bench.py) in the simulator: every row runs and
checks its values; bad options are one line and status 2. (Times mean nothing here.)"""
import json

import pytest

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
from gids import cli
from workloads import bench


def test_every_loop_runs_and_checks_its_values(capsys, tmp_path):
    """Each batch size runs every loop, its rows saying the size, side by side in the table."""
    rc = bench.main(["prefetch", "--batch-pages", "4,6", "--batches", "3", "--json",
                     "--no-progress", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["sweep"] == "prefetch" and out["simulator"]
    assert out["config"]["batch_pages"] == [4, 6]
    assert [(r["batch_pages"], r["mode"]) for r in out["rows"]] == \
        [(4, "none"), (4, "prefetch"), (4, "hold"), (6, "none"), (6, "prefetch"), (6, "hold")]
    assert all(r["correct"] for r in out["rows"])
    for size in (4, 6):
        rows = {r["mode"]: r for r in out["rows"] if r["batch_pages"] == size}
        assert rows["prefetch"]["prefetched"] == 4 * size
        assert rows["hold"]["held_pages"] == 4 * size
        assert rows["none"]["host_calls_ms"] == 0
        assert rows["prefetch"]["host_calls_ms"] > 0 and rows["hold"]["host_calls_ms"] > 0
    assert (tmp_path / "prefetch.json").exists()
    table = (tmp_path / "prefetch.md").read_text()
    assert "| batch pages | loop |" in table and "| 6 | hold | - |" in table
    assert "target: 4 pages, prefetch per batch" in table


def test_bad_options(capsys):
    assert bench.main(["prefetch", "--batches", "0"]) == 2
    assert "--batches must be >= 1" in capsys.readouterr().err
    assert bench.main(["prefetch", "iops"]) == 2
    assert "run the prefetch sweep on its own" in capsys.readouterr().err
    assert bench.main(["prefetch", "--profile", "floppy"]) == 2
    assert "--profile must be one of" in capsys.readouterr().err
    for bad in ("0", "8192,x", "8192,-4"):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["bench", "prefetch", "--batch-pages", bad])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
        assert "pages per batch must be integers >= 1" in err
