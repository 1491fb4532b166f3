"""The GPU page cache: page states, slot replacement, page copies.

State of a page (the low half of its uint64 word in ``page_state``, bits in :mod:`gids.layout`),
as in BaM:

- not VALID, not BUSY: not cached. A thread that sets BUSY (atomic OR, first one wins) becomes
  its loader: it claims a slot, issues the I/O, copies the page in and publishes VALID.
- BUSY: being loaded. Its loader keeps the reference it took, and others wait holding one, so
  the page cannot be evicted between its publication and their read.
- VALID: in the slot held in the word's high half. A reader pins it (reference count + 1, one
  atomic add on the whole word, which returns the slot with the state: :func:`take_reference`),
  and unpins once its reads are done (:func:`unpin`, a release, or :func:`unpin_after_reads`).
  A VALID page with no reference can be evicted.
- ERROR: its last load failed; readers stop with an error instead of waiting.
- VALID | DIRTY: resident, and written by ``gids.write`` since it was loaded: the store does not
  have these bytes yet. A writer sets DIRTY (atomic OR) while it still holds its pin, so an
  evictor, which needs the reference count at zero, always sees it.
- BUSY | DIRTY: being written back by the thread that evicts it. Readers wait as for a load
  (holding a reference); when the write completes the page becomes "not cached" and they load it
  again, from a store that now has the bytes. So no reader can load a stale copy from the store
  while its newer bytes are still on their way there.

The slot in the high half is written in the same atomic that sets VALID (:func:`publish`), kept
while the page is VALID and while it is BUSY | DIRTY (its write-back reads it from there), and
cleared when the page stops being cached; a reader uses it only while VALID (and pinned), so no
reader can see a state and a slot that do not belong together. Every transition is an atomic on
the whole 64-bit word that leaves the half it does not mean to change as it is.

Replacement is a clock over the slots: the hand advances one slot per probe, and a slot is taken
if it is empty or if its page can go from exactly "VALID in this slot, no references" to "not
cached" in one compare-and-swap, so referenced and busy pages are skipped. The slot word itself
is claimed first (``SLOT_CLAIMED``), so two loaders can never take the same slot. A dirty victim
goes from exactly "VALID | DIRTY in this slot, no references" to "BUSY | DIRTY" instead, and its
slot stays CLAIMED until its write-back ends: then the slot passes to the new page
(:func:`finish_write_back`), or, if the store refused the bytes, the victim keeps its slot, still
dirty (:func:`keep_dirty_victim`): a failed write-back loses nothing.
"""
import numpy as np
from numba import cuda

from kernels import layout as L
from kernels.bulk import bulk_copy_available, bulk_copy_page, early_copy_end, early_copy_start
from kernels.platform import SIMULATOR, device_helper
from kernels.sync import (
    atomic_add,
    atomic_add_relaxed_gpu,
    atomic_add_release_gpu,
    atomic_and,
    atomic_cas,
    atomic_exch,
    atomic_or,
    ld_acquire_gpu,
    ld_pair,
    ld_relaxed_gpu,
    red_add,
    red_add_release_gpu,
)
from kernels.warp import lanemask_lt, popc

PIN_HIT = 0      # pinned: the page is resident
PIN_LOAD = 1     # not resident; the caller now owns BUSY and must load it
PIN_WAIT = 2     # another thread is loading it; the caller holds a reference while it waits
PIN_ERROR = 3    # its last load failed (no reference held)
PIN_RETRY = 4    # its loader gave up; no reference held, try again

#: Slots a loader probes in one round before giving up the round (it retries the next round).
VICTIM_PROBES = 64

# Every constant is a uint64, as the words are: an operand of 32 bits would be zero-extended,
# and a mask of the low half would clear the slot.
_VALID = L.PAGE_VALID
_BUSY = L.PAGE_BUSY
_ERROR = L.PAGE_ERROR
_DIRTY = L.PAGE_DIRTY
_DIRTY_VALID = np.uint64(int(L.PAGE_VALID) | int(L.PAGE_DIRTY))
_DIRTY_BUSY = np.uint64(int(L.PAGE_BUSY) | int(L.PAGE_DIRTY))
_SLOT_SHIFT = L.PAGE_SLOT_SHIFT
_SLOT_MASK = L.PAGE_SLOT_MASK
_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_NOT_BUSY = np.uint64(~int(L.PAGE_BUSY) & 0xFFFFFFFFFFFFFFFF)   # keeps the slot


