"""``Runtime.gather_rows``: rows equal numpy's (rows within a page, across pages, wider than a
page), any integer index type, outputs of numpy/torch/Numba, DLPack out, and the named errors
before any kernel."""
import re
import time
import types

import numpy as np
import pytest

import gids
from gids.errors import ConfigError, IndexOutOfRangeError
from gids.interop import DeviceArray
from kernels.platform import SIMULATOR
from tests.helpers import CompileScript, Warp32Script, check_warp32, started_early

try:
    import torch
except ImportError:   # the torch extra is not installed
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")

PAGE = 512   # 128 float32 a page: rows of 24 cross pages, of 200 span two or three, of 256 two
#              (page-aligned: two rows a warp)


def _runtime():
    return gids.Runtime(page_size=PAGE, cache_pages=8, daemon_threads=1, queues=2)


def _poisoned(shape, dtype):
    out = np.empty(shape, dtype=dtype)
    out.view(np.uint8)[:] = 0xA5
    return out


@pytest.mark.parametrize("resident_first", [True, False])
@pytest.mark.parametrize("width", [25, 200, 256])
def test_rows_equal_numpy(width, resident_first):
    rng = np.random.default_rng()
    data = rng.standard_normal((40, width)).astype(np.float32)
    rows = rng.integers(0, 40, size=9).astype(np.int32)
    with gids.defaults.set(rows_resident_first=resident_first), _runtime() as rt:
        a = rt.open_array(data)
        got = rt.gather_rows(a, rows)
        assert isinstance(got, DeviceArray) and got.shape == (9, width)
        rt.sync()
        np.testing.assert_array_equal(got.copy_to_host(), data[rows])
        # DLPack and numpy's protocol see the same rows
        np.testing.assert_array_equal(np.from_dlpack(got), data[rows])
        np.testing.assert_array_equal(np.asarray(got), data[rows])


@pytest.mark.parametrize("width", [24, 128])
def test_resident_first_some_pages_resident(width):
    # Rows whose pages are resident are copied by the first launch, the others set aside and
    # copied by the second (which loads them); a warm repeat is hits only.
    rng = np.random.default_rng()
    data = rng.standard_normal((60, width)).astype(np.float32)
    with gids.defaults.set(rows_resident_first=True), \
            gids.Runtime(page_size=PAGE, cache_pages=32, daemon_threads=1, queues=2) as rt:
        a = rt.open_array(data)
        warm = rng.choice(60, size=6, replace=False)
        rt.gather_rows(a, warm)
        rt.sync()
        rows = np.concatenate([warm, rng.integers(0, 60, size=8)])
        rng.shuffle(rows)
        out = _poisoned((rows.size, width), np.float32)
        rt.gather_rows(a, rows, out=out)
        rt.sync()
        np.testing.assert_array_equal(out, data[rows])
        before = rt.stats()
        out2 = _poisoned((rows.size, width), np.float32)
        rt.gather_rows(a, rows[::-1].copy(), out=out2)
        rt.sync()
        np.testing.assert_array_equal(out2, data[rows[::-1]])
        assert rt.stats().misses == before.misses
        assert rt.stats().hits > before.hits


@pytest.fixture
def strict_indexing(monkeypatch):
    """In the simulator, a negative integer index into a device array raises IndexError (numpy
    would wrap it to the array's end, where the GPU reads or writes before the array)."""
    if not SIMULATOR:
        yield
        return
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    def negative(idx):
        parts = idx if isinstance(idx, tuple) else (idx,)
        return any(isinstance(x, (int, np.integer)) and x < 0 for x in parts)

    get, put = FakeCUDAArray.__getitem__, FakeCUDAArray.__setitem__

    def getitem(self, idx):
        if negative(idx):
            raise IndexError(f"negative index {idx} into a device array of {self.shape}")
        return get(self, idx)

    def setitem(self, idx, value):
        if negative(idx):
            raise IndexError(f"negative index {idx} into a device array of {self.shape}")
        put(self, idx, value)

    monkeypatch.setattr(FakeCUDAArray, "__getitem__", getitem)
    monkeypatch.setattr(FakeCUDAArray, "__setitem__", setitem)
    yield


