"""Window hints from the host: Runtime.hold / release / prefetch (gids/window.py), against numpy."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from numba import cuda

import gids
from gids.staging import Staging
from gids.window import SEEN, distinct_unheld, settle
from tests.helpers import random_file

PAGE = 512
ELEMS = PAGE // 8      # int64 elements per page


@pytest.fixture
def data(tmp_path):
    raw = random_file(tmp_path / "d.bin", 64 * PAGE, seed=np.random.SeedSequence().entropy % 2**32)
    return tmp_path / "d.bin", raw.view(np.int64)


def _pages_read(rt, a, ref, pages, per_page=8):
    """Gather the first, the last and random elements of each of ``pages`` (``per_page`` in
    all) and check them; return the gather's stats. A page's every element is not needed: a
    misplaced page shows at its ends, and fewer lanes per page contend less for the slots."""
    pages = np.asarray(pages)
    offsets = np.random.default_rng().integers(0, ELEMS, (pages.size, per_page))
    offsets[:, 0], offsets[:, -1] = 0, ELEMS - 1
    idx = (pages[:, None] * ELEMS + offsets).ravel()
    before = rt.stats()
    got = rt.gather(a, idx).copy_to_host()
    np.testing.assert_array_equal(got, ref[idx])
    return rt.stats() - before


def test_held_pages_survive_pressure_and_hit(data):
    path, ref = data
    rng = np.random.default_rng()
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        held = rng.choice(64, 8, replace=False)        # half the cache: the limit
        with rt.hold(a, held * ELEMS + rng.integers(0, ELEMS, 8)).wait() as hold:
            assert rt.held_pages == 8 and hold.n_pages == 8
            others = np.setdiff1d(np.arange(64), held)
            _pages_read(rt, a, ref, others)             # evicts everything it can
            s = _pages_read(rt, a, ref, held)
            assert s.misses == 0 and s.ios == 0 and s.hits > 0
        assert not hold.held and rt.held_pages == 0
        assert rt.stats().held_pages == 8
        _pages_read(rt, a, ref, np.arange(64))          # released pages can go again
        assert rt.stats().evictions > 0


def test_prefetch_loads_pages_that_later_reads_hit(data):
    path, ref = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        pages = np.random.default_rng().choice(64, 10, replace=False)
        rt.prefetch(a, pages * ELEMS + 3, stream=gids.side_stream())
        rt.sync()
        assert rt.stats().prefetched == 10 and rt.held_pages == 0
        s = _pages_read(rt, a, ref, pages)
        assert s.misses == 0 and s.ios == 0
        # device indices, repeated ones too
        more = np.setdiff1d(np.arange(64), pages)[:4]
        rt.prefetch(a, cuda.to_device(np.repeat(more * ELEMS, 3)))
        rt.sync()
        assert _pages_read(rt, a, ref, more).misses == 0


def test_hold_limit_and_errors(data):
    path, ref = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        first = rt.hold(a, np.arange(6) * ELEMS)
        with pytest.raises(gids.HoldLimitError, match="at most 8"):
            rt.hold(a, np.arange(4, 10) * ELEMS)          # 4 new: 10 > 8
        assert rt.held_pages == 6                         # nothing of it was held
        again = rt.hold(a, np.arange(4, 8) * ELEMS)       # 2 new: 8, and pages held twice
        assert rt.held_pages == 8
        first.release()
        assert rt.held_pages == 4                         # 4, 5 still held by `again`
        with pytest.raises(gids.NotHeldError):
            rt.release(first)
        with pytest.raises(gids.NotHeldError):
            rt.release("not a hold")
        with pytest.raises(gids.IndexOutOfRangeError):
            rt.hold(a, [ref.size])
        with pytest.raises(gids.IndexOutOfRangeError):
            rt.prefetch(a, [-1])
        with pytest.raises(gids.IndexOutOfRangeError, match=f"index {ref.size + 5} "):
            rt.hold(a, cuda.to_device(np.array([3, ref.size + 5], dtype=np.int64)))
        with pytest.raises(gids.ConfigError, match="1-D int64"):
            rt.prefetch(a, cuda.to_device(np.array([3], dtype=np.int32)))
        rt.release(again)
        state = rt._page_state.copy_to_host()[:64]
        assert not (state & gids.layout.PAGE_REF_MASK).any()   # every pin given back


def _launched(monkeypatch):
    """Record the window kernels' launches (names) from now on; they still run."""
    import gids.kernels_host as kh
    launched = []
    for name in ("hold_kernel", "release_kernel", "prefetch_kernel"):
        kernel = getattr(kh, name)

        class Recorded:
            def __getitem__(self, config, kernel=kernel, name=name):
                launched.append(name)
                return kernel[config]
        monkeypatch.setattr(kh, name, Recorded())
    return launched


