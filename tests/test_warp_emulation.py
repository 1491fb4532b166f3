"""The multi-lane paths of ``gids.read`` (coalescing, per-warp tickets, the cooperative copy,
hits, waiters and loaders in one warp) in the simulator with emulated 32-lane warps.

The simulator's default is a warp of one thread, which never takes these paths; here a
subprocess runs with ``GIDS_SIM_WARP_SIZE=32`` (see kernels/platform.py). The simulator runs
sequentially consistent, so this checks the protocol's logic, not the GPU's memory ordering
(tests/test_gpu.py does that on a GPU).
"""
import textwrap

from tests.helpers import Warp32Script, check_warp32, started_early

SCRIPT = textwrap.dedent('''
    @cuda.jit
    def read_all(h, idx, out):
        k = cuda.grid(1)
        out[k] = gids.read(h, idx[k])

    data = np.random.default_rng(0).integers(0, 1 << 62, 64 * 64, dtype=np.int64)  # 64 pages
    with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32, timeout=60) as rt:
        for zero_copy in (False, True):
            a = rt.open_array(gids.MemoryStore(data, zero_copy=zero_copy), np.int64, shape=data.shape)
            # one page for the whole warp: one lookup, one I/O
            rt.reset_stats()
            out = cuda.to_device(np.full(32, -1, np.int64))
            read_all[1, 32](a.handle, cuda.to_device(np.arange(64, 96, dtype=np.int64)), out)
            rt.sync()
            assert (out.copy_to_host() == data[64:96]).all()
            s = rt.stats()
            assert s.ios == 1 and s.lookups == 1, s
            # random reads over twice the cache: hits, waiters and loaders mixed in each warp
            for seed in range(2):
                idx = np.random.default_rng(seed).integers(0, data.size, 128)
                out = cuda.to_device(np.full(128, -1, np.int64))
                read_all[1, 128](a.handle, cuda.to_device(idx), out)
                rt.sync()
                assert (out.copy_to_host() == data[idx]).all(), seed
                # Every reference taken was given back: by the hit path's unpin, or by the
                # slow path for a leader that entered it holding its round-1 reference.
                state = rt._page_state.copy_to_host()
                assert not (state & gids.layout.PAGE_REF_MASK).any(), seed
        assert rt.stats().evictions > 0
    print("WARP32_OK")
''')
SCRIPT_RUN = Warp32Script(SCRIPT)


@started_early(SCRIPT_RUN)
def test_emulated_warps_read_the_right_values():
    check_warp32(SCRIPT_RUN.result(), "WARP32_OK")


WRITE_SCRIPT = textwrap.dedent('''
    @cuda.jit
    def write_all(h, idx, vals):
        k = cuda.grid(1)
        gids.write(h, idx[k], vals[k])

    raw = np.random.default_rng(0).integers(0, 256, 64 * 512, dtype=np.uint8)   # 64 pages
    data = raw.view(np.int16)
    model = data.copy()
    rng = np.random.default_rng(1)
    with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32, timeout=60) as rt:
        a = rt.open_array(gids.MemoryStore(raw, zero_copy=False), np.int16, mode="r+")
        # a warp writing 32 neighbouring elements of one page: one lookup, one load
        idx = np.arange(300, 332)
        write_all[1, 32](a.handle, cuda.to_device(idx), cuda.to_device(idx.astype(np.int16)))
        rt.sync()
        model[idx] = idx
        # random distinct elements over twice the cache: dirty victims written back by warps
        idx = rng.choice(data.size, 64, replace=False)
        vals = rng.integers(-1000, 1000, 64).astype(np.int16)
        write_all[1, 64](a.handle, cuda.to_device(idx), cuda.to_device(vals))
        rt.sync()
        model[idx] = vals
        probe = rng.integers(0, data.size, 64)
        assert (rt.gather(a, probe).copy_to_host() == model[probe]).all()
        assert rt.stats().writebacks > 0, rt.stats()
        rt.flush()
        assert (data == model).all()
    print("WARP32_WRITES_OK")
''')
WRITE_SCRIPT_RUN = Warp32Script(WRITE_SCRIPT)


@started_early(WRITE_SCRIPT_RUN)
def test_emulated_warps_write_and_write_back():
    check_warp32(WRITE_SCRIPT_RUN.result(), "WARP32_WRITES_OK")
