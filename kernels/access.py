"""``read(h, i)`` and ``write(h, i, value)``: element ``i`` of a file-backed array, through the
page cache, from any kernel.

Both are one loop (:func:`_access`) that runs in rounds until every lane of the calling warp has
pinned its page and used it. In each round:

1. one leader per distinct page (``match_any_sync``) tries to pin its page. Hits are used at
   once (read, or written and marked DIRTY) and unpinned. A leader whose page another thread is
   loading keeps a reference while it waits, so the page stays until it has been used. If
   every lane's leader pinned in round 1 (all hits), the call ends there: that is the hit
   path, and it does no more than that (see :func:`_access`);
2. leaders that won a miss claim a cache slot. A slot whose page is dirty is first written back:
   the warp copies it into queue staging pages and sends WRITE requests, to the host daemon or
   as NVMe Write commands (:func:`_write_back`);
3. the loaders take queue tickets (one atomic per warp), submit their READ requests, wait for the
   completions (host queues or NVMe rings: :mod:`kernels.backend`), and the whole warp copies
   each page that arrived into its slot, 16 contiguous bytes a lane per load (:func:`_fetch`);
4. the loaders publish their pages VALID (keeping a pin), their lanes use them, the loaders unpin;
5. lanes whose page another warp is loading back off and look again in the next round.

A write is a read of the page (loaded on a miss, so the bytes around the element are the
store's) followed by one typed store of the element into the slot: threads writing distinct
elements of one page, even bytes of one 8-byte word, never undo each other's writes, since no
thread reads and rewrites a word it does not own. Two threads writing the same element in one
kernel leave one of the two values (which one is not defined), as for any GPU array.

References are held only on the page a lane itself waits for or uses, never on another page
across a wait (except by :func:`pin_page` on several pages at once: see there), and the waits (for the host, for lower queue tickets, for a page's loader or its
write-back) all end without help from the waiting warp: every request finishes, so no set of
warps can deadlock.

Every wait is bounded by ``h.timeout_ns``. An out-of-range index, an I/O error, a write to a
read-only array or a timeout is recorded in ``h.err`` (the Runtime raises it after the kernel)
and the lane returns 0 (or writes nothing); an out-of-range index never touches memory.
"""
import numpy as np
from numba import cuda

from kernels import layout as L
from kernels.backend import io_submit, io_wait
from kernels.cache import (
    PIN_ERROR,
    PIN_HIT,
    PIN_LOAD,
    PIN_WAIT,
    abandon,
    check_wait,
    claim_slot,
    copy_in_bulk,
    end_early_copy,
    finish_write_back,
    give_up_load,
    keep_dirty_victim,
    mark_dirty,
    publish,
    settle_pin,
    start_early_copy,
    take_reference,
    take_reference_if_resident,
    try_pin,
    unpin,
    unpin_after_reads,
    warp_copy_out,
    warp_copy_page,
)
from kernels.platform import BULK_COPY_LANES, out_of_line
from kernels.queue import (
    expired,
    hand_on_entry,
    queue_of_warp,
    release_entry,
    staging_word,
    take_tickets,
    wait_turn,
)
from kernels.sync import atomic_cas, ld_pair_l2, ld_weak_l2, now_ns, red_add, zero_of
from kernels.tier import (
    copy_from_tier,
    forget_tier_page,
    offer_victim,
    read_direct,
    tier_slot_for_pin,
    tier_slot_of,
    use_direct,
)
from kernels.warp import (
    activemask,
    ballot_sync,
    laneid,
    lowest_lane,
    match_any_sync,
    nanosleep,
    popc,
    shfl_sync,
    syncwarp,
)

#: References a leader takes for its group when it gives the pin back itself (read, write).
_ONE_REF = np.uint64(1)

#: ``keep`` of :func:`_access` for :func:`pin_page_or_tier`: keep a pin, or, where the page is
#: not in the GPU cache but in the host tier of a direct-mode array, hand out its place there
#: (read, write and pin_page pass a bool).
PIN_OR_TIER = 2

#: Sleep between rounds for a lane waiting on another warp's load (doubles up to the max).
WAIT_MIN_NS = 128
WAIT_MAX_NS = 4096


@cuda.jit(device=True)
def record_error_of(h, array_id, code, page, detail):
    """Keep the first error of the kernel; later ones are dropped (one is enough to raise)."""
    if atomic_cas(h.err, L.ERR_CODE, L.ERR_NONE, -1) == L.ERR_NONE:
        h.err[L.ERR_ARRAY] = array_id
        h.err[L.ERR_PAGE] = page
        h.err[L.ERR_DETAIL] = detail
        cuda.threadfence()
        h.err[L.ERR_CODE] = code


@cuda.jit(device=True)
def record_error(h, code, page, detail):
    """:func:`record_error_of` the handle's own array."""
    record_error_of(h, h.array_id, code, page, detail)


