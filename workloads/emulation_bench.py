"""Real-time emulation, recorded and replayed, on the host alone (no GPU): issue 3's check.

``python -m workloads.emulation_bench [--ssd pm1743] [--n-ssd 1,2,4] [--requests 262144]
[--daemon-threads 1] [--drivers 1] [--queues 512] [--depth 128] [--json FILE]
[--keep-traces DIR]``

CPU *driver* threads (``njit(nogil=True)``) play the GPU's part on the host daemon's queues
(``gids.layout``: 32-byte SQ records published by a release store of their sequence word,
completions polled by theirs), as ``workloads/controller_bench.py`` does for the NVMe
controller. A driver treats each of its queues as a GPU warp would: 32 consecutive tickets at a
time, submitted once their entries are free (the entry's previous ticket reaped), reaped in
ticket order, and the next 32 at once (a closed loop, no think time), until it has issued its
share of ``--requests`` random 4 KiB reads of a RAM store. The daemon emulates the SSD array in
real time and records the trace; the run's wall time (first submission to last completion
reaped, on the daemon's clock) is then compared with ``replay`` of the trace through the same
model, and split into what the trace covers (first issue to last posted completion) and what it
cannot (the lead-in before the daemon sees the first request, the tail after the last posting).

:func:`compare_with_replay` does the comparison for any recorded run; the GPU suite's emulation
rows use it too (``workloads.microbench``). Each row also gives the replay of the same trace
with the host's recorded costs taken out (as version 1 traces recorded runs), which is what
``gids simulate`` predicted before they were recorded.

A **CPU figure**: the host side alone, with the drivers' cost instead of the GPU's. Give the
machine cores for both (daemon threads + drivers <= cores), or the figure measures the scheduler.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np
from numba import njit

import gids
from gids import layout as L
from gids import read_trace, replay
from gids.host import (
    T_COLUMNS,
    HostDaemon,
    SsdModel,
    TraceWriter,
    cq_fields,
    cq_seq,
    load_acquire,
    sq_tag,
    sq_word,
    store_release,
)
from gids.host import now_ns as _now_ns  # the daemon's clock (CLOCK_MONOTONIC)

#: Tickets a driver submits to one queue at a time: one warp's.
WARP = 32


@njit(nogil=True, cache=True)
def drive(my_queues, sq, cq, depth, n_pages, quota, state, times, seed):
    """One driver's closed loop over ``my_queues`` until it has issued ``quota`` reads and
    reaped them all. ``state[k]``: queue k's next ticket to submit and to reap. ``times``:
    first submission and last reap (ns, CLOCK_MONOTONIC), then two scratch words."""
    x = seed | 1
    issued = 0
    reaped = 0
    first = -1
    last = 0
    clock = times[2:4]
    while reaped < quota:
        for k in range(my_queues.shape[0]):
            q = my_queues[k]
            while state[k, 1] < state[k, 0]:
                t = state[k, 1]
                e = q * depth + t % depth
                if cq_fields(load_acquire(cq, e * L.CQ_WORDS + L.CQ_WORD))[0] != cq_seq(t):
                    break
                state[k, 1] = t + 1
                reaped += 1
                last = _now_ns(clock)
            if issued < quota and depth - (state[k, 0] - state[k, 1]) >= WARP:
                for _ in range(min(WARP, quota - issued)):
                    t = state[k, 0]
                    rec = (q * depth + t % depth) * L.SQ_WORDS
                    x ^= (x << 13) & 0x7FFFFFFFFFFFFFFF   # xorshift64
                    x ^= x >> 7
                    x ^= (x << 17) & 0x7FFFFFFFFFFFFFFF
                    word = sq_word(sq_tag(t, depth), 0, x % n_pages, L.OP_READ)
                    if first < 0:
                        first = _now_ns(clock)
                    store_release(sq, rec + L.SQ_WORD, word)
                    state[k, 0] = t + 1
                    issued += 1
    times[0] = first
    times[1] = last


def compare_with_replay(trace, start_ns, end_ns, profile, n_ssd):
    """Compare a recorded run with the replay of its trace through the model it emulated.

    ``trace``: the run's records only; ``start_ns`` and ``end_ns``: the run's wall clock span
    on the daemon's clock (``time.monotonic_ns``). Returns a dict: ``wall_s``; ``predicted_s``
    (closed-loop replay) and ``ratio`` (predicted / wall); ``predicted_open_s``;
    ``predicted_without_host_s`` (the replay with the recorded host costs taken out, as version
    1 traces had it); ``trace_span_s`` (first issue to last posting: what a replay can
    predict), ``lead_in_us`` (start to first issue) and ``tail_us`` (last posting to end);
    the recorded means of the host part, the device latency and the post delay, and the post
    delay's p50 / p99 (us); ``measured_Miops``.
    """
    n = len(trace)
    if n == 0:
        raise ValueError("no trace records in the run")
    closed = replay(trace, profile, n_ssd=n_ssd)
    opened = replay(trace, profile, n_ssd=n_ssd, mode="open")
    legacy = trace.copy()
    legacy["ready_ns"] = legacy["issue_ns"]
    legacy["device_ns"] = legacy["complete_ns"]
    without = replay(legacy, profile, n_ssd=n_ssd)
    issue = trace["issue_ns"].astype(np.int64)
    ready = trace["ready_ns"].astype(np.int64)
    device = trace["device_ns"].astype(np.int64)
    complete = trace["complete_ns"].astype(np.int64)
    post = complete - np.maximum(ready, device)
    wall = (end_ns - start_ns) / 1e9
    p50, p99 = np.percentile(post, [50, 99]) / 1e3
    return {"profile": closed.profile, "n_ssd": n_ssd, "requests": n, "wall_s": wall,
            "predicted_s": closed.time_s, "ratio": closed.time_s / wall,
            "predicted_open_s": opened.time_s,
            "predicted_without_host_s": without.time_s,
            "ratio_without_host": without.time_s / wall,
            "trace_span_s": float(complete.max() - issue.min()) / 1e9,
            "lead_in_us": float(issue.min() - start_ns) / 1e3,
            "tail_us": float(end_ns - complete.max()) / 1e3,
            "host_part_us_mean": float((ready - issue).mean() / 1e3),
            "device_latency_us_mean": float((device - issue).mean() / 1e3),
            "post_delay_us_mean": float(post.mean() / 1e3),
            "post_delay_us_p50": float(p50), "post_delay_us_p99": float(p99),
            "measured_Miops": n / wall / 1e6}


def format_row(r):
    """One line per compared run."""
    return (f"emulated {r['profile']} x{r['n_ssd']}: wall {r['wall_s']:.4f} s, replay predicts "
            f"{r['predicted_s']:.4f} s (ratio {r['ratio']:.3f}; without the recorded host costs "
            f"{r['predicted_without_host_s']:.4f} s, {r['ratio_without_host']:.3f}), "
            f"{r['measured_Miops']:.2f} M IOPS; trace span {r['trace_span_s']:.4f} s, lead-in "
            f"{r['lead_in_us']:.0f} us, tail {r['tail_us']:.0f} us; post delay mean "
            f"{r['post_delay_us_mean']:.1f} us (p50 {r['post_delay_us_p50']:.1f}, p99 "
            f"{r['post_delay_us_p99']:.1f}), host part {r['host_part_us_mean']:.2f} us, device "
            f"{r['device_latency_us_mean']:.1f} us")


def run_emulated(data, profile, n_ssd, n_requests, daemon_threads=1, n_drivers=1, queues=512,
                 depth=128, page_size=4096, seed=1, trace_dir=None):
    """One recorded run of ``n_requests`` random reads under emulation of ``n_ssd`` x
    ``profile``, compared with its replay (:func:`compare_with_replay`'s dict, plus the
    thread counts). ``trace_dir``: keep the trace there (``emulated_PROFILE_N.trace``)."""
    if depth < WARP:
        raise ValueError(f"depth must be >= {WARP}")
    n_drivers = min(n_drivers, queues)
    n_pages = data.nbytes // page_size
    store = gids.MemoryStore(data, zero_copy=True)
    table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
    # Zero-copy: the Runtime would pass the pinned copy's address; here the array is the copy.
    table[0] = store.table_row(0, data.nbytes, zero_copy_address=data.ctypes.data)
    sq = np.zeros(queues * depth * L.SQ_WORDS, dtype=np.int64)
    cq = np.zeros(queues * depth * L.CQ_WORDS, dtype=np.int64)
    staging = np.zeros(queues * depth * page_size, dtype=np.uint8)
    quotas = [n_requests // n_drivers + (d < n_requests % n_drivers) for d in range(n_drivers)]
    drivers = [(np.arange(d, queues, n_drivers, dtype=np.int64),
                np.zeros((len(range(d, queues, n_drivers)), 2), dtype=np.int64),
                np.zeros(4, dtype=np.int64)) for d in range(n_drivers)]
    # Compile (or load from the cache) before anything is timed.
    drive(drivers[0][0], sq, cq, depth, n_pages, 0, drivers[0][1], drivers[0][2], seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(trace_dir or tmp, f"emulated_{profile}_{n_ssd}.trace")
        writer = TraceWriter(path)
        daemon = HostDaemon(sq, cq, staging, table, queues, depth, page_size, daemon_threads,
                            model=SsdModel(profile, n_ssd=n_ssd, stripe_bytes=page_size),
                            trace_writer=writer)
        with daemon:
            threads = [threading.Thread(target=drive, daemon=True,
                                        args=(mine, sq, cq, depth, n_pages, quotas[d], state,
                                              times, seed + 7919 * d))
                       for d, (mine, state, times) in enumerate(drivers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        writer.close()
        trace = read_trace(path)
    start = min(times[0] for _, _, times in drivers)
    end = max(times[1] for _, _, times in drivers)
    row = compare_with_replay(trace, int(start), int(end), profile, n_ssd)
    row.update(daemon_threads=daemon.n_threads, drivers=n_drivers, queues=queues, depth=depth,
               trace_dropped=daemon.trace_dropped)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m workloads.emulation_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--ssd", default="pm1743", help="SSD profile (pm1743)")
    p.add_argument("--n-ssd", default="1,2,4", help="drive counts (1,2,4)")
    p.add_argument("--requests", type=int, default=1 << 18, help="reads per run (262144)")
    p.add_argument("--daemon-threads", type=int, default=1)
    p.add_argument("--drivers", type=int, default=1, help="driver threads (the GPU's part)")
    p.add_argument("--queues", type=int, default=512)
    p.add_argument("--depth", type=int, default=128)
    p.add_argument("--store-mib", type=int, default=1024, help="store size in MiB (1024)")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    p.add_argument("--keep-traces", default=None, metavar="DIR",
                   help="keep each run's trace in DIR (for gids simulate)")
    a = p.parse_args(argv)
    data = np.random.default_rng(0).integers(-(1 << 62), 1 << 62, a.store_mib * (1 << 17),
                                             dtype=np.int64)
    print(f"real-time emulation recorded and replayed, host side only (CPU figure, no GPU): "
          f"{os.cpu_count()} cores, {a.daemon_threads} daemon threads, {a.drivers} drivers, "
          f"{a.queues} queues x {a.depth}, {a.requests:,} random 4 KiB reads", flush=True)
    rows = []
    for n_ssd in (int(n) for n in a.n_ssd.split(",")):
        row = run_emulated(data, a.ssd, n_ssd, a.requests, a.daemon_threads, a.drivers,
                           a.queues, a.depth, trace_dir=a.keep_traces)
        rows.append(row)
        print(format_row(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cores": os.cpu_count(), "argv": list(argv) if argv is not None
                       else sys.argv[1:], "date": time.strftime("%Y-%m-%d"), "rows": rows},
                      f, indent=1)
    return rows


if __name__ == "__main__":
    main()
