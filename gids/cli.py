"""The ``gids`` command: ``gids demo``, ``gids info``, ``gids simulate``, ``gids stripe``."""
import argparse
import hashlib
import os
import sys
import tempfile
import time

import numpy as np


def _progress(label, done, total, width=30):
    """A one-line progress bar on stderr (plain text; no dependency)."""
    frac = done / total if total else 1.0
    bar = "#" * int(width * frac)
    sys.stderr.write(f"\r{label} [{bar:<{width}}] {frac:6.1%}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _write_random_file(path, nbytes, seed, chunk=64 << 20):
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        written = 0
        while written < nbytes:
            n = min(chunk, nbytes - written)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            written += n
            _progress("writing", written, nbytes)


def cmd_demo(args):
    import gids
    world = "the CUDA simulator (no GPU found: kernels run as Python threads)" if gids.SIMULATOR \
        else "the GPU"
    print(f"gids demo: running on {world}")
    size = args.size if args.size else ((256 << 10) if gids.SIMULATOR else (1 << 30))
    reads = args.reads if args.reads else (256 if gids.SIMULATOR else 1 << 22)
    page = args.page_size if args.page_size else (512 if gids.SIMULATOR else 4096)
    dtype = np.dtype(np.float64)
    size -= size % page
    from kernels.platform import WARP_SIZE
    cache_pages = max(WARP_SIZE, int(size // page * args.cache_fraction))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "demo.bin")
        _write_random_file(path, size, seed=args.seed)
        ref = np.memmap(path, dtype=dtype, mode="r")
        idx = np.random.default_rng(args.seed + 1).integers(0, ref.size, reads)
        print(f"file {size:,} bytes ({ref.size:,} float64), page {page} B, cache {cache_pages} "
              f"pages ({cache_pages * page:,} bytes = {cache_pages * page / size:.1%} of the file), "
              f"{reads:,} random reads")
        with gids.Runtime(cache_pages=cache_pages, page_size=page) as rt:
            arr = rt.open_array(path, dtype, storage=args.storage)
            start = time.perf_counter()
            got = rt.gather(arr, idx).copy_to_host()
            secs = time.perf_counter() - start
            stats = rt.stats()
        wrong = int(np.count_nonzero(got.view(np.uint64) != np.asarray(ref[idx]).view(np.uint64)))
        del ref
    print(f"stats: {stats}")
    print(f"time: {secs:.3f} s ({reads / secs:,.0f} reads/s"
          f"{', simulator: not a GPU figure' if gids.SIMULATOR else ''})")
    if wrong:
        print(f"FAILED: {wrong} of {reads} values differ from numpy")
        return 1
    print(f"OK: all {reads:,} values equal numpy's")
    return 0


def cmd_info(args):
    import gids
    from gids import defaults
    print(f"gids {gids.__version__}")
    print(f"world: {'CUDA simulator' if gids.SIMULATOR else 'GPU'}")
    if not gids.SIMULATOR:
        from numba import cuda
        dev = cuda.get_current_device()
        print(f"device: {dev.name}, compute capability {dev.compute_capability}")
    for k, v in defaults.all_settings().items():
        print(f"default {k}: {v}")
    from host_daemon.daemon import resolve_engine
    engine, note = resolve_engine(defaults.get("engine"))
    print(f"storage engine: {engine}" + (f" ({note})" if note else ""))
    # The settings read from the environment at import, for measuring (a figure's conditions).
    from kernels import platform as P
    from host_daemon.daemon import HOT_QUEUE_EVERY
    print(f"kernels: GIDS_MAX_REGISTERS={P.MAX_REGISTERS or 0} "
          f"GIDS_POLL_NS={P.POLL_FIRST_NS},{P.POLL_MIN_NS},{P.POLL_MAX_NS} "
          f"GIDS_BULK_COPY_LANES={P.BULK_COPY_LANES}")
    print(f"daemon: GIDS_HOT_QUEUE_EVERY={HOT_QUEUE_EVERY}")
    return 0


def cmd_simulate(args):
    from host_daemon.trace import run_simulate
    print(run_simulate(args))
    return 0


def _stripe_error(message):
    """A ``gids stripe`` usage error: one line on stderr, exit status 2 (argparse's)."""
    sys.stderr.write(f"gids stripe: error: {message}\n")
    return 2


def _sha256_chunks(chunks):
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def cmd_stripe(args):
    """Split SRC into N stripe files DST_PREFIX.0 .. DST_PREFIX.{N-1}, then read them back as a
    striped store and compare a checksum of that with one of SRC."""
    from gids.runtime import MIN_PAGE_SIZE
    from host_daemon.stores import StripedStore, write_stripes
    src = args.src
    if not os.path.isfile(src):
        return _stripe_error(f"no such file: {src!r}")
    total = os.path.getsize(src)
    if total == 0:
        return _stripe_error(f"{src!r} is empty")
    if args.n < 1:
        return _stripe_error(f"--n must be >= 1, got {args.n}")
    unit = args.unit
    if unit is None:
        from gids import defaults
        unit = defaults.get("page_size")
    if unit < MIN_PAGE_SIZE or unit % MIN_PAGE_SIZE:
        return _stripe_error(f"--unit must be a positive multiple of {MIN_PAGE_SIZE} bytes (the "
                             f"smallest page size; arrays need a page size dividing it), got "
                             f"{unit}")
    paths = [f"{args.dst_prefix}.{i}" for i in range(args.n)]
    folder = os.path.dirname(os.path.abspath(paths[0]))
    if not os.path.isdir(folder):
        return _stripe_error(f"no such directory: {folder!r}")
    src_stat = os.stat(src)
    for path in paths:
        if os.path.exists(path):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == (src_stat.st_dev, src_stat.st_ino):
                return _stripe_error(f"{path!r} is the source file itself")
            if not args.force:
                return _stripe_error(f"{path!r} exists (--force overwrites it)")
    try:
        write_stripes(src, paths, unit, progress=lambda d, t: _progress("striping", d, t))
        chunk = max(1, (64 << 20) // unit) * unit
        with open(src, "rb") as f:
            want = _sha256_chunks(iter(lambda: f.read(chunk), b""))
        with StripedStore(paths, unit) as store:
            def read_back():
                for at in range(0, total, chunk):
                    yield store.read_bytes(at, min(chunk, total - at))
                    _progress("checking", min(at + chunk, total), total)
            got = _sha256_chunks(read_back())
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return _stripe_error(f"{exc.strerror or exc}{where}")
    if got != want:
        print(f"FAILED: the striped files read back differ from {src} (sha256 {got} != {want})",
              file=sys.stderr)
        return 1
    for path in paths:
        print(f"{path}  {os.path.getsize(path):,} bytes")
    print(f"OK: {total:,} bytes in {args.n} files, stripe unit {unit} B; read back as one store "
          f"they equal {src} (sha256 {want})")
    print(f"open with: rt.open_array({paths!r}, dtype, stripe={unit})")
    return 0


def build_parser():
    """The ``gids`` command's parser (every subcommand; parsing runs nothing)."""
    parser = argparse.ArgumentParser(prog="gids", description="GPU-initiated storage for Python")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("demo", help="write a file, read random elements from a kernel through a "
                                    "cache smaller than the file, check every value")
    p.add_argument("--size", type=int, default=0, help="file bytes (default: 1 GiB on a GPU, "
                                                       "256 KiB in the simulator)")
    p.add_argument("--reads", type=int, default=0, help="random reads (default 4 M / 256)")
    p.add_argument("--page-size", type=int, default=0)
    p.add_argument("--cache-fraction", type=float, default=0.125,
                   help="cache size as a fraction of the file (default 1/8)")
    p.add_argument("--storage", choices=["file", "mmap", "memory"], default="file")
    p.add_argument("--dir", default=None, help="where to write the file (default: temp dir)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("info", help="the world (GPU or simulator) and the defaults")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("simulate", help="replay an I/O trace through an SSD model")
    from host_daemon.trace import add_simulate_arguments
    add_simulate_arguments(p)
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("stripe", help="split a file into N stripe files (one per drive, RAID 0 "
                                      "layout) for rt.open_array([...], stripe=UNIT)")
    p.add_argument("src", help="the file to split")
    p.add_argument("dst_prefix", help="the stripe files are DST_PREFIX.0 .. DST_PREFIX.{N-1}")
    p.add_argument("--n", type=int, required=True, help="number of stripe files")
    p.add_argument("--unit", type=int, default=None,
                   help="bytes per stripe unit, a multiple of the page size the arrays will "
                        "use (default: the default page size)")
    p.add_argument("--force", action="store_true", help="overwrite existing stripe files")
    p.set_defaults(func=cmd_stripe)
    from workloads.bench import add_bench_arguments
    add_bench_arguments(sub)
    from workloads.graph.cli import add_bfs_arguments
    add_bfs_arguments(sub)
    from workloads.vector.cli import add_search_arguments
    add_search_arguments(sub)
    from workloads.gnn.cli import add_gnn_arguments
    add_gnn_arguments(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.cmd == "demo":
        sys.setswitchinterval(1e-4)   # the simulator's host<->kernel handshakes go faster
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
