"""Handing arrays between gids and other GPU libraries (PyTorch, CuPy, Numba): DLPack and the
CUDA Array Interface out, indices, output arrays and streams in.

What gids returns (:class:`DeviceArray`) carries ``__cuda_array_interface__`` and DLPack
(``__dlpack__``, ``__dlpack_device__``): ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)`` and
``torch.as_tensor(a, device="cuda")`` take it without a copy. In the simulator the array lives
in host memory and DLPack names the CPU, so ``np.from_dlpack`` and ``torch.from_dlpack`` work
there too (the same code builds the capsule either way).

What gids takes: indices and output arrays that expose ``__cuda_array_interface__`` (any GPU
library) or, on the host, numpy arrays and anything ``np.from_dlpack`` reads (a CPU tensor);
streams as a PyTorch stream (``.cuda_stream``), a CuPy stream (``.ptr``), a Numba stream or a
raw ``cudaStream_t`` integer.
"""
import ctypes
import sys

import numpy as np
from numba import cuda

from gids.errors import ConfigError
from kernels.platform import SIMULATOR

# ------------------------------------------------------------------ DLPack (v0.8 ABI)

_KDL_CPU = 1
_KDL_CUDA = 2
_KDL_INT, _KDL_UINT, _KDL_FLOAT = 0, 1, 2
_DLPACK_CODES = {"i": _KDL_INT, "u": _KDL_UINT, "f": _KDL_FLOAT}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]

#: What each exported tensor keeps alive (its struct, shape and strides, the owning array),
#: by the struct's address, until the consumer calls the deleter (or the capsule dies unused).
_EXPORTED = {}


@_DELETER
def _delete_managed(managed):
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


_CAPSULE_NAME = b"dltensor"
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A consumer renames the capsule ("used_dltensor") and owns the tensor; one never consumed
    # still holds its name, and its tensor is freed here.
    if _pyapi.PyCapsule_IsValid(capsule, _CAPSULE_NAME):
        address = _pyapi.PyCapsule_GetPointer(capsule, _CAPSULE_NAME)
        _EXPORTED.pop(address, None)


def dlpack_capsule(owner, data_ptr, shape, strides_bytes, dtype, device):
    """A ``"dltensor"`` capsule over memory that ``owner`` keeps alive (strides in bytes)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _DLPACK_CODES:
        raise ConfigError(f"gids: no DLPack type for {dtype}")
    ndim = len(shape)
    shape_c = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_c = (ctypes.c_int64 * max(ndim, 1))(*(s // dtype.itemsize for s in strides_bytes))
    managed = _DLManagedTensor()
    t = managed.dl_tensor
    t.data = data_ptr
    t.device = _DLDevice(*device)
    t.ndim = ndim
    t.dtype = _DLDataType(_DLPACK_CODES[dtype.kind], dtype.itemsize * 8, 1)
    t.shape = ctypes.cast(shape_c, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_c, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete_managed
    address = ctypes.addressof(managed)
    _EXPORTED[address] = (managed, shape_c, strides_c, owner)
    return _pyapi.PyCapsule_New(address, _CAPSULE_NAME,
                                ctypes.cast(_capsule_destructor, ctypes.c_void_p))


# ------------------------------------------------------------------ streams

def stream_handle(stream):
    """``(handle, device)`` of a stream given as None (the default stream), a PyTorch, CuPy or
    Numba stream, or a raw ``cudaStream_t`` integer; ``device`` is None where the object does
    not say (a raw handle, a Numba stream)."""
    if stream is None:
        return 0, None
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return int(stream), None
    if hasattr(stream, "cuda_stream"):            # torch.cuda.Stream
        device = getattr(stream, "device", None)
        return int(stream.cuda_stream), getattr(device, "index", device)
    if hasattr(stream, "ptr") and hasattr(stream, "device_id"):   # cupy.cuda.Stream
        return int(stream.ptr), int(stream.device_id)
    if hasattr(stream, "handle") and not SIMULATOR:  # a numba stream: int() is its handle
        return int(stream), None
    if SIMULATOR and type(stream).__module__.startswith("numba.cuda.simulator"):
        return 0, None
    raise ConfigError(f"gids: stream must be a torch or CuPy stream, a Numba stream or an "
                      f"integer handle, got {type(stream).__name__}")


def current_device_id():
    """The id of the device this thread's CUDA context is on (0 in the simulator)."""
    if SIMULATOR:
        return 0
    return cuda.get_current_device().id


#: Numba stream objects by (device, handle): making one costs more than the launch it is for.
#: A stream object only names its handle, so one kept past its stream's end names whichever
#: stream the driver gives that handle next, rightly.
_STREAMS = {}
MAX_STREAMS = 64


