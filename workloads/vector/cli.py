"""``gids search``: IVF search on the GPU through gids, against the in-memory baseline.

Builds an index (synthetic clustered data, or a vector file) or opens one, draws queries, and
for every ``nprobe`` and data path reports recall@10 against the exact search, queries per
second, pages read per query and the cache hit rate; with faiss installed, also faiss-cpu's
IVF-Flat on the same centroids. Progress goes to stderr, the table to stdout, everything to
``--json OUT`` if asked.

With ``--ssd PROFILE [--n-ssd 1,4]`` the data paths that read through a gids Runtime (``gids``,
``nvme``) run once more per drive count under real-time emulation of that SSD array
(:mod:`workloads.ssd_options`); the SSDs column and each JSON row's ``emulation`` say which.

Registered as a subcommand of ``gids`` with :func:`add_search_arguments`; also runs alone as
``python -m workloads.vector.cli search ...``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gids.cli import (
    ArgumentParser,
    TraceRecorder,
    UsageError,
    add_trace_argument,
    nonnegative_int,
    output_file,
    page_size,
    positive_int,
    run,
)
from gids.console import Progress, table
from workloads.ssd_options import (
    EMULATION_NOTE,
    add_ssd_arguments,
    emulation_cell,
    emulation_record,
    emulations,
    engine_cell,
    engine_record,
    positive_ints,
)

__all__ = ["add_search_arguments", "cmd_search", "main", "sample_queries"]

# Defaults per world: the simulator runs one Python thread per CUDA thread, so its data is tiny.
_DEFAULTS = {
    "simulator": dict(n=2000, dim=16, lists=16, queries=8, page_size=512),
    "gpu": dict(n=200_000, dim=96, lists=256, queries=10_000, page_size=4096),
}


def _nprobe_list(text: str) -> list[int]:
    return positive_ints(text, "nprobe values")


def _name_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected at least one data path")
    return names


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_search_arguments(subparsers) -> argparse.ArgumentParser:
    """Add the ``search`` subcommand to an ``argparse`` subparsers object.

    Parameters
    ----------
    subparsers
        What ``ArgumentParser.add_subparsers()`` returned.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser; its ``func`` default is :func:`cmd_search`, which takes the
        parsed arguments and returns an exit status.
    """
    p = subparsers.add_parser(
        "search",
        help="IVF vector search on the GPU through gids vs. all in GPU memory: recall, QPS, I/O",
        description=__doc__.split("\n\n")[1],
    )
    src = p.add_argument_group("data (default: synthetic clustered vectors)")
    one = src.add_mutually_exclusive_group()
    one.add_argument("--index", metavar="PATH", help="search an existing IVF index file")
    one.add_argument("--vectors", metavar="FILE",
                     help="build an index from a .fvecs, .bvecs or .npy file")
    src.add_argument("--n", type=positive_int, help="synthetic vectors (default 200,000; 2,000 in the simulator)")
    src.add_argument("--dim", type=positive_int, help="synthetic dimension (default 96; 16 in the simulator)")
    src.add_argument("--lists", type=positive_int, help="IVF lists to build (default 256; 16 in the simulator)")
    src.add_argument("--clusters", type=positive_int, help="synthetic clusters (default: --lists)")
    src.add_argument("--spread", type=_fraction, default=1.0,
                     help="synthetic noise around cluster centres (default 1.0; larger is harder)")
    src.add_argument("--metric", choices=["l2", "ip"], default="l2", help="for a built index")
    src.add_argument("--save-index", metavar="PATH", type=output_file, help="keep the built index here")
    q = p.add_argument_group("queries")
    q.add_argument("--queries", type=positive_int, help="queries (default 10,000; 8 in the simulator)")
    q.add_argument("--query-file", metavar="FILE", help="read the queries from a vector file")
    q.add_argument("--recall-queries", type=int,
                   help="recall is measured over the first N queries (default 1,000; all in the "
                        "simulator; 0: all). The ground truth is an exact search on the host, "
                        "the slow part of a large run: 10,000 queries against 1 M vectors take "
                        "minutes even on 16 cores. Queries are drawn at random, so the first N "
                        "are a random sample of the stream; QPS is always over every query")
    q.add_argument("--skewed", action="store_true",
                   help="80%% of the queries go to 20%% of the clusters (lists): a stream that "
                        "a cache rewards")
    s = p.add_argument_group("search")
    s.add_argument("--nprobe", type=_nprobe_list, default=[1, 2, 4, 8, 16],
                   help="lists probed per query, comma-separated (default 1,2,4,8,16; values "
                        "above the number of lists are dropped)")
    s.add_argument("--k", type=positive_int, default=10, help="results per query (default 10)")
    s.add_argument("--query-batch", type=positive_int, metavar="N",
                   help="scan the queries N at a time, the next batch's probed lists prefetched "
                        "into the cache while one is scanned (default: all in one launch)")
    s.add_argument("--no-prefetch", action="store_true",
                   help="with --query-batch: do not prefetch (to compare)")
    s.add_argument("--data-path", type=_name_list, default=["gids", "memory"],
                   help="comma-separated data paths: gids (host daemon), nvme (gids over the "
                        "direct NVMe path), memory, or a baseline of workloads/baselines.py "
                        "(zero_copy, cpu_batch, ...) (default gids,memory)")
    s.add_argument("--cache-fraction", type=_fraction, default=0.25,
                   help="gids / nvme cache size as a fraction of the vectors section "
                        "(default 0.25)")
    s.add_argument("--page-size", type=page_size,
                   help="page size of a built index and of the cache (default 4096; 512 in the "
                        "simulator; for --index, the index's)")
    s.add_argument("--storage", choices=["file", "mmap", "memory"], default="file",
                   help="how the gids daemon, the NVMe controller and the cpu_batch / zero_copy "
                        "paths read the index file (default file: pread)")
    add_ssd_arguments(s)
    s.add_argument("--probe", choices=["gpu", "host"], default="gpu",
                   help="pick the lists on the GPU (default) or on the host")
    s.add_argument("--threads", type=positive_int, help="threads per block (default 128; 32 in the simulator)")
    s.add_argument("--no-faiss", action="store_true", help="skip the faiss-cpu column")
    s.add_argument("--seed", type=nonnegative_int, default=0)
    s.add_argument("--json", metavar="OUT", type=output_file, help="also write the results as JSON")
    add_trace_argument(s)
    p.set_defaults(func=cmd_search)
    return p


# ------------------------------------------------------------------ helpers

class _StageProgress:
    """``progress(stage, done, total)``, as the index builder reports: one
    :class:`gids.console.Progress` per stage on stderr."""

    def __init__(self):
        self._bars = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self._bars:
            self._bars[stage] = Progress(f"  {stage}")
        self._bars[stage](done, total)


_START = time.perf_counter()


def _say(text: str) -> None:
    """A progress message on stderr, stamped with the seconds since the command started (a run
    cut short by a time limit still tells where its time went)."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {text}", file=sys.stderr, flush=True)