@cuda.jit(device=True)
def _minus(refs):
    """What, added to a page's word, drops ``refs`` references (a uint64): ``-refs`` modulo
    2**64; a 32-bit operand would carry into the slot. The count is >= ``refs`` whenever they
    are dropped (only their holder drops them), so the subtraction never borrows from the state
    bits or the slot."""
    return (~refs) + _ONE


@cuda.jit(device=True)
def take_reference(h, page, refs):
    """The hit path's pin: ``refs`` references on ``page`` (a relaxed 64-bit atomic add: one for
    a leader that gives the pin back itself, one per lane for a kept pin, see
    :func:`kernels.access.pin_page`), and its slot if it was VALID. Returns ``(old word, slot or
    -1)``. The caller holds the references either way: on a page that was not VALID it must
    settle them (:func:`settle_pin`).

    The slot comes back in the atomic's old value (the word's high half), so a hit waits for one
    L2 round trip before the loads of its bytes, not two (a separate load of the slot after the
    pin was 6 % of the stall samples of the bench's 4 KiB hit requests and 9 % of a sequential
    ``gids.read``). It is the slot of the same moment as the VALID seen
    with it, and the reference now held keeps the page in that slot.

    Relaxed, not acquire: on sm_90 an acquire atomic is followed by an invalidation of the SM's
    whole L1 (``CCTL.IVALL``), 17 % of the stall samples of a sequential ``gids.read``. What the acquire would order, the reads of the slot's bytes, is ordered
    without it: their addresses are computed from the atomic's value (address-dependent), and
    the GPU issues no load before the values it depends on are back; every read of a slot goes
    to L2 (``ld.global.cg``), never to the SM's L1, and the loader fenced its copy into L2
    before it published VALID (:func:`publish`). The atomic is asm with a memory clobber, so
    the compiler keeps the order too (docs/design-notes.md, "The hit path").
    """
    old = atomic_add_relaxed_gpu(h.page_state, page, refs)
    if old & _VALID:
        return old, np.int64(old >> _SLOT_SHIFT)
    return old, np.int64(-1)


@cuda.jit(device=True)
def take_reference_if_resident(h, page, refs):
    """:func:`take_reference` for a caller that will not load the page: its slot if it was
    VALID (the ``refs`` references then held), else -1 with the references given back at once.

    Giving them back needs no order: nothing was read under them, and a page that is not VALID
    has no slot whose bytes they would protect. Meanwhile the page's count was ``refs`` higher
    than its holders', which delays nothing but an evictor's probe of a page that is not
    resident (it looks for VALID pages whose count is zero).
    """
    old, slot = take_reference(h, page, refs)
    if slot < 0:
        drop_references(h, page, refs)
    return slot


@device_helper
def drop_references(h, page, refs):
    """Give back ``refs`` references under which nothing was read (no order needed: a relaxed
    reduction), as :func:`take_reference_if_resident` does."""
    red_add(h.page_state, page, _minus(refs))


@cuda.jit(device=True)
def settle_pin(h, page, old, refs):
    """After :func:`take_reference` found ``page`` not VALID (its state was ``old``): become its
    loader, or wait for it. Returns (PIN_*, slot).

    A waiter keeps the ``refs`` references it took: a page that is referenced cannot be
    evicted, so once its loader publishes it, it stays until every waiter has read it (no
    waiter starves behind evictions, however small the cache).
    """
    if old & _ERROR:
        atomic_add_release_gpu(h.page_state, page, _minus(refs))
        return PIN_ERROR, -1
    if old & _BUSY:
        return PIN_WAIT, -1
    old = atomic_or(h.page_state, page, _BUSY)
    if old & _BUSY:
        return PIN_WAIT, -1
    if old & _VALID:
        # Loaded between our two atomics: give BUSY back; our references pin it in the slot
        # the OR returned.
        atomic_and(h.page_state, page, _NOT_BUSY)
        cuda.threadfence()
        return PIN_HIT, np.int64(old >> _SLOT_SHIFT)
    if old & _ERROR:
        atomic_and(h.page_state, page, _NOT_BUSY)
        atomic_add_release_gpu(h.page_state, page, _minus(refs))
        return PIN_ERROR, -1
    # The loader keeps its references while it loads: once it publishes they are its group's
    # pin (a BUSY page is never evicted, whatever its count), and dropping them here took a
    # release atomic, a fence and a round trip, on every miss.
    return PIN_LOAD, -1


