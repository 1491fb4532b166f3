"""The storage engines through a Runtime (simulator, tiny): the setting, what rt.stats() says,
the fallback, and file faults on the io_uring engine as named errors with nothing lost."""
import errno
import os
import warnings

import numpy as np
import pytest

import gids
from host_daemon import daemon as D
from host_daemon import uring as U
from tests.helpers import random_file

PAGE = 4096


def _file(tmp_path, pages=8, seed=0):
    path = tmp_path / "data.bin"
    raw = random_file(path, pages * PAGE, seed)
    return path, raw.view(np.int64)


def test_engine_setting_is_checked_and_shown(tmp_path):
    with pytest.raises(gids.ConfigError, match="engine must be one of"):
        gids.Runtime(engine="aio")
    with pytest.raises(gids.ConfigError, match="engine_depth"):
        gids.Runtime(engine_depth=0)
    path, ref = _file(tmp_path)
    expected = "io_uring" if U.probe() is None else "threads"
    with gids.defaults.set(engine="io_uring", engine_depth=4):
        with gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
            a = rt.open_array(path, np.int64)
            idx = np.random.default_rng(1).integers(0, ref.size, 40)
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
            s = rt.stats()
            assert s.engine == expected and rt.daemon.engine == expected
            assert f"engine {expected}" in str(s)


def test_fallback_to_threads_through_the_runtime(tmp_path, monkeypatch):
    """io_uring refused (as under a seccomp filter): the Runtime runs on threads, says so once,
    and rt.stats() carries the reason; no traceback."""
    monkeypatch.setattr(U, "io_uring_setup", lambda entries, params: -errno.EPERM)
    monkeypatch.setattr(U, "_probed", {})
    monkeypatch.setattr(D, "_fallback_said", set())
    path, ref = _file(tmp_path, seed=2)
    with pytest.warns(RuntimeWarning, match="io_uring unavailable"):
        rt = gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring")
    with rt:
        a = rt.open_array(path, np.int64)
        idx = np.arange(0, ref.size, 97)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
        s = rt.stats()
        assert s.engine == "threads" and "EPERM" in s.engine_note
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # said once: a second Runtime is quiet
            gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring").close()


