"""The held-out validation's rows: each cites a source and its conditions, none is a figure a
profile or a host path was fitted to, and every profile short of three rows says why."""
import dataclasses
import json

import pytest

from host_daemon.ssd_model import DEFAULT_HOST_LINK_GBPS, PROFILES, get_profile
from host_daemon.trace import synthetic_trace
from workloads.ssd_validation import (
    GPU_INITIATED,
    HELD_OUT,
    HOST_PATH_CHECKS,
    HOST_PATH_FITS,
    HOST_PATHS,
    NOT_FOUND,
    READ_EXT4,
    TOLERANCE,
    XRP_LOOKUP_US,
    format_table,
    in_waves,
    issuer_loop,
    main,
    model_value,
    validate,
)


def test_every_row_cites_a_source_and_conditions():
    for row in HELD_OUT:
        assert row.profile in PROFILES
        assert row.metric in ("iops", "latency_us_mean", "bandwidth_GBps")
        assert row.pattern in ("random", "sequential")
        assert row.value > 0 and row.n_ssd >= 1 and row.nbytes >= 1
        assert ("http" in row.source or "github" in row.source) and len(row.conditions) > 20


def test_no_row_is_a_fitted_figure():
    """A held-out row must not repeat the data-sheet figure it would then merely reproduce."""
    for row in HELD_OUT:
        published = get_profile(row.profile).published
        fitted = [f.value for f in vars(published).values() if f is not None]
        assert all(abs(row.value / value - 1) > 0.01 for value in fitted), row


def test_every_row_names_a_host_path_and_none_is_a_host_path_fit():
    """A host path's cost comes from its own fitting figure, never from a held-out row."""
    fits = list(HOST_PATH_FITS.values())
    assert {fit.host.name for fit in fits} <= {path.name for path in HOST_PATHS}
    for row in HELD_OUT:
        assert row.host in HOST_PATHS
        for fit in fits:
            assert row.source != fit.source
            same = (fit.profile, fit.metric, fit.queue_depth) == (
                row.profile, row.metric, row.queue_depth)
            assert not same or abs(row.value / fit.value - 1) > 0.01, row
    for path in HOST_PATHS:
        assert path.fitted_to and (path.command_ns is None or path.command_ns >= 0)


def test_a_drive_path_cost_applies_only_to_its_own_testbed_path():
    """BaM's 980 PRO runs used another GPU than its P5800X runs: the path cost fitted to the
    one-drive 980 PRO log reaches that path's rows only (more drives than the fit), and the
    P5800X rows keep a free path. The cost is what the log leaves of the data-sheet rate."""
    gpu2 = next(path for path in HOST_PATHS if path.path_command_ns > 0)
    fit = HOST_PATH_FITS[gpu2.name]
    rows = [row for row in HELD_OUT if row.host is gpu2]
    assert rows and all(row.profile == fit.profile and row.n_ssd > fit.n_ssd for row in rows)
    assert GPU_INITIATED.path_command_ns == 0 and GPU_INITIATED.command_ns == 0
    assert all(row.host.path_command_ns == 0 for row in HELD_OUT if row.profile == "p5800x")
    cap = get_profile(fit.profile).iops_cap
    assert gpu2.path_command_ns == pytest.approx(1e9 / fit.value - 1e9 / cap)


def test_a_host_path_reproduces_its_fitting_figure():
    for fit in HOST_PATH_FITS.values():
        value, _ = model_value(fit)
        assert value == pytest.approx(fit.value, rel=0.01)


def test_the_host_path_adds_its_cost_to_a_qd1_read():
    """At QD1 the host's per-command time lies on every read's path: like-for-like latency is
    the device's plus the host path's cost."""
    row = next(r for r in HELD_OUT if r.queue_depth == 1 and r.host.command_ns)
    with_host, _ = model_value(dataclasses.replace(row, metric="latency_us_mean"))
    device, _ = model_value(dataclasses.replace(row, metric="latency_us_mean",
                                                host=GPU_INITIATED))
    assert with_host - device == pytest.approx(row.host.command_ns / 1e3, rel=0.02)


def test_xrp_breakdown_is_the_drive_and_the_read_path_and_its_rows_are_per_read():
    """XRP's 6.27 us read() splits into the P5800X's fitted 512 B latency and the read-ext4
    path's layers; its lookup rows are one more index level's latency (one dependent read),
    (six levels - one level) / 5, never the fitted total."""
    device_ns = get_profile("p5800x").published.small_read_latency_us.value * 1e3
    assert device_ns + READ_EXT4.command_ns == pytest.approx(6270, abs=5)  # "6.27 us", rounded
    rows = [row for row in HELD_OUT if "Table 3" in row.source]
    assert {row.host.name for row in rows} == {"read-ext4", "spdk"}
    for row in rows:
        one, six = XRP_LOOKUP_US["read" if row.host is READ_EXT4 else "spdk"]
        assert row.value == pytest.approx((six - one) / 5)
        assert row.nbytes == 512 and row.queue_depth == 1


def test_profiles_short_of_three_rows_say_why():
    for name in PROFILES:
        if sum(row.profile == name for row in HELD_OUT) < 3:
            assert NOT_FOUND.get(name), name


