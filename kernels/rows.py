"""Gathering whole rows of a 2-D array, a warp per row, a page at a time.

``out[r, :] = a[rows[r], :]`` for a C-order array ``a`` of ``width`` columns. A warp takes rows
``w, w + n_warps, ...``; for each it walks the row's elements a page at a time: it pins the page
of the next element (every lane of a row's group the same element: one lookup per page and
warp), its lanes copy elements ``lane, lane + lanes, ...`` of what the row has on that page
(contiguous loads and stores), and it gives the pin back. A row may start anywhere in a page and span pages (rows wider than a
page, or not aligned to one): each of its pages is pinned once.

The kernel is a template over four device functions, so that the same loop reads through the
gids cache (:func:`gather_rows_kernel`: ``pin_page`` / ``pinned`` / ``unpin_page_after``) or through
any other reader (``workloads.pager``'s pagers: zero-copy, GPU memory, the CPU batch path).
"""
from functools import lru_cache

import numpy as np
from numba import cuda

from kernels.platform import device_helper, jit

#: Lanes of a warp (also in the simulator, where each thread pins for itself).
WARP_LANES = 32

#: Rows a warp copies at once where every row covers the same pages (a row a page or a
#: multiple of it, or rows that divide the page): a group of 16 lanes per row, both rows'
#: pages pinned in one call, both rows' loads in flight together. One row at a time is one
#: dependent chain per warp (pin, loads, unpin), as the bench's requests were
#: (``workloads.baselines.REQUESTS_PER_WARP``).
ROWS_PER_WARP = 2


@device_helper
def _room(page_elems, i):
    """Elements of ``i``'s page from ``i`` on, pages of ``page_elems`` elements (a power of 2)."""
    return page_elems - (i & (page_elems - 1))


@lru_cache(maxsize=None)
def rows_template(pin, value, unpin_after, page_elems):
    """The row-gather kernel ``(h, rows, width, out)`` over a reader's page functions.

    ``pin(h, i) -> k`` (``k < 0``: the page could not be had, the reader recorded why),
    ``value(h, k)``, ``unpin_after(h, i, k, used)`` (collective over the warp, called whatever
    ``pin`` returned; ``used`` depends on every value the lane read under the pin, so the unpin
    waits for those loads instead of fencing), ``page_elems(h)``. Rows of an out-of-range index
    are left as they were (the reader records the index; the host raises it). One kernel per
    set of functions (cached).

    Where every row covers the same number of pages from the same place in its first page
    (``width`` a multiple of the page's elements, or a divisor of them), a warp copies
    :data:`ROWS_PER_WARP` rows at once, one group of lanes each; a group with no row left
    follows the warp's first row (the same pins) and stores nothing. Otherwise a warp copies
    one row at a time: its rows' page counts differ, and pins are collective. Two rows at once
    means a warp may hold one pin while its other page loads (``gids.pin_page``'s notes): a
    cache needs two slots per resident warp for every warp to progress (a ``CacheExhaustedError``
    after the timeout otherwise, never a hang).
    """

    @jit
    def gather_rows(h, rows, width, out):
        lane = cuda.threadIdx.x % WARP_LANES
        warp = cuda.grid(1) // WARP_LANES
        n_warps = cuda.gridsize(1) // WARP_LANES
        pe = page_elems(h)
        groups = 1
        if width % pe == 0 or pe % width == 0:
            groups = ROWS_PER_WARP
        lanes = WARP_LANES // groups
        group = lane // lanes
        sub = lane - group * lanes
        n = rows.size
        for first in range(warp * groups, n, n_warps * groups):   # warp-uniform
            r = first + group
            live = r < n
            if not live:
                r = first
            base = np.int64(rows[r]) * width
            e = np.int64(0)
            while e < width:             # the same trip count for every group of the warp
                i = base + e
                k = pin(h, i)
                m = min(_room(pe, i), width - e)
                used = 0.0
                if k >= 0 and live:
                    for j in range(sub, m, lanes):
                        v = value(h, k + j)
                        out[r, e + j] = v
                        used += v
                unpin_after(h, i, k, used)
                e += m
    return gather_rows


@device_helper
def _cache_page_elems(h):
    return np.int64(1) << h.elem_shift


def gather_rows_kernel():
    """The kernel for arrays read through the gids cache (compiled on first launch)."""
    from kernels.access import pin_page, pinned, unpin_page_after
    return rows_template(pin_page, pinned, unpin_page_after, _cache_page_elems)
