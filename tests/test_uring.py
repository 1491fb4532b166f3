"""The io_uring engine on plain files, on the CPU (no CUDA): the ring's ABI, host-side reads,
writes and fsync, and the daemon loop serving file stores through the ring (both engines),
with its faults, its full ring, its fallback to threads and its concurrency under emulation."""
import errno
import os
import time
import warnings

import numpy as np
import pytest

from gids import layout as L
from host_daemon import daemon as D
from host_daemon import uring as U
from host_daemon.ssd_model import SsdModel
from host_daemon.stores import DIRECT_ALIGN, T_COLUMNS, T_FD_DIRECT, FileStore
from host_daemon.sync import private_array
from host_daemon.trace import TraceWriter, read_engine, read_trace

pytestmark = pytest.mark.skipif(U.probe() is not None, reason=f"no io_uring: {U.probe()}")

PAGE = 4096
ENGINES = ["io_uring", "threads"]


def _file(tmp_path, nbytes, seed=0, name="data.bin"):
    raw = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    path = tmp_path / name
    path.write_bytes(raw)
    return path, raw


def test_the_ring_is_what_the_kernel_says():
    """Offsets come from io_uring_params; the regions hold the rings the kernel described."""
    assert U.PARAMS_DTYPE.itemsize == 120
    with U.Ring(100) as ring:
        assert ring.entries == 128 and ring.cq_entries == 256   # a power of two; CQ twice
        a = ring.args
        assert a.idx[U.I_SQ_ENTRIES] == 128 and a.idx[U.I_SQ_MASK] == 127
        assert a.idx[U.I_CQ_ENTRIES] == 256 and a.idx[U.I_CQ_MASK] == 255
        assert a.sq[a.idx[U.I_SQ_HEAD]] == a.sq[a.idx[U.I_SQ_TAIL]] == 0
        assert U.ring_nop_roundtrip(a)
        assert a.state[U.S_IN_FLIGHT] == 0 and a.state[U.S_SUBMITTED] == 1


def test_host_ring_reads_writes_and_fsyncs(tmp_path):
    path, raw = _file(tmp_path, 3 * PAGE + 100)
    ring = U.HostRing()
    fd = os.open(path, os.O_RDWR)
    try:
        for offset, n in [(0, PAGE), (PAGE + 7, 2 * PAGE), (3 * PAGE, 500)]:
            assert ring.pread(fd, n, offset) == raw[offset:offset + n]   # short at end of file
        data = np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes()
        assert ring.pwrite(fd, data, 123) == len(data)
        ring.fsync(fd)
        ring.fsync(fd, datasync=True)
        assert os.pread(fd, len(data), 123) == data
        r, w = os.pipe()
        with pytest.raises(OSError) as info:   # fsync of a pipe fails: the CQE says EINVAL
            ring.fsync(r)
        assert info.value.errno == errno.EINVAL
        os.close(r), os.close(w)
        with pytest.raises(OSError) as info:
            ring.fsync(1 << 20)
        assert info.value.errno == errno.EBADF
    finally:
        os.close(fd)
        ring.close()


# ---- the daemon loop over file stores --------------------------------------------------------

QUEUES, DEPTH = 8, 32


class _Rig:
    """A daemon serving one file store from plain numpy queues (the test plays the GPU)."""

    def __init__(self, store, nbytes, engine, engine_depth=64, n_threads=2, model=None,
                 trace_writer=None, fixed_buffers=False, misalign=0):
        self.table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
        self.table[0] = store.table_row(0, nbytes)
        n = QUEUES * DEPTH
        self.sq = private_array(n * L.SQ_WORDS)
        self.cq = private_array(n * L.CQ_WORDS)
        # Page-aligned staging, as the Runtime's mapped memory is (O_DIRECT needs it; a
        # ``misalign``-ed one makes O_DIRECT reads fail with EINVAL).
        raw = np.zeros(n * PAGE + 2 * DIRECT_ALIGN, dtype=np.uint8)
        start = -raw.ctypes.data % DIRECT_ALIGN + misalign
        self.staging = raw[start:start + n * PAGE]
        self.d = D.HostDaemon(self.sq, self.cq, self.staging, self.table, QUEUES, DEPTH, PAGE,
                              n_threads, model=model, trace_writer=trace_writer, engine=engine,
                              engine_depth=engine_depth, fixed_buffers=fixed_buffers)
        self.tickets = np.zeros(QUEUES, dtype=np.int64)

    def submit(self, q, page, op=L.OP_READ):
        t = int(self.tickets[q])
        self.tickets[q] += 1
        entry = q * DEPTH + t % DEPTH
        self.sq[entry * L.SQ_WORDS + L.SQ_WORD] = L.sq_word(L.sq_tag(t, DEPTH), 0, page, op)
        return q, t, entry

    def wait(self, q, t, timeout=20.0):
        rec = (q * DEPTH + t % DEPTH) * L.CQ_WORDS + L.CQ_WORD
        end = time.monotonic() + timeout
        while L.cq_fields(int(self.cq[rec]))[0] != L.cq_seq(t):
            assert time.monotonic() < end, f"queue {q} ticket {t} not served"
            time.sleep(1e-4)
        return L.cq_fields(int(self.cq[rec]))[1]

    def page(self, entry):
        return self.staging[entry * PAGE:(entry + 1) * PAGE].tobytes()


