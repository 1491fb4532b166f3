"""Window hints from the host: ``Runtime.prefetch`` (load the next batch's pages while this one
computes) and ``Runtime.hold`` / ``release`` (keep the coming batches' pages from eviction:
GIDS's window buffering). Both are kernels of ordinary page reads (``gids.pin_page``), launched
from the host; there is no device-side prefetch call.

A hold pins each of its pages once (``gids.pin_page``, a reference kept past the kernel), so the
clock skips them until :meth:`Hold.release` unpins them. Held pages (distinct, over all holds)
may not exceed ``hold_fraction`` of the cache (``HoldLimitError``, before anything is pinned):
the rest of the cache always has room for the pages kernels wait for, so no hold can pin the
cache full and hang it. A prefetch pins nothing past its own kernel.

``Runtime.invalidate`` (and recovery after a failed kernel, and ``close``) releases every hold:
the cache is emptied under them. Releasing such a hold again raises ``NotHeldError``; leaving a
``with hold:`` block does not.

The host's part of a call is one pass over the batch and no wait. A prefetch range-checks its
indices (their least and greatest), copies them into a pooled pinned buffer
(:mod:`gids.staging`) and queues their copy to the GPU on the call's stream; its kernel finds
the pages and loads each run of neighbouring indices on one page once (sorted indices: each page
once; a page named again later is only a second hit). A hold must know its distinct pages before
any kernel runs, to refuse one over the limit: one compiled pass (:func:`distinct_unheld`) writes
them, first occurrences in order, straight into the pinned buffer, and counts those no hold holds
yet, marking each page's hold count as it goes (no sort, no temporary); the hold keeps that
buffer (its pages, then its pins' slots) for its release. The holds of each page are counted in
an int32 array indexed by global page (half the GPU's own page table at most, grown to the end of
the arrays held). Every kernel is launched with the buffer itself and a count, not a view of it:
the same device array each call, whose launch arguments numba-cuda (and :mod:`kernels.launch`)
need not work out again.
"""
import threading

import numpy as np
from numba import cuda, njit

from gids import defaults
from gids.errors import HoldLimitError, NotHeldError
from gids.interop import is_cuda_array, numba_stream, stream_handle
from gids.rows import note_launch
from kernels.launch import launch
from kernels.platform import SIMULATOR, WARP_SIZE


def side_stream():
    """A new CUDA stream that does not wait for the legacy default stream (``cudaStream
    NonBlocking``), for prefetches that overlap kernels on other streams. In the simulator (no
    streams run concurrently there) a plain Numba stream."""
    if SIMULATOR:
        return cuda.stream()
    from numba.cuda.cudadrv import driver as drv
    ctx = cuda.current_context()
    flags = drv.binding.CUstream_flags.CU_STREAM_NON_BLOCKING.value
    handle = drv.driver.cuStreamCreate(flags)
    return drv.Stream(handle, finalizer=drv._stream_finalizer(ctx.deallocations, handle))


