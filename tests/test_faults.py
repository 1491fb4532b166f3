"""Faults reach Python as named exceptions within their time bound, and the Runtime recovers."""
import time

import numpy as np
import pytest
from numba import cuda

import gids
from gids import layout as L
from tests.helpers import skip_unless_simulator

PAGE = 512
DATA = np.arange(16 * PAGE // 8, dtype=np.int64)      # 16 pages


def _runtime(faults, timeout=2.0, **kw):
    rt = gids.Runtime(cache_pages=4, page_size=PAGE, timeout=timeout, **kw)
    store = gids.FaultyStore(DATA, page_size=PAGE, faults=faults)
    return rt, rt.open_array(store, np.int64, shape=DATA.shape)


def _element_of(page):
    return page * PAGE // 8 + 3


@pytest.mark.parametrize("fault, match", [("eio", "page 5 .*faulty memory store.*Input/output"),
                                          ("short", "page 5 .*short read")])
def test_io_errors_name_the_page_and_runtime_recovers(fault, match):
    rt, a = _runtime({5: fault})
    with rt:
        start = time.monotonic()
        with pytest.raises(gids.StorageIOError, match=match) as info:
            rt.gather(a, [_element_of(1), _element_of(5), _element_of(2)])
        assert info.value.page == 5
        assert time.monotonic() - start < 30
        got = rt.gather(a, [_element_of(1), _element_of(2)]).copy_to_host()
        np.testing.assert_array_equal(got, DATA[[_element_of(1), _element_of(2)]])


def test_slow_page_times_out_with_a_named_wait():
    rt, a = _runtime({3: ("slow", 3.0)}, timeout=0.5)
    with rt:
        start = time.monotonic()
        with pytest.raises(gids.GidsTimeoutError, match="daemon to complete") as info:
            rt.gather(a, [_element_of(3)])
        assert "complete" in info.value.what
        assert time.monotonic() - start < 20
        assert rt.gather(a, [_element_of(4)])[0] == DATA[_element_of(4)]


def test_dead_daemon_thread_is_reported():
    rt, a = _runtime({7: "crash"}, timeout=0.5)
    with rt:
        with pytest.raises(gids.DaemonError, match="exited"):
            rt.gather(a, [_element_of(7)])
        # a new daemon serves the other pages
        assert rt.gather(a, [_element_of(6)])[0] == DATA[_element_of(6)]


def test_full_queue_times_out_when_nobody_serves_it():
    with gids.Runtime(cache_pages=16, page_size=PAGE, queues=1, queue_depth=2, timeout=0.5) as rt:
        a = rt.open_array(DATA)
        rt.daemon.stop()
        with pytest.raises(gids.GidsTimeoutError):
            rt.gather(a, [_element_of(p) for p in range(8)])


def test_more_pages_in_use_than_slots():
    """Two slots, held by two slow loads; other threads find no slot to evict in time."""
    rt = gids.Runtime(cache_pages=2, page_size=PAGE, timeout=0.5)
    store = gids.FaultyStore(DATA, page_size=PAGE, faults={p: ("slow", 2.0) for p in range(16)})
    with rt:
        a = rt.open_array(store, np.int64, shape=DATA.shape)
        with pytest.raises(gids.GidsTimeoutError):
            rt.gather(a, [_element_of(p) for p in range(8)])


def test_faulty_store_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown fault"):
        gids.FaultyStore(DATA, page_size=PAGE, faults={1: "gremlins"})
    with pytest.raises(ValueError, match="has 16 pages"):
        gids.FaultyStore(DATA, page_size=PAGE, faults={99: "eio"})
    with gids.Runtime(cache_pages=4, page_size=1024) as rt:
        with pytest.raises(gids.ConfigError, match="pages of 512"):
            rt.open_array(gids.FaultyStore(DATA, page_size=PAGE, faults={}), np.int64,
                          shape=DATA.shape)


def test_abort_stops_waiting_kernels_promptly():
    """Runtime.abort() (what Ctrl-C in sync() calls) ends a kernel stuck on a slow page well
    before its timeout, as AbortedError, and the Runtime is usable again."""
    import threading
    rt, a = _runtime({2: ("slow", 1.5)}, timeout=60.0)
    with rt:
        timer = threading.Timer(0.3, rt.abort)
        timer.start()
        start = time.monotonic()
        with pytest.raises(gids.AbortedError):
            rt.gather(a, [_element_of(2)])
        assert time.monotonic() - start < 15        # not the 60 s timeout
        assert rt.gather(a, [_element_of(3)])[0] == DATA[_element_of(3)]


@cuda.jit
def _both_read_page_0(h, out):
    if cuda.threadIdx.x == 1:   # a waiter: thread 0 is the loader
        while h.page_state[0] & L.PAGE_BUSY == 0:
            pass
    out[cuda.threadIdx.x] = gids.read(h, 3)


@skip_unless_simulator   # replaces a device function, reads the page states before sync()
def test_a_waiter_that_gives_up_leaves_no_reference(monkeypatch):
    """Thread 1 waits for page 0 (thread 0 loads it, slowly) and its wait expires at once: it
    must give its reference back and take no other. It used to pin the page again in the next
    round, before its group saw the failure, and left with that reference (the page could
    then never be evicted in that kernel)."""
    import kernels.access as access
    expired = access.expired

    def thread_1_expires(h, deadline, polls):
        return cuda.threadIdx.x == 1 or expired(h, deadline, polls)

    monkeypatch.setattr(access, "expired", thread_1_expires)
    rt, a = _runtime({0: ("slow", 1.0)}, timeout=10.0)
    with rt:
        out = cuda.device_array(2, np.int64)
        _both_read_page_0[1, 2](a.handle, out)   # the simulator: done when the launch returns
        state = int(rt._page_state.copy_to_host()[a.page_base])
        assert state & L.PAGE_VALID and not state & L.PAGE_BUSY
        assert state & L.PAGE_REF_MASK == 0, state
        with pytest.raises(gids.GidsTimeoutError):
            rt.sync()
        assert out.copy_to_host()[0] == DATA[3]


def test_recovery_waits_for_a_daemon_thread_stuck_in_a_store_call(monkeypatch):
    """A write-back stalls in the store past the kernel's timeout and past the daemon's stop:
    recovery must wait for that thread before the queues are used again. It used to go on, and
    the thread, waking up, stored its staging page, by then holding another page's bytes from
    a later read, as page 0 (the store silently held the wrong page; after close, the process
    could crash)."""
    from host_daemon.daemon import HostDaemon
    stop = HostDaemon.stop
    monkeypatch.setattr(HostDaemon, "stop", lambda self, timeout=0.3: stop(self, timeout))
    data = DATA.copy()
    store = gids.FaultyStore(data, page_size=PAGE, faults={0: ("write_slow", 3.0)})
    with gids.Runtime(cache_pages=1, page_size=PAGE, queues=1, queue_depth=1,
                      timeout=0.3) as rt:
        a = rt.open_array(store, np.int64, shape=DATA.shape, mode="r+")
        rt.scatter(a, [3], [-3])                        # page 0 dirty in the one slot
        stalled = list(rt.daemon._threads)
        with pytest.raises(gids.GidsTimeoutError):
            rt.gather(a, [_element_of(1)])              # evicts page 0: its write stalls
        assert not any(t.is_alive() for t in stalled)  # recovery waited for it
        assert rt.gather(a, [_element_of(2)])[0] == DATA[_element_of(2)]  # the same entry
        rt.invalidate()
        expected = DATA[:PAGE // 8].copy()
        expected[3] = -3
        np.testing.assert_array_equal(rt.gather(a, np.arange(PAGE // 8)).copy_to_host(),
                                      expected)
    np.testing.assert_array_equal(data[:PAGE // 8], expected)


def test_a_store_call_past_the_bound_strands_the_runtime_not_the_caller(monkeypatch):
    """Recovery waits for a stuck daemon thread only so long (STUCK_STORE_CALL_S, here cut to
    0.5 s): then it raises a named error instead of hanging, keeps the thread's buffers and
    files, so that its call returning later harms nothing, and refuses any further use."""
    import gids.runtime as runtime_module
    from host_daemon.daemon import HostDaemon
    stop = HostDaemon.stop
    monkeypatch.setattr(HostDaemon, "stop", lambda self, timeout=0.3: stop(self, timeout))
    monkeypatch.setattr(runtime_module, "STUCK_STORE_CALL_S", 0.5)
    data = DATA.copy()
    store = gids.FaultyStore(data, page_size=PAGE, faults={0: ("write_slow", 3.0)})
    rt = gids.Runtime(cache_pages=1, page_size=PAGE, queues=1, queue_depth=1, timeout=0.3)
    a = rt.open_array(store, np.int64, shape=DATA.shape, mode="r+")
    rt.scatter(a, [3], [-3])                            # page 0 dirty in the one slot
    stalled = list(rt.daemon._threads)
    start = time.monotonic()
    with pytest.raises(gids.DaemonError, match="still inside a store call") as raised:
        rt.gather(a, [_element_of(1)])                  # evicts page 0: its write stalls
    assert time.monotonic() - start < 2.5               # did not wait for the 3 s call
    assert any("kernels had failed" in note for note in raised.value.__notes__)
    with pytest.raises(gids.DaemonError, match="still inside a store call"):
        rt.gather(a, [0])
    rt.close()                                          # stranded: nothing left to close
    for t in stalled:
        t.join(10)
    assert not any(t.is_alive() for t in stalled)
    assert data[3] == -3 and data[4] == DATA[4]        # the late write stored page 0's bytes


# --- writes (over the host daemon, and over the NVMe path: a Write command per eviction) ---

BACKENDS = ["host", "nvme"]
#: What a timeout of an eviction's write-back names, per back end.
WAITED_FOR = {"host": "daemon to complete", "nvme": "NVMe controller to complete"}


def _writable(faults, timeout=2.0, cache_pages=2, backend="host", **kw):
    """A Runtime over a FaultyStore on a fresh copy of DATA (writes land in that copy)."""
    data = DATA.copy()
    rt = gids.Runtime(backend, cache_pages=cache_pages, page_size=PAGE, timeout=timeout, **kw)
    store = gids.FaultyStore(data, page_size=PAGE, faults=faults)
    return rt, rt.open_array(store, np.int64, shape=DATA.shape, mode="r+"), data


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_back_eio_on_eviction_names_file_and_page(backend, monkeypatch):
    rt, a, data = _writable({5: "write_eio"}, backend=backend)
    with rt:
        rt.scatter(a, [_element_of(5), _element_of(1)], [-5, -1])
        # What the failed kernel left in the cache, seen by the recovery's host write-back.
        left = {}
        host_write_back = rt._write_back_dirty

        def spy(best_effort=False):
            gpage = a.page_base + 5
            left["state"] = int(rt._page_state.copy_to_host()[gpage])
            slot = left["state"] >> int(L.PAGE_SLOT_SHIFT)   # the word's high half
            left["value"] = int(rt._cache.copy_to_host().view(np.int64)[slot * PAGE // 8 + 3])
            left["counters"] = getattr(rt.daemon, "counters", None)
            return host_write_back(best_effort)

        monkeypatch.setattr(rt, "_write_back_dirty", spy)
        start = time.monotonic()
        # The NVMe path's Write Fault maps back to the host path's status: the same message.
        with pytest.raises(gids.StorageIOError, match="cannot write page 5 .*faulty memory "
                           r"store.*\(I/O error\), on eviction") as info:
            rt.gather(a, [_element_of(p) for p in (2, 3, 4)])   # evicts 5 (and 1)
        assert info.value.page == 5
        assert time.monotonic() - start < 30
        # The kernel lost nothing: the victim is back in its slot, VALID and DIRTY, with its
        # write (not BUSY: nobody is writing it back any more).
        valid_dirty = int(L.PAGE_VALID) | int(L.PAGE_DIRTY)
        assert left["state"] & (valid_dirty | int(L.PAGE_BUSY)) == valid_dirty
        assert left["value"] == -5
        if backend == "nvme":   # the refusal was a failed Write command (Write Fault)
            assert left["counters"]["writes"] >= 1 and left["counters"]["errors"] >= 1
        # The store refused page 5 on the host too: dropped, and the exception says so.
        assert "dropped: page 5" in "".join(getattr(info.value, "__notes__", []))
        assert data[_element_of(1)] == -1                   # page 1 was written back
        assert rt.gather(a, [_element_of(6)])[0] == DATA[_element_of(6)]   # usable again


def test_write_eio_in_flush_names_the_page_and_keeps_it_dirty():
    rt, a, data = _writable({3: "write_eio"}, cache_pages=4)
    with rt:
        rt.scatter(a, [_element_of(2), _element_of(3)], [7, 8])
        with pytest.raises(gids.StorageIOError, match="cannot write page 3 .*Input/output"):
            rt.flush()
        assert rt.gather(a, [_element_of(3)])[0] == 8       # still in the cache, dirty
        rt.invalidate(discard_dirty=True)                   # give up on it
        assert data[_element_of(2)] == 7 and data[_element_of(3)] == DATA[_element_of(3)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_slow_write_back_times_out_and_loses_nothing(backend):
    rt, a, data = _writable({4: ("write_slow", 3.0)}, timeout=0.5, backend=backend)
    with rt:
        rt.scatter(a, [_element_of(4)], [44])
        # The first thread to time out names the error: the write-back's own lane, or, on a
        # loaded machine, a lane of the same warp waiting for that loader (its deadline started
        # with the call too).
        with pytest.raises(gids.GidsTimeoutError,
                           match=f"{WAITED_FOR[backend]}|another thread loading"):
            rt.gather(a, [_element_of(p) for p in (1, 2, 3)])
        rt.flush()
        assert data[_element_of(4)] == 44                   # recovery wrote it from the host


@pytest.mark.parametrize("backend", BACKENDS)
def test_daemon_dying_on_a_write_back_is_reported(backend):
    rt, a, data = _writable({6: "write_crash"}, timeout=0.5, backend=backend)
    with rt:
        rt.scatter(a, [_element_of(6)], [66])
        with pytest.raises(gids.DaemonError, match="exited"):
            rt.gather(a, [_element_of(p) for p in (1, 2, 3)])
        assert data[_element_of(6)] == 66
        assert rt.gather(a, [_element_of(6)])[0] == 66


@pytest.mark.parametrize("backend", BACKENDS)
def test_abort_during_a_write_back_loses_nothing(backend):
    import threading
    # Threads of other tests' process-wide pools (the graph builders') are not this Runtime's.
    before = set(threading.enumerate())
    rt, a, data = _writable({2: ("write_slow", 1.5)}, timeout=60.0, backend=backend)
    with rt:
        rt.scatter(a, [_element_of(2)], [22])
        timer = threading.Timer(0.3, rt.abort)
        timer.start()
        start = time.monotonic()
        with pytest.raises(gids.AbortedError):
            rt.gather(a, [_element_of(p) for p in (4, 5, 6)])
        assert time.monotonic() - start < 15
        rt.flush()
        assert data[_element_of(2)] == 22
    # nothing left spinning: every daemon thread of the Runtime has stopped
    assert not [t.name for t in threading.enumerate()
                if t.name.startswith("gids-") and t not in before]


def test_writes_to_a_full_queue_time_out_when_nobody_serves_it():
    with gids.Runtime(cache_pages=16, page_size=PAGE, queues=1, queue_depth=2,
                      timeout=0.5) as rt:
        a = rt.open_array(DATA.copy(), mode="r+")
        rt.daemon.stop()
        with pytest.raises(gids.GidsTimeoutError):
            rt.scatter(a, [_element_of(p) for p in range(8)], 1)
