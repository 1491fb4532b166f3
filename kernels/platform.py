"""Which world the device code is compiled for: a real GPU, or Numba's CUDA simulator."""
import os

from numba import config

#: True when ``NUMBA_ENABLE_CUDASIM=1``: kernels run as Python threads, one per CUDA thread.
SIMULATOR = bool(config.ENABLE_CUDASIM)

#: Threads that act together as one warp. The simulator has no warp intrinsics, so by default
#: each thread there is a warp of one (its own bit is the mask, a shuffle returns its own value).
#: ``GIDS_SIM_WARP_SIZE=32`` makes the simulator emulate 32-lane warps instead (slow, and every
#: thread of a warp must call ``gids.read`` together), so that tests reach the multi-lane paths:
#: coalescing, per-warp tickets, the cooperative copy. See :mod:`kernels.warp`.
WARP_SIZE = int(os.environ.get("GIDS_SIM_WARP_SIZE", "1")) if SIMULATOR else 32
if WARP_SIZE not in (1, 32):
    raise ValueError(f"GIDS_SIM_WARP_SIZE must be 1 or 32, got {WARP_SIZE}")
