"""The host tier: pages of any open array kept in pinned, device-mapped host memory, between the
GPU cache and the store (``Runtime(host_cache_bytes=...)``, ``rt.host_tier``).

A kernel's miss on a page in the tier sends no request: its loader copies the page from the
tier into a GPU slot (``"copy"`` mode), or, for a read-only array in ``"direct"`` mode, a
``gids.read`` reads the element straight from the tier and takes no slot (zero-copy at sector
granularity, for fine-grained access). The device side is :mod:`kernels.tier`.

Filling is static: :meth:`HostTier.add` reads chosen pages from their store (for graphs,
``workloads.graph.tier_pages`` picks them by degree or by reverse PageRank, as GIDS does); with
``host_tier_fill="victims"`` also dynamic: clean pages of read-only arrays that kernels evict
from the GPU cache enter free tier slots (a victim cache, as GMT's), and after each
``Runtime.sync`` the host frees slots by clock (a slot hit since the hand last passed is kept)
so that the next kernels find free ones again.

The host keeps its own copy of the device table and reads back only the spans of it a kernel
may have changed: the held pages of arrays that kernels write back (whose write-back drops the
page), and, after kernels took free slots, the pages of the arrays that offer victims.

Writes: a page has one writable copy at a time. A writable array's page may be in the tier (it
is copied into the GPU cache to be written); the write-back of a dirty page from a kernel drops
it from the tier (its copy there is stale; later misses read the store), and
``Runtime.flush`` / ``invalidate`` write dirty pages into both the store and the tier.
"""
import os

import numpy as np
from numba import cuda

from gids import layout as L
from gids._platform import host_view, mapped_view
from gids.errors import ConfigError, HostTierFullError

MODES = ("copy", "direct")
FILLS = ("static", "victims")
#: With victim fill, the clock runs once fewer than this share of the slots is free, and
#: frees slots until twice as many are.
_LOW_WATER = 8
_MODE_CODES = {"copy": L.TIER_COPY, "direct": L.TIER_DIRECT}
#: Pages read from the store by one call while filling (contiguous pages of one array).
_FILL_RUN_PAGES = 256
#: Table words between two pages that one copy of a span of the device table passes over
#: rather than start another copy (a copy costs a few microseconds, 16 Ki words about as much).
_SPAN_GAP = 1 << 14
_NO_PAGES = np.zeros(0, dtype=np.int64)


def spans(pages, gap=_SPAN_GAP):
    """The ``(lo, hi)`` spans covering ``pages`` (sorted, unique), one per run of pages less
    than ``gap`` apart."""
    if pages.size == 0:
        return []
    cut = np.flatnonzero(np.diff(pages) > gap) + 1
    starts = pages[np.concatenate(([0], cut))]
    ends = pages[np.concatenate((cut - 1, [pages.size - 1]))] + 1
    return list(zip(starts.tolist(), ends.tolist()))


def _merged(ranges):
    """``(lo, hi)`` ranges, overlapping or touching ones made one, ascending."""
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def clock(page_of_slot, ref, hand, need):
    """The clock over the tier's slots, from slot ``hand``: frees up to ``need`` slots holding a
    page (``page_of_slot >= 0``), passing over once each one whose reference bit ``ref`` is set
    (the bit is cleared, in place), at most two turns. Returns the freed slots in the order the
    hand reached them, and where the hand stops (after the last slot it freed)."""
    capacity = page_of_slot.size
    if need <= 0 or capacity == 0:
        return _NO_PAGES, hand

    def slots(at):   # places in the hand's order -> slots
        return (hand + at) % capacity

    held = np.concatenate((page_of_slot[hand:], page_of_slot[:hand])) >= 0
    hit = held & (np.concatenate((ref[hand:], ref[:hand])) != 0)
    first = np.flatnonzero(held & ~hit)            # freed on the first turn
    if first.size >= need:
        stop = int(first[need - 1]) + 1
        ref[slots(np.flatnonzero(hit[:stop]))] = 0
        return slots(first[:need]), (hand + stop) % capacity
    # A whole turn: every bit cleared; the second frees the slots that were hit, in order
    # (never one the first turn freed: the slot would be handed out twice).
    ref[page_of_slot >= 0] = 0
    second = np.flatnonzero(hit)[:need - first.size]
    freed = slots(np.concatenate((first, second)))
    if first.size + second.size < need:
        return freed, hand                         # two whole turns
    return freed, (hand + int(second[-1]) + 1) % capacity


