"""All-miss random page reads from one file against the same bytes striped over N files.

``python -m workloads.stripe_bench [--bytes 2147483648] [--files 4] [--unit 4096]
[--page-size 4096] [--daemon-threads 1,2,4,8] [--backends host,nvme] [--pages 200000]
[--reps 3] [--dir DIR] [--json FILE]``

Writes ``--bytes`` of random int64 to a file in ``--dir`` (a temporary folder there, removed at
the end), splits it into ``--files`` stripe files beside it (``gids stripe``'s
:func:`host_daemon.stores.write_stripes`), and for each back end and daemon thread count reads
``--pages`` distinct random pages (one element each, so every read is a miss and one I/O) from a
Runtime over the one file and from one over the striped files, both ``O_DIRECT`` where the file
system allows it. Every value read is checked against numpy's view of the source file. Reported
per row: pages/s (median of ``--reps`` runs, each from an empty cache), the striped rate over the
one file's, and from ``rt.stats().files`` how evenly the reads went to the files (fewest and most
reads of one file over the mean) and each file's mean read latency.

All files are on the one file system of ``--dir``: on one drive, striping cannot add device
throughput, so the rows measure what striping costs (it should cost nothing) and that the load
spreads evenly; with one stripe file per drive the same reads would use every drive. In the CUDA
simulator sizes are tiny and the figures test the harness only.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import gids
from gids import SIMULATOR
from gids.errors import ConfigError
from gids.host import write_stripes
from workloads.bench import machine_info

LABEL = "simulator figure" if SIMULATOR else "GPU figure"


def _int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need integers >= 1, got {text!r}")
    return values


def build_parser():
    big = not SIMULATOR
    p = argparse.ArgumentParser(prog="python -m workloads.stripe_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=(2 << 30) if big else 64 << 10,
                   help="data bytes (default 2 GiB; 64 KiB in the simulator)")
    p.add_argument("--files", type=int, default=4, help="stripe files (default 4)")
    p.add_argument("--unit", type=int, default=None,
                   help="stripe unit in bytes (default: one page)")
    p.add_argument("--page-size", type=int, default=4096 if big else 512)
    p.add_argument("--daemon-threads", type=_int_list, default=[1, 2, 4, 8] if big else [1, 2])
    p.add_argument("--backends", default="host,nvme",
                   help="comma-separated: host, nvme (default both)")
    p.add_argument("--pages", type=int, default=200_000 if big else 48,
                   help="distinct random pages read per run (default 200000; 48 simulated)")
    p.add_argument("--reps", type=int, default=3 if big else 1)
    p.add_argument("--dir", default=None, help="where to write the files (default: temp dir)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--seed", type=int, default=0)
    return p


def _check(args):
    page = args.page_size
    unit = page if args.unit is None else args.unit
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in ("host", "nvme")]
    if bad or not backends:
        raise ConfigError(f"--backends takes host and/or nvme, got {args.backends!r}")
    if args.files < 1:
        raise ConfigError(f"--files must be >= 1, got {args.files}")
    if unit < page or unit % page:
        raise ConfigError(f"--unit must be a multiple of the page size {page}, got {unit}")
    n_pages = args.bytes // page
    if args.bytes % page or n_pages < 2:
        raise ConfigError(f"--bytes must be a multiple of the page size {page}, at least 2 "
                          f"pages; got {args.bytes}")
    if not 1 <= args.pages <= n_pages:
        raise ConfigError(f"--pages must be 1 .. {n_pages} (the pages of the data), "
                          f"got {args.pages}")
    if args.reps < 1:
        raise ConfigError(f"--reps must be >= 1, got {args.reps}")
    if args.dir is not None and not os.path.isdir(args.dir):
        raise ConfigError(f"--dir {args.dir!r} is not a directory")
    return unit, backends


def _write_data(path, nbytes, seed, chunk=64 << 20):
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for at in range(0, nbytes, chunk):
            f.write(rng.integers(0, 1 << 40, min(chunk, nbytes - at) // 8, dtype=np.int64)
                    .tobytes())


def _measure(source, stripe, backend, threads, page, idx, expected, reps):
    """One row: median pages/s of ``reps`` all-miss gathers, and the files' read counts and
    mean latencies of the last one."""
    cache_pages = max(64, min(1 << 14, idx.size // 4))
    times, files = [], ()
    with gids.Runtime(backend, page_size=page, cache_pages=cache_pages,
                      daemon_threads=threads) as rt:
        a = rt.open_array(source, np.int64, stripe=stripe)
        rt.gather(a, idx[:64])                    # compile and warm up, then start empty
        for _ in range(reps):
            rt.invalidate()
            rt.reset_stats()
            start = time.perf_counter()
            got = rt.gather(a, idx)
            got = got.copy_to_host()
            times.append(time.perf_counter() - start)
            wrong = int(np.count_nonzero(got != expected))
            if wrong:
                raise AssertionError(f"{wrong} of {idx.size} values differ from numpy")
            s = rt.stats()
            files = s.files
    seconds = float(np.median(times))
    reads = np.array([f.reads for f in files], dtype=np.float64)
    return {"seconds": seconds, "pages_per_s": idx.size / seconds,
            "ios": int(s.ios),
            "files": [{"path": f.path, "reads": f.reads, "read_latency_us": f.read_latency_us}
                      for f in files],
            "min_share": float(reads.min() / reads.mean()),
            "max_share": float(reads.max() / reads.mean())}


def run(args):
    unit, backends = _check(args)
    page = args.page_size
    tmp = tempfile.mkdtemp(prefix="gids-stripe-bench-", dir=args.dir)
    rows = []
    try:
        src = os.path.join(tmp, "data.bin")
        print(f"writing {args.bytes:,} bytes to {src} ...", file=sys.stderr)
        _write_data(src, args.bytes, args.seed)
        paths = [os.path.join(tmp, f"data.{i}") for i in range(args.files)]
        write_stripes(src, paths, unit)
        data = np.memmap(src, dtype=np.int64, mode="r")
        rng = np.random.default_rng(args.seed + 1)
        epp = page // 8
        pages = rng.choice(args.bytes // page, args.pages, replace=False)
        idx = pages * epp + rng.integers(0, epp, args.pages)
        expected = np.asarray(data[idx])
        del data
        layouts = [("one file", src, None), (f"striped x{args.files}", paths, unit)]
        for backend in backends:
            for threads in args.daemon_threads:
                base = None
                for name, source, stripe in layouts:
                    r = _measure(source, stripe, backend, threads, page, idx, expected,
                                 args.reps)
                    base = r["pages_per_s"] if base is None else base
                    r.update(layout=name, backend=backend, daemon_threads=threads,
                             vs_one_file=r["pages_per_s"] / base, label=LABEL)
                    rows.append(r)
                    print(_row_line(r), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"label": LABEL, "simulator": bool(SIMULATOR),
              "command": " ".join(["python -m workloads.stripe_bench"] + sys.argv[1:]),
              "machine": machine_info(),
              "config": {"bytes": args.bytes, "files": args.files, "unit": unit,
                         "page_size": page, "pages": args.pages, "reps": args.reps,
                         "daemon_threads": args.daemon_threads, "backends": backends},
              "results": rows}
    return result


def _row_line(r):
    lat = ", ".join(f"{f['read_latency_us']:.0f}" for f in r["files"])
    return (f"| {r['backend']} | {r['daemon_threads']} | {r['layout']} | "
            f"{r['pages_per_s']:,.0f} | {r['vs_one_file']:.2f} | "
            f"{r['min_share']:.2f}-{r['max_share']:.2f} | {lat} |")


def table(result):
    """The results as a markdown table."""
    c = result["config"]
    lines = [f"All-miss random {c['page_size']} B page reads, {c['pages']:,} distinct pages of "
             f"{c['bytes']:,} bytes; striped: {c['files']} files, unit {c['unit']} B "
             f"({result['label']})", "",
             "| back end | daemon threads | layout | pages/s | vs one file | reads per file "
             "/ mean | mean read latency per file (us) |",
             "|---|---|---|---|---|---|---|"]
    lines += [_row_line(r) for r in result["results"]]
    return "\n".join(lines)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except ConfigError as exc:
        parser.error(str(exc))
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
