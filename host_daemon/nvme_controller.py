"""``NvmeController``: an emulated NVMe controller serving the GPU's queue pairs.

It does what a drive does with the rings the kernels write (``kernels/nvme.py``): each of its
``njit(nogil=True)`` threads owns some queue pairs (queue ``q`` is served by thread
``q % n_threads``, like a drive's per-queue fetch engine, so every ring has one consumer) and,
for each:

1. watches the SQ tail doorbell (acquire load of the word that stands for the BAR register);
2. fetches every SQE from its SQ head up to the tail, in ring order, up to BATCH of them per
   visit (one batch: one clock read is their arrival time), and decodes it: opcode, command
   id, namespace, starting LBA, block count, PRP1;
3. executes it: namespace ``n`` is the byte range of the Runtime's array ``n - 1`` (its row of
   the store table), in 512-byte logical blocks of the array's store. A Read (02h) reads them
   from the store and writes the data to the host address in PRP1 (a DMA into host memory); a
   Write (01h) reads the data at PRP1 (a DMA from host memory: the bounce buffer the GPU copied
   a dirty page into) and stores it with the host daemon's own ``write_page``;
4. completes it: a 16-byte CQE at the CQ tail carrying the SQ head, SQ id, command id, status
   and the phase tag of the current pass over the CQ ring (1, then 0, ...), published by one
   release store of the word holding the phase. A CQE is never written over one the host has not
   consumed: the CQ head doorbell says which it has (read again only when the CQ looks full).

With an SSD model (``model``) a completion is posted no earlier than the model's completion
time, from a min-heap by due time, exactly as the host daemon does (:mod:`host_daemon.daemon`):
commands then complete out of order, as they do on a drive. A batch is timed once it has run:
each command submitted to the model on its own, in fetch order, at the batch's arrival time,
under one hold of the model's lock for the batch. ``jitter_us`` adds a random delay
to each command (a test hook: shuffled completions without a model). With a trace writer each
command is recorded (store offset, size, queue, fetch time, completion time, and the op:
``OP_READ`` or ``OP_WRITE``, as the host daemon records its requests). The SSD model has no
write path (``docs/ssd_models.md``), so a Write is timed like a Read of the same size, as the
host daemon times its write requests.

What a real drive does differently: it DMAs the data straight into GPU memory (BaM maps the
cache into the drive's reach with GPUDirect/peer-to-peer), and fetches SQEs from and writes
CQEs to wherever the rings live. Without GPUDirect the host cannot write GPU memory from a CPU
thread, so here PRP1 is the bus address of a per-command bounce buffer in mapped host memory
(the command slot's staging page) and the GPU thread copies it into the cache slot.

Limits (checked; a command outside them completes with an error status): opcodes 02h (Read)
and 01h (Write) only; one cache page per command, LBA-aligned to it (the controller's memory
page size, CC.MPS, is taken as the page size, so PRP1 alone always describes the buffer and
PRP2 is 0); PRP1 must lie in the DMA window (the staging buffer), as an IOMMU would demand.

Cost (``python -m workloads.controller_bench``, which plays the GPU's part with CPU threads):
what a thread spends per command beyond the 4 KiB copy is kept small and, above all, private,
so that threads do not slow each other down: no lock per command (the model's is taken once per
batch; taken per command by every thread it serialised them), no word two threads write on one
cache line (``private_array``), two clock reads per batch, no reference counting
(``_per_command``), and no read of the CQ head doorbell per CQE.
"""
import numpy as np

from host_daemon.daemon import (
    _CRASH,
    _QUEUED,
    BATCH,
    NAP_US,
    P_DUE,
    P_ENTRY,
    P_OFFSET,
    P_OP,
    P_ORDER,
    P_SEEN,
    P_TICKET,
    SPIN_POLLS,
    SUBMIT_BATCH,
    HostDaemon,
    _drain,
    _emulation,
    _memcpy,
    _memset,
    _now_ns,
    _on_ring,
    _record,
    _ring_page,
    _usleep,
    end_pass,
    engine_room,
    fail_ring,
    njit_without_refcounts,
    page_io,
    park,
    read_on_spot,
    reap_ring,
    ring_usable,
)
from host_daemon.minheap import heap_pop, heap_push
from host_daemon.ssd_model import SsdModel, model_lock, model_submit, model_unlock
from host_daemon.stores import T_ADDRESS, T_NBYTES, T_OFFSET
from host_daemon.sync import load_acquire, private_array, store_release
from host_daemon.uring import S_IN_FLIGHT, S_UNSUBMITTED, ring_room, ring_submit
from kernels import layout as L