#: Simulator-sized stand-ins of the GPU test's configurations (pages of 128 float32): a page a
#: row with the whole array cached (two rows a warp, all hits on the second gather), a page a
#: row with a cache of a fifth of the array (evictions while rows are pinned), and rows of 37
#: elements, which start anywhere in a page and cross pages (one row a warp), in a small cache.
SIM_CONFIGS = {"page_rows_whole_cache": (128, 40, 48), "page_rows_small_cache": (128, 40, 8),
               "rows_across_pages": (37, 120, 8)}


def _gather_twice(rt, data, rows, all_cached):
    """Open ``data``, gather ``rows`` (the result dropped at once: a warm-up), then the rows
    reversed, checked against numpy; with ``all_cached`` the second gather misses nothing."""
    a = rt.open_array(data)
    rt.gather_rows(a, rows)
    rt.sync()
    before = rt.stats()
    got = rt.gather_rows(a, rows[::-1].copy())
    rt.sync()
    np.testing.assert_array_equal(got.copy_to_host(), data[rows[::-1]])
    if all_cached:
        assert rt.stats().misses == before.misses


@pytest.mark.parametrize("resident_first", [False, True])
@pytest.mark.parametrize("config", sorted(SIM_CONFIGS))
def test_stand_ins_of_the_gpu_configurations(config, resident_first, strict_indexing):
    # A first gather whose result is dropped at once (a warm-up), then the reversed rows; every
    # index into a device array in range, every pin given back. 24 rows: 6 rounds of the grid's
    # 4 rows (2 blocks of a warp, 2 rows a warp), more pages than the small caches hold.
    width, n_rows, cache = SIM_CONFIGS[config]
    rng = np.random.default_rng()
    data = rng.standard_normal((n_rows, width)).astype(np.float32)
    rows = rng.integers(0, n_rows, size=24)
    with gids.defaults.set(rows_resident_first=resident_first), \
            gids.Runtime(page_size=PAGE, cache_pages=cache, daemon_threads=1, queues=2) as rt:
        _gather_twice(rt, data, rows, cache * PAGE >= data.nbytes)
        state = rt._page_state.copy_to_host()
        assert not (state & gids.layout.PAGE_REF_MASK).any()


@pytest.mark.skipif(not SIMULATOR, reason="simulator: an empty array raises on any index")
@pytest.mark.parametrize("resident_first", [False, True])
def test_no_tier_kernels_never_touch_the_tier_fields(monkeypatch, resident_first):
    # Without a host tier the handle's tier fields are placeholders: made empty here, any read
    # or write of one by a kernel (rows, misses, evictions, dirty write-backs) raises.
    from numba import cuda

    from gids.host_tier import HostTier
    fields = HostTier.handle_fields

    def empty_tier(self, array):
        got = fields(self, array)
        assert got["tier_mode"] == gids.layout.TIER_NONE and got["tier_victims"] == 0
        for name in ("tier_slot", "tier", "tier_words", "tier_ref", "tier_free",
                     "tier_free_top"):
            got[name] = cuda.to_device(np.zeros(0, dtype=got[name].dtype))
        return got

    monkeypatch.setattr(HostTier, "handle_fields", empty_tier)
    rng = np.random.default_rng()
    data = rng.standard_normal((40, 37)).astype(np.float32)
    rows = rng.integers(0, 40, size=30)
    # 4 elements in each of 16 pages: 16 dirty pages through 8 slots
    idx = (np.arange(16)[:, None] * 128 + rng.choice(128, 4, replace=False)).ravel()
    written = rng.integers(0, 1000, size=idx.size).astype(np.int32)
    with gids.defaults.set(rows_resident_first=resident_first), _runtime() as rt:
        a = rt.open_array(data)
        got = rt.gather_rows(a, rows)
        rt.sync()
        np.testing.assert_array_equal(got.copy_to_host(), data[rows])
        w = rt.open_array(np.zeros(16 * 128, dtype=np.int32), mode="r+")
        rt.scatter(w, idx, written)
        np.testing.assert_array_equal(rt.gather(w, idx).copy_to_host(), written)
        assert rt.stats().writebacks > 0


