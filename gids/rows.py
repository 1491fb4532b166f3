"""``Runtime.gather_rows``: whole rows of a 2-D array, through the cache, into any CUDA array,
asynchronously on the caller's stream.

The kernel (:mod:`kernels.rows`) copies a row per warp, a page at a time through
``pin_page`` / ``pinned`` / ``unpin_page``. Resident first (``rows_resident_first``: by
default "auto", for gathers of :data:`RESIDENT_FIRST_ROWS` rows or more) a gather is two
launches on the stream: the rows whose pages are resident, by a kernel with no miss path, then
the rows it set aside (a list the Runtime keeps per stream), through ``pin_page``. Everything
a caller can get wrong is checked here, before any kernel: the array (2-D, this Runtime's),
host row indices (range), ``out`` (shape, dtype, on the GPU, on this device), the stream (its
device). Device row indices are checked by the kernel (an out-of-range row is recorded and
raised by the next :meth:`Runtime.sync`).

The launch does not wait. Its kernel's errors are raised by the next :meth:`Runtime.sync`
(which waits for launches on every stream) or :meth:`Runtime.check` (which does not wait).
"""
import numpy as np

import kernels.rows as row_kernels
from gids import defaults
from gids.errors import ConfigError, IndexOutOfRangeError
from gids.interop import (
    DeviceArray,
    as_host,
    as_numba_on,
    current_device_id,
    is_cuda_array,
    launch_array_on,
    numba_stream,
    stream_handle,
)
from kernels.launch import RawArray, launch
from kernels.platform import SIMULATOR

#: Threads per block of the launch; blocks: enough warps for the rows, at most this many.
THREADS = 32 if SIMULATOR else 256
MAX_BLOCKS = 2 if SIMULATOR else 132 * 16
#: Blocks of a resident-first gather's second launch at most: it reads its row count on the
#: device, so it is sized for every row, but what it copies waits on loads; a grid the GPU
#: runs at once (2 blocks a SM at 128 registers) serves those as fast, and an empty list then
#: costs 264 blocks that exit, not 2112.
SET_ASIDE_BLOCKS = 2 if SIMULATOR else 132 * 2
#: ``rows_resident_first="auto"`` makes two launches from this many rows up: there the GPU's
#: time (~0.15 ms at HBM speed for 4 KiB rows) hides the host's for a second launch. On the
#: H200, whole-cache gathers of 4 KiB rows: at 32 k rows one launch and two take the same
#: time, at 262 k two take 8 % less (1.74 TB/s against 1.61; index_select 1.87).
RESIDENT_FIRST_ROWS = 1 << 16


def resident_first(n_rows):
    """Whether a gather of ``n_rows`` rows goes resident first (setting ``rows_resident_first``:
    ``"auto"``, True or False)."""
    choice = defaults.get("rows_resident_first")
    if choice == "auto":
        return n_rows >= RESIDENT_FIRST_ROWS
    return bool(choice)


def _row_indices(rows, on_host, n_rows, device):
    """``rows`` checked: a 1-D integer device array as a launch takes it
    (:func:`gids.interop.launch_array_on`), or host indices (range-checked here) as a 1-D numpy
    array, to upload. ``on_host``: ``not is_cuda_array(rows)``; ``device``: the Runtime's."""
    if not on_host:
        d, on = launch_array_on(rows)
        if d.ndim != 1 or d.dtype.kind not in "iu":
            raise ConfigError(f"gids: gather_rows takes a 1-D array of integer row indices, "
                              f"got a {d.ndim}-D array of {d.dtype}")
        if on is not None and on != device:
            raise ConfigError(f"gids: the row indices are on device {on}, the Runtime on "
                              f"device {device}")
        return d
    host = as_host(rows)
    if host.dtype.kind not in "iu" or host.ndim > 1:
        raise ConfigError(f"gids: gather_rows takes a 1-D array of integer row indices, got a "
                          f"{host.ndim}-D array of {host.dtype}")
    host = host.reshape(-1)
    first = first_out_of_range(host, n_rows)
    if first >= 0:
        raise IndexOutOfRangeError(f"gids: row {int(host[first])} (position {first}) is out of "
                                   f"range for an array of {n_rows} rows")
    return host


