"""Microbenchmarks of the runtime core, and the GPU suite that puts them in one table.

``python -m workloads.microbench gpu-suite [--out DIR]`` (on a machine with a GPU) runs the GPU
tests, measures the ceilings (pinned host-to-device copy, device-to-device copy) and the core's
figures in the same process, and prints a Markdown table (also written to DIR/gpu_suite.md and
DIR/gpu_suite.json):

- all-miss random 4 KiB page reads served end to end from a RAM-backed store, by daemon threads;
- the same over the direct NVMe path (``backend="nvme"``, ideal SSD profile): NVMe commands/s;
- all-hit random 8-byte reads through ``gids.read`` against a plain gather from a device array;
- coalesced sequential reads, the same two ways, and a page per warp through ``gids.pin_page``
  (one lookup per page, then plain loads);
- one thread, one miss at a time: latency percentiles.

The hit rows are measured with the default register cap (``gids.jit``) and again with each cap
of :data:`HIT_CAPS`, one labelled row per cap. ``python -m workloads.microbench hits [--caps
128,80,64] [--out DIR]`` runs those alone (a short GPU call; in the simulator, a check at tiny
sizes that the code runs).

``python -m workloads.microbench rows-launch [--out DIR] [--calls N]`` times the host's cost of
one ``Runtime.gather_rows`` call (torch tensors in and out, a warm whole cache) beside
``torch.index_select``'s.

``python -m workloads.microbench latency [--out DIR] [--misses N]`` times one thread, one miss at
a time under each variant of :data:`LATENCY_VARIANTS` (the completion poll schedule), each in a
process of its own: the settings are read at import. The processes compile together, then
measure one after the other.
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

import gids  # first: picks the GPU or the simulator before numba.cuda loads

# isort: split
from numba import cuda

from gids import console
from gids.device import WARP_SIZE, make_load, now_ns
from workloads import timing

# ------------------------------------------------------------------ kernels


@gids.jit
def first_element_of_pages(h, pages, elems_per_page, out):
    """Thread k reads element 0 of page pages[k]: with distinct pages, every read misses."""
    k = cuda.grid(1)
    if k < pages.size:
        out[k] = gids.read(h, pages[k] * elems_per_page)


@gids.jit
def page_per_warp(h, pages, elems_per_page, out):
    """Warp w reads the first 32 elements of page pages[w], one per lane (coalesced): every
    lookup misses, and each warp has one page in flight, as in the BFS and search kernels,
    where a warp reads one list or one vector at a time (``first_element_of_pages`` has 32)."""
    k = cuda.grid(1)
    w = k // 32
    if w < pages.size:
        out[k] = gids.read(h, pages[w] * elems_per_page + k % 32)


@cuda.jit(device=True)
def _next_random(x):
    # xorshift64: cheap, and the same stream for the gids and the plain kernel.
    x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
    return x


@cuda.jit(device=True)
def _plain_read(a, i):
    return a[i]


def _random_reads(read, max_registers=gids.MAX_REGISTERS):
    """A kernel doing ``reads`` random reads per thread with ``read(src, i)``: the same stream
    of indices whichever reader, so gids and a plain device array are compared like for like."""
    @gids.jit(max_registers=max_registers)
    def kernel(src, mask, reads, seed, out):
        t = cuda.grid(1)
        x = np.uint64(t * 2654435761 + seed + 1)
        acc = 0
        for _ in range(reads):
            x = _next_random(x)
            acc += read(src, np.int64(x & mask))
        out[t] = acc
    return kernel


def _sequential_reads(read, max_registers=gids.MAX_REGISTERS):
    """A kernel reading elements 0..n-1 grid-stride (coalesced) with ``read(src, i)``."""
    @gids.jit(max_registers=max_registers)
    def kernel(src, n, out):
        t = cuda.grid(1)
        stride = cuda.gridsize(1)
        acc = 0
        for i in range(t, n, stride):
            acc += read(src, i)
        out[t] = acc
    return kernel


def _paged_sequential_reads(h, n, out, pages_per_warp):
    """Elements 0..n-1 a page at a time per lane group (grid-stride over pages): the warp's
    lanes split into ``pages_per_warp`` groups (1, 2, 4 ...), each group names one page in one
    ``gids.pin_page`` call (a lookup per page), its lanes add their share of the page with
    ``gids.pinned`` (consecutive lanes on consecutive elements), and the pins are given back
    once the sums hold the values (``gids.unpin_page_after``).
    Several pages per call keep several pages' loads in flight per warp, as unrolling does for
    plain loads. Each element is read once, as by the sequential kernels, so the sum over
    ``out`` is theirs."""
    lane = cuda.threadIdx.x % WARP_SIZE
    warp = cuda.grid(1) // WARP_SIZE
    n_warps = cuda.gridsize(1) // WARP_SIZE
    width = max(1, WARP_SIZE // pages_per_warp)     # lanes per page
    groups = WARP_SIZE // width
    group = lane // width
    per_page = np.int64(1) << h.elem_shift
    n_pages = (n + per_page - 1) // per_page
    acc = 0
    for p0 in range(warp * groups, n_pages, n_warps * groups):
        p = p0 + group
        mine = p < n_pages
        first = (p if mine else p0) * per_page     # past the end: the first group's page
        at = gids.pin_page(h, first)
        if at >= 0 and mine:
            for j in range(lane - group * width, min(per_page, n - first), width):
                acc += gids.pinned(h, at + j)
        gids.unpin_page_after(h, first, at, acc)   # acc holds every value read: no fence
    out[cuda.grid(1)] = acc


#: Register cap of the page-level kernel as measured by default. Its lookups' slow path is out
#: of line, so a lower cap mostly buys blocks an SM, and with them loads in flight: four pages
#: per warp call read 0.55 of plain reads at 128 registers (2 blocks an SM), 0.61 at 80 (3) and
#: 0.64 at 64 (4) on the H200 (``microbench hits --caps 128,80,64``).
#: A kernel's author chooses it (``gids.jit(max_registers=N)``); the other caps stay measured
#: beside it.
PAGED_MAX_REGISTERS = 64
paged_sequential_reads_gids = gids.jit(max_registers=PAGED_MAX_REGISTERS)(_paged_sequential_reads)
_paged_kernels = {}


def paged_kernel(cap):
    """:func:`_paged_sequential_reads` compiled with registers capped at ``cap`` (the module's
    own at :data:`PAGED_MAX_REGISTERS`)."""
    if cap == PAGED_MAX_REGISTERS:
        return paged_sequential_reads_gids
    if cap not in _paged_kernels:
        _paged_kernels[cap] = gids.jit(max_registers=cap)(_paged_sequential_reads)
    return _paged_kernels[cap]


#: The page-level sequential reads measured: (result key, pages per warp call). More pages per
#: call keep more pins and loads in flight per warp (at 64 registers: 0.57 of plain reads for
#: one, 0.64 for four, 0.61 for eight on the H200).
PAGED_VARIANTS = (("paged_sequential", 1), ("paged_sequential_4", 4), ("paged_sequential_8", 8))

random_reads_gids = _random_reads(gids.read)
random_reads_plain = _random_reads(_plain_read)
sequential_reads_gids = _sequential_reads(gids.read)
sequential_reads_plain = _sequential_reads(_plain_read)

#: Register caps the hit benchmarks compare by default: each changes how many 256-thread blocks
#: fit on an SM (65536 registers: 128 -> 2, 80 -> 3, 64 -> 4; 96 would still be 2).
HIT_CAPS = (128, 80, 64)
_hit_kernels = {}


def hit_kernels(cap):
    """The random and sequential gids.read kernels compiled with registers capped at ``cap``
    (the default cap's are the module's own)."""
    if cap == gids.MAX_REGISTERS:
        return random_reads_gids, sequential_reads_gids
    if cap not in _hit_kernels:
        _hit_kernels[cap] = (_random_reads(gids.read, cap), _sequential_reads(gids.read, cap))
    return _hit_kernels[cap]


@gids.jit
def one_miss_at_a_time(h, pages, elems_per_page, times, out):
    acc = 0
    for k in range(pages.size):
        t0 = now_ns()
        acc += gids.read(h, pages[k] * elems_per_page)
        times[k] = now_ns() - t0
    out[0] = acc


# ------------------------------------------------------------------ suite output

def _write_suite(out_dir, name, payload, table):
    """A suite's results: ``OUT/<name>_suite.json`` (``payload``) and ``.md`` (``table``), and
    the table printed."""
    with open(os.path.join(out_dir, f"{name}_suite.json"), "w") as f:
        json.dump(payload, f, indent=1)
    with open(os.path.join(out_dir, f"{name}_suite.md"), "w") as f:
        f.write(table)
    print(table, flush=True)


# ------------------------------------------------------------------ timing helpers

def _time_kernel(launch, repeat=3):
    """Median GPU seconds of ``launch()`` over ``repeat`` runs, timed with CUDA events behind a
    latch kernel, so that the launch's host cost is not counted (``workloads/timing.py``; in
    the simulator, which times no event, by the wall clock)."""
    return timing.median_gpu_seconds(launch, repeat)


def measure_ceilings(nbytes=2 << 30):
    """Pinned host-to-device copy and device-to-device copy bandwidth (bytes/s)."""
    host = cuda.pinned_array(nbytes, dtype=np.uint8)
    host[:] = 1
    dev = cuda.device_array(nbytes, dtype=np.uint8)
    dev2 = cuda.device_array(nbytes, dtype=np.uint8)
    h2d = _time_kernel(lambda: dev.copy_to_device(host), repeat=5)
    d2d = _time_kernel(lambda: dev2.copy_to_device(dev), repeat=5)
    return {"h2d_pinned_GBps": nbytes / h2d / 1e9, "d2d_GBps_read_plus_write": 2 * nbytes / d2d / 1e9}


# ------------------------------------------------------------------ benchmarks

def bench_all_miss(data, page_size, thread_counts, zero_copy, cache_bytes, log, backend="host",
                   ssd=None, per_warp=False):
    """Random distinct pages, each read once: every lookup misses. Pages/s by daemon threads
    (for ``backend="nvme"``: NVMe commands/s by controller threads, timed by ``ssd``).

    ``per_warp``: one page per warp (:func:`page_per_warp`) instead of one per thread. Each row
    also has the kernels' own account of the misses' time (``gids.Stats``): the mean I/O
    latency (submission to completion) and the mean time of a miss's slow path.
    """
    epp = page_size // data.dtype.itemsize
    if per_warp and epp < 32:
        raise ValueError("per_warp needs pages of at least 32 elements")
    n_pages = data.nbytes // page_size
    rng = np.random.default_rng(1)
    rows = []
    store = gids.MemoryStore(data, zero_copy=zero_copy)
    with gids.Runtime(backend, cache_bytes=cache_bytes, page_size=page_size,
                      daemon_threads=max(thread_counts), ssd=ssd) as rt:
        arr = rt.open_array(store, data.dtype, shape=data.shape)
        for threads in thread_counts:
            rt.set_daemon_threads(threads)
            pages = rng.permutation(n_pages).astype(np.int64)
            d_pages = cuda.to_device(pages)
            lanes = 32 if per_warp else 1
            out = cuda.device_array(n_pages * lanes, dtype=data.dtype)
            blocks = math.ceil(n_pages * lanes / 256)
            kernel = page_per_warp if per_warp else first_element_of_pages
            best = None
            for rep in range(2):
                rt.invalidate()
                rt.reset_stats()
                start = time.perf_counter()
                kernel[blocks, 256](arr.handle, d_pages, epp, out)
                rt.sync()
                secs = time.perf_counter() - start
                stats = rt.stats()
                best = secs if best is None else min(best, secs)
            wanted = (pages[:, None] * epp + np.arange(lanes)).reshape(-1)
            ok = bool(np.array_equal(out.copy_to_host(), data.reshape(-1)[wanted]))
            row = {"backend": backend, "ssd": ssd, "daemon_threads": threads,
                   "zero_copy": zero_copy, "pages": n_pages, "per_warp": per_warp,
                   "seconds": best, "Mpages_per_s": n_pages / best / 1e6,
                   "GBps": n_pages * page_size / best / 1e9, "ios": stats.ios,
                   "misses": stats.misses, "io_latency_us": stats.io_latency_us,
                   "miss_latency_us": stats.miss_latency_us, "slot_retries": stats.slot_retries,
                   "correct": ok}
            if backend == "nvme":
                row["controller"] = rt.daemon.counters
            log(f"all-miss {backend} zero_copy={zero_copy} ssd={ssd} threads={threads}"
                f"{' one page per warp' if per_warp else ''}: "
                f"{row['Mpages_per_s']:.2f} M pages/s ({row['GBps']:.1f} GB/s), ios {stats.ios}, "
                f"mean I/O {stats.io_latency_us:.1f} us, mean miss {stats.miss_latency_us:.1f} us, "
                f"ok={ok}")
            rows.append(row)
    return rows


def _kernel_resources(kernel, threads):
    """Registers and local memory (spills) per thread of a compiled kernel, and the blocks of
    ``threads`` threads its registers let an SM hold (65536 registers, allocated per warp in
    units of 256; at most 2048 threads). ``None`` in the simulator."""
    if gids.SIMULATOR:
        return {"registers": None, "local_bytes": None, "blocks_per_sm": None}
    regs = kernel.get_regs_per_thread()
    regs = max(regs.values()) if isinstance(regs, dict) else regs
    local = kernel.get_local_mem_per_thread()
    local = max(local.values()) if isinstance(local, dict) else local
    warp_regs = -(-regs * 32 // 256) * 256
    warps = -(-threads // 32)
    blocks = min(65536 // (warp_regs * warps), 2048 // threads)
    return {"registers": int(regs), "local_bytes": int(local), "blocks_per_sm": int(blocks)}


def bench_hits(n_elems, cache_bytes, reads_per_thread, log, caps=(), threads=256, blocks=132 * 16,
               repeat=3):
    """All-hit random and sequential 8-byte reads: gids.read vs plain device-array reads.

    ``res["random"]`` and ``res["sequential"]`` are the default cap's kernels. ``caps``: the
    same two kernels compiled with each register cap in turn, each timed beside a new run of
    the plain kernel (so drift over the run does not pass for a difference between caps), in
    ``res["caps"]``, one labelled row per cap with the kernels' registers, local memory and
    blocks per SM.
    """
    rng = np.random.default_rng(2)
    data = rng.integers(0, 1 << 40, n_elems, dtype=np.int64)
    d_data = cuda.to_device(data)
    mask = n_elems - 1
    n_threads = threads * blocks
    out_g = cuda.device_array(n_threads, dtype=np.int64)
    out_p = cuda.device_array(n_threads, dtype=np.int64)
    res = {}
    with gids.Runtime(cache_bytes=cache_bytes, page_size=4096) as rt:
        arr = rt.open_array(data)
        # warm: load every page once
        sequential_reads_gids[blocks, threads](arr.handle, n_elems, out_g)
        rt.sync()
        h = arr.handle

        def measure(random_k, sequential_k):
            rt.reset_stats()
            t_g = _time_kernel(lambda: random_k[blocks, threads](h, mask, reads_per_thread, 7, out_g),
                               repeat)
            t_p = _time_kernel(lambda: random_reads_plain[blocks, threads](d_data, mask, reads_per_thread,
                                                                         7, out_p), repeat)
            rt.sync()
            st = rt.stats()
            same = bool(np.array_equal(out_g.copy_to_host(), out_p.copy_to_host()))
            n_reads = n_threads * reads_per_thread
            rnd = {"gids_Greads_per_s": n_reads / t_g / 1e9, "plain_Greads_per_s": n_reads / t_p / 1e9,
                   "ratio": t_p / t_g, "misses_during_timing": st.misses, "hits_during_timing": st.hits,
                   "same_result": same}
            t_g = _time_kernel(lambda: sequential_k[blocks, threads](h, n_elems, out_g), repeat)
            t_p = _time_kernel(lambda: sequential_reads_plain[blocks, threads](d_data, n_elems, out_p),
                               repeat)
            rt.sync()
            same = bool(np.array_equal(out_g.copy_to_host(), out_p.copy_to_host()))
            seq = {"gids_GBps": n_elems * 8 / t_g / 1e9, "plain_GBps": n_elems * 8 / t_p / 1e9,
                   "ratio": t_p / t_g, "same_result": same}
            return rnd, seq

        res["random"], res["sequential"] = measure(random_reads_gids, sequential_reads_gids)
        def measure_paged(kernel):
            """The same bytes a page per lane group through gids.pin_page, each variant against
            the plain grid-stride read of the same run (the sums over all threads must agree)."""
            paged = {}
            for key, per_warp in PAGED_VARIANTS:
                t_pg = _time_kernel(lambda: kernel[blocks, threads](h, n_elems, out_g, per_warp),
                                    repeat)
                rt.sync()
                t_p = _time_kernel(lambda: sequential_reads_plain[blocks, threads](
                    d_data, n_elems, out_p), repeat)
                paged[key] = {
                    "gids_GBps": n_elems * 8 / t_pg / 1e9, "plain_GBps": n_elems * 8 / t_p / 1e9,
                    "ratio": t_p / t_pg, "pages_per_warp_call": per_warp,
                    "same_result": bool(out_g.copy_to_host().sum() == out_p.copy_to_host().sum())}
            return paged

        res.update(measure_paged(paged_sequential_reads_gids))
        log(f"all-hit random 8 B: gids {res['random']['gids_Greads_per_s']:.2f} G/s, plain "
            f"{res['random']['plain_Greads_per_s']:.2f} G/s, ratio {res['random']['ratio']:.2f}, "
            f"same={res['random']['same_result']}")
        log(f"all-hit sequential: gids {res['sequential']['gids_GBps']:.0f} GB/s, plain "
            f"{res['sequential']['plain_GBps']:.0f} GB/s, ratio {res['sequential']['ratio']:.2f}, "
            f"same={res['sequential']['same_result']}")
        for key, _ in PAGED_VARIANTS:
            pg = res[key]
            log(f"all-hit sequential, {pg['pages_per_warp_call']} page(s) per warp call (pin_page): "
                f"gids {pg['gids_GBps']:.0f} GB/s, plain {pg['plain_GBps']:.0f} GB/s, ratio "
                f"{pg['ratio']:.2f}, same={pg['same_result']}")
        rows = []
        for cap in caps:
            random_k, sequential_k = hit_kernels(cap)
            rnd, seq = measure(random_k, sequential_k)
            paged_k = paged_kernel(cap)
            row = {"max_registers": cap, "label": f"registers capped at {cap}",
                   "random": rnd, "sequential": seq, "paged": measure_paged(paged_k),
                   "random_kernel": _kernel_resources(random_k, threads),
                   "sequential_kernel": _kernel_resources(sequential_k, threads),
                   "paged_kernel": _kernel_resources(paged_k, threads)}
            rows.append(row)
            rk = row["random_kernel"]
            log(f"cap {cap}: random ratio {rnd['ratio']:.2f} ({rnd['gids_Greads_per_s']:.2f} G/s), "
                f"sequential ratio {seq['ratio']:.2f} ({seq['gids_GBps']:.0f} GB/s); random kernel "
                f"{rk['registers']} registers, {rk['local_bytes']} B local, {rk['blocks_per_sm']} "
                f"blocks/SM; same={rnd['same_result'] and seq['same_result']}")
        res["caps"] = rows
    return res


def format_cap_rows(hits):
    """Table rows (figure, measured, plain reads, ratio, target) of the register-cap
    comparison (``bench_hits(..., caps=...)``)."""
    rows = []
    for row in hits.get("caps", []):
        rk, sk = row["random_kernel"], row["sequential_kernel"]
        rows.append([
            f"all-hit reads, {row['label']} (random kernel {rk['registers']} registers, "
            f"{rk['local_bytes']} B local, {rk['blocks_per_sm']} blocks/SM; sequential "
            f"{sk['registers']} / {sk['local_bytes']} B / {sk['blocks_per_sm']})",
            f"random {row['random']['gids_Greads_per_s']:.2f} G reads/s, sequential "
            f"{row['sequential']['gids_GBps']:.0f} GB/s",
            f"plain {row['random']['plain_Greads_per_s']:.2f} G reads/s, "
            f"{row['sequential']['plain_GBps']:.0f} GB/s",
            f"{row['random']['ratio']:.2f} / {row['sequential']['ratio']:.2f}",
            ">= 0.30 / >= 0.60"])
        pk = row.get("paged_kernel")
        for key, per_warp in PAGED_VARIANTS:
            pg = row.get("paged", {}).get(key)
            if pg is None or pk is None:
                continue
            rows.append([
                f"all-hit coalesced sequential reads, {per_warp} page(s) per warp call "
                f"(`gids.pin_page`), {row['label']} ({pk['registers']} registers, "
                f"{pk['local_bytes']} B local, {pk['blocks_per_sm']} blocks/SM)",
                f"{pg['gids_GBps']:.0f} GB/s", f"plain {pg['plain_GBps']:.0f} GB/s",
                f"{pg['ratio']:.2f}", ">= 0.60"])
    return rows


def paged_rows(res):
    """Table rows of the page-per-warp sequential reads (``bench_hits``'s
    ``paged_sequential``)."""
    rows = []
    for key, per_warp in PAGED_VARIANTS:
        label = ("a page per warp" if per_warp == 1 else
                 f"{per_warp} pages per warp call, {WARP_SIZE // per_warp} lanes each")
        pg = res.get(key)
        if pg is None:
            continue
        rows.append([f"all-hit coalesced sequential reads, {label} (`gids.pin_page`, kernel "
                     f"capped at {PAGED_MAX_REGISTERS} registers)",
                     f"{pg['gids_GBps']:.0f} GB/s", f"plain {pg['plain_GBps']:.0f} GB/s",
                     f"{pg['ratio']:.2f}", ">= 0.60"])
    return rows


def hits_suite(out_dir, caps=HIT_CAPS, quick=False):
    """The hit benchmarks alone, at each register cap (``python -m workloads.microbench hits``):
    one Markdown table (printed, and in OUT/hits_suite.md) and OUT/hits_suite.json.

    In the simulator it runs the same code at tiny sizes (a check that it runs; its times mean
    nothing)."""
    os.makedirs(out_dir, exist_ok=True)
    if gids.SIMULATOR:
        res = bench_hits(1 << 10, 1 << 16, 2, print, caps=caps, threads=4, blocks=2, repeat=1)
        gpu = "CUDA simulator (times mean nothing)"
    else:
        res = bench_hits((1 << 24) if quick else (1 << 26), 1 << 30, 16, print, caps=caps)
        dev = cuda.get_current_device()
        gpu = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    command = ("python -m workloads.microbench hits --caps " + ",".join(map(str, caps))
               + (" --quick" if quick else ""))
    res["meta"] = {"date": time.strftime("%Y-%m-%d"), "gpu": gpu, "command": command,
                   "default_max_registers": gids.MAX_REGISTERS}
    rows = [["all-hit reads, default cap",
             f"random {res['random']['gids_Greads_per_s']:.2f} G reads/s, sequential "
             f"{res['sequential']['gids_GBps']:.0f} GB/s",
             f"plain {res['random']['plain_Greads_per_s']:.2f} G reads/s, "
             f"{res['sequential']['plain_GBps']:.0f} GB/s",
             f"{res['random']['ratio']:.2f} / {res['sequential']['ratio']:.2f}",
             ">= 0.30 / >= 0.60"],
            *paged_rows(res), *format_cap_rows(res)]
    lines = [f"Measured {res['meta']['date']} on {gpu} with `{command}` (default cap "
             f"{gids.MAX_REGISTERS}).", "",
             console.table(["figure", "measured", "plain reads in the same run",
                            "ratio random / sequential", "target"], rows, markdown=True), ""]
    table = "\n".join(lines)
    _write_suite(out_dir, "hits", res, table)
    return res


# ------------------------------------------------------------------ load flavors
#
# gids reads a pinned page's bytes with ``ld.global.cg`` (kernels.sync.ld_weak_l2), which ptxas
# compiles for sm_90 to a strong GPU-scope load (``LDG.E.64.STRONG.GPU``), where a plain read is a
# weak one (``LDG.E.64``). This benchmark times the same reads with each flavor, over GPU memory
# and without gids, so that what the flavor costs is seen apart from the cache's own work.

#: Loads compared with a plain ``a[i]`` (``kernels.sync.make_load``), with what local ptxas
#: makes of each for sm_90: ``weak.global`` (``LDG.E.64``, the plain load's instruction, written
#: as the same side-effecting asm as the others: the compiler's part apart from the
#: hardware's); ``global.cg``, gids's (``LDG.E.64.STRONG.GPU``); ``relaxed.gpu.global`` (the
#: same) and ``relaxed.gpu`` (generic: ``LD.E.64.STRONG.GPU``, ``kernels.sync.ld_relaxed_gpu``);
#: ``global.L1::no_allocate`` (``LDG.E.NA.64``) and ``global.cs`` (``LDG.E.EF.64``), weak loads
#: that hint not to keep the line in L1.
LOAD_FLAVORS = ("weak.global", "global.cg", "relaxed.gpu.global", "relaxed.gpu",
                "global.L1::no_allocate", "global.cs")
_LOADS = {}


def _flavor_reader(flavor):
    """``read(a, i)`` for ``flavor`` ("plain" or one of :data:`LOAD_FLAVORS`), one per flavor."""
    if flavor == "plain":
        return _plain_read
    if flavor not in _LOADS:
        _LOADS[flavor] = make_load(flavor)
    return _LOADS[flavor]


def _page_reads(read):
    """A kernel in which each warp reads ``pages_per_warp`` whole pages of ``PAGE_WORDS`` int64
    (4 KiB) in a random order, lanes side by side, eight loads a lane issued before any is added:
    the bench's 4 KiB request pattern, with no cache in the way."""
    @gids.jit
    def kernel(src, n_pages, pages_per_warp, seed, out):
        t = cuda.grid(1)
        lane = t % WARP_SIZE
        x = np.uint64((t // WARP_SIZE) * 2654435761 + seed + 1)
        acc = 0
        for _ in range(pages_per_warp):
            x = _next_random(x)
            base = np.int64(x & np.uint64(n_pages - 1)) * PAGE_WORDS
            for r in range(0, PAGE_WORDS, 8 * WARP_SIZE):
                j = base + r + lane
                a0 = read(src, j)
                a1 = read(src, j + WARP_SIZE)
                a2 = read(src, j + 2 * WARP_SIZE)
                a3 = read(src, j + 3 * WARP_SIZE)
                a4 = read(src, j + 4 * WARP_SIZE)
                a5 = read(src, j + 5 * WARP_SIZE)
                a6 = read(src, j + 6 * WARP_SIZE)
                a7 = read(src, j + 7 * WARP_SIZE)
                acc += ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
        out[t] = acc
    return kernel


#: int64 words of a page in :func:`_page_reads` (4 KiB).
PAGE_WORDS = 512


def bench_loads(n_elems, log, flavors=LOAD_FLAVORS, threads=256, blocks=132 * 16, reads=16,
                pages_per_warp=16, repeat=3):
    """Sequential, random 8-byte and page-per-warp reads of an int64 device array with each
    load flavor, beside the plain read. Returns one row per pattern and flavor (GB/s, ratio to
    plain, and whether every thread's sum equals the plain kernel's)."""
    rng = np.random.default_rng(3)
    data = cuda.to_device(rng.integers(0, 1 << 40, n_elems, dtype=np.int64))
    n_threads = threads * blocks
    n_pages = n_elems // PAGE_WORDS
    patterns = {
        "sequential": (_sequential_reads, lambda k, out: k[blocks, threads](data, n_elems, out),
                       n_elems * 8),
        "random 8 B": (_random_reads, lambda k, out: k[blocks, threads](data, n_elems - 1, reads,
                                                                           7, out),
                       n_threads * reads * 8),
        "pages 4 KiB": (_page_reads, lambda k, out: k[blocks, threads](data, n_pages,
                                                                        pages_per_warp, 7, out),
                        n_threads // WARP_SIZE * pages_per_warp * PAGE_WORDS * 8),
    }
    rows = []
    for pattern, (template, launch, nbytes) in patterns.items():
        expected = None
        plain_s = None
        for flavor in ("plain",) + tuple(flavors):
            kernel = template(_flavor_reader(flavor))
            out = cuda.device_array(n_threads, dtype=np.int64)
            launch(kernel, out)                                  # compile, warm
            seconds = _time_kernel(lambda: launch(kernel, out), repeat)
            sums = out.copy_to_host()
            if expected is None:
                expected, plain_s = sums, seconds
            row = {"pattern": pattern, "flavor": flavor, "seconds": seconds,
                   "GBps": nbytes / seconds / 1e9, "of_plain": plain_s / seconds,
                   "correct": bool(np.array_equal(sums, expected))}
            rows.append(row)
            log(f"{pattern:12s} {flavor:24s} {row['GBps']:9.1f} GB/s  {row['of_plain']:.2f} of "
                f"plain  {'ok' if row['correct'] else 'WRONG'}")
    return rows


def loads_suite(out_dir, quick=False):
    """``python -m workloads.microbench loads``: :func:`bench_loads`, a Markdown table (printed,
    and OUT/loads_suite.md) and OUT/loads_suite.json. Tiny sizes in the simulator."""
    os.makedirs(out_dir, exist_ok=True)
    if gids.SIMULATOR:
        rows = bench_loads(1 << 12, print, threads=4, blocks=2, reads=2, pages_per_warp=1,
                           repeat=1)
        where = "CUDA simulator (times mean nothing)"
    else:
        rows = bench_loads((1 << 24) if quick else (1 << 26), print)
        where = _gpu_name()
    command = "python -m workloads.microbench loads" + (" --quick" if quick else "")
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": where, "command": command}
    cells = [[r["pattern"], f"`{r['flavor']}`", f"{r['GBps']:.1f}", f"{r['of_plain']:.2f}",
              "ok" if r["correct"] else "WRONG"] for r in rows]
    lines = [f"Measured {meta['date']} on {where} with `{command}`.", "",
             console.table(["pattern", "load", "GB/s", "of plain", "values"], cells,
                           markdown=True)]
    table = "\n".join(lines) + "\n"
    _write_suite(out_dir, "loads", {"meta": meta, "rows": rows}, table)
    return rows


# ------------------------------------------------------------------ launch cost
#
# The host's cost of one launch (numba-cuda types and marshals every argument at each launch):
# a kernel taking a gids handle, whose type and marshalled fields are kept per handle object
# (kernels/launch.py), the same handle as a fresh object each launch (nothing kept: ~30 fields
# typed and marshalled), a kernel taking one device array, and an idle Runtime.sync().


@gids.jit
def _touch_handle(h, out):
    if cuda.grid(1) == 0:
        out[0] = h.n_elems


@cuda.jit
def _touch_array(a, out):
    if cuda.grid(1) == 0:
        out[0] = a.size


def _event_time(launch):
    """Seconds between CUDA events recorded just before and after ``launch()`` on an idle
    stream, with no latch (what ``_time_kernel`` measured before ``workloads/timing.py``)."""
    cuda.synchronize()
    start, stop = cuda.event(), cuda.event()
    start.record()
    launch()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop) / 1e3


def bench_launch(n_launches, log, n_elems=1 << 16, threads=32, gpu_repeat=20):
    """Host microseconds of one launch of a trivial kernel: the median over ``n_launches``
    back-to-back launches (each timed alone), and the total with the one sync after them per
    launch; with each case's GPU time (median of ``gpu_repeat`` latch-timed launches,
    ``workloads/timing.py``: a few microseconds for these kernels where the launch costs the
    host tens), and its time by CUDA events around one launch on an idle stream, without the
    latch (how kernels were timed before 2eab8af: whether those times held the launch's host
    cost is what this column says; not in the simulator). Also the idle ``Runtime.sync()``. One
    row per case."""
    import warnings
    data = np.arange(n_elems, dtype=np.int64)
    d_data = cuda.to_device(data)
    out = cuda.device_array(1, dtype=np.int64)
    rows = []
    with warnings.catch_warnings(), gids.Runtime(cache_bytes=1 << 20, page_size=4096) as rt:
        warnings.simplefilter("ignore")          # one block: Numba's low-occupancy warning
        h = rt.open_array(data).handle
        fresh = [type(h)(*h) for _ in range(n_launches + 2 * gpu_repeat)]   # before timing
        handles = iter(fresh)
        cases = (
            ("gids handle (kept per handle object)", lambda: _touch_handle[1, threads](h, out),
             n_elems),
            ("gids handle, a fresh handle object each launch",
             lambda: _touch_handle[1, threads](next(handles), out), n_elems),
            ("one device array", lambda: _touch_array[1, threads](d_data, out), n_elems),
        )
        _touch_handle[1, threads](h, out)        # compile both kernels, outside the timing
        _touch_array[1, threads](d_data, out)
        rt.sync()
        for name, launch, expected in cases:
            median, p90, with_sync = _host_us(launch, n_launches)
            correct = int(out.copy_to_host()[0]) == expected
            gpu = [timing.time_launch(launch) for _ in range(gpu_repeat)]
            events = None if gids.SIMULATOR else [_event_time(launch) for _ in range(gpu_repeat)]
            row = {"case": name, "launches": n_launches,
                   "host_us_median": median, "host_us_p90": p90,
                   "with_sync_us_per_launch": with_sync,
                   "gpu_us_median": float(np.median([g.gpu_s for g in gpu])) * 1e6,
                   "event_us_median": None if events is None else float(np.median(events)) * 1e6,
                   "latch_held": sum(g.held for g in gpu), "gpu_repeat": gpu_repeat,
                   "correct": correct}
            rows.append(row)
            log(f"launch, {name}: {row['host_us_median']:.1f} us host (median of {n_launches}; "
                f"p90 {row['host_us_p90']:.1f}), {row['with_sync_us_per_launch']:.1f} us per "
                f"launch with the sync; GPU {row['gpu_us_median']:.1f} us (behind the latch), "
                f"{row['event_us_median'] or 0:.1f} us by events around one launch; "
                f"{'ok' if correct else 'WRONG'}")
        median, p90, _ = _host_us(rt.sync, n_launches)
        row = {"case": "idle Runtime.sync()", "launches": n_launches,
               "host_us_median": median, "host_us_p90": p90,
               "with_sync_us_per_launch": None, "gpu_us_median": None,
               "event_us_median": None, "latch_held": None,
               "gpu_repeat": None, "correct": True}
        rows.append(row)
        log(f"idle Runtime.sync(): {row['host_us_median']:.1f} us (median of {n_launches}; p90 "
            f"{row['host_us_p90']:.1f})")
    return rows


def launch_suite(out_dir, n_launches=200):
    """``python -m workloads.microbench launch``: :func:`bench_launch`, a Markdown table
    (printed, and OUT/launch_suite.md) and OUT/launch_suite.json. In the simulator it runs a
    few launches (the times mean nothing there)."""
    os.makedirs(out_dir, exist_ok=True)
    if gids.SIMULATOR:
        rows = bench_launch(min(n_launches, 3), print, n_elems=1 << 10, threads=1, gpu_repeat=2)
        where = "CUDA simulator (times mean nothing)"
    else:
        rows = bench_launch(n_launches, print)
        where = _gpu_name()
    import numba
    try:
        from numba_cuda import __version__ as numba_cuda_version
    except ImportError:
        numba_cuda_version = None
    command = f"python -m workloads.microbench launch --launches {n_launches}"
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": where, "command": command,
            "numba": numba.__version__, "numba_cuda": numba_cuda_version,
            "cheap_handle_launches": gids.host.cheap_launches_installed()}
    lines = [f"Measured {meta['date']} on {where} with `{command}` (numba {meta['numba']}, "
             f"numba-cuda {numba_cuda_version}; handle launches kept per handle object "
             f"(kernels/launch.py): {meta['cheap_handle_launches']}).", ""]
    cells = []
    for r in rows:
        sync = "-" if r["with_sync_us_per_launch"] is None else f"{r['with_sync_us_per_launch']:.1f}"
        gpu = "-" if r["gpu_us_median"] is None else f"{r['gpu_us_median']:.1f}"
        event = "-" if r["event_us_median"] is None else f"{r['event_us_median']:.1f}"
        cells.append([r["case"], f"{r['host_us_median']:.1f}", f"{r['host_us_p90']:.1f}", sync,
                      gpu, event, "ok" if r["correct"] else "WRONG"])
    lines.append(console.table(["launch", "host us (median)", "host us (p90)",
                                "us per launch with one sync", "GPU us (latch-timed)",
                                "us by events around one launch", "values"], cells,
                               markdown=True))
    table = "\n".join(lines) + "\n"
    _write_suite(out_dir, "launch", {"meta": meta, "rows": rows}, table)
    return rows


def _host_us(call, n_calls):
    """``(median, p90)`` host microseconds of ``call()`` over ``n_calls`` back-to-back calls,
    and the microseconds per call with the sync after them: the rate a loop of them sustains
    (the host's cost or the GPU's, whichever is larger)."""
    each = []
    cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n_calls):
        t0 = time.perf_counter()
        call()
        each.append(time.perf_counter() - t0)
    cuda.synchronize()
    total = time.perf_counter() - start
    return (float(np.median(each)) * 1e6, float(np.percentile(each, 90)) * 1e6,
            total / n_calls * 1e6)


