"""Real-time SSD emulation in the daemon, I/O traces of runs, and their replay."""
import numpy as np
import pytest

import gids
from gids.cli import main as gids_main
from host_daemon.ssd_model import SsdModel


def _run(tmp_path, **kw):
    data = np.arange(64 * 64, dtype=np.int64)           # 64 pages of 512 B
    path = tmp_path / "run.trace"
    with gids.Runtime(cache_pages=8, page_size=512, trace=path, **kw) as rt:
        a = rt.open_array(data)
        idx = np.random.default_rng(0).integers(0, data.size, 48)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx])
        ios = rt.stats().ios
    return gids.read_trace(path), ios


def test_trace_records_every_io(tmp_path):
    trace, ios = _run(tmp_path)
    assert len(trace) == ios > 0
    assert (trace["nbytes"] == 512).all()
    assert (trace["offset"] % 512 == 0).all() and (trace["offset"] < 64 * 512).all()
    assert (trace["complete_ns"] >= trace["issue_ns"]).all()
    assert (trace["queue"] < gids.defaults.get("queues")).all()


@pytest.mark.parametrize("profile", ["980pro", "p5800x"])
def test_completions_wait_for_the_model(tmp_path, profile):
    trace, _ = _run(tmp_path, ssd=profile, n_ssd=2)
    idle_latency = SsdModel(profile, n_ssd=2).submit(0, 0, 512)   # the fastest it can be
    assert ((trace["complete_ns"] - trace["issue_ns"]) >= idle_latency).all()


def test_simulate_replays_a_recorded_trace(tmp_path, capsys):
    _run(tmp_path, ssd="p5800x")
    assert gids_main(["simulate", str(tmp_path / "run.trace"), "--ssd", "pm1743",
                      "--n-ssd", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 x pm1743" in out and "IOPS" in out


def test_bad_emulation_arguments():
    with pytest.raises(gids.ConfigError, match="profile|unknown"):
        gids.Runtime(cache_pages=2, ssd="floppy")
    with pytest.raises(gids.ConfigError, match="n_ssd"):
        gids.Runtime(cache_pages=2, ssd="ideal", n_ssd=0)
    assert "p5800x" in gids.ssd_profiles()