def test_counters_fit_one_shard():
    # A kernel adds counter ``stat`` at ``shard * N_STATS + stat``: an index at or past N_STATS
    # would land in the next shard's counters (or past the array, from the last shard).
    from kernels import layout as L
    stats = {k: v for k, v in vars(L).items() if k.startswith("STAT_")}
    assert sorted(stats.values()) == list(range(L.N_STATS)), stats
    with _runtime() as rt:
        assert rt._stats.size == L.N_STAT_SHARDS * L.N_STATS


def test_host_rows_copied_on_the_launch_stream(monkeypatch):
    # A copy from pageable memory with no stream is ordered before the legacy default stream's
    # work only: a gather on a non-blocking stream could read its rows before they arrive. The
    # rows go down from a pooled pinned buffer on the launch's stream, given back on it.
    from numba import cuda

    from gids import rows as rows_module
    from gids.staging import Buffer, Staging
    launch_stream = cuda.stream()
    monkeypatch.setattr(rows_module, "numba_stream", lambda handle, device=None: launch_stream)
    copies, given = [], []
    send, give_back = Buffer.send, Staging.give_back

    def spy_send(self, stream, n, at=0):
        copies.append(stream)
        return send(self, stream, n, at)

    def spy_give_back(self, buf, stream=None):
        given.append(stream)
        return give_back(self, buf, stream)

    monkeypatch.setattr(Buffer, "send", spy_send)
    monkeypatch.setattr(Staging, "give_back", spy_give_back)
    data = np.arange(20 * 8, dtype=np.float32).reshape(20, 8)
    with _runtime() as rt:
        a = rt.open_array(data)
        copies.clear()
        got = rt.gather_rows(a, np.array([4, 19, 0]))
        rt.sync()
        assert copies == [launch_stream] and given == [launch_stream]
        np.testing.assert_array_equal(got.copy_to_host(), data[[4, 19, 0]])


def test_resident_first_lists_are_reused(monkeypatch):
    from gids import rows as gids_rows
    # Lists of at least 4 rows, not 1024: a gather of 20 rows outgrows one.
    monkeypatch.setattr(gids_rows, "MIN_ASIDE_ROWS", 4)
    data = np.arange(50 * 8, dtype=np.float32).reshape(50, 8)
    with gids.defaults.set(rows_resident_first=True), _runtime() as rt:
        a = rt.open_array(data)
        lists = rt._rows_aside_lists   # one per stream: here the default stream's
        used = []
        for n in (3, 5, 2, 20, 4):
            rows = np.arange(n) % 50
            got = rt.gather_rows(a, rows)
            rt.sync()
            np.testing.assert_array_equal(got.copy_to_host(), data[rows])
            assert len(lists) == 1 <= gids_rows.MAX_ASIDE_LISTS
            used.append(next(iter(lists.values()))[0])
        assert [u.size for u in used] == [4, 8, 8, 32, 32]     # grown, else reused
        assert used[2] is used[1] and used[4] is used[3]


def test_resident_first_set_aside_row_out_of_range_raised_at_sync():
    # An out-of-range device row is set aside by the first launch (which records nothing) and
    # raised from the second; the other rows are copied.
    from numba import cuda
    data = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    with gids.defaults.set(rows_resident_first=True), _runtime() as rt:
        a = rt.open_array(data)
        out = _poisoned((3, 8), np.float32)
        rt.gather_rows(a, cuda.to_device(np.array([2, 99, 4], dtype=np.int64)), out=out)
        with pytest.raises(IndexOutOfRangeError):
            rt.sync()
        np.testing.assert_array_equal(out[[0, 2]], data[[2, 4]])


