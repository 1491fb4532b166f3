"""``read(h, i)``: element ``i`` of a file-backed array, through the page cache, from any kernel.

One call runs in rounds until every lane of the calling warp has its value. In each round:

1. one leader per distinct page (``match_any_sync``) tries to pin its page. Hits are read at
   once and unpinned. A leader whose page another thread is loading keeps a reference while
   it waits, so the page stays until it has been read;
2. leaders that won a miss claim a cache slot, take queue tickets (one atomic per warp), submit
   their requests and wait for the host's completions;
3. the whole warp copies each page that arrived into its slot, 16 contiguous bytes a lane per load;
4. the loaders publish their pages VALID (keeping a pin), their lanes read, the loaders unpin;
5. lanes whose page another warp is loading back off and look again in the next round.

References are held only on the page a lane itself waits for or reads, never on another page
across a wait, and the waits (for the host, for lower queue tickets, for a page's loader) all
end without help from the waiting warp: every load finishes, so no set of warps can deadlock.

Every wait is bounded by ``h.timeout_ns``. An out-of-range index, an I/O error or a timeout is
recorded in ``h.err`` (the Runtime raises it after the kernel) and the lane returns 0; an
out-of-range index never touches memory.
"""
from numba import cuda

from gids import layout as L
from kernels.cache import (PIN_ERROR, PIN_HIT, PIN_LOAD, PIN_WAIT, abandon, check_wait, claim_slot,
                           give_up_load,
                           publish, try_pin, unpin, warp_copy_page)
from kernels.backend import io_submit, io_wait
from kernels.queue import expired, lowest_lane, queue_of_warp, release_entry, staging_word, take_tickets
from kernels.sync import atomic_add, atomic_cas, ld_relaxed_gpu, now_ns
from kernels.warp import activemask, ballot_sync, laneid, match_any_sync, nanosleep, popc, shfl_sync, syncwarp

#: Sleep between rounds for a lane waiting on another warp's load (doubles up to the max).
WAIT_MIN_NS = 128
WAIT_MAX_NS = 4096


@cuda.jit(device=True)
def record_error(h, code, page, detail):
    """Keep the first error of the kernel; later ones are dropped (one is enough to raise)."""
    if atomic_cas(h.err, L.ERR_CODE, L.ERR_NONE, -1) == L.ERR_NONE:
        h.err[L.ERR_ARRAY] = h.array_id
        h.err[L.ERR_PAGE] = page
        h.err[L.ERR_DETAIL] = detail
        cuda.threadfence()
        h.err[L.ERR_CODE] = code


@cuda.jit(device=True)
def _count(h, mask, stat, predicate):
    """Add the number of lanes of ``mask`` where ``predicate`` holds to one counter (one atomic)."""
    n = popc(ballot_sync(mask, predicate))
    if n != 0 and laneid() == lowest_lane(mask):
        shard = cuda.blockIdx.x % L.N_STAT_SHARDS
        atomic_add(h.stats, shard * L.N_STATS + stat, n)


@cuda.jit(device=True)
def _read_pinned(h, mask, leader, pinned, slot, i, value, done):
    """Lanes whose leader holds a pin read their element from the slot (collective)."""
    leader_slot = shfl_sync(mask, slot if pinned else -1, leader)
    if not done and leader_slot >= 0:
        value = ld_relaxed_gpu(h.cache, (leader_slot << h.elem_shift) + (i & ((1 << h.elem_shift) - 1)))
        done = True
    syncwarp(mask)   # every lane has read before the leader unpins
    return value, done