def first_out_of_range(host, n):
    """The position of the first index of ``host`` (a 1-D numpy integer array) outside
    ``[0, n)``, or -1. No temporary where all are in range: int64 indices (torch's, numpy's)
    in one pass, as uint64 (a negative index is then above any count); others by their least
    and greatest. The mask only to name the first bad one (compared as Python ints: a uint64
    above 2**63 - 1 stays itself)."""
    if not host.size:
        return -1
    if host.dtype == np.int64:
        bad_any = int(host.view(np.uint64).max()) >= n
    else:
        bad_any = int(host.min()) < 0 or int(host.max()) >= n
    if not bad_any:
        return -1
    bad = (host >= n) if host.dtype.kind == "u" else (host < 0) | (host >= n)
    return int(np.flatnonzero(bad)[0])


def output_array(out, shape, dtype, device=None, for_launch=False):
    """``(array to write, what to return)`` for ``out`` (``rt.gather``'s and
    ``rt.gather_rows``'s): the caller's CUDA array (CUDA Array Interface: torch, CuPy, Numba,
    a :class:`DeviceArray`) checked for ``shape`` (a tuple), ``dtype`` and ``device`` (None:
    the current one), or a new :class:`DeviceArray` if None. The array to write is a Numba
    array, or with ``for_launch`` what :func:`kernels.launch.launch` takes
    (:func:`gids.interop.launch_array_on`)."""
    view_on = launch_array_on if for_launch else as_numba_on
    if out is None:
        from numba import cuda
        d = cuda.device_array(shape, dtype=dtype)
        return (view_on(d)[0] if for_launch else d), DeviceArray(d)
    if not is_cuda_array(out):
        if SIMULATOR:   # host memory stands for GPU memory there: numpy, a CPU tensor
            d = as_host(out)
            if not d.flags.writeable:
                raise ConfigError("gids: out is read-only")
        else:
            raise ConfigError(f"gids: out must be a CUDA array (with __cuda_array_interface__: "
                              f"torch, CuPy, Numba), got {type(out).__name__}")
    else:
        d, on = view_on(out)
        if on is not None:
            if device is None:
                device = current_device_id()
            if on != device:
                raise ConfigError(f"gids: out is on device {on}, the Runtime on device {device}")
    if d.shape != shape or d.dtype != dtype:
        raise ConfigError(f"gids: out must be {shape} of {np.dtype(dtype)}, got "
                          f"{tuple(d.shape)} of {np.dtype(d.dtype)}")
    return d, out


def gather_rows(rt, array, rows, out=None, stream=None):
    """See :meth:`gids.Runtime.gather_rows`."""
    rt._check_array(array, "gather_rows")
    shape = array.shape
    if len(shape) != 2:
        raise ConfigError(f"gids: gather_rows needs a 2-D array, got shape {shape}")
    n_rows, width = shape
    device = rt._device_id
    handle, stream_device = stream_handle(stream)
    if stream_device is not None and stream_device != device:
        raise ConfigError(f"gids: the stream is on device {stream_device}, the Runtime on "
                          f"device {device}")
    s = numba_stream(handle, device)
    on_host = not is_cuda_array(rows)
    d_rows = _row_indices(rows, on_host, n_rows, device)
    n = d_rows.size
    target, result = output_array(out, (n, width), array.dtype, device, for_launch=True)
    if n == 0:
        return result
    buf = None
    if on_host:
        # Host rows go down on the launch's stream from a pooled pinned buffer (gids/staging.py):
        # no allocation, no copy the host waits for; the buffer is reused once the launch ends.
        buf = rt._staging.take(n)
        d_rows = buf.upload_for_launch(d_rows, s)
    words = _words_of(target, width, array.dtype.itemsize)
    wide = words is not None
    args = (array.handle, d_rows, np.int64(width), words if wide else target)
    # What the launch reads or writes that the caller may drop: device row indices, the
    # output made here (a caller that drops the returned array frees it while the kernel
    # writes it: a stream-ordered or pooled allocator hands the memory on at once), and the
    # caller's arrays (their views do not hold them).
    keep = (d_rows, target, rows, out, result)
    if resident_first(n):
        # The resident rows first, without a miss path; then the rows it set aside.
        aside, n_aside, lists = _aside_list(rt, n, (device, handle), s)
        resident, set_aside = row_kernels.resident_rows_kernels(wide)
        launch(resident, _blocks(rt, n, row_kernels.RESIDENT_ROWS), THREADS, s, *args, aside,
               n_aside)
        launch(set_aside, _blocks(rt, n, row_kernels.SET_ASIDE_ROWS), THREADS, s, *args, aside,
               n_aside)
        keep += (lists,)
    else:
        launch(row_kernels.gather_rows_kernel(wide), _blocks(rt, n, row_kernels.ALL_ROWS),
               THREADS, s, *args)
    if buf is not None:
        rt._staging.give_back(buf, s)
    ready = note_launch(rt, s, keep)
    if isinstance(result, DeviceArray):
        result.ready = ready
    return result