def _expected(raw, page):
    chunk = raw[page * PAGE:(page + 1) * PAGE]
    return chunk + b"\0" * (PAGE - len(chunk))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("direct", [True, False])
def test_daemon_reads_file_pages_on_both_engines(tmp_path, engine, direct):
    """Every queue full at once, pages in random order, the last page short: each completion
    says OK and its staging page holds the file's bytes (zeros past the end)."""
    path, raw = _file(tmp_path, 50 * PAGE + 1000, seed=3)
    store = FileStore(path, direct=direct)
    rig = _Rig(store, len(raw), engine)
    pages = np.random.default_rng(4).integers(0, 51, QUEUES * DEPTH)
    with rig.d:
        assert rig.d.engine == engine
        # start() returns once every thread has enabled its ring (owned by that thread).
        assert all(r.enabled for r in rig.d._urings if r is not None)
        reqs = [(rig.submit(i % QUEUES, int(p)), int(p)) for i, p in enumerate(pages)]
        for (q, t, entry), p in reqs:
            assert rig.wait(q, t) == L.STATUS_OK
            assert rig.page(entry) == _expected(raw, p)
        counters = rig.d.engine_counters
        if engine == "io_uring":   # each thread's ring its own where the kernel has that
            assert len(counters["rings"]) == 2 and set(counters["rings"]) <= {"owned", "coop",
                                                                                 "plain"}
            with U.Ring(1, owned=True) as ring:
                assert ("owned" in counters["rings"]) == (ring.setup_name == "owned")
    if engine == "io_uring" and store.direct_enabled:
        # Batched: far fewer io_uring_enter calls than requests. (Through the page cache a
        # cached page is read on the spot, with no SQE.)
        # (The short last page is read through the page cache.)
        direct = int((pages < 50).sum())
        assert counters["sqes"] >= direct and counters["submits"] < direct
        assert len(counters["peak_in_flight"]) == 2 and max(counters["peak_in_flight"]) >= 1
        assert len(counters["waits_per_thread"]) == 2
    store.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_daemon_writes_pages_through_the_engine_and_flush_fsyncs(tmp_path, engine):
    path, raw = _file(tmp_path, 8 * PAGE + 100, seed=5)
    store = FileStore(path, writable=True)
    rig = _Rig(store, len(raw), engine)
    new = bytearray(raw)
    with rig.d:
        for page in [7, 2, 8]:
            q = page % QUEUES
            entry = q * DEPTH + int(rig.tickets[q]) % DEPTH   # the GPU fills staging first
            fresh = np.random.default_rng(page).integers(0, 256, PAGE, dtype=np.uint8)
            rig.staging[entry * PAGE:(entry + 1) * PAGE] = fresh
            q, t, entry = rig.submit(q, page, op=L.OP_WRITE)
            assert rig.wait(q, t) == L.STATUS_OK
            n = min(PAGE, len(raw) - page * PAGE)   # only the array's bytes of the last page
            new[page * PAGE:page * PAGE + n] = fresh[:n].tobytes()
        rig.d.sync_store(store)
        rig.d.write_store(store, 10, b"hello")
        new[10:15] = b"hello"
        rig.d.sync_store(store)
    assert path.read_bytes() == bytes(new)
    store.close()


def test_a_full_ring_holds_requests_back_and_loses_none(tmp_path):
    """A ring of 2 entries per thread and 256 requests at once: the thread takes new requests
    only as CQEs free its ring; every request is served, once, with its bytes."""
    path, raw = _file(tmp_path, 64 * PAGE, seed=6)
    store = FileStore(path)
    rig = _Rig(store, len(raw), "io_uring", engine_depth=2, n_threads=1)
    pages = np.random.default_rng(7).integers(0, 64, QUEUES * DEPTH)
    with rig.d:
        assert rig.d.capacity == 2
        reqs = [(rig.submit(i % QUEUES, int(p)), int(p)) for i, p in enumerate(pages)]
        for (q, t, entry), p in reqs:
            assert rig.wait(q, t) == L.STATUS_OK
            assert rig.page(entry) == _expected(raw, p)
        assert rig.d.served == len(pages)
        counters = rig.d.engine_counters
    assert counters["peak_in_flight"][0] <= 2
    if store.direct_enabled:   # the full ring was waited on in the kernel, not spun over
        assert counters["peak_in_flight"] == [2] and counters["waits"] > 0
    store.close()


