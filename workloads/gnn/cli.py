"""The ``gids gnn`` command: GraphSAGE training from storage, each feature path side by side.

A synthetic IGB-like data set (:mod:`workloads.gnn.dataset`: a Kronecker graph
of ``2**scale`` vertices, a row of ``--dim`` float32 per vertex in a file, planted labels) is
made once in ``--dir``. Then, per feature path (:mod:`workloads.gnn.paths`) and, for gids, per
cache fraction: ``--epochs`` epochs of GraphSAGE (PyG ``SAGEConv``) over ``--train-seeds``
seeds, the epoch split into sampling, feature gather and training, and the accuracy on
held-out vertices; with ``--ssd PROFILE --n-ssd 1,4`` the gids and direct rows again under
real-time emulation of those drive arrays. ``--gather-only``: no training; rows/s of the
feature gather alone over ``--batches`` batches of ``--batch-size`` random seeds' sampled node
lists (warmed first by as many other batches; a cache that holds every row also by the timed
ones), with the gids rows' hit rate over the timed batches.
Progress goes to stderr; stdout gets a table; ``--json OUT`` writes every row.

``gids/cli.py`` registers it with :func:`add_gnn_arguments`; ``python -m workloads.gnn.cli``
runs it alone.

Examples::

    gids gnn --scale 20 --epochs 2 --data-path gids,memory,zero_copy,mmap,cpu_batch,direct
    gids gnn --gather-only --scale 20 --fanouts 10,5,5 --cache-fractions 0.25,1
    gids gnn --gather-only --scale 22 --data-path gids,mmap,direct --cache-fractions 0.25 \
        --ssd p5800x --n-ssd 1,4
"""
import gids  # noqa: F401  (first: picks GPU or simulator before numba.cuda loads)

# isort: split

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from gids.cli import output_file, page_size, positive_int
from workloads.ssd_options import EMULATION_NOTE, add_ssd_arguments, emulation_record, emulations

SIM = gids.SIMULATOR
#: How far the paths' results may differ (GPU training sums in no fixed order).
ACCURACY_TOLERANCE = 0.01
LOSS_TOLERANCE = 0.01
PATHS = ("gids", "memory", "zero_copy", "mmap", "cpu_batch", "direct")
#: The paths ``--ssd`` emulates drives for.
EMULATED_PATHS = ("gids", "direct")
#: Where data sets are made and kept (files named by their parameters: a rerun skips the work).
DEFAULT_DIR = "/var/tmp/gids-gnn"


def _ints(text):
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _fractions(text):
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions, got {text!r}")
    if not values or min(values) <= 0 or max(values) > 1:
        raise argparse.ArgumentTypeError(f"fractions must be in (0, 1], got {text!r}")
    return values


def _paths(text):
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [n for n in names if n not in PATHS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown data path(s) {bad}; choose from "
                                         f"{','.join(PATHS)}")
    return names


