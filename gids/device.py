"""The device toolkit for your own kernels: warp helpers, atomics, ordered loads and stores.

The same names work on a GPU and in the simulator (where each thread is a warp of one, or of
32 emulated lanes under ``GIDS_SIM_WARP_SIZE=32``). The page-cache functions themselves
(``read``, ``write``, ``pin_page`` ...) are on :mod:`gids`.

>>> from gids.device import WARP_SIZE, ballot_sync, laneid, lowest_lane   # doctest: +SKIP

Warps: ``WARP_SIZE``, ``activemask()``, ``laneid()``, ``lanemask_lt()`` (the bits of the lanes
below this one), ``ballot_sync``, ``shfl_sync``, ``match_any_sync``, ``syncwarp``, ``popc``,
``lowest_lane(mask)``/``highest_lane(mask)`` (the index of a mask's lowest/highest set bit),
``nanosleep(ns)``.

Memory: ``atomic_add``, ``atomic_cas``, ``atomic_or``, ``atomic_and``, ``atomic_exch`` (on a 1-D
array and an index, returning the old value), ``ld_acquire_sys``/``st_release_sys`` (a word
shared with the host), ``make_load(qualifiers)`` (a load with the given PTX qualifiers),
``now_ns()`` (the GPU's global timer).

Compiling: ``device_helper`` (a small device function called in loops: the plain Python
function in the simulator, whose device-call wrapper takes locks on every call),
``register_copy(x)`` (``x`` as a fresh register, for a call-free loop inside one that calls).

Loops: ``rows_template(pin, value, unpin_after, page_elems)``: the kernel of
``Runtime.gather_rows`` (a warp per row, a page at a time) over another reader's page
functions, so that other data paths run the same loop (``workloads.pager``'s pagers).
"""
from kernels.platform import WARP_SIZE, device_helper, register_copy
from kernels.rows import rows_template
from kernels.sync import (
    atomic_add,
    atomic_and,
    atomic_cas,
    atomic_exch,
    atomic_or,
    ld_acquire_sys,
    make_load,
    now_ns,
    st_release_sys,
)
from kernels.warp import (
    activemask,
    ballot_sync,
    highest_lane,
    laneid,
    lanemask_lt,
    lowest_lane,
    match_any_sync,
    nanosleep,
    popc,
    shfl_sync,
    syncwarp,
)

__all__ = ["WARP_SIZE", "activemask", "laneid", "lanemask_lt", "ballot_sync", "shfl_sync",
           "match_any_sync", "syncwarp", "popc", "lowest_lane", "highest_lane", "nanosleep",
           "atomic_add", "atomic_cas", "atomic_or", "atomic_and", "atomic_exch",
           "ld_acquire_sys", "st_release_sys", "make_load", "now_ns", "device_helper",
           "register_copy", "rows_template"]