def test_a_full_ring_serves_every_queue_in_turn(tmp_path):
    """Every queue full and a ring of 2 entries: a pass that finds the ring full stops there,
    and the next goes on from that queue, not from the first one, so no queue waits for the
    ones before it to drain; every request is served with its bytes."""
    path, raw = _file(tmp_path, 64 * PAGE, seed=16)
    store = FileStore(path)
    tpath = tmp_path / "run.trace"
    writer = TraceWriter(tpath)
    rig = _Rig(store, len(raw), "io_uring", engine_depth=2, n_threads=1, trace_writer=writer)
    pages = np.random.default_rng(17).integers(0, 64, QUEUES * DEPTH)
    reqs = [(rig.submit(i % QUEUES, int(p)), int(p)) for i, p in enumerate(pages)]
    with rig.d:
        for (q, t, entry), p in reqs:
            assert rig.wait(q, t) == L.STATUS_OK
            assert rig.page(entry) == _expected(raw, p)
    writer.close()
    trace = read_trace(tpath)
    assert len(trace) == len(pages)
    if store.direct_enabled:   # (else resident pages are copied on the spot: no ring to fill)
        first = [trace["issue_ns"][trace["queue"] == q].min() for q in range(QUEUES)]
        last = [trace["issue_ns"][trace["queue"] == q].max() for q in range(QUEUES)]
        assert max(first) < min(last)
    store.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_file_truncated_under_us_reads_short(tmp_path, engine):
    path, raw = _file(tmp_path, 16 * PAGE, seed=8)
    store = FileStore(path)
    rig = _Rig(store, len(raw), engine)
    os.truncate(path, 5 * PAGE + 100)
    with rig.d:
        for page, status in [(2, L.STATUS_OK), (5, L.STATUS_SHORT_READ),
                             (12, L.STATUS_SHORT_READ)]:
            q, t, entry = rig.submit(page % QUEUES, page)
            assert rig.wait(q, t) == status
            if status == L.STATUS_OK:
                assert rig.page(entry) == raw[page * PAGE:(page + 1) * PAGE]
    store.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failing_read_is_an_io_error_and_a_deleted_file_still_reads(tmp_path, engine):
    """A descriptor whose reads fail (a directory: EISDIR) completes with STATUS_IO_ERROR, and
    the thread goes on serving; a file unlinked while open still reads its bytes (Linux keeps
    it while a descriptor is open)."""
    path, raw = _file(tmp_path, 8 * PAGE, seed=9)
    store = FileStore(path, direct=False, mapped=False)   # (a mapped page would be copied)
    rig = _Rig(store, len(raw), engine)
    bad = os.open(tmp_path, os.O_RDONLY)
    with rig.d:
        os.unlink(path)
        q, t, entry = rig.submit(1, 3)
        assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, 3)
        rig.table[0, 1] = bad   # T_FD
        q, t, entry = rig.submit(2, 4)
        assert rig.wait(q, t) == L.STATUS_IO_ERROR
        rig.table[0, 1] = store.fileno()
        q, t, entry = rig.submit(2, 5)
        assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, 5)
    os.close(bad)
    store.close()