class Hold:
    """Pages of one array held in the cache by :meth:`gids.Runtime.hold` until :meth:`release`.

    A context manager: ``with rt.hold(a, next_batch): ...`` releases on leaving (unless the
    Runtime released it already, in ``invalidate``).
    """

    def __init__(self, window, array, pages, buffer, stream):
        self._window = window
        self.array = array
        # The distinct pages (array-local, first occurrences in order): host[:n] of the
        # buffer, whose device part holds them and then each page's pin (gids.pin_page's k,
        # -1 if none); None for no page.
        self._pages = pages
        self.n_pages = int(pages.size)
        self._buffer = buffer
        self._stream = stream       # the Numba stream of the hold's launch and its release
        self.held = True

    @property
    def pages(self):
        """The distinct pages held (array-local, in the order first named; a copy), empty
        once released."""
        return self._pages.copy() if self.held else np.zeros(0, dtype=np.int64)

    def wait(self):
        """Wait until the pages are in the cache; raise what the hold's kernel met (as
        :meth:`gids.Runtime.sync`, which waits for every kernel)."""
        self._window.rt.sync()
        return self

    def release(self):
        """:meth:`gids.Runtime.release` of this hold."""
        self._window.release(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.held:
            self.release()

    def __repr__(self):
        state = "held" if self.held else "released"
        return f"Hold({self.n_pages} pages of {self.array.store.name}, {state})"


#: Set in a page's hold count while the hold being counted has named it already (cleared by
#: :func:`settle` before the call returns): counts stay far below it.
SEEN = 1 << 30


@njit(nogil=True, cache=True)
def distinct_unheld(elems, shift, base, counts, out):
    """Write the distinct pages of int64 element indices ``elems`` (``elems >> shift``, first
    occurrences in order) to ``out``, marking each one's hold count ``counts[base + page]``
    with :data:`SEEN`. Returns ``(pages written, of those the ones no hold holds)``."""
    m = 0
    new = 0
    for k in range(elems.size):
        page = elems[k] >> shift
        c = counts[base + page]
        if not c & SEEN:
            counts[base + page] = c | SEEN
            out[m] = page
            m += 1
            if c == 0:
                new += 1
    return m, new


@njit(nogil=True, cache=True)
def settle(pages, base, counts, step):
    """Add ``step`` to the hold count of each page of ``pages`` (distinct), its :data:`SEEN`
    mark cleared. Returns how many counts are 0 after."""
    zero = 0
    for k in range(pages.size):
        g = base + pages[k]
        c = (counts[g] & ~SEEN) + step
        counts[g] = c
        if c == 0:
            zero += 1
    return zero


class Window:
    """A Runtime's holds (``Runtime._window``)."""

    def __init__(self, rt):
        self.rt = rt
        slots = rt.cache_slots
        self.hold_limit = min(int(defaults.get("hold_fraction") * slots), slots - WARP_SIZE)
        self._holds = []
        self._counts = np.zeros(0, dtype=np.int32)   # global page -> holds that hold it
        self._n_held = 0                              # pages whose count is not 0
        self._staging = rt._staging   # the Runtime's pool of index buffers
        self._lock = threading.Lock()   # the counts, for calls from several threads

    @property
    def held_pages(self):
        """Distinct pages held now."""
        return self._n_held

    # ------------------------------------------------------------------ holds
    def hold(self, array, indices, stream=None):
        from gids.kernels_host import hold_kernel
        rt = self.rt
        rt._check_array(array, "hold")
        elems = self._host_elems(array, indices)
        s = self._launch_stream(stream)
        if elems.size == 0:
            hold = Hold(self, array, np.zeros(0, dtype=np.int64), None, s)
            self._holds.append(hold)
            return hold
        base = array.page_base
        buf = self._staging.take(2 * elems.size)   # the pages, then their pins
        with self._lock:
            if self._counts.size < base + array.n_pages:
                self._grow(base + array.n_pages)
            m, new = distinct_unheld(elems, array.elem_shift, base, self._counts, buf.host)
            pages = buf.host[:m]
            try:
                if self._n_held + new > self.hold_limit:
                    raise HoldLimitError(
                        f"gids: holding {m} pages ({new} not held yet) would hold "
                        f"{self._n_held + new} of the cache's {rt.cache_slots}; at most "
                        f"{self.hold_limit} may be held (hold_fraction="
                        f"{defaults.get('hold_fraction')}): release a hold first")
                buf.send(s, m)
                blocks, threads = rt._grid(m)
                launch(hold_kernel, blocks, threads, s, array.handle, buf.device, np.int64(m))
            except BaseException:
                settle(pages, base, self._counts, 0)     # the marks only
                self._staging.give_back(buf, s)   # after the copy, if one was queued
                raise
            settle(pages, base, self._counts, 1)
            self._n_held += new
            hold = Hold(self, array, pages, buf, s)
            self._holds.append(hold)
        note_launch(rt, s)
        return hold

    def release(self, hold):
        from gids.kernels_host import release_kernel
        if not isinstance(hold, Hold) or hold._window is not self or not hold.held:
            raise NotHeldError(f"gids: {hold!r} is not held by this Runtime (released already, "
                               "or by invalidate(), close() or recovery after an error)")
        self.rt._check_open()
        if hold._buffer is not None:
            n, s, buf = hold.n_pages, hold._stream, hold._buffer
            blocks, threads = self.rt._grid(n)
            launch(release_kernel, blocks, threads, s, hold.array.handle, buf.device,
                   np.int64(n))
            note_launch(self.rt, s)
        with self._lock:
            hold.held = False
            self._holds.remove(hold)
            self._n_held -= settle(hold._pages, hold.array.page_base, self._counts, -1)
        if hold._buffer is not None:
            self._staging.give_back(hold._buffer, hold._stream)

    def _grow(self, n):
        """Counts for global pages up to ``n`` (doubling; np.zeros' pages are the OS's zero
        pages until written)."""
        counts = np.zeros(max(n, 2 * self._counts.size), dtype=np.int32)
        counts[:self._counts.size] = self._counts
        self._counts = counts

    def drop_all(self):
        """The cache was emptied (invalidate, recovery, close: after every launch has ended):
        no hold holds anything now."""
        with self._lock:
            for hold in self._holds:
                hold.held = False
                if hold._buffer is not None:
                    self._staging.give_back(hold._buffer)
            self._holds = []
            self._counts[:] = 0
            self._n_held = 0

    # ------------------------------------------------------------------ prefetch
    def prefetch(self, array, indices, stream=None):
        from gids.kernels_host import prefetch_kernel
        rt = self.rt
        rt._check_array(array, "prefetch")
        if is_cuda_array(indices):
            elems = rt._device_index_array(indices)   # checked by the kernel
            if elems.size == 0:
                return
            s = self._launch_stream(stream)
            blocks, threads = rt._grid(elems.size)
            launch(prefetch_kernel, blocks, threads, s, array.handle, elems,
                   np.int64(elems.size))
            note_launch(rt, s, (elems,))     # the caller's array, kept until the launch ends
            return
        elems = rt._host_indices(array, indices)
        n = elems.size
        if n == 0:
            return
        s = self._launch_stream(stream)
        buf = self._staging.take(n)
        buf.host[:n] = elems
        buf.send(s, n)
        blocks, threads = rt._grid(n)
        try:
            launch(prefetch_kernel, blocks, threads, s, array.handle, buf.device, np.int64(n))
        except BaseException:
            self._staging.give_back(buf, s)   # after the copy queued
            raise
        note_launch(rt, s)
        self._staging.give_back(buf, s)

    # ------------------------------------------------------------------ helpers
    def _host_elems(self, array, indices):
        """Host (or, copied back, device) element indices as checked int64 numpy."""
        if is_cuda_array(indices):
            indices = self.rt._device_index_array(indices).copy_to_host()
        return self.rt._host_indices(array, indices)

    def _launch_stream(self, stream):
        handle, _ = stream_handle(stream)
        return numba_stream(handle)
