"""Device side of the submission/completion queues to the host daemon.

A queue is a ring of ``depth`` entries in mapped host memory. A thread that needs a page read (or
a dirty page written back) takes a ticket (one atomic per warp for all its loaders), waits until
the ticket's entry is free for its turn, writes the request and publishes it by a release store
of its sequence word; the daemon answers in the entry's completion record and the thread polls
that with bounded back-off. The entry is handed on to ticket + depth only after the thread has
copied the page out of the entry's staging buffer (or, for a write, the daemon has taken it).
No lock is held across any wait: a thread waits only on tickets lower
than its own, or on the host.
"""
from numba import cuda

from kernels import layout as L
from kernels.platform import (
    POLL_FIRST_NS,
    POLL_MAX_NS,
    POLL_MIN_NS,
    SIMULATOR,
    WARP_SIZE,
    device_helper,
)
from kernels.sync import (
    atomic_add,
    ld_acquire_gpu,
    ld_acquire_sys,
    now_ns,
    st_relaxed_gpu,
    st_relaxed_sys,
    st_release_gpu,
)
from kernels.warp import (
    ballot_sync,
    highest_lane,
    laneid,
    lanemask_lt,
    lowest_lane,
    nanosleep,
    popc,
    shfl_sync,
    syncwarp,
)

# Back-off bounds for polls (ns; kernels/platform.py, ``GIDS_POLL_NS``): POLL_MIN_NS doubling
# to POLL_MAX_NS. Every poll is a PCIe read and thousands of warps poll at once, so the polling
# lane of a warp sleeps POLL_FIRST_NS after its submission (:func:`wait_warp`), then backs off
# (docs/design-notes.md, "The completion poll's schedule").
#: The first poll's delay as used: none in the simulator, whose round trips take milliseconds
#: (and whose emulated warps sleep at least 10 ms per nap), so that it runs as before.
FIRST_POLL_NS = 0 if SIMULATOR else POLL_FIRST_NS

# The queue records' words, compiled from their one definition in kernels.layout.
_sq_tag = device_helper(L.sq_tag)
_sq_word = device_helper(L.sq_word)
_cq_seq = device_helper(L.cq_seq)
_cq_fields = device_helper(L.cq_fields)

#: A wait reads the host's abort word on one poll in ``ABORT_POLL_MASK + 1``: every waiting warp
#: reads that one line of host memory across PCIe, and reads of one line are served about one at
#: a time (docs/design-notes.md). Every 1,024th poll is still at least a millisecond apart, soon
#: enough for Ctrl-C. The simulator polls a thousand times slower, so it looks every 8th.
ABORT_POLL_MASK = 7 if SIMULATOR else 1023


