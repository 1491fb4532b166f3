"""The ``gids`` command: ``gids demo``, ``gids info``, ``gids simulate``, ``gids stripe``, and the
workloads'
subcommands (``bench``, ``bfs``, ``cc``, ``search``), found through :data:`WORKLOAD_COMMANDS`.

The library does not import its demos: a workload subcommand's module is imported only when
that subcommand runs (or ``--help`` of it is asked for).

Every mistake in the arguments, or in a file they name, is answered as argparse does: one line,
``gids CMD: error: ...``, on stderr, and exit status 2 -- never a traceback. A command that
finds bad input after parsing raises :class:`UsageError` (:func:`run` prints it, returns 2).
"""
import argparse
import hashlib
import os
import sys
import tempfile
import time

import numpy as np

#: Subcommands defined outside the library: name -> (module, function that adds its parser to
#: an argparse subparsers object, one line of help). A string table: nothing is imported until
#: the subcommand runs.
WORKLOAD_COMMANDS = {
    "bench": ("workloads.bench", "add_bench_arguments",
              "compare the data paths (GPU memory, zero-copy, gids, CPU batch)"),
    "bfs": ("workloads.graph.cli", "add_bfs_arguments",
            "Graph500 BFS on the GPU through each data path; TEPS"),
    "cc": ("workloads.graph.cli", "add_bfs_arguments",
           "connected components on the GPU through each data path; edges/s"),
    "search": ("workloads.vector.cli", "add_search_arguments",
               "IVF vector search on the GPU through gids vs. all in GPU memory"),
    "gnn": ("workloads.gnn.cli", "add_gnn_arguments",
            "GraphSAGE training with features read through gids vs. the usual loaders"),
}


class UsageError(Exception):
    """Bad input found after parsing (a value out of range, a malformed file): :func:`main`
    prints it as argparse prints a parse error (one line, exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, answering a mistake with one line (``PROG: error: ...``, with a hint
    to ``--help``) and exit status 2, not with the whole usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ------------------------------------------------------------------ argument types

def _integer(text):
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text):
    """An argparse type: an integer >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def nonnegative_int(text):
    """An argparse type: an integer >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def fraction(text):
    """An argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {text}")
    return value


def page_size(text):
    """An argparse type: a page size the Runtime takes (a power of two, 512 B to 64 KiB), or 0
    for the command's default."""
    value = _integer(text)
    if value and (not 512 <= value <= 65536 or value & (value - 1)):
        raise argparse.ArgumentTypeError(f"must be a power of two from 512 to 65536, got {value}")
    return value


def output_file(text):
    """An argparse type: a path a command will write (its folder must exist)."""
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"no folder {folder} to write {text} in")
    return text


