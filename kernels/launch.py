"""Launching a kernel with an array handle for the host cost of a few arguments, not of thirty.

Why: a handle (:mod:`kernels.handle`) is a namedtuple of about twenty device arrays and ten
integers, and numba-cuda types and marshals every field of every argument at every launch:
450-516 us of host time per launch with a handle on the H200, against 40 us for a kernel taking
one array. Launches queue faster than that on the GPU, so a run of short kernels (the bench's
hit requests, a BFS level) was bound by the host (docs/design-notes.md, "Launch cost of a
handle").

What: a handle is immutable and its arrays live as long as its Runtime, so both results are
computed once per handle object and kept in its ``__dict__`` (the handle classes subclass their
namedtuples without ``__slots__`` for this):

- its Numba type: a registration of numba-cuda's ``typeof_impl`` for the handle classes
  returns the type the tuple rule computed the first time;
- its kernel arguments (the flattened fields: for each array its meminfo, parent, size,
  itemsize, pointer, shape and strides): ``_Kernel._prepare_args`` is wrapped so that, for a
  handle, it appends the list that numba-cuda's own code produced the first time. A Numba
  device array's own arguments are kept on it the same way (its memory, shape and strides never
  change): a gather's cached views of torch tensors (``gids.interop``) are marshalled once.

Nothing else changes: the same kernel is chosen and receives the same bytes (a GPU test,
``tests/test_launch.py``, compares the kept list with a fresh one). A handle whose marshalling
asked for a copy back to the host (a field in host memory, which the handle classes never
hold) is not kept, and kernels compiled with ``extensions`` take numba-cuda's own path. The
wrapped method and the registration are numba-cuda internals, pinned by ``numba-cuda>=0.30,<0.31``
in ``pyproject.toml``; where they are missing, :func:`install` leaves everything as it was and
launches cost what they cost. The simulator passes arguments as Python objects: nothing to do.

Past the dispatcher (:func:`launch`): numba-cuda's ``kernel[grid, block, stream](*args)`` also
types every argument and searches the kernel's overloads at each launch. Where each argument's
type is already known (a handle's, kept as above; a Numba array's, a cached property; a numpy
scalar's, by its class) and a kernel was compiled for exactly those types, :func:`launch` calls
that kernel's own ``launch``: the arguments are marshalled as numba-cuda marshals them, the
dispatch is skipped. ``gids.rows`` launches this way, one launch per feature gather.

Both worlds also run a handle's launch guard (``__dict__[GUARD_KEY]``, a callable the host
side puts there) before every launch that passes the handle: the Runtime's says whether it is
still open, and raises for a closed one's handle, so that such a launch fails at once instead of
waiting out its timeouts. One dictionary look-up per handle argument, on the host.
"""
import ctypes
import struct
import threading

import numpy as np

from kernels.handle import HANDLE_CLASSES
from kernels.platform import SIMULATOR

#: Keys of what is kept in a handle's ``__dict__``.
_TYPE_KEY = "_gids_numba_type"
_ARGS_KEY = "_gids_kernel_args"
#: The handle's launch guard: called with no argument before each launch that passes the
#: handle; it raises to refuse the launch.
GUARD_KEY = "_gids_launch_guard"


def check_handles(args):
    """Run the launch guard of every handle among a launch's ``args``."""
    for val in args:
        if type(val) in HANDLE_CLASSES:
            guard = val.__dict__.get(GUARD_KEY)
            if guard is not None:
                guard()


def _wrap_prepare_args(original):
    def _prepare_args(self, ty, val, stream, retr, kernelargs):
        cls = type(val)
        if cls in HANDLE_CLASSES:
            guard = val.__dict__.get(GUARD_KEY)
            if guard is not None:
                guard()
        elif cls not in _KEPT_ARRAYS:
            return original(self, ty, val, stream, retr, kernelargs)
        if self.extensions:
            return original(self, ty, val, stream, retr, kernelargs)
        kept = val.__dict__.get(_ARGS_KEY)
        if kept is None or kept[0] != ty:
            args = []
            n_retr = len(retr)
            original(self, ty, val, stream, retr, args)
            if len(retr) == n_retr:      # nothing to copy back after the launch: keep it
                val.__dict__[_ARGS_KEY] = (ty, args)
            kernelargs.extend(args)
            return None
        kernelargs.extend(kept[1])
        return None

    _prepare_args.gids_wrapped = original
    return _prepare_args


def _typeof_handle(tuple_rule):
    def typeof_handle(val, c):
        kept = val.__dict__.get(_TYPE_KEY)
        if kept is not None and kept[0] == c.purpose:
            return kept[1]
        ty = tuple_rule(val, c)
        if ty is not None:
            val.__dict__[_TYPE_KEY] = (c.purpose, ty)
        return ty
    return typeof_handle