@cuda.jit(device=True)
def try_pin(h, page, refs):
    """Pin ``page`` if resident; else become its loader, or wait for it. Returns (PIN_*, slot)
    (:func:`take_reference`, then :func:`settle_pin` if it was not resident)."""
    old, slot = take_reference(h, page, refs)
    if slot >= 0:
        return PIN_HIT, slot
    return settle_pin(h, page, old, refs)


@device_helper
def check_wait(h, page, refs):
    """For a waiter (holding ``refs`` references): PIN_HIT once VALID, PIN_WAIT while BUSY, else
    they are dropped and PIN_ERROR or PIN_RETRY (the loader gave up) is returned."""
    state = ld_acquire_gpu(h.page_state, page)
    if state & _VALID:
        return PIN_HIT, np.int64(state >> _SLOT_SHIFT)
    if state & _BUSY:
        return PIN_WAIT, -1
    atomic_add_release_gpu(h.page_state, page, _minus(refs))
    if state & _ERROR:
        return PIN_ERROR, -1
    return PIN_RETRY, -1


@device_helper
def unpin(h, page, refs):
    """Drop ``refs`` references. Release: the caller's (and, after a ``syncwarp``, its warp's)
    reads and writes of the slot happen before it, so an evictor that sees the count reach zero
    cannot overwrite bytes still being read. A reduction: the old count is not needed, so the
    thread does not wait for it."""
    red_add_release_gpu(h.page_state, page, _minus(refs))


@device_helper
def unpin_after_reads(h, page, refs, reads_done):
    """Drop ``refs`` references once the values read from the slot are in registers, without a
    fence.

    ``reads_done`` is a value that depends on every value read under the pin (a ballot of the
    warp's values: :func:`kernels.access._access`) and that the compiler cannot know, so the
    reduction's operand, ``-refs + (reads_done & h.zero_word)``, waits for those loads, and the
    reduction cannot issue before they returned; a load that has returned its value cannot see
    a later overwrite of the slot. ``h.zero_word`` is 0 at run time, so the operand is -refs
    (modulo 2**64, the width of the page's word) whatever ``reads_done`` is. :func:`unpin`'s
    release orders every earlier access of the thread instead (``MEMBAR.ALL.GPU`` and a wait for
    it: 26 % of the stall samples of a sequential ``gids.read``, though taking it away gained
    less: the wait moved to the loads); that is needed after writes, and
    where the reads are not known to have returned (``gids.unpin_page``).
    """
    red_add(h.page_state, page, _minus(refs) + np.uint64(reads_done & h.zero_word))


@cuda.jit(device=True)
def claim_slot(h, page):
    """Find a slot for ``page`` (whose BUSY the caller owns).

    Returns ``(slot or -1, clean_victim, dirty_victim)``: ``clean_victim >= 0``, the page
    whose clean bytes the slot still holds (evicted; the host tier may take them before the
    caller's load overwrites them: :func:`kernels.tier.offer_victim`). ``dirty_victim >= 0``: the slot
    holds that page's unwritten bytes; the caller must write them back and then call
    :func:`finish_write_back` (or :func:`keep_dirty_victim` if that failed) before the slot is
    its own. Until then ``slot_page[slot]`` stays CLAIMED. The slot goes into ``page``'s word
    only when the page is published (:func:`publish`).
    """
    n = h.n_slots
    for _ in range(min(n, VICTIM_PROBES)):
        s = atomic_add(h.clock, 0, 1) % n
        # Coherent read: a plain load may keep returning a stale value from this SM's L1,
        # making every compare-and-swap on the slot fail (the loader would starve).
        victim = ld_relaxed_gpu(h.slot_page, s)
        if victim == L.SLOT_CLAIMED:
            continue
        if atomic_cas(h.slot_page, s, victim, L.SLOT_CLAIMED) != victim:
            continue
        evicted = False
        if victim >= 0:
            # Evict only a page that is VALID in this slot with no reference and not BUSY: its
            # word is then exactly the slot and VALID, and becomes 0 (not cached, no slot).
            in_slot = np.uint64(s) << _SLOT_SHIFT
            seen = atomic_cas(h.page_state, victim, in_slot | _VALID, _ZERO)
            if seen == in_slot | _DIRTY_VALID:
                # A dirty one goes to BUSY | DIRTY and keeps its slot in the word while it is
                # written back from it (a Runtime.flush after a failed kernel finds it there).
                if (atomic_cas(h.page_state, victim, in_slot | _DIRTY_VALID, in_slot | _DIRTY_BUSY)
                        == in_slot | _DIRTY_VALID):
                    # Acquire side of the writers' unpin: their stores into the slot are
                    # visible before the caller copies it out.
                    cuda.threadfence()
                    return s, -1, victim   # evicted once its write-back succeeds
            elif seen == in_slot | _VALID:
                evicted = True
            if not evicted:
                atomic_exch(h.slot_page, s, victim)   # keep it; try the next slot
                continue
        atomic_exch(h.slot_page, s, page)
        return s, victim if evicted else -1, -1
    return -1, -1, -1


