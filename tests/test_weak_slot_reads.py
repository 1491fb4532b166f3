"""``GIDS_SLOT_LOAD=weak``: pinned pages read with weak loads under the slot epoch's guard
(kernels/cache.py, ``l1_is_current``).

The simulator has no L1, so what is checked here is the bookkeeping: loaders that evict and
writers raise the epoch, a reader whose SM has not invalidated its L1 since invalidates it once
(``Stats.l1_purges``) and a warm cache nobody writes raises nothing, values always the file's.
The setting is read at import, so each case runs in a subprocess of its own; the PTX check
shows what each setting compiles to (no GPU needed)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_BOOKKEEPING = textwrap.dedent('''
    import sys
    import numpy as np
    import gids
    from numba import cuda
    from tests import polite_simulator
    polite_simulator.install()
    from tests.helpers import write_then_read
    from workloads.microbench import sequential_reads_gids
    from kernels.platform import WEAK_SLOT_READS
    weak = sys.argv[1] == "weak"
    assert WEAK_SLOT_READS == weak

    @cuda.jit
    def read_all(h, idx, out):
        k = cuda.grid(1)
        if k < idx.size:
            out[k] = gids.read(h, idx[k])

    @cuda.jit
    def pin_all(h, idx, out):
        k = cuda.grid(1)
        if k < idx.size:
            at = gids.pin_page(h, idx[k])
            if at >= 0:
                out[k] = gids.pinned(h, at)
                gids.unpin_page(h, idx[k], at)

    rng = np.random.default_rng(5)
    data = rng.integers(0, 1 << 40, 64 * 64, dtype=np.int64)      # 64 pages of 512 B
    idx = cuda.to_device(rng.permutation(data.size)[:600].astype(np.int64))
    host_idx = idx.copy_to_host()
    out = cuda.device_array(600, dtype=np.int64)
    with gids.Runtime(cache_pages=8, page_size=512) as rt:        # evictions
        a = rt.open_array(data)
        for kernel in (read_all, pin_all):
            rt.reset_stats()
            kernel[4, 150](a.handle, idx, out)
            rt.sync()
            assert np.array_equal(out.copy_to_host(), data[host_idx])
            s = rt.stats()
            epoch = int(rt._slot_epoch.copy_to_host()[0])
            assert s.evictions > 0
            if weak:
                assert s.l1_purges > 0, s
            else:
                assert s.l1_purges == 0 and epoch == 0
        evictions = rt.stats().evictions
    with gids.Runtime(cache_pages=64, page_size=512) as rt:       # the whole array: warm
        a = rt.open_array(data.copy(), mode="r+")
        read_all[4, 150](a.handle, idx, out)
        rt.sync()
        before = int(rt._slot_epoch.copy_to_host()[0])
        assert before == 0, before              # filling empty slots evicts nothing
        rt.reset_stats()
        for kernel in (read_all, pin_all):
            kernel[4, 150](a.handle, idx, out)
            rt.sync()
            assert np.array_equal(out.copy_to_host(), data[host_idx])
        assert rt.stats().l1_purges == 0        # warm, nobody writes: no invalidation
        # A write raises the epoch (other SMs' L1 may hold the page from before it), and the
        # next reads on this SM invalidate once.
        writes = cuda.to_device(np.arange(600, dtype=np.int64))
        write_then_read[4, 150](a.handle, idx, writes, out)
        rt.sync()
        assert np.array_equal(out.copy_to_host(), np.arange(600))
        after = int(rt._slot_epoch.copy_to_host()[0])
        assert (after > 0) == weak, after
        if weak:
            assert rt.stats().l1_purges > 0
    print("BOOKKEEPING_OK", evictions)
''')

_PTX = textwrap.dedent('''
    import os, sys
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    import gids
    from tests.helpers import fake_handle

    def read_one(h, i, out):
        out[0] = gids.read(h, i)

    h = fake_handle(np.int64)
    ptx, _ = cuda.compile_ptx(read_one, (typeof(h), types.int64, types.int64[::1]), cc=(9, 0))
    if sys.argv[1] == "weak":
        assert "ld.weak.global.b64" in ptx and "%smid" in ptx, "no weak read or no epoch check"
        assert "ld.acquire.gpu" in ptx, "no L1 invalidation"
    else:
        assert "ld.global.cg.b64" in ptx and "%smid" not in ptx and "ld.weak.global" not in ptx
    print("SLOT_PTX_OK")
''')


def _run(script, mode, simulator, timeout=600):
    env = dict(os.environ, GIDS_SLOT_LOAD=mode, NUMBA_ENABLE_CUDASIM="1" if simulator else "0")
    return subprocess.run([sys.executable, "-c", script, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("mode", ["cg", "weak"])
def test_the_epoch_counts_slot_changes_and_a_warm_cache_invalidates_nothing(mode):
    proc = _run(_BOOKKEEPING, mode, simulator=True)
    assert "BOOKKEEPING_OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("mode", ["cg", "weak"])
def test_each_setting_compiles_to_its_load(mode):
    proc = _run(_PTX, mode, simulator=False)
    if "cannot be found" in proc.stderr and "NVVM" in proc.stderr:
        pytest.skip("NVVM not installed (pip install nvidia-nvvm nvidia-cuda-nvrtc)")
    assert "SLOT_PTX_OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_an_unknown_setting_is_refused():
    proc = _run("import kernels.platform", "fast", simulator=True)
    assert proc.returncode != 0 and "GIDS_SLOT_LOAD must be cg or weak" in proc.stderr
