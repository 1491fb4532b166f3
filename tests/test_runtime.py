"""The runtime core in the simulator: values against numpy, errors before and after kernels."""
import os

import numpy as np
import pytest
from numba import cuda

import gids
from tests.helpers import random_file, skip_unless_simulator


@cuda.jit
def _read_at(h, idx, out):
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("page_size, offset", [(512, 0), (4096, 3), (65536, 24)])
def test_values_match_numpy(tmp_path, dtype, page_size, offset):
    raw = random_file(tmp_path / "d.bin", 3 * page_size + 1000, seed=page_size + offset)
    n = (raw.size - offset) // np.dtype(dtype).itemsize
    ref = raw[offset:offset + n * np.dtype(dtype).itemsize].view(dtype)
    with gids.Runtime(cache_pages=2, page_size=page_size) as rt:
        a = rt.open_array(tmp_path / "d.bin", dtype, shape=n, offset=offset)
        idx = np.random.default_rng(offset).integers(0, n, 48)
        idx[:2] = [0, n - 1]                       # first and last element
        got = rt.gather(a, idx).copy_to_host()
        np.testing.assert_array_equal(got.view(np.uint8), ref[idx].view(np.uint8))


@pytest.mark.parametrize("storage", ["file", "mmap", "memory"])
def test_storage_kinds_and_evictions(tmp_path, storage):
    raw = random_file(tmp_path / "d.bin", 32 * 512, seed=1)
    ref = raw.view(np.int64)
    with gids.Runtime(cache_pages=4, page_size=512) as rt:   # cache = 1/8 of the data
        a = rt.open_array(tmp_path / "d.bin", np.int64, storage=storage)
        idx = np.random.default_rng(2).integers(0, ref.size, 64)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
        s = rt.stats()
        assert s.evictions > 0 and s.ios > 4 and s.bytes_read == s.ios * 512


def test_memory_store_copy_and_zero_copy():
    data = np.random.default_rng(3).standard_normal(5000)
    for zero_copy in (True, False):
        with gids.Runtime(cache_pages=2, page_size=1024) as rt:
            a = rt.open_array(gids.MemoryStore(data, zero_copy=zero_copy), np.float64,
                              shape=data.shape)
            idx = np.random.default_rng(4).integers(0, data.size, 40)
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx])


def test_many_threads_one_page_one_io():
    data = np.arange(1000, dtype=np.int64)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        got = rt.gather(a, np.full(64, 70)).copy_to_host()
        assert (got == 70).all()
        s = rt.stats()
        assert s.ios == 1 and s.lookups == 64


def test_repeated_reads_hit():
    data = np.arange(4096, dtype=np.int32)
    with gids.Runtime(cache_pages=8, page_size=4096) as rt:
        a = rt.open_array(data)
        rt.gather(a, np.arange(0, 4096, 97))
        rt.reset_stats()
        rt.gather(a, np.arange(0, 4096, 89))
        s = rt.stats()
        assert s.ios == 0 and s.hits == s.lookups


def test_index_out_of_range_in_kernel_raises_and_runtime_recovers():
    data = np.arange(100, dtype=np.int32)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        out = cuda.to_device(np.full(3, -7, dtype=np.int32))
        _read_at[1, 3](a.handle, cuda.to_device(np.array([1, 100, -1])), out)
        with pytest.raises(gids.IndexOutOfRangeError):
            rt.sync()
        got = out.copy_to_host()
        assert got[0] == 1 and got[1] == 0 and got[2] == 0
        assert rt.gather(a, [5])[0] == 5


def test_gather_returns_a_device_array_and_writes_any_out():
    from gids.interop import DeviceArray
    rng = np.random.default_rng()
    data = rng.standard_normal(3000).astype(np.float32)
    idx = rng.integers(0, data.size, 40)
    with gids.Runtime(cache_pages=4, page_size=512) as rt:
        a = rt.open_array(data)
        got = rt.gather(a, idx)
        assert isinstance(got, DeviceArray) and got.shape == (40,) and got.dtype == np.float32
        np.testing.assert_array_equal(np.from_dlpack(got), data[idx])   # the simulator: CPU
        assert isinstance(got[2:5], DeviceArray) and got[3] == data[idx[3]]
        for out in (cuda.to_device(np.full(40, np.nan, np.float32)),
                    DeviceArray(cuda.to_device(np.full(40, np.nan, np.float32)))):
            assert rt.gather(a, idx, out=out) is out
            np.testing.assert_array_equal(out.copy_to_host(), data[idx])
        with pytest.raises(gids.ConfigError, match=r"\(40,\) of float32"):
            rt.gather(a, idx, out=cuda.device_array(39, np.float32))
        with pytest.raises(gids.ConfigError, match=r"\(40,\) of float32"):
            rt.gather(a, idx, out=cuda.device_array(40, np.float64))
        assert a.resident_pages() > 0