@cuda.jit(device=True)
def _add_stat(h, stat, n):
    """Add ``n`` to counter ``stat`` of this block's shard: a reduction (``red``), so the
    thread does not wait for the counter's old value (no one reads it before the kernel ends)."""
    shard = cuda.blockIdx.x % L.N_STAT_SHARDS
    red_add(h.stats, shard * L.N_STATS + stat, n)


@cuda.jit(device=True)
def _count(h, mask, stat, predicate):
    """Add the number of lanes of ``mask`` where ``predicate`` holds to one counter (one
    ballot, and one reduction if the number is not 0)."""
    n = popc(ballot_sync(mask, predicate))
    if n != 0 and laneid() == lowest_lane(mask):
        _add_stat(h, stat, n)


@cuda.jit(device=True)
def array_of_page(h, gpage):
    """The array id whose pages hold global page ``gpage`` (binary search of ``page_bases``,
    ascending; unused rows hold the largest int64)."""
    lo = 0
    hi = h.page_bases.size - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if h.page_bases[mid] <= gpage:
            lo = mid
        else:
            hi = mid - 1
    return lo


#: What a leader broadcasts in :func:`_use_pinned` when it holds no pin (a slot is >= 0).
NOT_PINNED = -1     # its group goes on to the next round
FAILED = -2         # its page cannot be had (the error is recorded): its group is done


@cuda.jit(device=True)
def _refs(peers, keep):
    """References a leader takes for its group of lanes (``peers``): one, given back by the
    leader after the group's reads; for a pin the caller keeps (:func:`pin_page`), one per lane,
    each given back by its own lane (:func:`unpin_page`), whichever lanes are converged then."""
    if keep:
        return np.uint64(popc(peers))
    return _ONE_REF


@cuda.jit(device=True)
def _index_in_cache(h, slot, i):
    """Where element ``i`` lies in ``h.cache`` while its page is in ``slot``."""
    return (np.int64(slot) << h.elem_shift) + (i & ((1 << h.elem_shift) - 1))


@cuda.jit(device=True)
def _use_pinned(h, mask, leader, pinned, failed, slot, i, value, at, done, is_write, new_value,
                keep):
    """Lanes whose leader holds a pin read (or write) their element in the slot, or, to
    ``keep`` the pin (:func:`pin_page`), take its index in the cache as ``at``; lanes whose
    leader ``failed`` are done (collective). Returns ``(value, at, done, code)``, ``code`` the
    leader's slot, :data:`NOT_PINNED` or :data:`FAILED`. The leaders give their pins back
    after it (:func:`_unpin_used`).

    One 32-bit shuffle carries both the slot and the failure (slots fit in 31 bits: 2**31
    pages of 512 bytes are a TiB of GPU memory).
    """
    code = shfl_sync(mask, np.int32(slot if pinned else (FAILED if failed != 0 else NOT_PINNED)),
                     leader)
    if not done and code == FAILED:
        done = True
    if not done and code >= 0:
        k = _index_in_cache(h, code, i)
        if keep:
            at = k
        elif is_write:
            # One typed store of this lane's own element: never a read-modify-write of a
            # word that another lane's element shares.
            h.cache[k] = new_value
            # Visible GPU-wide before the leader marks the page DIRTY and unpins (the same
            # rule as for the lanes' share of a page copy).
            cuda.threadfence()
        else:
            # Weak, served by L2 (the slot may have held another page in this SM's L1).
            value = ld_weak_l2(h.cache, k)
        done = True
    return value, at, done, code


@cuda.jit(device=True)
def _unpin_used(h, mask, gpage, pinned, is_write, keep, value):
    """The leaders' unpin after their groups used their slots (collective; nothing for a
    ``keep``). A write marks the page DIRTY first, after a ``syncwarp`` (every lane's store and
    fence come first) and with a release (:func:`~kernels.cache.unpin`). After reads, a ballot
    of the values read (which waits for every lane's load) is all the ordering the unpin needs
    (:func:`~kernels.cache.unpin_after_reads`): no fence on the hit path.
    """
    if keep:
        return
    if is_write:
        syncwarp(mask)
        if pinned:
            mark_dirty(h, gpage)
            unpin(h, gpage, _ONE_REF)
        return
    reads_done = ballot_sync(mask, value == zero_of(h.cache))
    if pinned:
        unpin_after_reads(h, gpage, _ONE_REF, reads_done)


