"""The bulk page copy (kernels/bulk.py): warps of few lanes copy arrived pages by TMA on compute
capability 9.0 and up, and a page of a read-only zero-copy array starts its copy while its
request is out (the early copy). GPU tests (values, eviction, several warps of a block at once,
the fallbacks); in the simulator the counters (always 0 there) and which arrays may copy
early."""
import numpy as np
import pytest
from numba import cuda

import gids
from kernels.platform import BULK_COPY_LANES, SIMULATOR


def _bulk_expected():
    """Whether this GPU takes the bulk path (compute capability 9.0+, not turned off)."""
    return BULK_COPY_LANES > 0 and cuda.get_current_device().compute_capability >= (9, 0)


@gids.jit
def _lone_thread_reads(h, idx, out):
    """One thread reads ``idx`` in order: each read a miss in a warp of one lane."""
    for k in range(idx.size):
        out[k] = gids.read(h, idx[k])


@gids.jit
def _few_lanes_per_warp(h, idx, lanes, out):
    """Only the first ``lanes`` lanes of each warp read (thread k reads idx[k] for those): every
    warp of every block misses at once with a few lanes, so they contend for their block's
    buffer."""
    t = cuda.grid(1)
    if cuda.laneid < lanes:
        w = t // 32
        k = w * lanes + cuda.laneid
        if k < idx.size:
            out[k] = gids.read(h, idx[k])


@gids.jit
def _lone_thread_writes_then_reads(h, idx, values, out):
    for k in range(idx.size):
        gids.write(h, idx[k], values[k])
    for k in range(idx.size):
        out[k] = gids.read(h, idx[k])


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [512, 4096, 65536])
@pytest.mark.parametrize("zero_copy", [True, False])
def test_lone_thread_misses_under_eviction_read_the_right_values(page_size, zero_copy):
    """Pages larger than the 4 KiB buffer go in chunks; a cache of 32 slots (the least a GPU
    Runtime takes: one warp's pages) evicts all along."""
    epp = page_size // 8
    n_pages = 256
    data = np.random.default_rng(page_size).integers(0, 1 << 62, n_pages * epp, dtype=np.int64)
    pages = np.random.default_rng(1).permutation(np.repeat(np.arange(n_pages), 2))
    idx = pages * epp + np.random.default_rng(2).integers(0, epp, pages.size)
    with gids.Runtime(cache_pages=32, page_size=page_size, daemon_threads=1) as rt:
        a = rt.open_array(gids.MemoryStore(data, zero_copy=zero_copy), np.int64, shape=data.shape)
        out = cuda.device_array(idx.size, dtype=np.int64)
        _lone_thread_reads[1, 1](a.handle, cuda.to_device(idx), out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), data[idx])
        s = rt.stats()
        assert s.evictions > 0
        assert s.bulk_copies == (s.ios if _bulk_expected() else 0), s
        # Every page of a read-only zero-copy array that fits the buffer copies early.
        early = _bulk_expected() and zero_copy and page_size <= 4096
        assert s.early_copies == (s.ios if early else 0), s


@pytest.mark.gpu
@pytest.mark.parametrize("lanes", [1, 3, 8, 9])
def test_warps_of_a_block_missing_at_once_read_the_right_values(lanes):
    """8 warps per block, 16 blocks, each warp with ``lanes`` lanes reading distinct pages at
    once: they take turns at their block's buffer (or fall back); 9 lanes is past the
    threshold, so the warp copies."""
    epp = 512
    n_pages = 2048
    data = np.random.default_rng(lanes).integers(0, 1 << 62, n_pages * epp, dtype=np.int64)
    n_warps = 16 * 8
    pages = np.random.default_rng(3).permutation(n_pages)[:n_warps * lanes]
    idx = pages * epp + 5
    with gids.Runtime(cache_pages=64, page_size=4096, daemon_threads=4) as rt:
        a = rt.open_array(gids.MemoryStore(data), np.int64, shape=data.shape)
        out = cuda.device_array(idx.size, dtype=np.int64)
        _few_lanes_per_warp[16, 256](a.handle, cuda.to_device(idx), lanes, out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), data[idx])
        s = rt.stats()
        assert s.ios == idx.size and s.evictions > 0
        if _bulk_expected() and lanes <= BULK_COPY_LANES:
            assert 0 < s.bulk_copies <= s.ios, s
            assert 0 < s.early_copies <= s.bulk_copies, s   # a block's first takers
        else:
            assert s.bulk_copies == 0 and s.early_copies == 0, s