def _physical_memory():
    """Bytes of RAM in this machine (None where unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class HostTier:
    """The host tier of a Runtime (``rt.host_tier``): ``capacity`` pages of pinned, mapped host
    memory and a device table page -> tier slot. Its methods run between kernels (they wait for
    the kernels launched so far)."""

    def __init__(self, runtime, capacity_bytes, fill="static"):
        if fill not in FILLS:
            raise ConfigError(f"gids: host_tier_fill must be one of {FILLS}, got {fill!r}")
        capacity_bytes = int(capacity_bytes)
        if capacity_bytes < 0:
            raise ConfigError(f"gids: host_cache_bytes must be >= 0, got {capacity_bytes}")
        ram = _physical_memory()
        if ram is not None and capacity_bytes > ram:
            raise ConfigError(f"gids: a host tier of {capacity_bytes:,} bytes is larger than "
                              f"this machine's RAM ({ram:,} bytes)")
        self._rt = runtime
        self.page_size = runtime.page_size
        #: Page slots of the tier (0: no tier; kernels never look at it).
        self.capacity = capacity_bytes // self.page_size
        words = max(1, self.capacity * (self.page_size // 8))
        try:
            self._memory = cuda.mapped_array(words, dtype=np.uint64)
        except Exception as exc:   # noqa: BLE001 - the driver's error types differ by world
            raise ConfigError(f"gids: cannot pin a host tier of {capacity_bytes:,} bytes: "
                              f"{exc}") from None
        self._bytes = host_view(self._memory).view(np.uint8)
        self._table_host = np.full(1, L.TIER_NO_SLOT, dtype=np.int64)
        self._table = cuda.to_device(self._table_host)
        self._page_of_slot = np.full(self.capacity, -1, dtype=np.int64)
        # Free slots, a stack (the top is the end): slot 0 first.
        self._free = np.arange(self.capacity - 1, -1, -1, dtype=np.int64)
        self._modes = {}        # array id -> TIER_COPY or TIER_DIRECT
        self.fills = 0
        self.evictions = 0
        #: Clean pages evicted from the GPU cache enter the tier (``host_tier_fill``).
        self.victims = fill == "victims" and self.capacity > 0
        slots = max(1, self.capacity)
        self._ref = cuda.to_device(np.zeros(slots, dtype=np.int32))
        self._free_list = cuda.to_device(np.zeros(slots, dtype=np.int64))
        self._free_top = cuda.to_device(np.zeros(2, dtype=np.int64))
        self._offered = _NO_PAGES   # the free list kernels were given
        self._victim_arrays = set()   # ids of arrays whose handles offer victims
        self._hand = 0
        self._publish_free()

    @property
    def enabled(self):
        return self.capacity > 0

    @property
    def used(self):
        """Pages in the tier now."""
        self._reconcile()
        return self.capacity - len(self._free)

    # ------------------------------------------------------------ the Runtime's hooks
    def grow(self, n_pages):
        """The Runtime's page tables hold ``n_pages`` words now: so does the tier's table."""
        if n_pages <= self._table_host.size:
            return
        self._reconcile()
        table = np.full(n_pages, L.TIER_NO_SLOT, dtype=np.int64)
        table[:self._table_host.size] = self._table_host
        self._table_host = table
        self._table = cuda.to_device(table)

    def handle_fields(self, array):
        """The handle fields of ``array`` (:mod:`kernels.handle`, the host tier's block)."""
        mode = self._modes.get(array.array_id, L.TIER_COPY) if self.enabled else L.TIER_NONE
        victims = int(self.victims and not array.writable
                      and id(array.store) not in self._rt._written)
        if victims:
            self._victim_arrays.add(array.array_id)
        return {"tier_slot": self._table, "tier": mapped_view(self._memory, array.dtype),
                "tier_words": self._memory, "tier_mode": mode, "tier_ref": self._ref,
                "tier_free": self._free_list, "tier_free_top": self._free_top,
                "tier_victims": victims}

    def written(self, gpage, data):
        """The host wrote ``data`` (the page's bytes) to global page ``gpage``'s store (a flush):
        the tier's copy, if any, gets them too."""
        slot = self._table_host[gpage] if gpage < self._table_host.size else L.TIER_NO_SLOT
        if slot >= 0:
            at = slot * self.page_size
            self._bytes[at:at + data.size] = data

    def _reconcile(self):
        """Take in what kernels changed in the table: free the slots of pages they dropped
        (write-backs of dirty pages: :func:`kernels.tier.forget_tier_page`) and, with victim
        fill, hold the pages they put in; then run the clock and hand out free slots again."""
        if not self.enabled:
            return
        cuda.synchronize()
        taken = self._taken_slots() if self.victims else _NO_PAGES
        for lo, hi in self._changed_spans(taken.size > 0):
            self._take_in(lo, self._table[lo:hi].copy_to_host())
        if taken.size:
            # Taken slots that hold no page were taken twice for one page: free again.
            held = taken[self._page_of_slot[taken] >= 0]
            self._free = self._free[~np.isin(self._free, held)]
        if self.victims:
            self._clock()
            if taken.size or self._free.size != self._offered.size:
                self._publish_free()

    def _taken_slots(self):
        """The free slots kernels took since they were handed out (victim fill)."""
        top = int(self._free_top.copy_to_host()[0])
        return self._offered[:min(top, self._offered.size)]

    def _changed_spans(self, victims_taken):
        """The spans of the table kernels may have changed: where a page of an array they write
        back is held (a write-back drops it), and, where they took free slots, the pages of the
        arrays that offer victims."""
        held = np.sort(self._page_of_slot[self._page_of_slot >= 0])
        ranges = []
        for array in self._rt._arrays:
            lo, hi = array.page_base, array.page_base + array.n_pages
            if id(array.store) in self._rt._written:
                ranges += spans(held[np.searchsorted(held, lo):np.searchsorted(held, hi)])
            elif victims_taken and array.array_id in self._victim_arrays:
                ranges.append((lo, hi))
        return _merged(ranges)

    def _take_in(self, lo, seen):
        """The device table's words ``seen`` from page ``lo`` on: pages dropped from it free
        their slots; pages put in hold theirs."""
        was = self._table_host[lo:lo + seen.size]
        new = np.flatnonzero((seen >= 0) & (was < 0))
        dropped = np.flatnonzero((seen < 0) & (was >= 0))
        if dropped.size:
            self._release(lo + dropped)
        self._table_host[lo + new] = seen[new]
        self._page_of_slot[seen[new]] = lo + new

    def _upload(self, gpages):
        """Copy the host's table words of ``gpages`` (and those between them) to the device."""
        for lo, hi in spans(np.unique(gpages)):
            self._table[lo:hi].copy_to_device(self._table_host[lo:hi])

    def _clock(self):
        """Free slots by :func:`clock` until twice the low water are free."""
        if self._free.size * _LOW_WATER >= self.capacity:
            return
        ref = self._ref.copy_to_host()
        slots, self._hand = clock(self._page_of_slot, ref, self._hand,
                                  2 * self.capacity // _LOW_WATER - self._free.size)
        if slots.size:
            freed = self._page_of_slot[slots]
            self._release(freed)
            self._upload(freed)
        self._ref.copy_to_device(ref)

    def _publish_free(self):
        """Give kernels the free slots (victim fill): a list and a count, none taken yet."""
        if not self.victims:
            return
        self._offered = self._free[::-1].copy()
        if self._offered.size:
            self._free_list[:self._offered.size].copy_to_device(self._offered)
        self._free_top.copy_to_device(np.array([0, self._offered.size], dtype=np.int64))

    def after_kernels(self):
        """After ``Runtime.sync``: take in the kernels' victims, run the clock, hand out free
        slots again (victim fill only)."""
        if self.victims:
            self._reconcile()

    def _release(self, gpages):
        gpages = np.unique(gpages)
        slots = self._table_host[gpages]
        self._page_of_slot[slots] = -1
        self._free = np.concatenate((self._free, slots))
        self._table_host[gpages] = L.TIER_NO_SLOT
        self.evictions += int(gpages.size)

    # ------------------------------------------------------------ the user's calls
    def _array(self, array, what):
        self._rt._check_array(array, f"host_tier.{what}")
        return array

    def add(self, array, pages):
        """Read ``pages`` (page indices of ``array``) from its store into the tier; pages already
        there stay. Returns the pages added.

        Raises
        ------
        HostTierFullError
            The tier has fewer free slots than new pages (nothing is added).
        ConfigError
            A page outside the array.
        """
        self._array(array, "add")
        pages = np.unique(np.asarray(pages, dtype=np.int64).reshape(-1))
        if pages.size and (pages[0] < 0 or pages[-1] >= array.n_pages):
            raise ConfigError(f"gids: host_tier.add: pages must be in [0, {array.n_pages}) for "
                              f"{array.store.name}, got {pages[0]}..{pages[-1]}")
        self._reconcile()
        gpages = pages + array.page_base
        new = gpages[self._table_host[gpages] < 0] if pages.size else gpages
        if new.size > len(self._free):
            raise HostTierFullError(
                f"gids: host_tier.add: {new.size} new pages do not fit the host tier "
                f"({len(self._free)} of {self.capacity} slots free, {self.page_size} B pages)")
        if new.size == 0:
            return 0
        if array.writable:
            # The tier gets the store's bytes: the GPU cache's newer ones go there first.
            self._rt._write_back_dirty()
        slots = self._free[::-1][:new.size].copy()
        self._free = self._free[:self._free.size - new.size]
        self._fill(array, new - array.page_base, slots)
        self._table_host[new] = slots
        self._page_of_slot[slots] = new
        self._upload(new)
        self.fills += int(new.size)
        self._publish_free()
        return int(new.size)

    def _fill(self, array, pages, slots):
        """Read the array's ``pages`` (ascending) from its store into tier ``slots``, a run of
        contiguous pages per store call."""
        ps = self.page_size
        starts = np.flatnonzero(np.diff(pages, prepend=-2) != 1)
        for k, first in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else pages.size
            for lo in range(first, end, _FILL_RUN_PAGES):
                hi = min(end, lo + _FILL_RUN_PAGES)
                start = int(pages[lo]) * ps
                n = min((hi - lo) * ps, array.nbytes - start)
                data = np.frombuffer(array.store.read_bytes(array.offset + start, n),
                                     dtype=np.uint8)
                if data.size < n:
                    raise ConfigError(f"gids: host_tier.add: short read of {array.store.name} "
                                      f"at byte {array.offset + start}")
                for j in range(lo, hi):
                    at = int(slots[j]) * ps
                    part = data[(j - lo) * ps:(j - lo + 1) * ps]
                    self._bytes[at:at + part.size] = part
                    self._bytes[at + part.size:at + ps] = 0

    def pages(self, array):
        """The page indices of ``array`` in the tier, ascending."""
        self._array(array, "pages")
        self._reconcile()
        words = self._table_host[array.page_base:array.page_base + array.n_pages]
        return np.flatnonzero(words >= 0).astype(np.int64)

    def clear(self):
        """Drop every page from the tier."""
        if not self.enabled:
            return
        self._reconcile()
        held = self._page_of_slot[self._page_of_slot >= 0]
        if held.size:
            self._release(held)
            self._upload(held)
        self._publish_free()

    def set_mode(self, array, mode):
        """How a kernel's miss on ``array``'s pages in the tier is served: ``"copy"`` (into a GPU
        slot; the default) or ``"direct"`` (``gids.read`` reads the element from the tier and
        takes no slot; read-only arrays only, since a page must have one writable copy)."""
        self._array(array, "set_mode")
        if mode not in MODES:
            raise ConfigError(f"gids: host_tier.set_mode: mode must be one of {MODES}, "
                              f"got {mode!r}")
        if mode == "direct" and (array.writable or id(array.store) in self._rt._written):
            raise ConfigError(f"gids: host_tier.set_mode: direct mode reads pages in place, "
                              f"so {array.store.name} must not be writable (opened mode='r+')")
        self._modes[array.array_id] = _MODE_CODES[mode]
        array._handle = None   # its next handle carries the mode

    def mode(self, array):
        self._array(array, "mode")
        return {v: k for k, v in _MODE_CODES.items()}[self._modes.get(array.array_id,
                                                                       L.TIER_COPY)]

    def close(self):
        """Give the pinned memory back (the Runtime closes); the tier is empty from now on."""
        self.capacity = 0
        self._free = _NO_PAGES
        self._memory = self._bytes = self._table = None
        self._table_host = np.full(1, L.TIER_NO_SLOT, dtype=np.int64)

    def reset_counts(self):
        self.fills = 0
        self.evictions = 0

    def __repr__(self):
        return (f"HostTier({self.capacity} pages of {self.page_size} B, "
                f"{self.capacity - len(self._free)} used)")
