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
"""
import numpy as np
from numba import cuda

from gids import defaults
from gids.errors import HoldLimitError, IndexOutOfRangeError, NotHeldError
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

    def __init__(self, window, array, pages, slots, stream):
        self._window = window
        self.array = array
        self.pages = pages          # distinct page numbers of the array (host, sorted)
        self._slots = slots         # device: each page's pin (gids.pin_page's k), -1 if none
        self._stream = stream
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


class Window:
    """A Runtime's holds (``Runtime._window``)."""

    def __init__(self, rt):
        self.rt = rt
        slots = rt.cache_slots
        self.hold_limit = min(int(defaults.get("hold_fraction") * slots), slots - WARP_SIZE)
        self._holds = []
        self._held = {}   # global page -> holds that hold it

    @property
    def held_pages(self):
        """Distinct pages held now."""
        return len(self._held)

    # ------------------------------------------------------------------ holds
    def hold(self, array, indices, stream=None):
        from gids.kernels_host import hold_kernel
        rt = self.rt
        rt._check_array(array, "hold")
        pages = self._pages(array, indices)
        gpages = (pages + array.page_base).tolist()
        new = sum(1 for g in gpages if g not in self._held)
        if self.held_pages + new > self.hold_limit:
            raise HoldLimitError(
                f"gids: holding {pages.size} pages ({new} not held yet) would hold "
                f"{self.held_pages + new} of the cache's {rt.cache_slots}; at most "
                f"{self.hold_limit} may be held (hold_fraction="
                f"{defaults.get('hold_fraction')}): release a hold first")
        slots = cuda.device_array(pages.size, dtype=np.int64)
        hold = Hold(self, array, pages, slots, stream)
        if pages.size:
            s = self._launch_stream(stream)
            d_pages = rt._to_device(pages, s)
            blocks, threads = self.rt._grid(pages.size)
            hold_kernel[blocks, threads, s](array.handle, d_pages, slots)
            # The pins' list too: the kernel writes it, and a Hold dropped unreleased frees it.
            self._note(s, (d_pages, slots))
        for g in gpages:
            self._held[g] = self._held.get(g, 0) + 1
        self._holds.append(hold)
        return hold

    def release(self, hold):
        from gids.kernels_host import release_kernel
        if not isinstance(hold, Hold) or hold._window is not self or not hold.held:
            raise NotHeldError(f"gids: {hold!r} is not held by this Runtime (released already, "
                               "or by invalidate(), close() or recovery after an error)")
        self.rt._check_open()
        if hold.pages.size:
            s = self._launch_stream(hold._stream)
            d_pages = self.rt._to_device(hold.pages, s)
            blocks, threads = self.rt._grid(hold.pages.size)
            release_kernel[blocks, threads, s](hold.array.handle, d_pages, hold._slots)
            self._note(s, (d_pages, hold._slots))
        self._forget(hold)

    def _forget(self, hold):
        hold.held = False
        self._holds.remove(hold)
        for g in (hold.pages + hold.array.page_base).tolist():
            left = self._held[g] - 1
            if left:
                self._held[g] = left
            else:
                del self._held[g]

    def drop_all(self):
        """The cache was emptied (invalidate, recovery, close): no hold holds anything now."""
        for hold in list(self._holds):
            self._forget(hold)

    # ------------------------------------------------------------------ prefetch
    def prefetch(self, array, indices, stream=None):
        from gids.kernels_host import prefetch_kernel
        rt = self.rt
        rt._check_array(array, "prefetch")
        s = self._launch_stream(stream)
        if is_cuda_array(indices):
            elems = rt._device_indices(array, indices)   # pages found in the kernel
        else:
            elems = rt._to_device(self._pages(array, indices) << array.elem_shift, s)
        if elems.size == 0:
            return
        blocks, threads = self.rt._grid(elems.size)
        prefetch_kernel[blocks, threads, s](array.handle, elems)
        self._note(s, (elems,))

    # ------------------------------------------------------------------ helpers
    def _pages(self, array, indices):
        """Distinct page numbers of host (or, copied back, device) element indices, checked."""
        if is_cuda_array(indices):
            indices = self.rt._device_indices(array, indices).copy_to_host()
            if indices.size and (indices.min() < 0 or indices.max() >= array.size):
                bad = indices[(indices < 0) | (indices >= array.size)][0]
                raise IndexOutOfRangeError(f"gids: index {int(bad)} is out of range for an "
                                           f"array of {array.size} elements")
        else:
            indices = self.rt._host_indices(array, indices)
        return np.unique(indices.astype(np.int64) >> array.elem_shift)

    def _launch_stream(self, stream):
        handle, _ = stream_handle(stream)
        return numba_stream(handle)

    def _note(self, s, keep):
        from gids.rows import note_launch
        note_launch(self.rt, s, keep)