def add_gnn_arguments(subparsers):
    p = subparsers.add_parser(
        "gnn", help="GraphSAGE training from storage: gids vs. GPU memory, zero-copy, the mmap "
                    "loader, CPU batches and an O_DIRECT loader (or --gather-only: feature "
                    "rows/s)",
        description=__doc__.split("\n\n")[1])
    d = p.add_argument_group("data set")
    d.add_argument("--scale", type=positive_int, default=7 if SIM else 20,
                   help="2**scale vertices (default 20; 7 in the simulator)")
    d.add_argument("--edgefactor", type=positive_int, default=8,
                   help="edges per vertex (default 8)")
    d.add_argument("--dim", type=positive_int, default=16 if SIM else 1024,
                   help="float32 features per vertex (default 1024; 16 in the simulator)")
    d.add_argument("--classes", type=positive_int, default=16)
    d.add_argument("--dir", default=DEFAULT_DIR,
                   help="where the data set is made, or found by its parameters and reused "
                        f"(default {DEFAULT_DIR}: on the disk, kept between runs)")
    t = p.add_argument_group("training")
    t.add_argument("--fanouts", type=_ints, default=(15, 10, 5),
                   help="neighbours per hop (default 15,10,5; the layer count)")
    t.add_argument("--batch-size", type=positive_int, default=8 if SIM else 1024)
    t.add_argument("--epochs", type=positive_int, default=1)
    t.add_argument("--train-seeds", type=positive_int, default=16 if SIM else 1 << 16,
                   help="training vertices (default 65,536; 16 in the simulator)")
    t.add_argument("--eval-seeds", type=positive_int, default=16 if SIM else 8192)
    t.add_argument("--hidden", type=positive_int, default=16 if SIM else 256)
    t.add_argument("--lr", type=float, default=0.003)
    s = p.add_argument_group("data paths")
    s.add_argument("--data-path", type=_paths, default=PATHS,
                   help=f"comma-separated, from {','.join(PATHS)} (default all)")
    s.add_argument("--cache-fractions", type=_fractions, default=(0.25, 1.0),
                   help="gids cache sizes as fractions of the features (default 0.25,1)")
    s.add_argument("--storage", choices=["memory", "file", "mmap"], default="memory",
                   help="how gids, zero_copy and cpu_batch read the feature file (default "
                        "memory: RAM-backed; file: pread); direct always reads the file with "
                        "O_DIRECT, or RAM under --ssd")
    s.add_argument("--page-size", type=page_size, default=512 if SIM else 4096,
                   help="gids page size and the cpu_batch path's read size (default 4096)")
    s.add_argument("--direct-threads", type=positive_int, default=4 if SIM else 64,
                   help="host threads reading rows on the direct path, one O_DIRECT read in "
                        "flight each (default 64)")
    add_ssd_arguments(s)
    t.add_argument("--no-loader", dest="loader", action="store_false",
                   help="leave out the gids rows trained through gids.torch.NodeLoader (the "
                        "next batch sampled and gathered during each step; wall time only)")
    g = p.add_argument_group("gather-only benchmark")
    g.add_argument("--gather-only", action="store_true",
                   help="time the feature gather alone (no training)")
    g.add_argument("--batches", type=positive_int, default=2 if SIM else 16,
                   help="batches of random seeds whose node lists are gathered (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", type=output_file, help="also write the results as JSON")
    p.set_defaults(func=cmd_gnn)
    return p


