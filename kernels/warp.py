"""Warp intrinsics under one set of names for the GPU and the simulator.

On the GPU these are Numba's own (``activemask``, ``match_any_sync``, ``shfl_sync`` ...). The
simulator has none of them, so there each thread is a warp of one (see :mod:`kernels.platform`):
the mask is one bit, every thread leads its own group, a shuffle returns the caller's value.
``nanosleep`` sleeps for real in the simulator so that spinning threads let the GIL go.
"""
import time

from kernels.platform import SIMULATOR

if SIMULATOR:
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

else:
    import numpy as np
    from numba import cuda

    # Numba's stubs cannot be re-bound to other names (typing looks them up as cuda.X), so
    # each is wrapped in an inlined device function.
    @cuda.jit(device=True, inline=True)
    def activemask():
        return cuda.activemask()

    @cuda.jit(device=True, inline=True)
    def laneid():
        return cuda.laneid

    @cuda.jit(device=True, inline=True)
    def lanemask_lt():
        return cuda.lanemask_lt()

    @cuda.jit(device=True, inline=True)
    def match_any_sync(mask, value):
        return cuda.match_any_sync(mask, value)

    @cuda.jit(device=True, inline=True)
    def ballot_sync(mask, predicate):
        return cuda.ballot_sync(mask, predicate)

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