def install():
    """Make launches with a handle cheap (idempotent). Returns True where installed: on a GPU
    with the numba-cuda this was written for; False in the simulator or where its internals
    differ."""
    if SIMULATOR:
        return False
    try:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.cuda.dispatcher import _Kernel
        from numba.cuda.typing.typeof import Purpose, _typeof_tuple, typeof_impl
    except ImportError:
        return False
    if not callable(getattr(_Kernel, "_prepare_args", None)) or \
            not callable(getattr(_Kernel, "launch", None)):
        return False
    if not hasattr(_Kernel._prepare_args, "gids_wrapped"):
        _Kernel._prepare_args = _wrap_prepare_args(_Kernel._prepare_args)
        rule = _typeof_handle(_typeof_tuple)
        for cls in HANDLE_CLASSES:
            typeof_impl.register(cls)(rule)
    from kernels import settings
    if settings.get("launch_past_dispatcher") and not _ARGUMENT:
        # :func:`launch` goes past the dispatcher from now on
        global _KEPT_ARRAYS, _DRIVER_ON
        _KEPT_ARRAYS = (DeviceNDArray,)
        _DRIVER_ON = True
        _ARGUMENT.append(Purpose.argument)
    return True


def _argument_type(val):
    """The Numba type of a launch argument where it is known without typing the value: a
    handle's kept type, a Numba device array's own (a cached property), a numpy integer's or
    float's (by its class); None otherwise."""
    if type(val) is RawArray:
        return val.numba_type
    if type(val) in HANDLE_CLASSES:
        kept = val.__dict__.get(_TYPE_KEY)
        return kept[1] if kept is not None and kept[0] is _ARGUMENT[0] else None
    if isinstance(val, (np.integer, np.floating)):
        ty = _SCALAR_TYPES.get(type(val))
        if ty is None:
            from numba.cuda.typing.typeof import typeof
            ty = _SCALAR_TYPES[type(val)] = typeof(val, _ARGUMENT[0])
        return ty
    return getattr(val, "_numba_type_", None)


#: Classes of device arrays whose kernel arguments are kept like a handle's (set by
#: :func:`install`: numba-cuda's DeviceNDArray; its pointer, shape and strides never change).
_KEPT_ARRAYS = ()
#: Numba types of numpy scalar classes; numba-cuda's ``Purpose.argument`` once installed.
_SCALAR_TYPES = {}
_ARGUMENT = []


def launch(dispatcher, griddim, blockdim, stream, *args):
    """``dispatcher[griddim, blockdim, stream](*args)``, for the host cost of the kernel's own
    launch: where every argument's type is known without typing it (:func:`_argument_type`)
    and the dispatcher has compiled a kernel for exactly those types, that kernel is launched
    at once, past numba-cuda's dispatch (its per-argument typing and overload search), through
    the driver with the handle's parameters kept (:class:`_DriverLaunch`, found again from the
    next launch on by the dispatcher and the arguments' signatures alone). Anything else (the
    first launch, which compiles; the simulator; a kernel sensitive to its launch configuration
    or with launch callbacks; a numba-cuda without these internals, or without :func:`install`)
    takes the dispatcher's own path. Either way the same kernel receives the same arguments.
    An argument may be a :class:`RawArray` (a device array as its pointer, shape and strides)."""
    key = _driver_key(dispatcher, args)
    refused = None
    if key is not None:
        driver = args[0].__dict__.get(_DRIVER_KEY, _NO_LAUNCHES).get(key)
        if driver is not None:
            guard = args[0].__dict__.get(GUARD_KEY)
            if guard is not None:
                guard()
            if driver(_dim3(griddim), _dim3(blockdim), stream, args):
                return None
            refused = driver     # not asked twice: numba-cuda's launch says what is wrong
    config = dispatcher[griddim, blockdim, stream]
    if not _ARGUMENT or config.pre_launch_callbacks or \
            getattr(dispatcher, "_launch_config_sensitive", True) or dispatcher.specialized:
        return config(*_dispatchable(args))
    arg_types = []
    for a in args:
        ty = _argument_type(a)
        if ty is None:
            return config(*_dispatchable(args))
        arg_types.append(ty)
    kernel = dispatcher.overloads.get(tuple(arg_types))
    if kernel is None or getattr(kernel, "launch_config_sensitive", False):
        return config(*_dispatchable(args))
    if key is not None and config.sharedmem == 0 and refused is None:
        driver = _driver_launch(kernel, key, args)
        if driver is not None and driver(config.griddim, config.blockdim, config.stream, args):
            return None
    return kernel.launch(_dispatchable(args), config.griddim, config.blockdim, config.stream,
                         config.sharedmem)


