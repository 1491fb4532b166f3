"""Device prefetch: a page's load started by one thread and finished by whichever comes next.

``gids.prefetch(h, i)`` (:func:`kernels.access.prefetch`) calls :func:`start_prefetch` for the
page of element ``i``. If the page is neither cached nor being loaded, the calling lane becomes
its loader as a miss would (BUSY, :func:`kernels.cache.claim_slot`), submits the read request,
and returns at once, leaving the load half done:

- the page's word is ``slot << 32 | BUSY | PREFETCH | count``: "loading, nobody waiting". BUSY
  keeps readers waiting and the clock away, as for any load;
- ``pf_slot[slot]`` names the queue entry (entry + 1) whose completion will hold the page,
  ``pf_entry[entry]`` names the slot (slot + 1).

Two things finish it, each owned by whoever wins one compare-and-swap:

1. the *completion* (:func:`kernels.queue.retire_prefetch`, by the winner of ``pf_entry``): the
   page copied from staging into the slot, the entry handed on, ``pf_slot`` set to
   ``PF_LANDED`` (or ``PF_FAILED``). Done by the page's adopter, or by the thread whose ticket
   is the entry's next (it would otherwise wait for ever for an entry nobody hands on);
2. the *page* (:func:`finish_prefetch`, by the winner of the PREFETCH bit): the adopter, a
   reader that found the page BUSY | PREFETCH (``kernels.cache.PIN_ADOPT``) or the settle kernel
   (``Runtime.invalidate``, ``close``), takes the bit and the slot off the word (it is then an
   ordinary loader's BUSY page), finishes the completion unless someone has, waits for
   ``pf_slot`` and publishes the page VALID (or, if the read failed, gives it up: readers then
   load it themselves; a prefetch records no error).

So a read after a prefetch waits only for what is left of the I/O, a prefetch nobody reads
holds no queue entry past the next ticket of its entry, and at most ``pf_budget`` prefetches
(a fraction of the cache, ``hold_fraction``) hold slots at once: stranded ones cannot fill the
cache. A prefetch is a hint: it does nothing when the page is resident or being loaded, when the
budget is spent, when the slot it finds holds a dirty page (no write-back is started for a
hint), or on a handle whose completions do not come through staging pages (a zero-copy store;
the NVMe back end, whose Runtime gives it no budget).
"""
import numpy as np
from numba import cuda

from kernels import layout as L
from kernels.cache import claim_slot, give_up_load, keep_dirty_victim, publish
from kernels.platform import POLL_MIN_NS, out_of_line
from kernels.queue import back_off, retire_prefetch, submit
from kernels.sync import (
    atomic_add,
    atomic_and,
    atomic_cas,
    atomic_exch,
    atomic_or,
    ld_acquire_gpu,
    now_ns,
    red_add,
    st_release_gpu,
)

_PREFETCH = L.PAGE_PREFETCH
_BUSY = L.PAGE_BUSY
_SLOT_SHIFT = L.PAGE_SLOT_SHIFT
_NOT_BUSY = np.uint64(~int(L.PAGE_BUSY) & 0xFFFFFFFFFFFFFFFF)
#: What an adopter keeps of the word: BUSY and the count (PREFETCH and the slot go).
_ADOPTED = np.uint64(~(int(L.PAGE_PREFETCH) | int(L.PAGE_SLOT_MASK)) & 0xFFFFFFFFFFFFFFFF)
#: State bits that make a page no candidate for a prefetch (BUSY is tested by the OR itself).
_TAKEN = np.uint64(int(L.PAGE_VALID) | int(L.PAGE_ERROR))

STARTED = 1     # start_prefetch: the request is out
SKIPPED = 0     # start_prefetch: nothing to do, or no room (a hint)