@pytest.mark.parametrize("bad", [[3, 64 * ELEMS], [3, -1], np.array([3, 2**63 + 5], np.uint64),
                                 np.array([5, -2], np.int8)])
def test_errors_before_any_kernel(data, monkeypatch, bad):
    """An index out of range (any integer dtype: a uint64 above 2**63 - 1 is not wrapped) and a
    hold over the limit are raised before a kernel is launched, leaving the counts as they
    were (no page left marked)."""
    path, _ = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        kept = rt.hold(a, np.arange(3) * ELEMS)
        counts = rt._window._counts.copy()
        launched = _launched(monkeypatch)
        for call in (rt.hold, rt.prefetch):
            with pytest.raises(gids.IndexOutOfRangeError, match=f"index {int(bad[1])} "):
                call(a, bad)
        with pytest.raises(gids.HoldLimitError):
            rt.hold(a, np.r_[np.arange(20, 26), np.arange(20, 26)][::-1] * ELEMS)
        assert launched == [] and rt.held_pages == 3
        np.testing.assert_array_equal(rt._window._counts, counts)
        kept.release()
        assert launched == ["release_kernel"]


def test_unsorted_repeated_indices(data):
    """Holds and prefetches of unsorted indices naming pages again: a hold's pages are the
    distinct ones in the order first named, each pinned once; values read through the cache
    match the file; a prefetch loads each page (its kernel skips a page named by the index
    before it, so sorted indices count each page once)."""
    path, ref = data
    rng = np.random.default_rng()
    with gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        pages = rng.choice(64, 12, replace=False)
        named = pages[rng.integers(0, 12, 40)]
        named = np.r_[pages, named][rng.permutation(52)]
        idx = named * ELEMS + rng.integers(0, ELEMS, named.size)
        _, first = np.unique(named, return_index=True)
        with rt.hold(a, idx).wait() as hold:
            np.testing.assert_array_equal(hold.pages, named[np.sort(first)])
            assert hold.n_pages == 12 and rt.held_pages == 12
            assert rt.stats().held_pages == 12
            assert _pages_read(rt, a, ref, pages).misses == 0
        assert rt.held_pages == 0 and hold.pages.size == 0
        assert not (rt._window._counts).any()
        rt.invalidate()
        rt.reset_stats()
        rt.prefetch(a, np.sort(idx))
        rt.sync()
        assert rt.stats().prefetched == 12
        assert _pages_read(rt, a, ref, pages).misses == 0
        rt.invalidate()
        rt.reset_stats()
        rt.prefetch(a, idx.astype(np.uint32))
        rt.sync()
        assert 12 <= rt.stats().prefetched <= idx.size
        assert _pages_read(rt, a, ref, pages).misses == 0
        assert not (rt._page_state.copy_to_host()[:64] & gids.layout.PAGE_REF_MASK).any()


