"""Warp intrinsics under one set of names for the GPU and the simulator.

On the GPU these are Numba's own (``activemask``, ``match_any_sync``, ``shfl_sync`` ...). The
simulator has none of them, so there each thread is a warp of one (see :mod:`kernels.platform`):
the mask is one bit, every thread leads its own group, a shuffle returns the caller's value.
``nanosleep`` sleeps for real in the simulator so that spinning threads let the GIL go.
"""
import time

from kernels.platform import SIMULATOR, WARP_SIZE, device_helper

if SIMULATOR and WARP_SIZE == 1:
    def activemask():
        return 1

    def laneid():
        return 0

    def lanemask_lt():
        return 0

    def match_any_sync(mask, value):
        return 1

    def ballot_sync(mask, predicate):
        return 1 if predicate else 0

    def shfl_sync(mask, value, src_lane):
        return value

    def syncwarp(mask):
        pass

    def nanosleep(ns):
        time.sleep(ns * 1e-9)

    def popc(x):
        return bin(x).count("1")

elif SIMULATOR:
    # Emulated 32-lane warps: each collective is a rendezvous of the lanes of its mask (one
    # Python thread per CUDA thread) that swaps their values. Every lane of a mask must reach
    # the same collectives in the same order, as on the GPU. A lane is converged with its whole
    # warp unless a test splits it off (:func:`diverge`): then the lanes of each part meet only
    # each other, as the parts of a diverged warp do on the GPU.
    import threading

    _warps = {}
    _warps_lock = threading.Lock()
    _RENDEZVOUS_TIMEOUT = 120.0   # a lane that never arrives fails the kernel, not hangs it
    # A polling lane sleeps at least this long: 32 lanes of a warp waiting (say, for another
    # warp's queue entries) and waking every few microseconds took the GIL from the warp they
    # waited for so often that each of its rendezvous took up to a second (two warps on one
    # queue of 32 entries: 40 to 90 s per kernel; 9 s with this floor).
    _MIN_SLEEP_S = 1e-2
    _parts = threading.local()    # the masks this thread's next activemask() calls return

    class _Warp:
        def __init__(self, n_lanes):
            self.lanes = (1 << n_lanes) - 1
            self.lock = threading.Lock()
            self.groups = {}   # mask -> (barrier of its lanes, their values)

        def group(self, mask):
            with self.lock:
                g = self.groups.get(mask)
                if g is None:
                    g = self.groups[mask] = (
                        threading.Barrier(popc(mask), timeout=_RENDEZVOUS_TIMEOUT),
                        [None] * 32)
                return g

    def _me():
        t = threading.current_thread()
        block_threads = t._manager._block_dim
        n_block = block_threads[0] * block_threads[1] * block_threads[2]
        warp = t.thread_id // 32
        # The block's size is part of the key: a later launch's manager can get the id of a
        # freed one, and a stale warp of another size then raised IndexError in _exchange.
        key = (id(t._manager), tuple(t.blockIdx), warp, n_block)
        with _warps_lock:
            w = _warps.get(key)
            if w is None:
                w = _warps[key] = _Warp(min(32, n_block - warp * 32))
        return w, t.thread_id % 32

    def _exchange(mask, value):
        """The values of ``mask``'s lanes (a list by lane; None for the others)."""
        w, lane = _me()
        mask = int(mask) & w.lanes
        if not mask >> lane & 1:
            raise AssertionError(f"lane {lane} in a collective whose mask {mask:#x} lacks it")
        barrier, values = w.group(mask)
        values[lane] = value
        barrier.wait()
        got = [v if mask >> k & 1 else None for k, v in enumerate(values)]
        barrier.wait()   # nobody writes the next round's value before all have read
        return got

    def diverge(masks):
        """Emulation only, for tests: this thread's next ``activemask()`` calls return
        ``masks`` in turn, then the last one until ``diverge(())`` (the whole warp again): a
        warp split into parts at a point CUDA allows (convergence is promised only at the
        synchronising intrinsics)."""
        _parts.masks = list(masks)

    def activemask():
        masks = getattr(_parts, "masks", None)
        if masks:
            return masks.pop(0) if len(masks) > 1 else masks[0]
        return _me()[0].lanes

    def laneid():
        return _me()[1]

    def lanemask_lt():
        return (1 << laneid()) - 1

    def match_any_sync(mask, value):
        values = _exchange(mask, value)
        return sum(1 << k for k, v in enumerate(values) if v is not None and v == value)

    def ballot_sync(mask, predicate):
        values = _exchange(mask, bool(predicate))
        return sum(1 << k for k, v in enumerate(values) if v)

    def shfl_sync(mask, value, src_lane):
        # Undefined on the GPU for a source lane outside the mask (a stale register): an error.
        src_lane = int(src_lane)
        if not int(mask) >> src_lane & 1:
            raise AssertionError(f"shfl_sync from lane {src_lane}, outside its mask {int(mask):#x}")
        return _exchange(mask, value)[src_lane]

    def syncwarp(mask):
        _exchange(mask, None)

    def nanosleep(ns):
        time.sleep(max(ns * 1e-9, _MIN_SLEEP_S))

    def popc(x):
        return bin(x).count("1")

else:
    import numpy as np
    from numba import cuda

    # Numba's stubs cannot be re-bound to other names (typing looks them up as cuda.X), so
    # each is wrapped in an inlined device function. Lane masks come back as int64 in 0..2**32-1:
    # numba-cuda 0.30 types ballot_sync as int32, so a mask with lane 31 set would be negative,
    # and `m &= m - 1` over it sign-extends and never ends after 32 lanes.
    @cuda.jit(device=True, inline=True)
    def activemask():
        return np.int64(cuda.activemask()) & 0xFFFFFFFF

    @cuda.jit(device=True, inline=True)
    def laneid():
        return cuda.laneid

    @cuda.jit(device=True, inline=True)
    def lanemask_lt():
        return np.int64(cuda.lanemask_lt()) & 0xFFFFFFFF

    @cuda.jit(device=True, inline=True)
    def match_any_sync(mask, value):
        return np.int64(cuda.match_any_sync(mask, value)) & 0xFFFFFFFF

    @cuda.jit(device=True, inline=True)
    def ballot_sync(mask, predicate):
        return np.int64(cuda.ballot_sync(mask, predicate)) & 0xFFFFFFFF

    @cuda.jit(device=True, inline=True)
    def shfl_sync(mask, value, src_lane):
        return cuda.shfl_sync(mask, value, src_lane)

    @cuda.jit(device=True, inline=True)
    def syncwarp(mask):
        cuda.syncwarp(mask)

    @cuda.jit(device=True, inline=True)
    def nanosleep(ns):
        cuda.nanosleep(ns)

    @cuda.jit(device=True, inline=True)
    def popc(x):
        # int64, so that index arithmetic never mixes signed and unsigned (which Numba types
        # as float64).
        return np.int64(cuda.popc(x))


@device_helper
def lowest_lane(bits):
    """Index of the lowest set bit of a non-zero lane mask (0-based)."""
    return popc((bits & (~bits + 1)) - 1)


@device_helper
def highest_lane(bits):
    """Index of the highest set bit of a non-zero lane mask."""
    n = 0
    while bits > 1:
        bits >>= 1
        n += 1
    return n
