"""Device side of the direct NVMe path (``Runtime(backend="nvme")``): the driver a GPU warp runs.

A kernel thread that misses builds a real NVMe Read command (opcode 02h), and a thread that
evicts a dirty page a real NVMe Write command (opcode 01h); the warp talks to the controller the
way a BaM-style driver talks to a drive: through submission and completion rings and doorbells.
Reads and writes are the same steps below, with the same rings, slots and command ids; only the
opcode and the direction of the bounce buffer's data differ.

Queue pair ``q`` has an SQ ring and a CQ ring of ``nv_ring = depth + 1`` entries each (a ring
holds at most size - 1 entries, so ``depth`` commands fit in flight), and two doorbells. Its
``depth`` *command slots* are the host queues' entries (``q * depth + ticket % depth``), reused
unchanged: a slot owns a command id, a bounce buffer (the staging page, the controller's DMA
target) and a completion word. A warp's lanes that need commands on queue ``q`` take consecutive
tickets ``a .. b - 1`` with one atomic (:func:`kernels.queue.take_tickets`); ticket ``t`` is, at
once, the command's slot turn, its SQ entry ``t % ring`` and the CQ entry ``t % ring`` that its
lane reads (the ``t``-th completion the queue posts: see step 4). Steps, for the warp:

1. **Slot.** Each lane waits for its slot's turn (:func:`kernels.queue.wait_turn`): the slot's
   previous command has completed and its data was copied out, so the CID and buffer are free.
   CID = slot + depth * (turn mod 65536 // depth): a generation in the high bits, so a command
   id is never reused while in flight and a stale completion never matches a new command. The
   SQ entry ``t % ring`` is free once the controller has fetched its previous command: the SQ
   head, learned from the CQEs' SQHD field, says so (the slot's turn implies it; it is checked
   all the same).
2. **SQEs.** The warp writes its 64-byte commands (opcode 02h or 01h, CID, NSID = array id + 1,
   SLBA, NLB, PRP1 = the slot's bounce buffer's bus address) with plain 16-byte stores, the
   lanes of a full warp splitting the warp's run of entries so that each store instruction
   writes 512 contiguous bytes (:func:`write_sqes`). For a Write the warp has already copied the
   dirty page into the bounce buffer (``kernels.access._write_back``).
3. **SQ doorbell, in ticket order.** After a ``syncwarp`` the warp's highest lane fences once
   at system scope (``fence.acq_rel.sys``: cumulative, it covers every lane's SQEs and bounce
   buffer bytes), waits until the queue's published tail ``nv_sq_tail`` equals ``a`` (the warp
   before it has rung: a handoff, no lock), stores the doorbell ``b % ring`` (``st.relaxed.sys``:
   with the fence before it, a release) and hands on ``nv_sq_tail = b``. The doorbell only ever
   moves forward, and only over written entries.
4. **Completions.** The controller posts CQEs at its CQ tail in the order commands complete,
   which need not be SQ order. The queue posts exactly one CQE per command, so the ``t``-th CQE
   is read by the lane holding ticket ``t``: each lane polls its own CQ entry ``t % ring`` for
   the phase tag of pass ``t // ring`` (one coalesced PCIe read per warp per poll). A CQE that
   carries the lane's own CID completes it at once; any other is handed to that command's
   completion word (``nv_cpl``, device memory) by CID, which its own lane polls.
5. **CQ head doorbell, in ticket order.** Once every lane of the warp has read its CQE, the
   highest lane waits until ``nv_cq_head`` equals ``a`` (another handoff), stores the SQ head
   its own CQE's SQHD gave (``nv_sq_head``), the CQ head doorbell ``b % ring`` (the acquire
   loads of the CQEs come before it) and ``nv_cq_head = b``. The warp returns once every lane
   has its own completion.

Every wait is bounded: by the Runtime's deadline (or abort), with the timeout errors of
:mod:`kernels.layout`. No lock is taken, and nothing waits on a later ticket: the ``t``-th CQE is
posted only once ``t + 1`` commands have completed, and the commands rung are a prefix of the
tickets, so ticket ``t`` was rung by then and its lane is there to read it (a lane leaves only
after reading its CQE and its warp handing the CQ head on). ``docs/architecture.md`` has the
rest of the argument: why a stale CQE is never taken for a new one, why SQHD unwraps.
"""
from kernels import layout as L
from kernels.platform import WARP_SIZE, device_helper
from kernels.queue import (
    POLL_MAX_NS,
    POLL_MIN_NS,
    back_off,
    expired,
    wait_turn,
)
from kernels.sync import (
    fence_acq_rel_sys,
    ld_acquire_gpu,
    ld_acquire_sys,
    st_pair,
    st_relaxed_sys,
    st_release_gpu,
)
from kernels.warp import (
    ballot_sync,
    highest_lane,
    laneid,
    lowest_lane,
    nanosleep,
    popc,
    shfl_sync,
    syncwarp,
)

