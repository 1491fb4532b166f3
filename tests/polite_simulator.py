"""Numba's CUDA simulator, with a block manager that lets the GIL go while it polls.

The simulator runs each CUDA thread of a block as a Python thread, and the block's manager
(``numba.cuda.simulator.kernel.BlockManager.run``) polls them in a loop that never blocks: the
threads it waits for get the GIL only when the interpreter takes it from the manager (each
switch interval). With gids's kernels, whose threads mostly wait on one another (warp
rendezvous, the host daemon), the manager held the GIL for a good part of each run: an
emulated-warp test took 12-13 s, 5 s with the manager napping ``time.sleep(0)`` (no delay: it
only lets a waiting thread run) once per pass over the block's threads.

:func:`install` puts that manager in place: the same loop, plus the nap. It does so only for
the loop it was written against (the source's hash): a numba-cuda whose loop changed keeps its
own, and the tests just run slower. Nothing else about the simulator changes.
"""
import hashlib
import inspect
import time

import numpy as np

#: SHA-256 of ``inspect.getsource(BlockManager.run)`` of the numba-cuda the copy below follows
#: (0.30.4).
_KNOWN_RUN = "54626c6819f55d514a598517b1467ed1cc2e7c3bf1f3b9814e13ef2a4ba3541f"


def install():
    """Replace the simulator's ``BlockManager.run`` (see the module); True if it was."""
    from numba.cuda.simulator import kernel as K
    run = K.BlockManager.run
    if getattr(run, "_polite", False):
        return True
    if hashlib.sha256(inspect.getsource(run).encode()).hexdigest() != _KNOWN_RUN:
        return False

    def polite_run(self, grid_point, *args):
        # numba-cuda 0.30.4's BlockManager.run, with time.sleep(0) at the end of each pass.
        threads = set()
        livethreads = set()
        blockedthreads = set()
        for block_point in np.ndindex(*self._block_dim):

            def target():
                self._f(*args)

            t = K.BlockThread(target, self, grid_point, block_point, self._debug)
            t.start()
            threads.add(t)
            livethreads.add(t)

        while livethreads:
            for t in livethreads:
                if t.syncthreads_blocked:
                    blockedthreads.add(t)
                elif t.exception:
                    for t_other in threads:
                        t_other.abort = True
                        t_other.syncthreads_blocked = False
                        t_other.syncthreads_event.set()

                    raise t.exception[0].with_traceback(t.exception[1])
            if livethreads == blockedthreads:
                for t in blockedthreads:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                blockedthreads = set()
            livethreads = set([t for t in livethreads if t.is_alive()])
            time.sleep(0)      # the only change: let the threads polled for run
        for t in threads:
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    polite_run._polite = True
    K.BlockManager.run = polite_run
    return True
