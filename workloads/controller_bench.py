"""Host-only throughput of the emulated NVMe controller (no GPU): commands/s by controller threads.

``python -m workloads.controller_bench [--seconds 2] [--threads 1,2,4,8] [--drivers N]
[--queues 512] [--depth 128] [--ssd ideal|none] [--json FILE]``

What the GPU does on the direct NVMe path (``kernels/nvme.py``, ``docs/formats.md``: "NVMe
queue pairs") is played here by ``njit(nogil=True)`` *driver* threads on the same kind of rings:
int64 SQ and CQ rings and doorbells in host memory (plain numpy arrays: the controller only
needs their addresses), bounce buffers in one staging array. Each driver owns a share of the
queue pairs and, for each, like a warp:

1. takes tickets in order; ticket ``t`` uses command slot ``t % depth`` (free once the slot's
   previous command completed), SQ entry ``t % ring``, CID = slot + depth * generation;
2. writes up to 32 64-byte Read SQEs (opcode 02h, NSID 1, SLBA of a random page, NLB, PRP1 = the
   slot's bounce buffer) with plain stores and rings the SQ tail doorbell once (release store);
3. reaps CQEs in CQ order by their phase tag (acquire loads), hands each to its slot by CID,
   checks the status, SQID, CID and **every byte of the page** against the store, and frees the
   slot; then writes the CQ head doorbell once for what it reaped.

The store is a zero-copy :class:`gids.MemoryStore` in RAM (as in the GPU suite's all-miss rows:
the controller copies each page out of the store's buffer into the bounce buffer), by default
1 GiB of random 4 KiB pages, so the copies come from DRAM as they do there. Defaults match the
Runtime on the H200: 512 queue pairs of 128 commands, 4 KiB pages, the ideal SSD profile.

The figure is a **CPU figure of the host side only**: the controller's commands/s when CPU
threads, not a GPU across PCIe, write the SQEs and read the CQEs. The drivers cost CPU too
(each checks 4 KiB per command), so give the machine cores for both: controller threads +
drivers <= cores, or the threads take turns on cores and the figure measures the scheduler.
"""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np
from numba import njit, types

import gids
from gids import layout as L
from gids.host import T_COLUMNS, NvmeController, SsdModel, load_acquire, store_release

#: Commands a driver submits to one queue per visit: one warp's worth, one doorbell write.
WARP = 32
#: Words per driver's row of ``progress`` (128 bytes: rows of different drivers never share a
#: cache line, nor an adjacent-line prefetch pair).
ROW = 16
# Columns of a driver's row of ``progress``.
P_DONE = 0        # commands completed and checked
P_BAD_DATA = 1    # of which the bounce buffer did not hold the page's bytes
P_BAD_CQE = 2     # CQEs with an error status, another SQID, or a CID not in flight