def test_hold_pins_land_in_its_buffer(data):
    """The hold kernel writes each page's pin after the pages in its buffer (poisoned first):
    every slot a pin (>= 0), and release gives every one back."""
    path, _ = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        buf = rt._staging.take(2 * 5)
        buf.device.copy_to_device(np.full(buf.size, -99, dtype=np.int64))
        rt._staging.give_back(buf)
        hold = rt.hold(a, np.array([9, 3, 9, 1, 7, 3, 2]) * ELEMS).wait()
        assert hold._buffer is buf
        got = buf.device.copy_to_host()
        np.testing.assert_array_equal(got[:5], [9, 3, 1, 7, 2])
        assert (got[5:10] >= 0).all() and (got[10:] == -99).all()
        hold.release()
        rt.sync()
        assert not (rt._page_state.copy_to_host()[:64] & gids.layout.PAGE_REF_MASK).any()


def test_invalidate_releases_every_hold(data):
    path, ref = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        hold = rt.hold(a, np.arange(3) * ELEMS)
        rt.invalidate()
        assert not hold.held and rt.held_pages == 0
        with pytest.raises(gids.NotHeldError):
            hold.release()
        with hold:           # leaving the block does not release it again
            pass
        _pages_read(rt, a, ref, np.arange(64))
        assert not (rt._page_state.copy_to_host()[:64] & gids.layout.PAGE_REF_MASK).any()


def test_close_releases_holds(data):
    path, _ = data
    rt = gids.Runtime(cache_pages=16, page_size=PAGE)
    a = rt.open_array(path, np.int64)
    hold = rt.hold(a, [0, ELEMS])
    rt.close()
    assert not hold.held
    with pytest.raises(gids.NotHeldError):
        hold.release()


def test_hold_fraction_setting(data):
    path, _ = data
    with gids.defaults.set(hold_fraction=0.25), gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        with pytest.raises(gids.HoldLimitError):
            rt.hold(a, np.arange(5) * ELEMS)
        rt.hold(a, np.arange(4) * ELEMS).release()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(0, 2**12), max_size=200), shift=st.integers(0, 9),
       base=st.integers(0, 50), held=st.lists(st.integers(0, 2**12), max_size=40))
def test_distinct_unheld_against_numpy(values, shift, base, held):
    """The hold's one pass: the distinct pages in first-occurrence order, how many no hold
    holds, and the counts unchanged but for marks that settle clears (and +1 / -1 after)."""
    elems = np.array(values, dtype=np.int64)
    keep = elems.copy()
    counts = np.zeros(base + (2**12 >> shift) + 1, dtype=np.int32)
    np.add.at(counts, base + (np.array(held, dtype=np.int64) >> shift), 1)
    before = counts.copy()
    out = np.full(elems.size + 1, -7, dtype=np.int64)       # poisoned
    m, new = distinct_unheld(elems, shift, base, counts, out)
    pages = elems >> shift
    _, first = np.unique(pages, return_index=True)
    want = pages[np.sort(first)]
    np.testing.assert_array_equal(out[:m], want)
    assert (out[m:] == -7).all()
    assert new == int(np.count_nonzero(before[base + want] == 0))
    np.testing.assert_array_equal(elems, keep)           # the caller's indices untouched
    assert ((counts & SEEN) != 0).sum() == m
    assert settle(out[:m], base, counts, 0) == new       # marks cleared, nothing added
    np.testing.assert_array_equal(counts, before)
    assert settle(out[:m], base, counts, 1) == 0
    after = before.copy()
    after[base + want] += 1
    np.testing.assert_array_equal(counts, after)
    assert settle(out[:m], base, counts, -1) == new
    np.testing.assert_array_equal(counts, before)