def test_fallback_to_threads_is_said_once_and_shown(monkeypatch):
    monkeypatch.setattr(U, "io_uring_setup", lambda entries, params: -errno.ENOSYS)
    monkeypatch.setattr(U, "_probed", {})
    monkeypatch.setattr(D, "_fallback_said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = D.resolve_engine("io_uring")
        second = D.resolve_engine("io_uring")
    assert first == second and first[0] == "threads" and "ENOSYS" in first[1]
    assert len([w for w in caught if "io_uring unavailable" in str(w.message)]) == 1
    monkeypatch.setattr(U, "_probed", {})
    monkeypatch.setattr(U, "io_uring_setup", lambda entries, params: -errno.EPERM)
    with pytest.warns(RuntimeWarning, match="EPERM"):
        assert "EPERM" in D.resolve_engine("io_uring")[1]
    assert D.resolve_engine("threads") == ("threads", "")


def _peak_in_flight(trace):
    """Most requests whose [issue, posted) intervals overlap."""
    events = np.concatenate([np.stack([trace["issue_ns"], np.ones(len(trace))], 1),
                             np.stack([trace["complete_ns"], -np.ones(len(trace))], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    return int(np.cumsum(events[:, 1]).max())


def _check_peak_in_flight(tpath, n_requests, cap):
    """The trace at ``tpath`` has ``n_requests`` records, at most ``cap`` of them in flight at
    once, and more than one where ``cap`` allows it (the engine overlapped them)."""
    trace = read_trace(tpath)
    assert len(trace) == n_requests
    peak = _peak_in_flight(trace)
    assert peak <= cap
    if cap > 1:
        assert peak > 1


@pytest.mark.parametrize("engine, depth, cap", [("threads", 64, 1), ("io_uring", 4, 4)])
def test_emulation_counts_against_the_engines_concurrency(tmp_path, engine, depth, cap):
    """Under ssd=..., one daemon thread never has more requests out (taken, not yet posted)
    than its engine could: one for a thread of the threads engine, the ring's depth for
    io_uring; the trace's sidecar says so."""
    path, raw = _file(tmp_path, 64 * PAGE, seed=10)
    store = FileStore(path, direct=False)
    tpath = tmp_path / "run.trace"
    writer = TraceWriter(tpath)
    rig = _Rig(store, len(raw), engine, engine_depth=depth, n_threads=1,
               model=SsdModel("980pro", n_ssd=4), trace_writer=writer)
    with rig.d:
        reqs = [(rig.submit(i % QUEUES, i % 64), i % 64) for i in range(64)]
        for (q, t, entry), p in reqs:
            assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, p)
    writer.close()
    _check_peak_in_flight(tpath, 64, cap)
    assert read_engine(tpath) == {"engine": engine, "engine_depth": cap}
    store.close()


@pytest.mark.parametrize("engine, depth, cap", [("threads", 64, 1), ("io_uring", 4, 4)])
def test_the_emulated_nvme_controller_counts_against_the_engines_concurrency(tmp_path, engine,
                                                                            depth, cap):
    """backend="nvme" under ssd=...: one controller thread never has more commands out
    (fetched, CQE not yet posted) than its engine could, as the host daemon: one for the
    threads engine, the ring's depth for io_uring."""
    from tests.test_nvme import PAGE as NV_PAGE
    from tests.test_nvme import _Driver
    path, raw = _file(tmp_path, 64 * NV_PAGE, seed=14)
    store = FileStore(path, direct=False)
    tpath = tmp_path / "nvme.trace"
    writer = TraceWriter(tpath)
    drv = _Driver(np.frombuffer(raw, dtype=np.uint8), n_queues=2, depth=8, store=store)
    drv.ctrl = type(drv.ctrl)(drv.sq, drv.cq, drv.db, drv.bounce, drv.table, 2, 8, NV_PAGE, 1,
                              engine=engine, engine_depth=depth, trace_writer=writer,
                              model=SsdModel("980pro", n_ssd=4))
    blocks = NV_PAGE // L.NVME_LBA_BYTES
    pages = np.random.default_rng(15).integers(0, 64, 32)
    with drv.ctrl:
        assert drv.ctrl.capacity == cap
        for start in range(0, 32, 16):
            for k in range(16):   # 8 a queue, command ids distinct modulo its depth
                cid = start + k
                drv.submit(k // 8, cid, int(pages[cid]) * blocks, k)
            for q in range(2):
                assert all(c["status"] == 0 for c in drv.reap(q, 8))
            for k in range(16):
                page = int(pages[start + k])
                assert drv.bounce[k * NV_PAGE:(k + 1) * NV_PAGE].tobytes() == \
                    raw[page * NV_PAGE:(page + 1) * NV_PAGE]
    writer.close()
    _check_peak_in_flight(tpath, 32, cap)
    store.close()


@pytest.mark.parametrize("engine, jitter_us, ssd", [("io_uring", 0, None), ("threads", 0, None),
                                                     ("io_uring", 300, None),
                                                     ("io_uring", 0, "980pro")])
def test_emulated_nvme_controller_reads_and_writes_files_through_the_engine(tmp_path, engine,
                                                                            jitter_us, ssd):
    """The NVMe controller's Reads and Writes of a file store go through the daemon's engine:
    out of order CQEs from the ring become NVMe CQEs with the right command ids and data (also
    when completions are held: jitter, or an SSD model)."""
    from tests.test_nvme import PAGE as NV_PAGE
    from tests.test_nvme import _Driver
    path, raw = _file(tmp_path, 64 * NV_PAGE, seed=11)
    store = FileStore(path, writable=True)
    data = np.frombuffer(raw, dtype=np.uint8)
    drv = _Driver(data, n_queues=2, depth=8, store=store)
    drv.ctrl = type(drv.ctrl)(drv.sq, drv.cq, drv.db, drv.bounce, drv.table, 2, 8, NV_PAGE, 1,
                              engine=engine, jitter_us=jitter_us,
                              model=SsdModel(ssd) if ssd else None)
    blocks = NV_PAGE // L.NVME_LBA_BYTES
    with drv.ctrl:
        assert drv.ctrl.engine == engine
        pages = [5, 63, 0, 17, 9, 33, 2, 40]
        for cid, page in enumerate(pages):
            drv.submit(cid % 2, cid, page * blocks, cid)
        got = {}
        for q in range(2):
            for c in drv.reap(q, 4):
                assert c["status"] == 0
                got[c["cid"]] = True
        assert sorted(got) == list(range(8))
        for cid, page in enumerate(pages):
            assert drv.bounce[cid * NV_PAGE:(cid + 1) * NV_PAGE].tobytes() == \
                raw[page * NV_PAGE:(page + 1) * NV_PAGE]
        # A Write from slot 0 to page 3, then read back through the controller into slot 1.
        fresh = np.random.default_rng(12).integers(0, 256, NV_PAGE, dtype=np.uint8)
        drv.bounce[:NV_PAGE] = fresh
        drv.submit(0, 8, 3 * blocks, 0, opcode=L.NVME_OP_WRITE)
        assert drv.reap(0, 1)[0]["status"] == 0
        drv.submit(0, 9, 3 * blocks, 1)
        assert drv.reap(0, 1)[0]["status"] == 0
        assert (drv.bounce[NV_PAGE:2 * NV_PAGE] == fresh).all()
        if engine == "io_uring":   # writes always go through the ring
            assert drv.ctrl.engine_counters["sqes"] >= 1
    assert path.read_bytes()[3 * NV_PAGE:4 * NV_PAGE] == fresh.tobytes()
    store.close()


def test_rings_refused_at_start_fall_back_to_threads(tmp_path, monkeypatch):
    """The probe's ring was allowed but the threads' rings are not (a limit on locked memory):
    the daemon runs on threads, says why, and serves correctly."""
    path, raw = _file(tmp_path, 8 * PAGE, seed=13)
    store = FileStore(path)
    rig = _Rig(store, len(raw), "io_uring")
    monkeypatch.setattr(U, "io_uring_setup", lambda entries, params: -errno.ENOMEM)
    with pytest.warns(RuntimeWarning, match="ENOMEM|memory"):
        rig.d.start()
    try:
        assert rig.d.engine == "threads" and "could not be set up" in rig.d.engine_note
        q, t, entry = rig.submit(3, 5)
        assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, 5)
    finally:
        rig.d.stop()
        store.close()


def test_submit_and_wait_in_one_enter_and_the_ring_counts_it():
    """ring_submit_wait: a NOP submitted and its CQE waited for in one io_uring_enter; with
    nothing out, the wait ends at its bound. Peak in flight and waits are counted; the ring was
    set up with COOP_TASKRUN where the kernel has it, or plainly."""
    with U.Ring(8) as ring:
        a = ring.args
        assert ring.setup_flags in (U.Ring.COOP, 0)
        assert a.idx[U.I_SETUP_FLAGS] == ring.setup_flags
        for k in range(3):
            U.ring_prep(a, U.IORING_OP_NOP, -1, 0, 0, 0, 0, 100 + k)
        assert U.ring_submit_wait(a, 1_000_000_000) == 3
        end = time.monotonic() + 5
        while U.ring_ready(a) < 3:
            assert time.monotonic() < end
        assert sorted(U.ring_cqe(a, i)[0] for i in range(3)) == [100, 101, 102]
        U.ring_consume(a, 3)
        assert a.state[U.S_PEAK_IN_FLIGHT] == 3 and a.state[U.S_IN_FLIGHT] == 0
        start = time.monotonic()
        assert U.ring_submit_wait(a, 2_000_000) == 0   # nothing out: -ETIME, not an error
        assert time.monotonic() - start < 1.0
        assert a.state[U.S_WAITS] == 2 and a.state[U.S_ERROR] == 0


def test_an_owned_ring_takes_sqes_from_the_thread_that_enabled_it_only():
    """Ring(owned=True): set up disabled with SINGLE_ISSUER | DEFER_TASKRUN (where the kernel
    has them, else as an unowned ring); buffers register before it is enabled; it refuses SQEs
    until a thread enables it (EBADFD), serves that thread, and refuses another (EEXIST)."""
    import threading
    ring = U.Ring(8, owned=True)
    try:
        a = ring.args
        assert ring.setup_flags in (U.Ring.OWNED, U.Ring.COOP, 0)
        assert ring.setup_name == {U.Ring.OWNED: "owned", U.Ring.COOP: "coop", 0: "plain"}[
            ring.setup_flags]
        if ring.setup_flags != U.Ring.OWNED:
            pytest.skip(f"this kernel has no owned rings (set up with {ring.setup_flags:#x})")
        buf = np.zeros(4 * PAGE, dtype=np.uint8)
        assert ring.register_buffers([(buf.ctypes.data, buf.nbytes)]) is None
        U.ring_prep(a, U.IORING_OP_NOP, -1, 0, 0, 0, 0, 7)
        assert U.ring_submit(a) == -errno.EBADFD and a.state[U.S_UNSUBMITTED] == 1
        a.state[U.S_ERROR] = 0
        got = []

        def owner():
            ring.enable()
            ring.enable()   # a second time: nothing
            assert U.ring_submit_wait(a, 1_000_000_000) == 1
            end = time.monotonic() + 5
            while U.ring_ready(a) < 1:   # DEFER_TASKRUN: posted when the owner asks
                assert time.monotonic() < end
                U.ring_submit_wait(a, 1_000_000)
            got.append(U.ring_cqe(a, 0))
            U.ring_consume(a, 1)
        t = threading.Thread(target=owner)
        t.start()
        t.join(10)
        assert got == [(7, 0)]
        U.ring_prep(a, U.IORING_OP_NOP, -1, 0, 0, 0, 0, 8)
        assert U.ring_submit(a) == -errno.EEXIST
    finally:
        ring.close()


def test_owned_rings_fall_back_where_the_kernel_has_none(monkeypatch):
    """A kernel before 6.1 says EINVAL to the owned flags: the ring is set up with COOP (or
    plainly), needs no enabling, and works from any thread."""
    setup = U.io_uring_setup

    def old_kernel(entries, params):
        if int(params[0]["flags"]) & (U.IORING_SETUP_SINGLE_ISSUER | U.IORING_SETUP_COOP_TASKRUN):
            return -errno.EINVAL
        return setup(entries, params)
    monkeypatch.setattr(U, "io_uring_setup", old_kernel)
    with U.Ring(8, owned=True) as ring:
        assert ring.setup_flags == 0
        ring.enable()
        assert U.ring_nop_roundtrip(ring.args)


def test_a_ring_its_thread_cannot_enable_leaves_the_thread_serving_without_it(tmp_path,
                                                                             monkeypatch):
    """IORING_REGISTER_ENABLE_RINGS refused: the thread serves its requests synchronously, and
    the engine's error says so."""
    register = U.io_uring_register
    monkeypatch.setattr(U, "io_uring_register", lambda fd, op, *args: -errno.EPERM
                        if op == U.IORING_REGISTER_ENABLE_RINGS else register(fd, op, *args))
    path, raw = _file(tmp_path, 8 * PAGE, seed=29)
    store = FileStore(path)
    rig = _Rig(store, len(raw), "io_uring")
    rig.d.start()
    try:
        for page in range(8):
            q, t, entry = rig.submit(page % QUEUES, page)
            assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, page)
        if any(r.setup_flags == U.Ring.OWNED for r in rig.d._urings):
            assert "EPERM" in rig.d.engine_error or "not permitted" in rig.d.engine_error
    finally:
        rig.d.stop()
        store.close()


def _evict(path, start, nbytes):
    """Drop the file's clean pages in [start, start + nbytes) from the page cache (what fadvise
    can drop; the test then asks mincore what it did)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, start, nbytes, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _resident_pages(path):
    import ctypes
    import mmap
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        view = np.frombuffer(m, dtype=np.uint8)
        vec = np.zeros(-(-size // mmap.PAGESIZE), dtype=np.uint8)
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size),
                            ctypes.c_void_p(vec.ctypes.data)) == 0
        del view
        m.close()
    return vec & 1


@pytest.mark.parametrize("mapped", [True, False])
def test_a_page_cached_file_store_copies_resident_pages_and_reads_the_rest(tmp_path, mapped):
    """A file partly in the page cache, through the io_uring engine: a mapped store (the default
    without O_DIRECT) copies its resident pages from the mapping and reads the others through
    the ring; unmapped, it reads as before. Either way every page holds the file's bytes."""
    path, raw = _file(tmp_path, 64 * PAGE + 300, seed=11)
    _evict(path, 32 * PAGE, 33 * PAGE)   # (folio-aligned: fadvise drops whole folios)
    per_os_page = _resident_pages(path)
    os_pages = PAGE // os.sysconf("SC_PAGE_SIZE")
    resident = [per_os_page[p * os_pages:(p + 1) * os_pages].all() for p in range(65)]
    store = FileStore(path, direct=False, mapped=None if mapped else False)
    assert store.mapped_enabled == mapped
    with FileStore(path) as direct:   # with O_DIRECT: not mapped unless asked
        assert direct.mapped_enabled != direct.direct_enabled
    rig = _Rig(store, len(raw), "io_uring")
    pages = np.random.default_rng(12).permutation(np.arange(65))
    with rig.d:
        reqs = [(rig.submit(i % QUEUES, int(p)), int(p)) for i, p in enumerate(pages)]
        for (q, t, entry), p in reqs:
            assert rig.wait(q, t) == L.STATUS_OK
            assert rig.page(entry) == _expected(raw, p)
        counters = rig.d.engine_counters
    cold = 65 - sum(resident)
    if mapped and 0 < cold < 65:   # (fadvise may keep pages: then all are copied)
        # Resident pages never went to the ring; cold ones did (fewer if mincore looked
        # again after the ring's reads had brought some in).
        assert 0 < counters["sqes"] <= cold
    store.close()


@pytest.mark.parametrize("emulated", [False, True])
def test_a_hard_io_uring_enter_error_fails_the_rings_requests_at_once(tmp_path, emulated):
    """/dev/null dup2'd over every ring's descriptor: io_uring_enter fails (EOPNOTSUPP), each
    request the ring held completes with an I/O error at once (no timeout), the daemon says
    why in ``engine_error``, and later requests are served without the ring. A failed request
    ends as one the ring completed does (``fail_ring`` and ``reap_ring`` share its completion):
    under ``ssd=`` at its modelled time at the earliest, and in the trace."""
    path, raw = _file(tmp_path, 16 * PAGE, seed=13)
    store = FileStore(path, direct=True, mapped=False)
    if not store.direct_enabled:
        pytest.skip("no O_DIRECT here: reads would not need the ring")
    writer = TraceWriter(tmp_path / "t.trace") if emulated else None
    rig = _Rig(store, len(raw), "io_uring", model=SsdModel("980pro") if emulated else None,
               trace_writer=writer)
    null = os.open(os.devnull, os.O_RDONLY)
    with rig.d:
        assert rig.d.engine_error == ""
        for ring in rig.d._urings:
            os.dup2(null, ring.fd)
        first = [rig.submit(q, q) for q in range(QUEUES)]
        statuses = [rig.wait(q, t, timeout=10.0) for q, t, _ in first]
        assert L.STATUS_IO_ERROR in statuses
        assert "EOPNOTSUPP" in rig.d.engine_error or "errno 95" in rig.d.engine_error
        q, t, entry = rig.submit(3, 5)
        assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, 5)
    os.close(null)
    store.close()
    if emulated:
        writer.close()
        trace = read_trace(tmp_path / "t.trace")
        assert len(trace) == QUEUES + 1
        # Posted no earlier than the model's completion (device_ns), failed or not.
        assert (trace["complete_ns"] >= trace["device_ns"]).all()
        assert (trace["device_ns"] > trace["issue_ns"]).all()


# ---- registered buffers ----------------------------------------------------------------------

def _opcodes(daemon):
    """The opcodes of the SQEs the daemon's rings hold (never-filled ones read as NOP: left
    out; the daemon submits no NOP)."""
    return {int(op) for r in daemon._urings
            for op in r.args.sqes[::U.SQE_WORDS] & 0xFF} - {U.IORING_OP_NOP}


def test_a_fixed_read_and_write_use_the_registered_buffer_only(tmp_path):
    """READ_FIXED / WRITE_FIXED through ring_prep_rw move the file's bytes; an address outside
    the registered buffer is refused (EFAULT): the fixed op, not a plain one, ran."""
    path, raw = _file(tmp_path, 4 * PAGE, seed=21)
    buf = np.zeros(2 * PAGE, dtype=np.uint8)
    other = np.zeros(PAGE, dtype=np.uint8)
    clock = np.zeros(2, dtype=np.int64)
    fd = os.open(path, os.O_RDWR)
    try:
        with U.Ring(8) as ring:
            assert ring.register_buffers([(buf.ctypes.data, buf.nbytes)]) is None
            r = ring.args
            deadline = time.monotonic_ns() + int(20e9)
            U.ring_prep_rw(r, False, fd, buf.ctypes.data + PAGE, PAGE, 2 * PAGE, 0, 7)
            assert r.sqes[0] & 0xFF == U.IORING_OP_READ_FIXED and r.sqes[5] == 0
            assert U._wait_one(r, 7, deadline, clock) == PAGE
            assert buf[PAGE:].tobytes() == raw[2 * PAGE:3 * PAGE]
            data = np.random.default_rng(22).integers(0, 256, PAGE, dtype=np.uint8)
            buf[:PAGE] = data
            U.ring_prep_rw(r, True, fd, buf.ctypes.data, PAGE, PAGE, 0, 8)
            assert U._wait_one(r, 8, deadline, clock) == PAGE
            assert os.pread(fd, PAGE, PAGE) == data.tobytes()
            U.ring_prep_rw(r, False, fd, other.ctypes.data, PAGE, 0, 0, 9)
            assert U._wait_one(r, 9, deadline, clock) == -errno.EFAULT
            U.ring_prep_rw(r, False, fd, other.ctypes.data, PAGE, 0, -1, 10)   # plain READ
            assert U._wait_one(r, 10, deadline, clock) == PAGE
            assert other.tobytes() == raw[:PAGE]
    finally:
        os.close(fd)


@pytest.mark.parametrize("direct", [True, False])
def test_daemon_reads_and_writes_through_registered_buffers(tmp_path, direct):
    """With registered staging, every queue's reads (the last page short) and writes equal the
    file's bytes, and the rings' SQEs are READ_FIXED / WRITE_FIXED."""
    path, raw = _file(tmp_path, 40 * PAGE + 1000, seed=23)
    _evict(path, 0, len(raw))
    store = FileStore(path, direct=direct, mapped=False, writable=True)
    rig = _Rig(store, len(raw), "io_uring", fixed_buffers=True)
    rng = np.random.default_rng(24)
    with rig.d:
        assert rig.d.buffers_note == "registered buffers: yes"
        pages = rng.permutation(41)
        reqs = [(rig.submit(i % QUEUES, int(p)), int(p)) for i, p in enumerate(pages)]
        for (q, t, entry), page in reqs:
            assert rig.wait(q, t) == L.STATUS_OK
            assert rig.page(entry) == _expected(raw, page)
        expect = bytearray(raw)
        writes = []
        for i, page in enumerate(rng.choice(40, 12, replace=False)):
            q = i % QUEUES
            entry = q * DEPTH + int(rig.tickets[q]) % DEPTH   # the page first, then the request
            data = rng.integers(0, 256, PAGE, dtype=np.uint8)
            rig.staging[entry * PAGE:(entry + 1) * PAGE] = data
            expect[page * PAGE:(page + 1) * PAGE] = data.tobytes()
            writes.append(rig.submit(q, int(page), L.OP_WRITE)[:2])
        for q, t in writes:
            assert rig.wait(q, t) == L.STATUS_OK
        # (a buffered read of a cached page is copied on the spot: no SQE)
        ops = _opcodes(rig.d)
        assert U.IORING_OP_WRITE_FIXED in ops and (U.IORING_OP_READ_FIXED in ops or not direct)
        assert not ops & {U.IORING_OP_READ, U.IORING_OP_WRITE}
    assert path.read_bytes() == bytes(expect)
    store.close()


def test_refused_registration_falls_back_to_plain_ops_and_says_so(tmp_path, monkeypatch):
    """IORING_REGISTER_BUFFERS refused (EFAULT: memory the kernel cannot pin): one warning, the
    engine's note says why, plain READ SQEs read the file's bytes."""
    register = U.io_uring_register
    monkeypatch.setattr(U, "io_uring_register", lambda fd, op, *args: -errno.EFAULT
                        if op == U.IORING_REGISTER_BUFFERS else register(fd, op, *args))
    monkeypatch.setattr(D, "_fallback_said", set())
    path, raw = _file(tmp_path, 16 * PAGE, seed=25)
    store = FileStore(path)
    rig = _Rig(store, len(raw), "io_uring", fixed_buffers=True)
    with pytest.warns(RuntimeWarning, match="EFAULT"):
        rig.d.start()
    try:
        assert rig.d.engine == "io_uring"
        assert rig.d.buffers_note.startswith("registered buffers: no (") and "EFAULT" in \
            rig.d.buffers_note
        for page in range(16):
            q, t, entry = rig.submit(page % QUEUES, page)
            assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, page)
        assert _opcodes(rig.d) == {U.IORING_OP_READ}
    finally:
        rig.d.stop()
        store.close()