@cuda.jit(device=True)
def _write_back(h, mask, q, victim, slot, deadline):
    """Lanes with a dirty ``victim`` (global page >= 0, held BUSY | DIRTY in ``slot``) write it
    back to its store (collective). Returns True once the store has the bytes.

    The whole warp copies each victim's slot into the staging page of the lane's ticket; every
    lane fences (system scope) so that the host sees the bytes before the request. The request
    is the back end's (:mod:`kernels.backend`): an ``OP_WRITE`` record to the host daemon, or an
    NVMe Write command whose PRP1 is that staging page (the command slot's bounce buffer). An
    error (the store refused the page, or a timeout) is recorded against the victim's own array
    and page.
    """
    want = victim >= 0
    array_id = 0
    vpage = 0
    if want:
        array_id = array_of_page(h, victim)
        vpage = victim - h.page_bases[array_id]
    ticket = take_tickets(h, q, mask, want)
    # The ticket's staging page is ours only once the entry's previous ticket is done with it
    # (its page copied out, or its write taken): wait for the entry's turn *before* copying into
    # it. Copying first overwrote pages still in flight (a read's data landing on the victim's
    # bytes, or the victim's on the read's), so write-backs stored wrong bytes with shallow
    # queues. A warp's tickets are consecutive and depth >= warp size: no lane waits on another.
    ready = False
    if ticket >= 0:
        ready = wait_turn(h, q, ticket, deadline)
        if not ready:
            record_error_of(h, array_id, L.ERR_TIMEOUT_QUEUE, vpage, ticket)
    # The evicting lanes fenced after winning their victims (claim_slot); the barrier orders
    # that before every lane's share of the copy (shuffles and ballots do not order memory).
    syncwarp(mask)
    to_copy = ballot_sync(mask, ready)
    while to_copy != 0:
        src_lane = lowest_lane(to_copy)
        src_slot = shfl_sync(mask, slot, src_lane)
        dst_word = shfl_sync(mask, staging_word(h, q, ticket), src_lane)
        warp_copy_out(mask, h.cache_words, src_slot * h.page_words, h.staging, dst_word,
                      h.page_words)
        to_copy &= to_copy - 1
    # Every lane's share of the copies reaches host memory before any lane publishes a request
    # (the SQ record's sequence word, or the NVMe SQE's mark that the doorbell then covers):
    # the fence orders this lane's stores, the barrier orders all lanes' fences before the
    # submitting lanes' release stores.
    cuda.threadfence_system()
    syncwarp(mask)
    # Its turn is already here: submit only checks it again (and, for NVMe, SQ space).
    submitted = io_submit(h, mask, q, ticket, ready, array_id, vpage, L.OP_WRITE, deadline)
    if ready and not submitted:
        record_error_of(h, array_id, L.ERR_TIMEOUT_QUEUE, vpage, ticket)
    completed, status, _ = io_wait(h, mask, laneid(), q, ticket, submitted, deadline, now_ns())
    ok = False
    if submitted:
        if not completed:
            record_error_of(h, array_id, L.ERR_TIMEOUT_IO, vpage, ticket)
        else:
            release_entry(h, q, ticket)
            ok = status == L.STATUS_OK
            if not ok:
                record_error_of(h, array_id, L.ERR_WRITE_IO, vpage, status)
    return ok


@cuda.jit(device=True)
def _fetch(h, mask, lane, q, want, page, slot, deadline):
    """Lanes with ``want`` read their ``page`` from the store into ``slot`` (collective).

    Returns ``(asked, completed, status)``: ``asked`` once the lane had a ticket; ``completed``
    once the host answered (the entry is handed on); ``status`` the host's answer. A lane that
    asked and got no answer has recorded a timeout.
    """
    completed = False
    status = 0
    source = 0
    ticket = take_tickets(h, q, mask, want)
    asked_at = now_ns()
    # The back end's two steps (host queues or NVMe rings), chosen by the handle's type at
    # compile time: kernels/backend.py.
    submitted = io_submit(h, mask, q, ticket, True, h.array_id, page, L.OP_READ, deadline)
    if ticket >= 0 and not submitted:
        record_error(h, L.ERR_TIMEOUT_QUEUE, page, ticket)
    submitted_at = now_ns()
    lanes = popc(mask)
    early = False
    early_word = h.early_base + page * h.page_words   # the page's words in h.zero_copy
    if submitted:
        _add_stat(h, L.STAT_SUBMIT_NS, submitted_at - asked_at)
        # A page that is in place in host memory already starts its way into the block's
        # bulk-copy buffer now, during the I/O's round trip (kernels/cache.py).
        if h.early_base >= 0 and lanes <= BULK_COPY_LANES:
            early = start_early_copy(h, lanes, early_word)
    completed, status, source = io_wait(h, mask, lane, q, ticket, submitted, deadline,
                                        submitted_at)
    if submitted and not completed:
        record_error(h, L.ERR_TIMEOUT_IO, page, ticket)
    answered_at = now_ns()
    if completed:
        _add_stat(h, L.STAT_IO_NS, answered_at - asked_at)
    # In a warp of at most BULK_COPY_LANES lanes, each loader whose page arrived (its own
    # acquire saw the completion, in io_wait) copies it into its slot alone by bulk copy, where
    # that is compiled in (cc >= 9.0: kernels/bulk.py); the warp copies the rest with its own
    # loads (elsewhere: all of them, copy_in_bulk being the constant False).
    arrived = completed and status == L.STATUS_OK
    bulk = False
    if early:
        # Used only if the daemon named the words it was copied from; else dropped.
        bulk = end_early_copy(h, slot, arrived and source == early_word)
        if bulk:
            _add_stat(h, L.STAT_EARLY_COPIES, 1)
    if arrived and not bulk and lanes <= BULK_COPY_LANES:
        src = h.staging
        src_word = staging_word(h, q, ticket)
        if source != L.SOURCE_STAGING:
            src = h.zero_copy
            src_word = source
        bulk = copy_in_bulk(h, lanes, src, src_word, slot)
    if bulk:
        _add_stat(h, L.STAT_BULK_COPIES, 1)
    warp_copied = ballot_sync(mask, arrived and not bulk)
    to_copy = warp_copied
    while to_copy != 0:
        src_lane = lowest_lane(to_copy)
        src_source = shfl_sync(mask, source, src_lane)
        src_slot = shfl_sync(mask, slot, src_lane)
        if src_source == L.SOURCE_STAGING:
            src_word = shfl_sync(mask, staging_word(h, q, ticket), src_lane)
            warp_copy_page(mask, h.staging, src_word, h.cache_words,
                           src_slot * h.page_words, h.page_words)
        else:
            warp_copy_page(mask, h.zero_copy, src_source, h.cache_words,
                           src_slot * h.page_words, h.page_words)
        to_copy &= to_copy - 1
    # Each lane's share of the warp's copies must be visible GPU-wide before a loader
    # publishes VALID (syncwarp alone orders memory only within the warp). A page copied in
    # bulk was copied by its loader alone, which ended the copy with a release (the buffer
    # lock's, after the proxy fence: kernels/bulk.py), so where every page went in bulk (a
    # lone lane's miss) no lane has anything more to fence: one fence.sc.gpu fewer per miss.
    if warp_copied != 0:
        cuda.threadfence()
    syncwarp(mask)
    if completed:
        _add_stat(h, L.STAT_COPY_NS, now_ns() - answered_at)
        if warp_copied != 0:
            release_entry(h, q, ticket)
        else:
            # No lane read a staging page but by bulk copy, each its own, and each such copy
            # ended with the lock's release: that fence orders the reads before this store.
            hand_on_entry(h, q, ticket)
    return ticket >= 0, completed, status