def test_holds_of_two_arrays_counted_per_page(data, tmp_path):
    """Holds over two arrays (global pages differ by the second's page base), overlapping, in
    any release order: held_pages and the limit against a model of distinct (array, page)."""
    path, ref = data
    other = random_file(tmp_path / "e.bin", 40 * PAGE, seed=7).view(np.int64)
    rng = np.random.default_rng()
    with gids.Runtime(cache_pages=64, page_size=PAGE) as rt:
        arrays = [rt.open_array(path, np.int64), rt.open_array(tmp_path / "e.bin", np.int64)]
        limit = rt._window.hold_limit
        holds = []                       # (Hold, set of (array number, page))
        for _ in range(40):
            if holds and rng.random() < 0.4:
                hold, _ = holds.pop(rng.integers(len(holds)))
                hold.release()
            else:
                which = int(rng.integers(2))
                a = arrays[which]
                pages = rng.integers(0, a.n_pages, rng.integers(1, 12))
                idx = rng.permutation(pages * ELEMS + rng.integers(0, ELEMS, pages.size))
                want = {(which, int(p)) for p in pages}
                held = set().union(*(w for _, w in holds))
                if len(held | want) > limit:
                    with pytest.raises(gids.HoldLimitError):
                        rt.hold(a, idx)
                else:
                    hold = rt.hold(a, idx)
                    assert hold.n_pages == len(want)
                    holds.append((hold, want))
            assert rt.held_pages == len(set().union(*(w for _, w in holds)) if holds else set())
        for which, a, values in ((0, arrays[0], ref), (1, arrays[1], other)):
            pages = sorted(p for _, w in holds for (n, p) in w if n == which)
            if pages:
                idx = np.array(pages) * ELEMS + 1
                before = rt.stats()
                np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), values[idx])
                assert (rt.stats() - before).misses == 0
        for hold, _ in holds:
            hold.release()
        assert rt.held_pages == 0
        assert not (rt._page_state.copy_to_host() & gids.layout.PAGE_REF_MASK).any()


def test_staging_buffers_are_reused():
    """A buffer given back is taken again (no allocation per call), the smallest that fits;
    its upload lands where asked."""
    pool = Staging()
    s = cuda.stream()
    first = pool.take(100)
    assert first.size == 1024
    values = np.random.default_rng().integers(-2**62, 2**62, 100)
    view = first.upload(values, s, at=7)
    np.testing.assert_array_equal(view.copy_to_host(), values)
    np.testing.assert_array_equal(first.device.copy_to_host()[7:107], values)
    pool.give_back(first, s)
    s.synchronize()
    big = pool.take(3000)
    assert big is not first and big.size == 4096
    pool.give_back(big, s)
    s.synchronize()
    assert pool.take(1000) is first and pool.take(1000) is big


@pytest.mark.gpu
def test_gpu_staging_copies_land_where_asked():
    """On the GPU a buffer's copy is the driver's call on the buffer itself (no view): at 0
    and at an offset, on a side stream, only the asked-for elements change."""
    pool = Staging()
    s = gids.side_stream()
    buf = pool.take(3000)
    buf.device.copy_to_device(np.full(buf.size, -5, dtype=np.int64))
    rng = np.random.default_rng()
    first = rng.integers(-2**62, 2**62, 1000)
    second = rng.integers(-2**62, 2**62, 333)
    buf.host[:1000] = first
    buf.send(s, 1000)
    view = buf.upload(second, s, at=1500)
    s.synchronize()
    got = buf.device.copy_to_host()
    np.testing.assert_array_equal(got[:1000], first)
    np.testing.assert_array_equal(got[1500:1833], second)
    np.testing.assert_array_equal(view.copy_to_host(), second)
    assert (got[1000:1500] == -5).all() and (got[1833:] == -5).all()


def test_hold_and_prefetch_reuse_their_buffers(data):
    path, _ = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        made = []
        take = rt._window._staging.take
        rt._window._staging.take = lambda n: made.append(take(n)) or made[-1]
        for k in range(6):
            with rt.hold(a, np.arange(k, k + 4) * ELEMS):
                rt.prefetch(a, np.arange(20 + k, 24 + k) * ELEMS)
            rt.sync()
        assert len({id(b) for b in made}) <= 3
        assert rt.stats().prefetched == 6 * 4 and rt.stats().held_pages == 6 * 4


