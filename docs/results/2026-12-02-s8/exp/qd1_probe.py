"""What each step of a lone miss costs on this GPU (a diagnosis, not a benchmark): one thread
times N repetitions of each memory primitive the miss path is made of, by %globaltimer.

    python exp/qd1_probe.py [--out DIR]

Chained tests make each access's address depend on the previous result (a latency); the others
issue N independent operations (a cost per operation, overlapped where the hardware can).
"""
import argparse
import json
import os
import sys

import numpy as np
from numba import cuda

sys.path.insert(0, os.getcwd())
from kernels.sync import (atomic_add_relaxed_gpu, atomic_cas_acquire_gpu,  # noqa: E402
                          fence_acq_rel_sys, ld_acquire_gpu, ld_acquire_sys, ld_pair,
                          ld_relaxed_gpu, ld_relaxed_sys, make_load, now_ns, red_add,
                          st_relaxed_sys, st_release_gpu, st_release_sys)
from kernels.bulk import address_of, _bulk_copy, fence_proxy_async, mbar_init, mbar_inval, block_buffer  # noqa: E402
from kernels.warp import nanosleep  # noqa: E402

ld_cv = make_load("global.cv")
ld_cg = make_load("global.cg")
ld_weak = make_load("global.ca")

NAMES = [
    "globaltimer read", "globaltimer min step",
    "atom.relaxed.gpu chained, one word (L2 hit)", "atom.relaxed.gpu chained, fresh lines",
    "ld.acquire.gpu chained, one word", "ld.relaxed.gpu chained, one word",
    "ld.relaxed.gpu chained, fresh lines", "atom.acquire.gpu.cas chained",
    "st.release.gpu x N", "st.release.sys (host) x N", "st.relaxed.sys (host) x N",
    "st + fence.sc.gpu x N", "host st + fence.acq_rel.sys x N", "host st + fence.sc.sys x N",
    "ld.acquire.sys (host) chained", "ld.relaxed.sys (host) chained",
    "4 x ld.relaxed.sys host, 250 ns apart, then use", "4 x ld.global.cv host, 250 ns apart",
    "4 x ld.global.cg host, 250 ns apart", "4 x ld.global.ca host, 250 ns apart",
    "red.add x N", "bulk copy 4 KiB host -> device", "bulk setup: lock, mbar init/inval, fences, unlock",
    "submit: ticket atom + turn acquire + 3 host st + st.release.sys", "nanosleep(0)",
    "nanosleep(256)", "ld.global.cv host chained", "ld.global.cg host chained",
    "ld.global.v2 (weak) host page: 8 x 16 B independent",
    "chain: atom, atom, ld, cas, atom, ld.acquire (miss front end, no I/O)",
]
N_TESTS = len(NAMES)