@pytest.mark.parametrize("fixed", [True, False])
def test_o_direct_refused_retries_buffered_with_a_plain_read(tmp_path, fixed):
    """Staging misaligned for O_DIRECT: each direct read fails with EINVAL and is read again on
    the buffered descriptor with a plain READ (registered buffers or not); a file truncated
    under us still reads short through a fixed buffer's partial read."""
    path, raw = _file(tmp_path, 16 * PAGE, seed=26)
    store = FileStore(path, direct=True, mapped=False)
    if store.table_row(0, len(raw))[T_FD_DIRECT] < 0:
        pytest.skip("no O_DIRECT on this file system")
    rig = _Rig(store, len(raw), "io_uring", fixed_buffers=fixed, misalign=64)
    with rig.d:
        for page in range(16):
            q, t, entry = rig.submit(page % QUEUES, page)
            assert rig.wait(q, t) == L.STATUS_OK and rig.page(entry) == _expected(raw, page)
        ops = _opcodes(rig.d)
        assert U.IORING_OP_READ in ops
        assert (U.IORING_OP_READ_FIXED in ops) == fixed
    store.close()


def test_a_partial_transfer_goes_on_in_the_same_registered_buffer():
    """cqe_status: the rest of a partial read is a READ_FIXED of the same buffer; an EINVAL
    retry on the buffered descriptor is a plain READ."""
    with U.Ring(8) as ring:
        r = ring.args
        r.state[U.S_FIXED] = 1   # (no SQE is submitted: the opcodes only are looked at)
        pend = np.zeros((4, D.P_COLUMNS), dtype=np.int64)
        p = pend[2]
        p[D.P_OP], p[D.P_FD], p[D.P_ALT_FD] = L.OP_READ, 5, 6
        p[D.P_ADDR], p[D.P_FILE_OFFSET], p[D.P_LEFT], p[D.P_BUF] = 1 << 20, PAGE, PAGE, 3
        assert D.cqe_status(r, pend, 2, 1000) == D._QUEUED
        sqe = r.sqes[:U.SQE_WORDS]
        assert sqe[0] & 0xFF == U.IORING_OP_READ_FIXED and sqe[5] == 3 and sqe[0] >> 32 == 5
        assert sqe[2] == (1 << 20) + 1000 and sqe[1] == PAGE + 1000
        assert sqe[3] & 0xFFFFFFFF == PAGE - 1000
        assert D.cqe_status(r, pend, 2, -errno.EINVAL) == D._QUEUED
        sqe = r.sqes[U.SQE_WORDS:2 * U.SQE_WORDS]
        assert sqe[0] & 0xFF == U.IORING_OP_READ and sqe[5] == 0 and sqe[0] >> 32 == 6
        assert p[D.P_BUF] == -1


