"""Device prefetch (gids.prefetch, kernels/prefetch.py): finished by readers, retired when nobody
reads it, bounded, and a no-op where it cannot work; values always against numpy."""
import numpy as np
import pytest
from numba import cuda

import gids
from tests.helpers import random_file, run_with_warp32

PAGE = 512
ELEMS = PAGE // 8


@cuda.jit
def _prefetch(h, idx):
    k = cuda.grid(1)
    if k < idx.size:
        gids.prefetch(h, idx[k])


@cuda.jit
def _read(h, idx, out):
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


@cuda.jit
def _prefetch_next_then_read(h, idx, nxt, out):
    """Each thread prefetches nxt[k] and then reads idx[k] (the next batch's page while this
    one is read)."""
    k = cuda.grid(1)
    if k < idx.size:
        gids.prefetch(h, nxt[k])
        out[k] = gids.read(h, idx[k])


def _grid(n):
    return max(1, -(-n // 32)), 32


def _run(kernel, rt, *args):
    n = args[1].size
    kernel[_grid(n)](*args)
    rt.sync()


def _gather(rt, a, idx):
    d = cuda.to_device(np.asarray(idx, dtype=np.int64))
    out = cuda.device_array(d.size, dtype=np.int64)
    _run(_read, rt, a.handle, d, out)
    return out.copy_to_host()


def _no_state_left(rt, n_pages):
    """No page busy or prefetching, no reference held, no prefetch budget or entry held."""
    state = rt._page_state.copy_to_host()[:n_pages]
    assert not (state & (gids.layout.PAGE_BUSY | gids.layout.PAGE_REF_MASK)).any()
    assert rt._window.outstanding() == 0
    assert not rt._window.pf_entry.copy_to_host().any()


@pytest.fixture
def data(tmp_path):
    raw = random_file(tmp_path / "d.bin", 64 * PAGE, seed=np.random.SeedSequence().entropy % 2**32)
    return tmp_path / "d.bin", raw.view(np.int64)


def test_a_read_finishes_a_prefetch(data):
    path, ref = data
    with gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        pages = np.random.default_rng().choice(64, 6, replace=False)
        _run(_prefetch, rt, a.handle, cuda.to_device(pages * ELEMS))
        s = rt.stats()
        assert s.device_prefetches == 6 and s.ios == 6
        state = rt._page_state.copy_to_host()[pages]
        assert ((state & gids.layout.PAGE_PREFETCH) != 0).all()   # loading, nobody waiting
        idx = (pages[:, None] * ELEMS + np.arange(0, ELEMS, 5)).ravel()
        np.testing.assert_array_equal(_gather(rt, a, idx), ref[idx])
        s = rt.stats()
        assert s.prefetches_finished == 6 and s.ios == 6 and s.prefetches_retired == 0
        _no_state_left(rt, 64)


def test_stranded_prefetches_free_their_entries_and_are_settled(data):
    """One queue of two entries: a prefetch nobody reads holds entry 0 until the next ticket of
    that entry takes its completion; the settle step at invalidate finishes the page."""
    path, ref = data
    with gids.Runtime(cache_pages=32, page_size=PAGE, queues=1, queue_depth=2) as rt:
        a = rt.open_array(path, np.int64)
        _run(_prefetch, rt, a.handle, cuda.to_device(np.array([7 * ELEMS])))
        others = np.array([1, 2, 3, 4, 5]) * ELEMS + 9       # tickets 1..5: 2 and 4 use entry 0
        np.testing.assert_array_equal(_gather(rt, a, others), ref[others])
        assert rt._window.outstanding() == 1                 # its page still waits for a reader
        np.testing.assert_array_equal(_gather(rt, a, [7 * ELEMS + 1]), ref[[7 * ELEMS + 1]])
        assert rt.stats().prefetches_finished == 1
        # Stranded for good: prefetched, never read; invalidate settles them.
        _run(_prefetch, rt, a.handle, cuda.to_device(np.array([20, 21, 22]) * ELEMS))
        assert rt._window.outstanding() == 3
        rt.invalidate()
        assert rt.stats().prefetches_retired == 3
        _no_state_left(rt, 64)
        idx = np.arange(ref.size)
        np.testing.assert_array_equal(_gather(rt, a, idx), ref)


def test_prefetches_in_flight_are_bounded(data):
    path, ref = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        budget = rt._window.prefetch_budget                 # (16 - 8) // 2 = 4
        _run(_prefetch, rt, a.handle, cuda.to_device(np.arange(12) * ELEMS))
        assert rt.stats().device_prefetches == budget == rt._window.outstanding()
        # the rest of the cache still serves reads of every page (cache 16, budget 4)
        idx = np.random.default_rng().integers(0, ref.size, 300)
        np.testing.assert_array_equal(_gather(rt, a, idx), ref[idx])
        rt.invalidate()
        _no_state_left(rt, 64)


def test_prefetch_of_resident_loading_or_dirty_pages_does_nothing(tmp_path):
    ref = np.random.default_rng().integers(0, 2**62, 32 * ELEMS)
    ref.tofile(tmp_path / "w.bin")
    with gids.Runtime(cache_pages=8, page_size=PAGE) as rt:
        a = rt.open_array(tmp_path / "w.bin", np.int64, mode="r+")
        idx = np.arange(8) * ELEMS
        rt.scatter(a, idx, -idx)                             # 8 dirty pages fill the cache
        ref[idx] = -idx
        _run(_prefetch, rt, a.handle, cuda.to_device(np.concatenate([idx, idx + 8 * ELEMS])))
        assert rt.stats().device_prefetches == 0             # resident, or only dirty victims
        np.testing.assert_array_equal(_gather(rt, a, np.arange(ref.size)), ref)
        rt.flush()
        np.testing.assert_array_equal(np.fromfile(tmp_path / "w.bin", np.int64), ref)


def test_prefetch_index_out_of_range_is_named(data):
    path, _ = data
    with gids.Runtime(cache_pages=16, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        _prefetch[1, 1](a.handle, cuda.to_device(np.array([a.size + 3])))
        with pytest.raises(gids.IndexOutOfRangeError, match=str(a.size + 3)):
            rt.sync()


@pytest.mark.parametrize("backend, storage", [("nvme", "file"), ("host", "zero-copy")])
def test_prefetch_is_a_no_op_where_it_cannot_work(data, backend, storage):
    path, ref = data
    with gids.Runtime(backend, cache_pages=16, page_size=PAGE) as rt:
        source = gids.MemoryStore(ref.copy(), zero_copy=True) if storage == "zero-copy" else path
        a = rt.open_array(source, np.int64, shape=ref.shape)
        _run(_prefetch, rt, a.handle, cuda.to_device(np.arange(4) * ELEMS))
        assert rt.stats().device_prefetches == 0
        np.testing.assert_array_equal(_gather(rt, a, np.arange(0, ref.size, 3)), ref[::3])


def test_prefetch_next_batch_while_reading_under_pressure(data):
    """Threads prefetch one page and read another, in a cache of a quarter of the data, over
    two queues of few entries: every value right, nothing left busy or held afterwards."""
    path, ref = data
    rng = np.random.default_rng()
    with gids.Runtime(cache_pages=16, page_size=PAGE, queues=2, queue_depth=4) as rt:
        a = rt.open_array(path, np.int64)
        for _ in range(3):
            idx = rng.integers(0, ref.size, 96)
            nxt = rng.integers(0, ref.size, 96)
            out = cuda.device_array(96, dtype=np.int64)
            _prefetch_next_then_read[_grid(96)](a.handle, cuda.to_device(idx),
                                                cuda.to_device(nxt), out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), ref[idx])
            np.testing.assert_array_equal(_gather(rt, a, nxt), ref[nxt])
        s = rt.stats()
        assert s.device_prefetches > 0 and s.prefetches_finished > 0
        rt.invalidate()
        _no_state_left(rt, 64)


WARP32_SCRIPT = """
import os, tempfile
from numba import cuda
rng = np.random.default_rng()
ref = rng.integers(0, 2**62, 64 * 64)
path = os.path.join(tempfile.mkdtemp(), "d.bin")
ref.tofile(path)

@cuda.jit
def step(h, idx, nxt, out):
    k = cuda.grid(1)
    if k < idx.size:
        gids.prefetch(h, nxt[k])
        out[k] = gids.read(h, idx[k])

with gids.Runtime(cache_pages=48, page_size=512, queues=2, queue_depth=32) as rt:
    a = rt.open_array(path, np.int64)
    for _ in range(2):
        idx = rng.integers(0, ref.size, 64)
        nxt = rng.integers(0, ref.size, 64)
        out = cuda.device_array(64, dtype=np.int64)
        step[2, 32](a.handle, cuda.to_device(idx), cuda.to_device(nxt), out)
        rt.sync()
        assert (out.copy_to_host() == ref[idx]).all()
        assert (rt.gather(a, nxt).copy_to_host() == ref[nxt]).all()
    assert rt.stats().device_prefetches > 0, rt.stats()
    rt.invalidate()
    state = rt._page_state.copy_to_host()[:64]
    assert not (state & (gids.layout.PAGE_BUSY | gids.layout.PAGE_REF_MASK)).any()
print("PREFETCH_WARP32_OK")
"""


def test_emulated_warps_prefetch_and_read():
    run_with_warp32(WARP32_SCRIPT, "PREFETCH_WARP32_OK")


PTX_SCRIPT = '''
import os, re
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
import numba.cuda.dispatcher as dispatcher
from numba import cuda, typeof, types

class _Hopper:
    compute_capability = (9, 0)
dispatcher.get_current_device = lambda: _Hopper()

import gids
from gids.kernels_host import gather_kernel, settle_kernel
from tests.helpers import fake_handle

h = fake_handle(np.float32)
out = typeof(np.zeros(4, np.float32))
ptx, _ = cuda.compile_ptx(gather_kernel.py_func, (typeof(h), types.int64[::1], out), cc=(9, 0))
lines = [l.strip() for l in ptx.splitlines()]
entry = next(i for i, l in enumerate(lines) if l.startswith(".visible .entry"))
end = next((i for i, l in enumerate(lines) if i > entry and ".func" in l), len(lines))
body = "\\n".join(lines[entry:end])
# The hit path (the kernel's own body) has no prefetch code: adoption is in the miss path, the
# entry's retirement in the queue wait, both functions of their own.
assert "prefetch" not in body, "prefetch code in the hit path"
assert re.search(r"\\.func\\s.*finish_prefetch", ptx) and re.search(r"\\.func\\s.*retire_prefetch", ptx)

def prefetch_then_read(h, i, out):
    gids.prefetch(h, i + 64)
    out[0] = gids.read(h, i)

ptx, _ = cuda.compile_ptx(prefetch_then_read, (typeof(h), types.int64, out), cc=(9, 0))
assert re.search(r"\\.func\\s.*start_prefetch", ptx)
ptx, _ = cuda.compile_ptx(settle_kernel.py_func, (typeof(h),), cc=(9, 0))

# gids bfs --prefetch: the top-down step with a prefetch of each claimed vertex's list.
from workloads.graph.gpu_bfs import make_bfs_kernels
from workloads.pager import GIDS_PAGER
i64, n = types.int64[::1], types.int64
k = make_bfs_kernels(GIDS_PAGER, None, False, True)
ptx, _ = cuda.compile_ptx(k.top_down.py_func,
                          (typeof(h), i64, i64, n, i64, i64, i64, i64, n, types.boolean, i64,
                           i64, n, types.boolean, types.boolean), cc=(9, 0))
assert re.search(r"\\.func\\s.*start_prefetch", ptx)
print("PREFETCH_PTX_OK")
'''


def test_prefetch_compiles_and_stays_off_the_hit_path():
    from tests.helpers import run_compile_script
    proc = run_compile_script(PTX_SCRIPT)
    assert "PREFETCH_PTX_OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


# --- on a GPU: the same protocol at the concurrency only a GPU has ---------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("queues, depth", [(None, None), (2, 32)])
def test_gpu_prefetch_next_while_reading(tmp_path, queues, depth):
    """64 k threads prefetch one random page and read another, in rounds, through a cache of an
    eighth of the data (few queue entries in the second case: entries retired by later tickets
    all the time); every value against the file, nothing left busy or held at the end."""
    raw = random_file(tmp_path / "d.bin", 32 << 20, seed=np.random.SeedSequence().entropy % 2**32)
    ref = raw.view(np.int64)
    rng = np.random.default_rng()
    with gids.Runtime(cache_bytes=4 << 20, page_size=4096, queues=queues,
                      queue_depth=depth) as rt:
        a = rt.open_array(tmp_path / "d.bin", np.int64)
        n = 1 << 16
        for _ in range(4):
            idx = rng.integers(0, ref.size, n)
            nxt = rng.integers(0, ref.size, n)
            out = cuda.device_array(n, dtype=np.int64)
            _prefetch_next_then_read[n // 256, 256](a.handle, cuda.to_device(idx),
                                                    cuda.to_device(nxt), out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), ref[idx])
        s = rt.stats()
        assert s.device_prefetches > 0 and s.prefetches_finished > 0
        rt.invalidate()
        _no_state_left(rt, a.n_pages)
        idx = rng.integers(0, ref.size, n)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), ref[idx])


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
        _no_state_left(rt, a.n_pages)
