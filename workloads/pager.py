"""Reading an array a page at a time, behind one interface, so that one kernel template runs on
every data path.

A kernel that reads much of a page (a whole request, a tile of vectors) should look the page up
once, not once per element: through gids a lookup is a warp vote, an acquire atomic and a release
reduction, and one per 32 elements (``gids.read``) was what bounded the bench's hit and Zipf
figures and the vector search on the H200. A :class:`Pager` is the handful
of device functions such a kernel calls, so that the same kernel source reads pages through the
gids cache (:data:`GIDS_PAGER`: ``gids.pin_page`` and friends, one lookup per page and warp) or
element by element from any plain reader (:func:`element_pager`: the "pin" is the identity and
each value a read), and the paths differ only in what those functions cost.

The reading loop, for a warp that wants elements ``lo .. hi - 1``::

    pe = pager.page_elems(h)
    i = lo
    while i < hi:                                # warp-uniform: every lane, the same i
        k = pager.pin(h, i)                      # k < 0: the page cannot be had (recorded)
        n = min(room_in_page(pe, i), hi - i)     # elements of i's page from i on
        total = 0
        if k >= 0:
            for j in range(lane, n, 32):
                total += pager.value(h, k + j)   # element i + j
        pager.unpin_after(h, i, k, total)        # or pager.unpin(h, i, k)
        i += n

Rules a kernel keeps: whole warps call ``pin`` and ``unpin`` together (they are collective on
gids), lanes naming the same page for one lookup of it; a warp holds few pins, all taken in one
call (a pin keeps the page in its slot, and a warp that waits for a page while holding others
can starve a small cache: a warp whose lanes name R pages in one call needs R slots per warp
resident at once, see ``requests_template`` in ``workloads/baselines.py``); ``unpin`` is called
whatever ``pin`` returned. Errors (an index out of range, an I/O error, a timeout) are recorded
by the path and raised on the host after the kernel, as for single reads.

Used by ``workloads/baselines.py`` (every kernel template receives its path's pager, so the
bench's request kernels read a page at a time on every path) and
``workloads/vector/gpu_search.py`` (the search's tile staging).
"""
from functools import lru_cache
from typing import NamedTuple

import numpy as np

import gids  # first: picks GPU or simulator before numba.cuda loads

# isort: split
from gids.device import device_helper

__all__ = ["Pager", "ELEMENT_PAGE", "element_pager", "GIDS_PAGER", "GIDS_TIER_PAGER",
           "room_in_page"]


class Pager(NamedTuple):
    """How a kernel reads an array a page at a time (device functions).

    A warp takes a page, ``k = pin(h, i)`` at the first element ``i`` it needs, reads
    ``value(h, k + j)`` for the elements ``i + j`` of that page it needs, and ``unpin(h, i, k)``.
    Through gids that is one cache lookup per page (:func:`gids.pin_page`), where element reads
    cost one per 32 elements. A data path given as a plain reader gets :func:`element_pager`:
    pages of :data:`ELEMENT_PAGE` elements, each element read by the reader.

    Attributes
    ----------
    read : ``read(h, i) -> value``, one element (for kernels, or parts of them, that read
        single elements: a pager is all a kernel template receives).
    pin : ``pin(h, i) -> k``, ``k < 0`` where the page could not be had (the error recorded).
    value : ``value(h, k) -> value``, an element of a pinned page.
    unpin : ``unpin(h, i, k)``.
    unpin_after : ``unpin_after(h, i, k, used)``, the same for a kernel whose lanes pass a value
        computed from every element they read under the pin: no fence through gids
        (:func:`gids.unpin_page_after`).
    page_elems : ``page_elems(h) -> int``, elements per page, a power of two.
    pin_if_resident : ``pin_if_resident(h, i) -> k``, ``pin`` without a miss path: ``k < 0``
        where the page is not resident (nothing held or recorded; see
        :func:`gids.pin_page_if_resident`). A plain reader's is its ``pin``.
    """

    read: object
    pin: object
    value: object
    unpin: object
    page_elems: object
    unpin_after: object
    pin_if_resident: object


#: Elements per page of an :func:`element_pager`: only the unit in which kernels walk a run of
#: elements (a warp takes 4 KiB of float32 at a time); nothing is pinned.
ELEMENT_PAGE = 1024


@device_helper
def room_in_page(page_elems, i):
    """Elements of ``i``'s page from ``i`` to the page's end, for pages of ``page_elems``
    elements (a power of two): what a pin of ``i`` covers (``gids.page_room`` for any pager)."""
    return page_elems - (i & (page_elems - 1))


@lru_cache(maxsize=None)
def element_pager(reader) -> Pager:
    """A :class:`Pager` over a plain reader: "pinning" is the identity and every value a read.

    One pager per reader (cached), so kernels specialised by pager compile once per reader.
    """

    @device_helper
    def pin(h, i):
        if i < 0:
            # No page: let the reader record the index (and the kernel skips the page), so an
            # error reaches the host on every path, as a failed gids.pin_page's does.
            reader(h, i)
        return i

    @device_helper
    def value(h, k):
        return reader(h, k)

    @device_helper
    def unpin(h, i, k):
        pass

    @device_helper
    def page_elems(h):
        return ELEMENT_PAGE

    @device_helper
    def unpin_after(h, i, k, used):
        pass

    return Pager(reader, pin, value, unpin, page_elems, unpin_after, pin)


@device_helper
def _gids_page_elems(h):
    return np.int64(1) << h.elem_shift


#: The gids data paths' pager (host daemon or direct NVMe path, whichever handle a kernel gets):
#: page-level reads through the cache, one lookup per page and warp.
GIDS_PAGER = Pager(gids.read, gids.pin_page, gids.pinned, gids.unpin_page, _gids_page_elems,
                   gids.unpin_page_after, gids.pin_page_if_resident)

#: :data:`GIDS_PAGER` for an array whose host tier is in direct mode: a page not in the GPU
#: cache but in the tier is read in place there, over PCIe, and takes no slot
#: (:func:`gids.pin_page_or_tier`), so a scan over many pages leaves what the cache holds (the
#: pages held there, say) as it was. The same as :data:`GIDS_PAGER` for any other array.
GIDS_TIER_PAGER = Pager(gids.read, gids.pin_page_or_tier, gids.pinned_or_tier,
                        gids.unpin_page_or_tier, _gids_page_elems,
                        gids.unpin_page_after_or_tier, gids.pin_page_if_resident)