def sample_queries(index, n_queries: int, seed: int = 0, *, skewed: bool = False, noise: float = 0.5,
                   hot_query_share: float = 0.8, hot_list_share: float = 0.2) -> np.ndarray:
    """Queries near stored vectors of an index: for data that has no query set of its own.

    Each query is a random stored vector plus Gaussian noise whose per-coordinate standard
    deviation is ``noise`` times the sampled vectors' RMS per-coordinate distance to their
    list's centroid, so a query lies about as far from its list as the list's own members.

    Parameters
    ----------
    index : IVFIndex
    n_queries : int
    seed : int, optional
    skewed : bool, optional
        If true, a random ``hot_list_share`` of the non-empty lists receives ``hot_query_share``
        of the queries (as :meth:`SyntheticClusters.queries` does with clusters); otherwise
        every stored vector is equally likely.
    noise : float, optional

    Returns
    -------
    ndarray of float32, shape (n_queries, dim)
    """
    rng = np.random.default_rng([seed, 7])
    lengths = np.asarray(index.list_lengths)
    filled = np.flatnonzero(lengths)
    weights = lengths[filled] / lengths[filled].sum()
    if skewed:
        n_hot = max(1, round(hot_list_share * len(filled)))
        order = rng.permutation(len(filled))
        hot, cold = order[:n_hot], order[n_hot:]
        pick_hot = hot[rng.integers(len(hot), size=n_queries)]
        if len(cold):
            pick_cold = cold[rng.integers(len(cold), size=n_queries)]
            picks = np.where(rng.random(n_queries) < hot_query_share, pick_hot, pick_cold)
        else:
            picks = pick_hot
    else:
        picks = rng.choice(len(filled), size=n_queries, p=weights)
    lists = filled[picks]
    rows = rng.integers(0, lengths[lists])
    dim = index.dim
    elements = index.list_starts[lists][:, None] + rows[:, None] * dim + np.arange(dim)
    vectors = np.asarray(index.vectors[elements], dtype=np.float64)
    residual = vectors - index.centroids[lists]
    sigma = noise * math.sqrt(float(np.mean(residual ** 2)))
    return (vectors + rng.normal(0.0, sigma, vectors.shape)).astype(np.float32)


