"""Trace files (round trip, corrupt and truncated files, version 1 files) and replay (closed and
open loop, the recorded host costs, Little's law, speed, the CLI)."""
import heapq
import time

import numpy as np
import pytest

from host_daemon.ssd_model import SsdModel
from host_daemon.trace import (
    HEADER_BYTES,
    HEADER_DTYPE,
    MAGIC,
    OP_WRITE,
    TRACE_DTYPE,
    TRACE_DTYPE_V1,
    TraceFormatError,
    TraceWriter,
    main,
    read_trace,
    replay,
    synthetic_trace,
)


def _records(n, seed=0):
    """Random records with host parts and post delays (as an emulated run records them)."""
    rng = np.random.default_rng(seed)
    records = np.zeros(n, dtype=TRACE_DTYPE)
    records["offset"] = rng.integers(0, 1 << 30, n) * 4096
    records["issue_ns"] = np.sort(rng.integers(0, 10**9, n))
    records["ready_ns"] = records["issue_ns"] + rng.integers(0, 2_000, n)
    records["device_ns"] = records["issue_ns"] + rng.integers(1, 10**5, n)
    records["complete_ns"] = (np.maximum(records["ready_ns"], records["device_ns"])
                              + rng.integers(0, 5_000, n))
    records["nbytes"] = 4096
    records["queue"] = rng.integers(0, 128, n)
    return records


def _without_host_costs(records):
    """The records as version 1 recorded them: no host part, no post delay."""
    out = records.copy()
    out["ready_ns"] = out["issue_ns"]
    out["device_ns"] = out["complete_ns"]
    return out


def _recorded_closed_loop(profile, n, slots, host_ns, max_post_ns, max_think_ns, seed=0):
    """What a run under real-time emulation of ``profile`` records: ``slots`` issuers, each
    issuing its next read ``think`` after its previous one completed; the model times each
    read from its issue; the host's own part takes ``host_ns`` beside it; the completion is
    posted up to ``max_post_ns`` late (a busy daemon). Random think and post times."""
    rng = np.random.default_rng(seed)
    model = SsdModel(profile)
    records = np.zeros(n, dtype=TRACE_DTYPE)
    events = [(int(s * 997), s) for s in range(slots)]
    taken = {t for t, _ in events}   # issue times stay distinct: the model's order is theirs
    for i in range(n):
        issue, slot = heapq.heappop(events)
        offset = int(rng.integers(0, 1 << 24)) * 4096
        device = model.submit(issue, offset, 4096)
        complete = max(issue + host_ns, device) + int(rng.integers(0, max_post_ns))
        records[i] = (offset, issue, issue + host_ns, device, complete, 4096, slot, 0)
        nxt = complete + int(rng.integers(1, max_think_ns))
        while nxt in taken:
            nxt += 1
        taken.add(nxt)
        heapq.heappush(events, (nxt, slot))
    return records


@pytest.fixture
def trace_file(tmp_path):
    """A 1000-record trace written in three chunks; returns (path, records)."""
    records = _records(1000)
    path = tmp_path / "run.trace"
    with TraceWriter(path) as writer:
        for chunk in np.array_split(records, [10, 500]):
            writer.append(chunk)
        assert writer.count == 1000
    return path, records


def test_record_layout_is_48_bytes_without_padding():
    assert TRACE_DTYPE.itemsize == 48
    assert sum(TRACE_DTYPE[name].itemsize for name in TRACE_DTYPE.names) == 48
    assert TRACE_DTYPE_V1.itemsize == 32
    assert HEADER_BYTES == 24


def test_round_trip(trace_file):
    path, records = trace_file
    assert path.stat().st_size == HEADER_BYTES + 1000 * 48
    np.testing.assert_array_equal(read_trace(path), records)


def test_empty_trace_round_trip(tmp_path):
    TraceWriter(tmp_path / "empty.trace").close()
    assert len(read_trace(tmp_path / "empty.trace")) == 0


def test_truncated_file_is_an_error(trace_file):
    path, _ = trace_file
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(TraceFormatError, match="truncated: the header counts 1000 records"):
        read_trace(path)
    path.write_bytes(data[:10])
    with pytest.raises(TraceFormatError, match="shorter than the 24-byte trace header"):
        read_trace(path)


def test_trailing_bytes_are_an_error_unless_salvaging(trace_file):
    path, records = trace_file
    with open(path, "ab") as f:
        f.write(b"\0" * 40)  # a chunk whose header update never happened
    with pytest.raises(TraceFormatError, match="40 bytes after the 1000 records"):
        read_trace(path)
    np.testing.assert_array_equal(read_trace(path, strict=False), records)


