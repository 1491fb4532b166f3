"""The host-only throughput harness of the emulated NVMe controller
(``python -m workloads.controller_bench``) at tiny sizes: its driver threads speak the ring
protocol the controller serves (every completion checked, every page's bytes compared), in both
modes, with and without an SSD model; and its checker does catch a wrong page. No GPU needed:
the rings are plain numpy arrays."""
import numpy as np
import pytest

from gids import layout as L
from workloads import controller_bench as cb

PAGE = 512


@pytest.mark.parametrize("mode", ["stream", "burst"])
@pytest.mark.parametrize("ssd", [None, "ideal"])
def test_harness_drives_the_controller_and_checks_every_page(mode, ssd):
    data = cb.make_data(64, PAGE)
    r = cb.run_controller(data, 2, seconds=0.2, queues=4, depth=8, page_size=PAGE, ssd=ssd,
                          mode=mode, warmup=0.05)
    assert r["ok"], r
    assert r["commands"] > 0 and r["checked"] >= r["commands"]
    assert r["bad_data"] == 0 and r["bad_cqe"] == 0
    assert r["controller"]["errors"] == 0
    if mode == "burst":   # everything posted was checked
        assert r["checked"] == r["controller"]["commands"]


def test_the_checker_catches_a_wrong_page_and_a_stray_cid():
    """Completions written by hand: one whose bounce buffer holds another page's bytes, one
    naming a CID not in flight."""
    depth, ring, words = 4, 5, PAGE // 8
    data = cb.make_data(8, PAGE)
    sq, cq, db, staging = cb._rings(1, depth, PAGE)
    mine = np.zeros(1, dtype=np.int64)
    state = np.zeros((1, 2), dtype=np.int64)
    slot_page = np.full(depth, -1, dtype=np.int64)
    slot_cid = np.zeros(depth, dtype=np.int64)
    rng = np.array([5], dtype=np.int64)
    progress = np.zeros(cb.ROW, dtype=np.int64)
    assert cb.fill(mine, state, slot_page, slot_cid, sq, db, ring, depth, words, 8,
                   staging.ctypes.data, rng) == depth
    assert db[L.DB_SQ_TAIL] == 0                 # fill does not ring
    cb.ring_all(mine, state, db, ring)
    assert db[L.DB_SQ_TAIL] == depth
    st = staging.view(np.int64)
    for slot in (0, 1):                          # slot 0 right, slot 1 wrong
        page = slot_page[slot] if slot == 0 else (slot_page[slot] + 1) % 8
        st[slot * words:(slot + 1) * words] = data[page * words:(page + 1) * words]
    for pos, cid in enumerate((0, 1, 3 + depth)):   # 3 + depth: slot 3, wrong generation
        cq[pos * L.NVME_CQE_WORDS + L.CQE_DW2_DW3] = (cid << L.CQE_CID_SHIFT
                                                      | 1 << L.CQE_PHASE_SHIFT)
    n = cb.reap_all(mine, state, slot_page, slot_cid, cq, db, st, data, ring, depth, words,
                    progress, 0)
    assert n == 3 and db[L.DB_CQ_HEAD] == 3
    assert progress[cb.P_DONE] == 3 and progress[cb.P_BAD_DATA] == 1
    assert progress[cb.P_BAD_CQE] == 1


def test_cli_prints_a_row_per_thread_count(capsys, tmp_path):
    out = tmp_path / "rows.json"
    rows = cb.main(["--seconds", "0.1", "--threads", "1,2", "--queues", "4", "--depth", "8",
                    "--page-size", str(PAGE), "--store-mib", "1", "--mode", "burst",
                    "--json", str(out)])
    assert [r["controller_threads"] for r in rows] == [1, 2] and all(r["ok"] for r in rows)
    text = capsys.readouterr().out
    assert "host side only" in text and text.count("M commands/s") == 2
    assert out.exists()
