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

    def ffs(x):
        return (x & -x).bit_length()

    def popc(x):
        return bin(x).count("1")

else:
    from numba import cuda

    activemask = cuda.activemask
    laneid = cuda.laneid
    lanemask_lt = cuda.lanemask_lt
    match_any_sync = cuda.match_any_sync
    ballot_sync = cuda.ballot_sync
    shfl_sync = cuda.shfl_sync
    syncwarp = cuda.syncwarp
    nanosleep = cuda.nanosleep
    ffs = cuda.ffs
    popc = cuda.popc
