"""Page-level reads (``gids.pin_page``, ``pin_page_if_resident``, ``pinned``, ``unpin_page``,
``page_room``) in the simulator: spans across pages against numpy, pins that hold a page through
evictions, errors, no pin left behind; and the multi-lane paths with emulated 32-lane warps."""
import textwrap

import numpy as np
import pytest
from numba import cuda

import gids
from gids.errors import IndexOutOfRangeError
from tests.helpers import Warp32Script, check_warp32, random_file, started_early


@cuda.jit
def _copy_spans(h, starts, count, out, after):
    """Thread k copies elements starts[k] .. starts[k] + count - 1 into out[k, :], a page at a
    time: one pin per page, given back by ``unpin_page``, or with ``after`` by
    ``unpin_page_after`` passing the sum of the page's values (it depends on every value read)."""
    k = cuda.grid(1)
    if k < starts.size:
        i = starts[k]
        j = 0
        while j < count:
            at = gids.pin_page(h, i)
            if at < 0:
                return
            n = min(gids.page_room(h, i), count - j)
            total = out[k, 0] * 0
            for m in range(n):
                x = gids.pinned(h, at + m)
                out[k, j + m] = x
                if after:
                    total += x
            if after:
                gids.unpin_page_after(h, i, at, total)
            else:
                gids.unpin_page(h, i, at)
            i += n
            j += n


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
@pytest.mark.parametrize("page_size, offset", [(512, 0), (4096, 8)])
def test_spans_across_pages_match_numpy(tmp_path, dtype, page_size, offset):
    raw = random_file(tmp_path / "d.bin", 6 * page_size + 100, seed=page_size + offset)
    n = (raw.size - offset) // np.dtype(dtype).itemsize
    ref = raw[offset:offset + n * np.dtype(dtype).itemsize].view(dtype)
    per_page = page_size // np.dtype(dtype).itemsize
    count = per_page + per_page // 2 + 3        # every span crosses at least one page boundary
    starts = np.random.default_rng(1).integers(0, n - count, 6)
    starts[0] = 0
    with gids.Runtime(cache_pages=2, page_size=page_size) as rt:
        a = rt.open_array(tmp_path / "d.bin", dtype, shape=n, offset=offset)
        out = cuda.to_device(np.zeros((starts.size, count), dtype=dtype))
        _copy_spans[1, starts.size](a.handle, cuda.to_device(starts), count, out, False)
        rt.sync()
        want = np.stack([ref[s:s + count] for s in starts])
        np.testing.assert_array_equal(out.copy_to_host().view(np.uint8), want.view(np.uint8))
        stats = rt.stats()
        assert stats.evictions > 0          # 2 slots, 6 spans over 6 pages
        # No pin was left behind: every slot can still be evicted for other pages.
        idx = np.arange(0, n, per_page)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])