@cuda.jit(device=True)
def _access(h, i, is_write, new_value, keep):
    """The hit path behind :func:`read`, :func:`write` and :func:`pin_page`: round 1 of the
    module docstring's loop; a warp that does not find all its pages resident goes on in
    :func:`_access_slow`, out of line.

    Per warp on a hit: one ``match_any_sync``, per leader one relaxed atomic (the pin:
    :func:`~kernels.cache.take_reference`, whose old value holds the page's slot), one shuffle of
    the slot, each lane's load (or store) of its element, one ballot of the values read, per leader
    one reduction (the unpin: :func:`~kernels.cache.unpin_after_reads`), then the hit count: a
    warp whose lanes all want one page knows it without a ballot (its one leader hit), any other
    warp takes one ballot to see that all its leaders hit and one to count them; one lane adds
    the count to the block's counter (a reduction). No fence and no wait on an atomic's result
    but the pin's. A write fences its store and unpins with a release (it marks the page DIRTY).

    ``is_write`` and ``keep`` are constants at each call site (read, write and pin_page are
    short wrappers), so the compiler folds the other branches away here; the slow path, a call,
    takes them as values.
    Returns ``(value, at)``: the element's value for a read (0 for a write, a pin or on an
    error), and for ``keep`` the element's index in ``h.cache`` with its page left pinned (-1
    on an error).
    """
    mask = activemask()
    lane = laneid()
    in_range = i >= 0 and i < h.n_elems
    if not in_range:
        record_error(h, L.ERR_INDEX, -1, i)
        i = 0
    gpage = h.page_base + (i >> h.elem_shift)
    peers = match_any_sync(mask, gpage if in_range else -1)
    leader = lowest_lane(peers)
    is_leader = lane == leader and in_range
    # Every wait of this call ends by the deadline. Counted from the call's start, not from the
    # start of the slow path: warps' deadlines then keep their start order, so the first to
    # time out is the first to have asked (tests name that error), and the timer read is one
    # CS2R, off the critical path.
    deadline = now_ns() + h.timeout_ns

    # The leaders take a reference on their pages (kept, and settled by the slow path, where
    # the page is not resident); groups whose leader found its page resident use it.
    old = np.uint64(0)   # the page's word before the pin (kernels.cache.take_reference)
    slot = np.int64(-1)
    if is_leader:
        old, slot = take_reference(h, gpage, _refs(peers, keep))
    pinned = slot >= 0
    value, at, done, code = _use_pinned(h, mask, leader, pinned, 0, slot, i, zero_of(h.cache),
                                        np.int64(-1), not in_range, is_write, new_value, keep)
    _unpin_used(h, mask, gpage, pinned, is_write, keep, value)
    # The call ends here if every lane in range had its leader's pin. When the whole warp
    # wants one page (``peers == mask``: the common sequential case), every lane got the same
    # ``code``, so the answer and the count (one hit) need no ballot.
    if peers == mask:
        if code >= 0 or not in_range:
            if is_leader:
                _add_stat(h, L.STAT_HITS, 1)
            return value, at
    elif ballot_sync(mask, in_range and code < 0) == 0:
        _count(h, mask, L.STAT_HITS, is_leader)
        return value, at
    if np.int64(keep) == PIN_OR_TIER and h.tier_mode == L.TIER_DIRECT:
        # pin_page_or_tier: where every page the warp did not find resident is in the tier,
        # its lanes take their places there now, without the slow path's call (a traversal
        # over a tier meets such pages on most of its lookups). Folded away for the others.
        ask = is_leader and not pinned
        tier_at = tier_slot_for_pin(h, gpage) if ask else np.int64(L.TIER_NO_SLOT)
        if ballot_sync(mask, ask and tier_at < 0) == 0:
            value, at, done, direct = use_direct(h, mask, leader, tier_at, gpage, i,
                                                 _refs(peers, keep), value, at, done, keep)
            _count(h, mask, L.STAT_HITS, is_leader and pinned)
            _count(h, mask, L.STAT_TIER_DIRECT, is_leader and direct)
            return value, at
    return _access_slow(h, mask, i, in_range, gpage, peers, is_write, new_value, keep, value,
                        at, done, old, pinned, deadline)


