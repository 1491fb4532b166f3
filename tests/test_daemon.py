"""The host daemon's loop alone, on the CPU: requests written into plain numpy queues the way
a kernel writes them, one at a time (each waits for its completion, as one GPU thread missing
at a time does) or on many queues at once."""
import time

import numpy as np
import pytest

from gids import layout as L
from host_daemon import daemon as D
from host_daemon.stores import T_COLUMNS, MemoryStore
from host_daemon.sync import private_array

QUEUES, DEPTH, PAGE = 64, 8, 512


def _daemon(hot_every, monkeypatch):
    monkeypatch.setattr(D, "HOT_QUEUE_EVERY", hot_every)
    data = np.random.default_rng(0).integers(0, 1 << 62, 64 * PAGE // 8, dtype=np.int64)
    store = MemoryStore(data, zero_copy=False)
    table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
    table[0] = store.table_row(0, data.nbytes)
    n = QUEUES * DEPTH
    sq = private_array(n * L.SQ_WORDS)
    cq = private_array(n * L.CQ_WORDS)
    staging = np.zeros(n * PAGE, dtype=np.uint8)
    d = D.HostDaemon(sq, cq, staging, table, QUEUES, DEPTH, PAGE, n_threads=1)
    return d, data, sq, cq, staging


def _submit(sq, q, ticket, page):
    rec = (q * DEPTH + ticket % DEPTH) * L.SQ_WORDS
    sq[rec + L.SQ_ARRAY] = 0
    sq[rec + L.SQ_PAGE] = page
    sq[rec + L.SQ_OP] = L.OP_READ
    sq[rec + L.SQ_SEQ] = ticket + 1   # numpy store: the daemon thread sees it (the GIL orders)


def _wait(cq, q, ticket, timeout=10.0):
    rec = (q * DEPTH + ticket % DEPTH) * L.CQ_WORDS
    end = time.monotonic() + timeout
    while cq[rec + L.CQ_SEQ] != ticket + 1:
        assert time.monotonic() < end, f"queue {q} ticket {ticket} not served"
    return cq[rec + L.CQ_STATUS], cq[rec + L.CQ_SOURCE]


@pytest.mark.parametrize("hot_every", [0, 32, 1])
def test_one_request_at_a_time_then_many_queues_at_once(hot_every, monkeypatch):
    """One queue at a time (the hot-queue looks serve it), then requests on every queue at once
    (no queue is hot): every request is served once, in ticket order, with its page."""
    d, data, sq, cq, staging = _daemon(hot_every, monkeypatch)
    words = PAGE // 8
    with d:
        for ticket in range(40):
            q = 37 if ticket < 20 else 5   # the hot queue moves
            t = ticket if ticket < 20 else ticket - 20
            page = (7 * ticket) % 64
            _submit(sq, q, t, page)
            status, source = _wait(cq, q, t)
            assert status == L.STATUS_OK and source == L.SOURCE_STAGING
            entry = q * DEPTH + t % DEPTH
            got = staging[entry * PAGE:(entry + 1) * PAGE].view(np.int64)
            np.testing.assert_array_equal(got, data[page * words:(page + 1) * words])
        tickets = np.zeros(QUEUES, dtype=np.int64)
        tickets[37], tickets[5] = 20, 20
        for _ in range(DEPTH):
            for q in range(QUEUES):
                _submit(sq, q, tickets[q], q)
            for q in range(QUEUES):
                assert _wait(cq, q, tickets[q])[0] == L.STATUS_OK
            tickets += 1
        assert d.served == 40 + DEPTH * QUEUES
