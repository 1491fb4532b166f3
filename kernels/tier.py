"""The host tier on the device: pages kept in pinned, device-mapped host memory, between the GPU
cache and the store (``gids.host_tier`` fills it).

The tier is a table ``h.tier_slot`` (one int64 per global page: its slot in the tier, or
``TIER_NO_SLOT``) and the slots' bytes ``h.tier`` / ``h.tier_words``. The host fills both
between kernels; a kernel only reads them, except that the write-back of a dirty page drops the
page from the table (:func:`forget_tier_page`), whose tier copy is then stale, and that victim
fill (below) adds pages to free slots.

A miss of :mod:`kernels.access` on a page in the tier takes one of two ways, by the array's
``h.tier_mode``:

- copy (:func:`copy_from_tier`): the page's loader claims a slot as for any miss and its warp
  copies the page from the tier into it, instead of sending a request and waiting for the host;
- direct (:func:`read_direct`, read-only arrays): a ``gids.read`` whose page is not in the GPU
  cache reads its element straight from the tier, a sector over PCIe, and takes no slot (what
  zero-copy access costs, EMOGI-style); so does a ``gids.pin_page_or_tier``, which then hands
  out the element's place in the tier instead of a pin. ``gids.pin_page`` and writes use the
  copy way (their callers read the cache).

With ``host_tier_fill="victims"`` (``h.tier_victims``, read-only arrays) a loader that evicted
a clean page of its array offers it to the tier before its load overwrites the slot
(:func:`offer_victim`, GMT-style): it takes a free tier slot from the list the host left
(``h.tier_free``, ``h.tier_free_top``), copies the page there and publishes it in the table.
Kernels never evict from the tier, so no reader can see a tier slot change under it: between
kernels the host frees slots by clock over their reference bits (``h.tier_ref``, set on every
tier hit) and hands kernels a new free list.

Without a tier ``h.tier_mode`` is ``TIER_NONE``: the miss path tests that one integer and does
nothing else; the hit path never looks at the tier.
"""
import numpy as np
from numba import cuda

from kernels import layout as L
from kernels.cache import copy_in_bulk, drop_references, warp_copy_out, warp_copy_page
from kernels.platform import BULK_COPY_LANES
from kernels.sync import atomic_add, atomic_exch, ld_acquire_gpu, ld_relaxed_gpu, red_add
from kernels.warp import ballot_sync, lowest_lane, popc, shfl_sync, syncwarp


@cuda.jit(device=True)
def tier_slot_of(h, gpage):
    """The tier slot holding global page ``gpage``, or ``TIER_NO_SLOT``. Coherent (L2): a
    write-back in another SM may just have dropped the page (:func:`forget_tier_page`); an
    acquire, so that a slot a victim fill in another SM just published is read after its bytes
    (the copies from the tier are weak loads)."""
    return ld_acquire_gpu(h.tier_slot, gpage)


@cuda.jit(device=True)
def tier_slot_for_pin(h, gpage):
    """:func:`tier_slot_of` for ``gids.pin_page_or_tier``'s lookup in its hit path, which a
    traversal over a tier runs for most pages it scans: without victim fill the host filled
    every slot before the kernel began, and a relaxed load (still coherent) spares the SM the
    acquire's L1 invalidation."""
    if h.tier_victims != 0:
        return ld_acquire_gpu(h.tier_slot, gpage)
    return ld_relaxed_gpu(h.tier_slot, gpage)


def _copy_lanes_pages(copy):
    """``each(mask, lanes, src_words, src_page, dst_words, dst_page, page_words)``: for each
    lane in ``lanes`` (a ballot), the whole warp copies that lane's page ``src_page`` of
    ``src_words`` to its page ``dst_page`` of ``dst_words`` with ``copy`` (the cache's loads
    for a copy in, ``warp_copy_out``'s for a copy out to host memory); returns ``lanes``."""
    @cuda.jit(device=True)
    def each(mask, lanes, src_words, src_page, dst_words, dst_page, page_words):
        to_copy = lanes
        while to_copy != 0:
            src_lane = lowest_lane(to_copy)
            src = shfl_sync(mask, src_page, src_lane)
            dst = shfl_sync(mask, dst_page, src_lane)
            copy(mask, src_words, src * page_words, dst_words, dst * page_words, page_words)
            to_copy &= to_copy - 1
        return lanes
    return each


_copy_lanes_in = _copy_lanes_pages(warp_copy_page)     # tier -> GPU cache
_copy_lanes_out = _copy_lanes_pages(warp_copy_out)     # GPU cache -> tier (host memory)