def _build_index(args, defaults, tmp_dir: Path):
    """The index to search and, for synthetic data, the data source (for its query generator)."""
    from workloads.vector import SyntheticClusters, build_ivf, open_ivf, train_kmeans

    if args.index:
        _say(f"opening index {args.index}")
        try:
            return open_ivf(args.index), None
        except (ValueError, OSError) as exc:   # IndexFormatError is a ValueError
            raise UsageError(f"cannot open the index: {exc}") from None
    page_size = args.page_size or defaults["page_size"]
    lists = args.lists or defaults["lists"]
    if args.vectors:
        _say(f"loading {args.vectors}")
        data = _load_vectors(args.vectors)
    else:
        n, dim = args.n or defaults["n"], args.dim or defaults["dim"]
        data = SyntheticClusters(n, dim, args.clusters or lists, seed=args.seed, spread=args.spread)
        _say(f"synthetic data: {data}")
    path = Path(args.save_index) if args.save_index else tmp_dir / "search.ivf"
    _say(f"training {lists} centroids ({args.metric}) and writing {path}")
    if data.shape[0] < lists:
        raise UsageError(f"{data.shape[0]:,} vectors cannot fill {lists} lists: give --n of at "
                         f"least {lists} or fewer --lists")
    progress = _StageProgress()
    centroids = train_kmeans(data, lists, metric=args.metric, seed=args.seed, progress=progress)
    index = build_ivf(path, data, centroids, metric=args.metric, page_size=page_size,
                      progress=progress)
    return index, (data if not args.vectors else None)


def _load_vectors(path, **options):
    """``load_vectors(path)``; a malformed or unreadable file is a :class:`UsageError`."""
    from workloads.vector import load_vectors
    try:
        return load_vectors(path, **options)
    except (ValueError, OSError) as exc:   # VectorFileError is a ValueError
        raise UsageError(f"cannot read vectors from {path}: {exc}") from None


#: Queries recall is measured over on a GPU (``--recall-queries``): the standard error of a
#: recall near 0.95 over 1,000 queries x 10 neighbours is about 0.002 (were the misses
#: independent; they cluster in hard queries, so somewhat more).
DEFAULT_RECALL_QUERIES = 1000


def _recall_query_count(args, n_queries: int, simulator: bool) -> int:
    """How many of the queries (the first ones) recall is measured over: ``--recall-queries``."""
    wanted = args.recall_queries
    if wanted is None:
        wanted = 0 if simulator else DEFAULT_RECALL_QUERIES
    return n_queries if wanted == 0 else min(wanted, n_queries)