@pytest.mark.parametrize("offset, patch, message", [
    (0, b"NOTATRCE", "not a gids I/O trace"),
    (8, np.uint32(99).tobytes(), "version 99"),
    (12, np.uint32(40).tobytes(), "40-byte records"),
])
def test_corrupt_header_is_an_error(trace_file, offset, patch, message):
    path, _ = trace_file
    data = bytearray(path.read_bytes())
    data[offset:offset + len(patch)] = patch
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


@pytest.mark.parametrize("field, delta, message", [
    ("complete_ns", -1, "completes before it is issued"),
    ("ready_ns", -1, "is ready before it is issued"),
    ("device_ns", -1, "leaves the device before it is issued"),
])
def test_impossible_record_is_an_error(tmp_path, field, delta, message):
    records = _records(5)
    records[field][3] = records["issue_ns"][3] + delta
    with TraceWriter(tmp_path / "bad.trace") as writer:
        writer.append(records)
    with pytest.raises(TraceFormatError, match=f"record 3 {message}"):
        read_trace(tmp_path / "bad.trace")


def test_a_completion_posted_before_the_device_is_done_is_an_error(tmp_path):
    records = _records(5)
    records["device_ns"][2] = records["complete_ns"][2] + 1
    with TraceWriter(tmp_path / "bad.trace") as writer:
        writer.append(records)
    with pytest.raises(TraceFormatError, match="record 2 is posted before the host and the "
                                               "device are done"):
        read_trace(tmp_path / "bad.trace")


def test_version_1_files_are_read_without_host_costs(tmp_path):
    """A version 1 file (32-byte records): read as records whose host part and post delay
    are 0, which is what replays of them assumed, so they replay as they did."""
    records = _records(500)
    old = np.zeros(len(records), dtype=TRACE_DTYPE_V1)
    for name in TRACE_DTYPE_V1.names:
        old[name] = records[name]
    header = np.zeros(1, dtype=HEADER_DTYPE)
    header["magic"], header["version"], header["record_bytes"] = MAGIC, 1, 32
    header["count"] = len(old)
    path = tmp_path / "v1.trace"
    path.write_bytes(header.tobytes() + old.tobytes())
    got = read_trace(path)
    assert got.dtype == TRACE_DTYPE
    np.testing.assert_array_equal(got, _without_host_costs(records))
    assert replay(old, "pm1743").time_s == replay(got, "pm1743").time_s
    header["record_bytes"] = 48
    path.write_bytes(header.tobytes() + old.tobytes())
    with pytest.raises(TraceFormatError, match="48-byte records, expected 32 \\(version 1\\)"):
        read_trace(path)


def test_writer_rejects_other_layouts_and_closed_appends(tmp_path):
    writer = TraceWriter(tmp_path / "w.trace")
    with pytest.raises(TypeError, match="TRACE_DTYPE"):
        writer.append(np.zeros(3, dtype=np.int64))
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.append(_records(1))
    assert (tmp_path / "w.trace").read_bytes()[:8] == MAGIC


def test_closed_replay_keeps_the_trace_concurrency():
    report = replay(synthetic_trace(50_000, 64), "pm1743")
    assert report.peak_inflight == 64
    assert report.mean_inflight == pytest.approx(64, rel=0.02)


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_littles_law_holds(mode):
    """Mean in flight (an event sweep) = IOPS x mean latency (per-request sums)."""
    report = replay(_records(20_000), "980pro", n_ssd=2, mode=mode)
    assert report.mean_inflight == pytest.approx(report.iops * report.latency_us_mean * 1e-6,
                                                 rel=1e-6)


def test_open_loop_below_capacity_matches_offered_load():
    """Poisson arrivals at half the drive's IOPS: the replay completes them at the offered
    rate, and in-flight = offered rate x latency (Little's law on the arrival process)."""
    rate = 0.5e6
    n = 100_000
    records = synthetic_trace(n, 1)
    gaps = np.random.default_rng(1).exponential(1e9 / rate, n)
    records["issue_ns"] = records["ready_ns"] = np.cumsum(gaps).astype(np.int64)
    records["complete_ns"] = records["device_ns"] = records["issue_ns"] + 1
    report = replay(records, "980pro", mode="open")
    np.testing.assert_array_equal(report.issue_ns, records["issue_ns"] - records["issue_ns"][0])
    assert report.iops == pytest.approx(rate, rel=0.02)
    assert report.mean_inflight == pytest.approx(rate * report.latency_us_mean * 1e-6, rel=0.02)
    assert report.latency_us_p50 < 2 * 45.5  # lightly loaded: near the QD1 latency