def bench_rows_launch(n_rows, width, sizes, n_calls, log):
    """Host microseconds per ``Runtime.gather_rows`` call, torch tensors in and out, on a
    whole cache already warm (every row resident: the host's cost is all that differs), for
    gathers of each of ``sizes`` rows, with ``rows_resident_first`` 0 and 1 (auto picks one
    of them by the size: :data:`gids.rows.RESIDENT_FIRST_ROWS`); and ``torch.index_select``
    into the same tensor from a copy of the array in GPU memory, beside it. Each row checks
    its output against ``index_select``'s."""
    import torch

    from gids.rows import resident_first
    device = "cpu" if gids.SIMULATOR else "cuda"
    rng = np.random.default_rng(7)
    data = rng.standard_normal((n_rows, width)).astype(np.float32)
    resident = torch.from_numpy(data).to(device)
    rows = []
    with gids.Runtime(cache_bytes=2 * data.nbytes, page_size=4096) as rt:
        a = rt.open_array(data)
        rt.gather_rows(a, np.arange(n_rows))   # warm: every page resident
        rt.sync()
        for n in sizes:
            idx = torch.from_numpy(rng.integers(0, n_rows, size=n)).to(device)
            want = resident.index_select(0, idx)
            out = torch.empty((n, width), dtype=torch.float32, device=device)

            def memory(idx=idx, out=out):
                torch.index_select(resident, 0, idx, out=out)

            def gather(idx=idx, out=out):
                rt.gather_rows(a, idx, out=out)

            # A loader's pattern: each batch's indices a new tensor (its view made, not
            # kept), its output a new slice object of one buffer (its view kept).
            fresh = iter([idx.clone() for _ in range(n_calls + 1)])
            buffer = torch.empty((n + 1, width), dtype=torch.float32, device=device)

            def gather_fresh(fresh=fresh, buffer=buffer, n=n):
                rt.gather_rows(a, next(fresh), out=buffer[:n])

            cases = [("torch.index_select (GPU memory)", None, memory)]
            cases += [(f"gids gather_rows, rows_resident_first={int(first)}", first, gather)
                      for first in (False, True)]
            cases.append(("gids gather_rows, rows_resident_first=auto, a new index tensor and "
                          "out slice each call", "auto", gather_fresh))
            for name, first, call in cases:
                out.fill_(float("nan"))
                buffer.fill_(float("nan"))
                settings = {} if first is None else {"rows_resident_first": first}
                with gids.defaults.set(**settings):
                    call()                    # compile, outside the timing
                    rt.sync()
                    median, p90, per_call = _host_us(call, n_calls)
                    rt.sync()
                got = buffer[:n] if call is gather_fresh else out
                correct = bool(torch.equal(got, want))
                auto = None
                if first not in (None, "auto"):
                    with gids.defaults.set(rows_resident_first="auto"):
                        auto = resident_first(n) == first
                row = {"case": name, "rows": n, "calls": n_calls, "host_us_median": median,
                       "host_us_p90": p90, "us_per_call_with_sync": per_call,
                       "auto_picks_this": auto, "correct": correct}
                rows.append(row)
                log(f"rows-launch, {n} rows, {name}: {median:.1f} us host (median of "
                    f"{n_calls}; p90 {p90:.1f}), {per_call:.1f} us per call with the sync; "
                    f"{'ok' if correct else 'WRONG'}")
    return rows