def _blocks(rt, n, mode):
    """Blocks of a ``mode`` launch over ``n`` rows: enough for the rows, at most
    :data:`MAX_BLOCKS`, and few enough that the grid's pins (a warp holds up to
    :func:`kernels.rows.rows_per_warp` at once) stay within half the cache, so that the pages
    its warps wait for can still be evicted into."""
    rows_per_block = (THREADS // 32) * row_kernels.rows_per_warp(mode)
    pin_cap = max(1, rt.cache_slots // (2 * rows_per_block))
    most = SET_ASIDE_BLOCKS if mode == row_kernels.SET_ASIDE_ROWS else MAX_BLOCKS
    return max(1, min(-(-n // rows_per_block), most, pin_cap))


def _words_of(target, width, itemsize):
    """``target`` (the output, as a launch takes it) as a 1-D array of 8-byte words, where the
    rows can be copied 16 bytes at a time into it (:func:`kernels.rows.wide_rows`); else None."""
    if type(target) is RawArray:
        if not row_kernels.wide_rows(width, itemsize, target.ptr,
                                     target.numba_type.layout == "C"):
            return None
        return RawArray(target.ptr, (target.size * itemsize // 8,), (8,), np.uint64)
    # the simulator: a numpy array or Numba's stand-in for a device array (alignment: numpy's)
    if not row_kernels.wide_rows(width, itemsize, 0, target.flags["C_CONTIGUOUS"]):
        return None
    return target.reshape(target.size).view(np.uint64)


#: Streams a Runtime keeps a set-aside list for (the oldest one's is dropped beyond).
MAX_ASIDE_LISTS = 8
#: Rows a set-aside list holds at least (a larger gather's list: the next power of two).
MIN_ASIDE_ROWS = 1 << 10
_ZERO = np.zeros(1, dtype=np.int64)


def _aside_list(rt, n, key, stream):
    """``(aside, n_aside, arrays)`` for a resident-first gather of ``n`` rows on ``stream``
    (``key``: its device and handle): the stream's list and its count as a launch takes them
    (:func:`gids.interop.launch_array_on`), the count zeroed on the stream, and the arrays
    themselves for the launch to keep. Kept per
    stream, not allocated per gather (a ``cudaFree`` waits for the whole device), and reused
    with no wait on the host: the stream runs the last gather's launches before the zeroing.
    A list outgrown or dropped stays alive through its last launch's ``keep``."""
    from numba import cuda
    lists = rt._rows_aside_lists
    kept = lists.get(key)
    if kept is None or kept[0].size < n:
        lists.pop(key, None)
        if len(lists) >= MAX_ASIDE_LISTS:
            lists.pop(next(iter(lists), None), None)
        arrays = (cuda.device_array(max(MIN_ASIDE_ROWS, 1 << (n - 1).bit_length()),
                                    dtype=np.int64),
                  cuda.device_array(1, dtype=np.int64))
        kept = lists[key] = (*(launch_array_on(a)[0] for a in arrays), arrays)
    arrays = kept[2]
    if SIMULATOR:
        arrays[1].copy_to_device(_ZERO, stream=stream)
    else:   # a memset is queued as is; a copy from pageable memory is staged by the driver
        from numba.cuda.cudadrv.driver import device_memset
        device_memset(arrays[1], 0, arrays[1].nbytes, stream=stream)
    return kept


def note_launch(rt, stream, keep=()):
    """Record an event on ``stream`` (a Numba stream) after a launch, for :meth:`Runtime.sync`
    and :meth:`Runtime.check` to wait for; ``keep``: arrays the launch reads that nothing else
    holds, kept until then. Returns the event (None in the simulator)."""
    if SIMULATOR:
        return None
    return rt._kernels.record(stream, keep, ahead_timeout=rt.timeout)


def check(rt):
    """See :meth:`gids.Runtime.check`."""
    from numba import cuda

    from gids.waiting import event_done
    rt._check_open()
    if not SIMULATOR:
        on_default = cuda.event(timing=False)
        on_default.record()
        if not (event_done(on_default) and rt._kernels.streams_done()):
            return False
    rt.sync()
    return True


__all__ = ["check", "first_out_of_range", "gather_rows", "note_launch", "output_array"]