def test_closed_replay_keeps_think_time():
    """One chain: each request issued 100 us after the previous completed (in the trace); the
    replay issues it 100 us after the modelled completion."""
    n = 50
    records = synthetic_trace(n, 1, latency_ns=20_000)
    records["issue_ns"] = records["ready_ns"] = np.arange(n) * 120_000
    records["complete_ns"] = records["device_ns"] = records["issue_ns"] + 20_000
    report = replay(records, "p5800x")
    np.testing.assert_array_equal(report.issue_ns[1:] - report.complete_ns[:-1], 100_000)
    assert report.peak_inflight == 1


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_replay_through_the_recording_model_reproduces_the_run(mode):
    """A run recorded under emulation, whose host took its own part beside the drive and
    posted completions late: replayed through the same model, every request is issued and
    completes exactly when it did. Without the recorded host costs the closed replay runs
    ahead by the post delays of every link of every slot chain (by almost a fifth here)."""
    records = _recorded_closed_loop("pm1743", 6000, 64, host_ns=1_000, max_post_ns=40_000,
                                    max_think_ns=5_000)
    start = records["issue_ns"].min()
    span_s = (records["complete_ns"].max() - start) / 1e9
    report = replay(records, "pm1743", mode=mode)
    np.testing.assert_array_equal(report.issue_ns, records["issue_ns"] - start)
    np.testing.assert_array_equal(report.device_ns, records["device_ns"] - start)
    np.testing.assert_array_equal(report.complete_ns, records["complete_ns"] - start)
    assert report.time_s == pytest.approx(span_s, rel=1e-12)
    assert report.device_latency_us_mean == pytest.approx(
        (records["device_ns"] - records["issue_ns"]).mean() / 1e3)
    assert report.host_us_mean == pytest.approx(
        (records["complete_ns"] - records["device_ns"]).mean() / 1e3)
    if mode == "closed":
        assert replay(_without_host_costs(records), "pm1743").time_s < 0.85 * span_s


def test_host_costs_carry_over_to_another_device():
    """Replayed on a faster drive, a request still takes its recorded host part beside the
    drive and its post delay after both: with no post delay and a host part longer than the
    drive's latency, the host part sets the latency."""
    records = _recorded_closed_loop("pm1743", 2000, 8, host_ns=30_000, max_post_ns=1,
                                    max_think_ns=2)
    report = replay(records, "p5800x")
    latency = report.complete_ns - report.issue_ns
    assert (latency >= 30_000).all() and (latency <= 30_001).all()
    assert report.device_latency_us_mean < 10


def test_closed_replay_follows_a_faster_device():
    """A trace recorded at QD 8 on a slow device replays faster on a fast one, same QD."""
    records = synthetic_trace(20_000, 8, latency_ns=1_000_000)
    report = replay(records, "p5800x")
    recorded_s = (records["complete_ns"].max() - records["issue_ns"].min()) / 1e9
    assert report.time_s < recorded_s / 50
    assert report.peak_inflight == 8


def test_replay_sorts_by_issue_time():
    records = _records(5000)
    shuffled = records[np.random.default_rng(2).permutation(len(records))]
    assert replay(shuffled, "pm1743").time_s == replay(records, "pm1743").time_s


def test_replay_rejects_writes_empty_traces_and_unknown_modes():
    records = _records(10)
    with pytest.raises(ValueError, match="mode must be one of"):
        replay(records, "980pro", mode="half-open")
    with pytest.raises(ValueError, match="empty trace"):
        replay(records[:0], "980pro")
    records["op"][4] = OP_WRITE
    with pytest.raises(ValueError, match="reads only; this trace has 1 writes"):
        replay(records, "980pro")


def test_a_million_requests_replay_in_seconds():
    records = synthetic_trace(1_000_000, 256)
    replay(records[:1000], "pm1743", n_ssd=4)  # compile outside the timing
    for mode in ("closed", "open"):
        start = time.perf_counter()
        report = replay(records, "pm1743", n_ssd=4, mode=mode)
        assert time.perf_counter() - start < 5.0, mode
        assert report.n_requests == 1_000_000


