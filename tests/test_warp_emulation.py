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


PARTS_SCRIPT = textwrap.dedent('''
    from kernels.warp import diverge

    LOW, HIGH, ALL = 0x0000FFFF, 0xFFFF0000, 0xFFFFFFFF
    plan = {}   # lane -> the masks its activemask() calls return in turn (kernels.warp.diverge)

    @cuda.jit
    def pin_read_unpin(h, idx, out):
        t = cuda.grid(1)
        diverge(plan[t % 32])
        k = gids.pin_page(h, idx[t])
        if k >= 0:
            out[t] = gids.pinned(h, k)
        gids.unpin_page(h, idx[t], k)
        diverge(())

    data = np.random.default_rng().integers(0, 1 << 62, 8 * 64, dtype=np.int64)   # 8 pages
    cases = {
        # A warp that reaches pin_page in two parts (as after a copy loop whose trip count
        # differs by lane): each part looks the page up for itself, one loads it, the other
        # waits for a load of its own warp.
        "arrives in parts": lambda lane: [LOW if lane < 16 else HIGH],
        # Converged at the lookup's match, in two parts from then on (CUDA promises no more):
        # the miss path must keep to the lanes that matched, whose leader is among them.
        "splits after the match": lambda lane: [ALL, LOW if lane < 16 else HIGH],
    }
    for name, masks in cases.items():
        for lane in range(32):
            plan[lane] = masks(lane)
        with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32,
                          timeout=60) as rt:
            a = rt.open_array(data)
            rng = np.random.default_rng()
            for page in rng.permutation(8)[:3]:   # a miss each (nothing cached yet)
                idx = page * 64 + rng.permutation(64)[:32]
                out = cuda.to_device(np.full(32, -1, np.int64))
                pin_read_unpin[1, 32](a.handle, cuda.to_device(idx), out)
                rt.sync()
                assert (out.copy_to_host() == data[idx]).all(), name
                state = rt._page_state.copy_to_host()
                assert not (state & gids.layout.PAGE_REF_MASK).any(), name   # pins given back
            assert rt.stats().ios == 3, (name, rt.stats())   # one load a page, parts or not
    print("WARP32_PARTS_OK")
''')
PARTS_SCRIPT_RUN = Warp32Script(PARTS_SCRIPT)


@started_early(PARTS_SCRIPT_RUN)
def test_emulated_warp_in_parts_pins_and_unpins():
    # The GPU may run a warp's lanes in parts between its synchronising intrinsics; the pin's
    # miss path was compiled against a second activemask() that could then leave a part
    # without its leader (the row gather's hang on the H200, docs/design-notes.md).
    check_warp32(PARTS_SCRIPT_RUN.result(), "WARP32_PARTS_OK")