@cuda.jit(device=True)
def read(h, i):
    """Element ``i`` of the array whose device handle is ``h``.

    Call it from a kernel like an array access; every thread may pass a different index.
    Threads of a warp that want the same page share one lookup and one I/O.
    """
    mask = activemask()
    lane = laneid()
    in_range = i >= 0 and i < h.n_elems
    if not in_range:
        record_error(h, L.ERR_INDEX, -1, i)
        i = 0
    page = i >> h.elem_shift
    gpage = h.page_base + page
    peers = match_any_sync(mask, gpage if in_range else -1)
    leader = lowest_lane(peers)
    is_leader = lane == leader and in_range

    value = h.zero[0]
    done = not in_range
    failed = 0              # leader only: 1 once the page cannot be had (the error is recorded)
    loading = False         # leader only: owns BUSY on the page
    waiting = False         # leader only: holds a reference on a page another thread loads
    slot = -1
    first_round = True
    hit = False
    loaded = False
    evicted = False
    deadline = now_ns() + h.timeout_ns
    wait_code = L.ERR_TIMEOUT_LOADER
    pause = WAIT_MIN_NS
    rounds = 0

    while ballot_sync(mask, not done) != 0:
        # 1. pin and read the hits, or become the loader
        pinned = False
        if is_leader and not done and not loading:
            if waiting:
                outcome, slot = check_wait(h, gpage)
            else:
                outcome, slot = try_pin(h, gpage)
            waiting = outcome == PIN_WAIT
            if outcome == PIN_HIT:
                pinned = True
                hit = first_round
            elif outcome == PIN_LOAD:
                loading = True
            elif outcome == PIN_ERROR:
                record_error(h, L.ERR_IO, page, 0)
                failed = 1
        first_round = False
        value, done = _read_pinned(h, mask, leader, pinned, slot, i, value, done)
        if pinned:
            unpin(h, gpage)
            pinned = False

        if ballot_sync(mask, loading) != 0:
            # 2. loaders: a slot, a ticket, the request, the completion
            q = queue_of_warp(h)   # here, not on the hit path
            completed = False
            status = 0
            source = 0
            if loading:
                slot, ev = claim_slot(h, gpage)
                evicted = evicted or ev
                if slot < 0:
                    wait_code = L.ERR_TIMEOUT_SLOT
            ticket = take_tickets(h, q, mask, loading and slot >= 0)
            submitted = False
            if ticket >= 0:
                # The back end's two steps (host queues or NVMe rings), chosen by the handle's
                # type at compile time: kernels/backend.py.
                submitted = io_submit(h, q, ticket, page, deadline)
                if not submitted:
                    record_error(h, L.ERR_TIMEOUT_QUEUE, page, ticket)
            completed, status, source = io_wait(h, mask, lane, q, ticket, submitted, deadline)
            if ticket >= 0:
                if submitted and not completed:
                    record_error(h, L.ERR_TIMEOUT_IO, page, ticket)
                if not completed:
                    # The entry may never be answered now; the Runtime resets the queues.
                    abandon(h, gpage, slot)
                    loading = False
                    failed = 1
            # 3. the warp copies every page that arrived into its slot
            to_copy = ballot_sync(mask, completed and status == L.STATUS_OK)
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
            # Each lane's share of the copied pages must be visible GPU-wide before a loader
            # publishes VALID (syncwarp alone orders memory only within the warp).
            cuda.threadfence()
            syncwarp(mask)
            # 4. publish (keeping a pin), read, unpin
            if completed:
                release_entry(h, q, ticket)
                loading = False
                if status == L.STATUS_OK:
                    publish(h, gpage)
                    pinned = True
                    loaded = True
                else:
                    record_error(h, L.ERR_IO, page, status)
                    abandon(h, gpage, slot)
                    failed = 1
            value, done = _read_pinned(h, mask, leader, pinned, slot, i, value, done)
            if pinned:
                unpin(h, gpage)

        # 5. lanes still waiting back off within their deadline, or give up
        if shfl_sync(mask, failed, leader) != 0:
            done = True
        rounds += 1
        if not done and is_leader:
            if expired(h, deadline, rounds):
                record_error(h, wait_code, page, -1)
                if loading:
                    give_up_load(h, gpage)
                    loading = False
                if waiting:
                    unpin(h, gpage)
                    waiting = False
                failed = 1
            else:
                nanosleep(pause)
                pause = min(pause * 2, WAIT_MAX_NS)

    _count(h, mask, L.STAT_HITS, is_leader and hit)
    _count(h, mask, L.STAT_MISSES, is_leader and not hit)
    _count(h, mask, L.STAT_IOS, loaded)
    _count(h, mask, L.STAT_EVICTIONS, evicted)
    return value
