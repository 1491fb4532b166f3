"""Waiting for the kernels from the host: a poll loop that sees a short launch end within
microseconds and costs little CPU over a long one, and lets Ctrl-C in between polls."""
import threading
import time

from kernels.platform import SIMULATOR

#: How :meth:`gids.Runtime.sync` waits for the kernels (:func:`wait_nap`): polls back to back
#: for the first ``WAIT_SPIN_S``, then naps of ``WAIT_NAP_FRACTION`` of the time waited so far,
#: at most ``WAIT_NAP_S``.
WAIT_SPIN_S = 0.002
WAIT_NAP_FRACTION = 0.05
WAIT_NAP_S = 0.0005


def wait_nap(waited):
    """Seconds to sleep before the next poll, ``waited`` seconds into a wait.

    0 (poll again at once) for the first :data:`WAIT_SPIN_S`, so that a short launch is seen
    done within microseconds; then :data:`WAIT_NAP_FRACTION` of the time waited, at most
    :data:`WAIT_NAP_S`: the wake-up comes at most ~5 % after the kernels end, and a long wait
    costs little CPU.
    """
    if waited < WAIT_SPIN_S:
        return 0.0
    return min(WAIT_NAP_S, WAIT_NAP_FRACTION * waited)


def poll_until(done, clock=time.perf_counter, sleep=time.sleep, timeout=None):
    """Call ``done()`` until it is true, sleeping :func:`wait_nap` between calls; give up after
    ``timeout`` seconds (None: no limit). Returns whether ``done()`` became true.

    A Python loop, so Ctrl-C is raised between polls and other threads get the GIL. A nap of 0
    calls no ``sleep`` at all: ``time.sleep(0)`` still sleeps the OS's timer slack.
    """
    start = clock()
    while not done():
        waited = clock() - start
        if timeout is not None and waited >= timeout:
            return False
        nap = wait_nap(waited)
        if nap > 0:
            sleep(nap if timeout is None else min(nap, max(0.0, timeout - waited)))
    return True


_DRIVER = []


def _driver():
    """numba-cuda 0.30's driver binding (``cuda.bindings.driver``), imported at the first
    query: an import statement per query costs more than the query."""
    if not _DRIVER:
        from cuda.bindings import driver
        _DRIVER.append(driver)
    return _DRIVER[0]


def event_done(event):
    """``event.query()`` without its cost while the work is not done: numba-cuda turns the
    driver's ``CUDA_ERROR_NOT_READY`` into a CudaAPIError, logged at ERROR level first, for
    every poll."""
    cu = _driver()
    code = cu.cuEventQuery(event.handle)[0]
    if code == cu.CUresult.CUDA_SUCCESS:
        return True
    if code == cu.CUresult.CUDA_ERROR_NOT_READY:
        return False
    return event.query()   # another error: numba-cuda raises it as it would have


class KernelWaiter:
    """Waits for the kernels queued so far, like ``cuda.synchronize()`` but polling an event,
    so that Ctrl-C is seen meanwhile. One event per owner, recorded again at each wait (a
    record replaces the event's previous work), made at the first wait. Launches on other
    streams (:mod:`gids.rows`) record an event of their own with :meth:`record`; a wait covers
    them too.

    Those events come from a pool (``cudaEventCreate`` and Numba's finalizer per launch cost
    more than the launch): one goes back to it once it has been seen done, by a wait or by a
    later :meth:`record`, which looks at the oldest. A launch's event handed out (a
    ``DeviceArray.ready``) may so be recorded again later: waiting for it then waits for later
    work as well, never for less."""

    #: Events the pool keeps at most.
    POOL = 32
    #: Launches noted and not yet seen done at most: a host ahead of the GPU by more waits, in
    #: :meth:`record`, for the oldest still in flight (bounded by ``ahead_timeout``). Left to
    #: the driver, a queue of ~2000 row gathers (a loop whose host work per call is shorter
    #: than the kernel's) ran at a fifth of the GPU's rate on the H200; 64 queued gathers keep
    #: it busy.
    MOST_AHEAD = 64

    def __init__(self):
        self._event = None
        self._on_streams = []   # (event, arrays the launch reads, kept alive until it is done)
        self._free = []         # events seen done, to record again
        self._lock = threading.Lock()   # launches may come from several threads

    def record(self, stream, keep=(), ahead_timeout=60.0):
        """An event recorded on ``stream`` (a Numba stream) after a launch there, waited for
        by :meth:`wait`; ``keep``: what the launch reads, kept until it is seen done. With
        :data:`MOST_AHEAD` launches in flight, first waits for the oldest still in flight, at
        most ``ahead_timeout`` seconds (then goes on: the wait only paces the host)."""
        from numba import cuda
        with self._lock:
            if len(self._on_streams) >= self.MOST_AHEAD:
                # Launches that ended behind a slow one (a prefetch waiting on storage, on
                # another stream) give their events back first: only launches in flight count.
                self._let_go([entry for entry in self._on_streams if event_done(entry[0])])
            on = self._on_streams
            if len(on) >= self.MOST_AHEAD:
                oldest = on[0][0]
                poll_until(lambda: event_done(oldest), timeout=ahead_timeout)
            # The oldest launch, if done, gives its event back: the list stays as short as
            # the launches in flight, at one query per launch.
            if on and event_done(on[0][0]):
                self._free.append(on.pop(0)[0])
            event = self._free.pop() if self._free else cuda.event(timing=False)
            event.record(stream)
            on.append((event, keep))
        return event

    def _let_go(self, ended):
        """Take the launches ``ended`` (entries of ``_on_streams`` seen done) off the list,
        their events back to the pool as far as it has room (the caller holds the lock)."""
        if not ended:
            return
        gone = {id(entry) for entry in ended}
        self._on_streams = [entry for entry in self._on_streams if id(entry) not in gone]
        self._free.extend(event for event, _ in ended[:max(0, self.POOL - len(self._free))])

    def streams_done(self):
        """Whether every noted launch has ended (a query, no wait)."""
        return all(event_done(e) for e, _ in self._on_streams)

    def wait(self, timeout=None):
        """Wait for the kernels queued so far, at most ``timeout`` seconds (None: no limit).
        Returns whether they all ended."""
        if SIMULATOR:
            return True   # the simulator runs a kernel to its end inside the launch
        from numba import cuda
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self._lock:
            noted = list(self._on_streams)
        for event, _ in noted:
            if not poll_until(lambda e=event: event_done(e), timeout=_left(deadline)):
                return False
        with self._lock:
            # What :meth:`record` took back meanwhile is not given back twice.
            waited = {id(entry) for entry in noted}
            self._let_go([entry for entry in self._on_streams if id(entry) in waited])
        if self._event is None:
            self._event = cuda.event(timing=False)   # no timestamps: lighter to record and query
        done = self._event
        done.record()
        return poll_until(lambda: event_done(done), timeout=_left(deadline))


def _left(deadline):
    """Seconds to ``deadline`` (a perf_counter time; None: no limit), at least 0."""
    return None if deadline is None else max(0.0, deadline - time.perf_counter())
