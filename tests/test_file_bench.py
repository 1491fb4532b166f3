"""``gids bench files``'s bookkeeping, against references computed here: each O_DIRECT run
against the disk probed just before and after it, and what bounds an emulated row; and the
results page reading both layouts of files.json."""
import itertools

import numpy as np
import pytest

from workloads import file_bench as fb
from workloads import results


def _probes(ceilings, probe=None):
    return [{"at": float(k), "probe": None if probe is None else probe[k], "ceiling": c,
             "ceiling_max": c, "ways": {"io_uring x4": c}, "best_now": "io_uring x4",
             "correct": True} for k, c in enumerate(ceilings)]


def test_settle_ceiling_takes_the_way_best_over_the_run_at_every_probe():
    rng = np.random.default_rng()
    n = 9
    ways = {"io_uring x1": rng.uniform(70e3, 80e3, n), "io_uring x4": rng.uniform(80e3, 90e3, n),
            "pread x64": rng.uniform(60e3, 95e3, n)}
    probes = [{"ways": {w: float(r[k]) for w, r in ways.items()}} for k in range(n)]
    best = max(ways, key=lambda w: np.median(ways[w]))
    assert fb.settle_ceiling(probes) == best
    assert [p["ceiling"] for p in probes] == [float(x) for x in ways[best]]
    assert fb.settle_ceiling([]) is None


def test_the_fastest_way_at_each_probe_reads_a_run_at_the_disks_rate_as_short():
    """Three ways with the same true rate and 5 % noise each: a run at exactly that rate is
    ~1.0 of the settled ceiling but ~0.95 of the per-probe maximum (the estimator's bias)."""
    rng = np.random.default_rng()
    n, true = 201, 80e3
    probes = [{"probe": None, "ways": {w: true * rng.normal(1, 0.05) for w in "abc"}}
              for _ in range(n + 1)]
    for p in probes:
        p["ceiling_max"] = max(p["ways"].values())
    fb.settle_ceiling(probes)
    row = fb.of_disk({"threads": 1, "probes": probes,
                      "rep_pages_per_s": list(true * rng.normal(1, 0.05, n))})
    assert row["of_ceiling"] == pytest.approx(1.0, abs=0.02)
    assert row["of_ceiling_max"] < 0.97


def test_pool_rounds_takes_the_median_over_every_rounds_runs():
    rng = np.random.default_rng()
    runs = []
    for k in range(3):      # each round: its runs, its own probes around them
        disk = rng.uniform(70e3, 110e3, 4)
        probes = [{"ceiling": float(d), "ceiling_max": float(d) * 1.05, "probe": float(d)}
                  for d in disk]
        rates = [float((a + b) / 2 * f) for a, b, f in
                 zip(disk[:-1], disk[1:], rng.uniform(0.8, 1.0, 3))]
        runs.append(fb.of_disk({"kind": "direct", "threads": 1, "correct": True,
                                "pages_per_s": float(np.median(rates)),
                                "rep_pages_per_s": rates, "probes": probes}))
    row = fb.pool_rounds(runs)
    every = [x for r in runs for x in r["of_ceiling_runs"]]
    assert len(every) == 9 and row["of_ceiling"] == pytest.approx(np.median(every))
    assert row["of_ceiling_rounds"] == [r["of_ceiling"] for r in runs]
    assert row["of_probe"] == pytest.approx(np.median(every))    # probe == ceiling here
    assert row["of_ceiling_max"] == pytest.approx(np.median(every) / 1.05)
    assert len(row["probes"]) == 12 and row["rounds"] == 3 and len(row["rep_pages_per_s"]) == 9
    # A round without a reference for its runs (no io_uring probe) leaves that fraction out.
    runs[1]["of_probe_runs"] = None
    assert fb.pool_rounds(runs)["of_probe"] is None
    failed = {"kind": "direct", "pages_per_s": None, "correct": False, "error": "E"}
    assert fb.pool_rounds(runs + [failed]) is failed