@cuda.jit(device=True)
def finish_write_back(h, victim, slot, page):
    """The store has the dirty victim's bytes: it is no longer cached, the slot is ``page``'s.

    Its waiters (holding references) find it neither VALID nor BUSY and load it again. Its word
    loses the slot; ``page`` gets it in its own word when it is published (:func:`publish`).
    """
    _update_state(h, victim, _ZERO, _DIRTY_BUSY | _SLOT_MASK, _ZERO)
    atomic_exch(h.slot_page, slot, page)


@cuda.jit(device=True)
def keep_dirty_victim(h, victim, slot):
    """Its write-back failed: the victim stays in its slot, VALID and still DIRTY (its word kept
    the slot through the write-back)."""
    _update_state(h, victim, _VALID, _BUSY, _ZERO)
    atomic_exch(h.slot_page, slot, victim)


@cuda.jit(device=True)
def mark_dirty(h, page):
    """Called by a writer while it holds its pin on ``page`` (so no evictor can miss it)."""
    cuda.threadfence()   # the warp's stores into the slot are visible before DIRTY is
    atomic_or(h.page_state, page, _DIRTY)


@cuda.jit(device=True)
def _update_state(h, page, set_bits, clear_bits, drop_refs):
    """One compare-and-swap loop on the page's whole word: ``clear_bits`` cleared, then
    ``set_bits`` set (so a field, the slot, can be cleared and written in one go), then
    ``drop_refs`` taken from the count (the caller holds them); the bits named in neither are
    kept (uint64 masks)."""
    old = ld_acquire_gpu(h.page_state, page)
    while True:
        new = ((old & ~clear_bits) | set_bits) - drop_refs
        seen = atomic_cas(h.page_state, page, old, new)
        if seen == old:
            return
        old = seen


#: What :func:`publish` adds to a loading page's word: BUSY (bit 30) plus this carries into
#: VALID (bit 31), so BUSY becomes VALID; the slot is added above it.
_BUSY_TO_VALID = np.uint64(int(L.PAGE_VALID) - int(L.PAGE_BUSY))
#: Bits that are 0 in the word of a page being loaded (besides BUSY and the count).
_NOT_WHILE_LOADING = np.uint64(int(L.PAGE_VALID) | int(L.PAGE_ERROR) | int(L.PAGE_DIRTY)
                               | int(L.PAGE_SLOT_MASK))


@device_helper
def _publish_add(slot):
    """What :func:`publish` adds: BUSY to VALID, and the slot."""
    return _BUSY_TO_VALID + (np.uint64(slot) << _SLOT_SHIFT)


if SIMULATOR:
    @cuda.jit(device=True)
    def publish(h, page, slot):
        """As below, with the page word's invariant checked (the simulator has the old word)."""
        old = red_add(h.page_state, page, _publish_add(slot))
        assert (old & _BUSY) != 0 and (old & _NOT_WHILE_LOADING) == 0, \
            f"published page {page} from word {int(old):#x}: not BUSY | count"
else:
    @cuda.jit(device=True)
    def publish(h, page, slot):
        """The page's bytes are in ``slot``: make it VALID in that slot, in one reduction that
        writes both (whoever sees VALID sees the slot). The loader's references, kept since
        :func:`settle_pin`, are now its group's pin.

        While a page is loaded its word is exactly BUSY and a count (:func:`settle_pin` set
        BUSY on a word with no state bits and no slot; until now only counts change), so one
        add of a constant turns it VALID with its slot, whatever the count is meanwhile: no
        load and compare-and-swap loop (two L2 round trips on every miss), and no wait at
        all. The simulator checks the invariant on every publish.

        The caller has fenced after its warp's copy into the slot (:func:`kernels.access._fetch`:
        every lane's ``threadfence`` and a ``syncwarp``; for a page copied in bulk, the loader's
        own copy ended with its lock's release, :mod:`kernels.bulk`), so the copy is visible
        GPU-wide before VALID is: a fence followed by a relaxed reduction is a release.
        """
        red_add(h.page_state, page, _publish_add(slot))