@pytest.mark.skipif(not gids.SIMULATOR, reason="simulator: host arrays stand for device ones")
def test_gather_into_a_torch_tensor():
    torch = pytest.importorskip("torch", reason="torch is not installed (extra: torch)")
    data = np.arange(1000, dtype=np.int64)
    idx = torch.tensor([999, 0, 512], dtype=torch.int64)
    out = torch.full((3,), -1, dtype=torch.int64)
    with gids.Runtime(cache_pages=4, page_size=512) as rt:
        assert rt.gather(rt.open_array(data), idx.numpy(), out=out) is out
    assert out.tolist() == [999, 0, 512]


@pytest.mark.gpu
def test_gpu_gather_into_torch_and_out_through_dlpack():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    data = rng.standard_normal(1 << 20).astype(np.float32)
    idx = rng.integers(0, data.size, 5000)
    with gids.Runtime(cache_bytes=1 << 20) as rt:
        a = rt.open_array(data)
        out = torch.full((5000,), float("nan"), device="cuda")
        torch.cuda.synchronize()                          # the fill first
        assert rt.gather(a, idx, out=out) is out
        np.testing.assert_array_equal(out.cpu().numpy(), data[idx])
        got = torch.from_dlpack(rt.gather(a, idx))
        np.testing.assert_array_equal(got.cpu().numpy(), data[idx])
        with pytest.raises(gids.ConfigError, match="of float32"):
            rt.gather(a, idx, out=torch.empty(5000, dtype=torch.float64, device="cuda"))


def test_host_indices_checked_before_the_kernel():
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(np.arange(10, dtype=np.int64))
        with pytest.raises(gids.IndexOutOfRangeError):
            rt.gather(a, [3, 10])
        with pytest.raises(gids.ConfigError):
            rt.gather(a, [1.5])


def test_bad_input_gets_clear_errors(tmp_path):
    random_file(tmp_path / "short.bin", 100, seed=0)
    with pytest.raises(gids.ConfigError, match="power of two"):
        gids.Runtime(page_size=3000)
    with pytest.raises(gids.ConfigError, match="power of two"):
        gids.Runtime(page_size=256)
    with pytest.raises(gids.ConfigError, match="smaller than one warp"):
        gids.Runtime(cache_pages=0)
    with pytest.raises(gids.ConfigError, match="backend"):
        gids.Runtime(backend="magic")
    with pytest.raises(gids.ConfigError, match="queue_depth must be at most"):
        gids.Runtime(queue_depth=gids.layout.MAX_QUEUE_DEPTH + 1)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        with pytest.raises(FileNotFoundError):
            rt.open_array(tmp_path / "missing.bin", np.int32)
        with pytest.raises(gids.ConfigError, match="too short"):
            rt.open_array(tmp_path / "short.bin", np.int64, shape=20)
        with pytest.raises(gids.ConfigError, match="unsupported dtype"):
            rt.open_array(tmp_path / "short.bin", np.dtype("V12"), shape=2)
        with pytest.raises(gids.ConfigError, match="whole number"):
            rt.open_array(tmp_path / "short.bin", np.int64, offset=1)


def test_short_read_names_file_and_page(tmp_path):
    path = tmp_path / "d.bin"
    random_file(path, 4 * 512, seed=5)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(path, np.int64)
        os.truncate(path, 512)                       # the file shrinks under the runtime
        with pytest.raises(gids.StorageIOError, match=r"page 2 .*d\.bin.*short read") as info:
            rt.gather(a, [2 * 64])
        assert info.value.page == 2 and info.value.path == str(path)


def test_dead_daemon_times_out_with_a_named_error():
    with gids.Runtime(cache_pages=2, page_size=512, timeout=1.0) as rt:
        a = rt.open_array(np.arange(1000, dtype=np.int64))
        rt.daemon.stop()
        with pytest.raises(gids.GidsTimeoutError, match="daemon"):
            rt.gather(a, [3])
        assert rt.gather(a, [4])[0] == 4             # recovered with a new daemon


def test_defaults_context_manager():
    before = gids.defaults.get("page_size")
    with gids.defaults.set(page_size=1024):
        with gids.Runtime(cache_pages=2) as rt:
            assert rt.page_size == 1024
    assert gids.defaults.get("page_size") == before
    with pytest.raises(KeyError):
        gids.defaults.get("nope")