def test_the_loops_passing_a_completion_function_stay_cacheable(tmp_path, monkeypatch):
    """The host daemon and the NVMe controller reap CQEs and fail a broken ring's requests with
    one loop each (``reap_ring``, ``fail_ring``), given the caller's completion function.
    Passed across a call that is not inlined, Numba embeds that dispatcher's address in the
    code (a dynamic global), which no process can load from the disk cache: the loops would be
    compiled again in every process. Fresh copies of the functions that pass one compile
    without any, for the arguments the loops get with io_uring, emulation and a trace."""
    import inspect

    from numba import njit, typeof

    from host_daemon import nvme_controller as N
    from tests.test_nvme import PAGE as NV_PAGE
    from tests.test_nvme import _Driver
    path, raw = _file(tmp_path, 16 * NV_PAGE, seed=16)
    store = FileStore(path, direct=False)
    writer = TraceWriter(tmp_path / "t.trace")
    rig = _Rig(store, len(raw), "io_uring", model=SsdModel("980pro"), trace_writer=writer)
    drv = _Driver(np.frombuffer(raw, dtype=np.uint8), n_queues=2, depth=8, store=store)
    ctrl = type(drv.ctrl)(drv.sq, drv.cq, drv.db, drv.bounce, drv.table, 2, 8, NV_PAGE, 1,
                          engine="io_uring", trace_writer=writer, model=SsdModel("980pro"))
    # Each loop's arguments by name, as start() passes them (its threads' loops return at once).
    given = {}
    for module, name, server in ((D, "serve_queues", rig.d), (N, "serve_queue_pairs", ctrl)):
        names = list(inspect.signature(getattr(module, name).py_func).parameters)
        monkeypatch.setattr(module, name,
                            lambda *a, names=names, name=name: given.setdefault(
                                name, dict(zip(names, a))))
        server.start()
        server.stop()
    writer.close()
    store.close()
    for f, loop in ((D._reap, "serve_queues"), (D._fail_ring, "serve_queues"),
                    (N._serve_pairs, "serve_queue_pairs")):
        options = {k: v for k, v in f.targetoptions.items() if k != "nopython"}
        fresh = njit(**dict(options, cache=False))(f.py_func)
        args = [given[loop][a] for a in inspect.signature(f.py_func).parameters]
        sig = tuple(typeof(a) for a in args)
        fresh.compile(sig)
        assert not fresh.overloads[sig].library.has_dynamic_globals, f.__name__
