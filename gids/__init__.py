"""gids: GPU-initiated storage for Python.

Numba CUDA kernels read arrays far larger than GPU memory as if they were resident: a page
cache on the GPU absorbs repeated accesses, and on a miss the kernel itself queues the I/O,
which host daemon threads serve. Without a GPU everything runs in Numba's CUDA simulator.

>>> import gids, numpy as np
>>> with gids.Runtime(cache_bytes=1 << 20) as rt:             # doctest: +SKIP
...     a = rt.open_array("data.bin", np.float32)
...     values = rt.gather(a, np.array([3, 1 << 20]))         # DLPack / CUDA array
...     print(rt.stats())

In your own kernels::

    @gids.jit                      # numba.cuda.jit with registers capped (see gids.jit)
    def kernel(h, out):
        i = numba.cuda.grid(1)
        out[i] = gids.read(h, 2 * i)

    kernel[blocks, threads](a.handle, out); rt.sync()

Warp helpers, atomics and ordered loads for your own kernels are in :mod:`gids.device`; every
setting (``gids.defaults``) is listed in :mod:`kernels.settings`.

A warp that reads much of a page looks it up once (``k = gids.pin_page(h, i)``; then
``gids.pinned(h, k + j)`` for ``j < gids.page_room(h, i)``; ``gids.unpin_page(h, i, k)``, or
``gids.unpin_page_after(h, i, k, used)`` with a value computed from every element read, which
spares the unpin its fence). ``gids.pin_page_if_resident(h, i)`` is the pin without the miss
path: -1 where the page is not in the cache, for kernels that expect hits and can put a miss's
work aside. ``gids.pin_page_or_tier(h, i)`` is the pin for an array whose host tier is in direct
mode: a page not in the GPU cache but in the tier is read in place there and takes no slot
(read with ``gids.pinned_or_tier``, give back with ``gids.unpin_page_or_tier`` /
``gids.unpin_page_after_or_tier``).

Writes (arrays opened with ``mode="r+"``): ``gids.write(h, i, value)`` in a kernel, or
``rt.scatter(a, indices, values)``; ``rt.flush()`` (and leaving the ``with`` block) writes every
dirty page back and makes it durable.
"""
from gids import _platform  # noqa: F401  (first: picks GPU or simulator before numba loads)

# isort: split
from gids import defaults, device, errors, host, layout  # device, host: toolkits (see each)
from gids.array import StorageArray
from gids.errors import (
    AbortedError,
    CacheExhaustedError,
    ConfigError,
    DaemonError,
    GidsError,
    GidsTimeoutError,
    HoldLimitError,
    HostTierFullError,
    ImportOrderError,
    IndexOutOfRangeError,
    NotHeldError,
    ReadOnlyError,
    SharedFileError,
    StaleHandleError,
    StorageIOError,
)
from gids.runtime import Runtime
from gids.stats import FileStats, Stats
from gids.window import Hold, side_stream
from host_daemon.ssd_model import PROFILES as _SSD_PROFILES
from host_daemon.stores import FaultyStore, FileStore, MemoryStore, MmapStore, StripedStore
from host_daemon.trace import read_trace, replay
from kernels.access import (
    page_room,
    pin_page,
    pin_page_if_resident,
    pin_page_or_tier,
    pinned,
    pinned_or_tier,
    read,
    unpin_page,
    unpin_page_after,
    unpin_page_after_or_tier,
    unpin_page_or_tier,
    write,
)
from kernels.platform import MAX_REGISTERS, SIMULATOR, jit

# A launch with a closed Runtime's handle raises StaleHandleError before it starts; on a GPU a
# launch with a handle costs the host ~70 us instead of ~500 (kernels/launch.py).
if SIMULATOR:
    from kernels.simulator import fix_shared_arrays
    fix_shared_arrays()
    from kernels.launch import install_simulator_guard as _install_launches
else:
    from kernels.launch import install as _install_launches
_install_launches()

__version__ = "0.1.0"


def ssd_profiles():
    """Names of the SSD profiles ``Runtime(ssd=...)`` and ``gids simulate --ssd`` accept."""
    return sorted(_SSD_PROFILES)


__all__ = [
    "Runtime", "StorageArray", "Stats", "FileStats", "read", "write", "pin_page",
    "pin_page_if_resident", "pin_page_or_tier", "pinned_or_tier", "unpin_page_or_tier",
    "unpin_page_after_or_tier",
    "pinned", "unpin_page",
    "unpin_page_after",
    "page_room", "Hold", "side_stream", "jit", "MAX_REGISTERS", "defaults",
    "layout", "errors", "device", "host", "SIMULATOR",
    "FileStore", "MemoryStore", "MmapStore", "FaultyStore", "StripedStore", "ssd_profiles",
    "read_trace", "replay",
    "GidsError", "ConfigError", "StorageIOError", "IndexOutOfRangeError", "GidsTimeoutError",
    "CacheExhaustedError", "DaemonError", "AbortedError", "ReadOnlyError", "SharedFileError",
    "StaleHandleError", "ImportOrderError", "HoldLimitError", "NotHeldError",
    "HostTierFullError",
]