@cuda.jit(device=True)
def abandon(h, page, slot, refs):
    """The load failed: free the slot, mark the page ERROR so that waiters stop, and drop the
    loader's ``refs`` references, in one compare-and-swap."""
    atomic_exch(h.slot_page, slot, L.SLOT_EMPTY)
    _update_state(h, page, _ERROR, _BUSY, refs)


@cuda.jit(device=True)
def give_up_load(h, page, refs):
    """Drop BUSY, and the loader's ``refs`` references, on a page the caller could not load
    within its time (no slot, or the write-back of the slot's dirty page failed)."""
    _update_state(h, page, _ZERO, _BUSY, refs)


@cuda.jit(device=True)
def warp_copy_page(mask, src, src_word, dst, dst_word, n_words):
    """All lanes of ``mask`` copy one page together: each warp load moves contiguous bytes.

    ``src`` is mapped host memory (a staging or zero-copy buffer), so every load is a PCIe read
    of about a microsecond: each lane moves 16 bytes per load and issues eight loads before
    their stores, so that a 4 KiB page is one round of loads for a full warp, and even a lone
    lane keeps 128 bytes in flight. A source at an odd word (a zero-copy array at an 8-byte but
    not 16-byte offset) is copied a word per load. ``n_words`` is even (pages are >= 512 B).
    """
    step = popc(mask)
    me = popc(mask & lanemask_lt())
    if src_word & 1:
        j = me
        while j < n_words:
            dst[dst_word + j] = src[src_word + j]   # weak, as ld_pair
            j += step
        return
    j = 2 * me
    stride = 2 * step
    while j + 7 * stride < n_words:
        a0, a1 = ld_pair(src, src_word + j)
        b0, b1 = ld_pair(src, src_word + j + stride)
        c0, c1 = ld_pair(src, src_word + j + 2 * stride)
        d0, d1 = ld_pair(src, src_word + j + 3 * stride)
        e0, e1 = ld_pair(src, src_word + j + 4 * stride)
        f0, f1 = ld_pair(src, src_word + j + 5 * stride)
        g0, g1 = ld_pair(src, src_word + j + 6 * stride)
        k0, k1 = ld_pair(src, src_word + j + 7 * stride)
        _store_pair(dst, dst_word + j, a0, a1)
        _store_pair(dst, dst_word + j + stride, b0, b1)
        _store_pair(dst, dst_word + j + 2 * stride, c0, c1)
        _store_pair(dst, dst_word + j + 3 * stride, d0, d1)
        _store_pair(dst, dst_word + j + 4 * stride, e0, e1)
        _store_pair(dst, dst_word + j + 5 * stride, f0, f1)
        _store_pair(dst, dst_word + j + 6 * stride, g0, g1)
        _store_pair(dst, dst_word + j + 7 * stride, k0, k1)
        j += 8 * stride
    while j < n_words:
        a0, a1 = ld_pair(src, src_word + j)
        _store_pair(dst, dst_word + j, a0, a1)
        j += stride


if SIMULATOR:
    def copy_in_bulk(h, lanes, src, src_word, slot):
        return False   # the simulator copies with the warp's own loads, as before

    def start_early_copy(h, lanes, src_word):
        return False

    def end_early_copy(h, slot, use):
        return False
