"""The host's cost of ``Runtime.prefetch`` and ``Runtime.hold`` + ``release`` calls.

``[NUMBA_ENABLE_CUDASIM=1] python -m workloads.window_host [--calls N] [--batch-pages P,...]
[--profile]``. In the CUDA simulator (on a machine with no GPU) every launch of the window
kernels is a no-op (the kernels of :mod:`gids.kernels_host` are stubbed, as
:mod:`workloads.rows_host` stubs ``gather_rows``' launch) and so is the simulator's copy to its
"device" (a GPU queues it; the simulator copies and checks in Python), so what is timed is
``gids/window.py``'s own Python work per call: checks, finding a hold's distinct pages and
counting them, staging, the stream and bookkeeping. On a GPU nothing is stubbed: the whole
host cost of a call, numba-cuda's launches and the driver's calls included (the kernels hit:
the same four batches in turn; the GPU is synchronized between timed blocks, untimed), and
``--profile`` shows where it goes.

Each batch is ``P`` element indices (int64, sorted, one on each of ``P`` distinct pages of 4
KiB, as ``gids bench prefetch`` makes them), four batches in turn. Prints microseconds per
call: the calling thread's CPU time (``time.thread_time``: what a machine shared with other
processes disturbs least) and the wall clock, each the median of blocks of calls; and, with
``--profile``, cProfile's top entries for each case of the last batch size.
"""
import argparse
import cProfile
import pstats
import sys
import time

import numpy as np

import gids

#: The kernels a window call launches (names in gids.kernels_host).
KERNELS = ("hold_kernel", "release_kernel", "prefetch_kernel")

PAGE = 4096
#: Calls per timed block.
BLOCK = 100


def cases(batch_pages, seed=3):
    """``(runtime, [(name, call)])``: a prefetch, and a hold released at once, of ``batch_pages``
    pages through an open Runtime (its cache twice that), which the caller closes."""
    rng = np.random.default_rng(seed)
    elems = PAGE // 8
    n_pages = 8 * batch_pages
    rt = gids.Runtime(cache_pages=2 * batch_pages, page_size=PAGE)
    a = rt.open_array(gids.MemoryStore(np.zeros(n_pages * elems, dtype=np.int64)), np.int64)
    batches = [np.sort(rng.permutation(n_pages)[:batch_pages] * elems
                       + rng.integers(0, elems, batch_pages)) for _ in range(4)]
    stream = gids.side_stream()
    turn = iter(range(1 << 62))

    def prefetch():
        rt.prefetch(a, batches[next(turn) % 4], stream=stream)

    def hold_release():
        rt.hold(a, batches[next(turn) % 4], stream=stream).release()
    return rt, [(f"prefetch, {batch_pages} pages", prefetch),
                (f"hold + release, {batch_pages} pages", hold_release)]


class _NoKernel:
    """Stands for a kernel: its launch, ``kernel[grid, block, stream](*args)``, does nothing."""

    def __getitem__(self, config):
        return lambda *args: None


def _no_copy(self, ary, stream=0):
    """Stands for the simulator's ``copy_to_device``: copies nothing."""


def _stub_kernels():
    """Make the window kernels and the simulator's copies to the device no-ops; returns a
    function that puts them back."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from gids import kernels_host
    saved = {name: getattr(kernels_host, name) for name in KERNELS}
    saved_copy = FakeCUDAArray.copy_to_device
    for name in KERNELS:
        setattr(kernels_host, name, _NoKernel())
    FakeCUDAArray.copy_to_device = _no_copy

    def restore():
        for name, kernel in saved.items():
            setattr(kernels_host, name, kernel)
        FakeCUDAArray.copy_to_device = saved_copy
    return restore


def _us_per_call(call, n_calls, block, between):
    """``(thread CPU, wall)`` microseconds per call, each the median over blocks of
    ``block`` calls; ``between()`` runs, untimed, after each block."""
    call()
    between()
    cpu, wall = [], []
    for _ in range(max(1, n_calls // block)):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(block):
            call()
        cpu.append((time.thread_time_ns() - c0) / block / 1e3)
        wall.append((time.perf_counter_ns() - w0) / block / 1e3)
        between()
    return float(np.median(cpu)), float(np.median(wall))


def _batch_sizes(text):
    sizes = [int(v) for v in text.split(",")]
    if any(v < 1 for v in sizes):
        raise argparse.ArgumentTypeError("batch sizes must be >= 1")
    return sizes


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.window_host")
    parser.add_argument("--calls", type=int, default=1000, help="calls per case (1000)")
    parser.add_argument("--batch-pages", type=_batch_sizes, default=[8192, 32768],
                        help="pages per call, a comma-separated list (8192,32768)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile each case of the last batch size")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    # On a GPU nothing is stubbed: the whole call, launches included.
    restore = _stub_kernels() if gids.SIMULATOR else (lambda: None)
    try:
        for batch_pages in args.batch_pages:
            rt, timed = cases(batch_pages)
            try:
                block = min(BLOCK, args.calls)
                for name, call in timed:
                    cpu, wall = _us_per_call(call, args.calls, block, rt.sync)
                    print(f"{name}: {cpu:.1f} us per call of the thread's CPU time, {wall:.1f} "
                          f"us wall (medians of blocks of {block} calls)", flush=True)
                if args.profile and batch_pages == args.batch_pages[-1]:
                    for name, call in timed:
                        _profile(name, call, args.calls, block, rt.sync)
            finally:
                rt.close()
    finally:
        restore()
    return 0


def _profile(name, call, n_calls, block, between):
    """Print cProfile's top entries for ``n_calls`` calls (``between()`` after each block,
    not profiled)."""
    prof = cProfile.Profile()
    for k in range(n_calls):
        prof.enable()
        call()
        prof.disable()
        if (k + 1) % block == 0:
            between()
    print(f"\ncProfile, {name}, {n_calls} calls:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