@out_of_line
def _access_slow(h, mask, i, in_range, gpage, peers, is_write, new_value, keep, value, at, done,
                 old, hit, deadline):
    """Rounds 2 on of the module docstring's loop, for a warp some of whose lanes' pages were
    not resident in :func:`_access` (collective over ``mask``, the lanes that matched their
    pages there). A leader that found its page not resident (``old``, its state then) still
    holds the reference it took; a leader that ``hit`` is done, as are its lanes.

    ``mask`` is passed, not taken again with ``activemask``: lanes converged at the match need
    not be converged at the call (CUDA promises convergence only at the synchronising
    intrinsics), and a smaller mask here could leave out a lane's leader. Its lanes would then
    shuffle their slot from a lane outside the mask (undefined: a stale slot, read and later
    unpinned without a reference) or spin for good (only leaders count down a deadline).

    Compiled as a call (:func:`~kernels.platform.out_of_line`), so that its registers and
    spills stay out of the hit path. Returns ``(value, at)`` as :func:`_access`.
    """
    lane = laneid()
    page = gpage - h.page_base
    leader = lowest_lane(peers)
    is_leader = lane == leader and in_range
    refs = _refs(peers, keep)   # what the leader's pin holds (round 1 took them)

    failed = 0              # leader only: 1 once the page cannot be had (the error is recorded)
    loading = False         # leader only: owns BUSY on the page
    waiting = False         # leader only: holds a reference on a page another thread loads
    slot = np.int64(-1)
    first_round = True
    loaded = False
    evicted = False
    wrote_back = False
    wait_code = L.ERR_TIMEOUT_LOADER
    pause = WAIT_MIN_NS
    rounds = 0
    tiered = h.tier_mode != L.TIER_NONE   # the Runtime has a host tier (kernels/tier.py)
    from_tier = False       # leader only: loaded its page from the host tier
    direct = False          # leader only: its lanes read their elements from the host tier

    # ``np.int64(keep) == PIN_OR_TIER`` folds to False where ``keep`` is a bool (read, write,
    # pin_page): their code is what it was without the tier-or-pin case.
    if (h.tier_mode == L.TIER_DIRECT and not is_write
            and (not keep or np.int64(keep) == PIN_OR_TIER)):
        value, at, done, direct = read_direct(h, mask, leader,
                                              is_leader and not hit and not done, gpage, i,
                                              refs, value, at, done, keep)

    while True:
        # 1. pin and use the hits, or become the loader
        pinned = False
        # Not once failed: a leader whose wait expired at the end of the last round gave back
        # its BUSY or reference there (its group learns of it in this round's shuffle);
        # pinning again here took a new reference (or BUSY) that nobody released.
        if is_leader and not done and not loading and failed == 0:
            if first_round:
                outcome, slot = settle_pin(h, gpage, old, refs)   # taken in round 1
            elif waiting:
                outcome, slot = check_wait(h, gpage, refs)
            else:
                outcome, slot = try_pin(h, gpage, refs)
            waiting = outcome == PIN_WAIT
            if outcome == PIN_HIT:
                pinned = True
                hit = first_round
            elif outcome == PIN_LOAD:
                loading = True
            elif outcome == PIN_ERROR:
                record_error(h, L.ERR_IO, page, 0)
                failed = 1
        value, at, done, code = _use_pinned(h, mask, leader, pinned, failed, slot, i, value, at,
                                            done, is_write, new_value, keep)
        _unpin_used(h, mask, gpage, pinned, is_write, keep, value)
        first_round = False

        if ballot_sync(mask, loading) != 0:
            # 2. loaders: a slot, and the write-back of a dirty page that held it
            q = queue_of_warp(h)
            victim = -1
            clean_victim = -1
            if loading:
                claim_start = now_ns()
                slot, clean_victim, victim = claim_slot(h, gpage)
                _add_stat(h, L.STAT_CLAIM_NS, now_ns() - claim_start)
                evicted = evicted or clean_victim >= 0
                if slot < 0:
                    wait_code = L.ERR_TIMEOUT_SLOT
                    _add_stat(h, L.STAT_SLOT_RETRIES, 1)
            if h.tier_victims != 0:
                # Before the load overwrites them: the clean victim's bytes into the host tier.
                offer_victim(h, mask, clean_victim, slot)
            if ballot_sync(mask, victim >= 0) != 0:
                ok = _write_back(h, mask, q, victim, slot, deadline)
                if victim >= 0:
                    if ok:
                        if tiered:
                            forget_tier_page(h, victim)
                        finish_write_back(h, victim, slot, gpage)
                        wrote_back = True
                        evicted = True
                    else:
                        keep_dirty_victim(h, victim, slot)
                        give_up_load(h, gpage, refs)
                        loading = False
                        slot = -1
                        failed = 1
            # 3. the request, the completion, the copy into the slot; or the copy from the
            # host tier, where the page is there (no request)
            tier_at = np.int64(L.TIER_NO_SLOT)
            if tiered and loading and slot >= 0:
                tier_at = tier_slot_of(h, gpage)
            asked, completed, status = _fetch(h, mask, lane, q,
                                              loading and slot >= 0 and tier_at < 0, page,
                                              slot, deadline)
            if tiered:
                copy_from_tier(h, mask, tier_at, slot)
                if tier_at >= 0:
                    completed = True
                    status = L.STATUS_OK
                    from_tier = True
            if asked and not completed:
                # The entry may never be answered now; the Runtime resets the queues.
                abandon(h, gpage, slot, refs)
                loading = False
                failed = 1
            # 4. publish (keeping a pin), use, unpin. A failure of this round reaches the
            # group in the same shuffle as the slot.
            pinned = False
            if completed:
                loading = False
                if status == L.STATUS_OK:
                    publish(h, gpage, slot)
                    pinned = True
                    loaded = not from_tier
                else:
                    record_error(h, L.ERR_IO, page, status)
                    abandon(h, gpage, slot, refs)
                    failed = 1
            value, at, done, code = _use_pinned(h, mask, leader, pinned, failed, slot, i, value,
                                                at, done, is_write, new_value, keep)
            _unpin_used(h, mask, gpage, pinned, is_write, keep, value)

        # 5. lanes still waiting back off within their deadline, or give up. A leader that
        # failed in this round has told its group in the shuffle above (they are done), so
        # only a leader still waiting, and its lanes, get here.
        rounds += 1
        if not done and is_leader:
            if expired(h, deadline, rounds):
                record_error(h, wait_code, page, -1)
                if loading:
                    give_up_load(h, gpage, refs)
                    loading = False
                if waiting:
                    unpin(h, gpage, refs)
                    waiting = False
                failed = 1
            else:
                nanosleep(pause)
                pause = min(pause * 2, WAIT_MAX_NS)
        elif not done and now_ns() > deadline + 2 * h.timeout_ns:
            # A leader answers its group in the round that passes its deadline (a round's own
            # waits end within a timeout of it), in a shuffle: a lane still without an answer
            # two timeouts later has no leader among these lanes. It stops, with an error,
            # instead of spinning for good.
            record_error(h, L.ERR_TIMEOUT_LOADER, page, L.DETAIL_NO_LEADER)
            done = True
        if ballot_sync(mask, not done) == 0:
            break

    _count(h, mask, L.STAT_HITS, is_leader and hit)
    _count(h, mask, L.STAT_MISSES, is_leader and not hit and not direct)
    _count(h, mask, L.STAT_IOS, loaded)
    _count(h, mask, L.STAT_EVICTIONS, evicted)
    _count(h, mask, L.STAT_WRITEBACKS, wrote_back)
    if tiered:
        _count(h, mask, L.STAT_TIER_HITS, from_tier)
        _count(h, mask, L.STAT_TIER_DIRECT, direct)
    if is_leader and not hit and not direct:
        # From the call's start (``deadline`` was set then): round 1 and the slow path.
        _add_stat(h, L.STAT_MISS_NS, now_ns() - (deadline - h.timeout_ns))
    return value, at


