"""The host API where a new user first meets its edges: values and indices checked before a
kernel runs, a cache too large for memory, one file opened twice, a closed Runtime's handle."""
import re
import time

import numpy as np
import pytest
from numba import cuda

import gids
from kernels.launch import GUARD_KEY
from tests.helpers import poisoned

PAGE = 512


@gids.jit
def _read_all(h, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = gids.read(h, i)


@cuda.jit
def _read_all_plain(h, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = gids.read(h, i)


def _file(tmp_path, values):
    path = tmp_path / "data.bin"
    values.tofile(path)
    return str(path)


# ------------------------------------------------------------------ values and indices

def test_scatter_takes_values_the_dtype_holds_exactly_and_names_the_first_that_would_change():
    rng = np.random.default_rng()
    data = rng.standard_normal(1024).astype(np.float32)
    ints = rng.integers(-1000, 1000, 256).astype(np.int32)
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        f = rt.open_array(data.copy(), mode="r+")
        i = rt.open_array(ints.copy(), mode="r+")
        rt.scatter(f, [0, 1, 2], [1.0, 0.5, -2.0 ** 20])            # float64, exact in float32
        rt.scatter(f, [3], [np.nan])
        rt.scatter(f, [4], [2 ** 24])                                # int64, exact in float32
        rt.scatter(i, [0, 1], [3.0, -7.0])                           # integral floats
        got = rt.gather(f, np.arange(5)).copy_to_host()
        np.testing.assert_array_equal(got[[0, 1, 2, 4]], [1.0, 0.5, -2.0 ** 20, 2 ** 24])
        assert np.isnan(got[3])
        np.testing.assert_array_equal(rt.gather(i, [0, 1]).copy_to_host(), [3, -7])
        for array, values, where in ((f, [1.0, 0.1], "value 0.1 (position 1)"),
                                     (f, [2 ** 24 + 1], "value 16777217 (position 0)"),
                                     (i, [1.5], "value 1.5 (position 0)"),
                                     (i, [np.inf], "value inf (position 0)")):
            with pytest.raises(gids.ConfigError, match=re.escape(where) + ".*would change"):
                rt.scatter(array, [7] * len(values), values)
        assert rt.gather(f, [7]).copy_to_host()[0] == data[7]        # nothing was written


def test_gather_of_no_index_is_empty_and_uint64_indices_are_reported_as_given():
    data = np.arange(1024, dtype=np.int64)
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        a = rt.open_array(data)
        for empty in ([], np.array([], dtype=np.uint64)):
            got = rt.gather(a, empty)
            assert got.size == 0 and got.dtype == np.int64
        with pytest.raises(gids.IndexOutOfRangeError, match=r"index 18446744073709551615 "
                                                            r"\(position 1\)"):
            rt.gather(a, np.array([1, 2 ** 64 - 1], dtype=np.uint64))
        big = np.array([5, 2 ** 63 + 5], dtype=np.uint64)
        with pytest.raises(gids.IndexOutOfRangeError, match="index 9223372036854775813 "):
            rt.gather(a, big)
        idx = np.array([1023, 0, 17], dtype=np.uint64)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx.astype(np.int64)])


def test_a_cache_larger_than_memory_is_a_config_error_naming_its_size():
    with pytest.raises(gids.ConfigError, match=r"cannot allocate a cache of 1,125,899,906,842,624 "
                                               r"bytes"):
        gids.Runtime(cache_bytes=1 << 50, page_size=4096)


# ------------------------------------------------------------------ one file opened twice

def test_one_file_opened_writable_and_read_only_shares_its_cached_pages(tmp_path):
    data = np.random.default_rng().standard_normal(2048)
    path = _file(tmp_path, data)
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        w = rt.open_array(path, np.float64, mode="r+")
        r = rt.open_array(path, np.float64)
        assert r.array_id == w.array_id and r.page_base == w.page_base
        assert rt.gather(r, [5]).copy_to_host()[0] == data[5]      # cached through r
        rt.scatter(w, [5, 2047], [42.0, -1.0])
        rt.flush()
        np.testing.assert_array_equal(rt.gather(r, [5, 2047, 6]).copy_to_host(),
                                      [42.0, -1.0, data[6]])
    data[[5, 2047]] = [42.0, -1.0]
    np.testing.assert_array_equal(np.fromfile(path, np.float64), data)