_CID_MASK = 0xFFFF
_STATUS_MASK = 0x7FFF
_FULL_WARP = (1 << WARP_SIZE) - 1
#: 16-byte stores per 64-byte SQE.
_SQE_PAIRS = L.NVME_SQE_WORDS // 2
#: Back-off bounds (ns) of the doorbell handoffs: polls of a device-memory word that the warp
#: before this one sets within microseconds (no PCIe read, so polls may be frequent).
HANDOFF_MIN_NS = 64
HANDOFF_MAX_NS = 2048


@device_helper
def command_id(h, ticket):
    """The ticket's 16-bit command id: its slot, plus a generation in the bits above the slot."""
    generations = 65536 // h.depth
    return ticket % h.depth + h.depth * ((ticket // h.depth) % generations)


@device_helper
def opcode_of(op):
    """The NVMe opcode of a gids request op: OP_WRITE -> Write (01h), OP_READ -> Read (02h)."""
    if op == L.OP_WRITE:
        return L.NVME_OP_WRITE
    return L.NVME_OP_READ


@device_helper
def sqe_fields(h, q, ticket, nsid_op, page):
    """The ticket's SQE: (word offset of its SQ entry, word 0, PRP1, SLBA). Word 0: opcode,
    CID, NSID (``nsid_op``: opcode | NSID << 8); PRP1: the slot's bounce buffer; the other
    words are 0 but word 6 (NLB - 1, the same for every command: :func:`sqe_pair`)."""
    slot = q * h.depth + ticket % h.depth
    page_bytes = h.page_words * 8
    word0 = ((nsid_op & 0xFF) | (command_id(h, ticket) << L.SQE_CID_SHIFT)
             | ((nsid_op >> 8) << L.SQE_NSID_SHIFT))
    return ((q * h.nv_ring + ticket % h.nv_ring) * L.NVME_SQE_WORDS, word0,
            h.nv_prp_base + slot * page_bytes, page * (page_bytes // L.NVME_LBA_BYTES))


@device_helper
def sqe_pair(h, k, word0, prp1, slba):
    """Words ``2k`` and ``2k + 1`` of an SQE of these fields."""
    if k == 0:
        return word0, 0                      # CDW0 | NSID, CDW2-3
    if k == 1:
        return 0, prp1                       # MPTR, PRP1
    if k == 2:
        return 0, slba                       # PRP2, CDW10-11
    return h.page_words * 8 // L.NVME_LBA_BYTES - 1, 0   # CDW12 (NLB - 1), CDW13-15


@device_helper
def write_sqes(h, mask, lane, q, ticket, nsid_op, page):
    """Collective: each lane of ``mask`` with ``ticket >= 0`` has its SQE written to SQ entry
    ``ticket % ring`` (plain stores; the doorbell's fence publishes them).

    In a full warp the four 16-byte pairs of the warp's 32 entries are spread over the lanes,
    pair ``p = 32 k + lane`` (of lane ``p // 4``'s entry) in store ``k``: a warp's tickets are
    consecutive, so each of the four stores covers 512 contiguous bytes (whole lines over PCIe,
    not 32 scattered pieces). A partial warp writes each lane's entry itself.
    """
    entry = -1
    word0 = prp1 = slba = 0
    if ticket >= 0:
        entry, word0, prp1, slba = sqe_fields(h, q, ticket, nsid_op, page)
    if mask == _FULL_WARP:
        for k in range(_SQE_PAIRS):
            p = k * WARP_SIZE + lane
            src = p // _SQE_PAIRS
            e = shfl_sync(mask, entry, src)
            w0 = shfl_sync(mask, word0, src)
            p1 = shfl_sync(mask, prp1, src)
            lba = shfl_sync(mask, slba, src)
            if e >= 0:
                f = p % _SQE_PAIRS
                lo, hi = sqe_pair(h, f, w0, p1, lba)
                st_pair(h.nv_sq, e + 2 * f, lo, hi)
    elif entry >= 0:
        for f in range(_SQE_PAIRS):
            lo, hi = sqe_pair(h, f, word0, prp1, slba)
            st_pair(h.nv_sq, entry + 2 * f, lo, hi)


@device_helper
def sq_has_room(h, q, ticket, deadline):
    """Wait until SQ entry ``ticket % ring`` may be written: the controller has fetched enough
    (``nv_sq_head``, from the CQEs' SQHD) that the tail past it stays within ring - 1 of the
    head. The slot's turn already implies it. False on timeout."""
    pause = POLL_MIN_NS
    polls = 0
    while ticket - ld_acquire_gpu(h.nv_sq_head, q) >= h.nv_ring - 1:
        polls += 1
        give_up, pause = back_off(h, deadline, polls, pause)
        if give_up:
            return False
    return True


@device_helper
def submit_warp(h, mask, q, ticket, want, array_id, page, op, deadline):
    """Steps 1 and 2 (collective over ``mask``): lanes with a ticket and ``want`` wait for their
    command slot and SQ entry, and the warp writes their SQEs. Per lane: True once its SQE is
    written, False if it has none (or its wait timed out). The signature of
    ``kernels.backend.io_submit``.

    ``op`` is ``OP_READ``, a Read command (the controller fills the slot's bounce buffer with
    page ``page`` of array ``array_id``), or ``OP_WRITE``, a Write (the caller has put the page
    in the bounce buffer; the controller stores it). The namespace is ``array_id + 1``: a
    write-back names its victim's array, which need not be the handle's.
    """
    lane = laneid()
    opcode = opcode_of(op)
    ok = False
    if ticket >= 0 and want:
        ok = wait_turn(h, q, ticket, deadline)
        if ok:
            ok = sq_has_room(h, q, ticket, deadline)
    write_sqes(h, mask, lane, q, ticket if ok else -1, opcode | ((array_id + 1) << 8), page)
    return ok


@device_helper
def publish_sq(h, q, first, end, deadline):
    """Step 3, by one lane after a ``syncwarp``: ring the SQ tail doorbell over tickets
    ``first .. end - 1`` once the warp before has rung over the tickets below ``first``.
    False on timeout (nothing rung)."""
    # One fence for the warp's SQEs (and a Write's bounce buffers), before the wait: the
    # handoff below then holds up the next warp only for two stores.
    fence_acq_rel_sys()
    pause = HANDOFF_MIN_NS
    polls = 0
    while ld_acquire_gpu(h.nv_sq_tail, q) != first:
        polls += 1
        if expired(h, deadline, polls):
            return False
        nanosleep(pause)
        pause = min(pause * 2, HANDOFF_MAX_NS)
    st_relaxed_sys(h.nv_db, 2 * q + L.DB_SQ_TAIL, end % h.nv_ring)
    st_release_gpu(h.nv_sq_tail, q, end)
    return True


@device_helper
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


@device_helper
def wait_warp(h, mask, lane, q, ticket, submitted, deadline):
    """Collective steps 3 to 5 for the lanes of ``mask``: (completed, status, source) each.

    ``ticket`` is the lane's ticket (-1 for none) and ``submitted`` whether its SQE is written.
    ``status`` is a gids STATUS_* code; for a Read the data is in the slot's bounce buffer
    (``source`` = SOURCE_STAGING), where the controller's DMA put it; for a Write the controller
    has taken the bounce buffer's bytes once the command completed. A lane whose command was
    not rung (its SQE, or one of a lower ticket of the warp, was not written: a timeout) gets
    completed False.
    """
    holders = ballot_sync(mask, ticket >= 0)
    if holders == 0:
        return False, 0, L.SOURCE_STAGING
    ring = h.nv_ring
    first = shfl_sync(mask, ticket, lowest_lane(holders))
    # The doorbell may cover the warp's tickets only up to the first one not written.
    ready = ballot_sync(mask, submitted)
    holes = holders & ~ready
    if holes != 0:
        ready &= (1 << lowest_lane(holes)) - 1
    n = popc(ready)
    rung = False
    last_lane = 0
    if n != 0:
        last_lane = highest_lane(ready)
        syncwarp(mask)   # every lane's SQE stores before the ringing lane's fence
        ok = 0
        if lane == last_lane:
            ok = 1 if publish_sq(h, q, first, first + n, deadline) else 0
        rung = shfl_sync(mask, ok, last_lane) != 0 and ((ready >> lane) & 1) != 0

    cid = command_id(h, ticket) if rung else -1
    slot = q * h.depth + ticket % h.depth
    cqe = (q * ring + ticket % ring) * L.NVME_CQE_WORDS + L.CQE_DW2_DW3
    phase = 1 - (ticket // ring) % 2     # the tag of pass ticket // ring: 1, 0, 1, ...
    to_read = rung        # the lane's CQ entry is still to be read
    missed = False        # ... and never will be (timeout): the CQ head must not pass it
    waiting = rung        # the lane's own completion is still to come
    to_advance = rung and lane == last_lane   # this lane hands the CQ head on
    fetched = 0           # SQEs the controller had fetched when it posted this lane's CQE
    completed = False
    status = 0
    pause = POLL_MIN_NS
    polls = 0
    while True:
        progressed = False
        if to_read:
            w = ld_acquire_sys(h.nv_cq, cqe)
            if (w >> L.CQE_PHASE_SHIFT) & 1 == phase:
                to_read = False
                progressed = True
                c = (w >> L.CQE_CID_SHIFT) & _CID_MASK
                s = (w >> L.CQE_STATUS_SHIFT) & _STATUS_MASK
                # SQHD is a ring position; the controller had fetched this command and at most
                # depth - 1 after it, so the count is within a ring above ticket + 1.
                fetched = ticket + 1 + ((w & 0xFFFF) - (ticket + 1) % ring + ring) % ring
                if c == cid:
                    waiting = False
                    completed = True
                    status = gids_status(s)
                else:
                    st_release_gpu(h.nv_cpl, q * h.depth + c % h.depth,
                                   c | (s << L.CPL_STATUS_SHIFT) | L.CPL_VALID)
        if waiting:
            w = ld_acquire_gpu(h.nv_cpl, slot)
            if (w & L.CPL_VALID) != 0 and (w & _CID_MASK) == cid:
                waiting = False
                completed = True
                status = gids_status((w >> L.CPL_STATUS_SHIFT) & _STATUS_MASK)
                progressed = True
        unread = ballot_sync(mask, to_read or missed)
        if to_advance and unread == 0 and ld_acquire_gpu(h.nv_cq_head, q) == first:
            # SQHD only grows along the CQ, and this lane's CQE is the warp's last.
            st_release_gpu(h.nv_sq_head, q, fetched)
            st_relaxed_sys(h.nv_db, 2 * q + L.DB_CQ_HEAD, (first + n) % ring)
            st_release_gpu(h.nv_cq_head, q, first + n)
            to_advance = False
            progressed = True
        busy = to_read or waiting or to_advance
        if ballot_sync(mask, busy) == 0:
            break
        polls += 1
        if busy and expired(h, deadline, polls):
            missed = to_read
            if to_read or to_advance:
                # The queue pair is stuck past this ticket: fail the lane even if its own
                # command completed, so that the kernel reports it and the Runtime resets it.
                completed = False
            to_read = False
            waiting = False
            to_advance = False
        if ballot_sync(mask, progressed) != 0:
            pause = POLL_MIN_NS
        else:
            nanosleep(pause)
            pause = min(pause * 2, POLL_MAX_NS)
    # The SQ head and completion words above are stored before any lane hands its slot on.
    syncwarp(mask)
    return completed, status, L.SOURCE_STAGING