@pytest.mark.gpu
def test_gpu_hold_and_prefetch_then_hit(tmp_path):
    raw = random_file(tmp_path / "d.bin", 16 << 20, seed=np.random.SeedSequence().entropy % 2**32)
    ref = raw.view(np.int64)
    elems = 4096 // 8
    with gids.Runtime(cache_bytes=2 << 20, page_size=4096) as rt:    # 512 pages of 4096
        a = rt.open_array(tmp_path / "d.bin", np.int64)
        pages = np.random.default_rng().choice(a.n_pages, 256, replace=False)
        with rt.hold(a, pages * elems, stream=gids.side_stream()).wait():
            rt.gather(a, np.arange(0, ref.size, elems))               # every page, under pressure
            rt.reset_stats()
            idx = (pages[:, None] * elems + np.arange(0, elems, 7)).ravel()
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
            assert rt.stats().misses == 0
        more = np.setdiff1d(np.arange(a.n_pages), pages)[:200]
        rt.prefetch(a, more * elems, stream=gids.side_stream())
        rt.sync()
        rt.reset_stats()
        idx = (more[:, None] * elems + 3).ravel()
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])
        assert rt.stats().misses == 0
        state = rt._page_state.copy_to_host()[:a.n_pages]
        assert not (state & (gids.layout.PAGE_BUSY | gids.layout.PAGE_REF_MASK)).any()