ROWS_WARP32 = """
rng = np.random.default_rng()
for width in (128, 200):     # a page a row (two rows a warp), rows across pages (one)
    data = rng.standard_normal((60, width)).astype(np.float32)
    with gids.defaults.set(rows_resident_first=True), \
            gids.Runtime(page_size=512, cache_pages=64, queues=2, queue_depth=32, timeout=60) as rt:
        a = rt.open_array(data)
        warm = rng.choice(60, size=5, replace=False)
        rt.gather_rows(a, warm)
        rt.sync()
        rows = np.concatenate([warm, rng.integers(0, 60, size=6)])
        rng.shuffle(rows)
        got = rt.gather_rows(a, rows)
        rt.sync()
        assert (got.copy_to_host() == data[rows]).all(), width
        state = rt._page_state.copy_to_host()
        assert not (state & gids.layout.PAGE_REF_MASK).any()   # every pin given back
print("ROWS_WARP32_OK")
"""


ROWS_ONE_LAUNCH_WARP32 = """
rng = np.random.default_rng()
# Stand-ins of the GPU configurations (tests.test_rows.SIM_CONFIGS, a cache of at least a warp's
# pages): page rows (two a warp) with the whole array cached and with less, rows across pages.
for width, n_rows, cache in ((128, 40, 48), (128, 80, 32), (37, 300, 32)):
    data = rng.standard_normal((n_rows, width)).astype(np.float32)
    rows = rng.integers(0, n_rows, size=40)
    with gids.defaults.set(rows_resident_first=False), \\
            gids.Runtime(page_size=512, cache_pages=cache, queues=2, queue_depth=32, timeout=60) as rt:
        a = rt.open_array(data)
        rt.gather_rows(a, rows)
        rt.sync()
        got = rt.gather_rows(a, rows[::-1].copy())
        rt.sync()
        assert (got.copy_to_host() == data[rows[::-1]]).all(), width
        state = rt._page_state.copy_to_host()
        assert not (state & gids.layout.PAGE_REF_MASK).any()   # every pin given back
print("ROWS_ONE_LAUNCH_OK")
"""
ROWS_ONE_LAUNCH_WARP32_RUN = Warp32Script(ROWS_ONE_LAUNCH_WARP32)


@started_early(ROWS_ONE_LAUNCH_WARP32_RUN)
def test_one_launch_rows_in_emulated_warps():
    # The one-launch kernel's collectives with 32-lane warps, in the GPU test's three shapes.
    check_warp32(ROWS_ONE_LAUNCH_WARP32_RUN.result(), "ROWS_ONE_LAUNCH_OK")


@pytest.mark.parametrize("setting, n, two", [("auto", (1 << 16) - 1, False), ("auto", 1 << 16, True),
                                             (True, 5, True), (False, 1 << 20, False)])
def test_resident_first_auto_by_rows(setting, n, two):
    from gids.rows import RESIDENT_FIRST_ROWS, resident_first
    assert RESIDENT_FIRST_ROWS == 1 << 16
    with gids.defaults.set(rows_resident_first=setting):
        assert resident_first(n) is two


ROWS_WARP32_RUN = Warp32Script(ROWS_WARP32)


@started_early(ROWS_WARP32_RUN)
def test_resident_first_rows_in_emulated_warps():
    # Both launches' collectives with 32-lane warps: groups of 16 lanes, rows set aside.
    check_warp32(ROWS_WARP32_RUN.result(), "ROWS_WARP32_OK")


