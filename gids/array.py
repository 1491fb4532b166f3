"""``StorageArray``: an array whose elements live in a store and are read (and written) through
the cache."""
import math

import numpy as np

from gids import layout as L
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
        return math.prod(self.shape)   # Python ints: np.prod costs a call's worth per call

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def elem_shift(self):
        """log2 of the array's elements per page."""
        return (self.runtime.page_size // self.dtype.itemsize).bit_length() - 1

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
        fields = rt.handle_fields(self.dtype)
        fields.update(
            zero=self._zero,
            n_elems=self.size,
            elem_shift=self.elem_shift,
            array_id=self.array_id,
            page_base=self.page_base,
            writable=int(self.writable),
            zero_word=np.uint32(0),
            zero_copy=self._zero_copy,
            early_base=self._early_base,
            **rt.host_tier.handle_fields(self),
        )
        # The handle's type picks the back end's I/O step (kernels/backend.py).
        return rt.handle_class(**fields)

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