def numba_stream(handle, device=None):
    """A Numba stream for ``handle`` (0: the default stream; the simulator ignores streams) on
    ``device`` (None: the current one), made once per (device, handle)."""
    if SIMULATOR:
        return cuda.default_stream()
    key = (current_device_id() if device is None else device, handle)
    stream = _STREAMS.get(key)
    if stream is None:
        if len(_STREAMS) >= MAX_STREAMS:
            # the oldest; None where another thread emptied it meanwhile
            _STREAMS.pop(next(iter(_STREAMS), None), None)
        stream = cuda.default_stream() if handle == 0 else cuda.external_stream(handle)
        _STREAMS[key] = stream
    return stream


# ------------------------------------------------------------------ arrays in

def device_of(obj):
    """The CUDA device an array object says it is on (torch ``.device.index``, CuPy
    ``.device.id``), or None."""
    device = getattr(obj, "device", None)
    if device is None:
        return None
    for name in ("index", "id"):
        value = getattr(device, name, None)
        if isinstance(value, int):
            return value
    return None


def _numba_device_array(obj):
    return getattr(obj, "__cuda_ndarray__", False)


def _torch_tensor(obj):
    """Whether ``obj`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_cuda_array(obj):
    """True for an object on the GPU: it has ``__cuda_array_interface__`` (or, in the
    simulator, is one of its device arrays)."""
    if SIMULATOR and hasattr(obj, "copy_to_host"):
        return True
    # torch first: a tensor's missing attribute (``__cuda_ndarray__``) costs an exception
    if _torch_tensor(obj):      # torch builds its interface (a dict) for hasattr too
        return obj.is_cuda
    if isinstance(obj, DeviceArray) or _numba_device_array(obj):
        return True
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:   # noqa: BLE001  (torch raises for CPU tensors on some versions)
        return False


class ViewCache:
    """Numba views of torch tensors, by what a view is: (pointer, shape, strides, dtype,
    device), its key.

    Making a view through ``__cuda_array_interface__`` costs tens of microseconds, more than
    the rest of a gather's host work, and a loader passes the same memory again and again (a
    slice of one output buffer, a new tensor object each batch). A view here is made from its
    key alone, with no owner: it holds no tensor and no memory, and is the view a new tensor
    at a freed and reused pointer would get made afresh. What keeps a tensor's memory alive
    while a launch reads it is the launch's own list (:func:`gids.rows.note_launch`'s
    ``keep``), as it holds the caller's objects.
    """

    def __init__(self, size=64):
        self.size = size
        self._views = {}    # key -> view, oldest first

    def get(self, key, make):
        """The view for ``key`` (``make(key)`` the first time)."""
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= self.size:
                self._views.pop(next(iter(self._views), None), None)
            view = self._views[key] = make(key)
        return view

    def __len__(self):
        return len(self._views)


_TORCH_VIEWS = ViewCache()


def torch_view_key(tensor):
    """What a view of a torch tensor is: (pointer, shape, strides in elements, dtype,
    device)."""
    return (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype,
            tensor.get_device())


_NUMPY_DTYPES = {}


def _numpy_dtype(torch_dtype):
    """numpy's dtype for a torch dtype (``torch.float32`` -> float32), or None (bfloat16)."""
    dtype = _NUMPY_DTYPES.get(torch_dtype, False)
    if dtype is False:
        try:
            dtype = np.dtype(str(torch_dtype).removeprefix("torch."))
        except TypeError:
            dtype = None
        _NUMPY_DTYPES[torch_dtype] = dtype
    return dtype


def view_from_key(key):
    """A Numba device array for a :func:`torch_view_key`, with no owner."""
    ptr, shape, strides, dtype, _ = key
    dtype = _numpy_dtype(dtype)
    desc = {"version": 3, "shape": shape, "typestr": dtype.str, "data": (ptr, False),
            "strides": tuple(s * dtype.itemsize for s in strides)}
    # no "stream": the launch is ordered on the caller's stream, not on the producer's
    return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


def as_numba(obj):
    """A Numba device array over a CUDA array object's memory (no copy). Torch tensors' views
    are kept by what they are (:class:`ViewCache`) and hold no tensor: the caller keeps it
    alive while a launch reads it."""
    if isinstance(obj, DeviceArray):
        return obj.device_array
    if not SIMULATOR and _torch_tensor(obj) and _numpy_dtype(obj.dtype) is not None:
        return _TORCH_VIEWS.get(torch_view_key(obj), view_from_key)
    if SIMULATOR or _numba_device_array(obj):
        return obj
    # sync=False: the launch is ordered on the caller's stream, not on the producer's.
    return cuda.as_cuda_array(obj, sync=False)


