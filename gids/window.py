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

The host's part of a call is numpy over the whole batch and no wait: the page list goes to the
GPU by a copy queued on the call's stream from a pooled pinned buffer (:mod:`gids.staging`); a
hold keeps that buffer (its pages, and its pins' slots) for its release. The holds of each
page are counted in an int32 array indexed by global page (half the GPU's own page table, and
grown only as far as the highest page held), read and written by fancy indexing.
"""
import numpy as np
from numba import cuda

from gids import defaults
from gids.errors import HoldLimitError, NotHeldError
from gids.interop import is_cuda_array, numba_stream, stream_handle
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
        self.pages = pages          # distinct page numbers of the array (host, sorted)
        # Device: the pages, then each page's pin (gids.pin_page's k, -1 if none); None for
        # no page.
        self._buffer = buffer
        self._stream = stream       # the Numba stream of the hold's launch and its release
        self.held = True

    @property
    def n_pages(self):
        return int(self.pages.size)

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


def distinct_pages(elems, elem_shift):
    """The sorted distinct pages of int64 element indices ``elems``: ``np.unique``'s answer by
    a sort (none if sorted already) and a compare of neighbours, several times faster than
    numpy 2's ``np.unique`` for a batch's pages."""
    pages = elems >> elem_shift
    if pages.size < 2:
        return pages
    if not (pages[1:] >= pages[:-1]).all():
        pages.sort()
    first = np.empty(pages.size, dtype=bool)
    first[0] = True
    np.not_equal(pages[1:], pages[:-1], out=first[1:])
    return pages[first]


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

    @property
    def held_pages(self):
        """Distinct pages held now."""
        return self._n_held

    # ------------------------------------------------------------------ holds
    def hold(self, array, indices, stream=None):
        from gids.kernels_host import hold_kernel
        rt = self.rt
        rt._check_array(array, "hold")
        pages = self._pages(array, indices)
        gpages = pages + array.page_base
        if gpages.size and gpages[-1] >= self._counts.size:
            self._grow(int(gpages[-1]) + 1)
        counts = self._counts[gpages]
        new = int(np.count_nonzero(counts == 0))
        if self.held_pages + new > self.hold_limit:
            raise HoldLimitError(
                f"gids: holding {pages.size} pages ({new} not held yet) would hold "
                f"{self.held_pages + new} of the cache's {rt.cache_slots}; at most "
                f"{self.hold_limit} may be held (hold_fraction="
                f"{defaults.get('hold_fraction')}): release a hold first")
        s = self._launch_stream(stream)
        buf = None
        if pages.size:
            n = pages.size
            buf = self._staging.take(2 * n)
            d_pages = buf.upload(pages, s)
            blocks, threads = rt._grid(n)
            hold_kernel[blocks, threads, s](array.handle, d_pages, buf.device[n:2 * n])
            self._note(s)
        self._counts[gpages] = counts + 1
        self._n_held += new
        hold = Hold(self, array, pages, buf, s)
        self._holds.append(hold)
        return hold

    def release(self, hold):
        from gids.kernels_host import release_kernel
        if not isinstance(hold, Hold) or hold._window is not self or not hold.held:
            raise NotHeldError(f"gids: {hold!r} is not held by this Runtime (released already, "
                               "or by invalidate(), close() or recovery after an error)")
        self.rt._check_open()
        if hold.pages.size:
            n = hold.pages.size
            s, dev = hold._stream, hold._buffer.device
            blocks, threads = self.rt._grid(n)
            release_kernel[blocks, threads, s](hold.array.handle, dev[:n], dev[n:2 * n])
            self._note(s)
            self._staging.give_back(hold._buffer, s)
        self._forget(hold)

    def _grow(self, n):
        """Counts for global pages up to ``n`` (doubling; np.zeros' pages are the OS's zero
        pages until written)."""
        counts = np.zeros(max(n, 2 * self._counts.size), dtype=np.int32)
        counts[:self._counts.size] = self._counts
        self._counts = counts

    def _forget(self, hold):
        hold.held = False
        self._holds.remove(hold)
        gpages = hold.pages + hold.array.page_base
        counts = self._counts[gpages] - 1
        self._counts[gpages] = counts
        self._n_held -= int(np.count_nonzero(counts == 0))

    def drop_all(self):
        """The cache was emptied (invalidate, recovery, close: after every launch has ended):
        no hold holds anything now."""
        for hold in self._holds:
            hold.held = False
            self._counts[hold.pages + hold.array.page_base] = 0
            if hold._buffer is not None:
                self._staging.give_back(hold._buffer)
        self._holds = []
        self._n_held = 0

    # ------------------------------------------------------------------ prefetch
    def prefetch(self, array, indices, stream=None):
        from gids.kernels_host import prefetch_kernel
        rt = self.rt
        rt._check_array(array, "prefetch")
        buf = None
        if is_cuda_array(indices):
            elems = rt._device_indices(array, indices)   # pages found in the kernel
            if elems.size == 0:
                return
            s = self._launch_stream(stream)
        else:
            pages = self._pages(array, indices)
            if pages.size == 0:
                return
            s = self._launch_stream(stream)
            buf = self._staging.take(pages.size)
            elems = buf.upload(pages << array.elem_shift, s)
        blocks, threads = rt._grid(elems.size)
        prefetch_kernel[blocks, threads, s](array.handle, elems)
        if buf is None:
            self._note(s, (elems,))     # the caller's array, kept until the launch ends
        else:
            self._note(s)
            self._staging.give_back(buf, s)

    # ------------------------------------------------------------------ helpers
    def _pages(self, array, indices):
        """Distinct page numbers of host (or, copied back, device) element indices, checked."""
        if is_cuda_array(indices):
            indices = self.rt._device_index_array(indices).copy_to_host()
        return distinct_pages(self.rt._host_indices(array, indices), array.elem_shift)

    def _launch_stream(self, stream):
        handle, _ = stream_handle(stream)
        return numba_stream(handle)

    def _note(self, s, keep=()):
        from gids.rows import note_launch
        note_launch(self.rt, s, keep)
