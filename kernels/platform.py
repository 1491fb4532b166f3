"""Which world the device code is compiled for: a real GPU, or Numba's CUDA simulator."""
from numba import config

#: True when ``NUMBA_ENABLE_CUDASIM=1``: kernels run as Python threads, one per CUDA thread.
SIMULATOR = bool(config.ENABLE_CUDASIM)

#: Threads that act together as one warp. The simulator has no warp intrinsics, so there each
#: thread is a warp of one (its own bit is the mask, a shuffle returns its own value); code
#: written against the helpers in :mod:`kernels.warp` stays correct in both worlds.
WARP_SIZE = 1 if SIMULATOR else 32