def test_merge_rounds_keeps_the_median_round_and_every_rate():
    rng = np.random.default_rng()
    rates = rng.uniform(1e6, 5e6, 3)
    runs = [{"kind": "cached", "pages_per_s": float(x), "rep_pages_per_s": [float(x)] * 2,
             "correct": True, "engine_io_us": float(x) / 1e6} for x in rates]
    row = fb.merge_rounds(runs)
    mid = float(np.median(rates))
    assert row["pages_per_s"] == mid and row["engine_io_us"] == mid / 1e6
    assert row["round_pages_per_s"] == [float(x) for x in rates] and row["rounds"] == 3
    assert len(row["rep_pages_per_s"]) == 6 and row["correct"]
    runs[1]["correct"] = False
    assert not fb.merge_rounds(runs)["correct"]
    failed = {"kind": "cached", "pages_per_s": None, "correct": False, "error": "E"}
    assert fb.merge_rounds(runs + [failed]) is failed


def test_bracketed_is_each_run_over_the_mean_of_its_two_probes_then_the_median():
    rng = np.random.default_rng()
    for _ in range(50):
        n = int(rng.integers(1, 8))
        rates = list(rng.uniform(1e3, 1e5, n))
        refs = list(rng.uniform(1e3, 1e5, n + 1))
        want = sorted(rates[i] * 2 / (refs[i] + refs[i + 1]) for i in range(n))
        median = want[n // 2] if n % 2 else (want[n // 2 - 1] + want[n // 2]) / 2
        assert fb.bracketed(rates, refs) == pytest.approx(median, rel=1e-12)


def test_bracketed_follows_a_drifting_disk_that_a_single_ceiling_misreads():
    # The disk slows down run after run; gids is always at 0.93 of the disk as it is then.
    rng = np.random.default_rng()
    disk = np.linspace(95e3, 60e3, 7) * rng.uniform(0.9, 1.1)
    rates = [0.93 * (a + b) / 2 for a, b in itertools.pairwise(disk)]
    assert fb.bracketed(rates, list(disk)) == pytest.approx(0.93, rel=1e-12)
    assert np.median(rates) / disk[0] < 0.85   # against the first probe alone: far off


def test_bracketed_without_a_reference_for_every_run_is_none():
    assert fb.bracketed([1.0, 2.0], [1.0, 2.0]) is None          # a probe missing
    assert fb.bracketed([1.0], [1.0, None]) is None              # no io_uring probe
    assert fb.bracketed([], [1.0]) is None
    assert fb.bracketed(None, []) is None


def test_of_disk_takes_threads_probes_at_most_the_ceiling():
    rng = np.random.default_rng()
    ceiling = list(rng.uniform(80e3, 100e3, 4))
    probe = [c * rng.uniform(0.5, 0.7) for c in ceiling]
    rates = list(rng.uniform(40e3, 90e3, 3))
    for threads in (1, 2, 8):
        row = fb.of_disk({"threads": threads, "rep_pages_per_s": rates,
                          "probes": _probes(ceiling, probe)})
        want = np.median([r / ((min(threads * probe[i], ceiling[i])
                                + min(threads * probe[i + 1], ceiling[i + 1])) / 2)
                          for i, r in enumerate(rates)])
        assert row["of_probe"] == pytest.approx(want, rel=1e-12)
        assert row["of_ceiling"] == pytest.approx(np.median(
            [r * 2 / (ceiling[i] + ceiling[i + 1]) for i, r in enumerate(rates)]), rel=1e-12)
        assert row["of_ceiling_max"] == row["of_ceiling"]   # one way: the same probes
    row = fb.of_disk({"threads": 1, "rep_pages_per_s": rates, "probes": _probes(ceiling)})
    assert row["of_probe"] is None and row["of_ceiling"] is not None
    row = fb.of_disk({"threads": 1, "pages_per_s": None, "rep_pages_per_s": None})
    assert row["of_probe"] is None and row["of_ceiling"] is None   # a row that failed


@pytest.mark.parametrize("of_model, rate, host, bound", [
    (0.95, 0.9e6, 3e6, "model"),      # the model's rate: the model bounds it
    (0.40, 1.5e6, 1.6e6, "host"),     # barely under the same run with no model
    (0.40, 1.5e6, 3.0e6, "engine"),   # far under both: the emulation's own cost
    (0.40, 1.5e6, None, None),        # the host row failed: nothing to say
])
def test_what_bounds_an_emulated_row(of_model, rate, host, bound):
    got = fb.what_bounds({"pages_per_s": rate, "of_model": of_model}, {"pages_per_s": host})
    assert got["bound"] == bound and got["host_pages_per_s"] == host
    assert got["of_host"] == (None if host is None else pytest.approx(rate / host))


def test_results_read_version_2_fractions_and_bounds():
    rng = np.random.default_rng()
    ceiling = list(rng.uniform(70e3, 100e3, 3))
    rates = list(rng.uniform(50e3, 90e3, 2))
    direct = fb.of_disk({"kind": "direct", "engine": "io_uring", "threads": 1,
                         "pages_per_s": float(np.median(rates)), "rep_pages_per_s": rates,
                         "probes": _probes(ceiling, ceiling),
                         "buffers": "registered buffers: yes"})
    host = dict(direct, kind="host")
    emulated = {"kind": "emulated", "engine": "io_uring", "threads": 4, "profile": "980pro",
                "n_ssd": 4, "pages_per_s": 1.5e6, "of_model": 0.39,
                **fb.what_bounds({"pages_per_s": 1.5e6, "of_model": 0.39},
                                 {"pages_per_s": 1.6e6})}
    alone = {"kind": "host emulated", "engine": "io_uring", "threads": 4, "ssd": None,
             "n_ssd": 1, "pages_per_s": 2.5e6}
    driven = {"kind": "host emulated", "engine": "io_uring", "threads": 4, "ssd": "980pro",
              "profile": "980pro", "n_ssd": 4, "pages_per_s": 3.6e6, "of_model": 0.95,
              **fb.what_bounds({"pages_per_s": 3.6e6, "of_model": 0.95}, alone)}
    d = {"sweep": "files", "version": 3, "command": "gids bench files --out /x",
         "ceiling_way": "io_uring x4",
         "simulator": False, "ceiling_pages_per_s": float(np.median(ceiling)),
         "probe_pages_per_s": float(np.median(ceiling)), "probes": _probes(ceiling),
         "rows": [host, direct, emulated, alone, driven,
                  {"kind": "kvikio", "engine": "kvikio", "skipped": "ImportError: kvikio",
                   "pages_per_s": None, "correct": True},
                  dict(emulated, engine="threads", pages_per_s=None, of_model=None,
                       error="GidsTimeoutError: ...")]}
    recs = {r["figure"]: r for r in results.from_json(d)}
    what = "gids all-miss from an O_DIRECT file, io_uring, 1 daemon thread(s)"
    assert recs[what]["ratio"] == direct["of_ceiling"]          # its own probes, not the median
    assert recs[what]["ratio"] != direct["pages_per_s"] / d["ceiling_pages_per_s"]
    assert "probed around each run" in recs[what]["reference"]
    assert "io_uring x4, its best way over the run" in recs[what]["reference"]
    assert recs[f"{what}, of the fastest way at each probe"]["ratio"] == direct["of_ceiling_max"]
    assert recs[f"{what}, of the probe"]["ratio"] == direct["of_probe"]
    host_what = ("the daemon driven from the host (no GPU), O_DIRECT file, io_uring, "
                 "1 daemon thread(s)")
    assert recs[host_what]["ratio"] == direct["of_ceiling"]
    assert "3 probes" in recs["the disk's ceiling, 4 KiB random O_DIRECT reads"]["reference"]
    # One ring beside the disk's best way, read in turn at each probe.
    ways = [dict(p["ways"], **{"io_uring x1": 0.9 * p["ways"]["io_uring x4"]}) for p in d["probes"]]
    recs = {r["figure"]: r for r in results.from_json(dict(d, probes=[
        dict(p, ways=w) for p, w in zip(d["probes"], ways)]))}
    paired = recs["probe: one thread's ring at depth / io_uring x4, read in turn at each probe"]
    assert paired["value"] == pytest.approx(0.9) and "median of 3" in paired["reference"]
    recs = {r["figure"]: r for r in results.from_json(d)}
    # Registered against plain buffers at one thread, each of its own probes.
    plain_host = fb.of_disk(dict(host, rep_pages_per_s=[0.5 * r for r in rates],
                                 buffers="registered buffers: no (off)"))
    plain = dict(plain_host, kind="direct plain buffers")
    recs = {r["figure"]: r for r in results.from_json(dict(d, rows=[*d["rows"], plain_host,
                                                                    plain]))}
    for how in ("driven from the host (no GPU)", "through the GPU"):
        pair = recs[f"io_uring, 1 daemon thread, {how}: registered buffers / plain buffers, "
                    "each of the disk around its runs"]
        assert pair["value"] == pytest.approx(2.0)
    bound = recs["emulated 980pro x4, io_uring, 4 threads, of the host's ceiling"]
    assert bound["ratio"] == pytest.approx(1.5 / 1.6) and "bound: host" in bound["reference"]
    assert recs["emulated 980pro x4, io_uring, 4 threads"]["ratio"] == 0.39
    # The GPU taken out: the same drives reached from the host alone, so the GPU side bounds.
    what = "emulated 980pro x4, io_uring, 4 threads, driven from the host (no GPU)"
    assert recs[what]["ratio"] == 0.95
    assert "bound: model" in recs[f"{what}, of the host's ceiling"]["reference"]
    assert not any("no model" in f and "driven" in f for f in recs)   # no row of its own
    assert not any("KvikIO" in f for f in recs)                          # KvikIO skipped
    assert not any(f.startswith("emulated 980pro x4, threads") for f in recs)   # it failed


@pytest.mark.parametrize("ssd", [None, "980pro"])
def test_host_daemon_run_reads_the_files_pages_between_its_probes(tmp_path, ssd):
    """The daemon driven from the host, page-cached, with and without emulated drives: each
    run's reads checked against the file's bytes, a probe before and after each run."""
    path = str(tmp_path / "data.bin")
    fb._write_file(path, 64 * fb.PAGE, int(np.random.default_rng().integers(1 << 30)))
    calls = []
    row = fb.host_daemon_run(path, 40, 1, queues=2, depth=32, engine_depth=8, direct=False,
                             reps=2, between=lambda: calls.append(1) or len(calls),
                             ssd=ssd, n_ssd=4, fixed_buffers=False)
    assert row["correct"] and row["probes"] == [1, 2, 3] and len(row["rep_pages_per_s"]) == 2
    assert row["store"] == "file page cache" and row["ssd"] == ssd
    assert row["seconds"] == pytest.approx(np.median([40 / r for r in row["rep_pages_per_s"]]))


def test_each_probe_reads_the_disk_in_a_turning_order(tmp_path, monkeypatch):
    """Probe after probe, every way of reading the disk comes first once per round, and the
    rows come back in the order read (a way always read last would meet the disk settled)."""
    path = str(tmp_path / "data.bin")
    fb._write_file(path, 64 * fb.PAGE, 1)
    order = []
    monkeypatch.setattr(fb, "uring_row", lambda p, n, depth, t, seed: order.append(
        f"io_uring x{t}") or {"kind": "probe" if t == 1 else "ceiling", "engine": "io_uring",
                              "threads": t, "pages_per_s": 1.0 + t, "correct": True})
    monkeypatch.setattr(fb, "_pread_row", lambda p, n, t, seed: order.append(
        f"pread x{t}") or {"kind": "ceiling", "engine": "pread", "threads": t,
                           "pages_per_s": 9.0, "correct": True})
    monkeypatch.setattr(fb, "uring_probe", lambda: None)
    o = dict(fb.default_options(), ceiling_threads=[4], pread_threads=64)
    firsts = []
    for turn in range(6):
        order.clear()
        p = fb.disk_now(path, o, 0.0, 7, turn=turn)
        assert list(p["ways"]) == order
        assert p["probe"] == 2.0 and p["best_now"] == "pread x64" and p["ceiling_max"] == 9.0
        firsts.append(order[0])
    assert firsts == ["io_uring x1", "io_uring x4", "pread x64"] * 2