@pytest.mark.parametrize("resident_first", [False, True])
def test_sixteen_byte_copies_where_rows_and_out_allow(monkeypatch, resident_first):
    # Rows a multiple of 16 bytes into a C-contiguous output: 16-byte copies into the output's
    # words; rows of another size, or an output whose rows are not one after another: element
    # copies. Each right, into a poisoned output.
    import kernels.rows as row_kernels
    chosen = []
    for name in ("gather_rows_kernel", "resident_rows_kernels"):
        original = getattr(row_kernels, name)

        def record(wide=False, original=original):
            chosen.append(wide)
            return original(wide)
        monkeypatch.setattr(row_kernels, name, record)
    rng = np.random.default_rng()
    wide_data = rng.standard_normal((40, 36)).astype(np.float32)      # 144 bytes a row
    odd_data = rng.standard_normal((40, 35)).astype(np.float32)       # 140 bytes a row
    rows = rng.integers(0, 40, size=11)
    from numba import cuda
    wider = cuda.to_device(_poisoned((11, 40), np.float32))
    with gids.defaults.set(rows_resident_first=resident_first), _runtime() as rt:
        wide, odd = rt.open_array(wide_data), rt.open_array(odd_data)
        for a, data, out, expect in (
                (wide, wide_data, _poisoned((11, 36), np.float32), True),
                (odd, odd_data, _poisoned((11, 35), np.float32), False),
                (wide, wide_data, wider[:, :36], False)):     # rows 160 bytes apart
            chosen.clear()
            rt.gather_rows(a, rows, out=out)
            rt.sync()
            assert chosen == [expect]
            got = out.copy_to_host() if hasattr(out, "copy_to_host") else out
            np.testing.assert_array_equal(got, data[rows])
    rest = wider.copy_to_host()[:, 36:]
    assert (rest.view(np.uint32) == 0xA5A5A5A5).all()      # nothing written past the rows


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.int64, np.uint64])
def test_any_integer_index_type_into_given_out(dtype):
    rng = np.random.default_rng()
    data = rng.integers(-1000, 1000, size=(30, 16)).astype(np.int64)
    rows = rng.integers(0, 30, size=5).astype(dtype)
    out = _poisoned((5, 16), np.int64)
    with _runtime() as rt:
        a = rt.open_array(data)
        assert rt.gather_rows(a, rows, out=out) is out
        assert rt.check() is True
    np.testing.assert_array_equal(out, data[rows.astype(np.int64)])


def test_device_indices_and_device_out():
    from numba import cuda
    rng = np.random.default_rng()
    data = rng.standard_normal((25, 40)).astype(np.float64)
    rows = rng.integers(0, 25, size=6)
    with _runtime() as rt:
        a = rt.open_array(data)
        out = cuda.to_device(_poisoned((6, 40), np.float64))
        rt.gather_rows(a, cuda.to_device(rows.astype(np.int32)), out=out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), data[rows])


def test_device_row_out_of_range_raised_at_sync():
    from numba import cuda
    data = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    with _runtime() as rt:
        a = rt.open_array(data)
        rt.gather_rows(a, cuda.to_device(np.array([1, 10], dtype=np.int64)))
        with pytest.raises(IndexOutOfRangeError):
            rt.sync()
        # the Runtime is usable again
        got = rt.gather_rows(a, [3])
        rt.sync()
        np.testing.assert_array_equal(got.copy_to_host(), data[[3]])


@needs_torch
def test_torch_indices_and_out():
    rng = np.random.default_rng()
    data = rng.standard_normal((33, 20)).astype(np.float32)
    rows = torch.from_numpy(rng.integers(0, 33, size=7)).to(torch.int16)
    out = torch.full((7, 20), float("nan"))
    with _runtime() as rt:
        a = rt.open_array(data)
        rt.gather_rows(a, rows, out=out)
        rt.sync()
        got = rt.gather_rows(a, rows)
        rt.sync()
        from_dl = torch.from_dlpack(got)
    np.testing.assert_array_equal(out.numpy(), data[rows.numpy()])
    np.testing.assert_array_equal(from_dl.numpy(), data[rows.numpy()])