def _faiss_rows(index, queries, truth, k, k_recall, nprobes):
    """faiss-cpu IVF-Flat on the same centroids, per nprobe; None where faiss does not import."""
    try:
        import faiss
    except ImportError:
        _say("faiss-cpu is not installed: no faiss column (pip install faiss-cpu)")
        return None
    from workloads.vector import recall_at_k

    _say("faiss-cpu: IVF-Flat with the same centroids")
    dim = index.dim
    quantizer = faiss.IndexFlatL2(dim) if index.metric == "l2" else faiss.IndexFlatIP(dim)
    quantizer.add(np.ascontiguousarray(index.centroids, dtype=np.float32))
    metric = faiss.METRIC_L2 if index.metric == "l2" else faiss.METRIC_INNER_PRODUCT
    ivf = faiss.IndexIVFFlat(quantizer, dim, index.n_lists, metric)
    # A quantizer that already holds n_lists centroids is not retrained.
    ivf.train(np.ascontiguousarray(index.centroids, dtype=np.float32))
    for lst in range(index.n_lists):
        if index.list_lengths[lst]:
            ivf.add_with_ids(np.ascontiguousarray(index.list_vectors(lst)),
                             np.ascontiguousarray(index.list_ids(lst), dtype=np.int64))
    rows = {}
    for nprobe in nprobes:
        ivf.nprobe = nprobe
        start = time.perf_counter()
        _, ids = ivf.search(queries, k)
        seconds = time.perf_counter() - start
        rows[nprobe] = {"recall": recall_at_k(ids[:len(truth)], truth, k_recall),
                        "qps": len(queries) / seconds if seconds > 0 else math.inf}
        _say(f"faiss-cpu, nprobe {nprobe}: {len(queries):,} queries in {seconds:.2f} s "
             f"({rows[nprobe]['qps']:,.0f} QPS), recall {rows[nprobe]['recall']:.4f}")
    return rows


def _miss_path_note(miss_path) -> str:
    """``, mean I/O .. us, mean miss .. us, .. slot retries`` for a Runtime's rows, else ``""``."""
    if not miss_path:
        return ""
    return (f", mean I/O {miss_path['io_latency_us']:.1f} us, mean miss "
            f"{miss_path['miss_latency_us']:.1f} us, {miss_path['slot_retries']:,} slot retries")


def _cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def _table(rows, faiss_rows, k_recall, simulator) -> str:
    qps = "QPS (simulator)" if simulator else "QPS"
    head = ["nprobe", "data path", "SSDs", "engine", f"recall@{k_recall}", qps, "pages/query",
            "cold pages/query", "hit rate"]
    if faiss_rows is not None:
        head += [f"faiss recall@{k_recall}", "faiss QPS (CPU)"]
    lines = []
    shown = set()
    for row in rows:
        cells = [str(row["nprobe"]), row["data_path"], emulation_cell(row["emulation"]),
                 engine_cell(row), f"{row['recall']:.4f}",
                 f"{row['qps']:,.1f}",
                 f"{row['pages_per_query']:.2f}", f"{row['list_pages_per_query']:.2f}",
                 _cell(row["hit_rate"], ".1%")]
        if faiss_rows is not None:
            f = faiss_rows.get(row["nprobe"]) if row["nprobe"] not in shown else None
            cells += [_cell(f and f["recall"], ".4f"), _cell(f and f["qps"], ",.0f")]
        shown.add(row["nprobe"])
        lines.append(cells)
    return table(head, lines, left=(1,))


# ------------------------------------------------------------------ the command