# Columns of a thread's per-queue state (one row per queue it serves).
Q_SQ_HEAD = 0     # next SQ ring position to fetch
Q_CQ_TAIL = 1     # CQEs posted (a count: position = count % ring, phase = 1 - pass % 2)
Q_FETCHED = 2     # SQEs fetched (a count: the fetch order of each command)
Q_LAST_DONE = 3   # fetch order of the last command completed (to count out-of-order ones)
Q_CQ_HEAD = 4     # the CQ head doorbell as last read (re-read only when the CQ looks full)
Q_COLUMNS = 5

# The per-command functions are compiled without Numba's reference counting (see
# ``daemon.njit_without_refcounts``: with it, a third of a thread's samples were atomic adds).
_per_command = njit_without_refcounts

# Columns of a thread's batch of held commands (executed, completion not yet posted).
H_CID = 0
H_STATUS = 1
H_OFFSET = 2
H_NBYTES = 3
H_ORDER = 4
H_OP = 5
H_DUE = 6
H_ROW = 7         # its row of the engine's pend table when its I/O is in the ring (H_STATUS:
                  # _QUEUED)
H_COLUMNS = 8

#: Counters per thread (``NvmeController.counters``).
C_COMMANDS = 0    # commands completed
C_ERRORS = 1      # of which with a status other than success
C_REORDERED = 2   # completions posted before those of commands fetched earlier
C_CQ_FULL = 3     # times a completion had to wait for CQ space
C_WRITES = 4      # Write commands completed (with any status)
N_COUNTERS = 5


@_per_command
def check_command(table, opcode, nsid, slba, nlb, prp1, page_size, dma_base, dma_bytes):
    """A decoded command's NVMe status if it cannot run (else success), and its array, page,
    store byte offset and bytes."""
    if opcode != L.NVME_OP_READ and opcode != L.NVME_OP_WRITE:
        return L.NVME_SC_INVALID_OPCODE, 0, 0, 0, 0
    if nsid < 1 or nsid > table.shape[0] or table[nsid - 1, T_NBYTES] <= 0:
        return L.NVME_SC_INVALID_NS, 0, 0, 0, 0
    array_id = nsid - 1
    start = slba * L.NVME_LBA_BYTES
    nbytes = nlb * L.NVME_LBA_BYTES
    if nbytes != page_size or start % page_size != 0:
        return L.NVME_SC_INVALID_FIELD, 0, 0, 0, 0
    if start < 0 or start >= table[array_id, T_NBYTES]:
        return L.NVME_SC_LBA_RANGE, 0, 0, 0, 0
    if prp1 % 4 != 0 or prp1 < dma_base or prp1 + nbytes > dma_base + dma_bytes:
        return L.NVME_SC_DATA_XFER_ERROR, 0, 0, 0, 0
    return (L.NVME_SC_SUCCESS, array_id, start // page_size, table[array_id, T_OFFSET] + start,
            nbytes)


