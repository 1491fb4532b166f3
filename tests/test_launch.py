"""Launches with a handle (kernels/launch.py): the handle object is kept per array, and on a GPU
its Numba type and kernel arguments are computed once and equal what numba-cuda computes."""
import ctypes

import numpy as np
import pytest
from numba import cuda

import gids
from kernels import launch
from tests.helpers import skip_on_simulator, skip_unless_simulator


@cuda.jit
def _gather(h, idx, out):
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


def test_handle_is_kept_until_the_page_tables_grow():
    with gids.Runtime(cache_pages=64, page_size=4096) as rt:
        a = rt.open_array(np.arange(1 << 12, dtype=np.int64))
        h = a.handle
        assert a.handle is h
        # A large second array grows the page tables: the first array's handle is rebuilt
        # (the old one names the old table) and both read right.
        b = rt.open_array(np.arange(1 << 20, dtype=np.int32))
        assert a.handle is not h and a.handle.page_state is b.handle.page_state
        idx = np.array([0, 7, (1 << 12) - 1], dtype=np.int64)
        out = cuda.to_device(np.full(idx.size, -1, dtype=np.int64))
        _gather[1, 32](a.handle, cuda.to_device(idx), out)
        rt.sync()
        np.testing.assert_array_equal(out.copy_to_host(), idx)


@skip_unless_simulator
def test_not_installed_in_the_simulator():
    assert not launch.install() and not launch.installed()


def _plain(v):
    return (type(v).__name__, v.value) if isinstance(v, ctypes._SimpleCData) else v


@skip_on_simulator
@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["host", "nvme"])
def test_kept_arguments_are_numba_cudas(backend):
    assert launch.installed()
    data = np.random.default_rng(4).integers(0, 1 << 40, 1 << 16, dtype=np.int64)
    with gids.Runtime(backend, cache_pages=64, page_size=4096) as rt:
        a = rt.open_array(data)
        h = a.handle
        idx = np.random.default_rng(5).integers(0, data.size, 4096)
        d_idx = cuda.to_device(idx)
        for _ in range(3):   # the first launch computes and keeps; the others reuse
            out = cuda.to_device(np.full(idx.size, -1, dtype=np.int64))
            _gather[16, 256](h, d_idx, out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), data[idx])
        kept = launch.kept_arguments(h)
        assert kept is not None
        from numba.cuda.dispatcher import _Kernel
        from numba.cuda.typing.typeof import typeof
        ty = typeof(h)
        assert typeof(h) is ty     # the kept type
        kernel = next(k for sig, k in _gather.overloads.items() if sig[0] == ty)
        fresh, retr = [], []
        _Kernel._prepare_args.gids_wrapped(kernel, kernel.argument_types[0], h, 0, retr, fresh)
        assert retr == []
        assert [_plain(v) for v in kept] == [_plain(v) for v in fresh]