else:
    from numba.cuda.extending import overload

    def copy_in_bulk(h, lanes, src, src_word, slot):
        """Copy the page at word ``src_word`` of ``src`` (mapped host memory: a staging page,
        a bounce buffer or a zero-copy store), which the calling lane loaded and whose
        completion it acquired, into cache slot ``slot`` by bulk copy, alone
        (:func:`kernels.bulk.bulk_copy_page`; ``lanes``: its warp's active lanes). True if
        done; False if its warp must copy the page with its own loads (:func:`warp_copy_page`):
        the block's buffer stayed busy, or an address is not 16-byte aligned (a zero-copy
        array at an 8-byte offset).

        Compiled in only where :func:`kernels.bulk.bulk_copy_available` (compute capability
        9.0 and up, ``BULK_COPY_LANES`` > 0); elsewhere (older GPUs; the simulator) it is the
        constant False, chosen when Numba types the call, so that the caller's code is the
        warp copy's alone.
        """
        raise NotImplementedError("device function: call it from a kernel")

    @cuda.jit(device=True)
    def _copy_in_bulk(h, lanes, src, src_word, slot):
        return bulk_copy_page(h, lanes, src, src_word, h.cache_words, slot * h.page_words,
                              h.page_words) != 0

    @cuda.jit(device=True)
    def _no_bulk_copy(h, lanes, src, src_word, slot):
        return False

    @overload(copy_in_bulk, target="cuda")
    def _copy_in_bulk_overload(h, lanes, src, src_word, slot):
        impl = _copy_in_bulk if bulk_copy_available() else _no_bulk_copy
        return lambda h, lanes, src, src_word, slot: impl(h, lanes, src, src_word, slot)

    def start_early_copy(h, lanes, src_word):
        """Start copying the page at word ``src_word`` of the array's zero-copy store
        (``h.zero_copy``) into the block's bulk-copy buffer while its request is still out (``h.early_base`` >= 0: a read-only
        array of a pinned, device-mapped ``MemoryStore``, with no SSD emulation, whose bytes
        are in place before any kernel runs). True if started: the lane holds the buffer, and
        must call :func:`end_early_copy` once the completion has come (or not).

        Why: at one miss at a time the page's trip over PCIe (~2.8 us by bulk copy, ~1 us of
        it the buffer's set-up) came after the I/O's round trip; started with the request, it
        runs during it. The page is still published only after the completion, so a miss is
        as it was but for the time. Compiled in only where the bulk copy is; elsewhere the
        constant False.
        """
        raise NotImplementedError("device function: call it from a kernel")

    def end_early_copy(h, slot, use):
        """Finish an early copy: with ``use`` (the completion came, OK, naming the page's
        zero-copy words) store the page into ``slot``; True if it is there. Without, drop it.
        Either way the buffer is given back (as :func:`copy_in_bulk`'s)."""
        raise NotImplementedError("device function: call it from a kernel")

    @cuda.jit(device=True)
    def _start_early_copy(h, lanes, src_word):
        return early_copy_start(h, lanes, src_word, h.page_words)

    @cuda.jit(device=True)
    def _end_early_copy(h, slot, use):
        return early_copy_end(h, slot * h.page_words, h.page_words, use) != 0

    @cuda.jit(device=True)
    def _no_early_copy(h, a, b):
        return False

    @overload(start_early_copy, target="cuda")
    def _start_early_copy_overload(h, lanes, src_word):
        impl = _start_early_copy if bulk_copy_available() else _no_early_copy
        return lambda h, lanes, src_word: impl(h, lanes, src_word)

    @overload(end_early_copy, target="cuda")
    def _end_early_copy_overload(h, slot, use):
        impl = _end_early_copy if bulk_copy_available() else _no_early_copy
        return lambda h, slot, use: impl(h, slot, use)


@device_helper
def _store_pair(dst, word, lo, hi):
    dst[word] = lo
    dst[word + 1] = hi


@cuda.jit(device=True)
def warp_copy_out(mask, src, src_word, dst, dst_word, n_words):
    """All lanes of ``mask`` copy a cache slot (device memory) into a staging page (mapped host
    memory), for the write-back of a dirty page.

    Not :func:`warp_copy_page`: its pair loads are weak and pure (the compiler may move them),
    which is right after the acquire of a completion from the host, but here the slot was
    written by other SMs, and the copy must not move above the fence that follows the victim's
    CAS, nor hit stale lines in this SM's L1. ``ld.relaxed.gpu`` (side-effecting asm, served
    from L2) does neither; device memory is near, so four loads in flight a lane suffice. The
    stores go to host memory; the caller fences (system scope) before publishing the request.
    """
    step = popc(mask)
    j = popc(mask & lanemask_lt())
    while j + 3 * step < n_words:
        a = ld_relaxed_gpu(src, src_word + j)
        b = ld_relaxed_gpu(src, src_word + j + step)
        c = ld_relaxed_gpu(src, src_word + j + 2 * step)
        d = ld_relaxed_gpu(src, src_word + j + 3 * step)
        dst[dst_word + j] = a
        dst[dst_word + j + step] = b
        dst[dst_word + j + 2 * step] = c
        dst[dst_word + j + 3 * step] = d
        j += 4 * step
    while j < n_words:
        dst[dst_word + j] = ld_relaxed_gpu(src, src_word + j)
        j += step