def _say(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _progress():
    """A ``progress(stage, done, total)`` for make_dataset: one gids.console report a stage."""
    from gids.console import Progress
    reports = {}

    def progress(stage, done, total):
        if stage not in reports:
            reports[stage] = Progress(f"  {stage}")
        reports[stage](done, total)
    return progress


def _variants(args, arrays):
    """(label, path name, cache fraction, emulated SSD array or None) per row to run."""
    rows = []
    for name in args.data_path:
        if name == "gids":
            # Each fraction's loader row right after its plain row: a run cut short (the JSON
            # is written after every row) has both for the first fractions.
            for f in args.cache_fractions:
                rows.append((f"gids {f:.0%}", "gids", f, None))
                if args.loader and not args.gather_only:
                    rows.append((f"gids {f:.0%} loader", "gids_loader", f, None))
            rows += [(f"gids {f:.0%} on {em.label}", "gids", f, em)
                     for em in arrays for f in args.cache_fractions]
        elif name == "direct":
            # The real disk last: its rows are the slowest, and its first write-back (fsync)
            # of a freshly made file may take a while.
            rows += [(f"direct on {em.label}", "direct", None, em) for em in arrays]
            rows += [("direct", "direct", None, None)]
        else:
            rows.append((name, name, None, None))
    return rows


def cmd_gnn(args):
    try:
        import torch  # noqa: F401
    except ImportError:
        _say("gids gnn: needs PyTorch and torch_geometric (pip install 'gids[torch]')")
        return 2
    if not args.gather_only:
        try:
            import torch_geometric  # noqa: F401
        except ImportError:
            _say("gids gnn: training needs torch_geometric (pip install torch-geometric); "
                 "--gather-only runs without it")
            return 2
    try:
        arrays = emulations(args, any(p in args.data_path for p in EMULATED_PATHS))
    except ValueError as exc:
        _say(f"gids gnn: error: {exc}")
        return 2
    from gids.sampling import MAX_FANOUT
    if max(args.fanouts) > MAX_FANOUT:
        _say(f"gids gnn: error: fan-outs are at most {MAX_FANOUT}")
        return 2
    from workloads.gnn import train
    from workloads.gnn.dataset import make_dataset
    from workloads.gnn.paths import make_feature_path

    directory = Path(args.dir)
    t0 = time.perf_counter()
    try:
        data = make_dataset(directory, args.scale, args.dim, edgefactor=args.edgefactor,
                            classes=args.classes, seed=args.seed, progress=_progress())
    except OSError as exc:      # a folder we cannot write, a full disk
        _say(f"gids gnn: error: cannot make the data set in {directory}: {exc}")
        return 2
    data_s = time.perf_counter() - t0
    _say(f"data set: {data.n_vertices:,} vertices, {data.graph.n_edges:,} adjacency "
         f"entries, features {data.feature_bytes / 2**30:.2f} GiB ({data_s:.1f} s)")
    rng = np.random.default_rng([args.seed, 3])
    n = data.n_vertices
    n_train = min(args.train_seeds, n)
    order = rng.permutation(n)
    train_seeds = order[:n_train]
    eval_seeds = order[n_train:n_train + min(args.eval_seeds, n - n_train)]
    graph = train.GraphSampler(data, args.fanouts, args.seed, page_size=args.page_size)
    results = []
    report = {"command": " ".join(sys.argv), "mode": "gather" if args.gather_only else "train",
              "simulator": SIM, "scale": args.scale, "dim": args.dim,
              "edgefactor": args.edgefactor, "fanouts": list(args.fanouts),
              "batch_size": args.batch_size, "storage": args.storage,
              "rows_resident_first": gids.defaults.get("rows_resident_first"),
              "n_vertices": data.n_vertices, "feature_bytes": data.feature_bytes,
              "data_set_s": data_s, "rows": results}
    store = None
    try:
        node_lists = warm_lists = None
        if args.gather_only:
            # Timed batches and, before them, as many other batches that warm the cache.
            lists = []
            for b in range(2 * args.batches):
                seeds = rng.choice(n, size=min(args.batch_size, n), replace=False)
                lists.append(graph.sampler.sample(seeds, batch=b).nodes)
            graph.rt.sync()
            warm_lists, node_lists = lists[:args.batches], lists[args.batches:]
        # The most rows one batch can have (buffers of the mmap and cpu_batch paths).
        if node_lists:
            max_rows = max(int(x.numel()) for x in [*node_lists, *warm_lists])
        else:
            reach, width = 1, 1
            for k in args.fanouts:
                width *= k
                reach += width
            max_rows = min(n, args.batch_size * reach)
        variants = _variants(args, arrays)
        if args.storage == "memory" and sum(v[1] in ("gids", "gids_loader") for v in variants) > 1:
            # One RAM copy of the file for every gids row (each Runtime still maps its own).
            from gids.host import open_file_store
            store = open_file_store(str(data.features_path), "memory")
        for label, name, fraction, em in variants:
            _say(f"{label}:")
            path = make_feature_path("gids" if name == "gids_loader" else name, data,
                                     cache_fraction=fraction or 1.0,
                                     emulation=em, storage=args.storage,
                                     page_size=args.page_size, max_rows=max_rows,
                                     direct_threads=args.direct_threads,
                                     store=store if name in ("gids", "gids_loader") else None)
            try:
                if args.gather_only:
                    # A cache that holds every row is warmed with the timed rows too.
                    row = train.gather_benchmark(data, path, node_lists, warm_lists,
                                                 warm_timed=(fraction or 0) >= 1)
                    _say(f"    {row['rows_per_s']:,.0f} rows/s ({row['gb_per_s']:.2f} GB/s)"
                         + _hit_note(row))
                else:
                    run = train.run_loader_epochs if name == "gids_loader" \
                        else train.run_epochs
                    row = run(data, path, graph, train_seeds=train_seeds,
                              eval_seeds=eval_seeds, batch_size=args.batch_size,
                              epochs=args.epochs, hidden=args.hidden, lr=args.lr,
                              seed=args.seed, log=_say)
                    _say(f"    accuracy {row['accuracy']:.4f}")
                if hasattr(path, "stats"):
                    row["cache"] = path.stats()
                if hasattr(path, "info"):
                    row["loader"] = path.info()
            finally:
                path.close()
            results.append(dict(label=label, path=name, cache_fraction=fraction,
                                emulation=emulation_record(em), **row))
            if args.json:   # after every row: a run cut short keeps what it measured
                _write_report(args.json, report)
    finally:
        graph.close()
        if store is not None:
            store.close()
    _print_table(args, results)
    if arrays:
        print("\n" + EMULATION_NOTE)
    if args.json:
        _write_report(args.json, report)
        _say(f"wrote {args.json}")
    return 0


def _write_report(path, report):
    """The JSON report, written whole under a temporary name and renamed."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(report, indent=2, default=float) + "\n")
    os.replace(tmp, path)


def _hit_note(row):
    return "" if row.get("hit_rate") is None else f", {row['hit_rate']:.1%} hits"


def _print_table(args, results):
    if args.gather_only:
        base = {r["path"]: r["rows_per_s"] for r in results
                if r["path"] != "gids" and not r["emulation"]}
        # The direct loader on the same drives as the row (or on the disk, unemulated).
        direct = {str(r["emulation"]): r["rows_per_s"] for r in results if r["path"] == "direct"}
        columns = [k for k in ("mmap", "zero_copy", "memory") if k in base]
        print("feature rows gathered per second (the same node lists on every path)\n")
        heads = ["path", "rows/s", "GB/s", "hit rate", *(f"x {k}" for k in columns)]
        heads += ["x direct, same drives"] if direct else []
        print("| " + " | ".join(heads) + " |")
        print("|---|" + "---:|" * (len(heads) - 1))
        for r in results:
            hits = "-" if r.get("hit_rate") is None else f"{r['hit_rate']:.1%}"
            cells = [r["label"], f"{r['rows_per_s']:,.0f}", f"{r['gb_per_s']:.2f}", hits]
            cells += [f"{r['rows_per_s'] / base[k]:.2f}" for k in columns]
            if direct:
                same = direct.get(str(r["emulation"]))
                cells.append(f"{r['rows_per_s'] / same:.2f}" if same else "-")
            print("| " + " | ".join(cells) + " |")
        return
    mmap = next((r for r in results if r["path"] == "mmap"), None)
    print("| path | epoch s | sample s | gather s | train s | x mmap | last loss | accuracy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        e = r["epochs"][-1]
        ratio = f"{mmap['epochs'][-1]['epoch_s'] / e['epoch_s']:.2f}" if mmap else "-"
        phases = " | ".join("-" if e[k] is None else f"{e[k]:.2f}"
                            for k in ("sample_s", "gather_s", "train_s"))
        print(f"| {r['label']} | {e['epoch_s']:.2f} | {phases} | {ratio} | {e['last_loss']:.4f} "
              f"| {r['accuracy']:.4f} |")
    # Every path gathers the same bytes, but a GPU's training steps add in no fixed order
    # (PyG's scatter): paths agree to within that noise, not to the bit.
    accuracies = [r["accuracy"] for r in results]
    losses = [r["epochs"][-1]["loss"] for r in results]
    same = (max(accuracies) - min(accuracies) <= ACCURACY_TOLERANCE
            and max(losses) - min(losses) <= LOSS_TOLERANCE * max(abs(x) for x in losses))
    print(f"\nsame loss and accuracy on every path (accuracy within {ACCURACY_TOLERANCE}, last "
          f"loss within {LOSS_TOLERANCE:.0%}): {'yes' if same else 'NO'}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.gnn.cli")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_gnn_arguments(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
