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
    # numpy store: the daemon thread sees it (the GIL orders)
    sq[rec + L.SQ_WORD] = L.sq_word(L.sq_tag(ticket, DEPTH), 0, page, L.OP_READ)


def _wait(cq, q, ticket, timeout=10.0):
    rec = (q * DEPTH + ticket % DEPTH) * L.CQ_WORDS
    end = time.monotonic() + timeout
    while L.cq_fields(int(cq[rec + L.CQ_WORD]))[0] != L.cq_seq(ticket):
        assert time.monotonic() < end, f"queue {q} ticket {ticket} not served"
    return L.cq_fields(int(cq[rec + L.CQ_WORD]))[1:]


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


@pytest.mark.parametrize("ticket", [0, 5, L.CQ_SEQ_MASK - 1, L.CQ_SEQ_MASK, 3 << 40])
@pytest.mark.parametrize("status", [L.STATUS_OK, L.STATUS_IO_ERROR, L.STATUS_SHORT_READ,
                                    L.STATUS_BAD_REQUEST, L.STATUS_SHORT_WRITE])
@pytest.mark.parametrize("source", [L.SOURCE_STAGING, 0, 12345, L.CQ_MAX_SOURCE])
def test_the_completion_word_carries_ticket_status_and_source(ticket, status, source):
    """One word holds the whole answer (the GPU reads it with one acquire): the daemon's
    encoding (``_post``) decodes to what it was given, and the sequence of an entry's next
    ticket never matches its previous one."""
    cq = np.zeros(L.CQ_WORDS, dtype=np.int64)
    D._post(cq, 0, ticket, status, source)
    word = int(cq[L.CQ_WORD])
    assert 0 <= word and word == L.cq_word(L.cq_seq(ticket), status, source)
    assert L.cq_fields(word) == (L.cq_seq(ticket), status, source)
    for depth in (32, 128, L.MAX_QUEUE_DEPTH):
        assert L.cq_seq(ticket + depth) != L.cq_seq(ticket)


@pytest.mark.parametrize("ticket", [0, 1, 31, 32, 5 << 13, (1 << 45) + 7])
@pytest.mark.parametrize("depth", [32, 4096, L.MAX_QUEUE_DEPTH])
@pytest.mark.parametrize("array_id, page, op", [(0, 0, L.OP_READ), (7, 12345, L.OP_WRITE),
                                                (L.MAX_ARRAYS - 1, L.SQ_MAX_PAGE, L.OP_READ)])
def test_the_request_word_carries_array_page_op_and_a_tag_of_its_turn(ticket, depth, array_id,
                                                                      page, op):
    """A request is one word (one store, no fence on the GPU): it decodes to what was given,
    is a non-negative int64, and its tag differs from the tag of the entry's previous turn (and
    from a zeroed ring's), so the daemon never takes an old request for a new one."""
    word = L.sq_word(L.sq_tag(ticket, depth), array_id, page, op)
    assert 0 <= word < 1 << 63
    assert L.sq_fields(word) == (L.sq_tag(ticket, depth), array_id, page, op)
    if ticket >= depth:
        assert L.sq_tag(ticket, depth) != L.sq_tag(ticket - depth, depth)
    if ticket < depth:
        assert L.sq_tag(ticket, depth) != 0    # a zeroed ring holds no request of turn 0