def test_named_errors_before_any_kernel():
    data = np.zeros((10, 8), dtype=np.float32)
    with _runtime() as rt:
        a = rt.open_array(data)
        flat = rt.open_array(np.zeros(80, dtype=np.float32))
        with pytest.raises(IndexOutOfRangeError, match="row 10"):
            rt.gather_rows(a, [0, 10])
        with pytest.raises(IndexOutOfRangeError, match="row -1"):
            rt.gather_rows(a, np.array([-1], dtype=np.int8))
        with pytest.raises(ConfigError, match="2-D"):
            rt.gather_rows(flat, [0])
        with pytest.raises(ConfigError, match=r"\(2, 8\) of float32"):
            rt.gather_rows(a, [0, 1], out=np.zeros((2, 7), dtype=np.float32))
        with pytest.raises(ConfigError, match=r"\(2, 8\) of float32"):
            rt.gather_rows(a, [0, 1], out=np.zeros((2, 8), dtype=np.float64))
        with pytest.raises(ConfigError, match="integer row indices"):
            rt.gather_rows(a, [0.5])
        other_device = types.SimpleNamespace(ptr=1234, device_id=1)   # a CuPy stream's shape
        with pytest.raises(ConfigError, match="stream is on device 1"):
            rt.gather_rows(a, [0], stream=other_device)
        with pytest.raises(ConfigError, match="stream must be"):
            rt.gather_rows(a, [0], stream="fast")
        assert a.resident_pages() == 0   # nothing ran


@pytest.mark.parametrize("rows, named", [
    (np.array([0, 12, -3, 40]), "row 12 (position 1)"),            # the first of several
    (np.array([2, -3, 12]), "row -3 (position 1)"),
    (np.array([1, 2**64 - 1], dtype=np.uint64), f"row {2**64 - 1} (position 1)"),   # not wrapped
    (np.array([3, 10], dtype=np.uint8), "row 10 (position 1)"),
    (np.array([[1], [10]], dtype=np.int32)[:, 0], "row 10 (position 1)"),   # strided
])
def test_host_rows_out_of_range_named_before_any_kernel(rows, named):
    data = np.zeros((10, 8), dtype=np.float32)
    with _runtime() as rt:
        a = rt.open_array(data)
        with pytest.raises(IndexOutOfRangeError, match=re.escape(named)):
            rt.gather_rows(a, rows)
        assert a.resident_pages() == 0
        # the last row and row 0 are in range; an empty integer list gathers nothing
        np.testing.assert_array_equal(rt.gather_rows(a, np.array([9, 0], rows.dtype)).copy_to_host(),
                                      data[[9, 0]])
        assert rt.gather_rows(a, np.zeros(0, rows.dtype)).shape == (0, 8)


@pytest.mark.skipif(not SIMULATOR, reason="simulator: streams are accepted and ignored")
def test_streams_accepted_in_simulator():
    data = np.arange(6 * 8, dtype=np.int32).reshape(6, 8)
    with _runtime() as rt:
        a = rt.open_array(data)
        got = rt.gather_rows(a, [5, 0], stream=types.SimpleNamespace(ptr=7, device_id=0))
        got2 = rt.gather_rows(a, [1], stream=0)
        rt.sync()
    np.testing.assert_array_equal(got.copy_to_host(), data[[5, 0]])
    np.testing.assert_array_equal(got2.copy_to_host(), data[[1]])


# ------------------------------------------------------------------ on the GPU

#: A GPU gather that has not ended after this long is stopped and fails its test (a hang was
#: seen: docs/design-notes.md, row gathers); each takes well under a second.
GPU_SYNC_S = 120