def _dim3(d):
    if type(d) is int:
        return (d, 1, 1)
    return (tuple(d) + (1, 1))[:3]


# ------------------------------------------------------------------ arrays as raw parameters

class RawArray:
    """A device array as a launch passes it, made from its pointer, shape and strides alone:
    its Numba type (``numba_type``) and the kernel arguments numba-cuda would pass for it
    (``args``: meminfo and parent 0, size, itemsize, pointer, shape, strides in bytes).

    Why: a Numba array over a torch tensor's memory costs tens of microseconds to make, more
    than the launch it is for, and a loader passes a new tensor each batch. The type follows
    numba-cuda's rule (``DeviceNDArray._numba_type_``): C where C-contiguous and not
    broadcast, else A (an F-contiguous array, which Numba types F, is typed A here: it then
    finds no kernel compiled for it and takes the dispatcher's path, right if slower)."""

    __slots__ = ("args", "dtype", "numba_type", "ptr", "shape", "signature", "strides")

    def __init__(self, ptr, shape, strides, dtype):
        dtype = np.dtype(dtype)
        size = 1
        for n in shape:
            size *= n
        self.ptr, self.shape, self.strides, self.dtype = ptr, tuple(shape), tuple(strides), dtype
        self.signature = (dtype, len(shape), _layout(shape, strides, dtype.itemsize, size))
        self.numba_type = _array_type(*self.signature)
        self.args = (0, 0, size, dtype.itemsize, ptr, *shape, *strides)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: self.args[2])

    def as_numba(self):
        """A Numba device array over the same memory (no owner), for the dispatcher's path."""
        from numba import cuda
        desc = {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (self.ptr, False), "strides": self.strides}
        return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


def _layout(shape, strides, itemsize, size):
    """numba-cuda's layout letter for an array, C or A (see :class:`RawArray`)."""
    if size == 0:
        return "C"
    if 0 in strides:
        return "A"
    expected = itemsize
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if stride != expected:
                return "A"
            expected *= n
    return "C"


_ARRAY_TYPES = {}


def _array_type(dtype, ndim, layout):
    key = (dtype, ndim, layout)
    ty = _ARRAY_TYPES.get(key)
    if ty is None:
        from numba.cuda import types
        from numba.cuda.np import numpy_support
        ty = _ARRAY_TYPES[key] = types.Array(numpy_support.from_dtype(dtype), ndim, layout)
    return ty


def _dispatchable(args):
    """``args`` with every :class:`RawArray` made a Numba array (the dispatcher's path)."""
    return tuple(a.as_numba() if type(a) is RawArray else a for a in args)


# ------------------------------------------------------------------ the driver's launch

#: Where a handle keeps its driver launches, by dispatcher and arguments' signatures
#: (:func:`_driver_key`).
_DRIVER_KEY = "_gids_driver_launches"
#: struct format of a parameter by its value's class, one 8-byte slot each (a 4-byte value
#: padded): numpy scalars among the launch's own arguments.
_SCALAR_FORMATS = {np.int64: "q", np.uint64: "Q", np.int32: "i4x", np.uint32: "I4x",
                   np.float64: "d", np.float32: "f4x"}
_libcuda = []


def _cuda_driver():
    if not _libcuda:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.cuKernelGetFunction.restype = ctypes.c_int
        lib.cuKernelGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        _libcuda.append(lib)
    return _libcuda[0]


def _fixed_bytes(value):
    """The 8-byte slot of a kept kernel argument (numba-cuda's: a Python int, a bool or a
    ctypes scalar), or None for anything else."""
    if isinstance(value, bool):
        return struct.pack("?7x", value)
    if isinstance(value, int):
        return struct.pack("q" if value < (1 << 63) else "Q", value)
    if isinstance(value, ctypes._SimpleCData) and ctypes.sizeof(value) <= 8:
        return bytes(value).ljust(8, b"\0")
    return None