@cuda.jit(device=True)
def read(h, i):
    """Element ``i`` of the array whose device handle is ``h``.

    Call it from a kernel like an array access; every thread may pass a different index.
    Threads of a warp that want the same page share one lookup and one I/O. A kernel reads its
    own writes, and those of earlier kernels, whether or not they were written back yet.
    """
    return _access(h, i, False, zero_of(h.cache), False)[0]


@cuda.jit(device=True)
def write(h, i, value):
    """Store ``value`` (cast to the array's dtype) as element ``i`` of the array ``h``.

    The page is loaded on a miss, the element stored into its cache slot and the page marked
    DIRTY; the store gets it when the page is evicted, at ``Runtime.flush()`` or when the Runtime
    closes. The array must have been opened with ``mode="r+"``: otherwise nothing is written and
    ``Runtime.sync()`` raises :class:`~gids.errors.ReadOnlyError`.
    """
    if h.writable == 0:
        record_error(h, L.ERR_READ_ONLY, -1, i)
        return
    _access(h, i, True, value, False)


# ---------------------------------------------------------------------------- page-level reads
#
# For a warp that reads much of a page: one lookup for the page, then plain loads, where
# ``read`` makes one lookup per call (at most 32 elements). BaM's ``bam_ptr`` does the same.


@cuda.jit(device=True)
def pin_page(h, i):
    """Pin the page that holds element ``i`` and return ``k``, the index of element ``i`` in
    ``h.cache``: the page's elements from ``i`` on are ``k .. k + page_room(h, i) - 1``; read
    them with :func:`pinned`, then give the pin back with ``unpin_page(h, i, k)``.

    Collective over the calling warp, like :func:`read`: lanes that name the same page share one
    lookup and one load on a miss; the pin holds one reference per lane (taken in the lookup's
    one atomic), so that the lanes may give it back in whatever parts the warp is in by then
    (:func:`unpin_page`). Returns -1 for a lane whose page could not be had (an
    index out of range, an I/O error, a timeout: recorded, and raised after the kernel) and which
    holds no pin.

    Notes
    -----
    A pinned page stays in its slot until unpinned, so a warp should hold few pins at once and
    only briefly. Lanes that pin several pages in one call may hold some pins while the others
    load: with a cache too small for every warp's pins at once, loaders find no slot and the
    kernel ends with :class:`~gids.errors.CacheExhaustedError` (bounded by the timeout, never a
    hang). Pinning one page per call (all lanes the same page) never holds a pin while waiting.
    """
    return _access(h, i, False, zero_of(h.cache), True)[1]


