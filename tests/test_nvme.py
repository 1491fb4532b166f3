"""The direct NVMe path (``Runtime(backend="nvme")``): the emulated controller on its own, driven
by hand-written commands, then kernels driving it through the rings in the simulator: ring
wrap-around and phase flips, full queues, more waiting threads than queue entries, completions
out of order, SSD-model timing and traces, errors, and writes (dirty pages evicted as NVMe Write
commands). Every value read, and every byte written, is checked against numpy.

The simulator is sequentially consistent: these check the protocol's logic; the ``gpu`` tests
check it under the GPU's memory model.
"""
import textwrap
import threading
import time

import numpy as np
import pytest
from numba import cuda

import gids
from gids import layout as L
from gids._platform import host_view
from gids.backends import NvmeQueues
from host_daemon.nvme_controller import NvmeController
from host_daemon.ssd_model import SsdModel
from host_daemon.stores import T_COLUMNS
from host_daemon.trace import TraceWriter
from tests.helpers import (
    Warp32Script,
    check_warp32,
    random_file,
    started_early,
    write_then_read,
)

PAGE = 512
BLOCKS = PAGE // L.NVME_LBA_BYTES


# ------------------------------------------------------------------ the controller alone

class _Driver:
    """A host-side stand-in for the kernels' driver: writes SQEs, rings doorbells, reads CQEs."""

    def __init__(self, data, n_queues=2, depth=2, jitter_us=0.0, model=None, store=None,
                 trace_writer=None):
        self.ring = depth + 1
        self.depth = depth
        self.sq = np.zeros(n_queues * self.ring * L.NVME_SQE_WORDS, dtype=np.int64)
        self.cq = np.zeros(n_queues * self.ring * L.NVME_CQE_WORDS, dtype=np.int64)
        self.db = np.zeros(2 * n_queues, dtype=np.int64)
        self.bounce = np.zeros(n_queues * depth * PAGE, dtype=np.uint8)
        self.table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
        self.store = gids.MemoryStore(data, zero_copy=False) if store is None else store
        self.table[0] = self.store.table_row(0, data.nbytes)
        self.tail = [0] * n_queues
        self.cq_head = [0] * n_queues
        self.ctrl = NvmeController(self.sq, self.cq, self.db, self.bounce, self.table, n_queues,
                                   depth, PAGE, 1, model=model, jitter_us=jitter_us,
                                   trace_writer=trace_writer)

    def submit(self, q, cid, slba, slot, opcode=L.NVME_OP_READ, nsid=1, nlb=BLOCKS, prp1=None,
               ring=True):
        """Write an SQE at queue ``q``'s tail and (unless ``ring`` is False) ring its doorbell."""
        e = (q * self.ring + self.tail[q]) * L.NVME_SQE_WORDS
        self.sq[e:e + L.NVME_SQE_WORDS] = 0
        self.sq[e + L.SQE_CDW0_NSID] = opcode | (cid << L.SQE_CID_SHIFT) | (nsid << L.SQE_NSID_SHIFT)
        self.sq[e + L.SQE_PRP1] = self.bounce.ctypes.data + slot * PAGE if prp1 is None else prp1
        self.sq[e + L.SQE_SLBA] = slba
        self.sq[e + L.SQE_CDW12_13] = nlb - 1
        self.tail[q] = (self.tail[q] + 1) % self.ring
        if ring:
            self.ring_sq(q)

    def ring_sq(self, q):
        self.db[2 * q + L.DB_SQ_TAIL] = self.tail[q]

    def cqe(self, q, pos):
        w = int(self.cq[(q * self.ring + pos) * L.NVME_CQE_WORDS + L.CQE_DW2_DW3])
        return {"sqhd": w & 0xFFFF, "sqid": (w >> 16) & 0xFFFF, "cid": (w >> 32) & 0xFFFF,
                "phase": (w >> 48) & 1, "status": (w >> 49) & 0x7FFF}

    def reap(self, q, n, timeout=20.0):
        """The next ``n`` CQEs of queue ``q``, waiting for each by its phase tag."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            head = self.cq_head[q]
            c = self.cqe(q, head % self.ring)
            if c["phase"] == 1 - (head // self.ring) % 2:
                out.append(c)
                self.cq_head[q] = head + 1
                self.db[2 * q + L.DB_CQ_HEAD] = (head + 1) % self.ring
            else:
                assert time.monotonic() < deadline, f"no CQE {len(out)} of {n}"
                time.sleep(1e-4)
        return out


def test_controller_wraps_rings_flips_phases_and_reports_sq_head():
    data = np.random.default_rng(0).integers(0, 255, 16 * PAGE, dtype=np.uint8)
    d = _Driver(data, n_queues=2, depth=2)        # rings of 3 entries: wrap every 3 commands
    with d.ctrl:
        phases = []
        for k in range(10):                        # 10 commands on queue 1: 3+ passes
            page = (7 * k) % 16
            d.submit(1, cid=k % 2 + 2 * (k // 2 % 4), slba=page * BLOCKS, slot=2 + k % 2)
            (c,) = d.reap(1, 1)
            assert c["status"] == L.NVME_SC_SUCCESS and c["sqid"] == 1
            assert c["cid"] == k % 2 + 2 * (k // 2 % 4)
            assert c["sqhd"] == (k + 1) % d.ring   # the controller fetched through this one
            got = d.bounce[(2 + k % 2) * PAGE:(3 + k % 2) * PAGE]
            np.testing.assert_array_equal(got, data[page * PAGE:(page + 1) * PAGE])
            phases.append(c["phase"])
        assert phases == [1, 1, 1, 0, 0, 0, 1, 1, 1, 0]
        assert d.ctrl.counters["commands"] == 10


def test_controller_status_codes():
    data = np.arange(4 * PAGE, dtype=np.uint8)
    d = _Driver(data, depth=8)
    cases = [
        (dict(opcode=0x7F), L.NVME_SC_INVALID_OPCODE),                 # not Read or Write
        (dict(nsid=7), L.NVME_SC_INVALID_NS),                          # no such array
        (dict(nsid=0), L.NVME_SC_INVALID_NS),
        (dict(slba=4 * BLOCKS), L.NVME_SC_LBA_RANGE),                  # past the array's end
        (dict(nlb=2 * BLOCKS), L.NVME_SC_INVALID_FIELD),               # more than a page
        (dict(prp1=8), L.NVME_SC_DATA_XFER_ERROR),                     # outside the DMA window
        (dict(prp1=d.bounce.ctypes.data + d.bounce.nbytes - 8), L.NVME_SC_DATA_XFER_ERROR),
        (dict(slba=3 * BLOCKS), L.NVME_SC_SUCCESS),
    ]
    with d.ctrl:
        for cid, (kw, want) in enumerate(cases):
            args = dict(cid=cid, slba=0, slot=0)
            args.update(kw)
            d.submit(0, **args)
            (c,) = d.reap(0, 1)
            assert (c["cid"], c["status"]) == (cid, want), kw
        assert d.ctrl.counters["errors"] == len(cases) - 1


def test_controller_writes_the_bounce_buffer_to_the_store():
    """Write (01h): the page at PRP1 lands in the store, at the LBA's byte offset; a store that
    refuses the page completes the command with Write Fault and leaves the store as it was."""
    data = np.random.default_rng(4).integers(0, 255, 6 * PAGE, dtype=np.uint8)
    before = data.copy()
    store = gids.FaultyStore(data, page_size=PAGE, faults={4: "write_eio"})
    d = _Driver(data, n_queues=1, depth=4, store=store)
    page = np.arange(PAGE, dtype=np.uint8)[::-1].copy()
    with d.ctrl:
        d.bounce[PAGE:2 * PAGE] = page
        d.submit(0, cid=1, slba=2 * BLOCKS, slot=1, opcode=L.NVME_OP_WRITE)
        d.submit(0, cid=2, slba=4 * BLOCKS, slot=1, opcode=L.NVME_OP_WRITE)   # refused
        d.submit(0, cid=3, slba=2 * BLOCKS, slot=2)                           # read it back
        got = d.reap(0, 3)
        assert [(c["cid"], c["status"]) for c in got] == [
            (1, L.NVME_SC_SUCCESS), (2, L.NVME_SC_WRITE_FAULT), (3, L.NVME_SC_SUCCESS)]
        np.testing.assert_array_equal(data[2 * PAGE:3 * PAGE], page)
        np.testing.assert_array_equal(d.bounce[2 * PAGE:3 * PAGE], page)
        np.testing.assert_array_equal(data[4 * PAGE:5 * PAGE], before[4 * PAGE:5 * PAGE])
        c = d.ctrl.counters
        assert c["writes"] == 2 and c["errors"] == 1 and c["commands"] == 3


def _wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(1e-3)


def test_controller_waits_for_cq_space():
    data = np.random.default_rng(1).integers(0, 255, 16 * PAGE, dtype=np.uint8)
    d = _Driver(data, n_queues=1, depth=3)          # rings of 4: at most 3 CQEs unconsumed
    with d.ctrl:
        for cid in range(3):
            d.submit(0, cid=cid, slba=cid * BLOCKS, slot=cid)
        _wait_for(lambda: d.ctrl.counters["commands"] == 3)
        d.submit(0, cid=3, slba=5 * BLOCKS, slot=0)    # the SQ has room, the CQ has none
        _wait_for(lambda: d.ctrl.counters["cq_full"] > 0)
        assert d.ctrl.counters["commands"] == 3
        got = d.reap(0, 4)                               # consuming frees space for the 4th
        assert [c["cid"] for c in got] == [0, 1, 2, 3]
        assert [c["phase"] for c in got] == [1, 1, 1, 1] and got[3]["sqhd"] == 0
        np.testing.assert_array_equal(d.bounce[:PAGE], data[5 * PAGE:6 * PAGE])


def test_controller_completes_out_of_order_under_jitter():
    data = np.random.default_rng(1).integers(0, 255, 16 * PAGE, dtype=np.uint8)
    d = _Driver(data, n_queues=1, depth=3, jitter_us=5000)   # random delays up to 5 ms
    with d.ctrl:
        for _ in range(6):
            for cid in range(3):
                d.submit(0, cid=cid, slba=(cid + 4) * BLOCKS, slot=cid)
            got = d.reap(0, 3)
            assert sorted(c["cid"] for c in got) == [0, 1, 2]
            np.testing.assert_array_equal(d.bounce[:3 * PAGE], data[4 * PAGE:7 * PAGE])
        assert d.ctrl.counters["reordered"] > 0


def test_controller_takes_a_doorbells_commands_as_one_batch(tmp_path):
    """The commands one SQ doorbell write shows arrive together: one arrival time (the trace's
    issue time, the SSD model's arrival), timed by the model in fetch order, under one hold of
    its lock; and each completes no earlier than the model says."""
    data = np.random.default_rng(5).integers(0, 255, 16 * PAGE, dtype=np.uint8)
    model = SsdModel("p5800x")
    path = tmp_path / "batch.trace"
    with TraceWriter(path) as writer:
        d = _Driver(data, n_queues=1, depth=8, model=model, trace_writer=writer)
        with d.ctrl:
            for cid in range(6):
                d.submit(0, cid=cid, slba=(2 * cid) * BLOCKS, slot=cid, ring=False)
            d.ring_sq(0)
            got = d.reap(0, 6)
            assert sorted(c["cid"] for c in got) == list(range(6))
            for cid in range(6):
                np.testing.assert_array_equal(d.bounce[cid * PAGE:(cid + 1) * PAGE],
                                              data[2 * cid * PAGE:(2 * cid + 1) * PAGE])
    trace = gids.read_trace(path)
    assert len(trace) == 6 and len(set(trace["issue_ns"].tolist())) == 1
    arrival = int(trace["issue_ns"][0])
    # The drive's command slot is a FIFO server: six commands arriving at once keep it busy for
    # six command times from their arrival (a command's time: fixed + its bytes at the data path).
    command_ns = model.params.command_ns + PAGE * model.params.command_ns_per_byte
    assert model.command_free[0] == pytest.approx(arrival + 6 * command_ns)
    idle = SsdModel("p5800x").submit(0, 0, PAGE)
    assert ((trace["complete_ns"] - trace["issue_ns"]) >= idle).all()
    # The batch's host part (run, then timed) ended once for all six; the model's times are
    # the device's, and each completion was posted after both.
    assert len(set(trace["ready_ns"].tolist())) == 1 and trace["ready_ns"][0] >= arrival
    assert ((trace["device_ns"] - trace["issue_ns"]) >= idle).all()
    assert (trace["complete_ns"] >= np.maximum(trace["ready_ns"], trace["device_ns"])).all()


def test_private_arrays_share_no_cache_line_pair():
    """Per-thread hot words (served counts, clocks, counters) sit in 128-byte blocks of their
    own, so one thread's writes never take a line from another (false sharing)."""
    from host_daemon.sync import PRIVATE_BYTES, private_array
    arrays = [private_array(n) for n in (1, 2, 5, 1, 16, 17)] + [private_array((3, 5))]
    blocks = []
    for a in arrays:
        assert a.dtype == np.int64 and not a.any()
        first = a.ctypes.data // PRIVATE_BYTES
        last = (a.ctypes.data + a.nbytes - 1) // PRIVATE_BYTES
        blocks.append(set(range(first, last + 1)))
    for i, b in enumerate(blocks):
        for other in blocks[i + 1:]:
            assert not b & other
    assert private_array((3, 5)).shape == (3, 5)


def test_controller_loop_runs_without_reference_counting():
    """The per-command functions are compiled without Numba's reference counting (no atomic
    increments per array argument per call); a refactor must not quietly bring it back."""
    from host_daemon import nvme_controller as nc
    for f in (nc.serve_queue_pairs, nc.execute, nc.post_cqe, nc._complete_held, nc._post_due):
        assert f.targetoptions.get("_nrt") is False, f.__name__


# ------------------------------------------------------------------ kernels through the rings

@cuda.jit
def _read_at(h, idx, out):
    k = cuda.grid(1)
    if k < idx.size:
        out[k] = gids.read(h, idx[k])


def check_rings_at_rest(rt):
    """Between kernels every queue pair is at rest, and the driver's counts agree with each
    other and with the doorbells: each ticket taken was rung (SQ tail), fetched (SQ head, from
    the last CQE's SQHD) and its CQE consumed (CQ head)."""
    tickets = rt._io.sq_ticket.copy_to_host()
    ring = rt.queue_depth + 1
    db = host_view(rt._io.nv_db)
    for name, counts in (("SQ tail", rt._io.nv_sq_tail), ("SQ head", rt._io.nv_sq_head),
                         ("CQ head", rt._io.nv_cq_head)):
        np.testing.assert_array_equal(counts.copy_to_host(), tickets, err_msg=name)
    np.testing.assert_array_equal(db[L.DB_SQ_TAIL::2], tickets % ring)
    np.testing.assert_array_equal(db[L.DB_CQ_HEAD::2], tickets % ring)


def _gather_check(rt, a, ref, n, seed, blocks=2, threads=32):
    idx = np.random.default_rng(seed).integers(0, ref.size, n)
    out = cuda.to_device(np.zeros(n, dtype=ref.dtype))
    _read_at[blocks, threads](a.handle, cuda.to_device(idx), out)
    rt.sync()
    np.testing.assert_array_equal(out.copy_to_host(), ref[idx])
    check_rings_at_rest(rt)


@pytest.mark.parametrize("dtype, page_size, offset", [(np.int64, 512, 0), (np.float32, 1024, 12)])
def test_values_match_numpy_through_wrapping_rings(tmp_path, dtype, page_size, offset):
    raw = random_file(tmp_path / "d.bin", 40 * page_size + 100, seed=page_size)
    n = (raw.size - offset) // np.dtype(dtype).itemsize
    ref = raw[offset:offset + n * np.dtype(dtype).itemsize].view(dtype)
    with gids.Runtime("nvme", cache_pages=4, page_size=page_size, queues=2,
                      queue_depth=3) as rt:
        a = rt.open_array(tmp_path / "d.bin", dtype, shape=n, offset=offset)
        _gather_check(rt, a, ref, 64, seed=1)
        c = rt.daemon.counters
        # 2 queues, rings of 4: more than two passes over each ring, so both phases were used.
        assert c["commands"] == rt.stats().ios > 2 * 2 * 4 and c["errors"] == 0


def test_full_queues_more_waiting_threads_than_entries():
    data = np.random.default_rng(2).integers(0, 1 << 62, 64 * 64, dtype=np.int64)
    for depth in (2, 4):
        # 64 threads on one queue pair of `depth` commands: most wait for a command slot.
        with gids.Runtime("nvme", cache_pages=8, page_size=512, queues=1,
                          queue_depth=depth) as rt:
            a = rt.open_array(gids.MemoryStore(data, zero_copy=depth == 2), np.int64,
                              shape=data.shape)
            _gather_check(rt, a, data, 64, seed=depth)
            assert rt.daemon.counters["commands"] > depth + 1


def test_out_of_order_completions(monkeypatch):
    monkeypatch.setattr(NvmeQueues, "jitter_us", 3000.0)
    data = np.random.default_rng(3).standard_normal(64 * 64)
    with gids.Runtime("nvme", cache_pages=8, page_size=512, queues=1, queue_depth=4) as rt:
        a = rt.open_array(data)
        _gather_check(rt, a, data, 64, seed=3)
        assert rt.daemon.counters["reordered"] > 0


class StrictController(threading.Thread):
    """A controller in Python that checks the driver's side of the protocol while it serves
    Reads from ``data`` (array 0 of ``rt``, a read-only store), in place of ``rt``'s own.

    Checked at every step: the SQ tail doorbell moves forward by at most the ring's free
    entries; every SQE it covers is the whole command of the ticket with that count (opcode 02h,
    CID = slot + generation, NSID 1, PRP1 = the slot's bounce buffer, one page at an aligned
    SLBA, reserved words 0), so a doorbell over an entry not yet written is caught; the CQ head
    doorbell never passes a CQE not posted. It completes adversarially: it holds fetched
    commands until ``hold`` are pending (or none arrived for a while) and posts the newest
    first, so CQEs come in reverse SQ order and many lanes read another lane's CQE.
    """

    def __init__(self, rt, data, hold):
        super().__init__(daemon=True)
        self.sq, self.cq = host_view(rt._io.nv_sq), host_view(rt._io.nv_cq)
        self.db = host_view(rt._io.nv_db)
        self.staging = host_view(rt._io.staging).view(np.uint8)
        self.data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.ring, self.depth, self.page = rt.queue_depth + 1, rt.queue_depth, rt.page_size
        n = rt.queues
        self.tail, self.fetched, self.posted, self.cq_head = [0] * n, [0] * n, [0] * n, [0] * n
        self.pending = [[] for _ in range(n)]
        self.quiet = [0] * n
        self.hold = hold
        self.rt = rt
        self.commands = self.reordered = 0
        self.errors = []
        self.halt = threading.Event()

    def cid(self, t):
        return t % self.depth + self.depth * ((t // self.depth) % (65536 // self.depth))

    def run(self):
        try:
            while not self.halt.is_set():
                busy = False
                for q in range(len(self.tail)):
                    busy |= self.fetch(q)
                    busy |= self.complete(q)
                if not busy:
                    time.sleep(1e-4)
        except Exception as exc:   # noqa: BLE001  (reported by check())
            self.errors.append(exc)
            self.rt.abort()          # the kernels stop waiting at once

    def fetch(self, q):
        pos = int(self.db[2 * q + L.DB_SQ_TAIL])
        tail = self.tail[q] + (pos - self.tail[q]) % self.ring
        assert tail - self.fetched[q] <= self.ring - 1, (q, tail, self.fetched[q])
        self.tail[q] = tail
        blocks = self.page // L.NVME_LBA_BYTES
        got = False
        while self.fetched[q] < tail:
            t = self.fetched[q]
            e = (q * self.ring + t % self.ring) * L.NVME_SQE_WORDS
            w = [int(x) for x in self.sq[e:e + L.NVME_SQE_WORDS]]
            slot = q * self.depth + t % self.depth
            want = (L.NVME_OP_READ | (self.cid(t) << L.SQE_CID_SHIFT) | (1 << L.SQE_NSID_SHIFT))
            assert w[L.SQE_CDW0_NSID] == want, (q, t, hex(w[0]), hex(want))
            assert w[L.SQE_PRP1] == self.staging.ctypes.data + slot * self.page, (q, t)
            assert w[L.SQE_SLBA] % blocks == 0 and w[L.SQE_CDW12_13] == blocks - 1, (q, t, w)
            assert w[1] == w[L.SQE_MPTR] == w[L.SQE_PRP2] == w[7] == 0, (q, t, w)
            start = w[L.SQE_SLBA] * L.NVME_LBA_BYTES
            chunk = self.data[start:start + self.page]
            buf = self.staging[slot * self.page:(slot + 1) * self.page]
            buf[:] = 0
            buf[:chunk.size] = chunk
            self.pending[q].append(t)
            self.fetched[q] = t + 1
            got = True
        return got

    def complete(self, q):
        pending = self.pending[q]
        if not pending:
            return False
        self.quiet[q] += 1
        if len(pending) < self.hold and self.quiet[q] < 20:
            return False
        pos = int(self.db[2 * q + L.DB_CQ_HEAD])
        head = self.cq_head[q] + (pos - self.cq_head[q]) % self.ring
        assert head <= self.posted[q], (q, head, self.posted[q])   # consumed only what is posted
        self.cq_head[q] = head
        posted = False
        while pending and self.posted[q] - self.cq_head[q] < self.ring - 1:
            t = pending.pop()                       # newest first
            self.reordered += any(u < t for u in pending)
            c = self.posted[q]
            phase = 1 - (c // self.ring) % 2
            r = (q * self.ring + c % self.ring) * L.NVME_CQE_WORDS
            self.cq[r + L.CQE_DW0_DW1] = 0
            self.cq[r + L.CQE_DW2_DW3] = ((self.fetched[q] % self.ring) | (q << L.CQE_SQID_SHIFT)
                                         | (self.cid(t) << L.CQE_CID_SHIFT)
                                         | (phase << L.CQE_PHASE_SHIFT))
            self.posted[q] = c + 1
            self.commands += 1
            posted = True
        if posted:
            self.quiet[q] = 0
        return posted

    def check(self):
        if self.errors:
            raise self.errors[0]
        assert self.tail == self.fetched == self.posted, (self.tail, self.fetched, self.posted)

    def run_kernel(self, launch):
        """``launch()`` then ``rt.sync()``; a finding of this controller (which aborts the
        kernels) is raised in place of the AbortedError. Another error is raised as it is:
        the Runtime's recovery then resets the rings under this controller, which stops it."""
        try:
            launch()
            self.rt.sync()
        except gids.AbortedError:
            self.check()
            raise
        except BaseException:
            self.halt.set()
            raise
        self.check()


@pytest.mark.parametrize("queues, depth, hold", [(1, 2, 2), (2, 4, 4), (1, 32, 8)])
def test_driver_under_a_strict_controller(queues, depth, hold):
    """The kernels' driver against :class:`StrictController`: wrap-arounds (rings of 3 to 33),
    more waiting threads than entries (64 threads on 1 queue of 2), completions in reverse SQ
    order; every value checked, and the rings at rest after each kernel."""
    data = np.random.default_rng(9).integers(0, 1 << 62, 64 * 64, dtype=np.int64)
    with gids.Runtime("nvme", cache_pages=8, page_size=512, queues=queues, queue_depth=depth,
                      timeout=60) as rt:
        a = rt.open_array(gids.MemoryStore(data, zero_copy=False), np.int64, shape=data.shape)
        rt.daemon.stop()
        ctrl = StrictController(rt, data, hold)
        ctrl.start()
        try:
            for seed in range(2):
                ctrl.run_kernel(lambda: _gather_check(rt, a, data, 64, seed=seed))
        finally:
            ctrl.halt.set()
            ctrl.join(10)
        ctrl.check()
        assert ctrl.commands == rt.stats().ios > 2 * (depth + 1) and ctrl.reordered > 0


def test_emulated_ssd_array_and_trace(tmp_path):
    data = np.arange(64 * 64, dtype=np.int64)
    path = tmp_path / "nvme.trace"
    with gids.Runtime("nvme", cache_pages=8, page_size=512, ssd="p5800x", n_ssd=4,
                      trace=path) as rt:
        a = rt.open_array(data)
        _gather_check(rt, a, data, 48, seed=4)
        ios = rt.stats().ios
    trace = gids.read_trace(path)
    assert len(trace) == ios > 0
    assert (trace["offset"] % 512 == 0).all() and (trace["nbytes"] == 512).all()
    idle = SsdModel("p5800x", n_ssd=4).submit(0, 0, 512)
    assert ((trace["complete_ns"] - trace["issue_ns"]) >= idle).all()
    assert ((trace["device_ns"] - trace["issue_ns"]) >= idle).all()
    assert (trace["complete_ns"] >= np.maximum(trace["ready_ns"], trace["device_ns"])).all()


def test_dirty_evictions_are_nvme_writes_and_flush_matches_numpy(tmp_path):
    """A cache of 4 pages over 40: most written pages are evicted dirty, each as an NVMe Write
    command through wrapping rings (2 queue pairs of 3). A kernel reads its own writes (also
    after their page was written back and read again), later kernels read them, the trace
    records the write-backs as writes, and after flush the file equals numpy byte for byte."""
    offset = 24                     # pages are not file-aligned: every LBA is a file offset + 24
    raw = random_file(tmp_path / "d.bin", offset + 40 * PAGE, seed=7)
    model = raw.copy()
    view = model[offset:].view(np.int64)
    trace_path = tmp_path / "w.trace"
    rng = np.random.default_rng(8)
    with gids.Runtime("nvme", cache_pages=4, page_size=PAGE, queues=2, queue_depth=3,
                      trace=trace_path) as rt:
        a = rt.open_array(tmp_path / "d.bin", np.int64, shape=view.size, offset=offset,
                          mode="r+")
        for round_ in range(3):
            _gather_check(rt, a, view, 48, seed=round_)   # the earlier kernels' writes
            idx = rng.choice(view.size, 48, replace=False)
            vals = rng.integers(-(1 << 40), 1 << 40, 48)
            out = cuda.to_device(np.zeros(48, np.int64))
            write_then_read[2, 32](a.handle, cuda.to_device(idx), cuda.to_device(vals), out)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), vals)
            view[idx] = vals
        # Two pages written last, into an emptied cache: still dirty at the flush. Emptied
        # (invalidate: the dirty pages go back from the host, the clock hand to slot 0), since
        # the clock skips nothing for being dirty: with the earlier kernels' pages in the slots
        # the second page's load could take the first's slot, sending it out as a Write, and
        # the flush found one page (seen in CI). One scatter each, for the same reason
        # within one kernel of two threads.
        rt.invalidate()
        rt.scatter(a, [0], [7])
        rt.scatter(a, [view.size - 1], [-7])
        view[[0, view.size - 1]] = [7, -7]
        s = rt.stats()
        c = rt.daemon.counters
        assert s.writebacks > 8 and c["writes"] == s.writebacks
        assert c["commands"] == s.ios + s.writebacks and c["errors"] == 0
        assert rt.flush() == 2
        assert (tmp_path / "d.bin").read_bytes() == model.tobytes()
    trace = gids.read_trace(trace_path)
    writes = trace[trace["op"] == L.OP_WRITE]
    assert len(writes) == s.writebacks and len(trace) == s.ios + s.writebacks
    assert ((writes["offset"] - offset) % PAGE == 0).all() and (writes["nbytes"] == PAGE).all()


def test_errors_are_named_and_the_runtime_recovers():
    data = np.arange(16 * 64, dtype=np.int64)
    store = gids.FaultyStore(data, page_size=512, faults={5: "eio", 6: "crash"})
    with gids.Runtime("nvme", cache_pages=4, page_size=512, queues=2, queue_depth=2,
                      timeout=1.0) as rt:
        a = rt.open_array(store, np.int64, shape=data.shape)
        with pytest.raises(gids.StorageIOError, match="page 5"):
            rt.gather(a, [64 + 1, 5 * 64 + 3])
        assert rt.gather(a, [2 * 64 + 1])[0] == 2 * 64 + 1
        with pytest.raises((gids.GidsTimeoutError, gids.DaemonError)):
            rt.gather(a, [6 * 64])                   # the controller thread dies
        assert rt.gather(a, [3 * 64 + 2])[0] == 3 * 64 + 2
        rt.daemon.stop()
        with pytest.raises(gids.GidsTimeoutError, match="NVMe controller"):
            rt.gather(a, [4 * 64])
    with pytest.raises(gids.ConfigError, match="1024"):
        gids.Runtime("nvme", cache_pages=2, queue_depth=2048)


WARP32 = textwrap.dedent('''
    from tests.test_nvme import check_rings_at_rest

    @cuda.jit
    def read_all(h, idx, out):
        k = cuda.grid(1)
        out[k] = gids.read(h, idx[k])

    @cuda.jit
    def write_all(h, idx, values):
        k = cuda.grid(1)
        gids.write(h, idx[k], values[k])

    from gids.backends import NvmeQueues
    NvmeQueues.jitter_us = 2000.0    # completions out of order within a warp
    data = np.random.default_rng(0).integers(0, 1 << 62, 64 * 64, dtype=np.int64)  # 64 pages
    model = data.copy()
    with gids.Runtime("nvme", cache_pages=32, page_size=512, queues=2, queue_depth=32,
                      timeout=60) as rt:
        a = rt.open_array(gids.MemoryStore(data), np.int64, shape=data.shape, mode="r+")
        for seed in range(2):
            idx = np.random.default_rng(seed).integers(0, data.size, 64)
            out = cuda.to_device(np.full(64, -1, np.int64))
            read_all[1, 64](a.handle, cuda.to_device(idx), out)
            rt.sync()
            assert (out.copy_to_host() == model[idx]).all(), seed
        c = rt.daemon.counters
        assert c["commands"] == rt.stats().ios and c["errors"] == 0, c
        check_rings_at_rest(rt)
        # Writes: two warps of 32 lanes write one element of each of the 64 pages into a cache
        # of 32, so the later loads evict the earlier writes' dirty pages: whole warps send
        # NVMe Writes, then read them back.
        rng = np.random.default_rng(2)
        idx = rng.permutation(64) * 64 + rng.integers(0, 64, 64)
        vals = rng.integers(0, 1 << 62, 64)
        write_all[1, 64](a.handle, cuda.to_device(idx), cuda.to_device(vals))
        rt.sync()
        model[idx] = vals
        idx = np.concatenate([idx[:32], rng.integers(0, data.size, 32)])
        out = cuda.to_device(np.full(64, -1, np.int64))
        read_all[1, 64](a.handle, cuda.to_device(idx), out)
        rt.sync()
        assert (out.copy_to_host() == model[idx]).all()
        s = rt.stats()
        c = rt.daemon.counters
        assert s.writebacks > 0 and c["writes"] == s.writebacks and c["errors"] == 0, (c, s)
        check_rings_at_rest(rt)
        rt.flush()
        assert (data == model).all()
    print("NVME_WARP32_OK")
''')
WARP32_RUN = Warp32Script(WARP32)


@started_early(WARP32_RUN)
def test_emulated_warps_through_the_rings():
    check_warp32(WARP32_RUN.result(), "NVME_WARP32_OK")


STRICT32 = textwrap.dedent('''
    from tests.test_nvme import StrictController, check_rings_at_rest

    @cuda.jit
    def read_some(h, idx, out):
        k = cuda.grid(1)
        if k < idx.size:
            out[k] = gids.read(h, idx[k])

    data = np.random.default_rng(4).integers(0, 1 << 62, 96 * 64, dtype=np.int64)   # 96 pages
    # One queue pair of 32 commands: a full warp takes every slot, and the other warp waits.
    with gids.Runtime("nvme", cache_pages=64, page_size=512, queues=1, queue_depth=32,
                      timeout=60) as rt:
        a = rt.open_array(gids.MemoryStore(data, zero_copy=False), np.int64, shape=data.shape)
        rt.daemon.stop()
        ctrl = StrictController(rt, data, hold=24)
        ctrl.start()
        rng = np.random.default_rng(5)
        for n in (64, 48, 64):    # 48: the second warp has 16 lanes (its lanes write own SQEs)
            rt.invalidate()
            idx = rng.permutation(96)[:n] * 64 + rng.integers(0, 64, n)    # n distinct pages
            out = cuda.to_device(np.full(n, -1, np.int64))
            ctrl.run_kernel(lambda: read_some[1, n](a.handle, cuda.to_device(idx), out))
            assert (out.copy_to_host() == data[idx]).all(), n
            check_rings_at_rest(rt)
        ctrl.halt.set()
        ctrl.join(10)
        assert ctrl.commands == rt.stats().ios == 176 and ctrl.reordered > 0, ctrl.commands
    print("NVME_STRICT32_OK")
''')
STRICT32_RUN = Warp32Script(STRICT32)


@started_early(STRICT32_RUN)
def test_emulated_warps_under_a_strict_controller():
    """Whole warps of 32 lanes (and one of 16) through one queue pair of 32 commands, served by
    :class:`StrictController` in reverse order: most lanes read another lane's CQE, and the
    CQ head may move only once all of a warp's CQEs are read."""
    check_warp32(STRICT32_RUN.result(), "NVME_STRICT32_OK")


# ------------------------------------------------------------------ on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("queues, depth", [(32, 1024), (128, 64)])
def test_gpu_nvme_path_values(queues, depth):
    """Many warps, out-of-order completions (SSD model), every value checked."""
    data = np.random.default_rng(5).integers(0, 1 << 62, (1 << 16) * 512, dtype=np.int64)
    pages = 1 << 16
    with gids.Runtime("nvme", cache_bytes=64 << 20, page_size=4096, queues=queues,
                      queue_depth=depth, ssd="pm1743", n_ssd=4, timeout=30) as rt:
        a = rt.open_array(data)
        idx = np.random.default_rng(6).integers(0, data.size, 1 << 18)
        got = rt.gather(a, idx).copy_to_host()
        np.testing.assert_array_equal(got, data[idx])
        c = rt.daemon.counters
        assert c["errors"] == 0 and c["commands"] == rt.stats().ios
        assert c["commands"] > pages // 2
        check_rings_at_rest(rt)   # every handoff reached the last ticket of every queue