class _DriverLaunch:
    """Launches of one compiled kernel whose first argument is a handle, through the driver's
    ``cuLaunchKernel``, its parameters in one buffer of 8-byte slots: the handle's (its kept
    arguments) written once, the other arguments' written at each launch with one
    ``struct.pack_into``. numba-cuda's own launch converts every one of the ~150 parameters of
    a handle at each launch (tens of microseconds); this writes ~20."""

    def __init__(self, function, fixed, var_format):
        self.function = function
        self.offset = len(fixed)
        self.format = "<" + var_format
        size = len(fixed) + struct.calcsize(self.format)
        self.buffer = ctypes.create_string_buffer(fixed, size)
        base = ctypes.addressof(self.buffer)
        slots = size // 8
        self.params = (ctypes.c_void_p * slots)(*(base + 8 * k for k in range(slots)))
        self.lock = threading.Lock()

    def __call__(self, griddim, blockdim, stream, args):
        """Launch with ``args`` (the handle first) on ``stream`` (a Numba stream or a handle),
        ``griddim`` and ``blockdim`` as 3-tuples; False where the driver refused (the caller
        then takes numba-cuda's launch, which raises what is wrong)."""
        values = []
        for a in args[1:]:
            if type(a) is RawArray:
                values.extend(a.args)
            else:
                values.append(a)
        (gx, gy, gz), (bx, by, bz) = griddim, blockdim
        handle = int(getattr(stream, "handle", stream) or 0)
        with self.lock:
            struct.pack_into(self.format, self.buffer, self.offset, *values)
            err = _cuda_driver().cuLaunchKernel(self.function, gx, gy, gz, bx, by, bz,
                                                0, handle, self.params, None)
        return err == 0


def _var_format(args):
    """The struct format of a launch's arguments after the handle, or None where one is not
    a :class:`RawArray` or a numpy scalar of :data:`_SCALAR_FORMATS`."""
    parts = []
    for a in args:
        if type(a) is RawArray:
            parts.append("q" * len(a.args))
        else:
            f = _SCALAR_FORMATS.get(type(a))
            if f is None:
                return None
            parts.append(f)
    return "".join(parts)


_NO_LAUNCHES = {}


def _driver_key(dispatcher, args):
    """What names a driver launch among a handle's: the dispatcher and each later argument's
    signature (a :class:`RawArray`'s dtype, dimensions and layout; a numpy scalar's class);
    None where the launch cannot go through the driver (not installed, no handle first, an
    argument of another kind)."""
    if not _DRIVER_ON or not args or type(args[0]) not in HANDLE_CLASSES:
        return None
    key = [dispatcher]
    for a in args[1:]:
        cls = type(a)
        if cls is RawArray:
            key.append(a.signature)
        elif cls in _SCALAR_FORMATS:
            key.append(cls)
        else:
            return None
    return tuple(key)


def _driver_launch(kernel, key, args):
    """The :class:`_DriverLaunch` of ``kernel`` (the one the dispatcher compiled for ``args``)
    under ``key``, made once and kept on the handle; None where the handle's arguments are not
    kept yet (numba-cuda's launch of it keeps them) or cannot be written as they are."""
    launches = args[0].__dict__.setdefault(_DRIVER_KEY, {})
    if key in launches:
        return launches[key]
    if kept_arguments(args[0]) is None:
        return None
    driver = launches[key] = _make_driver_launch(kernel, args[0], _var_format(args[1:]))
    return driver


def _make_driver_launch(kernel, handle, var_format):
    fixed = [_fixed_bytes(v) for v in kept_arguments(handle)]
    if any(b is None for b in fixed):
        return None
    try:
        cufunc = kernel._codelibrary.get_cufunc()
        raw = cufunc.handle
        address = int(raw)
    except (AttributeError, TypeError, ValueError):
        return None
    function = ctypes.c_void_p(address)
    if type(raw).__name__ == "CUkernel":   # a library's kernel: this context's function
        function = ctypes.c_void_p()
        if _cuda_driver().cuKernelGetFunction(ctypes.byref(function), address) != 0:
            return None
    return _DriverLaunch(function, b"".join(fixed), var_format)


#: Whether :func:`launch` goes through the driver (set by :func:`install` with the setting).
_DRIVER_ON = False


def install_simulator_guard():
    """In the simulator: run the handles' launch guards before each launch (idempotent)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    original = FakeCUDAKernel.__call__
    if hasattr(original, "gids_wrapped"):
        return

    def __call__(self, *args):
        if not self._device:
            check_handles(args)
        return original(self, *args)

    __call__.gids_wrapped = original
    FakeCUDAKernel.__call__ = __call__


def installed():
    """True when :func:`install` has taken effect in this process."""
    if SIMULATOR:
        return False
    from numba.cuda.dispatcher import _Kernel
    return hasattr(_Kernel._prepare_args, "gids_wrapped")


def kept_arguments(handle):
    """The kernel arguments kept for ``handle`` (or a Numba device array: a list), or None
    before its first launch."""
    kept = handle.__dict__.get(_ARGS_KEY)
    return None if kept is None else kept[1]