@pytest.mark.gpu
def test_gpu_torch_out_on_a_torch_stream():
    torch_ = pytest.importorskip("torch")
    rng = np.random.default_rng()
    data = rng.standard_normal((5000, 1024)).astype(np.float32)
    rows = torch_.from_numpy(rng.integers(0, 5000, size=3000)).cuda()
    with gids.Runtime(cache_bytes=4 << 20) as rt:
        a = rt.open_array(data)
        out = torch_.full((3000, 1024), float("nan"), device="cuda")
        s = torch_.cuda.Stream()
        s.wait_stream(torch_.cuda.current_stream())   # out's fill first (torch's rule)
        rt.gather_rows(a, rows, out=out, stream=s)
        rt.sync()
        np.testing.assert_array_equal(out.cpu().numpy(), data[rows.cpu().numpy()])
        got = torch_.from_dlpack(rt.gather_rows(a, rows.to(torch_.int32)))
        torch_.cuda.synchronize()
        rt.sync()
        np.testing.assert_array_equal(got.cpu().numpy(), data[rows.cpu().numpy()])


@pytest.mark.gpu
@pytest.mark.parametrize("resident_first", [False, True])
def test_gpu_cupy_out_and_indices(resident_first):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    data = rng.standard_normal((3000, 300)).astype(np.float32)   # rows span pages
    rows = cp.asarray(rng.integers(0, 3000, size=2000).astype(np.uint32))
    with gids.defaults.set(rows_resident_first=resident_first), \
            gids.Runtime(cache_bytes=1 << 20) as rt:
        a = rt.open_array(data)
        out = cp.full((2000, 300), cp.nan, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=True)
        cp.cuda.get_current_stream().synchronize()    # out's fill first
        rt.gather_rows(a, rows, out=out, stream=s)
        deadline = time.monotonic() + 120      # a gather that never finishes fails, not hangs
        while not rt.check():
            assert time.monotonic() < deadline, "the gather on the CuPy stream did not finish"
            time.sleep(0.001)
        np.testing.assert_array_equal(cp.asnumpy(out), data[cp.asnumpy(rows)])
        got = cp.from_dlpack(rt.gather_rows(a, rows))
        rt.sync(timeout=GPU_SYNC_S)
        np.testing.assert_array_equal(cp.asnumpy(got), data[cp.asnumpy(rows)])
        from numba import cuda
        ns = cuda.stream()
        again = rt.gather_rows(a, rows, stream=ns)
        rt.sync(timeout=GPU_SYNC_S)
        np.testing.assert_array_equal(again.copy_to_host(), data[cp.asnumpy(rows)])


#: The GPU's row-gather configurations, one test each so that a failure names its own: (row
#: width in float32, cache bytes); 8000 rows, 4 KiB pages. Gathered twice (the rows, then
#: reversed): a whole cache (the second gather misses nothing), a quarter, rows across pages
#: (whose warps split in the copy loops: the hang of docs/design-notes.md, row gathers).
GPU_CONFIGS = {"page_rows_whole_cache": (1024, 48 << 20),
               "page_rows_quarter_cache": (1024, 4 << 20),
               "rows_across_pages": (300, 2 << 20),
               "rows_across_pages_4mib": (300, 4 << 20)}


@pytest.mark.gpu
@pytest.mark.parametrize("keep_first", [pytest.param(False, id="first_dropped"),
                                        pytest.param(True, id="first_kept")])
@pytest.mark.parametrize("config", sorted(GPU_CONFIGS))
def test_gpu_rows_config_one_launch(config, keep_first):
    # The one-launch gather of each configuration, its first result dropped before the sync
    # (and Numba's pending frees flushed: memory freed under the kernel faults it) or kept.
    import gc

    from numba import cuda
    width, cache = GPU_CONFIGS[config]
    rng = np.random.default_rng()
    data = rng.standard_normal((8000, width)).astype(np.float32)
    rows = rng.integers(0, 8000, size=20000)
    with gids.defaults.set(rows_resident_first=False), gids.Runtime(cache_bytes=cache) as rt:
        a = rt.open_array(data)
        first = rt.gather_rows(a, rows)
        if not keep_first:
            del first
            gc.collect()
            cuda.current_context().deallocations.clear()
        rt.sync(timeout=GPU_SYNC_S)
        if keep_first:
            np.testing.assert_array_equal(first.copy_to_host(), data[rows])
        before = rt.stats()
        got = rt.gather_rows(a, rows[::-1].copy())
        rt.sync(timeout=GPU_SYNC_S)
        np.testing.assert_array_equal(got.copy_to_host(), data[rows[::-1]])
        if cache > data.nbytes:
            assert rt.stats().misses == before.misses
        state = rt._page_state.copy_to_host()
        assert not (state & gids.layout.PAGE_REF_MASK).any()   # every pin given back


