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
    "launch_past_dispatcher"), reason="GIDS_LAUNCH_PAST_DISPATCHER=0")
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


# ------------------------------------------------------------------ the driver's launch

def test_raw_array_type_and_arguments_follow_numbas_rule():
    # C where C-contiguous (size-1 axes ignored) and not broadcast, else A; the arguments are
    # numba-cuda's for an array: meminfo, parent, size, itemsize, pointer, shape, strides.
    from numpy.lib.stride_tricks import as_strided
    base = np.zeros(4096, dtype=np.float32)
    cases = [base[:24].reshape(4, 6), base[:40].reshape(4, 10)[:, :6], base[:24].reshape(4, 6).T,
             base[:6].reshape(1, 6), base[:24:2], as_strided(base, (4, 6), (0, 4)),
             base[:0].reshape(0, 6), base[:8]]
    for a in cases:
        raw = launch.RawArray(a.ctypes.data, a.shape, a.strides, a.dtype)
        broadcast = 0 in a.strides and a.size != 0
        assert raw.numba_type.layout == ("C" if a.flags.c_contiguous and not broadcast else "A")
        assert raw.numba_type.ndim == a.ndim and raw.size == a.size and raw.ndim == a.ndim
        assert raw.args == (0, 0, a.size, 4, a.ctypes.data, *a.shape, *a.strides)


class _FakeDriver:
    """Stands for libcuda: records each cuLaunchKernel with the bytes its parameters point to."""

    def __init__(self, n_params, result=0):
        self.n_params, self.result, self.calls = n_params, result, []

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        import ctypes
        values = [ctypes.string_at(params[k], 8) for k in range(self.n_params)]
        self.calls.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, values))
        return self.result


def test_driver_launch_writes_the_kept_and_the_new_parameters(monkeypatch):
    import ctypes
    import struct
    kept = [0, 0, 7, 8, 0x7F0000001000, 7, 8, ctypes.c_int64(-5), True, ctypes.c_int32(3)]
    fixed = b"".join(launch._fixed_bytes(v) for v in kept)
    rows = launch.RawArray(0x7F0000200000, (5,), (8,), np.int64)
    out = launch.RawArray(0x7F0000300000, (5, 4), (16, 4), np.float32)
    args = ("handle", rows, np.int64(4), out, np.int32(-2))
    fmt = launch._var_format(args[1:])
    assert fmt == "q" * 7 + "q" + "q" * 9 + "i4x"
    n = len(kept) + 7 + 1 + 9 + 1
    fake = _FakeDriver(n)
    monkeypatch.setattr(launch, "_libcuda", [fake])
    driver = launch._DriverLaunch(ctypes.c_void_p(0xABC), fixed, fmt)
    stream = types_ns(handle=0x55)
    assert driver((3, 1, 1), (64, 1, 1), stream, args) is True
    function, grid, block, shared, stream, values = fake.calls[0]
    assert (function.value, grid, block, shared, stream) == (0xABC, (3, 1, 1), (64, 1, 1), 0, 0x55)
    q = lambda v: struct.pack("<q", v)   # noqa: E731
    expect = [q(0), q(0), q(7), q(8), q(0x7F0000001000), q(7), q(8), q(-5),
              b"\x01" + bytes(7), struct.pack("<i", 3) + bytes(4),
              *(q(v) for v in rows.args), q(4), *(q(v) for v in out.args),
              struct.pack("<i", -2) + bytes(4)]
    assert values == expect
    # the next launch writes its own arrays in the same buffer
    other = launch.RawArray(0x7F0000400000, (5,), (8,), np.int64)
    assert driver((3, 1, 1), (64, 1, 1), stream, ("handle", other, np.int64(4), out,
                                                  np.int32(1)))
    assert fake.calls[1][5][len(kept) + 4] == q(0x7F0000400000)
    fake.result = 1     # refused by the driver: the caller takes numba-cuda's launch
    assert driver((3, 1, 1), (64, 1, 1), 0, args) is False