@pytest.mark.gpu
def test_gpu_stream_ordered_window_loop(tmp_path):
    """The bench's loop with no wait on the host: batch k + 1 held (or prefetched) on a side
    stream after an event for batch k - 1's read, whose hold is released there first; reads on
    another stream. Every value right, every pin given back."""
    raw = random_file(tmp_path / "d.bin", 8 << 20, seed=np.random.SeedSequence().entropy % 2**32)
    ref = raw.view(np.int64)
    elems, batch = 4096 // 8, 128
    rng = np.random.default_rng()
    with gids.Runtime(cache_pages=4 * batch, page_size=4096) as rt:
        a = rt.open_array(tmp_path / "d.bin", np.int64)
        n_batches = a.n_pages // batch - 1
        pages = rng.permutation(a.n_pages)[:(n_batches + 1) * batch].reshape(-1, batch)
        idx = [np.sort(p * elems + rng.integers(0, elems, batch)) for p in pages]
        main, side = gids.side_stream(), gids.side_stream()
        outs = [cuda.device_array(batch, dtype=np.int64) for _ in idx]
        d_idx = [cuda.to_device(i) for i in idx]
        loaded = [cuda.event(timing=False) for _ in idx]
        read = [cuda.event(timing=False) for _ in idx]
        for mode in ("hold", "prefetch"):
            rt.invalidate()
            holds = {}

            def ahead(k, mode=mode, holds=holds):
                if mode == "hold":
                    holds[k] = rt.hold(a, idx[k], stream=side)
                else:
                    rt.prefetch(a, idx[k], stream=side)
                loaded[k].record(side)

            ahead(0)
            for k in range(n_batches):
                if k:
                    read[k - 1].wait(side)
                    if mode == "hold":
                        holds.pop(k - 1).release()
                ahead(k + 1)
                loaded[k].wait(main)
                _read_kernel[(batch + 127) // 128, 128, main](a.handle, d_idx[k], outs[k])
                read[k].record(main)
            main.synchronize()
            for hold in holds.values():
                hold.release()
            rt.sync()
            for k in range(n_batches):
                np.testing.assert_array_equal(outs[k].copy_to_host(), ref[idx[k]])
            assert rt.held_pages == 0
            state = rt._page_state.copy_to_host()[:a.n_pages]
            assert not (state & gids.layout.PAGE_REF_MASK).any()


@gids.jit
def _read_kernel(h, idx, out):
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


# --- a state machine: holds, prefetches, reads, writes, invalidate, flush,
# against a numpy model of the file and a model of what is held --------------------------------

N_PAGES = 24
pages_st = st.lists(st.integers(0, N_PAGES - 1), min_size=1, max_size=5)


class WindowMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.TemporaryDirectory()
        self.path = f"{self.dir.name}/d.bin"
        self.model = np.random.default_rng().integers(0, 2**62, N_PAGES * ELEMS)
        self.model.tofile(self.path)
        self.rt = gids.Runtime(cache_pages=12, page_size=PAGE)
        self.a = self.rt.open_array(self.path, np.int64, mode="r+")
        self.holds = []          # (Hold, set of pages)

    def _held(self):
        return set().union(*(p for _, p in self.holds)) if self.holds else set()

    @rule(pages=pages_st)
    def hold(self, pages):
        want = set(pages)
        if len(self._held() | want) > self.rt._window.hold_limit:
            with pytest.raises(gids.HoldLimitError):
                self.rt.hold(self.a, np.array(pages) * ELEMS)
        else:
            self.holds.append((self.rt.hold(self.a, np.array(pages) * ELEMS + 1), want))

    @rule(which=st.integers(0, 7), twice=st.booleans())
    def release(self, which, twice):
        if not self.holds:
            return
        hold, _ = self.holds.pop(which % len(self.holds))
        hold.release()
        if twice:
            with pytest.raises(gids.NotHeldError):
                self.rt.release(hold)

    @rule(pages=pages_st, device=st.booleans())
    def prefetch(self, pages, device):
        idx = np.array(pages, dtype=np.int64) * ELEMS + 2
        self.rt.prefetch(self.a, cuda.to_device(idx) if device else idx)   # device indices too
        self.rt.sync()

    @rule(pages=pages_st)
    def read_held_hit(self, pages):
        """Every read right; reads of held pages hit."""
        idx = (np.array(pages)[:, None] * ELEMS + np.arange(0, ELEMS, 9)).ravel()
        np.testing.assert_array_equal(self.rt.gather(self.a, idx).copy_to_host(), self.model[idx])
        held = sorted(self._held())
        if held:
            before = self.rt.stats()
            idx = np.array(held) * ELEMS + 5
            np.testing.assert_array_equal(self.rt.gather(self.a, idx).copy_to_host(),
                                          self.model[idx])
            assert (self.rt.stats() - before).misses == 0

    @rule(pages=pages_st, value=st.integers(-2**40, 2**40))
    def write(self, pages, value):
        idx = np.unique(np.array(pages) * ELEMS + 7)
        self.rt.scatter(self.a, idx, np.full(idx.size, value))
        self.model[idx] = value

    @rule()
    def invalidate(self):
        self.rt.invalidate()
        for hold, _ in self.holds:
            assert not hold.held
        self.holds = []

    @rule()
    def flush(self):
        self.rt.flush()
        np.testing.assert_array_equal(np.fromfile(self.path, np.int64), self.model)

    @invariant()
    def held_pages_counted(self):
        assert self.rt.held_pages == len(self._held())

    def teardown(self):
        self.rt.close()
        np.testing.assert_array_equal(np.fromfile(self.path, np.int64), self.model)
        self.dir.cleanup()


WindowMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=10, deadline=None)
test_window_state_machine = WindowMachine.TestCase


def test_window_host_harness_runs_and_puts_the_kernels_back(capsys):
    """``python -m workloads.window_host`` (the calls' Python cost, kernels and copies
    stubbed) runs, and leaves the kernels and the simulator's copy as they were."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    import gids.kernels_host as kh
    from workloads import window_host
    before = [getattr(kh, name) for name in window_host.KERNELS], FakeCUDAArray.copy_to_device
    assert window_host.main(["--calls", "4", "--batch-pages", "8,16"]) == 0
    out = capsys.readouterr().out
    assert "prefetch, 16 pages:" in out and "hold + release, 8 pages:" in out
    assert ([getattr(kh, name) for name in window_host.KERNELS],
            FakeCUDAArray.copy_to_device) == before
