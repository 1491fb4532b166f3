"""Work-arounds for bugs of Numba's CUDA simulator (numba-cuda 0.30); applied by ``import gids``
when the simulator is on."""
import sys
import threading

import numpy as np


def fix_shared_arrays():
    """Make the simulator's ``cuda.shared.array`` allocation thread-safe.

    The simulator gives all threads of a launch one array per call site, found by a
    ``dict.get`` then set without a lock: two threads of the first block can both miss and each
    get its own "shared" array, so their writes never meet (seen: 1 launch in 40 of a 128-thread
    kernel with ``sys.setswitchinterval(1e-6)``). This replacement does the same lookup under a
    lock, keyed like the original by the calling line (and without
    ``traceback.extract_stack``, which was slow). Idempotent.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_gids_thread_safe", False):
        return
    original = shared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:   # dynamic shared memory, or the error
            return original(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    shared.array = array
    shared._gids_thread_safe = True
