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


class _Config:
    """A launch configuration's fields, and a record of launches through the dispatcher."""

    def __init__(self, dispatched):
        self.griddim, self.blockdim, self.stream, self.sharedmem = (3, 1, 1), (64, 1, 1), "s", 0
        self.pre_launch_callbacks = []
        self.dispatched = dispatched

    def __call__(self, *args):
        self.dispatched.append(args)


class _Kernel:
    launch_config_sensitive = False

    def __init__(self):
        self.launched = []

    def launch(self, args, griddim, blockdim, stream, sharedmem):
        self.launched.append((args, griddim, blockdim, stream, sharedmem))


class _Array:
    def __init__(self, ty):
        self._numba_type_ = ty


class _Dispatcher:
    """What :func:`kernels.launch.launch` reads of a numba-cuda dispatcher."""

    def __init__(self):
        self.dispatched, self.overloads = [], {}
        self._launch_config_sensitive, self.specialized = False, False
        self.config = _Config(self.dispatched)

    def __getitem__(self, config):
        assert config == (3, 64, "stream")
        return self.config


@pytest.fixture
def direct(monkeypatch):
    """:func:`launch.launch` as after :func:`launch.install` (a stand-in ``Purpose``)."""
    purpose = object()
    monkeypatch.setattr(launch, "_ARGUMENT", [purpose])
    monkeypatch.setattr(launch, "_SCALAR_TYPES", {np.int64: "int64"})
    return purpose


def test_launch_past_the_dispatcher_only_for_a_compiled_kernel_of_those_types(direct):
    from tests.helpers import fake_handle
    h, rows, out = fake_handle(np.float32), _Array("rows type"), _Array("out type")
    d = _Dispatcher()
    args = (h, rows, np.int64(8), out)
    # the handle not typed yet (its first launch): the dispatcher's path, which types it
    launch.launch(d, 3, 64, "stream", *args)
    assert d.dispatched == [args]
    h.__dict__[launch._TYPE_KEY] = (direct, "handle type")
    # typed, but no kernel compiled for these types: the dispatcher's path (it compiles)
    launch.launch(d, 3, 64, "stream", *args)
    assert len(d.dispatched) == 2
    kernel = d.overloads[("handle type", "rows type", "int64", "out type")] = _Kernel()
    launch.launch(d, 3, 64, "stream", *args)
    assert len(d.dispatched) == 2
    assert kernel.launched == [(args, (3, 1, 1), (64, 1, 1), "s", 0)]
    # another array type: another overload, not this one
    launch.launch(d, 3, 64, "stream", h, _Array("other"), np.int64(8), out)
    assert len(d.dispatched) == 3 and len(kernel.launched) == 1
    # an argument typed only by typing its value (a Python int): the dispatcher's path
    launch.launch(d, 3, 64, "stream", h, rows, 8, out)
    assert len(d.dispatched) == 4 and len(kernel.launched) == 1
    # a type kept for another purpose than an argument's is not used
    h.__dict__[launch._TYPE_KEY] = (object(), "handle type")
    launch.launch(d, 3, 64, "stream", *args)
    assert len(d.dispatched) == 5 and len(kernel.launched) == 1


@pytest.mark.parametrize("why", ["callbacks", "sensitive", "specialized", "kernel sensitive",
                                 "not installed"])
def test_launch_keeps_the_dispatchers_path_where_it_does_more(direct, monkeypatch, why):
    from tests.helpers import fake_handle
    h = fake_handle(np.float32)
    h.__dict__[launch._TYPE_KEY] = (direct, "handle type")
    d = _Dispatcher()
    kernel = d.overloads[("handle type", "out type")] = _Kernel()
    if why == "callbacks":
        d.config.pre_launch_callbacks.append(lambda kernel, config: None)
    elif why == "sensitive":
        d._launch_config_sensitive = True
    elif why == "specialized":
        d.specialized = True
    elif why == "kernel sensitive":
        kernel.launch_config_sensitive = True
    else:
        monkeypatch.setattr(launch, "_ARGUMENT", [])
    launch.launch(d, 3, 64, "stream", h, _Array("out type"))
    assert len(d.dispatched) == 1 and kernel.launched == []


@skip_on_simulator
@pytest.mark.gpu
@pytest.mark.skipif(not __import__("kernels.settings", fromlist=["get"]).get(
    "launch_past_dispatcher"), reason="opt-in: run with GIDS_LAUNCH_PAST_DISPATCHER=1")
def test_launch_past_the_dispatcher_reads_right():
    # The direct path (from the second launch on) gives what the dispatcher's gives, with the
    # device arrays' arguments kept on them.
    data = np.random.default_rng(6).integers(0, 1 << 40, 1 << 15, dtype=np.int64)
    with gids.Runtime(cache_pages=64, page_size=4096) as rt:
        a = rt.open_array(data)
        for seed in range(3):
            idx = np.random.default_rng(seed).integers(0, data.size, 2048)
            out = cuda.to_device(np.full(idx.size, -1, dtype=np.int64))
            launch.launch(_gather, 8, 256, 0, a.handle, cuda.to_device(idx), out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), data[idx])
        types = tuple(launch._argument_type(v) for v in (a.handle, cuda.to_device(idx), out))
        assert types in _gather.overloads   # the direct path was taken
        # a device array's kept arguments are what numba-cuda computes for it
        from numba.cuda.dispatcher import _Kernel
        kernel, fresh, retr = _gather.overloads[types], [], []
        _Kernel._prepare_args.gids_wrapped(kernel, kernel.argument_types[2], out, 0, retr, fresh)
        assert retr == [] and launch.kept_arguments(out) is not None
        assert [_plain(v) for v in launch.kept_arguments(out)] == [_plain(v) for v in fresh]


class _DeviceArray:
    """Stands for numba-cuda's DeviceNDArray (a ``__dict__``, fields that never change)."""


def test_device_arrays_kernel_arguments_kept_like_a_handles(monkeypatch):
    monkeypatch.setattr(launch, "_KEPT_ARRAYS", (_DeviceArray,))
    marshalled = []

    def original(self, ty, val, stream, retr, kernelargs):
        marshalled.append((ty, val))
        kernelargs.extend([ty, id(val)])
        if getattr(val, "copy_back", False):
            retr.append("write back")

    prepare = launch._wrap_prepare_args(original)
    kernel = types_ns(extensions=[])
    a = _DeviceArray()
    for _ in range(3):
        args = []
        prepare(kernel, "array type", a, 0, [], args)
        assert args == ["array type", id(a)]
    assert marshalled == [("array type", a)]          # marshalled once, then kept
    args = []
    prepare(kernel, "other type", a, 0, [], args)     # another type: marshalled again
    assert args == ["other type", id(a)] and len(marshalled) == 2
    # what asks for a copy back is never kept; nor other classes' values; nor with extensions
    b = _DeviceArray()
    b.copy_back = True
    for val, k in ((b, kernel), (np.int64(3), kernel), (_DeviceArray(), types_ns(extensions=[1]))):
        for _ in range(2):
            prepare(k, "t", val, 0, [], [])
    assert len(marshalled) == 2 + 6


def types_ns(**fields):
    import types
    return types.SimpleNamespace(**fields)