def test_unpin_page_after_gives_every_pin_back():
    data = np.random.default_rng(5).integers(0, 1 << 40, 6 * 64, dtype=np.int64)   # 6 pages
    starts = np.array([0, 10, 100, 200, 290, 250])
    count = 90                           # spans cross page boundaries; 2 slots, 6 pages
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        out = cuda.to_device(np.zeros((starts.size, count), dtype=np.int64))
        _copy_spans[1, starts.size](a.handle, cuda.to_device(starts), count, out, True)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), np.stack([data[s:s + count]
                                                                    for s in starts]))
        assert rt.stats().evictions > 0
        # No reference left: every page's count is back at zero.
        state = rt._page_state.copy_to_host()[:rt._n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()
        # Each resident page's word holds the slot that holds it (the slot table agrees), and
        # a page not resident has no slot in its word.
        valid = (state & gids.layout.PAGE_VALID) != 0
        slots = (state >> gids.layout.PAGE_SLOT_SHIFT).astype(np.int64)
        slot_page = rt._slot_page.copy_to_host()
        assert valid.any() and not slots[~valid].any()
        np.testing.assert_array_equal(slot_page[slots[valid]], np.flatnonzero(valid))


@cuda.jit
def _hold_one_read_others(h, first, others, out):
    """Pin element ``first``'s page, read ``others`` (evicting around the pin), then read the
    pinned page again."""
    at = gids.pin_page(h, first)
    out[0] = gids.pinned(h, at)
    for m in range(others.size):
        out[1 + m] = gids.read(h, others[m])
    out[1 + others.size] = gids.pinned(h, at)
    gids.unpin_page(h, first, at)


def test_a_pinned_page_stays_while_others_are_evicted():
    data = np.random.default_rng(2).integers(0, 1 << 60, 8 * 64, dtype=np.int64)   # 8 pages
    others = np.arange(64, data.size, 64)      # one element of each other page, twice the cache
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        out = cuda.to_device(np.zeros(others.size + 2, dtype=np.int64))
        _hold_one_read_others[1, 1](a.handle, 5, cuda.to_device(others), out)
        rt.sync()
        got = out.copy_to_host()
        assert got[0] == got[-1] == data[5]
        np.testing.assert_array_equal(got[1:-1], data[others])
        assert rt.stats().evictions >= others.size - 1


@cuda.jit
def _pin_out_of_range(h, i, out):
    out[0] = gids.pin_page(h, i)
    gids.unpin_page(h, i, out[0])       # a lane without a pin passes -1: nothing to give back


def test_pin_out_of_range_returns_minus_one_and_raises_after_the_kernel():
    data = np.arange(1000, dtype=np.int64)
    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(data)
        out = cuda.to_device(np.zeros(1, dtype=np.int64))
        _pin_out_of_range[1, 1](a.handle, data.size, out)
        with pytest.raises(IndexOutOfRangeError):
            rt.sync()
        assert out.copy_to_host()[0] == -1
        np.testing.assert_array_equal(rt.gather(a, [0, 999]).copy_to_host(), [0, 999])


@cuda.jit
def _pin_if_resident(h, idx, out):
    """Thread k: ``pin_page_if_resident(idx[k])``, the element read under the pin (-7 without
    one) and the pin given back."""
    k = cuda.grid(1)
    if k < idx.size:
        at = gids.pin_page_if_resident(h, idx[k])
        out[k, 0] = at
        out[k, 1] = gids.pinned(h, at) if at >= 0 else -7
        gids.unpin_page_after(h, idx[k], at, out[k, 1])


def test_pin_page_if_resident_pins_only_what_is_cached():
    """Pages not resident: -1, nothing loaded, no reference left, no error (even out of range:
    a pin_page of it records that). Once loaded: the page pinned, its element read, a hit."""
    data = np.random.default_rng(9).integers(0, 1 << 50, 6 * 64, dtype=np.int64)   # 6 pages
    idx = np.array([5, 64 * 2 + 3, 64 * 5 + 63, data.size, -1])
    with gids.Runtime(cache_pages=4, page_size=512) as rt:
        a = rt.open_array(data)
        out = cuda.to_device(np.zeros((idx.size, 2), dtype=np.int64))
        _pin_if_resident[1, idx.size](a.handle, cuda.to_device(idx), out)
        rt.sync()
        assert (out.copy_to_host() == [-1, -7]).all()
        s = rt.stats()
        assert s.lookups == 0 and s.ios == 0 and a.resident_pages() == 0
        state = rt._page_state.copy_to_host()[:rt._n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()

        rt.gather(a, idx[:2])                       # pages 0 and 2 resident
        rt.reset_stats()
        _pin_if_resident[1, idx.size](a.handle, cuda.to_device(idx), out)
        rt.sync()
        got = out.copy_to_host()
        assert (got[:2, 0] >= 0).all() and got[:2, 1].tolist() == data[idx[:2]].tolist()
        assert (got[2:] == [-1, -7]).all()
        s = rt.stats()
        assert s.hits == 2 and s.misses == 0 and s.ios == 0
        state = rt._page_state.copy_to_host()[:rt._n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()


def test_page_room_is_what_a_pin_covers():
    @cuda.jit
    def rooms(h, idx, out):
        k = cuda.grid(1)
        if k < idx.size:
            out[k] = gids.page_room(h, idx[k])

    with gids.Runtime(cache_pages=2, page_size=512) as rt:
        a = rt.open_array(np.zeros(300, dtype=np.int32))          # 128 per page
        idx = np.array([0, 1, 127, 128, 299])
        out = cuda.to_device(np.zeros(idx.size, dtype=np.int64))
        rooms[1, idx.size](a.handle, cuda.to_device(idx), out)
        rt.sync()
        # The last page's room runs to the page's end, past the array's: read what you own.
        assert out.copy_to_host().tolist() == [128, 127, 1, 128, 128 - 299 % 128]


WARP_SCRIPT = textwrap.dedent('''
    @cuda.jit
    def whole_page_per_warp(h, pages, out):
        # Every lane pins the same page (one lookup), lanes copy it strided, then unpin.
        w = cuda.grid(1) // 32
        lane = cuda.threadIdx.x % 32
        i = pages[w] * 64
        at = gids.pin_page(h, i)
        m = lane
        while m < 64:
            out[w, m] = gids.pinned(h, at + m)
            m += 32
        gids.unpin_page(h, i, at)

    @cuda.jit
    def a_page_per_lane(h, idx, out, if_resident):
        # Lanes on several pages: one pin per distinct page, each lane reads its own element
        # (with if_resident, only where its page is in the cache: -1 elsewhere).
        k = cuda.grid(1)
        if if_resident:
            at = gids.pin_page_if_resident(h, idx[k])
        else:
            at = gids.pin_page(h, idx[k])
        out[k] = gids.pinned(h, at) if at >= 0 else -1
        gids.unpin_page(h, idx[k], at)

    data = np.random.default_rng(0).integers(0, 1 << 62, 64 * 64, dtype=np.int64)  # 64 pages
    with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32, timeout=60) as rt:
        a = rt.open_array(gids.MemoryStore(data, zero_copy=False), np.int64, shape=data.shape)
        pages = np.array([3, 3, 40, 7], dtype=np.int64)
        out = cuda.to_device(np.zeros((4, 64), np.int64))
        rt.reset_stats()
        whole_page_per_warp[1, 128](a.handle, cuda.to_device(pages), out)
        rt.sync()
        assert (out.copy_to_host() == data.reshape(64, 64)[pages]).all()
        s = rt.stats()
        assert s.lookups == 4 and s.ios == 3, s       # one lookup per warp; page 3 loaded once
        # One warp at a time: a warp whose lanes pin up to 32 pages holds some of them while
        # the others load, so warps pinning many pages each need that many slots at once.
        for seed in range(2):
            idx = np.random.default_rng(seed).integers(0, data.size, 32)
            out = cuda.to_device(np.full(32, -1, np.int64))
            a_page_per_lane[1, 32](a.handle, cuda.to_device(idx), out, False)
            rt.sync()
            assert (out.copy_to_host() == data[idx]).all(), seed
        # no pin left behind: a sweep over every page (twice the cache) still finds slots
        idx = np.arange(0, data.size, 64)
        assert (rt.gather(a, idx).copy_to_host() == data[idx]).all()
        # pin_page_if_resident with lanes on several pages: nothing loads in the kernel, so
        # exactly the lanes whose page was VALID before it pin and read it, the others get -1;
        # no reference is left.
        rt.gather(a, np.arange(0, 8 * 64, 16))           # 32 lanes: a whole warp
        valid = (rt._page_state.copy_to_host()[:rt._n_pages] & gids.layout.PAGE_VALID) != 0
        idx = np.random.default_rng(3).integers(0, data.size, 32)
        want = np.where(valid[idx // 64], data[idx], -1)
        assert (want == -1).any() and (want != -1).any()
        out = cuda.to_device(np.full(32, -2, np.int64))
        a_page_per_lane[1, 32](a.handle, cuda.to_device(idx), out, True)
        rt.sync()
        assert (out.copy_to_host() == want).all()
        state = rt._page_state.copy_to_host()[:rt._n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()
    print("PAGES32_OK")
''')
WARP_SCRIPT_RUN = Warp32Script(WARP_SCRIPT)


@started_early(WARP_SCRIPT_RUN)
def test_emulated_warps_pin_pages():
    check_warp32(WARP_SCRIPT_RUN.result(), "PAGES32_OK")
