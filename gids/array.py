"""``StorageArray``: an array whose elements live in a store and are read (and written) through
the cache."""
import numpy as np

from gids import layout as L
from kernels.handle import ArrayHandle, NvmeHandle
from kernels.launch import GUARD_KEY

#: Element types a kernel can read (``gids.read`` returns a scalar of this type).
SUPPORTED_DTYPES = tuple(np.dtype(t) for t in (
    np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float32, np.float64))


class StorageArray:
    """An array opened with :meth:`gids.Runtime.open_array`.

    Pass :attr:`handle` to a kernel and read elements there with ``gids.read(handle, i)``,
    ``i`` a flat (C-order) index, and, if it was opened with ``mode="r+"`` (:attr:`writable`),
    write them with ``gids.write(handle, i, value)``. The handle stays valid while the Runtime is open and no other
    array is opened after it was taken (opening an array can grow the page tables): take handles
    after opening the arrays a kernel needs. A launch with the handle of a closed Runtime raises
    :class:`~gids.errors.StaleHandleError` before the kernel starts.
    """

    def __init__(self, runtime, store, dtype, shape, offset, array_id, page_base, n_pages,
                 zero_copy, writable=False, early_base=-1):
        self.runtime = runtime
        self.store = store
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.offset = offset
        self.array_id = array_id
        self.page_base = page_base
        self.n_pages = n_pages
        self._zero_copy = zero_copy
        self._early_base = early_base
        #: True if opened with ``mode="r+"``.
        self.writable = bool(writable)
        self._zero = runtime._to_device(np.zeros(1, dtype=self.dtype))
        self._handle = None

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def handle(self):
        """The device-side handle (an :class:`ArrayHandle`) to pass to kernels.

        The same object each time, until opening another array grows the page tables (then a
        new one): a launch with a handle it has launched before costs the host tens of
        microseconds, not hundreds (:mod:`kernels.launch`).
        """
        rt = self.runtime
        rt._check_open()
        h = self._handle
        if h is None or h.page_state is not rt._page_state:
            h = self._handle = self._make_handle()
            # Every launch with it first asks the Runtime whether it is still open.
            h.__dict__[GUARD_KEY] = rt._check_launch
        return h

    def _make_handle(self):
        rt = self.runtime
        page_size = rt.page_size
        h = ArrayHandle(
            cache=rt._cache.view(self.dtype),
            cache_words=rt._cache.view(np.uint64),
            zero=self._zero,
            n_elems=self.size,
            elem_shift=(page_size // self.dtype.itemsize).bit_length() - 1,
            page_words=page_size // 8,
            array_id=self.array_id,
            page_base=self.page_base,
            writable=int(self.writable),
            zero_word=np.uint32(0),
            page_state=rt._page_state,
            slot_page=rt._slot_page,
            clock=rt._clock,
            n_slots=rt.cache_slots,
            page_bases=rt._page_bases,
            sq=rt._sq,
            cq=rt._cq,
            staging=rt._staging,
            zero_copy=self._zero_copy,
            early_base=self._early_base,
            sq_ticket=rt._sq_ticket,
            entry_turn=rt._entry_turn,
            n_queues=rt.queues,
            depth=rt.queue_depth,
            err=rt._err,
            stats=rt._stats,
            timeout_ns=int(rt.timeout * 1e9),
            abort=rt._abort,
            copy_locks=rt._copy_locks,
        )
        if rt.backend == "nvme":   # the handle's type picks the back end's I/O step
            return NvmeHandle(*h, **rt.nvme_handle_fields())
        return h

    def resident_pages(self):
        """How many of the array's pages the GPU cache holds now (VALID in a slot).

        Call it between kernels: it copies the array's page words to the host (8 bytes a page;
        it waits for the kernels queued before it), and a running kernel may change them.
        """
        rt = self.runtime
        rt._check_open()
        words = rt._page_state[self.page_base:self.page_base + self.n_pages].copy_to_host()
        return int(np.count_nonzero(words & L.PAGE_VALID))

    def __repr__(self):
        return (f"StorageArray(shape={self.shape}, dtype={self.dtype}, offset={self.offset}, "
                f"mode={'r+' if self.writable else 'r'!r}, store={self.store.name!r}, "
                f"pages={self.n_pages})")
