"""Choose the world before Numba's CUDA module loads: the GPU if there is one, else the simulator.

Numba reads ``NUMBA_ENABLE_CUDASIM`` when it is first imported, so this module must run before
anything imports ``numba``; ``gids/__init__.py`` imports it first.
"""
import ctypes
import os
import sys


def _gpu_present():
    """True if the CUDA driver loads and sees at least one device (no Numba involved)."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return False
    count = ctypes.c_int(0)
    try:
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return False
    except AttributeError:
        return False
    return count.value > 0


def choose_world():
    """Set NUMBA_ENABLE_CUDASIM=1 when there is no GPU and the user has not chosen."""
    if "NUMBA_ENABLE_CUDASIM" in os.environ:
        return
    if _gpu_present():
        return
    if "numba.cuda" in sys.modules:
        from gids.errors import ImportOrderError
        raise ImportOrderError(
            "gids: there is no GPU here, and numba.cuda was imported before gids, so gids cannot "
            "switch Numba to its CUDA simulator any more: import gids before numba.cuda (or set "
            "NUMBA_ENABLE_CUDASIM=1 before Python starts)")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba" in sys.modules:
        import numba
        numba.config.reload_config()


choose_world()


def host_view(mapped):
    """The numpy array behind a mapped (pinned, device-visible) array, for host code."""
    import numpy as np
    inner = getattr(mapped, "_ary", None)   # the simulator's FakeCUDAArray
    if inner is not None:
        return inner
    return np.asarray(mapped).view(type=np.ndarray)


def mapped_view(mapped, dtype):
    """A mapped 1-D array seen as ``dtype`` by kernels. ``MappedNDArray.view`` fails on a GPU when
    the item size changes (it lacks ``is_c_contiguous``), so the device view is built from the
    same memory directly."""
    import numpy as np
    dtype = np.dtype(dtype)
    if dtype == mapped.dtype or getattr(mapped, "_ary", None) is not None:
        return mapped.view(dtype)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    n = mapped.nbytes // dtype.itemsize
    return DeviceNDArray((n,), (dtype.itemsize,), dtype, gpu_data=mapped.gpu_data)