def as_numba_on(obj):
    """``(as_numba(obj), device_of(obj))``, with a torch tensor's device read from its view's
    key (one look at the tensor for both)."""
    if isinstance(obj, DeviceArray):
        return obj.device_array, None
    if not SIMULATOR and _torch_tensor(obj) and _numpy_dtype(obj.dtype) is not None:
        key = torch_view_key(obj)
        return _TORCH_VIEWS.get(key, view_from_key), key[4]
    if SIMULATOR or _numba_device_array(obj):
        return obj, device_of(obj)
    return cuda.as_cuda_array(obj, sync=False), device_of(obj)


def launch_array_on(obj):
    """``(array, device)`` of a CUDA array object, as a launch through
    :func:`kernels.launch.launch` takes it: on a GPU a :class:`kernels.launch.RawArray` (its
    pointer, shape and strides; no Numba array is made, which costs more than the launch), in
    the simulator the array itself (:func:`as_numba_on`). ``device`` is None where the object
    does not say."""
    if SIMULATOR:
        return as_numba_on(obj)
    from kernels.launch import RawArray
    if isinstance(obj, DeviceArray):
        obj = obj.device_array
    if _torch_tensor(obj):
        dtype = _numpy_dtype(obj.dtype)
        if dtype is None:
            raise ConfigError(f"gids: no numpy type for a tensor of {obj.dtype}")
        size = dtype.itemsize
        return RawArray(obj.data_ptr(), tuple(obj.shape), tuple(s * size for s in obj.stride()),
                        dtype), obj.get_device()
    if _numba_device_array(obj):
        ptr = obj.device_ctypes_pointer.value or 0
        return RawArray(ptr, obj.shape, obj.strides, obj.dtype), None
    cai = obj.__cuda_array_interface__
    dtype, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:     # C order
        strides, step = [], dtype.itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    return RawArray(cai["data"][0], shape, tuple(strides), dtype), device_of(obj)


def as_host(obj):
    """A numpy view of a host array object (numpy, a CPU tensor through DLPack, a list)."""
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError):
            pass
    return np.asarray(obj)


# ------------------------------------------------------------------ arrays out

class DeviceArray:
    """A GPU array that gids made: CUDA Array Interface and DLPack over a Numba device array.

    ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``, ``cupy.asarray(a)`` and
    ``torch.as_tensor(a, device="cuda")`` see the same memory, without a copy. ``ready`` is
    the CUDA event (or None) after which the contents are final: a consumer that passes its
    stream to ``__dlpack__`` has that stream wait for it.
    """

    def __init__(self, device_array, ready=None):
        self.device_array = device_array
        self.ready = ready

    shape = property(lambda self: tuple(self.device_array.shape))
    dtype = property(lambda self: np.dtype(self.device_array.dtype))
    ndim = property(lambda self: len(self.device_array.shape))
    size = property(lambda self: int(self.device_array.size))

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        """An element (copied to the host, as Numba's arrays do) or a view (a DeviceArray)."""
        item = self.device_array[key]
        return DeviceArray(item, self.ready) if hasattr(item, "copy_to_host") else item

    def copy_to_host(self):
        """The contents as a numpy array (waits for them)."""
        return self.device_array.copy_to_host()

    def __array__(self, dtype=None, copy=None):
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype)

    @property
    def __cuda_array_interface__(self):
        if SIMULATOR:
            raise AttributeError("the simulator's arrays are in host memory (use DLPack)")
        return self.device_array.__cuda_array_interface__

    def __dlpack_device__(self):
        if SIMULATOR:
            return (_KDL_CPU, 0)
        return (_KDL_CUDA, current_device_id())

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("gids: DeviceArray exports its own memory only (copy=True)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"gids: the array is on {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        if SIMULATOR:
            host = self.device_array._ary if hasattr(self.device_array, "_ary") \
                else np.asarray(self.device_array)
            return dlpack_capsule(host, host.ctypes.data, host.shape, host.strides,
                                  host.dtype, (_KDL_CPU, 0))
        if self.ready is not None and stream != -1:
            # DLPack's stream: None or 1 is the legacy default stream, 2 the per-thread one.
            handle = 0 if stream in (None, 1) else int(stream)
            self.ready.wait(numba_stream(handle))
        cai = self.device_array.__cuda_array_interface__
        d = self.device_array
        return dlpack_capsule(d, cai["data"][0], d.shape, d.strides, d.dtype,
                              (_KDL_CUDA, current_device_id()))

    def __repr__(self):
        return f"gids.DeviceArray(shape={self.shape}, dtype={self.dtype})"