@cuda.jit(device=True)
def copy_from_tier(h, mask, tier_at, slot):
    """Lanes with ``tier_at >= 0`` (loaders owning BUSY on a page in tier slot ``tier_at``)
    get their page copied from the tier into cache slot ``slot``, visible GPU-wide when this
    returns (collective; the caller then publishes it): in a warp of at most
    ``BULK_COPY_LANES`` lanes each loader alone by bulk copy where that is compiled in, as a
    miss's page from staging (:func:`kernels.cache.copy_in_bulk`: its copy ends with a
    release), else by the whole warp's loads."""
    lanes = popc(mask)
    bulk = False
    if tier_at >= 0:
        h.tier_ref[tier_at] = 1
    if tier_at >= 0 and lanes <= BULK_COPY_LANES:
        bulk = copy_in_bulk(h, lanes, h.tier_words, tier_at * h.page_words, slot)
    copied = _copy_lanes_in(mask, ballot_sync(mask, tier_at >= 0 and not bulk), h.tier_words,
                            tier_at, h.cache_words, slot, h.page_words)
    # Every lane's share is visible before any loader publishes (as after _fetch's copies).
    if copied != 0:
        cuda.threadfence()
    syncwarp(mask)


@cuda.jit(device=True)
def read_direct(h, mask, leader, ask, gpage, i, refs, value, at, done, keep):
    """Direct mode: a leader that ``ask``\\ s (its page ``gpage`` was not resident in round 1, and
    it holds the ``refs`` references that lookup took) looks the page up in the tier; if it is
    there, the leader gives the references back and its lanes read their elements ``i`` from
    the tier, or, to ``keep`` them (``gids.pin_page_or_tier``), take their places in the tier
    as ``at`` (:func:`tier_index`) (collective). Returns ``(value, at, done, served)``,
    ``served`` for the leader whose page the tier had."""
    tier_at = np.int64(L.TIER_NO_SLOT)
    if ask:
        tier_at = tier_slot_of(h, gpage)
    return use_direct(h, mask, leader, tier_at, gpage, i, refs, value, at, done, keep)


@cuda.jit(device=True)
def use_direct(h, mask, leader, tier_at, gpage, i, refs, value, at, done, keep):
    """:func:`read_direct` once the leaders looked their pages up: a leader whose page is in
    tier slot ``tier_at`` (>= 0) gives back its ``refs`` references, and its lanes read or take
    their places there (collective). Returns ``(value, at, done, served)``."""
    if tier_at >= 0:
        # Nothing is read under them: the page's word need not order anything.
        drop_references(h, gpage, refs)
        if h.tier_victims != 0:
            h.tier_ref[tier_at] = 1   # the host's clock reads it (victim fill only)
    code = shfl_sync(mask, np.int32(tier_at), leader)
    if not done and code >= 0:
        k = (np.int64(code) << h.elem_shift) + (i & ((1 << h.elem_shift) - 1))
        if keep:
            at = tier_index(h, k)
        else:
            value = h.tier[k]
        done = True
    return value, at, done, tier_at >= 0


@cuda.jit(device=True)
def tier_index(h, k):
    """What ``gids.pin_page_or_tier`` returns for element ``k`` of ``h.tier``: an index past
    ``h.cache``'s last, so that one integer names a place in either (``k >= 0`` still means
    "readable")."""
    return h.cache.size + k


@cuda.jit(device=True)
def forget_tier_page(h, gpage):
    """A dirty page is being written back to its store: drop it from the tier, whose copy is
    stale, before the page stops being cached (a later miss then reads the store). The host
    frees the slot when it next looks at the table (``gids.host_tier``)."""
    if ld_relaxed_gpu(h.tier_slot, gpage) >= 0:
        atomic_exch(h.tier_slot, gpage, np.int64(L.TIER_NO_SLOT))
        cuda.threadfence()


@cuda.jit(device=True)
def offer_victim(h, mask, victim, slot):
    """Lanes whose loader evicted clean page ``victim`` (>= 0) from cache ``slot`` (claimed by
    it, not yet overwritten) put the page into a free tier slot, if it is a page of this array
    and not in the tier already and a free slot is left (collective). The warp copies each
    page; it is published in the table once its bytes are there."""
    n_pages = (h.n_elems + (np.int64(1) << h.elem_shift) - 1) >> h.elem_shift
    at = np.int64(L.TIER_NO_SLOT)
    if (victim >= h.page_base and victim < h.page_base + n_pages
            and tier_slot_of(h, victim) < 0):
        k = atomic_add(h.tier_free_top, 0, 1)
        if k < h.tier_free_top[1]:
            at = h.tier_free[k]
    copied = _copy_lanes_out(mask, ballot_sync(mask, at >= 0), h.cache_words, slot,
                             h.tier_words, at, h.page_words)
    if copied != 0:
        # Every lane's share is in the tier before any lane publishes its page there.
        cuda.threadfence_system()
        syncwarp(mask)
    if at >= 0:
        h.tier_ref[at] = 0
        # A page evicted again before this publication may have been put in by another loader:
        # the first publication counts; the slot it replaced is freed by the host.
        if atomic_exch(h.tier_slot, victim, at) < 0:
            shard = cuda.blockIdx.x % L.N_STAT_SHARDS
            red_add(h.stats, shard * L.N_STATS + L.STAT_TIER_FILLS, np.uint64(1))