@cuda.jit(device=True)
def queue_of_warp(h):
    """The queue this warp uses: warps are spread round-robin over the queues."""
    block = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    thread = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    warps_per_block = (cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z + WARP_SIZE - 1) // WARP_SIZE
    return (block * warps_per_block + thread // WARP_SIZE) % h.n_queues


@cuda.jit(device=True)
def take_tickets(h, q, mask, want):
    """Give each lane of ``mask`` with ``want`` a distinct ticket of queue ``q`` (else -1).

    One atomic per warp: a warp's tickets are consecutive, so (depth >= warp size) no two of
    its lanes ever wait on each other for the same entry.
    """
    wanting = ballot_sync(mask, want)
    if wanting == 0:
        return -1
    first = lowest_lane(wanting)
    base = 0
    if laneid() == first:
        base = atomic_add(h.sq_ticket, q, popc(wanting))
    base = shfl_sync(mask, base, first)
    if not want:
        return -1
    return base + popc(wanting & lanemask_lt())


@device_helper
def expired(h, deadline, polls):
    """True once ``deadline`` (ns) has passed, or the host has asked the kernel to stop
    (``Runtime.abort``, Ctrl-C). The abort word is in host memory, one word for every warp,
    so it is read on one poll in ``ABORT_POLL_MASK + 1`` only (see there)."""
    if now_ns() > deadline:
        return True
    return (polls & ABORT_POLL_MASK) == ABORT_POLL_MASK and ld_acquire_sys(h.abort, 0) != 0


@device_helper
def back_off(h, deadline, polls, pause):
    """The step of every bounded poll loop after a poll that found nothing: returns
    ``(give_up, next_pause)``. Gives up once :func:`expired`; else sleeps ``pause`` ns and
    doubles it, up to POLL_MAX_NS."""
    if expired(h, deadline, polls):
        return True, pause
    nanosleep(pause)
    return False, min(pause * 2, POLL_MAX_NS)


@cuda.jit(device=True)
def wait_turn(h, q, ticket, deadline):
    """Wait until the ticket's entry (its record, staging page, and for NVMe its command id) is
    free for the ticket's turn. False on timeout."""
    entry = q * h.depth + ticket % h.depth
    turn = ticket // h.depth
    pause = POLL_MIN_NS
    polls = 0
    while ld_acquire_gpu(h.entry_turn, entry) != turn:
        polls += 1
        give_up, pause = back_off(h, deadline, polls, pause)
        if give_up:
            return False
    return True


@cuda.jit(device=True)
def submit(h, q, ticket, array_id, page, op, deadline):
    """Wait for the ticket's entry, write the request. False on timeout.

    ``op`` is ``OP_READ`` (the daemon fills the entry's staging page) or ``OP_WRITE`` (the
    caller has put the page in the staging page and fenced at system scope: that fence and
    this store are the release that orders the page before the request).

    The request is one word (``gids.layout``, "Submission queue record") in one strong store,
    with no fence of its own: nothing of a read request is written before it, and the
    entry's last user finished reading its staging page before it handed the entry on (its
    loads had returned before its release), so the daemon, which fills that page only once
    it sees this word, cannot overwrite anything still being read. A release here (a
    ``fence.acq_rel.sys``, 0.58 us on the H200) would be on the path of every miss.
    """
    if not wait_turn(h, q, ticket, deadline):
        return False
    word = _sq_word(_sq_tag(ticket, h.depth), array_id, page, op)
    st_relaxed_sys(h.sq, (q * h.depth + ticket % h.depth) * L.SQ_WORDS + L.SQ_WORD, word)
    return True


@cuda.jit(device=True)
def submit_lane(h, mask, q, ticket, want, array_id, page, op, deadline):
    """``kernels.backend.io_submit`` for the host queues: :func:`submit` for a lane that has a
    ticket and wants to submit (each lane on its own; ``mask`` is unused), False for the
    others."""
    if ticket < 0 or not want:
        return False
    return submit(h, q, ticket, array_id, page, op, deadline)


@cuda.jit(device=True)
def wait_completion(h, q, ticket, deadline, first_ns):
    """Poll the ticket's completion, the first time after ``first_ns`` (0: at once). Returns
    (done, status, source); done is False on timeout.

    The whole answer is one word (``gids.layout``, "Completion queue record"), read by the
    acquire that sees its sequence: each strong load from host memory is a PCIe round trip of
    about a microsecond, and a thread's strong loads are served one after another.
    """
    entry = q * h.depth + ticket % h.depth
    rec = entry * L.CQ_WORDS + L.CQ_WORD
    seq = _cq_seq(ticket)
    if first_ns > 0:
        nanosleep(first_ns)
    pause = POLL_MIN_NS
    polls = 0
    word = ld_acquire_sys(h.cq, rec)
    while _cq_fields(word)[0] != seq:
        polls += 1
        give_up, pause = back_off(h, deadline, polls, pause)
        if give_up:
            return False, 0, 0
        word = ld_acquire_sys(h.cq, rec)
    _, status, source = _cq_fields(word)
    return True, status, source


@cuda.jit(device=True)
def wait_warp(h, mask, lane, q, ticket, submitted, deadline, since):
    """Collective: each lane that ``submitted`` gets (completed, status, source) of its ticket;
    completed is False on timeout (or for a lane that did not submit).

    The daemon serves a queue in ticket order, so once the warp's highest ticket is complete
    all of its tickets are: one lane polls the host, not 32, starting ``FIRST_POLL_NS`` after
    its submission at ``since`` (whatever the lane did after it counts towards that wait), and
    keeps what it found; the others then read their own completions, at once. (Under SSD emulation completions may come out of
    order: a lane whose own is not there yet polls on.)
    """
    posted = ballot_sync(mask, submitted)
    polled = posted != 0 and lane == highest_lane(posted)
    done = False
    status = 0
    source = 0
    if polled:
        done, status, source = wait_completion(h, q, ticket, deadline,
                                               FIRST_POLL_NS - (now_ns() - since))
    syncwarp(mask)
    if submitted and not polled:
        done, status, source = wait_completion(h, q, ticket, deadline, 0)
    return done, status, source


@cuda.jit(device=True)
def staging_word(h, q, ticket):
    """Word offset of the ticket's staging page in ``h.staging``."""
    return (q * h.depth + ticket % h.depth) * h.page_words


@cuda.jit(device=True)
def release_entry(h, q, ticket):
    """Hand the ticket's entry on to ticket + depth (after its staging page was copied out)."""
    st_release_gpu(h.entry_turn, q * h.depth + ticket % h.depth, ticket // h.depth + 1)


@cuda.jit(device=True)
def hand_on_entry(h, q, ticket):
    """:func:`release_entry` without its fence, for a thread whose reads of the entry's staging
    page a fence of its own already ordered before this store (a release pattern): the bulk
    copy's lock release (``kernels/bulk.py``). A ``st.release.gpu`` costs 0.21 us on the H200,
    on the path of every lone miss."""
    st_relaxed_gpu(h.entry_turn, q * h.depth + ticket % h.depth, ticket // h.depth + 1)
