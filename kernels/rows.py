"""Gathering whole rows of a 2-D array, a warp per row, a page at a time.

``out[r, :] = a[rows[r], :]`` for a C-order array ``a`` of ``width`` columns. A warp takes rows
``w, w + n_warps, ...``; for each it walks the row's elements a page at a time: it pins the page
of the next element (every lane the same element: one lookup per page and warp), its lanes copy
elements ``lane, lane + 32, ...`` of what the row has on that page (contiguous loads and stores),
and it gives the pin back. A row may start anywhere in a page and span pages (rows wider than a
page, or not aligned to one): each of its pages is pinned once.

The kernel is a template over four device functions, so that the same loop reads through the
gids cache (:func:`gather_rows_kernel`: ``pin_page`` / ``pinned`` / ``unpin_page``) or through
any other reader (``workloads.pager``'s pagers: zero-copy, GPU memory, the CPU batch path).
"""
from functools import lru_cache

import numpy as np
from numba import cuda

from kernels.platform import device_helper, jit

#: Lanes that copy a row together (also in the simulator, where each thread pins for itself).
ROW_LANES = 32


@device_helper
def _room(page_elems, i):
    """Elements of ``i``'s page from ``i`` on, pages of ``page_elems`` elements (a power of 2)."""
    return page_elems - (i & (page_elems - 1))


@lru_cache(maxsize=None)
def rows_template(pin, value, unpin, page_elems):
    """The row-gather kernel ``(h, rows, width, out)`` over a reader's page functions.

    ``pin(h, i) -> k`` (``k < 0``: the page could not be had, the reader recorded why),
    ``value(h, k)``, ``unpin(h, i, k)`` (collective over the warp, called whatever ``pin``
    returned), ``page_elems(h)``. Rows of an out-of-range index are left as they were (the
    reader records the index; the host raises it). One kernel per set of functions (cached).
    """

    @jit
    def gather_rows(h, rows, width, out):
        lane = cuda.threadIdx.x % ROW_LANES
        warp = cuda.grid(1) // ROW_LANES
        n_warps = cuda.gridsize(1) // ROW_LANES
        pe = page_elems(h)
        for r in range(warp, rows.size, n_warps):   # warp-uniform: every lane the same row
            base = np.int64(rows[r]) * width
            e = np.int64(0)
            while e < width:
                i = base + e
                k = pin(h, i)
                n = min(_room(pe, i), width - e)
                if k >= 0:
                    for j in range(lane, n, ROW_LANES):
                        out[r, e + j] = value(h, k + j)
                unpin(h, i, k)
                e += n
    return gather_rows


@device_helper
def _cache_page_elems(h):
    return np.int64(1) << h.elem_shift


def gather_rows_kernel():
    """The kernel for arrays read through the gids cache (compiled on first launch)."""
    from kernels.access import pin_page, pinned, unpin_page
    return rows_template(pin_page, pinned, unpin_page, _cache_page_elems)