@out_of_line
def start_prefetch(h, gpage, page, queue):
    """Start loading global page ``gpage`` (page ``page`` of ``h``'s array) through queue
    ``queue``, and return without waiting for it: STARTED or SKIPPED (module docstring).
    Called by one lane per page."""
    if h.zero_copy.size > 1:   # completions name the zero-copy store, not staging
        return SKIPPED
    if atomic_add(h.pf_budget, 0, -1) <= 0:
        red_add(h.pf_budget, 0, 1)
        return SKIPPED
    old = atomic_or(h.page_state, gpage, _BUSY)
    if old & _BUSY:
        red_add(h.pf_budget, 0, 1)
        return SKIPPED
    if old & _TAKEN:
        atomic_and(h.page_state, gpage, _NOT_BUSY)
        red_add(h.pf_budget, 0, 1)
        return SKIPPED
    slot, _, victim = claim_slot(h, gpage)
    if victim >= 0:
        keep_dirty_victim(h, victim, slot)
        slot = -1
    if slot < 0:
        give_up_load(h, gpage, np.uint64(0))
        red_add(h.pf_budget, 0, 1)
        return SKIPPED
    ticket = atomic_add(h.sq_ticket, queue, 1)
    entry = queue * h.depth + ticket % h.depth
    if not submit(h, queue, ticket, h.array_id, page, L.OP_READ, now_ns() + h.timeout_ns):
        # The ticket can never be served now (the daemon serves a queue in order): give the
        # page up; the next ticket's wait times out and the Runtime recovers.
        atomic_exch(h.slot_page, slot, L.SLOT_EMPTY)
        give_up_load(h, gpage, np.uint64(0))
        red_add(h.pf_budget, 0, 1)
        return SKIPPED
    st_release_gpu(h.pf_slot, slot, entry + 1)
    st_release_gpu(h.pf_entry, entry, slot + 1)
    cuda.threadfence()   # both names are visible before PREFETCH is (its adopter reads them)
    # Only counts change in a loading page's word, so one add sets PREFETCH and the slot.
    red_add(h.page_state, gpage, _PREFETCH + (np.uint64(slot) << _SLOT_SHIFT))
    return STARTED


@out_of_line
def finish_prefetch(h, gpage, deadline):
    """Adopt ``gpage``'s prefetch if it is still "loading, nobody waiting" and finish it (module
    docstring): True if this thread did. The caller may hold references on the page (a reader
    waiting for it) or none (the settle kernel); either way they stay as they were."""
    old = ld_acquire_gpu(h.page_state, gpage)
    while True:
        if not (old & _PREFETCH):
            return False
        seen = atomic_cas(h.page_state, gpage, old, old & _ADOPTED)
        if seen == old:
            break
        old = seen
    slot = np.int64(old >> _SLOT_SHIFT)
    held = ld_acquire_gpu(h.pf_slot, slot)
    if held > 0:
        retire_prefetch(h, held - 1, deadline)   # a no-op if a later ticket got there first
    pause = POLL_MIN_NS
    polls = 0
    while held >= 0:
        held = ld_acquire_gpu(h.pf_slot, slot)
        polls += 1
        if held >= 0:
            give_up, pause = back_off(h, deadline, polls, pause)
            if give_up:
                # The completion's owner is stuck on a completion that does not come: the
                # page stays BUSY, and its readers time out (the Runtime recovers).
                return True
    if held == L.PF_LANDED:
        # The copy may be another thread's (its release seen by the acquire above): a fence
        # makes it visible GPU-wide before VALID, as a loader's own fence does.
        cuda.threadfence()
        publish(h, gpage, slot)
    else:
        atomic_exch(h.slot_page, slot, L.SLOT_EMPTY)
        give_up_load(h, gpage, np.uint64(0))
    red_add(h.pf_budget, 0, 1)
    return True


@cuda.jit(device=True)
def settle_slot(h, slot):
    """Finish the prefetch landing in ``slot``, if there is one nobody has adopted (the settle
    kernel: a thread per slot). True if this thread finished it."""
    gpage = ld_acquire_gpu(h.slot_page, slot)
    if gpage < 0:
        return False
    return finish_prefetch(h, gpage, now_ns() + h.timeout_ns)