def rows_launch_suite(out_dir, n_calls=200):
    """``python -m workloads.microbench rows-launch``: :func:`bench_rows_launch` on 65 536
    rows of 1024 floats (a 4 KiB page each) in gathers of 1 and 32 768 rows, a Markdown table
    (printed, and OUT/rows_launch_suite.md) and OUT/rows_launch_suite.json. In the simulator
    it runs a few calls on tiny sizes (the times mean nothing there)."""
    os.makedirs(out_dir, exist_ok=True)
    if gids.SIMULATOR:
        rows = bench_rows_launch(64, 1024, (1, 8), min(n_calls, 3), print)
        where = "CUDA simulator (times mean nothing)"
    else:
        rows = bench_rows_launch(1 << 16, 1024, (1, 1 << 15), n_calls, print)
        where = _gpu_name()
    command = f"python -m workloads.microbench rows-launch --calls {n_calls}"
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": where, "command": command}
    lines = [f"Measured {meta['date']} on {where} with `{command}`: a whole cache, warm; "
             f"torch tensors in and out.", ""]
    cells = [[r["case"], str(r["rows"]), f"{r['host_us_median']:.1f}",
              f"{r['host_us_p90']:.1f}", f"{r['us_per_call_with_sync']:.1f}",
              "-" if r["auto_picks_this"] is None else ("yes" if r["auto_picks_this"] else "no"),
              "ok" if r["correct"] else "WRONG"] for r in rows]
    lines.append(console.table(["call", "rows", "host us (median)", "host us (p90)",
                                "us per call with one sync", "auto picks it", "values"], cells,
                               markdown=True))
    _write_suite(out_dir, "rows_launch", {"meta": meta, "rows": rows}, "\n".join(lines) + "\n")
    return rows