def test_the_table_reports_each_row_against_the_model():
    rows = validate(["p5800x"])
    assert len(rows) == sum(row.profile == "p5800x" for row in HELD_OUT)
    for r in rows:
        assert r["model"] > 0 and r["error"] == pytest.approx(r["model"] / r["value"] - 1)
    text = format_table(["p5800x"], rows)
    assert "kitguru" in text and "fitted to" in text and "held-out measurements missing" in text
    assert ("outside 15 %" in text) == any(abs(r["error"]) > TOLERANCE for r in rows)
    within = sum(abs(r["error"]) <= TOLERANCE for r in rows)
    assert f"within 15 %: {within} of {len(rows)} rows (" in text
    assert "host path:" in text and "host paths fitted to" in text
    waves = [r for r in rows if r["waves"]]
    assert waves and all(f"QD{r['queue_depth']} waves" in text for r in waves)


def test_the_command_line_writes_the_rows_as_json(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert main(["--ssd", "micron9550", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    rows = [r for r in HELD_OUT if r.profile == "micron9550"]
    assert len(data["rows"]) == len(rows) and data["tolerance"] == TOLERANCE
    assert data["within"] == sum(r["within"] for r in data["rows"])
    assert {p["name"] for p in data["host_paths"]} == {p.name for p in HOST_PATHS}
    assert "micron9550" in capsys.readouterr().out


def test_an_unknown_profile_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--ssd", "nosuchdrive"])
    assert exit_info.value.code == 2
    assert "nosuchdrive" in capsys.readouterr().err


def test_a_batched_host_goes_in_waves_only_when_its_depth_fits_a_batch():
    """t/io_uring submits up to 32 reads per call and waits for min(in flight, 32): at QD16 each
    call waits for the whole depth; at QD128 (the host path's fit) the loop stays continuous."""
    rows = [r for r in HELD_OUT if r.host.batch is not None]
    assert rows and all(in_waves(r) == (1 < r.queue_depth <= r.host.batch) for r in rows)
    assert any(in_waves(r) for r in rows)
    assert not any(in_waves(fit) for fit in HOST_PATH_FITS.values())


def test_the_fitting_run_keeps_its_core_busy_and_its_latency_is_a_check():
    """At QD128 the loop keeps the core busy, so the fitted cost is 1 / 2.58 M whatever the
    drive; the same run's latency, not fitted, is timed beside it."""
    for name, fit in HOST_PATH_FITS.items():
        if fit.host.batch is None:
            continue
        _, bound = model_value(fit)
        assert "core 100% busy" in bound
        check = HOST_PATH_CHECKS[name]
        assert (check.profile, check.queue_depth, check.source) == (
            fit.profile, fit.queue_depth, fit.source)
        assert check.metric != fit.metric and check not in HELD_OUT


def test_a_shallow_loop_against_a_hand_computed_wave():
    """Ideal drive, 4 reads of 512 B per call, 400 ns of host work per read split in halves:
    a call submits for 4 x 200 ns, the reads cross the 52 GB/s host link one after another,
    and the core completes each (200 ns) as it comes; so a wave is 800 + 512/52 + 4 x 200 ns."""
    trace = synthetic_trace(4000, 4, 512)
    loop = issuer_loop(trace, "ideal", 4, 400.0, 0.5, batch=32)
    wave_ns = 800 + 512 / DEFAULT_HOST_LINK_GBPS + 4 * 200
    assert loop.latency_us * 1e3 == pytest.approx(wave_ns, abs=2)
    assert loop.iops == pytest.approx(4 / wave_ns * 1e9, rel=2e-3)
    assert loop.reads_per_call == 4
    # All host work up front (share 1): the reads complete together after the submissions.
    up_front = issuer_loop(trace, "ideal", 4, 400.0, 1.0, batch=32)
    assert up_front.latency_us * 1e3 == pytest.approx(1600 + 4 * 512 / DEFAULT_HOST_LINK_GBPS,
                                                      abs=2)


def test_the_loop_hands_the_drive_each_plug_list_as_it_fills():
    """Ideal drive, 4 reads of 64 KiB per call, 200 ns to submit and 200 ns to complete each:
    the reads cross the host link one after another (64 KiB / 52 GB/s each). Handed over
    together when the last is submitted (800 ns), the call ends 4 transfers and one completion
    later; with a plug list of 2, the first pair leaves at 400 ns and the call ends 400 ns
    sooner."""
    trace = synthetic_trace(400, 4, 65536)
    link_ns = 65536 / DEFAULT_HOST_LINK_GBPS
    together = issuer_loop(trace, "ideal", 4, 400.0, 0.5, batch=32, stripe_bytes=65536)
    in_pairs = issuer_loop(trace, "ideal", 4, 400.0, 0.5, batch=32, plug=2, stripe_bytes=65536)
    assert together.latency_us * 1e3 == pytest.approx(800 + 4 * link_ns + 200, abs=4)
    assert in_pairs.latency_us * 1e3 == pytest.approx(400 + 4 * link_ns + 200, abs=4)


def test_a_deep_loop_submits_without_waiting_while_its_depth_has_room():
    """Depth 4 in batches of 2, ideal drive, 200 ns to submit and 200 ns to complete a read.
    Turn 1 prepares 2 and, with room left, submits them without waiting (0-400 ns). Turn 2
    prepares 2 more, submits them (400-800 ns) and waits for 2: its poll completes all 4, which
    the drive has finished by then (800-1600 ns). So 4 reads per 1600 ns, the core never idle,
    2 reads per call; latency 1600 ns for the first pair, 1200 ns for the second."""
    trace = synthetic_trace(4000, 4, 512)
    loop = issuer_loop(trace, "ideal", 4, 400.0, 0.5, batch=2)
    assert loop.iops == pytest.approx(2.5e6, rel=1e-3)
    assert loop.core_busy == pytest.approx(1.0, rel=1e-3)
    assert loop.reads_per_call == pytest.approx(2.0)
    assert loop.latency_us == pytest.approx(1.4, abs=2e-3)
