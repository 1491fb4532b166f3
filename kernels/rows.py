"""Gathering whole rows of a 2-D array, a warp per row, a page at a time.

``out[r, :] = a[rows[r], :]`` for a C-order array ``a`` of ``width`` columns. A warp takes rows
``w, w + n_warps, ...``; for each it walks the row's elements a page at a time: it pins the page
of the next element (every lane of a row's group the same element: one lookup per page and
warp), its lanes copy elements ``lane, lane + lanes, ...`` of what the row has on that page
(contiguous loads and stores, :data:`LOADS_IN_FLIGHT` loads per lane issued before their
stores), and it gives the pin back. A row may start anywhere in a page and span pages (rows
wider than a page, or not aligned to one): each of its pages is pinned once.

The loop is a template over four device functions, so that the same loop reads through the
gids cache (:func:`gather_rows_kernel`: ``pin_page`` / ``pinned`` / ``unpin_page_after``) or through
any other reader (``workloads.pager``'s pagers: zero-copy, GPU memory, the CPU batch path).

Resident first (:func:`resident_rows_kernels`, the setting ``rows_resident_first``): a first
launch pins with ``pin_page_if_resident`` and has no call in it; the rows that met a page not
resident are set aside in a list, which a second launch copies with ``pin_page`` (loads). Why:
``pin_page``'s miss path is a call, and a call makes the compiler keep the loop's live values in
the few registers a call preserves or spill them, on every row, hit or not
(``kernels.access.pin_page_if_resident``; the BFS does the same, ``workloads/graph/gpu_bfs.py``).
"""
from functools import lru_cache

import numpy as np
from numba import cuda

from kernels.platform import device_helper, jit
from kernels.sync import st_pair
from kernels.warp import activemask, syncwarp

#: Lanes of a warp (also in the simulator, where each thread pins for itself).
WARP_LANES = 32

#: Rows a warp copies at once where every row covers the same pages (a row a page or a
#: multiple of it, or rows that divide the page): a group of 16 lanes per row, both rows'
#: pages pinned in one call, both rows' loads in flight together. One row at a time is one
#: dependent chain per warp (pin, loads, unpin), as the bench's requests were
#: (``workloads.baselines.REQUESTS_PER_WARP``).
ROWS_PER_WARP = 2

#: Rows a warp copies at once in the resident launch (:func:`resident_rows_kernels`), groups of
#: 8 lanes: it loads nothing, so a warp may hold more pins without needing more free slots
#: (``pin_page_if_resident`` never waits for one), and each pin's latency is paid once per
#: 16 KiB instead of 8 KiB. On the H200, whole-cache gathers of 262 k uniform rows of 4 KiB:
#: 1.70 TB/s with 2 rows a warp, 1.74 with 4, 1.67 with 8 (``torch.index_select``: 1.87).
RESIDENT_ROWS_PER_WARP = 4

#: Independent loads a lane issues before it stores their values: a load's latency is paid
#: once per this many, not once per element (one at a time, a warp's row copy was bound by
#: latency, not bandwidth). Every reader of the template gets it (gids, GPU memory, zero-copy,
#: the CPU batch path).
LOADS_IN_FLIGHT = 8

#: Register cap of the resident-first launch: with no call in it, it needs fewer than this, and
#: 64 lets an SM run 4 blocks of 256 threads (32 warps, twice the default cap's), hence twice
#: the loads in flight that a copy bound by memory bandwidth wants.
RESIDENT_REGISTERS = 64

#: What a launch of the loop does with its rows (compiled in).
ALL_ROWS = 0        # every row, through ``pin`` (which loads what is missing)
RESIDENT_ROWS = 1   # every row, through ``pin_if_resident``; rows that miss are set aside
SET_ASIDE_ROWS = 2  # the rows a RESIDENT_ROWS launch set aside, through ``pin``


@device_helper
def _room(page_elems, i):
    """Elements of ``i``'s page from ``i`` on, pages of ``page_elems`` elements (a power of 2)."""
    return page_elems - (i & (page_elems - 1))