_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@njit(nogil=True, cache=True)
def _command_id(ticket, depth):
    """As ``kernels.nvme.command_id``: the slot, plus a generation in the bits above it."""
    return ticket % depth + depth * ((ticket // depth) % (65536 // depth))


@njit(nogil=True, cache=True)
def _reap(k, q, state, slot_page, slot_cid, cq, db, staging, data, ring, depth, page_words,
          progress, row):
    """Consume queue ``q``'s new CQEs in CQ order (phase tags), check each command's status,
    SQID, CID and page bytes, free its slot; one CQ head doorbell write. Returns how many."""
    head = state[k, 1]
    reaped = 0
    while True:
        w = load_acquire(cq, (q * ring + head % ring) * L.NVME_CQE_WORDS + L.CQE_DW2_DW3)
        if (w >> L.CQE_PHASE_SHIFT) & 1 != 1 - (head // ring) % 2:
            break
        cid = (w >> L.CQE_CID_SHIFT) & 0xFFFF
        s = k * depth + cid % depth
        page = slot_page[s]
        if ((w >> L.CQE_STATUS_SHIFT) != L.NVME_SC_SUCCESS or slot_cid[s] != cid or page < 0
                or (w >> L.CQE_SQID_SHIFT) & 0xFFFF != q):
            progress[row + P_BAD_CQE] += 1
        else:
            buf = (q * depth + cid % depth) * page_words
            src = page * page_words
            diff = 0
            for i in range(page_words):   # (a loop the compiler vectorises)
                diff |= staging[buf + i] ^ data[src + i]
            if diff != 0:
                progress[row + P_BAD_DATA] += 1
        slot_page[s] = -1
        head += 1
        reaped += 1
    if reaped > 0:
        state[k, 1] = head
        store_release(db, 2 * q + L.DB_CQ_HEAD, head % ring)
        progress[row + P_DONE] += reaped
    return reaped


@njit(nogil=True, cache=True)
def _submit(k, q, state, slot_page, slot_cid, sq, db, ring, depth, page_words, n_pages,
            prp_base, rng, most, ring_doorbell):
    """Write up to ``most`` Read SQEs to queue ``q`` in ticket order while their command slots
    are free (random pages, from the xorshift state ``rng[0]``), then ring the SQ tail doorbell
    once (unless ``ring_doorbell`` is False). Returns how many."""
    nlb = page_words * 8 // L.NVME_LBA_BYTES
    tail = state[k, 0]
    first = tail
    x = rng[0]
    while tail - first < most:
        s = k * depth + tail % depth
        if slot_page[s] >= 0:
            break
        x ^= (x << 13) & 0x7FFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0x7FFFFFFFFFFFFFFF
        page = x % n_pages
        cid = _command_id(tail, depth)
        e = (q * ring + tail % ring) * L.NVME_SQE_WORDS
        sq[e + L.SQE_CDW0_NSID] = (L.NVME_OP_READ | (cid << L.SQE_CID_SHIFT)
                                   | (1 << L.SQE_NSID_SHIFT))
        sq[e + 1] = 0
        sq[e + L.SQE_MPTR] = 0
        sq[e + L.SQE_PRP1] = prp_base + (q * depth + tail % depth) * page_words * 8
        sq[e + L.SQE_PRP2] = 0
        sq[e + L.SQE_SLBA] = page * nlb
        sq[e + L.SQE_CDW12_13] = nlb - 1
        sq[e + 7] = 0
        slot_page[s] = page
        slot_cid[s] = cid
        tail += 1
    rng[0] = x
    if tail != first:
        state[k, 0] = tail
        if ring_doorbell:
            # The release store orders the SQEs' plain stores before the doorbell.
            store_release(db, 2 * q + L.DB_SQ_TAIL, tail % ring)
    return tail - first


@njit(nogil=True, cache=True)
def drive(my_queues, state, slot_page, slot_cid, sq, cq, db, staging, data, ring, depth,
          page_words, n_pages, prp_base, stop, progress, row, rng):
    """One driver thread's loop over ``my_queues`` (the GPU's part) until ``stop[0]`` is set.

    ``state[k]``: queue ``my_queues[k]``'s tickets submitted and CQEs consumed (counts);
    ``slot_page`` / ``slot_cid``: per command slot of those queues (``k * depth + slot``), the
    page its command reads (-1: free) and its CID. ``staging`` and ``data`` are int64 views of
    the bounce buffers and the store."""
    while load_acquire(stop, 0) == 0:
        progressed = False
        for k in range(my_queues.shape[0]):
            q = my_queues[k]
            if _reap(k, q, state, slot_page, slot_cid, cq, db, staging, data, ring, depth,
                     page_words, progress, row) > 0:
                progressed = True
            if _submit(k, q, state, slot_page, slot_cid, sq, db, ring, depth, page_words,
                       n_pages, prp_base, rng, WARP, True) > 0:
                progressed = True
        if not progressed:
            _sched_yield()   # every slot in flight: let a controller thread have the core


@njit(nogil=True, cache=True)
def fill(my_queues, state, slot_page, slot_cid, sq, db, ring, depth, page_words, n_pages,
         prp_base, rng):
    """Burst mode: fill every free command slot of ``my_queues`` with a Read SQE, doorbells
    not rung (:func:`ring_all` rings them). Returns how many."""
    n = 0
    for k in range(my_queues.shape[0]):
        n += _submit(k, my_queues[k], state, slot_page, slot_cid, sq, db, ring, depth,
                     page_words, n_pages, prp_base, rng, depth, False)
    return n


@njit(nogil=True, cache=True)
def ring_all(my_queues, state, db, ring):
    """Burst mode: ring every queue's SQ tail doorbell up to its tail."""
    for k in range(my_queues.shape[0]):
        store_release(db, 2 * my_queues[k] + L.DB_SQ_TAIL, state[k, 0] % ring)


@njit(nogil=True, cache=True)
def reap_all(my_queues, state, slot_page, slot_cid, cq, db, staging, data, ring, depth,
             page_words, progress, row):
    """Burst mode: consume and check every posted CQE of ``my_queues``. Returns how many."""
    n = 0
    for k in range(my_queues.shape[0]):
        n += _reap(k, my_queues[k], state, slot_page, slot_cid, cq, db, staging, data, ring,
                   depth, page_words, progress, row)
    return n


def make_data(n_pages, page_size, seed=0):
    """``n_pages`` pages of random int64 words (every page distinct)."""
    return np.random.default_rng(seed).integers(-(1 << 62), 1 << 62, n_pages * page_size // 8,
                                                dtype=np.int64)


def _rings(queues, depth, page_size):
    ring = depth + 1
    sq = np.zeros(queues * ring * L.NVME_SQE_WORDS, dtype=np.int64)
    cq = np.zeros(queues * ring * L.NVME_CQE_WORDS, dtype=np.int64)
    db = np.zeros(2 * queues, dtype=np.int64)
    staging = np.empty(queues * depth * page_size, dtype=np.uint8)
    staging[:] = 0   # touch every page now (the Runtime's are pinned), not in the timed part
    return sq, cq, db, staging


def _thread_cpu_s(threads):
    """CPU seconds the threads have used (their own clocks: time on a core, not waiting)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in threads
               if t.is_alive())


def run_controller(data, n_threads, seconds=2.0, queues=512, depth=128, page_size=4096,
                   ssd="ideal", n_drivers=None, mode="stream", warmup=0.3, seed=1):
    """Time one :class:`NvmeController` of ``n_threads`` threads serving 4 KiB random reads.

    ``mode="stream"``: ``n_drivers`` driver threads (default: ``n_threads``) keep the queues
    full for ``warmup + seconds`` seconds; commands/s over the last ``seconds``.
    ``mode="burst"``: no driver runs while the controller does: every command slot of every
    queue gets an SQE, all SQ doorbells are rung at once, and the time until the controller
    has posted every completion is taken; then the main thread checks them all (not timed),
    and again, for ``seconds`` of controller time. The controller alone, with the cores to
    itself (a machine with few cores can still measure several controller threads).

    ``ssd``: an SSD profile name to time the commands by (real-time emulation, as
    ``Runtime(ssd=...)``), or None. Returns a dict; ``ok``: every completion was a success for
    a command in flight and every page's bytes were the store's. ``controller_cpu_ns_per_command``
    is the controller threads' own CPU time per command (with a spinning, idle controller
    counted as busy: in stream mode it is an upper bound)."""
    if n_drivers is None:
        n_drivers = n_threads if mode == "stream" else 1
    n_drivers = min(n_drivers, queues)
    page_words = page_size // 8
    n_pages = data.nbytes // page_size
    ring = depth + 1
    sq, cq, db, staging = _rings(queues, depth, page_size)
    store = gids.MemoryStore(data, zero_copy=True)
    table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
    # Zero-copy: the Runtime would pass the pinned copy's address; here the array is the copy.
    table[0] = store.table_row(0, data.nbytes, zero_copy_address=data.ctypes.data)
    model = SsdModel(ssd) if ssd else None
    ctrl = NvmeController(sq, cq, db, staging, table, queues, depth, page_size, n_threads,
                          model=model)
    stop = np.zeros(1, dtype=np.int64)
    progress = np.zeros(n_drivers * ROW, dtype=np.int64)
    staging_words = staging.view(np.int64)
    drivers = []
    for d in range(n_drivers):
        mine = np.arange(d, queues, n_drivers, dtype=np.int64)
        drivers.append((mine, np.zeros((len(mine), 2), dtype=np.int64),
                        np.full(len(mine) * depth, -1, dtype=np.int64),
                        np.zeros(len(mine) * depth, dtype=np.int64),
                        np.array([seed + 7919 * d], dtype=np.int64)))
    prp = staging.ctypes.data

    def stream_args(d):
        mine, state, slot_page, slot_cid, rng = drivers[d]
        return (mine, state, slot_page, slot_cid, sq, cq, db, staging_words, data, ring, depth,
                page_words, n_pages, prp, stop, progress, d * ROW, rng)

    # Compile (or load from the cache) before any thread runs, with nothing to do.
    stop[0] = 1
    drive(*stream_args(0))
    stop[0] = 0
    checked = lambda: int(progress[P_DONE::ROW].sum())   # noqa: E731
    completed = lambda: ctrl.counters["commands"]        # noqa: E731
    with ctrl:
        if mode == "stream":
            threads = [threading.Thread(target=drive, args=stream_args(d), daemon=True)
                       for d in range(n_drivers)]
            for t in threads:
                t.start()
            time.sleep(warmup)
            c0, cpu0, t0 = checked(), _thread_cpu_s(ctrl._threads), time.perf_counter()
            time.sleep(seconds)
            c1, cpu1, t1 = checked(), _thread_cpu_s(ctrl._threads), time.perf_counter()
            stop[0] = 1
            for t in threads:
                t.join()
            n, wall, cpu = c1 - c0, t1 - t0, cpu1 - cpu0
        elif mode == "burst":
            n = bursts = 0
            wall = cpu = 0.0
            while wall < seconds or bursts < 2:
                filled = 0
                for d in range(n_drivers):
                    mine, state, slot_page, slot_cid, rng = drivers[d]
                    filled += fill(mine, state, slot_page, slot_cid, sq, db, ring, depth,
                                   page_words, n_pages, prp, rng)
                target = completed() + filled
                cpu0, t0 = _thread_cpu_s(ctrl._threads), time.perf_counter()
                for d in range(n_drivers):
                    ring_all(drivers[d][0], drivers[d][1], db, ring)
                while completed() < target:
                    time.sleep(20e-6)
                t1, cpu1 = time.perf_counter(), _thread_cpu_s(ctrl._threads)
                for d in range(n_drivers):
                    mine, state, slot_page, slot_cid, _ = drivers[d]
                    reap_all(mine, state, slot_page, slot_cid, cq, db, staging_words, data, ring,
                             depth, page_words, progress, d * ROW)
                bursts += 1
                if bursts == 1 and warmup > 0:
                    continue   # the first burst warms up (caches, page tables): not counted
                n += filled
                wall += t1 - t0
                cpu += cpu1 - cpu0
        else:
            raise ValueError(f"mode must be 'stream' or 'burst', got {mode!r}")
        counters = ctrl.counters
    rate = n / wall
    bad_data = int(progress[P_BAD_DATA::ROW].sum())
    bad_cqe = int(progress[P_BAD_CQE::ROW].sum())
    return {"mode": mode, "controller_threads": ctrl.n_threads,
            "drivers": n_drivers, "queues": queues, "depth": depth, "page_size": page_size,
            "ssd": ssd, "seconds": wall, "commands": n, "Mcommands_per_s": rate / 1e6,
            "ns_per_command_per_thread": ctrl.n_threads * 1e9 / rate if rate else float("inf"),
            "controller_cpu_ns_per_command": cpu * 1e9 / n if n else float("inf"),
            "checked": checked(), "bad_data": bad_data, "bad_cqe": bad_cqe,
            "ok": bad_data == 0 and bad_cqe == 0 and checked() > 0
            and (mode == "stream" or checked() == counters["commands"]),
            "controller": counters}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m workloads.controller_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("stream", "burst"), default="stream",
                   help="stream: driver threads run beside the controller (default); burst: "
                   "the controller alone, on rings filled beforehand")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per row (2)")
    p.add_argument("--threads", default="1,2,4,8", help="controller thread counts (1,2,4,8)")
    p.add_argument("--drivers", type=int, default=None,
                   help="driver threads (stream mode; default: as many as controller threads)")
    p.add_argument("--queues", type=int, default=512)
    p.add_argument("--depth", type=int, default=128)
    p.add_argument("--page-size", type=int, default=4096)
    p.add_argument("--store-mib", type=int, default=1024, help="store size in MiB (1024)")
    p.add_argument("--ssd", default="ideal", help="SSD profile, or 'none' (ideal)")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    a = p.parse_args(argv)
    ssd = None if a.ssd == "none" else a.ssd
    data = make_data(a.store_mib * (1 << 20) // a.page_size, a.page_size)
    print(f"emulated NVMe controller, host side only (CPU figure, no GPU): {os.cpu_count()} "
          f"cores, {a.mode} mode, {a.queues} queues x {a.depth}, {a.page_size} B reads, "
          f"ssd={ssd}, {a.store_mib} MiB store", flush=True)
    rows = []
    for n in (int(t) for t in a.threads.split(",")):
        r = run_controller(data, n, a.seconds, a.queues, a.depth, a.page_size, ssd, a.drivers,
                           a.mode)
        rows.append(r)
        c = r["controller"]
        print(f"controller threads {r['controller_threads']:2d}, drivers {r['drivers']:2d}: "
              f"{r['Mcommands_per_s']:6.3f} M commands/s "
              f"({r['ns_per_command_per_thread']:6.0f} ns/command/thread; controller CPU "
              f"{r['controller_cpu_ns_per_command']:6.0f} ns/command), checked {r['checked']:,}, "
              f"{'ok' if r['ok'] else 'WRONG'} (bad data {r['bad_data']}, bad CQEs "
              f"{r['bad_cqe']}; reordered {c['reordered']:,}, cq_full {c['cq_full']:,})",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cores": os.cpu_count(),
                       "argv": list(argv) if argv is not None else sys.argv[1:], "rows": rows},
                      f, indent=1)
    if not all(r["ok"] for r in rows):
        raise SystemExit("some completions were wrong")
    return rows


if __name__ == "__main__":
    main()