@_per_command
def execute(table, opcode, nsid, slba, nlb, prp1, page_size, dma_base, dma_bytes, file_io,
            clock):
    """Run one decoded command. Returns (NVMe status, store byte offset, bytes).

    A Read fills the page at PRP1 from the store; a Write stores the page at PRP1 (only the
    array's own bytes: the tail of its last page is not written), both through the host
    daemon's :func:`~host_daemon.daemon.page_io` (which finds the page's file, striped or not,
    and counts the I/O in the thread's per-file counters ``file_io``). A store that refuses a write
    (EIO) completes it with Write Fault (280h), one that takes fewer bytes with 7C1h (vendor
    specific, as the short read's 7C0h); ``kernels.nvme.gids_status`` maps them back to the
    host path's STATUS_IO_ERROR and STATUS_SHORT_WRITE.
    """
    status, array_id, page, offset, nbytes = check_command(table, opcode, nsid, slba, nlb, prp1,
                                                           page_size, dma_base, dma_bytes)
    if status != L.NVME_SC_SUCCESS:
        return status, 0, 0
    start = page * page_size
    op = L.OP_WRITE if opcode == L.NVME_OP_WRITE else L.OP_READ
    status, source = page_io(table, array_id, page, page_size, prp1, op, file_io, clock)
    if opcode == L.NVME_OP_WRITE:
        return _nvme_status(status, opcode), offset, nbytes
    if status == L.STATUS_OK and source != L.SOURCE_STAGING:
        # A zero-copy store: the host daemon would only say where the page is; a drive always
        # transfers the data, so copy it from the store's buffer.
        n = min(page_size, table[array_id, T_NBYTES] - start)
        _memcpy(prp1, table[array_id, T_ADDRESS] + source * 8, n)
        if n < page_size:
            _memset(prp1 + n, 0, page_size - n)
    return _nvme_status(status, opcode), offset, nbytes


@_per_command
def _nvme_status(status, opcode):
    """The NVMe completion status of a store's STATUS_* answer to a Read or Write (the inverse
    of ``kernels.nvme.gids_status``); ``_CRASH`` passes through."""
    if status == _CRASH:
        return _CRASH
    if status == L.STATUS_OK:
        return L.NVME_SC_SUCCESS
    if status == L.STATUS_IO_ERROR:
        return L.NVME_SC_WRITE_FAULT if opcode == L.NVME_OP_WRITE else L.NVME_SC_READ_ERROR
    if status == L.STATUS_SHORT_WRITE:
        return L.NVME_SC_SHORT_WRITE
    if status == L.STATUS_SHORT_READ:
        return L.NVME_SC_SHORT_READ
    return L.NVME_SC_LBA_RANGE