def existing_dir(text):
    """An argparse type: a path to an existing folder."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    return text


def add_trace_argument(parser):
    """``--trace FILE``: record every I/O of the command's Runtimes for ``gids simulate``
    (read back with :class:`TraceRecorder`)."""
    parser.add_argument("--trace", type=output_file, metavar="FILE",
                        help="record every I/O of the runs through a gids Runtime (gids, nvme), "
                             "one run after another, to FILE for `gids simulate FILE`")


class TraceRecorder:
    """``--trace FILE`` for a command that runs several Runtimes one after another.

    Each call returns the ``trace=`` path for the next Runtime (a part in a temporary folder);
    :meth:`close` joins the parts, in order, into FILE (a trace of the command's whole I/O). With
    no FILE, each call returns None and nothing is recorded. Use as a context manager.
    """

    def __init__(self, path):
        self.path = path
        self._parts = []
        self._dir = tempfile.mkdtemp(prefix="gids-trace-") if path else None

    def __call__(self):
        if self.path is None:
            return None
        part = os.path.join(self._dir, f"part{len(self._parts)}.trace")
        self._parts.append(part)
        return part

    def close(self):
        """Write FILE from the parts recorded so far (once); returns the records written."""
        if self._dir is None:
            return 0
        import shutil

        from host_daemon.trace import TraceWriter, read_trace
        count = 0
        try:
            with TraceWriter(self.path) as writer:
                for part in self._parts:
                    if os.path.exists(part):
                        records = read_trace(part, strict=False)
                        writer.append(records)
                        count += len(records)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        from gids.console import say
        say(f"wrote {count:,} I/O records of {len(self._parts)} run(s) to {self.path} "
            f"(gids simulate {self.path})")
        return count

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------ demo, info, simulate

def _write_random_file(path, nbytes, seed, chunk=64 << 20):
    from gids.console import Progress
    rng = np.random.default_rng(seed)
    progress = Progress("writing")
    with open(path, "wb") as f:
        written = 0
        while written < nbytes:
            n = min(chunk, nbytes - written)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            written += n
            progress(written, nbytes)


def cmd_demo(args):
    import gids
    if args.size and args.size < (args.page_size or 512):
        raise UsageError(f"--size {args.size} is less than one page "
                         f"({args.page_size or 512} bytes)")
    world = "the CUDA simulator (no GPU found: kernels run as Python threads)" if gids.SIMULATOR \
        else "the GPU"
    print(f"gids demo: running on {world}")
    size = args.size if args.size else ((256 << 10) if gids.SIMULATOR else (1 << 30))
    reads = args.reads if args.reads else (256 if gids.SIMULATOR else 1 << 22)
    page = args.page_size if args.page_size else (512 if gids.SIMULATOR else 4096)
    dtype = np.dtype(np.float64)
    if size < page:
        raise UsageError(f"--size {size} is less than one page ({page} bytes)")
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
    if engine == "io_uring":
        print(f"io_uring registered buffers: "
              f"{'on' if defaults.get('engine_fixed_buffers') else 'off'} (engine_fixed_buffers; "
              "a Runtime's stats say whether the kernel took them)")
    # The settings read from the environment at import, for measuring (a figure's conditions).
    from host_daemon.daemon import HOT_QUEUE_EVERY
    from kernels import platform as P
    print(f"kernels: GIDS_MAX_REGISTERS={P.MAX_REGISTERS or 0} "
          f"GIDS_POLL_NS={P.POLL_FIRST_NS},{P.POLL_MIN_NS},{P.POLL_MAX_NS} "
          f"GIDS_BULK_COPY_LANES={P.BULK_COPY_LANES}")
    print(f"daemon: GIDS_HOT_QUEUE_EVERY={HOT_QUEUE_EVERY}")
    return 0


def cmd_simulate(args):
    from host_daemon.trace import run_simulate
    try:
        report = run_simulate(args)
    except (OSError, ValueError) as exc:   # TraceFormatError is a ValueError
        raise UsageError(str(exc)) from None
    print(report)
    return 0


def _sha256_chunks(chunks):
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def cmd_stripe(args):
    """Split SRC into N stripe files DST_PREFIX.0 .. DST_PREFIX.{N-1}, then read them back as a
    striped store and compare a checksum of that with one of SRC."""
    from gids.console import Progress
    from gids.runtime import MIN_PAGE_SIZE
    from host_daemon.stores import StripedStore, write_stripes
    src = args.src
    if not os.path.isfile(src):
        raise UsageError(f"no such file: {src!r}")
    total = os.path.getsize(src)
    if total == 0:
        raise UsageError(f"{src!r} is empty")
    unit = args.unit
    if unit is None:
        from gids import defaults
        unit = defaults.get("page_size")
    if unit < MIN_PAGE_SIZE or unit % MIN_PAGE_SIZE:
        raise UsageError(f"--unit must be a positive multiple of {MIN_PAGE_SIZE} bytes (the "
                             f"smallest page size; arrays need a page size dividing it), got "
                             f"{unit}")
    paths = [f"{args.dst_prefix}.{i}" for i in range(args.n)]
    folder = os.path.dirname(os.path.abspath(paths[0]))
    if not os.path.isdir(folder):
        raise UsageError(f"no such directory: {folder!r}")
    src_stat = os.stat(src)
    for path in paths:
        if os.path.exists(path):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == (src_stat.st_dev, src_stat.st_ino):
                raise UsageError(f"{path!r} is the source file itself")
            if not args.force:
                raise UsageError(f"{path!r} exists (--force overwrites it)")
    try:
        write_stripes(src, paths, unit, progress=Progress("striping"))
        chunk = max(1, (64 << 20) // unit) * unit
        with open(src, "rb") as f:
            want = _sha256_chunks(iter(lambda: f.read(chunk), b""))
        checking = Progress("checking")
        with StripedStore(paths, unit) as store:
            def read_back():
                for at in range(0, total, chunk):
                    yield store.read_bytes(at, min(chunk, total - at))
                    checking(min(at + chunk, total), total)
            got = _sha256_chunks(read_back())
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        raise UsageError(f"{exc.strerror or exc}{where}")
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


# ------------------------------------------------------------------ the parser

def _add_builtin_commands(sub):
    p = sub.add_parser("demo", help="write a file, read random elements from a kernel through a "
                                    "cache smaller than the file, check every value")
    p.add_argument("--size", type=positive_int, default=0,
                   help="file bytes, at least one page (default: 1 GiB on a GPU, 256 KiB in "
                        "the simulator)")
    p.add_argument("--reads", type=positive_int, default=0,
                   help="random reads (default 4 M / 256)")
    p.add_argument("--page-size", type=page_size, default=0,
                   help="a power of two from 512 to 65536 (default 4096; 512 in the simulator)")
    p.add_argument("--cache-fraction", type=fraction, default=0.125,
                   help="cache size as a fraction of the file, in (0, 1] (default 1/8)")
    p.add_argument("--storage", choices=["file", "mmap", "memory"], default="file")
    p.add_argument("--dir", type=existing_dir, default=None,
                   help="where to write the file (default: temp dir)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
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
    p.add_argument("--n", type=positive_int, required=True, help="number of stripe files")
    p.add_argument("--unit", type=positive_int, default=None,
                   help="bytes per stripe unit, a multiple of the page size the arrays will "
                        "use (default: the default page size)")
    p.add_argument("--force", action="store_true", help="overwrite existing stripe files")
    p.set_defaults(func=cmd_stripe)


def build_parser(command="*"):
    """The ``gids`` command's parser (parsing runs nothing).

    ``command`` names the subcommand about to run: its workload module, if it has one, is
    imported to add its arguments. ``"*"`` (the default) imports every workload command's
    module; ``None`` none (their names and help still show in ``gids --help``).
    """
    parser = ArgumentParser(prog="gids", description="GPU-initiated storage for Python")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _add_builtin_commands(sub)
    import importlib
    for name, (module, adder, _help) in WORKLOAD_COMMANDS.items():
        if name in sub.choices or command not in ("*", name):
            continue
        getattr(importlib.import_module(module), adder)(sub)
    for name, (_module, _adder, help_text) in WORKLOAD_COMMANDS.items():
        if name not in sub.choices:   # listed in --help; its module is loaded when it runs
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _command_of(argv):
    """The subcommand named in ``argv`` (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def run(parser, argv=None):
    """Parse ``argv`` with ``parser`` and run the chosen command (``args.func(args)``); returns
    its exit status. A mistake in the arguments exits with status 2 (argparse); a
    :class:`UsageError` the command raises is printed as one line and returns 2."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        name = getattr(args, "cmd", None)
        sys.stderr.write(f"{parser.prog}{f' {name}' if name else ''}: error: {exc}\n")
        return 2


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if _command_of(argv) == "demo":
        sys.setswitchinterval(1e-4)   # the simulator's host<->kernel handshakes go faster
    return run(build_parser(_command_of(argv)), argv)


if __name__ == "__main__":
    sys.exit(main())