@cuda.jit(max_registers=128)
def probe(dev, big, host, host_page, slot, locks, n, out):
    # 0, 1: the timer
    t0 = now_ns()
    best = 1 << 40
    last = t0
    for _ in range(n):
        t = now_ns()
        if t > last and t - last < best:
            best = t - last
        last = t
    out[0] = (now_ns() - t0) / n
    out[1] = best
    # 2: atom chained one word
    k = 0
    t0 = now_ns()
    for _ in range(n):
        v = atomic_add_relaxed_gpu(dev, k, np.uint64(1))
        k = np.int64(v >> np.uint64(62))
    out[2] = (now_ns() - t0) / n
    # 3: atom chained fresh lines (DRAM)
    nb = big.shape[0]
    t0 = now_ns()
    for j in range(n):
        v = atomic_add_relaxed_gpu(big, ((j + 1) * 524309 * 16 + k) % nb, np.uint64(1))
        k = np.int64(v >> np.uint64(62))
    out[3] = (now_ns() - t0) / n
    # 4: ld.acquire.gpu chained
    t0 = now_ns()
    for _ in range(n):
        v = ld_acquire_gpu(dev, 8 + k)
        k = np.int64(v >> np.uint64(62))
    out[4] = (now_ns() - t0) / n
    # 5
    t0 = now_ns()
    for _ in range(n):
        v = ld_relaxed_gpu(dev, 8 + k)
        k = np.int64(v >> np.uint64(62))
    out[5] = (now_ns() - t0) / n
    # 6
    t0 = now_ns()
    for j in range(n):
        v = ld_relaxed_gpu(big, ((j + 7) * 786433 * 16 + k) % nb)
        k = np.int64(v >> np.uint64(62))
    out[6] = (now_ns() - t0) / n
    # 7
    t0 = now_ns()
    for _ in range(n):
        v = atomic_cas_acquire_gpu(dev, 16 + k, np.uint64(5), np.uint64(5))
        k = np.int64(v >> np.uint64(62))
    out[7] = (now_ns() - t0) / n
    # 8
    t0 = now_ns()
    for j in range(n):
        st_release_gpu(dev, 24 + k, np.uint64(j))
    out[8] = (now_ns() - t0) / n
    # 9
    t0 = now_ns()
    for j in range(n):
        st_release_sys(host, 64 + k, np.uint64(j))
    out[9] = (now_ns() - t0) / n
    # 10
    t0 = now_ns()
    for j in range(n):
        st_relaxed_sys(host, 72 + k, np.uint64(j))
    out[10] = (now_ns() - t0) / n
    # 11
    t0 = now_ns()
    for j in range(n):
        dev[32 + k] = np.uint64(j)
        cuda.threadfence()
    out[11] = (now_ns() - t0) / n
    # 12
    t0 = now_ns()
    for j in range(n):
        host[80 + k] = np.uint64(j)
        fence_acq_rel_sys()
    out[12] = (now_ns() - t0) / n
    # 13
    t0 = now_ns()
    for j in range(n):
        host[88 + k] = np.uint64(j)
        cuda.threadfence_system()
    out[13] = (now_ns() - t0) / n
    # 14
    t0 = now_ns()
    for _ in range(n):
        v = ld_acquire_sys(host, k)
        k = np.int64(v >> np.uint64(62))
    out[14] = (now_ns() - t0) / n
    # 15
    t0 = now_ns()
    for _ in range(n):
        v = ld_relaxed_sys(host, k)
        k = np.int64(v >> np.uint64(62))
    out[15] = (now_ns() - t0) / n
    # 16-19: four polls 250 ns apart, results used after the fourth
    s = np.uint64(0)
    t0 = now_ns()
    for _ in range(n // 4):
        a = ld_relaxed_sys(host, 128 + k)
        nanosleep(250)
        b = ld_relaxed_sys(host, 128 + k)
        nanosleep(250)
        c = ld_relaxed_sys(host, 128 + k)
        nanosleep(250)
        d = ld_relaxed_sys(host, 128 + k)
        s += a + b + c + d
        k = np.int64(s >> np.uint64(62))
    out[16] = (now_ns() - t0) / (n // 4)
    t0 = now_ns()
    for _ in range(n // 4):
        a = ld_cv(host, 136 + k)
        nanosleep(250)
        b = ld_cv(host, 136 + k)
        nanosleep(250)
        c = ld_cv(host, 136 + k)
        nanosleep(250)
        d = ld_cv(host, 136 + k)
        s += a + b + c + d
        k = np.int64(s >> np.uint64(62))
    out[17] = (now_ns() - t0) / (n // 4)
    t0 = now_ns()
    for _ in range(n // 4):
        a = ld_cg(host, 144 + k)
        nanosleep(250)
        b = ld_cg(host, 144 + k)
        nanosleep(250)
        c = ld_cg(host, 144 + k)
        nanosleep(250)
        d = ld_cg(host, 144 + k)
        s += a + b + c + d
        k = np.int64(s >> np.uint64(62))
    out[18] = (now_ns() - t0) / (n // 4)
    t0 = now_ns()
    for _ in range(n // 4):
        a = ld_weak(host, 152 + k)
        nanosleep(250)
        b = ld_weak(host, 152 + k)
        nanosleep(250)
        c = ld_weak(host, 152 + k)
        nanosleep(250)
        d = ld_weak(host, 152 + k)
        s += a + b + c + d
        k = np.int64(s >> np.uint64(62))
    out[19] = (now_ns() - t0) / (n // 4)
    # 20
    t0 = now_ns()
    for j in range(n):
        red_add(dev, 40 + k, np.uint64(1))
    out[20] = (now_ns() - t0) / n
    # 21: bulk copy of a 4 KiB host page into a device slot
    t0 = now_ns()
    ok = 0
    for j in range(n):
        ok += _bulk_copy(address_of(host_page, (j % 16) * 512), address_of(slot, (j % 16) * 512),
                         4096, locks, 1000000000, 1)
    out[21] = (now_ns() - t0) / n
    out[N_TESTS + 1] = ok
    # 22: the bulk copy's set-up and tear-down without the copy
    bar = block_buffer() + 4096
    t0 = now_ns()
    for j in range(n):
        if atomic_cas_acquire_gpu(locks, 0, np.uint32(0), np.uint32(1)) == 0:
            mbar_init(bar)
            fence_proxy_async()
            fence_proxy_async()
            mbar_inval(bar)
            st_release_gpu(locks, 0, np.uint32(0))
    out[22] = (now_ns() - t0) / n
    # 23: a submission
    t0 = now_ns()
    for j in range(n):
        tk = atomic_add_relaxed_gpu(dev, 48 + k, np.uint64(1))
        turn = ld_acquire_gpu(dev, 49 + np.int64(tk >> np.uint64(62)))
        e = np.int64(turn >> np.uint64(62))
        host[192 + e] = np.uint64(j)
        host[193 + e] = np.uint64(j)
        host[194 + e] = np.uint64(j)
        st_release_sys(host, 195 + e, np.uint64(j))
    out[23] = (now_ns() - t0) / n
    # 24, 25
    t0 = now_ns()
    for j in range(n):
        nanosleep(0)
    out[24] = (now_ns() - t0) / n
    t0 = now_ns()
    for j in range(n):
        nanosleep(256)
    out[25] = (now_ns() - t0) / n
    # 26, 27
    t0 = now_ns()
    for _ in range(n):
        v = ld_cv(host, 200 + k)
        k = np.int64(v >> np.uint64(62))
    out[26] = (now_ns() - t0) / n
    t0 = now_ns()
    for _ in range(n):
        v = ld_cg(host, 208 + k)
        k = np.int64(v >> np.uint64(62))
    out[27] = (now_ns() - t0) / n
    # 28: a page of weak 16-byte loads, 8 in flight
    t0 = now_ns()
    for j in range(n // 8):
        base = (j % 16) * 512 + k
        for q in range(8):
            lo, hi = ld_pair(host_page, base + q * 2)
            s += lo ^ hi
        k = np.int64(s >> np.uint64(63)) * 0 + np.int64(s >> np.uint64(63))
    out[28] = (now_ns() - t0) / (n // 8)
    # 29: the front end of a miss: pin, BUSY, clock, slot owner, CAS, ticket, turn
    t0 = now_ns()
    for j in range(n):
        a1 = atomic_add_relaxed_gpu(big, ((j + 3) * 1048583 * 16 + k) % nb, np.uint64(1))
        a2 = atomic_add_relaxed_gpu(big, ((j + 3) * 1048583 * 16 + np.int64(a1 >> np.uint64(62))) % nb, np.uint64(2))
        a3 = atomic_add_relaxed_gpu(dev, 56 + np.int64(a2 >> np.uint64(62)), np.uint64(1))
        a4 = ld_relaxed_gpu(big, ((j + 5) * 393241 * 16 + np.int64(a3 >> np.uint64(62))) % nb)
        a5 = atomic_cas_acquire_gpu(big, ((j + 5) * 393241 * 16) % nb, a4, a4)
        a6 = atomic_add_relaxed_gpu(dev, 48 + np.int64(a5 >> np.uint64(62)), np.uint64(1))
        a7 = ld_acquire_gpu(dev, 49 + np.int64(a6 >> np.uint64(62)))
        k = np.int64(a7 >> np.uint64(62))
    out[29] = (now_ns() - t0) / n
    out[N_TESTS] = s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--n", type=int, default=512)
    a = ap.parse_args()
    dev = cuda.to_device(np.zeros(4096, dtype=np.uint64))
    big = cuda.to_device(np.zeros(64 << 20, dtype=np.uint64))    # 512 MiB: beyond L2
    host = cuda.mapped_array(4096, dtype=np.uint64)
    host[:] = 0
    page = cuda.mapped_array(16 * 512, dtype=np.uint64)
    page[:] = np.arange(16 * 512, dtype=np.uint64)
    slot = cuda.to_device(np.zeros(16 * 512, dtype=np.uint64))
    locks = cuda.to_device(np.zeros(64, dtype=np.uint32))
    out = cuda.to_device(np.zeros(N_TESTS + 2, dtype=np.float64))
    probe[1, 1](dev, big, host, page, slot, locks, 8, out)
    cuda.synchronize()
    rows = []
    for rep in range(3):
        probe[1, 1](dev, big, host, page, slot, locks, a.n, out)
        cuda.synchronize()
        rows.append(out.copy_to_host())
    ok = np.array_equal(slot.copy_to_host(), page[:])
    med = np.median(np.array(rows), axis=0)
    lines = [f"{NAMES[t]:<72} {med[t]:9.1f} ns" for t in range(N_TESTS)]
    lines.append(f"bulk copies done {rows[-1][N_TESTS + 1]:.0f} of {a.n}; slot bytes equal: {ok}")
    print("\n".join(lines))
    with open(os.path.join(a.out, "qd1_probe.json"), "w") as f:
        json.dump({"names": NAMES, "median_ns": med[:N_TESTS].tolist(),
                   "runs": [r.tolist() for r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