@pytest.mark.skipif(U.probe() is not None, reason="no io_uring here")
def test_a_file_truncated_under_the_engine_names_file_and_page(tmp_path):
    path, ref = _file(tmp_path, seed=3)
    with gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring", timeout=20) as rt:
        a = rt.open_array(path, np.int64)
        os.truncate(path, 3 * PAGE)
        with pytest.raises(gids.StorageIOError, match=r"page 6 .*data\.bin.*short read") as info:
            rt.gather(a, [6 * PAGE // 8 + 1])
        assert info.value.page == 6 and str(path) in info.value.path
        got = rt.gather(a, [PAGE // 8 + 5]).copy_to_host()   # the Runtime goes on
        assert got[0] == ref[PAGE // 8 + 5]


@pytest.mark.parametrize("backend", ["host", "nvme"])
def test_a_page_cached_file_reads_through_its_mapping_on_either_back_end(tmp_path, backend):
    """A file opened without O_DIRECT is mapped (its default): gathers through either back end
    give the file's values, half of it evicted from the page cache or not, and every page
    read is counted against the file."""
    path, ref = _file(tmp_path, pages=32, seed=7)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 16 * PAGE, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    store = gids.FileStore(path, direct=False)
    assert store.mapped_enabled
    with gids.Runtime(cache_pages=64, page_size=PAGE, backend=backend) as rt:
        a = rt.open_array(store, np.int64, shape=ref.shape)
        idx = np.random.default_rng().integers(0, ref.size, 200)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
        s = rt.stats()
        assert s.files[0].reads == s.ios > 0
    store.close()


@pytest.mark.skipif(U.probe() is not None, reason="no io_uring here")
@pytest.mark.parametrize("backend", ["host", "nvme"])
def test_a_hard_io_uring_enter_error_is_a_storage_io_error_at_once(tmp_path, backend):
    """/dev/null dup2'd over the rings' descriptors (io_uring_enter then fails: EOPNOTSUPP):
    the gather raises StorageIOError naming the file, well before the Runtime's timeout; the
    daemon says why in ``engine_error``, and the Runtime goes on without the ring."""
    import time
    path, ref = _file(tmp_path, seed=6)
    with gids.FileStore(path) as probe_store:
        if not probe_store.direct_enabled:
            pytest.skip("no O_DIRECT here: reads would not need the ring")
    with gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring", backend=backend,
                      timeout=300) as rt:
        a = rt.open_array(path, np.int64)
        null = os.open(os.devnull, os.O_RDONLY)
        for ring in rt.daemon._urings:
            os.dup2(null, ring.fd)
        os.close(null)
        start = time.monotonic()
        with pytest.raises(gids.StorageIOError, match=r"data\.bin") as info:
            rt.gather(a, [k * PAGE // 8 for k in range(8)])
        assert time.monotonic() - start < 150, "waited for the timeout"
        assert info.value.page in range(8)
        assert "io_uring failed" in rt.daemon.engine_error
        rt.invalidate(discard_dirty=True)
        idx = np.random.default_rng(2).integers(0, ref.size, 30)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])


@pytest.mark.skipif(U.probe() is not None, reason="no io_uring here")
def test_a_failing_fsync_through_the_ring_is_named_and_loses_nothing(tmp_path, monkeypatch):
    """flush's fsync goes to the ring; when it fails (here: the descriptor it is given is a
    pipe, EINVAL) flush raises StorageIOError naming the file, and a later flush makes every
    write durable (the pages were written back before: invalidate)."""
    path, ref = _file(tmp_path, seed=4)
    want = ref.copy()
    with gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring") as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        idx = np.array([3, 600, 4000])
        vals = np.random.default_rng(5).integers(0, 1 << 62, idx.size)
        rt.scatter(a, idx, vals)
        want[idx] = vals
        rt.invalidate()   # written back (through the ring), not yet durable
        r, w = os.pipe()
        monkeypatch.setattr(type(a.store), "fileno", lambda self: r)
        with pytest.raises(gids.StorageIOError, match=r"data\.bin durable: Invalid argument"):
            rt.flush()
        monkeypatch.undo()
        os.close(r), os.close(w)
        rt.flush()
        np.testing.assert_array_equal(np.fromfile(path, dtype=np.int64), want)


def test_bench_files_runs_every_row_and_checks_its_values(tmp_path, capsys):
    """``gids bench files`` tiny: ceiling, direct (each engine), cached, emulated and KvikIO
    rows, every gids row checked against the file; JSON and table written."""
    from gids.cli import main
    from workloads import file_bench as fb
    out = tmp_path / "out"
    rc = main(["bench", "files", "--file-bytes", str(64 * PAGE), "--pages", "6", "--reps", "2",
               "--daemon-threads", "1", "--n-ssd", "1", "--ceiling-depth", "4",
               "--probe-pages", "8", "--dir", str(tmp_path), "--out", str(out),
               "--no-progress"])
    assert rc == 0, capsys.readouterr()
    result = __import__("json").loads((out / "files.json").read_text())
    kinds = [(r["kind"], r["engine"]) for r in result["rows"]]
    for want in [("direct", "io_uring"), ("direct", "threads"), ("cached", "memcpy"),
                 ("cached", "io_uring"), ("emulated", "threads"), ("emulated", "io_uring"),
                 ("kvikio", "kvikio")]:
        assert want in kinds, kinds
    assert any(k == "ceiling" for k, _ in kinds)
    assert all(r["correct"] for r in result["rows"])
    table = (out / "files.md").read_text()
    assert "simulator figure" in table
    if U.probe() is None:   # the probe row (one thread's ring) and every row's fraction of it
        assert ("probe", "io_uring") in kinds and result["probe_pages_per_s"] > 0
        direct = [r for r in result["rows"] if r["kind"] == "direct"]
        assert all(r["of_probe"] > 0 and r["of_ceiling"] > 0 for r in direct)
        ring = next(r for r in direct if r["engine"] == "io_uring")
        assert ring["in_flight_peak"] >= 1 and ring["engine_io_us"] > 0
        # The daemon driven from the host (no GPU), beside the probe: its reads checked too.
        host = next(r for r in result["rows"] if r["kind"] == "host")
        assert host["engine"] == "io_uring" and host["pages"] == 6 and host["of_probe"] > 0
        # With registered buffers (the default) and, beside them, without.
        assert [r["buffers"] for r in result["rows"] if r["kind"] == "host"] == [
            "registered buffers: yes", "registered buffers: no (off)"]
        plain = next(r for r in result["rows"] if r["kind"] == "direct plain buffers")
        assert plain["buffers"] == "registered buffers: no (off)" and plain["correct"]
        assert ring["buffers"] == "registered buffers: yes" and "(registered buffers)" in table
        assert host["passes_per_page"] > 0 and host["visits_per_page"] > 0
    # Every O_DIRECT run between two probes of the disk, its fractions from them.
    assert result["version"] == 5 and all(p["correct"] for p in result["probes"])
    # Each probe's ceiling is the rate of one way, the best over the run, at every probe.
    way = result["ceiling_way"]
    assert all(p["ceiling"] == p["ways"][way] <= p["ceiling_max"] for p in result["probes"])
    assert way in table
    for r in result["rows"]:
        if r["kind"] in ("direct", "direct plain buffers", "host"):
            assert len(r["rep_pages_per_s"]) == 2 and len(r["probes"]) == 3
            assert r["of_ceiling"] == fb.bracketed(r["rep_pages_per_s"],
                                                   [p["ceiling"] for p in r["probes"]])
            assert all(p in result["probes"] for p in r["probes"])
            if r["engine"] == "io_uring" and r["kind"] != "host":   # in rounds (one here)
                assert r["rounds"] == 1 and r["of_ceiling_rounds"] == [r["of_ceiling"]]
    assert result["ceiling_pages_per_s"] == np.median([p["ceiling"] for p in result["probes"]])
    # The page-cached rows against the memory copy, paired in each round (one here).
    for r in result["rows"]:
        if r["kind"] == "cached" and r["engine"] != "memcpy":
            assert r["rounds"] == 1 and r["of_memory"] == r["of_memory_rounds"][0] > 0
    # Each emulated row beside the same engine and threads with no model: what bounds it.
    for r in result["rows"]:
        if r["kind"] == "emulated":
            host = next(h for h in result["rows"]
                        if h["kind"] == "no model" and h["engine"] == r["engine"])
            assert host["threads"] == r["threads"] and host["correct"]
            assert r["of_host"] == r["pages_per_s"] / host["pages_per_s"]
            assert r["bound"] in ("model", "host", "engine")
    # And with the GPU taken out: no model, then each drive count, its reads checked.
    alone = [r for r in result["rows"] if r["kind"] == "host emulated"]
    assert [r["ssd"] for r in alone] == [None, "980pro"] and all(r["correct"] for r in alone)
    assert alone[1]["of_host"] == alone[1]["pages_per_s"] / alone[0]["pages_per_s"]
    assert "host, no model" in table and "host emulated 980pro x1" in table
    assert "| bound |" in table
    for r in result["rows"]:
        if r["kind"] in ("direct", "cached", "emulated"):
            assert r["gpu_io_us"] > 0 and "io_latency_us" not in r
            assert r["daemon_cpu_us_per_page"] is None or r["daemon_cpu_us_per_page"] >= 0
            assert (r["engine_io_us"] is None) == (r["store"] == "MemoryStore copy")
    assert "engine I/O us" in table and "GPU I/O us" in table and "of probe" in table


def test_bench_files_bad_arguments_exit_2(capsys):
    from gids.cli import main
    assert main(["bench", "files", "--pages", "0"]) == 2
    assert "--pages must be >= 1" in capsys.readouterr().err
    assert main(["bench", "files", "--probe-pages", "0"]) == 2
    assert "--probe-pages must be >= 1" in capsys.readouterr().err
    assert main(["bench", "files", "--direct-rounds", "0"]) == 2
    assert "--direct-rounds must be >= 1" in capsys.readouterr().err
    assert main(["bench", "files", "--profile", "nope"]) == 2
    assert main(["bench", "files", "iops"]) == 2


def test_gids_info_names_the_engine(capsys):
    from gids.cli import main
    assert main(["info"]) in (0, None)
    out = capsys.readouterr().out
    assert "default engine: " in out and "storage engine: " in out


@pytest.mark.skipif(U.probe() is not None, reason="no io_uring here")
@pytest.mark.parametrize("refuse", [False, True])
def test_registered_buffers_through_the_runtime(tmp_path, monkeypatch, refuse, capsys):
    """engine_fixed_buffers: a gather through the Runtime's staging reads the file's bytes
    whether the kernel takes the staging as registered buffers (numpy memory in the simulator)
    or not (forced: EFAULT), and rt.stats() says which; 0 leaves them off."""
    _registered_buffers_case(tmp_path, monkeypatch, refuse, capsys)


@pytest.mark.gpu
@pytest.mark.skipif(U.probe() is not None, reason="no io_uring here")
def test_gpu_registered_buffers_of_cuda_pinned_staging(tmp_path, monkeypatch, capsys):
    """On a GPU the staging is CUDA's pinned, mapped memory, which the kernel may refuse to
    register: either way the gather reads the file's bytes, and the output says which."""
    _registered_buffers_case(tmp_path, monkeypatch, False, capsys)


def _registered_buffers_case(tmp_path, monkeypatch, refuse, capsys):
    if refuse:
        monkeypatch.setattr(U, "io_uring_register", lambda *args: -errno.EFAULT)
        monkeypatch.setattr(D, "_fallback_said", set())
    path, ref = _file(tmp_path, pages=64, seed=5)
    idx = np.random.default_rng(6).permutation(ref.size)[:500]
    with gids.defaults.set(engine_fixed_buffers=True), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt = gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring", timeout=20)
    with rt:
        a = rt.open_array(path, np.int64)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
        s = rt.stats()
        said = [w for w in caught if "IORING_REGISTER_BUFFERS" in str(w.message)]
        if refuse:
            assert s.engine_buffers.startswith("registered buffers: no (") and "EFAULT" in \
                s.engine_buffers and len(said) == 1
        elif gids.SIMULATOR:
            assert s.engine_buffers == "registered buffers: yes" and not said
        with capsys.disabled():   # on a GPU: whether CUDA's pinned staging could be registered
            print(f"\n[fixed buffers] {s.engine_buffers}")
        assert s.engine_buffers in str(s)
    with gids.defaults.set(engine_fixed_buffers=False), \
            gids.Runtime(cache_pages=32, page_size=PAGE, engine="io_uring") as rt:
        assert rt.stats().engine_buffers == "registered buffers: no (off)"
