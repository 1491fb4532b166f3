"""Timing a kernel's GPU time only, with the host's cost of launching it held out.

Why: CUDA events recorded around a launch on an idle stream may time the launch's host cost
too: if the start event reaches the GPU at once, the GPU then idles while the host types and
marshals the launch's arguments (tens of microseconds with a gids array handle,
kernels/launch.py, against plain hit kernels of 0.16-0.26 ms). Whether the driver stamps the
start event at once or only when it submits the launch behind it is not documented;
``python -m workloads.microbench launch`` times a launch both ways. Behind a latch the question does not arise.

How (the latch of cuda.core's test helpers, ``tests/helpers/latch.py``): before the start event,
a one-thread latch kernel is queued on the same stream. It spins on a flag word in mapped
(pinned, device-mapped) host memory with a system-scope acquire load
(:func:`kernels.sync.ld_acquire_sys`: side-effecting asm that the compiler reloads on every
iteration, where a plain read or ``cuda.ldcv`` would be hoisted out of the loop and hang), with
a nanosleep between polls. Then the start event, ``launch()`` (the host marshals while the GPU
is held), the stop event; then the host sets the flag and waits for the stop event. The stream
runs latch, start, kernel, stop back to back: the events time the GPU's work only.

Bounds: the latch gives up after :data:`TIMEOUT_S` by the GPU's global timer, writes its error
word and exits; the host then raises :class:`LatchTimeout`. A ``launch()`` that blocks the host
until the GPU has run its work (a synchronous copy from pinned memory, a copy back to the host)
would wait for the latch; so would one that compiles for seconds. A watchdog thread therefore
releases the latch after :data:`HOLD_S` whatever ``launch()`` is doing: a blocking launch is
then still timed on the GPU alone (its work is queued behind the latch), and a launch that
compiled includes the rest of its host time (``Timing.held`` is False; a median over repeats
drops it, as before).

In the CUDA simulator a launch runs to completion inside the call (a latch there would never
be released): the times are the wall clock around ``launch()``, and mean nothing.
"""
import threading
import time
import warnings
from collections import namedtuple

import gids  # noqa: F401  (first: picks the GPU or the simulator before numba.cuda loads)

# isort: split
import numpy as np
from numba import cuda

from gids import SIMULATOR
from gids.device import ld_acquire_sys, nanosleep, now_ns, st_release_sys

#: The latch gives up after this long (GPU global timer) and the host raises LatchTimeout.
TIMEOUT_S = 10.0
#: The host releases the latch after this long even if ``launch()`` has not returned (it may be
#: waiting for the GPU): far above a launch's host cost (< 1 ms), far below TIMEOUT_S.
HOLD_S = 0.25
#: The latch's poll interval (ns): its one thread sleeps this long between loads of the flag.
POLL_NS = 1000

#: Words of the latch's mapped buffer: the flag (the host writes the call's generation number
#: there to release it) and the error word (the latch writes the generation there on timeout).
FLAG, ERR = 0, 1


class LatchTimeout(RuntimeError):
    """The latch kernel was not released within its bound: the host never set its flag."""


#: One timed launch: GPU seconds (between the events), host seconds of ``launch()``, and whether
#: the latch held the GPU until ``launch()`` returned (False: released by the watchdog).
Timing = namedtuple("Timing", "gpu_s host_s held")


@cuda.jit
def latch_kernel(words, gen, timeout_ns):
    """Spin until ``words[FLAG] >= gen`` (the host's release); after ``timeout_ns``, write
    ``gen`` to ``words[ERR]`` and exit. One thread."""
    start = now_ns()
    while ld_acquire_sys(words, FLAG) < gen:
        if now_ns() - start > timeout_ns:
            st_release_sys(words, ERR, gen)
            return
        nanosleep(POLL_NS)


class _Latch:
    """The mapped words of the current CUDA context and the last generation used."""
    context = None
    words = None
    gen = 0


_latch = _Latch()


def _words():
    ctx = cuda.current_context()
    if _latch.context is not ctx:          # first use, or a new context: new mapped words
        _latch.words = cuda.mapped_array(2, dtype=np.int64)
        _latch.words[:] = 0
        _latch.context, _latch.gen = ctx, 0
    return _latch.words


def time_launch(launch, timeout_s=TIMEOUT_S, hold_s=HOLD_S):
    """Time the GPU work that ``launch()`` queues on the default stream, without its host cost.

    Returns :class:`Timing`. Raises :class:`LatchTimeout` if the latch timed out (the GPU time
    would then include host time)."""
    if SIMULATOR:
        start = time.perf_counter()
        launch()
        seconds = time.perf_counter() - start
        return Timing(seconds, seconds, True)
    words = _words()
    _latch.gen += 1
    gen = _latch.gen
    with warnings.catch_warnings():        # grid of one block: Numba's low-occupancy warning
        warnings.simplefilter("ignore")
        latch_kernel[1, 1](words, gen, int(timeout_s * 1e9))
    start, stop = cuda.event(), cuda.event()
    start.record()

    fired = []

    def release():
        words[FLAG] = gen                  # the host is the flag's one writer

    def watchdog_release():
        fired.append(True)
        release()

    watchdog = threading.Timer(hold_s, watchdog_release)
    watchdog.daemon = True
    watchdog.start()
    t0 = time.perf_counter()
    try:
        launch()
        host_s = time.perf_counter() - t0
        stop.record()
    finally:
        watchdog.cancel()
        watchdog.join()
        release()
    stop.synchronize()
    if words[ERR] == gen:
        raise LatchTimeout(f"the timing latch kernel was not released within {timeout_s} s "
                           f"(workloads/timing.py): launch() kept the host {host_s:.1f} s, and "
                           "the GPU time would include host time")
    return Timing(cuda.event_elapsed_time(start, stop) / 1e3, host_s, not fired)


def median_gpu_seconds(launch, repeat=3):
    """Median GPU seconds of ``launch()`` over ``repeat`` runs (:func:`time_launch`)."""
    return float(np.median([time_launch(launch).gpu_s for _ in range(repeat)]))
