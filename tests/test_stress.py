"""The stress workload (workloads/stress.py), tiny, in the simulator: it passes on a correct
runtime, and its file check does catch a wrong or a stray word."""
import json

import numpy as np

from workloads import stress


def test_tiny_stress_run_passes(tmp_path):
    out = tmp_path / "r.json"
    rc = stress.main(["--elements", "2048", "--threads", "32", "--rounds", "2", "--page-size",
                      "512", "--cache-fraction", "0.1", "--dir", str(tmp_path), "--json",
                      str(out)])
    r = json.loads(out.read_text())
    assert rc == 0 and r["ok"], r
    assert r["writebacks"] > 0 and r["evictions"] > 0 and r["checks"] == 2 * 32 * 3
    assert r["file_mismatches"] == 0 and r["elements_written"] > 0
    assert not list(tmp_path.glob("gids-stress-*"))   # the file is removed


def test_file_check_catches_wrong_and_stray_words(tmp_path):
    n, threads, rounds = 1024, 16, 2
    params = stress.round_params(n, rounds, seed=3)
    data = np.zeros(n, np.int64)
    for r in range(1, rounds + 1):
        e = (params[r, 0] * np.arange(threads) + params[r, 2]) & (n - 1)
        data[e] = stress.value_np(e, r)
    path = tmp_path / "f.bin"
    data.tofile(path)
    assert stress.verify_file(path, n, threads, params, rounds)[0] == 0
    written = np.flatnonzero(data)
    data[written[0]] ^= 2                     # a lost update
    data[np.flatnonzero(data == 0)[0]] = 5    # a word nobody wrote
    data.tofile(path)
    assert stress.verify_file(path, n, threads, params, rounds)[0] == 2
