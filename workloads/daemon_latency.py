"""The host daemon's round trip for one request at a time, on the host alone (no GPU).

``python -m workloads.daemon_latency [--queues 64,512] [--daemon-threads 1,8]
[--engine io_uring,threads] [--requests 20000] [--json FILE]``

A CPU thread (``njit(nogil=True)``) plays one GPU thread missing one page at a time: it
publishes a read of a random page of a RAM store on one queue (``gids.layout``'s request word,
release store), polls for its completion word and takes the time between. What it measures is
the daemon's side of ``microbench latency``'s QD1 figure: how long a thread's pass over its
queues takes to find a request and post its completion, which every visit's cost adds to. The
page's bytes in the staging entry are checked against the store's.
"""
import argparse
import json
import sys
import time

import numpy as np
from numba import njit

from gids import console
from gids import layout as L
from gids.errors import GidsTimeoutError
from gids.host import (
    T_COLUMNS,
    HostDaemon,
    MemoryStore,
    cq_fields,
    cq_seq,
    load_acquire,
    sq_tag,
    sq_word,
    store_release,
)
from gids.host import now_ns as _now_ns

PAGE = 4096
#: Entries per queue.
DEPTH = 32
#: Round trips left out of the figures at the start (the daemon's threads warming up).
WARM_UP = 1000


#: A round trip longer than this ends the run (the daemon died or stopped serving).
WAIT_NS = 5_000_000_000


@njit(nogil=True, cache=True)
def one_at_a_time(q, sq, cq, depth, n_pages, pages, lat, clock):
    """Issue ``pages[t]`` on queue ``q`` one at a time; ``lat[t]``: its round trip (ns).
    Returns -1, or the first ``t`` whose completion did not come within WAIT_NS."""
    for t in range(pages.size):
        e = q * depth + t % depth
        word = sq_word(sq_tag(t, depth), 0, pages[t], L.OP_READ)
        t0 = _now_ns(clock)
        store_release(sq, e * L.SQ_WORDS + L.SQ_WORD, word)
        polls = 0
        while cq_fields(load_acquire(cq, e * L.CQ_WORDS + L.CQ_WORD))[0] != cq_seq(t):
            polls += 1
            if polls % 4096 == 0 and _now_ns(clock) - t0 > WAIT_NS:
                return t
        lat[t] = _now_ns(clock) - t0
    return -1


def round_trip(queues, threads, engine, requests=20000, seed=0, store_mib=64):
    """One row: QD1 round-trip percentiles (us) through a :class:`HostDaemon` of ``threads``
    threads over ``queues`` queues, the request on a queue in the middle of the range."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 255, store_mib << 20, dtype=np.uint8)
    n_pages = data.size // PAGE
    store = MemoryStore(data, zero_copy=False)   # copied into the staging entry, checked below
    n = queues * DEPTH
    sq = np.zeros(n * L.SQ_WORDS, dtype=np.int64)
    cq = np.zeros(n * L.CQ_WORDS, dtype=np.int64)
    staging = np.zeros(n * PAGE, dtype=np.uint8)
    table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
    table[0] = store.table_row(0, data.size)
    pages = rng.integers(0, n_pages, requests + WARM_UP).astype(np.int64)
    lat = np.zeros(pages.size, dtype=np.int64)
    clock = np.zeros(2, dtype=np.int64)
    one_at_a_time(0, sq.copy(), cq.copy(), DEPTH, n_pages, pages[:0], lat, clock)   # compile
    q = queues // 2
    daemon = HostDaemon(sq, cq, staging, table, queues, DEPTH, PAGE, threads, engine=engine)
    with daemon:
        time.sleep(0.05)
        late = one_at_a_time(q, sq, cq, DEPTH, n_pages, pages, lat, clock)
        daemon.check()
    if late >= 0:
        raise GidsTimeoutError(f"gids: request {late} (page {pages[late]}) was not served "
                               f"within {WAIT_NS / 1e9:g} s", what="daemon_latency")
    last = pages.size - 1
    entry = q * DEPTH + last % DEPTH
    got = staging[entry * PAGE:(entry + 1) * PAGE]
    want = data[pages[last] * PAGE:(pages[last] + 1) * PAGE]
    us = lat[WARM_UP:] / 1e3
    return {"engine": daemon.engine, "queues": queues, "threads": threads, "requests": requests,
            "p50_us": float(np.median(us)), "p90_us": float(np.percentile(us, 90)),
            "p99_us": float(np.percentile(us, 99)), "mean_us": float(us.mean()),
            "correct": bool(np.array_equal(got, want))}


def _ints(text):
    return [int(x) for x in text.split(",")]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m workloads.daemon_latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queues", default="64,512", help="queue counts (64,512)")
    p.add_argument("--daemon-threads", default="1,8", help="daemon thread counts (1,8)")
    p.add_argument("--engine", default="io_uring,threads", help="engines (io_uring,threads)")
    p.add_argument("--requests", type=int, default=20000, help="round trips timed (20000)")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    a = p.parse_args(argv)
    try:
        queues, threads = _ints(a.queues), _ints(a.daemon_threads)
    except ValueError:
        p.error("--queues and --daemon-threads take comma-separated integers")
    engines = a.engine.split(",")
    if any(e not in ("io_uring", "threads") for e in engines):
        p.error("--engine takes io_uring and/or threads")
    if a.requests < 1 or min(queues + threads) < 1:
        p.error("--requests, --queues and --daemon-threads must be positive")
    rows = [round_trip(nq, nt, e, a.requests) for e in engines for nq in queues for nt in threads]
    print(console.table(["engine", "queues", "threads", "p50 us", "p90 us", "p99 us", "correct"],
                        [[r["engine"], r["queues"], r["threads"], f"{r['p50_us']:.2f}",
                          f"{r['p90_us']:.2f}", f"{r['p99_us']:.2f}", r["correct"]]
                         for r in rows]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"suite": "daemon_latency", "command": " ".join(sys.argv), "rows": rows},
                      f, indent=1)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