@lru_cache(maxsize=None)
def _row_loop(pin, value, unpin_after, page_elems, mode, pairs=None):
    """The row loop ``(h, rows, width, out, aside, n_aside)`` as a device function, for one
    :data:`ALL_ROWS` / :data:`RESIDENT_ROWS` / :data:`SET_ASIDE_ROWS` ``mode`` (``aside`` and
    ``n_aside[0]``: the positions set aside and their count; unused by ALL_ROWS). A warp copies
    up to :func:`rows_per_warp` ``(mode)`` rows at once.

    ``pairs``: None, or ``(value_pair, elem_bytes)`` for 16-byte copies: ``value_pair(h, w)``
    the reader's 8-byte words ``w`` and ``w + 1`` (``w`` even), ``elem_bytes(h)`` the array's
    element size; ``out`` is then the output's bytes as a 1-D array of 8-byte words (rows of
    ``width`` elements one after another) and every row a multiple of 16 bytes
    (:func:`wide_rows`)."""
    step = LOADS_IN_FLIGHT
    most_groups = rows_per_warp(mode)

    @cuda.jit(device=True)
    def copy_page(h, k, r, e, m, sub, lanes, out, width):
        """Elements ``sub, sub + lanes, ...`` below ``m`` of the pinned ``k`` into ``out[r, e +
        ...]``, :data:`LOADS_IN_FLIGHT` loads before their stores; the sum of what was read.
        (``width``: unused; the 16-byte copy's signature, so the loop calls either.)"""
        used = 0.0
        j = sub
        while j + (step - 1) * lanes < m:
            v0 = value(h, k + j)
            v1 = value(h, k + j + lanes)
            v2 = value(h, k + j + 2 * lanes)
            v3 = value(h, k + j + 3 * lanes)
            v4 = value(h, k + j + 4 * lanes)
            v5 = value(h, k + j + 5 * lanes)
            v6 = value(h, k + j + 6 * lanes)
            v7 = value(h, k + j + 7 * lanes)
            out[r, e + j] = v0
            out[r, e + j + lanes] = v1
            out[r, e + j + 2 * lanes] = v2
            out[r, e + j + 3 * lanes] = v3
            out[r, e + j + 4 * lanes] = v4
            out[r, e + j + 5 * lanes] = v5
            out[r, e + j + 6 * lanes] = v6
            out[r, e + j + 7 * lanes] = v7
            used += ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
            j += step * lanes
        while j < m:
            v = value(h, k + j)
            out[r, e + j] = v
            used += v
            j += lanes
        return used

    if pairs is not None:
        value_pair, elem_bytes = pairs

        @cuda.jit(device=True)
        def copy_page_pairs(h, k, r, e, m, sub, lanes, out, width):
            """:func:`copy_page` 16 bytes a load and a store: the ``m`` elements from the
            pinned ``k`` as pairs of words into row ``r``'s words from its element ``e`` on."""
            b = elem_bytes(h)
            src = (k * b) >> 3
            dst = ((r * width + e) * b) >> 3
            q = (m * b) >> 4
            used = np.uint64(0)
            j = sub
            while j + (step - 1) * lanes < q:
                a0, b0 = value_pair(h, src + 2 * j)
                a1, b1 = value_pair(h, src + 2 * (j + lanes))
                a2, b2 = value_pair(h, src + 2 * (j + 2 * lanes))
                a3, b3 = value_pair(h, src + 2 * (j + 3 * lanes))
                a4, b4 = value_pair(h, src + 2 * (j + 4 * lanes))
                a5, b5 = value_pair(h, src + 2 * (j + 5 * lanes))
                a6, b6 = value_pair(h, src + 2 * (j + 6 * lanes))
                a7, b7 = value_pair(h, src + 2 * (j + 7 * lanes))
                st_pair(out, dst + 2 * j, a0, b0)
                st_pair(out, dst + 2 * (j + lanes), a1, b1)
                st_pair(out, dst + 2 * (j + 2 * lanes), a2, b2)
                st_pair(out, dst + 2 * (j + 3 * lanes), a3, b3)
                st_pair(out, dst + 2 * (j + 4 * lanes), a4, b4)
                st_pair(out, dst + 2 * (j + 5 * lanes), a5, b5)
                st_pair(out, dst + 2 * (j + 6 * lanes), a6, b6)
                st_pair(out, dst + 2 * (j + 7 * lanes), a7, b7)
                used ^= ((a0 ^ b0) ^ (a1 ^ b1)) ^ ((a2 ^ b2) ^ (a3 ^ b3)) ^ \
                    ((a4 ^ b4) ^ (a5 ^ b5)) ^ ((a6 ^ b6) ^ (a7 ^ b7))
                j += step * lanes
            while j < q:
                a0, b0 = value_pair(h, src + 2 * j)
                st_pair(out, dst + 2 * j, a0, b0)
                used ^= a0 ^ b0
                j += lanes
            return used

        copy = copy_page_pairs
        nothing_read = np.uint64(0)
    else:
        copy = copy_page
        nothing_read = 0.0

    @cuda.jit(device=True)
    def row_loop(h, rows, width, out, aside, n_aside):
        # The warp's lanes, taken at the kernel's start (converged there): the loop below is
        # warp-uniform, so all of them reach each pin (launches are 1-D, whole warps).
        lanes_of_warp = activemask()
        lane = cuda.threadIdx.x % WARP_LANES
        warp = cuda.grid(1) // WARP_LANES
        n_warps = cuda.gridsize(1) // WARP_LANES
        pe = page_elems(h)
        groups = 1
        if width % pe == 0 or pe % width == 0:
            groups = most_groups
        lanes = WARP_LANES // groups
        group = lane // lanes
        sub = lane - group * lanes
        n = rows.size
        if mode == SET_ASIDE_ROWS:
            n = n_aside[0]
        for first in range(warp * groups, n, n_warps * groups):   # warp-uniform
            p = first + group
            live = p < n
            if not live:
                p = first
            r = p
            if mode == SET_ASIDE_ROWS:
                r = aside[p]
            base = np.int64(rows[r]) * width
            missed = False
            e = np.int64(0)
            while e < width:             # the same trip count for every group of the warp
                i = base + e
                # Reconverged before the collective pin: the copy loops' trip counts differ
                # by lane, and a warp arriving in parts would pin the page once per part.
                syncwarp(lanes_of_warp)
                k = pin(h, i)
                if mode == RESIDENT_ROWS and k < 0:
                    missed = True
                m = min(_room(pe, i), width - e)
                used = nothing_read
                if k >= 0 and live and not missed:
                    used = copy(h, k, r, e, m, sub, lanes, out, width)
                unpin_after(h, i, k, used)
                e += m
            if mode == RESIDENT_ROWS and missed and live and sub == 0:
                aside[cuda.atomic.add(n_aside, 0, 1)] = r
    return row_loop


