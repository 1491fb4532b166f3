"""Device side of the direct NVMe path (``Runtime(backend="nvme")``): the driver a GPU thread runs.

A kernel thread that misses builds a real NVMe Read command (opcode 02h), and a thread that
evicts a dirty page a real NVMe Write command (opcode 01h); it talks to the controller the way a
BaM-style driver talks to a drive: through submission and completion rings and doorbells. Reads
and writes are the same steps below, with the same rings, slots and command ids; only the
opcode and the direction of the bounce buffer's data differ.

Queue pair ``q`` has an SQ ring and a CQ ring of ``nv_ring = depth + 1`` entries each (a ring
holds at most size - 1 entries, so ``depth`` commands fit in flight), and two doorbells. Its
``depth`` *command slots* are the host queues' entries (``q * depth + ticket % depth``), reused
unchanged: a slot owns a command id, a bounce buffer (the staging page, the controller's DMA
target) and a completion word. One command, ticket ``t`` of queue ``q``:

1. **Slot.** Wait for the slot's turn (``kernels.queue.wait_turn``): its previous command has
   completed and its thread has copied the data out, so the slot's CID and buffer are free.
   CID = slot + depth * (turn mod 65536 // depth): a generation in the high bits, so a command
   id is never reused while in flight and a stale completion never matches a new command.
2. **SQE.** SQ entry ``t % nv_ring`` is free once the controller has fetched its previous
   command: the SQ head, learned from the CQEs' SQHD field, says so (the slot's turn implies
   it; it is checked all the same). The thread writes the 64-byte command (opcode 02h or 01h,
   CID, NSID = array id + 1, SLBA, NLB, PRP1 = its bounce buffer's bus address) and marks the
   entry filled (``nv_mark = t + 1``, release). For a Write the warp has already copied the
   dirty page into the bounce buffer and fenced at system scope (``kernels.access._write_back``),
   so the controller, which reads the buffer after the doorbell, sees the page's bytes.
3. **Doorbell.** The SQ tail doorbell may only move over a contiguous run of filled entries (the
   controller fetches everything below it). Whoever takes the queue's tail try-lock moves the
   tail over the filled run and writes the doorbell; a thread whose entry the tail has not yet
   covered tries again (an earlier ticket is still being written; its writer moves the tail
   after it). One lane per warp does this for the warp's consecutive tickets.
4. **Completion.** Completions come in any order. Whoever takes the queue's CQ try-lock drains
   the CQ: from its head, every CQE whose phase tag is the current pass's (1 on the first pass
   over the ring, 0 on the second, ...) is handed to its command's completion word by CID, the
   SQ head is taken from its SQHD, and at the end the CQ head doorbell frees the consumed
   entries. Each thread polls its own completion word and helps drain while it waits.

No lock is ever waited for: the two locks are try-locks held for a bounded scan, and a thread
that fails to take one polls again. Every wait ends at the Runtime's deadline (or abort) with the
timeout errors of :mod:`gids.layout`.
"""
from numba import cuda

from gids import layout as L
from kernels.queue import (
    POLL_MAX_NS,
    POLL_MIN_NS,
    back_off,
    expired,
    highest_lane,
    lowest_lane,
    wait_turn,
)
from kernels.sync import (
    atomic_cas,
    ld_acquire_gpu,
    ld_acquire_sys,
    ld_relaxed_gpu,
    st_release_gpu,
    st_release_sys,
)
from kernels.warp import ballot_sync, nanosleep, syncwarp

_CID_MASK = 0xFFFF
_STATUS_MASK = 0x7FFF