def misses_suite(out_dir, quick=False):
    """All-miss pages one per thread against one per warp, by daemon threads
    (``python -m workloads.microbench misses``): does a miss cost more when each warp has one
    page in flight, the BFS and search kernels' pattern, than when it has 32? Each row has the
    kernels' mean I/O latency and mean miss time. OUT/misses_suite.json, and a table printed.

    In the simulator it runs the same code at tiny sizes (a check that it runs)."""
    os.makedirs(out_dir, exist_ok=True)
    if gids.SIMULATOR:
        n_pages, page_size, counts, cache = 16, 512, (1,), 1 << 14
    else:
        n_pages, page_size = (1 << 16) if quick else (1 << 18), 4096
        counts, cache = (4, 8), 1 << 30
    data = np.random.default_rng(0).integers(0, 1 << 62, n_pages * page_size // 8, dtype=np.int64)
    rows = bench_all_miss(data, page_size, counts, True, cache, print)
    # A quarter of the pages one per warp (still 16 k warps or more, far more than the GPU holds
    # at once), so that a slow pattern does not spend the call.
    quarter = data[:max(1, n_pages // 4) * page_size // 8]
    rows += bench_all_miss(quarter, page_size, counts, True, cache, print, per_warp=True)
    cells = [[1 if r["per_warp"] else 32, r["daemon_threads"], f"{r['Mpages_per_s']:.3f}",
              f"{r['io_latency_us']:.1f}", f"{r['miss_latency_us']:.1f}",
              f"{r['slot_retries']:,}", "equal" if r["correct"] else "WRONG"] for r in rows]
    table = console.table(["pages in flight per warp", "daemon threads", "M pages/s",
                           "mean I/O us", "mean miss us", "slot retries", "values"], cells,
                          markdown=True) + "\n"
    _write_suite(out_dir, "misses", {"date": time.strftime("%Y-%m-%d"), "rows": rows}, table)
    return rows


def latency_settings():
    """The settings of one miss's path in this process (read at import, compiled into the
    kernels: kernels/platform.py, host_daemon/daemon.py): the bulk copy's lane threshold, the
    completion poll schedule, the daemon's hot-queue stride."""
    get = gids.defaults.get
    return {"bulk_copy_lanes": get("bulk_copy_lanes"), "early_copy": get("early_copy"),
            "poll_ns": list(get("poll_ns")), "hot_queue_every": get("hot_queue_every")}


def bench_latency(data, page_size, n_misses, log, keys=("zero_copy", "copy", "nvme")):
    """One thread, one miss at a time (``one_miss_at_a_time``, a ``<<<1,1>>>`` kernel): the
    percentiles of each read's time, per data path of ``keys`` (``zero_copy`` and ``copy``: the
    host daemon serving a RAM store without or with a copy into staging; ``nvme``: the direct
    NVMe path). Each row also says how its pages were copied into the cache (``bulk_copies`` of
    ``ios``: by bulk copy, the rest by the lane's own loads) and the mean I/O time the kernel
    saw (submission to completion)."""
    epp = page_size // data.dtype.itemsize
    n_pages = data.nbytes // page_size
    pages = np.random.default_rng(3).choice(n_pages, n_misses, replace=False).astype(np.int64)
    paths = {"zero_copy": ("host", True), "copy": ("host", False), "nvme": ("nvme", True)}
    res = {"settings": latency_settings()}
    for key in keys:
        backend, zero_copy = paths[key]
        with gids.Runtime(backend, cache_bytes=64 << 20, page_size=page_size,
                          daemon_threads=1) as rt:
            arr = rt.open_array(gids.MemoryStore(data, zero_copy=zero_copy), data.dtype, shape=data.shape)
            times = cuda.device_array(n_misses, dtype=np.int64)
            out = cuda.device_array(1, dtype=data.dtype)
            d_pages = cuda.to_device(pages)
            one_miss_at_a_time[1, 1](arr.handle, d_pages[:32], epp, times, out)   # compile, warm
            rt.sync()
            rt.invalidate()
            rt.reset_stats()
            start = time.perf_counter()
            one_miss_at_a_time[1, 1](arr.handle, d_pages, epp, times, out)
            rt.sync()
            wall = time.perf_counter() - start
            t = times.copy_to_host() / 1e3
            st = rt.stats()
            # The kernel sums what it read (int64, wrapping as numpy's sum does).
            ok = bool(out.copy_to_host()[0] == data.reshape(-1)[pages * epp].sum())
            # The whole distribution too, in 0.5 us bins: a median that moves by a poll period
            # (~2 us) between runs is two modes of one distribution, not noise around one.
            counts, edges = np.histogram(t, bins=np.arange(0.0, 40.5, 0.5))
            res[key] = {"p10_us": float(np.percentile(t, 10)), "p25_us": float(np.percentile(t, 25)),
                        "p50_us": float(np.percentile(t, 50)), "p75_us": float(np.percentile(t, 75)),
                        "p90_us": float(np.percentile(t, 90)),
                        "p99_us": float(np.percentile(t, 99)), "mean_wall_us": wall / n_misses * 1e6,
                        "histogram_us": {"bin_edges": edges.tolist(), "counts": counts.tolist(),
                                         "above": int(np.count_nonzero(t >= edges[-1]))},
                        "ios": st.ios, "bulk_copies": st.bulk_copies,
                        "early_copies": st.early_copies,
                        "io_us": st.io_latency_us, "submit_us": st.submit_latency_us,
                        "copy_us": st.copy_latency_us, "claim_us": st.claim_latency_us,
                        "miss_us": st.miss_latency_us,
                        "values_ok": ok}
            log(f"QD1 miss latency ({key}): p50 {res[key]['p50_us']:.1f} us, p99 {res[key]['p99_us']:.1f} us, "
                f"wall mean {res[key]['mean_wall_us']:.1f} us, mean miss {st.miss_latency_us:.1f} us "
                f"= I/O {st.io_latency_us:.1f} (of which submit {st.submit_latency_us:.1f}) + copy "
                f"{st.copy_latency_us:.1f} + claiming the slot {st.claim_latency_us:.1f} + the "
                f"rest {st.miss_latency_us - st.io_latency_us - st.copy_latency_us - st.claim_latency_us:.1f}, "
                f"bulk copies {st.bulk_copies} (early {st.early_copies}) of {st.ios}, "
                f"values {'ok' if ok else 'WRONG'}")
    return res


#: The latency A/B (``python -m workloads.microbench latency``): name -> environment. Each variant
#: runs in a process of its own, since the settings are read at import and compiled into the
#: kernels. A zero-copy page's bulk copy starts while its request is out: the variants turn that
#: off and move the first poll. The defaults run first and last, which shows how far the machine
#: drifted between.
LATENCY_VARIANTS = {
    "defaults": "",
    "no early copy": "GIDS_EARLY_COPY=0",
    "first poll 2 us": "GIDS_POLL_NS=2048,1024,8192",
    "defaults again": "",
}
_KNOBS = ("GIDS_BULK_COPY_LANES", "GIDS_EARLY_COPY", "GIDS_POLL_NS", "GIDS_HOT_QUEUE_EVERY")


def _latency_data(quick):
    n_pages = 256 if gids.SIMULATOR else (1 << 14) if quick else (1 << 16)
    return np.random.default_rng(0).integers(0, 1 << 62, n_pages * 512, dtype=np.int64)


def latency_child(n_misses, quick):
    """One variant of the A/B (``latency-child``, started by :func:`latency_suite`): compile and
    warm, say READY, measure when told GO on stdin, print the result as one JSON line."""
    data = _latency_data(quick)
    with gids.Runtime(cache_bytes=16 << 20, page_size=4096, daemon_threads=1, queues=1) as rt:
        arr = rt.open_array(gids.MemoryStore(data), data.dtype, shape=data.shape)
        times = cuda.device_array(8, dtype=np.int64)
        one_miss_at_a_time[1, 1](arr.handle, cuda.to_device(np.arange(8, dtype=np.int64)), 512,
                                 times, cuda.device_array(1, dtype=data.dtype))   # compiles
        rt.sync()
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return 1
    res = bench_latency(data, 4096, n_misses, lambda msg: print(msg, file=sys.stderr),
                        keys=("zero_copy", "copy"))
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def latency_suite(out_dir, variants=LATENCY_VARIANTS, n_misses=2000, quick=False):
    """The QD1 latency under each variant of :data:`LATENCY_VARIANTS` (printed as a table, and
    in OUT/latency_suite.json). The variants' processes compile at once, then measure one after
    the other (no two measure together). In the simulator it runs the same code on a small
    array (a check that it runs; its times mean nothing)."""
    os.makedirs(out_dir, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    procs = {}
    for name, assignments in variants.items():
        env = dict(base, **dict(a.split("=", 1) for a in assignments.split()))
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "workloads.microbench", "latency-child", "--misses",
             str(n_misses)] + (["--quick"] if quick else []),
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        for name, proc in procs.items():
            if proc.stdout.readline().strip() != "READY":
                raise RuntimeError(f"latency variant {name!r} failed to start")
        for name, proc in procs.items():
            proc.stdin.write("GO\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            proc.wait(timeout=120)
            if not line.startswith("RESULT "):
                raise RuntimeError(f"latency variant {name!r} failed")
            res = json.loads(line[len("RESULT "):])
            rows.append({"variant": name, "environment": variants[name], **res})
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    cells = []
    for r in rows:
        z, c, st = r["zero_copy"], r["copy"], r["settings"]
        ok = z["values_ok"] and c["values_ok"]
        rest = z["miss_us"] - z["io_us"] - z["copy_us"] - z["claim_us"]
        cells.append([
            r["variant"],
            f"{z['p10_us']:.1f} / {z['p25_us']:.1f} / {z['p50_us']:.1f} / {z['p75_us']:.1f} / "
            f"{z['p90_us']:.1f} / {z['p99_us']:.1f}",
            f"{c['p50_us']:.1f}",
            f"{z['miss_us']:.1f} = {z['io_us']:.1f} ({z['submit_us']:.1f}) + {z['copy_us']:.1f} "
            f"+ {z['claim_us']:.1f} + {rest:.1f}",
            f"{z['bulk_copies']} ({z.get('early_copies', 0)}) / {z['ios']}",
            "equal" if ok else "WRONG",
            f"lanes {st['bulk_copy_lanes']}, early {'on' if st.get('early_copy', False) else 'off'}"
            f", poll {st['poll_ns']}, hot {st['hot_queue_every']}"])
    table = console.table(["variant", "zero-copy p10 / p25 / p50 / p75 / p90 / p99 us",
                           "copy p50 us",
                           "zero-copy mean miss = I/O (submit) + copy + claim + rest, us",
                           "bulk (early) copies / I/Os", "values", "settings"], cells,
                          markdown=True) + "\n"
    _write_suite(out_dir, "latency", {"date": time.strftime("%Y-%m-%d"), "rows": rows}, table)
    return rows


def bench_emulation(data, page_size, profile, drive_counts, n_reads, out_dir, log):
    """Record runs under real-time emulation of 1, 2, 4 drives; replay each trace through the
    same model and compare the predicted time with the measured wall time (issue 3).

    The wall time is taken on the daemon's clock (``time.monotonic_ns``, CLOCK_MONOTONIC), so
    each row also splits it into what the trace covers (first issue to last posted
    completion: what a replay can predict) and what it cannot (launch to the first request
    the daemon sees, the last posting to the kernel's end): see
    :func:`workloads.emulation_bench.compare_with_replay`."""
    from workloads.emulation_bench import compare_with_replay, format_row
    epp = page_size // data.dtype.itemsize
    n_pages = data.nbytes // page_size
    rows = []
    for n_ssd in drive_counts:
        path = os.path.join(out_dir, f"emulated_{profile}_{n_ssd}.trace")
        pages = np.random.default_rng(n_ssd).choice(n_pages, n_reads, replace=False).astype(np.int64)
        d_pages = cuda.to_device(pages)
        out = cuda.device_array(n_reads, dtype=data.dtype)
        with gids.Runtime(cache_bytes=1 << 30, page_size=page_size, ssd=profile, n_ssd=n_ssd,
                          trace=path) as rt:
            arr = rt.open_array(gids.MemoryStore(data), data.dtype, shape=data.shape)
            first_element_of_pages[math.ceil(n_reads / 256), 256](arr.handle, d_pages[:256], epp, out)
            rt.sync()                                    # compile and warm, not recorded below
            rt.invalidate()
            rt.reset_stats()
            cuda.synchronize()
            start = time.monotonic_ns()
            first_element_of_pages[math.ceil(n_reads / 256), 256](arr.handle, d_pages, epp, out)
            # The kernels' time only: rt.sync() also writes the trace to its file (tens of ms
            # for 256 k records), which is not I/O the model times.
            cuda.synchronize()
            end = time.monotonic_ns()
            rt.sync()
            ios = rt.stats().ios
        trace = gids.read_trace(path)
        trace = trace[trace["issue_ns"] >= start]        # the timed kernel's requests
        if len(trace) != n_reads or ios != n_reads:
            log(f"WARNING emulated x{n_ssd}: {len(trace)} trace records and {ios} I/Os for "
                f"{n_reads} reads (the comparison below is not of one whole run)")
        row = compare_with_replay(trace, start, end, profile, n_ssd)
        row["ios"] = ios
        log(format_row(row))
        rows.append(row)
        os.remove(path)
    return rows


def emulation_suite(out_dir, n_reads=1 << 18, drive_counts=(1, 2, 4), profile="pm1743"):
    """The emulation rows alone (``python -m workloads.microbench emulation``): recorded runs
    under real-time emulation, replayed; printed and written to OUT/emulation_suite.json."""
    if gids.SIMULATOR:
        raise SystemExit("the emulation suite needs a GPU (this process runs in the CUDA "
                         "simulator; python -m workloads.emulation_bench is the host-only one)")
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    # As the GPU suite: 1 Mi pages of 4 KiB (4 GiB) to draw distinct random pages from. The
    # values are not checked here: a range, which takes a second where random numbers take 20.
    data = np.arange((1 << 20) * 512, dtype=np.int64)
    rows = bench_emulation(data, 4096, profile, drive_counts, n_reads, out_dir, print)
    with open(os.path.join(out_dir, "emulation_suite.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "gpu": _gpu_name(),
                   "daemon_threads": gids.defaults.get("daemon_threads"),
                   "cpu_cores": os.cpu_count(), "rows": rows}, f, indent=1)
    print("predicted / measured wall time: " + ", ".join(
        f"x{r['n_ssd']} {r['ratio']:.3f}" for r in rows) + " (target within 15 %)", flush=True)
    return rows


def _gpu_name():
    name = getattr(cuda.get_current_device(), "name", "CUDA simulator")
    return name.decode() if isinstance(name, bytes) else name


def bench_all_miss_nvme(data, cores, log):
    """All-miss 4 KiB reads over the direct NVMe path, ideal SSD profile, by controller threads
    (three counts only, to keep the suite inside one device call)."""
    counts = sorted({4, 8, max(1, cores - 2)})
    return bench_all_miss(data, 4096, counts, True, 1 << 30, log, backend="nvme", ssd="ideal")


def nvme_suite(out_dir, quick=False):
    """The NVMe rows alone (``python -m workloads.microbench nvme``): all-miss commands/s with
    the ideal profile, and QD1 latency; printed and written to OUT/nvme_suite.json."""
    if gids.SIMULATOR:
        raise SystemExit("the nvme suite needs a GPU (this process runs in the CUDA simulator)")
    os.makedirs(out_dir, exist_ok=True)
    n_pages = (1 << 18) if quick else (1 << 20)
    data = np.random.default_rng(0).integers(0, 1 << 62, n_pages * 512, dtype=np.int64)
    rows = bench_all_miss_nvme(data, os.cpu_count() or 8, print)
    best = max(rows, key=lambda x: x["Mpages_per_s"])
    print(f"all-miss NVMe commands/s, ideal profile: {best['Mpages_per_s']:.2f} M/s "
          f"({best['daemon_threads']} controller threads; target >= 5 M/s)", flush=True)
    with open(os.path.join(out_dir, "nvme_suite.json"), "w") as f:
        json.dump({"all_miss_nvme": rows}, f, indent=1)
    return rows


# ------------------------------------------------------------------ the suite

def _registers(kernels):
    """Registers per thread of each compiled kernel (the most over its signatures)."""
    out = {}
    for name, kernel in kernels.items():
        regs = kernel.get_regs_per_thread()
        out[name] = max(regs.values()) if isinstance(regs, dict) else regs
    return out


def gpu_suite(out_dir, quick=False):
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    log_lines = []

    def log(msg):
        print(msg, flush=True)
        log_lines.append(msg)

    if gids.SIMULATOR:
        raise SystemExit("gpu-suite needs a GPU (this process runs in the CUDA simulator)")
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": _gpu_name(),
            "cpu_cores": os.cpu_count(), "python": platform.python_version(),
            "command": "python -m workloads.microbench gpu-suite" + (" --quick" if quick else "")}
    log(f"# gids GPU suite, {meta['date']}, {meta['gpu']}, {meta['cpu_cores']} CPU cores")
    results = {"meta": meta}
    results["ceilings"] = measure_ceilings()
    log(f"ceilings: pinned H2D {results['ceilings']['h2d_pinned_GBps']:.1f} GB/s, "
        f"D2D {results['ceilings']['d2d_GBps_read_plus_write']:.0f} GB/s (read+write)")
    n_pages = (1 << 18) if quick else (1 << 20)
    data = np.random.default_rng(0).integers(0, 1 << 62, n_pages * 512, dtype=np.int64)
    cores = os.cpu_count() or 8
    counts = sorted({1, 2, 4, 8, max(1, cores - 2)})
    results["all_miss_zero_copy"] = bench_all_miss(data, 4096, counts, True, 1 << 30, log)
    results["all_miss_copy"] = bench_all_miss(data, 4096, counts, False, 1 << 30, log)
    results["all_miss_nvme"] = bench_all_miss_nvme(data, cores, log)
    # One page in flight per warp (the BFS and search kernels' pattern), at 8 daemon threads.
    results["all_miss_per_warp"] = bench_all_miss(data[:data.size // 4], 4096, (8,), True,
                                                  1 << 30, log, per_warp=True)
    # The default cap's row is the main one; the other caps follow, one labelled row each.
    results["hits"] = bench_hits(1 << 26, 1 << 30, 16, log,
                                 caps=[c for c in HIT_CAPS if c != gids.MAX_REGISTERS])
    results["latency"] = bench_latency(data, 4096, 2000, log)
    results["registers_per_thread"] = _registers(
        {"all-miss kernel": first_element_of_pages, "random-hit kernel": random_reads_gids,
         "plain random kernel": random_reads_plain})
    log(f"registers per thread: {results['registers_per_thread']} (gids.read is inlined into "
        "each kernel: its miss path sets the kernel's register count, hence its occupancy)")
    results["emulation"] = bench_emulation(data, 4096, "pm1743", (1, 2, 4),
                                           (1 << 16) if quick else (1 << 18), out_dir, log)
    with open(os.path.join(out_dir, "gpu_suite.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = format_table(results)
    with open(os.path.join(out_dir, "gpu_suite.md"), "w") as f:
        f.write(table)
    print(table)
    return results


def _copy_path(row):
    """How a latency row's pages reached the cache: by bulk copy (TMA) or the lane's loads."""
    bulk = row.get("bulk_copies", 0)
    if bulk == 0:
        return "pages copied by the lane's loads"
    return "pages copied by bulk copy" + ("" if bulk == row["ios"] else f" ({bulk} of {row['ios']})")


def format_table(r):
    c = r["ceilings"]
    best_zc = max(r["all_miss_zero_copy"], key=lambda x: x["Mpages_per_s"])
    best_cp = max(r["all_miss_copy"], key=lambda x: x["Mpages_per_s"])
    best_nv = max(r["all_miss_nvme"], key=lambda x: x["Mpages_per_s"])
    pcie_pages = c["h2d_pinned_GBps"] * 1e9 / 4096 / 1e6
    rows = [
        ["all-miss random 4 KiB pages, RAM store, zero-copy serve",
         f"{best_zc['Mpages_per_s']:.2f} M pages/s ({best_zc['daemon_threads']} daemon threads)",
         f"pinned H2D copy {c['h2d_pinned_GBps']:.1f} GB/s = {pcie_pages:.1f} M pages/s",
         f"{best_zc['Mpages_per_s'] / pcie_pages:.2f}", ">= 8 M pages/s"],
        ["all-miss random 4 KiB pages, RAM store, daemon copies to staging",
         f"{best_cp['Mpages_per_s']:.2f} M pages/s ({best_cp['daemon_threads']} daemon threads)",
         "same", f"{best_cp['Mpages_per_s'] / pcie_pages:.2f}", "(info)"],
        ["all-miss NVMe commands/s, ideal profile (4 KiB reads, direct NVMe path, emulated "
         "controller)",
         f"{best_nv['Mpages_per_s']:.2f} M commands/s ({best_nv['daemon_threads']} controller "
         "threads)", "same", f"{best_nv['Mpages_per_s'] / pcie_pages:.2f}", ">= 5 M commands/s"],
        *(["all-miss, one page per warp (the BFS and search kernels' pattern)",
           f"{x['Mpages_per_s']:.2f} M pages/s ({x['daemon_threads']} daemon threads; mean I/O "
           f"{x['io_latency_us']:.1f} us, mean miss {x['miss_latency_us']:.1f} us)", "same",
           f"{x['Mpages_per_s'] / pcie_pages:.2f}", "(info)"]
          for x in r.get("all_miss_per_warp", [])),
        ["all-hit random 8-byte reads", f"{r['hits']['random']['gids_Greads_per_s']:.2f} G reads/s",
         f"plain gather {r['hits']['random']['plain_Greads_per_s']:.2f} G reads/s",
         f"{r['hits']['random']['ratio']:.2f}", ">= 0.30"],
        ["all-hit coalesced sequential reads", f"{r['hits']['sequential']['gids_GBps']:.0f} GB/s",
         f"plain {r['hits']['sequential']['plain_GBps']:.0f} GB/s (D2D copy "
         f"{c['d2d_GBps_read_plus_write']:.0f} GB/s)", f"{r['hits']['sequential']['ratio']:.2f}",
         ">= 0.60"],
        *paged_rows(r["hits"]),
        *format_cap_rows(r["hits"]),
        [f"one thread, one miss at a time (zero-copy; {_copy_path(r['latency']['zero_copy'])})",
         f"p50 {r['latency']['zero_copy']['p50_us']:.1f} us, "
         f"p99 {r['latency']['zero_copy']['p99_us']:.1f} us", "", "", "p50 <= 10 us"],
        [f"one thread, one miss at a time (copy; {_copy_path(r['latency']['copy'])})",
         f"p50 {r['latency']['copy']['p50_us']:.1f} us, p99 {r['latency']['copy']['p99_us']:.1f} us",
         "", "", "(info)"],
        ["one thread, one NVMe command at a time (no SSD model)",
         f"p50 {r['latency']['nvme']['p50_us']:.1f} us, p99 {r['latency']['nvme']['p99_us']:.1f} us",
         "", "", "(info)"],
    ]
    lines = [
        f"Measured {r['meta']['date']} on {r['meta']['gpu']} ({r['meta']['cpu_cores']} CPU cores) "
        f"with `{r['meta']['command']}`.",
        "",
        console.table(["figure", "measured", "reference in the same run", "ratio", "target"], rows,
                      markdown=True),
        "",
        "Real-time emulation, recorded then replayed (predicted / measured wall time): " + ", ".join(
            f"{e['profile']} x{e['n_ssd']}: {e['predicted_s']:.3f} / {e['wall_s']:.3f} s "
            f"({e['ratio']:.2f})" for e in r.get("emulation", [])),
        "",
        *format_thread_rows(r),
    ]
    return "\n".join(lines)


#: The all-miss series of the suite, by how the table names them.
_THREAD_SERIES = (("zc", "all_miss_zero_copy", "zero-copy"), ("copy", "all_miss_copy", "copy"),
                  ("nvme", "all_miss_nvme", "NVMe commands (controller threads)"))


def format_thread_rows(r):
    """All-miss M pages/s by thread count: a line, then a Markdown table. Each figure stands
    at the thread count it was measured at (the NVMe rows are measured at other counts than
    the host rows: 4, 8 and cores - 2 controller threads); '-' where a series has no row."""
    by_series = {short: {x["daemon_threads"]: x["Mpages_per_s"] for x in r.get(key, [])}
                 for short, key, _ in _THREAD_SERIES}
    counts = sorted(set().union(*(rows.keys() for rows in by_series.values())))
    line = "All-miss by daemon (or controller) threads (M pages/s): " + ", ".join(
        f"{n}: " + " / ".join(f"{by_series[short][n]:.2f} {short}"
                              for short, _, _ in _THREAD_SERIES if n in by_series[short])
        for n in counts)
    rows = [[n] + [f"{by_series[short][n]:.2f}" if n in by_series[short] else "-"
                   for short, _, _ in _THREAD_SERIES] for n in counts]
    by_threads = console.table(["threads"] + [name for _, _, name in _THREAD_SERIES], rows, markdown=True)
    return [line, "", "All-miss M pages/s by thread count:", "", *by_threads.splitlines(), ""]


def build_parser():
    """``python -m workloads.microbench``'s parser (parsing runs nothing)."""
    parser = argparse.ArgumentParser(prog="python -m workloads.microbench")
    sub = parser.add_subparsers(dest="cmd", required=True)

    def suite(name, files, what, quick=None):
        """A suite's command: ``--out``, the folder for its ``files``, and ``--quick`` (what it
        makes smaller) where the suite has one."""
        p = sub.add_parser(name, help=what)
        p.add_argument("--out", default="out", help=f"folder for {files} (default: out)")
        if quick:
            p.add_argument("--quick", action="store_true", help=quick)
        return p

    p = suite("gpu-suite", "gpu_suite.md/.json",
              "GPU tests + core benchmarks + ceilings, one table", quick="smaller sizes")
    p.add_argument("--no-tests", action="store_true", help="skip the GPU pytest run")
    p = suite("hits", "hits_suite.md/.json",
              "the all-hit benchmarks only, at several register caps", quick="smaller sizes")
    p.add_argument("--caps", default=",".join(map(str, HIT_CAPS)),
                   help="register caps to compare, comma-separated (default: %(default)s)")
    suite("misses", "misses_suite.md/.json", "all-miss pages one per thread vs one per warp, "
          "with the kernels' own I/O and miss latencies", quick="smaller sizes")
    p = suite("emulation", "emulation_suite.json", "runs under real-time SSD emulation (pm1743 "
              "x1, x2, x4), recorded and replayed: predicted vs wall time")
    p.add_argument("--reads", type=int, default=1 << 18, help="reads per run (262144)")
    p.add_argument("--n-ssd", default="1,2,4", help="drive counts (1,2,4)")
    p = suite("latency", "latency_suite.md/.json", "one thread, one miss at a time, under each "
              "variant of the copy path and poll schedule (an A/B, one process each)",
              quick="a smaller array")
    p.add_argument("--misses", type=int, default=2000, help="misses per data path and variant")
    p = sub.add_parser("latency-child", help=argparse.SUPPRESS)
    p.add_argument("--misses", type=int, default=2000)
    p.add_argument("--quick", action="store_true")
    suite("loads", "loads_suite.md/.json", "reads of GPU memory with each load flavor (gids's "
          "ld.global.cg among them) beside plain reads", quick="a smaller array")
    p = suite("launch", "launch_suite.md/.json", "host cost of one kernel launch: a gids handle "
              "(kept, and a fresh handle object), one device array; idle sync")
    p.add_argument("--launches", type=int, default=200, help="launches per case (200)")
    p = suite("rows-launch", "rows_launch_suite.md/.json", "host cost of one Runtime.gather_rows "
              "call (torch in and out, 1 and 32768 rows, resident first 0 and 1) beside "
              "torch.index_select")
    p.add_argument("--calls", type=int, default=200, help="calls per case (200)")
    suite("nvme", "nvme_suite.json", "the direct NVMe path's all-miss commands/s only",
          quick="smaller sizes")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.cmd == "hits":
        hits_suite(args.out, caps=tuple(int(c) for c in args.caps.split(",") if c),
                   quick=args.quick)
        return 0
    if args.cmd == "emulation":
        emulation_suite(args.out, args.reads, tuple(int(n) for n in args.n_ssd.split(",")))
        return 0
    if args.cmd == "latency":
        rows = latency_suite(args.out, n_misses=args.misses, quick=args.quick)
        return 0 if all(r[k]["values_ok"] for r in rows for k in ("zero_copy", "copy")) else 1
    if args.cmd == "latency-child":
        return latency_child(args.misses, args.quick)
    if args.cmd == "nvme":
        nvme_suite(args.out, quick=args.quick)
        return 0
    if args.cmd == "loads":
        rows = loads_suite(args.out, quick=args.quick)
        return 0 if all(r["correct"] for r in rows) else 1
    if args.cmd == "launch":
        rows = launch_suite(args.out, n_launches=args.launches)
        return 0 if all(r["correct"] for r in rows) else 1
    if args.cmd == "rows-launch":
        rows = rows_launch_suite(args.out, n_calls=args.calls)
        return 0 if all(r["correct"] for r in rows) else 1
    if args.cmd == "misses":
        rows = misses_suite(args.out, quick=args.quick)
        return 0 if all(r["correct"] for r in rows) else 1
    if args.cmd == "gpu-suite":
        rc = 0
        if not args.no_tests:
            rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                  "tests"])
            print(f"GPU tests: exit code {rc}", flush=True)
        gpu_suite(args.out, quick=args.quick)
        return rc


if __name__ == "__main__":
    sys.exit(main())
