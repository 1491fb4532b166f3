"""Microbenchmarks of the runtime core, and the GPU suite that puts them in one table.

``python -m workloads.microbench gpu-suite [--out DIR]`` (on a machine with a GPU) runs the GPU
tests, measures the ceilings (pinned host-to-device copy, device-to-device copy) and the core's
figures in the same process, and prints a Markdown table (also written to DIR/gpu_suite.md and
DIR/gpu_suite.json):

- all-miss random 4 KiB page reads served end to end from a RAM-backed store, by daemon threads;
- all-hit random 8-byte reads through ``gids.read`` against a plain gather from a device array;
- coalesced sequential reads, the same two ways;
- one thread, one miss at a time: latency percentiles.
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

import gids
from numba import cuda
from kernels.sync import now_ns


# ------------------------------------------------------------------ kernels


@gids.jit
def first_element_of_pages(h, pages, elems_per_page, out):
    """Thread k reads element 0 of page pages[k]: with distinct pages, every read misses."""
    k = cuda.grid(1)
    if k < pages.size:
        out[k] = gids.read(h, pages[k] * elems_per_page)


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


def _random_reads(read):
    """A kernel doing ``reads`` random reads per thread with ``read(src, i)``: the same stream
    of indices whichever reader, so gids and a plain device array are compared like for like."""
    @gids.jit
    def kernel(src, mask, reads, seed, out):
        t = cuda.grid(1)
        x = np.uint64(t * 2654435761 + seed + 1)
        acc = 0
        for _ in range(reads):
            x = _next_random(x)
            acc += read(src, np.int64(x & mask))
        out[t] = acc
    return kernel


def _sequential_reads(read):
    """A kernel reading elements 0..n-1 grid-stride (coalesced) with ``read(src, i)``."""
    @gids.jit
    def kernel(src, n, out):
        t = cuda.grid(1)
        stride = cuda.gridsize(1)
        acc = 0
        for i in range(t, n, stride):
            acc += read(src, i)
        out[t] = acc
    return kernel


random_reads_gids = _random_reads(gids.read)
random_reads_plain = _random_reads(_plain_read)
sequential_reads_gids = _sequential_reads(gids.read)
sequential_reads_plain = _sequential_reads(_plain_read)


@gids.jit
def one_miss_at_a_time(h, pages, elems_per_page, times, out):
    acc = 0
    for k in range(pages.size):
        t0 = now_ns()
        acc += gids.read(h, pages[k] * elems_per_page)
        times[k] = now_ns() - t0
    out[0] = acc


# ------------------------------------------------------------------ timing helpers

def _time_kernel(launch, repeat=3):
    """Median seconds of ``launch()`` over ``repeat`` runs, timed with CUDA events."""
    times = []
    for _ in range(repeat):
        start, stop = cuda.event(), cuda.event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


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

def bench_all_miss(data, page_size, thread_counts, zero_copy, cache_bytes, log):
    """Random distinct pages, each read once: every lookup misses. Pages/s by daemon threads."""
    epp = page_size // data.dtype.itemsize
    n_pages = data.nbytes // page_size
    rng = np.random.default_rng(1)
    rows = []
    store = gids.MemoryStore(data, zero_copy=zero_copy)
    with gids.Runtime(cache_bytes=cache_bytes, page_size=page_size,
                      daemon_threads=max(thread_counts)) as rt:
        arr = rt.open_array(store, data.dtype, shape=data.shape)
        for threads in thread_counts:
            rt.set_daemon_threads(threads)
            pages = rng.permutation(n_pages).astype(np.int64)
            d_pages = cuda.to_device(pages)
            out = cuda.device_array(n_pages, dtype=data.dtype)
            blocks = math.ceil(n_pages / 256)
            best = None
            for rep in range(2):
                rt.invalidate()
                rt.reset_stats()
                start = time.perf_counter()
                first_element_of_pages[blocks, 256](arr.handle, d_pages, epp, out)
                rt.sync()
                secs = time.perf_counter() - start
                stats = rt.stats()
                best = secs if best is None else min(best, secs)
            ok = bool(np.array_equal(out.copy_to_host(), data.reshape(-1)[pages * epp]))
            row = {"daemon_threads": threads, "zero_copy": zero_copy, "pages": n_pages,
                   "seconds": best, "Mpages_per_s": n_pages / best / 1e6,
                   "GBps": n_pages * page_size / best / 1e9, "ios": stats.ios,
                   "misses": stats.misses, "correct": ok}
            log(f"all-miss zero_copy={zero_copy} threads={threads}: "
                f"{row['Mpages_per_s']:.2f} M pages/s ({row['GBps']:.1f} GB/s), ios {stats.ios}, ok={ok}")
            rows.append(row)
    return rows


def bench_hits(n_elems, cache_bytes, reads_per_thread, log):
    """All-hit random and sequential 8-byte reads: gids.read vs plain device-array reads."""
    rng = np.random.default_rng(2)
    data = rng.integers(0, 1 << 40, n_elems, dtype=np.int64)
    d_data = cuda.to_device(data)
    mask = n_elems - 1
    threads, blocks = 256, 132 * 16
    n_threads = threads * blocks
    out_g = cuda.device_array(n_threads, dtype=np.int64)
    out_p = cuda.device_array(n_threads, dtype=np.int64)
    res = {}
    with gids.Runtime(cache_bytes=cache_bytes, page_size=4096) as rt:
        arr = rt.open_array(data)
        # warm: load every page once
        sequential_reads_gids[blocks, threads](arr.handle, n_elems, out_g)
        rt.sync()
        rt.reset_stats()
        h = arr.handle
        t_g = _time_kernel(lambda: random_reads_gids[blocks, threads](h, mask, reads_per_thread, 7, out_g))
        t_p = _time_kernel(lambda: random_reads_plain[blocks, threads](d_data, mask, reads_per_thread, 7, out_p))
        rt.sync()
        st = rt.stats()
        same = bool(np.array_equal(out_g.copy_to_host(), out_p.copy_to_host()))
        n_reads = n_threads * reads_per_thread
        res["random"] = {"gids_Greads_per_s": n_reads / t_g / 1e9, "plain_Greads_per_s": n_reads / t_p / 1e9,
                         "ratio": t_p / t_g, "misses_during_timing": st.misses, "same_result": same}
        log(f"all-hit random 8 B: gids {res['random']['gids_Greads_per_s']:.2f} G/s, plain "
            f"{res['random']['plain_Greads_per_s']:.2f} G/s, ratio {res['random']['ratio']:.2f}, same={same}")
        t_g = _time_kernel(lambda: sequential_reads_gids[blocks, threads](h, n_elems, out_g))
        t_p = _time_kernel(lambda: sequential_reads_plain[blocks, threads](d_data, n_elems, out_p))
        rt.sync()
        same = bool(np.array_equal(out_g.copy_to_host(), out_p.copy_to_host()))
        res["sequential"] = {"gids_GBps": n_elems * 8 / t_g / 1e9, "plain_GBps": n_elems * 8 / t_p / 1e9,
                             "ratio": t_p / t_g, "same_result": same}
        log(f"all-hit sequential: gids {res['sequential']['gids_GBps']:.0f} GB/s, plain "
            f"{res['sequential']['plain_GBps']:.0f} GB/s, ratio {res['sequential']['ratio']:.2f}, same={same}")
    return res


def bench_latency(data, page_size, n_misses, log):
    epp = page_size // data.dtype.itemsize
    n_pages = data.nbytes // page_size
    pages = np.random.default_rng(3).choice(n_pages, n_misses, replace=False).astype(np.int64)
    res = {}
    for zero_copy in (True, False):
        with gids.Runtime(cache_bytes=64 << 20, page_size=page_size, daemon_threads=1) as rt:
            arr = rt.open_array(gids.MemoryStore(data, zero_copy=zero_copy), data.dtype, shape=data.shape)
            times = cuda.device_array(n_misses, dtype=np.int64)
            out = cuda.device_array(1, dtype=data.dtype)
            d_pages = cuda.to_device(pages)
            one_miss_at_a_time[1, 1](arr.handle, d_pages[:32], epp, times, out)   # compile, warm
            rt.sync()
            rt.invalidate()
            start = time.perf_counter()
            one_miss_at_a_time[1, 1](arr.handle, d_pages, epp, times, out)
            rt.sync()
            wall = time.perf_counter() - start
            t = times.copy_to_host() / 1e3
            key = "zero_copy" if zero_copy else "copy"
            res[key] = {"p50_us": float(np.percentile(t, 50)), "p90_us": float(np.percentile(t, 90)),
                        "p99_us": float(np.percentile(t, 99)), "mean_wall_us": wall / n_misses * 1e6,
                        "ios": rt.stats().ios}
            log(f"QD1 miss latency ({key}): p50 {res[key]['p50_us']:.1f} us, p99 {res[key]['p99_us']:.1f} us, "
                f"wall mean {res[key]['mean_wall_us']:.1f} us")
    return res


def bench_emulation(data, page_size, profile, drive_counts, n_reads, out_dir, log):
    """Record runs under real-time emulation of 1, 2, 4 drives; replay each trace through the
    same model and compare the predicted time with the measured wall time (issue 3)."""
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
            start = time.perf_counter()
            first_element_of_pages[math.ceil(n_reads / 256), 256](arr.handle, d_pages, epp, out)
            rt.sync()
            wall = time.perf_counter() - start
        trace = gids.read_trace(path)
        trace = trace[-n_reads:]                          # the timed kernel's requests
        report = gids.replay(trace, profile, n_ssd=n_ssd)
        row = {"profile": profile, "n_ssd": n_ssd, "requests": len(trace), "wall_s": wall,
               "predicted_s": report.time_s, "ratio": report.time_s / wall,
               "measured_Miops": len(trace) / wall / 1e6}
        log(f"emulated {profile} x{n_ssd}: wall {wall:.3f} s, replay predicts {report.time_s:.3f} s "
            f"(ratio {row['ratio']:.2f}), {row['measured_Miops']:.2f} M IOPS")
        rows.append(row)
        os.remove(path)
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
    dev = cuda.get_current_device()
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": dev.name.decode() if isinstance(dev.name, bytes) else dev.name,
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
    results["hits"] = bench_hits(1 << 26, 1 << 30, 16, log)
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


def format_table(r):
    c = r["ceilings"]
    best_zc = max(r["all_miss_zero_copy"], key=lambda x: x["Mpages_per_s"])
    best_cp = max(r["all_miss_copy"], key=lambda x: x["Mpages_per_s"])
    pcie_pages = c["h2d_pinned_GBps"] * 1e9 / 4096 / 1e6
    lines = [
        f"Measured {r['meta']['date']} on {r['meta']['gpu']} ({r['meta']['cpu_cores']} CPU cores) "
        f"with `{r['meta']['command']}`.",
        "",
        "| figure | measured | reference in the same run | ratio | target |",
        "|---|---|---|---|---|",
        f"| all-miss random 4 KiB pages, RAM store, zero-copy serve | {best_zc['Mpages_per_s']:.2f} M pages/s "
        f"({best_zc['daemon_threads']} daemon threads) | pinned H2D copy {c['h2d_pinned_GBps']:.1f} GB/s = "
        f"{pcie_pages:.1f} M pages/s | {best_zc['Mpages_per_s'] / pcie_pages:.2f} | >= 8 M pages/s |",
        f"| all-miss random 4 KiB pages, RAM store, daemon copies to staging | {best_cp['Mpages_per_s']:.2f} M pages/s "
        f"({best_cp['daemon_threads']} daemon threads) | same | {best_cp['Mpages_per_s'] / pcie_pages:.2f} | (info) |",
        f"| all-hit random 8-byte reads | {r['hits']['random']['gids_Greads_per_s']:.2f} G reads/s | plain gather "
        f"{r['hits']['random']['plain_Greads_per_s']:.2f} G reads/s | {r['hits']['random']['ratio']:.2f} | >= 0.30 |",
        f"| all-hit coalesced sequential reads | {r['hits']['sequential']['gids_GBps']:.0f} GB/s | plain "
        f"{r['hits']['sequential']['plain_GBps']:.0f} GB/s (D2D copy {c['d2d_GBps_read_plus_write']:.0f} GB/s) | "
        f"{r['hits']['sequential']['ratio']:.2f} | >= 0.60 |",
        f"| one thread, one miss at a time (zero-copy) | p50 {r['latency']['zero_copy']['p50_us']:.1f} us, "
        f"p99 {r['latency']['zero_copy']['p99_us']:.1f} us | | | p50 <= 10 us |",
        f"| one thread, one miss at a time (copy) | p50 {r['latency']['copy']['p50_us']:.1f} us, "
        f"p99 {r['latency']['copy']['p99_us']:.1f} us | | | (info) |",
        "",
        "Real-time emulation, recorded then replayed (predicted / measured wall time): " + ", ".join(
            f"{e['profile']} x{e['n_ssd']}: {e['predicted_s']:.3f} / {e['wall_s']:.3f} s "
            f"({e['ratio']:.2f})" for e in r.get("emulation", [])),
        "",
        "All-miss by daemon threads (M pages/s): " + ", ".join(
            f"{x['daemon_threads']}: {x['Mpages_per_s']:.2f} zc / {y['Mpages_per_s']:.2f} copy"
            for x, y in zip(r["all_miss_zero_copy"], r["all_miss_copy"])),
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.microbench")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gpu-suite", help="GPU tests + core benchmarks + ceilings, one table")
    p.add_argument("--out", default="out", help="folder for gpu_suite.md/.json (default: out)")
    p.add_argument("--quick", action="store_true", help="smaller sizes")
    p.add_argument("--no-tests", action="store_true", help="skip the GPU pytest run")
    args = parser.parse_args(argv)
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
