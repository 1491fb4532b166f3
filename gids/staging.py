"""Device buffers for the index lists the Runtime's own launches read (``Runtime.hold``,
``release``, ``prefetch``, ``gather_rows`` of host rows): one pool per Runtime, filled from pinned host memory by a copy queued on the launch's
stream, and kept for the next launch once the last one that read them has ended.

A ``cuda.to_device`` per launch costs more than the launch: a device allocation, a copy from
pageable memory that the host waits for (on the legacy default stream, which waits for every
blocking stream), and a ``cuMemFree`` later, which waits for the whole device, so that a loop
of such launches beside a compute kernel runs one after the other, not side by side.
"""
import threading

import numpy as np

from gids.waiting import event_done
from kernels.platform import SIMULATOR

#: Fewest elements a buffer holds (its size is a power of two).
MIN_ELEMS = 1 << 10


class Buffer:
    """An int64 device array, the pinned host array its copies come from, and an event
    recorded after the last launch that reads it (the buffer's own: an event shared with
    other launches may be recorded again for later work, and the buffer would wait for it)."""

    def __init__(self, n):
        from numba import cuda
        self.host = cuda.pinned_array(n, dtype=np.int64)
        self.device = cuda.device_array(n, dtype=np.int64)
        self.done = None if SIMULATOR else cuda.event(timing=False)
        self._host_address = self.host.ctypes.data
        self._device_address = None if SIMULATOR else self.device.device_ctypes_pointer.value

    @property
    def size(self):
        return self.device.size

    def send(self, stream, n, at=0):
        """Queue on ``stream`` the copy of ``host[at:at + n]`` to ``device[at:at + n]`` (the
        host's part is done on return). On the GPU by the driver's call itself: no device view
        made (numba-cuda's slicing and ``copy_to_device`` cost more than the copy's queueing)."""
        if SIMULATOR:
            self.device[at:at + n].copy_to_device(self.host[at:at + n], stream=stream)
            return
        from numba.cuda.cudadrv import driver
        dst = self.device if at == 0 else self.device.gpu_data.view(8 * at)
        driver.host_to_device(dst, self._host_address + 8 * at, 8 * n, stream=stream)

    def _put(self, values, stream, at):
        """``values`` into ``host[at:]``, their copy to the device queued on ``stream``; their
        count."""
        n = values.size
        self.host[at:at + n] = values
        self.send(stream, n, at)
        return n

    def upload(self, values, stream, at=0):
        """``device[at:at + values.size]`` (a view), holding ``values`` once ``stream`` has run
        the copy queued here (the host's part is done on return)."""
        n = self._put(values, stream, at)
        return self.device[at:at + n]

    def upload_for_launch(self, values, stream):
        """:meth:`upload` of ``values`` at the start, as :func:`kernels.launch.launch` takes an
        array: on the GPU a :class:`~kernels.launch.RawArray` of the buffer's address (no
        Numba view made per call), in the simulator the view."""
        n = self._put(values, stream, 0)
        if SIMULATOR:
            return self.device[:n]
        from kernels.launch import RawArray
        return RawArray(self._device_address, (n,), (8,), np.int64)


class Staging:
    """A pool of :class:`Buffer`: :meth:`take` one, launch with it, :meth:`give_back` it on
    the launch's stream; it is taken again once the stream has run that far. Safe from several
    threads."""

    #: Buffers kept free at most (more are dropped: freed by Numba, which waits for the device).
    POOL = 8

    def __init__(self):
        self._free = []     # Buffers no launch reads
        self._busy = []     # Buffers given back, in order, until their event is done
        self._lock = threading.Lock()

    def take(self, n):
        """A buffer of at least ``n`` elements that no launch reads now."""
        with self._lock:
            # Every busy buffer is asked (one query each): a buffer given back on a stream
            # whose launch is slow (a prefetch waiting on storage) must not hold back those
            # given back after it on other streams.
            done = [b for b in self._busy if event_done(b.done)]
            if done:
                self._busy = [b for b in self._busy if not any(b is d for d in done)]
                self._free.extend(done)
            fits = [b for b in self._free if b.size >= n]
            if fits:
                buf = min(fits, key=lambda b: b.size)
                self._free.remove(buf)
                return buf
        return Buffer(max(MIN_ELEMS, 1 << max(0, int(n) - 1).bit_length()))

    def give_back(self, buf, stream=None):
        """``buf`` is free once ``stream`` (a Numba stream) has run what is queued on it now:
        the last launch that reads it. None: no launch reads it (or the simulator, where a
        launch has ended on return)."""
        with self._lock:
            if stream is None or SIMULATOR:
                self._free.append(buf)
            else:
                buf.done.record(stream)
                self._busy.append(buf)
            if len(self._free) > self.POOL:
                self._free.remove(min(self._free, key=lambda b: b.size))
