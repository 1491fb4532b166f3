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
    # No model: the store is the device, and the host has no part of its own.
    np.testing.assert_array_equal(trace["ready_ns"], trace["issue_ns"])
    np.testing.assert_array_equal(trace["device_ns"], trace["complete_ns"])


@pytest.mark.parametrize("profile", ["980pro", "p5800x"])
def test_completions_wait_for_the_model(tmp_path, profile):
    trace, _ = _run(tmp_path, ssd=profile, n_ssd=2)
    idle_latency = SsdModel(profile, n_ssd=2).submit(0, 0, 512)   # the fastest it can be
    assert ((trace["complete_ns"] - trace["issue_ns"]) >= idle_latency).all()
    # The record says when the model had it done, and the host (store call and timing):
    # the completion was posted after both.
    assert ((trace["device_ns"] - trace["issue_ns"]) >= idle_latency).all()
    assert (trace["ready_ns"] >= trace["issue_ns"]).all()
    assert (trace["complete_ns"] >= np.maximum(trace["ready_ns"], trace["device_ns"])).all()


def test_replay_through_the_emulated_model_predicts_the_run(tmp_path):
    """One daemon thread calls the model in the order the replay does, so the replay through
    the same model predicts the recorded span (first issue to last posting) exactly."""
    trace, _ = _run(tmp_path, ssd="pm1743", n_ssd=2)
    span_s = (trace["complete_ns"].max() - trace["issue_ns"].min()) / 1e9
    for mode in ("closed", "open"):
        assert gids.replay(trace, "pm1743", n_ssd=2, mode=mode).time_s == pytest.approx(
            span_s, rel=1e-9)


def test_simulate_replays_a_recorded_trace(tmp_path, capsys):
    _run(tmp_path, ssd="p5800x")
    assert gids_main(["simulate", str(tmp_path / "run.trace"), "--ssd", "pm1743",
                      "--n-ssd", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 x pm1743" in out and "IOPS" in out


def test_runtime_stripes_its_emulated_array_by_its_page_size():
    """One cache page per stripe unit: a page is one command on one drive."""
    with gids.Runtime(cache_pages=8, page_size=1024, ssd="pm1743", n_ssd=4) as rt:
        assert rt.ssd_model.stripe_bytes == 1024


def test_bad_emulation_arguments():
    with pytest.raises(gids.ConfigError, match="profile|unknown"):
        gids.Runtime(cache_pages=2, ssd="floppy")
    with pytest.raises(gids.ConfigError, match="n_ssd"):
        gids.Runtime(cache_pages=2, ssd="ideal", n_ssd=0)
    assert "p5800x" in gids.ssd_profiles()


def test_host_harness_replay_predicts_its_run():
    """The host-only harness (``python -m workloads.emulation_bench``: a CPU thread plays the
    GPU on the daemon's queues) at a small size: every request is recorded, the replay
    predicts the trace's span exactly (one daemon thread), and the wall time holds the span."""
    from workloads.emulation_bench import run_emulated
    data = np.random.default_rng(0).integers(0, 1 << 62, 4096 * 512, dtype=np.int64)
    r = run_emulated(data, "pm1743", 2, 20_000, queues=16, depth=64)
    assert r["requests"] == 20_000 and r["trace_dropped"] == 0
    assert r["predicted_s"] == pytest.approx(r["trace_span_s"], rel=1e-9)
    assert r["predicted_open_s"] == pytest.approx(r["trace_span_s"], rel=1e-9)
    assert r["lead_in_us"] >= 0 and r["tail_us"] >= 0 and r["wall_s"] >= r["trace_span_s"]
    # No faster than the model's idle latency of its fastest (lower) page type, page 0's.
    idle_us = SsdModel("pm1743").submit(0, 0, 4096) / 1e3
    assert r["device_latency_us_mean"] >= idle_us and r["post_delay_us_mean"] >= 0


def test_daemon_latency_round_trip_serves_the_stores_bytes():
    """workloads.daemon_latency: one request at a time through the daemon, each engine, the
    last page's bytes in its staging entry equal to the store's."""
    from workloads.daemon_latency import round_trip
    for engine in ("io_uring", "threads"):
        row = round_trip(queues=8, threads=2, engine=engine, requests=200, store_mib=4)
        assert row["correct"]
        assert 0 < row["p50_us"] <= row["p99_us"]


def test_daemon_latency_cli_bad_input_is_one_line_and_status_2(capsys):
    from workloads.daemon_latency import main
    with pytest.raises(SystemExit) as e:
        main(["--queues", "x"])
    assert e.value.code == 2


def test_daemon_latency_wait_is_bounded_with_no_daemon():
    """No daemon serves the queue: the driver gives up after WAIT_NS with the request's index."""
    from workloads.daemon_latency import DEPTH, one_at_a_time
    sq = np.zeros(DEPTH * gids.layout.SQ_WORDS, dtype=np.int64)
    cq = np.zeros(DEPTH * gids.layout.CQ_WORDS, dtype=np.int64)
    lat = np.zeros(3, dtype=np.int64)
    assert one_at_a_time(0, sq, cq, DEPTH, 8, np.arange(3, dtype=np.int64), lat,
                         np.zeros(2, dtype=np.int64)) == 0