@skip_unless_simulator
def test_helpers_called_in_loops_skip_the_simulators_call_wrapper():
    """The simulator's device-call wrapper takes a module lock twice per call: a 64 KiB page
    copy through it (37 k calls) once stalled a CI run past the 60 s timeout. Such helpers are
    plain functions there, and one that needs ``cuda.`` is refused."""
    import inspect

    from kernels.cache import _store_pair, check_wait, unpin
    from kernels.platform import device_helper
    from kernels.queue import back_off, expired
    from kernels.warp import highest_lane, lowest_lane
    for helper in (_store_pair, check_wait, unpin, back_off, expired, lowest_lane, highest_lane):
        assert inspect.isfunction(helper), helper

    def fence():
        cuda.threadfence()

    with pytest.raises(TypeError, match="uses cuda"):
        device_helper(fence)


@skip_unless_simulator
def test_references_change_the_count_of_a_page_word_and_nothing_else():
    """A page's word holds its slot in the high half: the pins and the unpins add +n and -n
    (2**64 - n) to the whole uint64 word, which changes the count and leaves the state bits and
    the slot as they were (the simulator's atomics wrap at 64 bits, as the GPU's do)."""
    from types import SimpleNamespace

    from gids import layout as L
    from kernels.cache import PIN_HIT, check_wait, unpin, unpin_after_reads
    from kernels.sync import atomic_add_relaxed_gpu
    slot = (1 << 31) - 1   # the largest slot
    word = (slot << 32) | int(L.PAGE_VALID) | int(L.PAGE_DIRTY)
    h = SimpleNamespace(page_state=np.array([0, word, 0], np.uint64), zero_word=np.uint32(0))
    for _ in range(3):
        assert int(atomic_add_relaxed_gpu(h.page_state, 1, np.uint64(1))) >> 32 == slot
    assert int(h.page_state[1]) & L.PAGE_REF_MASK == 3
    one = np.uint64(1)
    assert check_wait(h, 1, one) == (PIN_HIT, slot)
    unpin(h, 1, one)
    unpin_after_reads(h, 1, one, 0xFFFFFFFF)
    unpin(h, 1, one)
    assert int(h.page_state[1]) == word
    # A kept pin holds one reference per lane; its lanes give them back in any parts.
    atomic_add_relaxed_gpu(h.page_state, 1, np.uint64(32))
    unpin_after_reads(h, 1, np.uint64(20), 0xFFFFFFFF)
    unpin(h, 1, np.uint64(12))
    assert int(h.page_state[1]) == word
    assert h.page_state[0] == 0 and h.page_state[2] == 0


def test_sync_wait_polls_back_to_back_then_naps_briefly():
    """``Runtime.sync`` waits for the kernels by polling (Ctrl-C must be seen meanwhile): back to
    back for the first 2 ms, so that a short launch is seen done within microseconds, then in
    naps of 5 % of the time waited, at most 0.5 ms (a flat 0.5 ms nap once cost 5x the kernel
    time of a short launch on the H200)."""
    from gids import waiting as R
    assert R.wait_nap(0.0) == 0.0 and R.wait_nap(R.WAIT_SPIN_S * 0.99) == 0.0
    assert R.wait_nap(R.WAIT_SPIN_S) == pytest.approx(R.WAIT_SPIN_S * R.WAIT_NAP_FRACTION)
    assert R.wait_nap(1.0) == R.WAIT_NAP_S == 0.0005
    naps = [R.wait_nap(t * 1e-4) for t in range(1000)]
    assert naps == sorted(naps)                          # never shorter as the wait goes on
    assert all(n <= 0.05 * t * 1e-4 * (1 + 1e-9) for t, n in enumerate(naps))

    # poll_until on a fake clock: each poll costs 10 us, each sleep what it asks.
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    def done():
        now[0] += 1e-5
        return now[0] >= 0.0201    # the kernels end 20.1 ms in

    polls = [0]

    def counted():
        polls[0] += 1
        return done()

    R.poll_until(counted, clock=lambda: now[0], sleep=sleep)
    # No sleep(0) in the first 2 ms (it sleeps the OS's timer slack): ~200 polls back to back.
    assert 0.0 not in slept and max(slept) == R.WAIT_NAP_S
    assert polls[0] - len(slept) >= 150
    assert now[0] - 0.0201 <= R.WAIT_NAP_S + 1e-5        # seen done within one nap