@_per_command
def post_cqe(cq, db, ring, q, qs, cid, status, fetch_order, op, counters):
    """Write command ``cid``'s CQE to queue ``q``'s CQ; False if the CQ is full (try later).

    ``op`` (OP_READ or OP_WRITE) is for the counters only: a CQE does not say."""
    tail = qs[Q_CQ_TAIL]
    pos = tail % ring
    if (pos + 1) % ring == qs[Q_CQ_HEAD]:
        # Full as far as the last read of the CQ head doorbell knows: read it again. Not read
        # per CQE: the host writes that word all the time, so each read would miss the cache,
        # and an old value errs on the safe side (the head only moves forward, so the CQ has
        # at least the room an old value shows).
        qs[Q_CQ_HEAD] = load_acquire(db, 2 * q + L.DB_CQ_HEAD)
        if (pos + 1) % ring == qs[Q_CQ_HEAD]:
            counters[C_CQ_FULL] += 1
            return False
    phase = 1 - (tail // ring) % 2
    word = (qs[Q_SQ_HEAD] | (q << L.CQE_SQID_SHIFT) | (cid << L.CQE_CID_SHIFT)
            | (phase << L.CQE_PHASE_SHIFT) | (status << L.CQE_STATUS_SHIFT))
    rec = (q * ring + pos) * L.NVME_CQE_WORDS
    # Counted before the CQE is published (the release store below orders these first): once a
    # kernel has seen its completions and returned, the host reads counters that include them.
    counters[C_COMMANDS] += 1
    if op == L.OP_WRITE:
        counters[C_WRITES] += 1
    if status != L.NVME_SC_SUCCESS:
        counters[C_ERRORS] += 1
    if fetch_order < qs[Q_LAST_DONE]:
        counters[C_REORDERED] += 1
    else:
        qs[Q_LAST_DONE] = fetch_order
    cq[rec + L.CQE_DW0_DW1] = 0
    store_release(cq, rec + L.CQE_DW2_DW3, word)   # phase tag last: the CQE is complete
    qs[Q_CQ_TAIL] = tail + 1
    return True


@_per_command
def _post_due(cq, db, ring, depth, n_threads, state, emu, trace, counters, now):
    """Post every held completion whose due time has come (one that finds its CQ full goes
    back on the heap). Returns how many were posted."""
    n = 0
    while emu.size[0] > 0 and emu.due[0] <= now:
        _, slot, size = heap_pop(emu.due, emu.entry, emu.size[0])
        emu.size[0] = size
        q = slot // depth
        qs = state[q // n_threads]
        if not post_cqe(cq, db, ring, q, qs, emu.source[slot], emu.status[slot], emu.ticket[slot],
                        emu.op[slot], counters):
            emu.size[0] = heap_push(emu.due, emu.entry, emu.size[0], now + 1000, slot)
            break
        if trace.on:
            _record(trace, q, emu.offset[slot], emu.nbytes[slot], emu.seen[slot],
                    emu.ready[slot], emu.device[slot], now, emu.op[slot])
        n += 1
    return n


@_per_command
def _complete_held(held, n, q, qs, cq, db, ring, depth, seen, emu, trace, counters, clock,
                   jitter_ns, rng, pend):
    """Complete a batch of ``n`` executed commands of queue ``q`` whose completions are held
    (SSD model or jitter): time them, then post each now or, if not yet due, put it on the heap.

    The model is locked once for the whole batch: each command is still submitted on its own,
    in fetch order and at the batch's arrival time ``seen``, but threads no longer take turns
    on the model's lock (and its cache lines) for every command, which serialised them."""
    if emu.on:
        model_lock(emu.state)
        for i in range(n):
            held[i, H_DUE] = 0
            if held[i, H_STATUS] == L.NVME_SC_SUCCESS or held[i, H_STATUS] == _QUEUED:
                # Reads and writes alike: the model has no write path (docs/ssd_models.md).
                held[i, H_DUE] = model_submit(emu.state, emu.params, seen, held[i, H_OFFSET],
                                              held[i, H_NBYTES])
        model_unlock(emu.state)
    else:
        for i in range(n):
            held[i, H_DUE] = 0
    if jitter_ns > 0:
        for i in range(n):
            x = rng[0]   # xorshift64
            x ^= (x << 13) & 0x7FFFFFFFFFFFFFFF
            x ^= x >> 7
            x ^= (x << 17) & 0x7FFFFFFFFFFFFFFF
            rng[0] = x
            held[i, H_DUE] = max(held[i, H_DUE], seen + x % jitter_ns)
    now = _now_ns(clock)
    for i in range(n):
        cid = held[i, H_CID]
        due = held[i, H_DUE]
        if held[i, H_STATUS] == _QUEUED:   # in the engine's ring: due when its CQE comes
            pend[held[i, H_ROW], P_DUE] = due
            continue
        device = max(due, seen)   # a failed command has no model time (due 0)
        posted = False
        if due <= now:
            posted = post_cqe(cq, db, ring, q, qs, cid, held[i, H_STATUS], held[i, H_ORDER],
                              held[i, H_OP], counters)
            if posted and trace.on:
                # The batch's host part (run, then timed) ended at ``now``; the device's at
                # ``due``.
                _record(trace, q, held[i, H_OFFSET], held[i, H_NBYTES], seen, now, device, now,
                        held[i, H_OP])
        if not posted:
            # The heap's fields as the controller uses them: source = CID, ticket = the
            # command's place in SQ order.
            park(emu, q * depth + cid % depth, max(due, now), held[i, H_STATUS], cid,
                 held[i, H_ORDER], seen, now, device, held[i, H_OFFSET],
                 held[i, H_NBYTES], held[i, H_OP])


@_per_command
def _complete_command(pend, row, status, now, ctx):
    """Post the CQE of the command in ``pend``'s row ``row``, ended with ``status`` at ``now``,
    or park it (its modelled time not yet come, or its CQ full): the controller's ``complete``
    of :func:`~host_daemon.daemon.reap_ring` and :func:`~host_daemon.daemon.fail_ring`.
    ``ctx``: (cq, db, ring, depth, page_size, n_threads, state, emu, trace, counters)."""
    cq, db, ring, depth, page_size, n_threads, state, emu, trace, counters = ctx
    op = pend[row, P_OP]
    nvme = _nvme_status(status, L.NVME_OP_WRITE if op == L.OP_WRITE else L.NVME_OP_READ)
    q = pend[row, P_ENTRY]
    cid = pend[row, P_TICKET]
    seen = pend[row, P_SEEN]
    due = pend[row, P_DUE]
    order = pend[row, P_ORDER]
    offset = pend[row, P_OFFSET]
    device = max(due, now) if emu.on else now
    if (emu.on and due > now) or not post_cqe(cq, db, ring, q, state[q // n_threads], cid,
                                               nvme, order, op, counters):
        park(emu, q * depth + cid % depth, max(due, now), nvme, cid, order, seen, now,
             device, offset, page_size, op)
    elif trace.on:
        _record(trace, q, offset, page_size, seen, now if emu.on else seen,
                device, now, op)


@_per_command
def serve_queue_pairs(my_queues, state, sq, cq, db, ring, depth, page_size, dma_base, dma_bytes,
                      table, n_threads, stop, served, counters, emu, trace, clock, jitter_ns, rng,
                      held, file_io, uring, pend, capacity):
    """One controller thread's loop (:func:`_serve_pairs`) until ``stop[0]`` becomes non-zero,
    then the wait for its ring's I/O still in flight."""
    _serve_pairs(my_queues, state, sq, cq, db, ring, depth, page_size, dma_base, dma_bytes,
                 table, n_threads, stop, served, counters, emu, trace, clock, jitter_ns, rng,
                 held, file_io, uring, pend, capacity)
    if uring.on:
        _drain(uring, clock)


@_per_command
def _serve_pairs(my_queues, state, sq, cq, db, ring, depth, page_size, dma_base, dma_bytes,
                 table, n_threads, stop, served, counters, emu, trace, clock, jitter_ns, rng,
                 held, file_io, uring, pend, capacity):
    """One controller thread's loop over ``my_queues`` until ``stop[0]`` becomes non-zero.

    Per queue, it takes the commands the SQ tail doorbell shows, up to BATCH of them, as one
    batch: one clock read gives their arrival time (the trace's issue time, the model's
    arrival), and when completions are held they are timed together (:func:`_complete_held`);
    otherwise each command's CQE is posted as soon as it has run (``held``: the thread's
    BATCH x H_COLUMNS scratch for them). With the io_uring engine (``uring.on``) a Read or
    Write of a file store becomes an SQE (batched submits, as the host daemon's), and its CQE
    is posted when the engine's CQE arrives (:func:`~host_daemon.daemon.reap_ring`); a thread
    whose ring is full fetches no more commands until CQEs free it. Under emulation a command
    counts against ``capacity`` (the engine's concurrency: 1 for a thread of the ``threads``
    engine, the ring's entries for io_uring) until its modelled completion is posted, as in the
    host daemon (:func:`host_daemon.daemon.serve_queues`): the emulated drives get what the
    engine could give them, not what an ideal host would."""
    idle = 0
    timed = emu.on or trace.on or jitter_ns > 0
    hold = emu.on or jitter_ns > 0
    # _complete_command's context: what posting a command the engine ended needs.
    command_ctx = (cq, db, ring, depth, page_size, n_threads, state, emu, trace, counters)
    while load_acquire(stop, 0) == 0:
        progressed = False
        now = _now_ns(clock) if timed or emu.size[0] > 0 else 0
        if emu.size[0] > 0 and _post_due(cq, db, ring, depth, n_threads, state, emu, trace,
                                         counters, now) > 0:
            progressed = True
        for k in range(my_queues.shape[0]):
            if uring.on and uring.state[S_IN_FLIGHT] > 0 and reap_ring(
                    uring, pend, table, file_io, clock, _complete_command, command_ctx) > 0:
                progressed = True
            q = my_queues[k]
            tail = load_acquire(db, 2 * q + L.DB_SQ_TAIL)
            if state[k, Q_SQ_HEAD] == tail:
                continue
            qs = state[k]
            # The commands up to this doorbell value arrived together: one clock read for all.
            seen = _now_ns(clock) if timed else 0
            # Completions that fell due during this pass are posted now, not at the next pass
            # (a pass over many busy queues takes long enough to post them late).
            if timed and emu.size[0] > 0 and emu.due[0] <= seen:
                _post_due(cq, db, ring, depth, n_threads, state, emu, trace, counters, seen)
            limit = engine_room(BATCH, uring.on, ring_room(uring), emu.on, emu.size[0]
                                + uring.state[S_IN_FLIGHT] + uring.state[S_UNSUBMITTED],
                                capacity)
            n = 0
            while n < limit and qs[Q_SQ_HEAD] != tail:
                head = qs[Q_SQ_HEAD]
                # Fetch (the doorbell's acquire load ordered the SQE's bytes before it) ...
                sqe = (q * ring + head) * L.NVME_SQE_WORDS
                cdw0 = sq[sqe + L.SQE_CDW0_NSID]
                prp1 = sq[sqe + L.SQE_PRP1]
                slba = sq[sqe + L.SQE_SLBA]
                nlb = (sq[sqe + L.SQE_CDW12_13] & 0xFFFF) + 1
                qs[Q_SQ_HEAD] = (head + 1) % ring
                order = qs[Q_FETCHED]
                qs[Q_FETCHED] = order + 1
                # ... decode ...
                opcode = cdw0 & 0xFF
                cid = (cdw0 >> L.SQE_CID_SHIFT) & 0xFFFF
                nsid = (cdw0 >> L.SQE_NSID_SHIFT) & 0xFFFFFFFF
                # The op a trace record and the counters name (an invalid opcode: a read).
                op = L.OP_WRITE if opcode == L.NVME_OP_WRITE else L.OP_READ
                # ... execute (or hand to the engine) ...
                row = k * depth + cid % depth
                status, array_id, page, offset, nbytes = check_command(
                    table, opcode, nsid, slba, nlb, prp1, page_size, dma_base, dma_bytes)
                if (ring_usable(uring) and status == L.NVME_SC_SUCCESS
                        and _on_ring(table, array_id, page, page_size, op)):
                    start = seen if timed else _now_ns(clock)
                    if op == L.OP_READ and read_on_spot(table, array_id, page, page_size, prp1,
                                                        pend, row, file_io, start, clock):
                        status = L.NVME_SC_SUCCESS
                    else:
                        _ring_page(uring, pend, row, table, array_id, page, page_size, prp1,
                                   -1, q, cid, start, op)
                        pend[row, P_ORDER] = order
                        status = _QUEUED
                else:
                    status, offset, nbytes = execute(table, opcode, nsid, slba, nlb, prp1,
                                                     page_size, dma_base, dma_bytes, file_io, clock)
                if status == _CRASH:
                    return
                # ... and complete: now, or (held) once the batch is timed.
                if hold:
                    held[n, H_CID] = cid
                    held[n, H_STATUS] = status
                    held[n, H_OFFSET] = offset
                    held[n, H_NBYTES] = nbytes
                    held[n, H_ORDER] = order
                    held[n, H_OP] = op
                    held[n, H_ROW] = row
                elif status == _QUEUED:
                    pass   # its CQE is posted when the engine's arrives
                elif post_cqe(cq, db, ring, q, qs, cid, status, order, op, counters):
                    if trace.on:
                        # No model: the store is the device; the host has no part of its own.
                        done = _now_ns(clock)
                        _record(trace, q, offset, nbytes, seen, seen, done, done, op)
                else:   # the CQ is full: post it from the heap once the host makes room
                    park(emu, q * depth + cid % depth, now, status, cid, order, seen, seen,
                         seen, offset, nbytes, op)
                n += 1
            if hold:
                _complete_held(held, n, q, qs, cq, db, ring, depth, seen, emu, trace, counters,
                               clock, jitter_ns, rng, pend)
            if uring.on and uring.state[S_UNSUBMITTED] >= SUBMIT_BATCH and ring_submit(
                    uring) < 0:
                fail_ring(uring, pend, clock, _complete_command, command_ctx)
            served[0] += n
            progressed = True
        if uring.on and end_pass(uring, progressed, emu, clock) < 0:
            fail_ring(uring, pend, clock, _complete_command, command_ctx)
        if progressed or emu.size[0] > 0 or (uring.on and uring.state[S_IN_FLIGHT] > 0):
            idle = 0
        else:
            idle += 1
            if idle > SPIN_POLLS:
                _usleep(NAP_US)


class NvmeController(HostDaemon):
    """Emulated NVMe controller: N threads serving the queue pairs of one Runtime.

    Parameters
    ----------
    sq, cq, doorbells : numpy.ndarray of int64
        Host views of the SQ rings (``n_queues * ring`` 64-byte entries), the CQ rings
        (``n_queues * ring`` 16-byte entries) and the doorbells (``2 * n_queues`` words: SQ tail,
        CQ head), laid out as in :mod:`gids.layout` (``NVME_*``, ``SQE_*``, ``CQE_*``).
    staging : numpy.ndarray
        Host view of the bounce buffers: the DMA window PRP1 must point into.
    table : numpy.ndarray of int64
        The store table; namespace ``n`` is row ``n - 1``.
    n_queues, depth, page_size, n_threads
        Queue pairs, command slots per queue pair (each ring has ``depth + 1`` entries), bytes
        per command, controller threads.
    model : host_daemon.ssd_model.SsdModel, optional
        Time each command by this SSD array (real-time emulation).
    trace_writer : host_daemon.trace.TraceWriter, optional
        Record every command.
    jitter_us : float
        Delay each completion by a random time up to this (a test hook for out-of-order
        completions).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    REGISTERS_STAGING = False

    def __init__(self, sq, cq, doorbells, staging, table, n_queues, depth, page_size, n_threads,
                 model=None, trace_writer=None, jitter_us=0.0, engine="io_uring",
                 engine_depth=256):
        if not 1 <= depth <= L.NVME_MAX_DEPTH:
            raise ValueError(f"gids: NVMe queue depth must be 1..{L.NVME_MAX_DEPTH}, got {depth}")
        super().__init__(sq, cq, staging, table, n_queues, depth, page_size, n_threads,
                         model=model, trace_writer=trace_writer, engine=engine,
                         engine_depth=engine_depth)
        # Held completions (model, jitter, or a full CQ) wait in the heap whether or not a model
        # is on, so every thread gets full-size heap arrays; ``on`` still says "model".
        stand_in = model if model is not None else SsdModel("ideal")
        self._emu = [_emulation(stand_in, n_queues * depth)._replace(on=int(model is not None))
                     for _ in range(self.n_threads)]
        self.doorbells = doorbells
        self.ring = depth + 1
        self.jitter_ns = int(jitter_us * 1000)
        # Written per command by one thread each: memory of their own (no false sharing).
        self._counters = [private_array(N_COUNTERS) for _ in range(self.n_threads)]
        self._rng = [private_array(1) for _ in range(self.n_threads)]
        for k, rng in enumerate(self._rng):
            rng[0] = 0x9E3779B97F4A7C1 + k
        self._held = [private_array((BATCH, H_COLUMNS)) for _ in range(self.n_threads)]

    def _queue_state(self, n):
        return private_array((n, Q_COLUMNS))

    def _serve(self, k, my_queues, state):
        serve_queue_pairs(my_queues, state, self.sq, self.cq, self.doorbells, self.ring,
                          self.depth, self.page_size, self.staging.ctypes.data,
                          self.staging.nbytes, self.table, self.n_threads, self._stop,
                          self._served[k], self._counters[k], self._emu[k], self._rings[k],
                          self._clocks[k], self.jitter_ns, self._rng[k], self._held[k],
                          self._file_io[k], *self._engine_args(k))

    @property
    def counters(self):
        """Since start: ``commands`` completed, ``errors`` among them, ``reordered`` (posted
        before a command fetched earlier), ``cq_full`` (waits for CQ space), ``writes`` (Write
        commands completed, with any status; the rest were Reads or invalid)."""
        total = np.sum(self._counters, axis=0)
        return {"commands": int(total[C_COMMANDS]), "errors": int(total[C_ERRORS]),
                "reordered": int(total[C_REORDERED]), "cq_full": int(total[C_CQ_FULL]),
                "writes": int(total[C_WRITES])}
