"""Writes through the page cache (simulator): gids.write / Runtime.scatter, write-back on
eviction, flush and close, read-your-own-writes, and bad inputs rejected with clear errors.

Tests taking ``backend`` run over the host daemon's queues and over the direct NVMe path, where
a dirty page evicted by a kernel goes to the store as an NVMe Write command."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

import gids
from tests.helpers import write_then_read

PAGE = 512
BACKENDS = ["host", "nvme"]


def _check_nvme_writes(rt):
    """On the NVMe path every write-back a kernel counted was a Write command, none failed."""
    if rt.backend == "nvme":
        c = rt.daemon.counters
        assert c["writes"] == rt.stats().writebacks and c["errors"] == 0, c


@cuda.jit
def _write_one(h, i, value):
    if cuda.grid(1) == 0:
        gids.write(h, i, value)


def _file(tmp_path, nbytes, seed=0):
    data = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    path = tmp_path / "data.bin"
    data.tofile(path)
    return path, data


@pytest.mark.parametrize("dtype, backend", [(np.int8, "host"), (np.int16, "host"),
                                            (np.float32, "host"), (np.int64, "host"),
                                            (np.int16, "nvme"), (np.int64, "nvme")])
def test_writes_survive_eviction_and_flush_byte_for_byte(tmp_path, dtype, backend):
    """A cache of 3 pages over 12: most written pages are evicted dirty (written back by the
    kernel) before the flush writes the rest. Offset 40: pages are not file-aligned."""
    path, raw = _file(tmp_path, 40 + 12 * PAGE + 8)
    dtype = np.dtype(dtype)
    n = 12 * PAGE // dtype.itemsize
    model = raw.copy()
    view = model[40:40 + n * dtype.itemsize].view(dtype)
    rng = np.random.default_rng(1)
    with gids.Runtime(backend, cache_pages=3, page_size=PAGE) as rt:
        a = rt.open_array(path, dtype, shape=n, offset=40, mode="r+")
        for _ in range(3):
            probe = rng.integers(0, n, 30)     # reads own and earlier writes, evicting dirty
            np.testing.assert_array_equal(rt.gather(a, probe).copy_to_host(), view[probe])
            idx = rng.choice(n, 40, replace=False)
            vals = rng.integers(0, 100, 40).astype(dtype)
            rt.scatter(a, idx, vals)
            view[idx] = vals
        assert rt.flush() > 0                  # the last scatter's pages are still cached
        s = rt.stats()
        assert s.writebacks > 0 and s.flushed > 0
        assert s.bytes_written == (s.writebacks + s.flushed) * PAGE
        _check_nvme_writes(rt)
        assert path.read_bytes() == model.tobytes()   # durable now, byte for byte
        assert rt.flush() == 0                               # nothing dirty is left
    assert path.read_bytes() == model.tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_threads_write_distinct_bytes_of_one_page(tmp_path, backend):
    """64 threads, one byte each, all in one 8-byte-word-dense page: no update is lost."""
    path, raw = _file(tmp_path, 4 * PAGE)
    with gids.Runtime(backend, cache_pages=2, page_size=PAGE) as rt:
        a = rt.open_array(path, np.uint8, mode="r+")
        idx = np.arange(100, 164)
        vals = (np.arange(64) * 3 + 1).astype(np.uint8)
        rt.scatter(a, idx, vals)
        rt.gather(a, [PAGE + 1, 2 * PAGE + 1, 3 * PAGE + 1])   # evicts page 0, dirty
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), vals)
        _check_nvme_writes(rt)
    raw[idx] = vals
    assert path.read_bytes() == raw.tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_your_own_writes_in_one_kernel(backend):
    data = np.zeros(8 * PAGE // 4, dtype=np.int32)
    with gids.Runtime(backend, cache_pages=2, page_size=PAGE) as rt:
        a = rt.open_array(gids.MemoryStore(data, zero_copy=False), np.int32, mode="r+")
        idx = np.random.default_rng(2).choice(data.size, 48, replace=False)
        vals = np.arange(48, dtype=np.int32) + 1000
        out = cuda.device_array(48, np.int32)
        write_then_read[2, 32](a.handle, cuda.to_device(idx), cuda.to_device(vals), out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), vals)
        _check_nvme_writes(rt)
    expected = np.zeros_like(data)
    expected[idx] = vals
    np.testing.assert_array_equal(data, expected)   # closing flushed into the numpy array


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_backs_wait_for_their_staging_page(tmp_path, backend):
    """64 threads over one queue of 2 entries and a cache of 4 pages: write-backs and reads
    queue behind each other for the same few staging pages. A write-back must not copy its
    page into the staging page before the entry's previous request is done with it (that
    stored other pages' bytes, or fed a read the victim's, in 6 of 8 runs of one round)."""
    for seed in range(2):
        path, raw = _file(tmp_path, 24 + 40 * PAGE, seed=seed)
        model = raw.copy()
        view = model[24:].view(np.int64)
        rng = np.random.default_rng(seed + 10)
        with gids.Runtime(backend, cache_pages=4, page_size=PAGE, queues=1,
                          queue_depth=2) as rt:
            a = rt.open_array(path, np.int64, shape=view.size, offset=24, mode="r+")
            for _ in range(2):
                idx = rng.choice(view.size, 64, replace=False)
                vals = rng.integers(-(1 << 40), 1 << 40, 64)
                out = cuda.device_array(64, np.int64)
                write_then_read[2, 32](a.handle, cuda.to_device(idx), cuda.to_device(vals),
                                        out)
                rt.sync()
                np.testing.assert_array_equal(out.copy_to_host(), vals)
                view[idx] = vals
            assert rt.stats().writebacks > 0
            _check_nvme_writes(rt)
        assert path.read_bytes() == model.tobytes(), seed


@pytest.mark.parametrize("kind, backend", [("zero_copy", "host"), ("memory", "host"),
                                           ("mmap", "host"), ("zero_copy", "nvme"),
                                           ("mmap", "nvme")])
def test_other_stores_take_writes(tmp_path, kind, backend):
    path, raw = _file(tmp_path, 6 * PAGE)
    model = raw.view(np.int64).copy()
    with gids.Runtime(backend, cache_pages=2, page_size=PAGE) as rt:
        if kind == "mmap":
            a = rt.open_array(path, np.int64, mode="r+", storage="mmap")
        else:
            store = gids.MemoryStore(raw, zero_copy=kind == "zero_copy")
            a = rt.open_array(store, np.int64, mode="r+")
        idx = np.arange(0, model.size, 7)
        rt.scatter(a, idx, -idx)
        model[idx] = -idx
        probe = np.concatenate([idx, idx[:-1] + 1])      # the written and their neighbours
        np.testing.assert_array_equal(rt.gather(a, probe).copy_to_host(), model[probe])
        _check_nvme_writes(rt)
        rt.flush()
        got = np.fromfile(path, np.int64) if kind == "mmap" else raw.view(np.int64)
        np.testing.assert_array_equal(got, model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalidate_writes_back_and_exit_flushes(tmp_path, backend):
    path, raw = _file(tmp_path, 4 * PAGE)
    model = raw.view(np.int64).copy()
    with gids.Runtime(backend, cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        rt.scatter(a, [3, 70], [33, 77])
        model[[3, 70]] = [33, 77]
        rt.invalidate()          # written back, then dropped
        assert rt.gather(a, [3, 70]).copy_to_host().tolist() == [33, 77]
        rt.scatter(a, [200], [9])
        model[200] = 9
    np.testing.assert_array_equal(np.fromfile(path, np.int64), model)


def test_exit_with_an_exception_in_flight_does_not_flush(tmp_path):
    path, raw = _file(tmp_path, 4 * PAGE)
    with pytest.raises(RuntimeError, match="user code"), \
            gids.Runtime(cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        rt.scatter(a, [5], [12345])
        raise RuntimeError("user code")
    assert path.read_bytes() == raw.tobytes()   # documented: dirty pages are dropped


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inputs_get_clear_errors(tmp_path, backend):
    path, _ = _file(tmp_path, 4 * PAGE)
    with gids.Runtime(backend, cache_pages=4, page_size=PAGE) as rt:
        ro = rt.open_array(path, np.int32)                     # mode "r" is the default
        with pytest.raises(gids.ReadOnlyError, match="read-only"):
            rt.scatter(ro, [1], [2])                           # before any kernel
        _write_one[1, 1](ro.handle, 3, 4)                      # in a kernel: after it
        with pytest.raises(gids.ReadOnlyError, match="index 3 .*read-only"):
            rt.sync()
        rw = rt.open_array(path, np.int32, mode="r+")
        with pytest.raises(gids.ConfigError, match="dtype mismatch"):
            rt.scatter(rw, [1], np.array([1.5]))
        with pytest.raises(gids.ConfigError, match="do not fit"):
            rt.scatter(rw, [1], np.array([1 << 40]))
        with pytest.raises(gids.ConfigError, match="2 indices but 3 values"):
            rt.scatter(rw, [1, 2], [1, 2, 3])
        with pytest.raises(gids.ConfigError, match="device values"):
            rt.scatter(rw, [1], cuda.to_device(np.array([1], np.int64)))
        with pytest.raises(gids.IndexOutOfRangeError, match="index 512 "):
            rt.scatter(rw, [0, 512], [1, 2])
        _write_one[1, 1](rw.handle, -1, 4)
        with pytest.raises(gids.IndexOutOfRangeError):
            rt.sync()
        with pytest.raises(gids.ConfigError, match="mode"):
            rt.open_array(path, np.int32, mode="w")
        with pytest.raises(gids.ReadOnlyError, match="storage='memory'"):
            rt.open_array(path, np.int32, mode="r+", storage="memory")
        frozen = np.zeros(128, np.int32)
        frozen.flags.writeable = False
        with pytest.raises(gids.ReadOnlyError, match="cannot be written"):
            rt.open_array(frozen, mode="r+")
        with pytest.raises(gids.ReadOnlyError, match="cannot be written"):
            rt.open_array(gids.FileStore(path), np.int32, mode="r+")
        rt.scatter(rw, [7], [70])                              # still usable after all that
        assert rt.gather(rw, [7])[0] == 70


DURABILITY = textwrap.dedent('''
    import os, sys
    import numpy as np
    import gids
    path = sys.argv[1]
    rt = gids.Runtime(cache_pages=8, page_size=512)
    a = rt.open_array(path, np.int64, mode="r+")
    rt.scatter(a, [0, 64], [11, 22])
    rt.flush()                       # durable
    rt.scatter(a, [128], [33])       # only in the GPU cache
    os._exit(0)                      # no flush, no close
''')


def test_process_exit_without_flush_keeps_only_what_was_flushed(tmp_path):
    path = tmp_path / "d.bin"
    np.zeros(4 * 64, np.int64).tofile(path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", DURABILITY, str(path)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.fromfile(path, np.int64)
    assert got[[0, 64, 128]].tolist() == [11, 22, 0]