@pytest.mark.gpu
def test_zero_copy_source_at_an_8_byte_offset_falls_back_to_the_warp_copy():
    """A zero-copy page at an 8-byte but not 16-byte offset cannot be bulk copied."""
    data = np.random.default_rng(7).integers(0, 1 << 62, 128 * 512 + 1, dtype=np.int64)
    with gids.Runtime(cache_pages=32, page_size=4096, daemon_threads=1) as rt:
        a = rt.open_array(gids.MemoryStore(data), np.int64, offset=8, shape=(128 * 512,))
        idx = np.arange(0, 128 * 512, 512) + 3
        out = cuda.device_array(idx.size, dtype=np.int64)
        _lone_thread_reads[1, 1](a.handle, cuda.to_device(idx), out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), data[1:][idx])
        assert rt.stats().bulk_copies == 0 and rt.stats().early_copies == 0


@pytest.mark.gpu
def test_lone_thread_writes_under_eviction_read_back(tmp_path):
    """Dirty pages written back and loaded again by a lone lane (bulk copies both ways of a
    page's life but the write-back, which stays the warp's)."""
    n = 128 * 512
    path = tmp_path / "w.bin"
    np.zeros(n, dtype=np.int64).tofile(path)
    idx = np.random.default_rng(4).permutation(n)[:600]
    values = np.arange(1, idx.size + 1, dtype=np.int64)
    with gids.Runtime(cache_pages=32, page_size=4096, daemon_threads=1) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        out = cuda.device_array(idx.size, dtype=np.int64)
        _lone_thread_writes_then_reads[1, 1](a.handle, cuda.to_device(idx), cuda.to_device(values),
                                             out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), values)
        assert rt.stats().writebacks > 0
    expect = np.zeros(n, dtype=np.int64)
    expect[idx] = values
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.int64), expect)


def test_the_simulator_never_bulk_copies():
    if not SIMULATOR:
        pytest.skip("simulator-only check")
    data = np.arange(4 * 64, dtype=np.int64)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        np.testing.assert_array_equal(rt.gather(a, np.arange(0, data.size, 7)).copy_to_host(),
                                      data[::7])
        s = rt.stats()
        assert s.ios > 0 and s.bulk_copies == 0



@pytest.mark.gpu
def test_writable_and_emulated_arrays_copy_after_the_completion(tmp_path):
    """No early copy where the bytes may change (``mode="r+"``) or a modelled drive times the
    answer; their pages still go in bulk, after the completion, and read right."""
    data = np.random.default_rng(11).integers(0, 1 << 62, 64 * 512, dtype=np.int64)
    idx = np.arange(0, data.size, 512) + 7
    for options, mode in (({}, "r+"), ({"ssd": "p5800x"}, "r")):
        with gids.Runtime(cache_pages=32, page_size=4096, daemon_threads=1, **options) as rt:
            a = rt.open_array(gids.MemoryStore(data.copy()), np.int64, shape=data.shape,
                              mode=mode)
            out = cuda.device_array(idx.size, dtype=np.int64)
            _lone_thread_reads[1, 1](a.handle, cuda.to_device(idx), out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), data[idx])
            s = rt.stats()
            assert s.early_copies == 0 and s.bulk_copies == (s.ios if _bulk_expected() else 0), s


@pytest.mark.parametrize("offset, mode, options, early", [
    (0, "r", {}, True), (64, "r", {}, True), (8, "r", {}, False), (0, "r+", {}, False),
    (0, "r", {"ssd": "p5800x"}, False), (0, "r", {"backend": "nvme"}, False)])
def test_which_arrays_may_copy_early(offset, mode, options, early):
    """``early_base`` (the handle's word of page 0 in the zero-copy buffer) is set only for a
    read-only zero-copy array at a 16-byte offset of the host daemon's back end without SSD
    emulation; -1 elsewhere."""
    data = np.arange(4096, dtype=np.int64)
    with gids.Runtime(cache_pages=32, page_size=512, **options) as rt:
        a = rt.open_array(gids.MemoryStore(data), np.int64, offset=offset, shape=(1024,),
                          mode=mode)
        assert a.handle.early_base == (offset // 8 if early else -1)
        b = rt.open_array(gids.MemoryStore(data, zero_copy=False), np.int64, shape=(1024,))
        assert b.handle.early_base == -1


def test_a_store_written_through_another_array_copies_nothing_early():
    """Once an array of a store is writable, the store's bytes may change while kernels run:
    its read-only arrays, opened before or after, stop copying early."""
    data = np.arange(4096, dtype=np.int64)
    with gids.Runtime(cache_pages=32, page_size=512) as rt:
        store = gids.MemoryStore(data)
        before = rt.open_array(store, np.int64, shape=(1024,))
        assert before.handle.early_base == 0
        rt.open_array(store, np.int64, offset=8192, shape=(1024,), mode="r+")
        after = rt.open_array(store, np.int64, offset=16384, shape=(1024,))
        assert before.handle.early_base == -1 and after.handle.early_base == -1