ROWS_PTX = '''
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
import numba.cuda.dispatcher as dispatcher
from numba import cuda, typeof, types

class _Hopper:
    compute_capability = (9, 0)
dispatcher.get_current_device = lambda: _Hopper()
from tests.helpers import fake_handle
from kernels.rows import gather_rows_kernel
h = fake_handle(np.float32)
ptx, _ = cuda.compile_ptx(gather_rows_kernel().py_func,
                          (typeof(h), types.int32[::1], types.int64, types.float32[:, :]),
                          cc=(9, 0))
# a lookup per page, not per element: the pin's and the unpin's match.any, the miss path's call
print("MATCH", ptx.count("match.any.sync"), "CALLS", ptx.count("call.uni"))
# resident first: the first launch has no call (no miss path), the second has the miss path's
from kernels.rows import LOADS_IN_FLIGHT, resident_rows_kernels
sig = (typeof(h), types.int32[::1], types.int64, types.float32[:, :], types.int64[::1],
       types.int64[::1])
resident, set_aside = (cuda.compile_ptx(k.py_func, sig, cc=(9, 0))[0]
                       for k in resident_rows_kernels())
print("RESIDENT_CALLS", resident.count("call"), "SET_ASIDE_CALLS", set_aside.count("call.uni"))
# loads in flight: the copy's unrolled body has LOADS_IN_FLIGHT weak L2 loads before a store
lines = [l.strip() for l in resident.splitlines() if l.strip().startswith(("ld.global.cg", "st."))]
run = max((len(list(g)) for key, g in __import__("itertools").groupby(
    lines, key=lambda l: l.startswith("ld.")) if key), default=0)
print("LOADS_BEFORE_STORE", run >= LOADS_IN_FLIGHT)
# 16-byte copies: LOADS_IN_FLIGHT 16-byte L2 loads before their 16-byte stores
wide, _ = cuda.compile_ptx(gather_rows_kernel(True).py_func,
                           (typeof(h), types.int32[::1], types.int64, types.uint64[::1]), cc=(9, 0))
lines = [l.strip() for l in wide.splitlines() if l.strip().startswith(("ld.global.cg", "st."))]
run = max((len(list(g)) for key, g in __import__("itertools").groupby(
    lines, key=lambda l: l.startswith("ld.global.cg.v2.b64")) if key), default=0)
print("WIDE_LOADS_BEFORE_STORE", run >= LOADS_IN_FLIGHT, "WIDE_STORES",
      wide.count("st.global.v2.b64") >= LOADS_IN_FLIGHT)
'''
ROWS_PTX_RUN = CompileScript(ROWS_PTX)


@started_early(ROWS_PTX_RUN)
def test_row_kernel_compiles_for_the_gpu_with_one_lookup_per_page():
    proc = ROWS_PTX_RUN.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MATCH 2 CALLS 1" in proc.stdout, proc.stdout
    assert "WIDE_LOADS_BEFORE_STORE True WIDE_STORES True" in proc.stdout, proc.stdout
    assert "RESIDENT_CALLS 0 SET_ASIDE_CALLS 1" in proc.stdout, proc.stdout
    assert "LOADS_BEFORE_STORE True" in proc.stdout, proc.stdout