def cmd_search(args) -> int:
    """Run ``gids search`` with parsed arguments; returns the exit status."""
    import gids
    from gids.device import WARP_SIZE
    from workloads.vector import ivf_search, recall_at_k
    from workloads.vector.gpu_search import MAX_K, GPUSearcher, get_data_path

    simulator = bool(gids.SIMULATOR)
    if simulator:
        sys.setswitchinterval(1e-4)   # host <-> simulated-kernel handshakes take turns on the GIL
    defaults = _DEFAULTS["simulator" if simulator else "gpu"]
    world = ("the CUDA simulator (no GPU: kernels run as Python threads; times and QPS are "
             "simulator figures, not GPU ones)" if simulator else "the GPU")
    try:
        paths = [get_data_path(name) for name in args.data_path]
        arrays = emulations(args, any(path.backend for path in paths))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.recall_queries is not None and args.recall_queries < 0:
        raise UsageError(f"--recall-queries must be >= 0, got {args.recall_queries}")
    if args.threads and (args.threads & (args.threads - 1) or args.threads % WARP_SIZE):
        raise UsageError(f"--threads must be a power of two and a multiple of the warp size "
                         f"({WARP_SIZE}), got {args.threads}")
    if args.k > MAX_K:
        raise UsageError(f"--k must be from 1 to {MAX_K}, got {args.k}")
    lists = args.lists or defaults["lists"]
    if not (args.index or args.vectors) and (args.n or defaults["n"]) < lists:
        raise UsageError(f"--n {args.n or defaults['n']} vectors cannot fill {lists} lists: give "
                         f"--n of at least {lists} or fewer --lists")
    print(f"gids search: running on {world}")

    with tempfile.TemporaryDirectory(prefix="gids-search-") as tmp, \
            TraceRecorder(args.trace) as trace:
        index, synthetic = _build_index(args, defaults, Path(tmp))
        n_queries = args.queries or defaults["queries"]
        if args.query_file:
            queries = np.asarray(_load_vectors(args.query_file, mmap=False),
                                 dtype=np.float32)
            if args.queries:
                queries = queries[:n_queries]
        elif synthetic is not None:
            queries = synthetic.queries(n_queries, seed=args.seed + 1, skewed=args.skewed)[0]
        else:
            queries = sample_queries(index, n_queries, seed=args.seed + 1, skewed=args.skewed)
        if queries.ndim != 2 or queries.shape[1] != index.dim:
            raise UsageError(f"dimension mismatch: the queries have dimension "
                             f"{queries.shape[-1]} but the index has dimension {index.dim}")
        nprobes = sorted({p for p in args.nprobe if p <= index.n_lists})
        dropped = sorted(set(args.nprobe) - set(nprobes))
        if dropped:
            _say(f"nprobe {dropped} dropped: the index has {index.n_lists} lists")
        if not nprobes:
            raise UsageError(f"no --nprobe value fits the index ({index.n_lists} lists)")
        k = args.k
        k_recall = min(10, k)
        page_size = args.page_size if (args.page_size and args.index) else min(index.page_size, 64 << 10)
        vector_pages = index.vectors_nbytes // page_size
        cache_pages = max(WARP_SIZE, math.ceil(args.cache_fraction * vector_pages))
        n_recall = _recall_query_count(args, len(queries), simulator)
        print(f"index: {index.n_vectors:,} vectors, dim {index.dim}, {index.n_lists} lists, "
              f"{index.metric}, vectors section {index.vectors_nbytes:,} B ({vector_pages:,} pages "
              f"of {page_size} B)")
        print(f"queries: {len(queries):,}{' (skewed)' if args.skewed else ''}, k {k}; "
              f"gids / nvme cache {cache_pages:,} pages ({cache_pages / max(vector_pages, 1):.1%} "
              f"of the vectors), storage {args.storage}; recall@{k_recall} over "
              f"{'all' if n_recall == len(queries) else f'the first {n_recall:,}'} queries "
              "against the exact search")

        _say(f"exact search for the ground truth of {n_recall:,} queries")
        truth = ivf_search(index, queries[:n_recall], k_recall, index.n_lists)[1]

        rows = []
        for path in paths:
            # A path that reads through a Runtime runs unemulated, then once per emulated array.
            for emulation in [None, *arrays] if path.backend else [None]:
                runtime = None
                if path.backend:
                    runtime = gids.Runtime(path.backend, cache_pages=cache_pages,
                                           page_size=page_size, trace=trace(),
                                           **(emulation.runtime_options if emulation else {}))
                name = path.name if emulation is None else f"{path.name} ({emulation.label})"
                try:
                    # Every path that reads the file while it runs reads it as --storage says
                    # (a baseline reading the disk beside gids reading RAM measures the disk). A
                    # batch path must hold every page one launch reads: the whole section.
                    options = {"storage": args.storage}
                    if not path.backend:
                        options["batch_pages"] = vector_pages
                    with GPUSearcher(index, path, runtime=runtime, threads=args.threads,
                                     **options) as searcher:
                        if not simulator:   # the simulator compiles nothing; its warm-up only costs
                            _say(f"{name}: compiling")
                            for nprobe in nprobes:
                                searcher.warmup(k, nprobe)
                        for done, nprobe in enumerate(nprobes, start=1):
                            if runtime is not None:
                                runtime.invalidate()   # each nprobe starts from a cold cache
                            result = searcher.search(queries, k, nprobe, probe=args.probe,
                                                     query_batch=args.query_batch,
                                                     prefetch=not args.no_prefetch)
                            row = result.summary()
                            row["query_batch"] = args.query_batch
                            row["prefetch"] = bool(args.query_batch and not args.no_prefetch
                                                   and path.backend == "host")
                            row["recall"] = recall_at_k(result.ids[:n_recall], truth, k_recall)
                            row["emulation"] = emulation_record(emulation)
                            row.update(engine_record(runtime, options.get("storage")))
                            rows.append(row)
                            hits = _cell(row["hit_rate"], ".1%")
                            _say(f"{name}, nprobe {nprobe}: {len(queries):,} queries in "
                                 f"{result.seconds:.2f} s ({row['qps']:,.0f} QPS), recall "
                                 f"{row['recall']:.4f}, {row['pages_per_query']:.1f} pages read "
                                 f"per query, hit rate {hits}{_miss_path_note(result.miss_path)} "
                                 f"({done}/{len(nprobes)})")
                finally:
                    if runtime is not None:
                        runtime.close()
        # Stable: a path's unemulated row stays before its emulated ones.
        order = [path.name for path in paths]
        rows.sort(key=lambda r: (r["nprobe"], order.index(r["data_path"])))
        faiss_rows = None if args.no_faiss else _faiss_rows(index, queries, truth, k, k_recall, nprobes)

        print()
        print(_table(rows, faiss_rows, k_recall, simulator))
        print("pages/query: pages read from storage per query (cache misses); cold pages/query: "
              "pages the probed lists occupy (the reads with no cache)")
        if arrays:
            print(EMULATION_NOTE)
        if args.json:
            report = {
                "world": "simulator" if simulator else "gpu",
                "simulator": simulator,
                "index": {"path": str(index.path) if args.index or args.save_index else None,
                          "n_vectors": index.n_vectors, "dim": index.dim, "n_lists": index.n_lists,
                          "metric": index.metric, "page_size": index.page_size,
                          "vectors_nbytes": index.vectors_nbytes},
                "queries": len(queries), "skewed": bool(args.skewed), "k": k,
                "recall_at": k_recall, "recall_queries": n_recall,
                "cache_pages": cache_pages, "page_size": page_size,
                "cache_fraction": args.cache_fraction, "storage": args.storage, "probe": args.probe,
                "query_batch": args.query_batch,
                "prefetch": bool(args.query_batch and not args.no_prefetch),
                "emulations": [e.as_json() for e in arrays],
                "rows": rows,
                "faiss": None if faiss_rows is None else
                         [dict(nprobe=p, **v) for p, v in sorted(faiss_rows.items())],
                "command": " ".join(sys.argv),
            }
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
            _say(f"wrote {args.json}")
    return 0


def main(argv=None) -> int:
    """``python -m workloads.vector.cli search ...``: the subcommand without the ``gids`` entry point."""
    parser = ArgumentParser(prog="python -m workloads.vector.cli")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_search_arguments(sub)
    return run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