def test_cli_simulate_prints_the_table(trace_file, capsys):
    path, _ = trace_file
    assert main(["simulate", str(path), "--ssd", "p5800x", "--n-ssd", "2", "--mode", "open"]) == 0
    out = capsys.readouterr().out
    for word in ("2 x p5800x, open loop", "IOPS", "bandwidth", "p99.9", "in flight",
                 "device mean", "host mean"):
        assert word in out


def test_cli_simulate_takes_each_drives_path_cost(tmp_path, capsys):
    """--path-command-ns reaches the replay: a saturated drive serves 1 / (slot + path)."""
    path = tmp_path / "saturating.trace"
    with TraceWriter(path) as writer:
        writer.append(synthetic_trace(20_000, 512))
    rates = []
    for cost in ("0", "1000"):
        assert main(["simulate", str(path), "--ssd", "980pro", "--path-command-ns", cost]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("IOPS"))
        rates.append(float(line.split()[1]))
    assert rates[1] == pytest.approx(rates[0] / 2, rel=0.02)
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", str(path), "--ssd", "980pro", "--path-command-ns=-1"])
    assert exit_info.value.code == 2


def test_cli_reports_bad_input_without_a_traceback(trace_file, tmp_path, capsys):
    path, _ = trace_file
    assert main(["simulate", str(path), "--ssd", "nope"]) == 2
    assert "valid profiles: 980pro" in capsys.readouterr().err
    (tmp_path / "junk").write_bytes(b"x" * 100)
    assert main(["simulate", str(tmp_path / "junk")]) == 2
    assert "not a gids I/O trace" in capsys.readouterr().err


def test_cli_calibrate(capsys):
    assert main(["calibrate", "--ssd", "p5800x"]) == 0
    out = capsys.readouterr().out
    assert "p5800x" in out and "rand_read_iops" in out


def _reference_bounded_burst(device_ns, n, limit):
    """Completion times of ``n`` requests due at 0 on a device that completes each one
    ``device_ns`` after it is issued, with at most ``limit`` in flight (a slot goes to the
    next request when one completes): waves of ``limit``."""
    return np.array([(i // limit + 1) * device_ns for i in range(n)])


def test_max_in_flight_bounds_the_replay():
    """All requests due at once on the ideal device (a fixed latency, no queueing): bounded
    to k in flight they complete in waves of k, as an independent reference computes."""
    n, limit = 1000, 64
    trace = synthetic_trace(n, n)
    report = replay(trace, "ideal", host_link_GBps=None, max_in_flight=limit)
    np.testing.assert_array_equal(np.sort(report.complete_ns),
                                  _reference_bounded_burst(0, n, limit))
    # The ideal device with no host link completes at once; give it a latency instead.
    slow = replay(trace, "p5800x", max_in_flight=limit)
    assert slow.peak_inflight == limit
    assert slow.waited == pytest.approx((n - limit) / n)
    assert slow.bound.startswith("controller") or slow.bound.startswith("host queues")
    unbounded = replay(trace, "p5800x")
    assert unbounded.peak_inflight == n and unbounded.waited == 0


def test_max_in_flight_on_a_fixed_latency_device_is_waves():
    from host_daemon.ssd_model import Figure, PublishedFigures, SsdProfile
    fixed = SsdProfile(name="fixed", description="test: 10 us, no limits", media=None,
                       pcie_gen=None, pcie_lanes=0, max_read_GBps=None, iops_cap=None,
                       ctrl_latency_us=10.0,
                       published=PublishedFigures(None, Figure(1.0, "t"), Figure(1.0, "t")))
    n, limit = 500, 32
    report = replay(synthetic_trace(n, n), fixed, host_link_GBps=None, max_in_flight=limit)
    np.testing.assert_array_equal(np.sort(report.complete_ns),
                                  _reference_bounded_burst(10_000, n, limit))
    assert report.bound.startswith("host queues")
    with pytest.raises(ValueError, match="max_in_flight"):
        replay(synthetic_trace(10, 1), fixed, max_in_flight=0)


def test_engine_depth_is_read_from_the_sidecar_when_present(tmp_path):
    """A trace without a sidecar gives None; the one an engine's run writes gives its depth."""
    import host_daemon.trace as trace_module
    path = tmp_path / "plain.trace"
    with TraceWriter(path) as writer:
        writer.append(synthetic_trace(10, 2))
    assert trace_module.trace_engine_depth(path) is None
    other = tmp_path / "engine.trace"
    with TraceWriter(other) as writer:
        writer.set_engine("io_uring", 96)
        writer.append(synthetic_trace(10, 2))
    assert trace_module.trace_engine_depth(other) == 96