def rows_per_warp(mode):
    """Rows a warp of a ``mode`` launch copies at once where its rows allow
    (:data:`RESIDENT_ROWS_PER_WARP` for :data:`RESIDENT_ROWS`, else :data:`ROWS_PER_WARP`):
    the most pins a warp holds, for a grid sized to the cache (``gids.rows``)."""
    return RESIDENT_ROWS_PER_WARP if mode == RESIDENT_ROWS else ROWS_PER_WARP


@lru_cache(maxsize=None)
def rows_template(pin, value, unpin_after, page_elems, pairs=None):
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
    after the timeout otherwise, never a hang). Launch it 1-D in whole warps (threads per block
    a multiple of 32): a warp's lanes meet at each pin.
    """
    loop = _row_loop(pin, value, unpin_after, page_elems, ALL_ROWS, pairs)

    @jit
    def gather_rows(h, rows, width, out):
        unused = cuda.local.array(1, np.int64)   # (no list set aside)
        loop(h, rows, width, out, unused, unused)
    return gather_rows


@device_helper
def _cache_page_elems(h):
    return np.int64(1) << h.elem_shift


@device_helper
def _cache_elem_bytes(h):
    return (h.page_words << 3) >> h.elem_shift


def _cache_pairs(wide):
    """The gids cache's 16-byte reader for :func:`_row_loop` (None unless ``wide``)."""
    if not wide:
        return None
    from kernels.access import pinned_pair
    return (pinned_pair, _cache_elem_bytes)


def wide_rows(width, itemsize, out_ptr, out_contiguous):
    """Whether a gather of rows of ``width`` elements of ``itemsize`` bytes into an output at
    ``out_ptr`` (C-contiguous or not) can copy 16 bytes at a time: every row, and so every
    part of a row within a page, starts and ends on 16 bytes in the cache and in the output."""
    return out_contiguous and (width * itemsize) % 16 == 0 and out_ptr % 16 == 0


@lru_cache(maxsize=None)
def gather_rows_kernel(wide=False):
    """The kernel for arrays read through the gids cache (compiled on first launch); ``wide``:
    16-byte copies into ``out`` given as words (:func:`wide_rows`)."""
    from kernels.access import pin_page, pinned, unpin_page_after
    return rows_template(pin_page, pinned, unpin_page_after, _cache_page_elems,
                         _cache_pairs(wide))


@lru_cache(maxsize=None)
def resident_rows_kernels(wide=False):
    """``(resident, set_aside)``: the two launches of a resident-first gather through the gids
    cache, each ``(h, rows, width, out, aside, n_aside)`` on one stream, in that order.

    ``resident`` copies the rows whose pages are all in the cache (``pin_page_if_resident``: no
    call, nothing loaded, nothing recorded) and appends the position of every other row to
    ``aside`` (``n_aside[0]``, zero before it, counts them: ``aside`` holds up to
    ``rows.size``); ``set_aside`` copies those rows with ``pin_page``, which loads what is
    missing and records what cannot be had (an out-of-range row: raised by the host).
    """
    from kernels.access import pin_page, pin_page_if_resident, pinned, unpin_page_after
    pairs = _cache_pairs(wide)
    first = _row_loop(pin_page_if_resident, pinned, unpin_page_after, _cache_page_elems,
                      RESIDENT_ROWS, pairs)
    second = _row_loop(pin_page, pinned, unpin_page_after, _cache_page_elems, SET_ASIDE_ROWS,
                       pairs)

    @jit(max_registers=RESIDENT_REGISTERS)
    def gather_resident_rows(h, rows, width, out, aside, n_aside):
        first(h, rows, width, out, aside, n_aside)

    @jit
    def gather_set_aside_rows(h, rows, width, out, aside, n_aside):
        second(h, rows, width, out, aside, n_aside)
    return gather_resident_rows, gather_set_aside_rows