def test_poll_until_gives_up_at_its_timeout():
    """A bounded poll returns False at its timeout (never sleeping past it), True once done."""
    from gids import waiting as R
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    def never():
        now[0] += 1e-5
        return False

    assert R.poll_until(never, clock=lambda: now[0], sleep=sleep, timeout=0.01) is False
    assert 0.01 <= now[0] <= 0.01 + 2e-5 and max(slept) <= R.WAIT_NAP_S
    assert R.poll_until(lambda: True, clock=lambda: now[0], sleep=sleep, timeout=0.0) is True


def test_sync_timeout_stops_the_kernels_and_resets(tmp_path, monkeypatch):
    """``sync(timeout=)``: kernels not done in time are aborted, waited for within the Runtime's
    own bound, and GidsTimeoutError names the wait; the Runtime is usable after. A bad timeout
    is refused before any wait."""
    data = np.arange(4096, dtype=np.int64)
    with gids.Runtime(cache_bytes=8 * 4096) as rt:
        a = rt.open_array(data)
        with pytest.raises(gids.errors.ConfigError, match="timeout"):
            rt.sync(timeout=-1)
        answers = [False, True]     # still running at the deadline; ended once aborted
        seen = []

        def wait(timeout=None):
            seen.append(timeout)
            return answers.pop(0) if answers else True

        monkeypatch.setattr(rt._kernels, "wait", wait)
        with pytest.raises(gids.errors.GidsTimeoutError, match="within sync's timeout") as info:
            rt.sync(timeout=0.5)
        assert info.value.what == "sync" and seen[:2] == [0.5, rt.timeout + 5.0]
        monkeypatch.undo()
        assert np.array_equal(rt.gather(a, np.arange(100)).copy_to_host(), data[:100])


def test_sync_timeout_names_kernels_that_ignore_the_abort(monkeypatch):
    """A kernel still running after the abort's bound is named, not waited for forever."""
    with gids.Runtime(cache_bytes=8 * 4096) as rt:
        monkeypatch.setattr(rt._kernels, "wait", lambda timeout=None: False)
        with pytest.raises(gids.errors.GidsTimeoutError, match="loops without waiting") as info:
            rt.sync(timeout=0.1)
        assert info.value.what == "abort"
        monkeypatch.undo()
        with pytest.raises(gids.errors.AbortedError):   # once they end: the abort, then reset
            rt.sync()


def test_event_done_asks_the_driver_without_an_exception_per_poll(monkeypatch):
    """The poll calls cuEventQuery itself: numba-cuda's ``Event.query`` raises (and logs at ERROR
    level) a CudaAPIError for every not-ready answer. Other errors go through ``query``."""
    cu = pytest.importorskip("cuda.bindings.driver")
    from gids.waiting import event_done as _event_done
    answers = {}

    class FakeEvent:
        handle = "the handle"

        def query(self):
            raise RuntimeError("query raised")

    monkeypatch.setattr(cu, "cuEventQuery", lambda handle: (answers[handle],))
    answers["the handle"] = cu.CUresult.CUDA_ERROR_NOT_READY
    assert _event_done(FakeEvent()) is False
    answers["the handle"] = cu.CUresult.CUDA_SUCCESS
    assert _event_done(FakeEvent()) is True
    answers["the handle"] = cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(RuntimeError, match="query raised"):
        _event_done(FakeEvent())


def test_sync_returns_promptly():
    import time
    with gids.Runtime(cache_pages=4, page_size=512) as rt:
        a = rt.open_array(np.arange(1000, dtype=np.int64))
        out = cuda.device_array(32, dtype=np.int64)
        _read_at[1, 32](a.handle, cuda.to_device(np.arange(32, dtype=np.int64)), out)
        t = time.perf_counter()
        rt.sync()
        assert time.perf_counter() - t < 0.5
        assert np.array_equal(out.copy_to_host(), np.arange(32))


@pytest.mark.parametrize("backend", ["host", "nvme"])
def test_set_daemon_threads_restarts_the_back_end(backend):
    """Between kernels the back end's server restarts with the new thread count, its queues
    back at ticket 0, and the cache still serves the same bytes (checked against numpy)."""
    data = np.random.default_rng().standard_normal(4096)
    with gids.Runtime(backend, cache_pages=4, page_size=512, queues=4, queue_depth=32,
                      daemon_threads=1) as rt:
        a = rt.open_array(data)
        idx = np.random.default_rng().integers(0, data.size, 64)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx])
        first = rt.daemon
        rt.set_daemon_threads(3)
        assert rt.daemon is not first and rt.daemon.n_threads == 3 and rt.daemon_threads == 3
        assert not first.running
        rt.invalidate()
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx])
        assert rt.stats().misses > 0