@cuda.jit(device=True)
def command_id(h, ticket):
    """The ticket's 16-bit command id: its slot, plus a generation in the bits above the slot."""
    generations = 65536 // h.depth
    return ticket % h.depth + h.depth * ((ticket // h.depth) % generations)


@cuda.jit(device=True)
def _try_lock(h, k):
    if atomic_cas(h.nv_lock, k, 0, 1) != 0:
        return False
    cuda.threadfence()   # acquire: the previous holder's writes are seen
    return True


@cuda.jit(device=True)
def _unlock(h, k):
    st_release_gpu(h.nv_lock, k, 0)


@cuda.jit(device=True)
def drain_cq(h, q):
    """If no other thread is draining queue ``q``'s CQ, consume every CQE posted so far.

    Each CQE's status goes to its command's completion word (found by CID), its SQHD advances
    the SQ head, and the CQ head doorbell then frees the consumed entries for the controller.
    Non-blocking and bounded (at most one ring's worth of entries).
    """
    if not _try_lock(h, 2 * q + 1):
        return
    ring = h.nv_ring
    start = ld_relaxed_gpu(h.nv_cq_head, q)
    head = start
    sq_head = ld_relaxed_gpu(h.nv_sq_head, q)
    for _ in range(ring):
        # The phase tag the controller writes on this pass over the ring: 1, 0, 1, ...
        phase = 1 - (head // ring) % 2
        w = ld_acquire_sys(h.nv_cq, (q * ring + head % ring) * L.NVME_CQE_WORDS + L.CQE_DW2_DW3)
        if (w >> L.CQE_PHASE_SHIFT) & 1 != phase:
            break
        cid = (w >> L.CQE_CID_SHIFT) & _CID_MASK
        status = (w >> L.CQE_STATUS_SHIFT) & _STATUS_MASK
        sqhd = w & 0xFFFF
        # SQHD is a ring position; the controller is less than a ring ahead of what we know.
        sq_head += (sqhd - sq_head % ring + ring) % ring
        st_release_gpu(h.nv_cpl, q * h.depth + cid % h.depth,
                       cid | (status << L.CPL_STATUS_SHIFT) | L.CPL_VALID)
        head += 1
    if head != start:
        st_release_gpu(h.nv_sq_head, q, sq_head)
        st_release_gpu(h.nv_cq_head, q, head)
        st_release_sys(h.nv_db, 2 * q + L.DB_CQ_HEAD, head % ring)
    _unlock(h, 2 * q + 1)


@cuda.jit(device=True)
def opcode_of(op):
    """The NVMe opcode of a gids request op: OP_WRITE -> Write (01h), OP_READ -> Read (02h)."""
    if op == L.OP_WRITE:
        return L.NVME_OP_WRITE
    return L.NVME_OP_READ


@cuda.jit(device=True)
def submit(h, q, ticket, array_id, page, opcode, deadline):
    """Steps 1 and 2: take the ticket's command slot and write its SQE. False on timeout.

    ``opcode`` is ``NVME_OP_READ`` (the controller fills the slot's bounce buffer with page
    ``page`` of array ``array_id``) or ``NVME_OP_WRITE`` (the caller has put the page in the
    bounce buffer and made it visible to the host; the controller stores it). The namespace is
    ``array_id + 1``: a write-back names its victim's array, which need not be the handle's.
    """
    if not wait_turn(h, q, ticket, deadline):
        return False
    ring = h.nv_ring
    pause = POLL_MIN_NS
    polls = 0
    # The SQ entry's previous command must have been fetched (SQ head from the CQEs).
    while ticket - ld_acquire_gpu(h.nv_sq_head, q) >= ring - 1:
        drain_cq(h, q)
        polls += 1
        give_up, pause = back_off(h, deadline, polls, pause)
        if give_up:
            return False
    slot = q * h.depth + ticket % h.depth
    page_bytes = h.page_words * 8
    blocks = page_bytes // L.NVME_LBA_BYTES
    sqe = (q * ring + ticket % ring) * L.NVME_SQE_WORDS
    cdw0 = opcode | (command_id(h, ticket) << L.SQE_CID_SHIFT)
    h.nv_sq[sqe + L.SQE_CDW0_NSID] = cdw0 | ((array_id + 1) << L.SQE_NSID_SHIFT)
    h.nv_sq[sqe + 1] = 0
    h.nv_sq[sqe + L.SQE_MPTR] = 0
    h.nv_sq[sqe + L.SQE_PRP1] = h.nv_prp_base + slot * page_bytes
    h.nv_sq[sqe + L.SQE_PRP2] = 0
    h.nv_sq[sqe + L.SQE_SLBA] = page * blocks
    h.nv_sq[sqe + L.SQE_CDW12_13] = blocks - 1
    h.nv_sq[sqe + 7] = 0
    # System scope: the tail mover's doorbell write must carry this thread's SQE writes to the
    # controller (release/acquire is cumulative through the mover).
    st_release_sys(h.nv_mark, q * ring + ticket % ring, ticket + 1)
    return True


@cuda.jit(device=True)
def ring_doorbell(h, q, ticket, deadline):
    """Step 3: return once the SQ tail doorbell covers ``ticket`` (moving it if we can)."""
    ring = h.nv_ring
    pause = POLL_MIN_NS
    polls = 0
    while ld_acquire_gpu(h.nv_sq_tail, q) <= ticket:
        if _try_lock(h, 2 * q):
            start = ld_relaxed_gpu(h.nv_sq_tail, q)
            tail = start
            while tail - start < ring - 1 and ld_acquire_sys(h.nv_mark, q * ring + tail % ring) == tail + 1:
                tail += 1
            if tail != start:
                st_release_gpu(h.nv_sq_tail, q, tail)
                st_release_sys(h.nv_db, 2 * q + L.DB_SQ_TAIL, tail % ring)
            _unlock(h, 2 * q)
            if tail > ticket:
                return True
        polls += 1
        give_up, pause = back_off(h, deadline, polls, pause)
        if give_up:
            return False
    return True


@cuda.jit(device=True)
def gids_status(nvme_status):
    """The gids STATUS_* code of an NVMe completion status (for the error record)."""
    if nvme_status == L.NVME_SC_SUCCESS:
        return L.STATUS_OK
    if nvme_status == L.NVME_SC_SHORT_READ:
        return L.STATUS_SHORT_READ
    if nvme_status == L.NVME_SC_READ_ERROR or nvme_status == L.NVME_SC_WRITE_FAULT:
        return L.STATUS_IO_ERROR
    if nvme_status == L.NVME_SC_SHORT_WRITE:
        return L.STATUS_SHORT_WRITE
    return L.STATUS_BAD_REQUEST


@cuda.jit(device=True)
def wait_warp(h, mask, lane, q, ticket, submitted, deadline):
    """Collective steps 3 and 4 for the lanes of ``mask``: (completed, status, source) each.

    ``status`` is a gids STATUS_* code; for a Read the data is always in the slot's bounce
    buffer (``source`` = SOURCE_STAGING), where the controller's DMA put it; for a Write the
    controller has taken the bounce buffer's bytes once the command completed.
    """
    # The warp's tickets of one queue are consecutive and all written: its highest lane moves
    # the tail over them (and over whatever other warps have written below them).
    posted = ballot_sync(mask, submitted)
    rung = True
    if posted != 0 and lane == highest_lane(posted):
        rung = ring_doorbell(h, q, ticket, deadline)
    syncwarp(mask)
    rung = ballot_sync(mask, not rung) == 0
    done = not submitted or not rung
    completed = False
    status = 0
    cid = command_id(h, ticket) if submitted else -1
    slot = q * h.depth + ticket % h.depth
    pause = POLL_MIN_NS
    polls = 0
    while True:
        if not done:
            w = ld_acquire_gpu(h.nv_cpl, slot)
            if (w & L.CPL_VALID) != 0 and (w & _CID_MASK) == cid:
                done = True
                completed = True
                status = gids_status((w >> L.CPL_STATUS_SHIFT) & _STATUS_MASK)
        waiting = ballot_sync(mask, not done)
        if waiting == 0:
            break
        # One lane a warp looks at the CQ (a read across PCIe) and drains it if it can.
        if lane == lowest_lane(waiting):
            drain_cq(h, q)
        polls += 1
        if not done and expired(h, deadline, polls):
            done = True
        nanosleep(pause)
        pause = min(pause * 2, POLL_MAX_NS)
    return completed, status, L.SOURCE_STAGING