def test_read_only_first_then_writable_serves_both_from_the_writable_store(tmp_path):
    data = np.random.default_rng().integers(-2 ** 40, 2 ** 40, 1024)
    path = _file(tmp_path, data)
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        r = rt.open_array(path, np.int64)
        out = cuda.to_device(poisoned(1024, np.int64))
        _read_all[32, 32](r.handle, out)                            # every page cached via r
        rt.sync()
        w = rt.open_array(path, np.int64, shape=512, mode="r+")     # a smaller extent: shared
        assert w.page_base == r.page_base and r.store is w.store and w.store.writable
        rt.scatter(w, [3], [7])
        rt.invalidate()                                             # written back, not synced
        rt.flush()
        assert rt.gather(r, [3]).copy_to_host()[0] == 7
        with pytest.raises(gids.ReadOnlyError):
            rt.scatter(r, [3], [8])
    data[3] = 7
    np.testing.assert_array_equal(np.fromfile(path, np.int64), data)


def test_overlapping_arrays_of_one_file_that_cannot_share_are_refused_when_one_writes(tmp_path):
    path = _file(tmp_path, np.arange(2048, dtype=np.int64))
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        rt.open_array(path, np.int64, shape=256, mode="r+")
        with pytest.raises(gids.SharedFileError, match="offset 512"):
            rt.open_array(path, np.int64, offset=512)               # overlaps, other pages
        with pytest.raises(gids.SharedFileError, match="already open"):
            rt.open_array(path, np.int64)                           # larger than the first
        far = rt.open_array(path, np.int64, offset=4096)            # no overlap: pages of its own
        assert rt.gather(far, [0]).copy_to_host()[0] == 512
        ro1 = rt.open_array(path, np.int32, offset=8192)
        ro2 = rt.open_array(path, np.int32, offset=8192 + 4)        # both read-only: allowed
        assert rt.gather(ro2, [0]).copy_to_host()[0] == rt.gather(ro1, [1]).copy_to_host()[0]


# ------------------------------------------------------------------ a closed Runtime's handle

def test_a_launch_with_a_closed_runtimes_handle_raises_at_once(tmp_path):
    data = np.arange(4096, dtype=np.float32)
    rt = gids.Runtime(cache_pages=8, page_size=PAGE)
    a = rt.open_array(data)
    h = a.handle
    out = cuda.to_device(poisoned(64, np.float32))
    _read_all[2, 32](h, out)
    rt.sync()
    np.testing.assert_array_equal(out.copy_to_host(), data[:64])
    rt.close()
    for kernel in (_read_all, _read_all_plain):                     # gids.jit or cuda.jit
        start = time.perf_counter()
        with pytest.raises(gids.StaleHandleError, match="Runtime is closed"):
            kernel[2, 32](h, out)
        assert time.perf_counter() - start < 1.0


def test_a_kernel_that_holds_a_closed_runtimes_handle_gives_up_at_once():
    # A launch that got past the guard (a kernel launched before close, still running, does
    # this): its misses find the abort word set and give up instead of waiting out the timeout.
    rt = gids.Runtime(cache_pages=8, page_size=PAGE, timeout=120)
    a = rt.open_array(np.arange(4096, dtype=np.float32))
    h = a.handle
    rt.close()
    del h.__dict__[GUARD_KEY]
    out = cuda.to_device(poisoned(4, np.float32))
    start = time.perf_counter()
    _read_all[1, 4](h, out)
    assert time.perf_counter() - start < 30
    np.testing.assert_array_equal(out.copy_to_host(), 0)           # failed reads return zero