def test_launch_through_the_driver_only_where_it_can(direct, monkeypatch):
    from tests.helpers import fake_handle
    h = fake_handle(np.float32)
    h.__dict__[launch._TYPE_KEY] = (direct, "handle type")
    rows = launch.RawArray(0x1000, (5,), (8,), np.int64)
    d = _Dispatcher()
    kernel = d.overloads[("handle type", rows.numba_type, "int64")] = _Kernel()
    made = []

    class _Driver:
        def __init__(self, ok):
            self.ok, self.calls = ok, []

        def __call__(self, griddim, blockdim, stream, args):
            self.calls.append((griddim, blockdim, stream, args))
            return self.ok

    # not installed for the driver: numba-cuda's kernel launch (with Numba arrays made)
    monkeypatch.setattr(launch, "_DRIVER_ON", False)
    monkeypatch.setattr(launch.RawArray, "as_numba", lambda self: ("numba array", self.ptr))
    launch.launch(d, 3, 64, "stream", h, rows, np.int64(8))
    assert kernel.launched[-1][0] == (h, ("numba array", 0x1000), np.int64(8))
    # on, but the handle's arguments not kept yet: the same
    monkeypatch.setattr(launch, "_DRIVER_ON", True)
    launch.launch(d, 3, 64, "stream", h, rows, np.int64(8))
    assert len(kernel.launched) == 2
    # kept: the driver's launch, made once per kernel and argument format
    ok = _Driver(True)
    monkeypatch.setattr(launch, "_make_driver_launch",
                        lambda kernel, handle, fmt: made.append(fmt) or ok)
    h.__dict__[launch._ARGS_KEY] = ("handle type", [0, 1])
    for _ in range(3):
        launch.launch(d, 3, 64, "stream", h, rows, np.int64(8))
    assert len(kernel.launched) == 2 and len(ok.calls) == 3 and made == ["q" * 7 + "q"]
    # found again by the signatures alone, past the dispatcher: a new array of the same kind
    d.overloads.clear()
    again = launch.RawArray(0x2000, (9,), (8,), np.int64)
    launch.launch(d, 3, 64, "stream", h, again, np.int64(8))
    assert ok.calls[-1] == ((3, 1, 1), (64, 1, 1), "stream", (h, again, np.int64(8)))
    # a closed Runtime's handle: its guard refuses the launch before the driver sees it
    h.__dict__[launch.GUARD_KEY] = lambda: (_ for _ in ()).throw(RuntimeError("closed"))
    with pytest.raises(RuntimeError, match="closed"):
        launch.launch(d, 3, 64, "stream", h, rows, np.int64(8))
    assert len(ok.calls) == 4
    h.__dict__.pop(launch.GUARD_KEY)
    # refused by the driver: numba-cuda's launch, which raises what is wrong
    d.overloads[("handle type", rows.numba_type, "int64")] = kernel
    ok.ok = False
    launch.launch(d, 3, 64, "stream", h, rows, np.int64(8))
    assert len(kernel.launched) == 3


@skip_on_simulator
@pytest.mark.gpu
@pytest.mark.skipif(not __import__("kernels.settings", fromlist=["get"]).get(
    "launch_past_dispatcher"), reason="GIDS_LAUNCH_PAST_DISPATCHER=0")
def test_gather_rows_through_the_driver_reads_right():
    # From the second gather on, launches go through cuLaunchKernel with the handle's kept
    # parameters and the tensors' own pointers: fresh tensors each time, poisoned outputs,
    # 16-byte and element copies, against numpy.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    for width in (64, 37):
        data = rng.standard_normal((3000, width)).astype(np.float32)
        with gids.Runtime(cache_bytes=2 << 20) as rt:
            a = rt.open_array(data)
            for k in range(4):
                rows = torch.from_numpy(rng.integers(0, 3000, 500 + k)).cuda()
                out = torch.full((rows.numel(), width), float("nan"), device="cuda")
                rt.gather_rows(a, rows, out=out)
                rt.sync()
                np.testing.assert_array_equal(out.cpu().numpy(), data[rows.cpu().numpy()])
            driven = a.handle.__dict__.get(launch._DRIVER_KEY, {})
            assert any(d is not None for d in driven.values())