@cuda.jit(device=True)
def pin_page_if_resident(h, i):
    """:func:`pin_page` where the page is already in the cache; -1 where it is not, with nothing
    held, loaded or recorded.

    The hit path of :func:`pin_page` alone (one ``match_any_sync``, one relaxed atomic per
    page), with no call: a kernel made of it and the other page-level functions compiles to
    straight-line code, where every call site of :func:`pin_page`'s miss path (a real call)
    makes the compiler keep the caller's live values in the few registers a call preserves, or
    spill them (see :func:`kernels.platform.register_copy`). For a kernel that expects hits (a
    cache that holds every page it reads) and has somewhere to put the work a miss would hold up
    until it can be done with :func:`pin_page`: the BFS's top-down step sets such a list aside
    for a second launch (``workloads/graph/gpu_bfs.py``).

    Collective over the calling warp, as :func:`pin_page`. A lane that gets ``k >= 0`` holds a
    pin and gives it back with :func:`unpin_page` or :func:`unpin_page_after`; a lane that gets
    -1 holds none (its page is not resident, is being loaded, or ``i`` is out of range: a
    :func:`pin_page` of it then loads it, waits, or records the error). Counts a hit per page
    pinned, nothing for the others (their :func:`pin_page` counts).
    """
    mask = activemask()
    in_range = i >= 0 and i < h.n_elems
    gpage = h.page_base + (i >> h.elem_shift)
    peers = match_any_sync(mask, gpage if in_range else -1)
    leader = lowest_lane(peers)
    slot = np.int64(-1)
    if laneid() == leader and in_range:
        slot = take_reference_if_resident(h, gpage, _refs(peers, True))
        if slot >= 0:
            _add_stat(h, L.STAT_HITS, 1)
    code = shfl_sync(mask, np.int32(slot), leader)
    if code < 0 or not in_range:
        return np.int64(-1)
    return _index_in_cache(h, code, i)


@cuda.jit(device=True)
def pin_page_or_tier(h, i):
    """:func:`pin_page`, except that where the array's host tier is in direct mode and the page
    is in the tier but not in the GPU cache, the page takes no GPU slot: ``k`` is then the
    element's place in the tier (``k >= h.cache.size``) and nothing is pinned. Read with
    :func:`pinned_or_tier`, give back with :func:`unpin_page_or_tier` (or
    :func:`unpin_page_after_or_tier`), which know the two kinds of ``k`` apart.

    For kernels that scan pages once (a BFS's neighbour lists): the pages they find in the GPU
    cache (held there, say: ``Runtime.hold``) are read from HBM, every other page in place over
    PCIe, and none evicts another; pages outside the tier load as for :func:`pin_page`. Without a
    direct-mode tier it is :func:`pin_page`. Collective, as :func:`pin_page`. A warp whose pages
    are all resident or in the tier makes no call (the tier is looked up inline); only one
    with a page that must load takes the miss path.
    """
    return _access(h, i, False, zero_of(h.cache), PIN_OR_TIER)[1]


@cuda.jit(device=True)
def pinned_or_tier(h, k):
    """Element at ``k`` from :func:`pin_page_or_tier`: in the GPU cache (as :func:`pinned`) or,
    for ``k >= h.cache.size``, in the host tier (a plain load over PCIe: a tier page does not
    change while kernels run)."""
    n = h.cache.size
    if k >= n:
        return h.tier[k - n]
    return ld_weak_l2(h.cache, k)


@cuda.jit(device=True)
def _pin_of(h, k):
    """``k`` from :func:`pin_page_or_tier` as :func:`unpin_page` takes it: -1 (no pin) for a
    place in the tier."""
    return k if k < h.cache.size else np.int64(-1)


@cuda.jit(device=True)
def unpin_page_or_tier(h, i, k):
    """:func:`unpin_page` for a ``k`` from :func:`pin_page_or_tier` (collective, as it)."""
    unpin_page(h, i, _pin_of(h, k))


@cuda.jit(device=True)
def unpin_page_after_or_tier(h, i, k, used):
    """:func:`unpin_page_after` for a ``k`` from :func:`pin_page_or_tier`."""
    unpin_page_after(h, i, _pin_of(h, k), used)


@cuda.jit(device=True)
def pinned(h, k):
    """Element at index ``k`` of ``h.cache``, within a page this warp has pinned
    (:func:`pin_page`): ``ld.global.cg`` (:data:`~kernels.sync.ld_weak_l2`), served by L2, not
    by this SM's L1, which may hold lines of the slot's previous page."""
    return ld_weak_l2(h.cache, k)


@cuda.jit(device=True)
def pinned_pair(h, w):
    """Words ``w`` and ``w + 1`` (``w`` even) of ``h.cache_words``, within a page this warp
    has pinned: as :func:`pinned`, 16 bytes at once (``ld.global.cg.v2.b64``)."""
    return ld_pair_l2(h.cache_words, w)


@cuda.jit(device=True)
def unpin_page(h, i, k):
    """Give back the pin that :func:`pin_page` ``(h, i)`` returned as ``k`` (collective over the
    lanes that called it, each passing its own ``i`` and ``k``; a lane with ``k < 0`` holds no
    pin and gives nothing back).

    The page is named by ``i`` (any element of it), not found from the slot: a loader probing
    for a victim marks a slot CLAIMED for a moment even while its page is pinned.

    The lanes need not be converged as they were at the pin: after a loop whose trip count
    differs between lanes, the warp may arrive here in parts, one call each. A pin holds one
    reference per lane, and each part's lowest lane per page gives back its part's, so every
    reference is given back once, by its own lane's part, after that part's reads. (With one
    reference per group, a group split in two gave it back twice: the bench's 64 KiB requests,
    whose idle groups skip the reading loop, drove pages' counts below zero, into the ERROR
    bit.)
    """
    mask = activemask()
    gpage = h.page_base + (i >> h.elem_shift) if k >= 0 else np.int64(-1)
    peers = match_any_sync(mask, gpage)
    # Every lane's reads of the page are done before its leader's release.
    syncwarp(mask)
    if k >= 0 and laneid() == lowest_lane(peers):
        unpin(h, gpage, np.uint64(popc(peers)))


@cuda.jit(device=True)
def unpin_page_after(h, i, k, used):
    """:func:`unpin_page`, without its fence: for a warp whose lanes pass as ``used`` a value
    computed from every element they read under the pin (a sum of them, say; any value for a
    lane that read none).

    The unpin then waits for ``used`` (a ballot of it), hence for those loads, instead of
    fencing everything the thread did before (``unpin_page``'s release: a ``MEMBAR.GPU`` and a
    wait for it, 22 % of the stall samples of the bench's 4 KiB hit requests).
    A ``used`` that misses a read lets the page go while that read may still be in
    flight: it could then return bytes of the slot's next page. Collective, as
    :func:`unpin_page` (and, as it, right whichever lanes are converged at the call).
    """
    mask = activemask()
    gpage = h.page_base + (i >> h.elem_shift) if k >= 0 else np.int64(-1)
    peers = match_any_sync(mask, gpage)
    reads_done = ballot_sync(mask, used == 0)
    if k >= 0 and laneid() == lowest_lane(peers):
        unpin_after_reads(h, gpage, np.uint64(popc(peers)), reads_done)


@cuda.jit(device=True)
def page_room(h, i):
    """Elements of ``i``'s page from ``i`` to the page's end (what a pin of ``i`` covers)."""
    return (np.int64(1) << h.elem_shift) - (i & ((np.int64(1) << h.elem_shift) - 1))
