"""The ``gids bfs`` and ``gids cc`` commands: GPU graph traversal through each data path.

``gids/cli.py`` registers them with :func:`add_bfs_arguments`; ``python -m workloads.graph.cli``
runs them on their own. Progress goes to stderr; stdout gets one table, with TEPS (BFS) or
edges/s (CC) per data path and cache size; ``--json OUT`` writes every search.

With ``--ssd PROFILE [--n-ssd 1,4]`` the data paths that read through a gids Runtime (``gids``,
``nvme``) run once more per drive count under real-time emulation of that SSD array
(:mod:`workloads.ssd_options`); their rows name the array in the SSDs column, and their JSON
records carry ``emulation: {"ssd", "n_ssd"}`` (``null`` for the rows without).

Examples::

    gids bfs --scale 20 --roots 64 --data-path gids,memory --cache-fractions 1,0.5,0.25,0.1
    gids bfs --scale 18 --data-path gids,nvme --cache-fractions 0.25 --ssd p5800x --n-ssd 1,4
    gids cc --graph twitter.csr --data-path gids --cache-fractions 0.1 --json cc.json
    gids bfs --graph roadNet-CA.txt --root 0 --root 17 --data-path gids --trace bfs.trace
    gids bfs --scale 20 --data-path zero_copy,gids --cache-fractions 0.25 --host-tier degree \
        --host-tier-fraction 1 --host-tier-mode copy,split

``--graph`` takes the project's CSR format (``docs/formats.md``), a SNAP edge list (text: two
ids a line, ``#`` comments) or a ``.npy`` edge array; the last two are converted once, into
``PATH.csr`` beside the input, and that file is used from then on.
"""
from __future__ import annotations

import gids  # noqa: F401  (first: picks GPU or simulator before numba.cuda loads)

# isort: split

import argparse
import dataclasses
import json
import os
import sys
import tempfile

import numpy as np

from gids.cli import (
    ArgumentParser,
    TraceRecorder,
    UsageError,
    add_trace_argument,
    existing_dir,
    nonnegative_int,
    output_file,
    page_size,
    positive_int,
    run,
)
from gids.console import Progress, say, table

from ..ssd_options import (
    EMULATION_NOTE,
    add_ssd_arguments,
    emulation_cell,
    emulation_record,
    emulations,
    engine_cell,
    engine_record,
)
from .bfs import connected_components_reference, sample_bfs_roots
from .csr_file import MAGIC, GraphFormatError, open_csr
from .gpu_bfs import DIRECTIONS, ReferenceMismatchError, validate_bfs_result
from .gpu_cc import ComponentsMismatchError, validate_cc_result
from .gpu_graph import DATA_PATHS, TIER_MODES, open_device_graph
from .importers import import_edge_list, import_npy_edges
from .kronecker import generate_kronecker_csr
from .tier_pages import METHODS
from .validate import BFSValidationError, teps_statistics

#: Searches per run by default: Graph500's 64 on a GPU; the simulator is ~1e5 times slower.
DEFAULT_ROOTS = 4 if gids.SIMULATOR else 64
#: Data paths run by default: every one on a GPU; in the simulator (one Python thread per CUDA
#: thread) the two of the original comparison.
DEFAULT_DATA_PATHS = (("gids", "memory") if gids.SIMULATOR
                      else ("gids", "nvme", "memory", "zero_copy", "cpu_batch"))
_DATA_PATH_WHERE = (" in the simulator; gids,nvme,memory,zero_copy,cpu_batch on a GPU"
                    if gids.SIMULATOR else "")


_say = say


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in DATA_PATHS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown data path(s) {unknown or text!r}; known: "
                                         f"{', '.join(DATA_PATHS)}")
    return names


def _scale(text: str) -> int:
    value = positive_int(text)
    if value > 40:
        raise argparse.ArgumentTypeError(f"must be at most 40 (2**40 vertices), got {value}")
    return value


def _fractions(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"cache fractions must lie in (0, 1]: {text!r}")
    return values


def _fraction(text: str) -> float:
    values = _fractions(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"one fraction in (0, 1], got {text!r}")
    return values[0]


def _choices(what: str, known):
    """An argparse type: a comma-separated list of names, each one of ``known``."""
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        if not names or any(n not in known for n in names):
            raise argparse.ArgumentTypeError(f"{what} must be of {', '.join(known)}: {text!r}")
        return names
    return parse


_tier_methods = _choices("host tier rankings", METHODS)
_tier_modes = _choices("host tier modes", TIER_MODES)


def add_bfs_arguments(subparsers) -> None:
    """Register the ``bfs`` and ``cc`` subcommands on an ``argparse`` subparsers object.

    Each sets ``func`` (``args.func(args)`` runs it and returns the exit status: 0, or 1 if a
    result failed validation).

    Parameters
    ----------
    subparsers
        What ``ArgumentParser.add_subparsers()`` returned.
    """
    for name in ("bfs", "cc"):
        if name == "bfs":
            p = subparsers.add_parser(
                "bfs", help="Graph500 BFS on the GPU through each data path (gids, nvme, "
                         "memory, zero_copy, cpu_batch); TEPS",
                description="Breadth-first searches from sampled roots, each validated by "
                            "Graph500's five rules; TEPS per data path and cache size.")
        else:
            p = subparsers.add_parser(
                "cc", help="connected components on the GPU through each data path; edges/s",
                description="Connected components (union-find hooking + pointer jumping), "
                            "checked against a CPU reference; time per data path and cache size.")
        graph = p.add_mutually_exclusive_group(required=True)
        graph.add_argument("--scale", type=_scale, help="generate a Graph500 Kronecker graph of "
                                                     "2**SCALE vertices")
        graph.add_argument("--graph", metavar="PATH",
                           help="a CSR graph file (docs/formats.md), a SNAP edge list (.txt) or a "
                                ".npy edge array (the last two converted once to PATH.csr)")
        p.add_argument("--edgefactor", type=positive_int, default=16, help="with --scale (default 16)")
        p.add_argument("--seed", type=nonnegative_int, default=0, help="generator and root seed (default 0)")
        p.add_argument("--save-graph", metavar="PATH", type=output_file,
                       help="with --scale: write the graph here and keep it (default: a "
                            "temporary file)")
        p.add_argument("--dir", type=existing_dir, default=None, help="with --scale: where the temporary graph goes")
        p.add_argument("--verify", action="store_true",
                       help="scan the whole graph file (checksum, ids, order) before running")
        p.add_argument("--data-path", type=_names, default=list(DEFAULT_DATA_PATHS),
                       metavar="LIST",
                       help=f"comma-separated, of {', '.join(DATA_PATHS)} (default "
                            f"{','.join(DEFAULT_DATA_PATHS)}{_DATA_PATH_WHERE})")
        p.add_argument("--cache-fractions", type=_fractions, default=[1.0, 0.5, 0.25, 0.1],
                       metavar="LIST", help="cache sizes over the neighbours array, for data "
                                            "paths with a cache (gids, nvme; default "
                                            "1,0.5,0.25,0.1)")
        p.add_argument("--page-size", type=page_size, default=0,
                       help="page size of gids, nvme and cpu_batch's reads (default 512 in the "
                            "simulator, else 4096)")
        p.add_argument("--storage", choices=["file", "mmap", "memory"], default="file",
                       help="how the gids daemon, the NVMe controller and the cpu_batch "
                            "gather read the file (default file: pread)")
        p.add_argument("--host-tier", type=_tier_methods, default=None, metavar="LIST",
                       help="give gids and nvme a host tier (pinned RAM between the GPU cache "
                            "and the file) filled with the neighbours' pages ranked by vertex "
                            "degree or by reverse PageRank, as GIDS does, or by the lists a "
                            "page holds; comma-separated, a run each (default: none)")
        p.add_argument("--host-tier-fraction", type=_fraction, default=None, metavar="F",
                       help="with --host-tier: its size as a fraction of the neighbours' pages "
                            "(default 0.25; 1: every page, the file is not read once it is "
                            "filled)")
        p.add_argument("--host-tier-mode", type=_tier_modes, default=None, metavar="LIST",
                       help="with --host-tier, comma-separated, a run each: copy (a miss on a "
                            "tier page copies it into the GPU cache), direct (tier pages not "
                            "in the GPU cache are read in place, taking no slot), split "
                            "(direct, with the top pages preloaded into the GPU cache before "
                            "each search) (default copy)")
        add_ssd_arguments(p)
        p.add_argument("--warm-cache", action="store_true",
                       help="keep cached pages between searches, the first one included: it "
                            "follows the untimed warm-up search (default: each search, and "
                            "each cc run, starts cold)")
        p.add_argument("--json", metavar="OUT", type=output_file, help="write every result to this JSON file")
        add_trace_argument(p)
        if name == "bfs":
            where = " in the simulator; 64 on a GPU" if gids.SIMULATOR else ", as Graph500"
            p.add_argument("--roots", type=positive_int, default=DEFAULT_ROOTS,
                           help=f"searches per data path and cache size (default "
                                f"{DEFAULT_ROOTS}{where})")
            p.add_argument("--root", type=nonnegative_int, action="append", metavar="VERTEX",
                           help="search from this vertex (repeatable; instead of --roots "
                                "sampled ones)")
            p.add_argument("--direction", choices=DIRECTIONS, default="top-down",
                           help="top-down every level (BaM), or auto: bottom-up steps while the "
                                "frontier is large (Beamer)")
            p.add_argument("--validate", choices=["rules", "scipy", "none"], default="rules",
                           help="Graph500's five rules (default), also compare levels with "
                                "scipy (loads the graph in RAM), or none")
            p.set_defaults(func=cmd_bfs)
        else:
            p.add_argument("--validate", choices=["reference", "scipy", "none"],
                           default="reference",
                           help="compare labels with the chunked CPU reference (default), with "
                                "scipy (loads the graph in RAM), or none")
            p.set_defaults(func=cmd_cc)


# ---------------------------------------------------------------------------------- helpers
def _open_graph(args, tmp: str):
    """The graph to run on: a file given (converted first if it is an edge list), or one
    generated now."""
    if args.graph:
        return open_csr(_csr_of(args.graph), verify=args.verify)
    path = args.save_graph or os.path.join(tmp, f"kronecker-{args.scale}.csr")
    _say(f"generating a Graph500 Kronecker graph, scale {args.scale}, edge factor "
         f"{args.edgefactor}, seed {args.seed} -> {path}")
    generate_kronecker_csr(path, args.scale, args.edgefactor, seed=args.seed,
                           progress=Progress("generating"))
    return open_csr(path, verify=args.verify)


def _csr_of(path: str) -> str:
    """``path`` if it is a CSR file; for a SNAP edge list or a ``.npy`` edge array, the CSR file
    converted from it beside it (``PATH.csr``), made now unless one newer than ``path`` is there.

    Ids are kept as they are (vertex ``v`` of the file is vertex ``v`` of the graph, so
    ``--root`` takes the file's ids); an edge listed both ways is kept twice.
    """
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) == MAGIC:
            return path
    csr = path + ".csr"
    if os.path.exists(csr) and os.path.getmtime(csr) >= os.path.getmtime(path):
        _say(f"using {csr}, converted from {path} before")
        return csr
    kind = "npy edge array" if path.endswith(".npy") else "edge list"
    _say(f"converting the {kind} {path} to the CSR format: {csr}")
    convert = import_npy_edges if path.endswith(".npy") else import_edge_list
    part = csr + ".part"   # a conversion cut short leaves no CSR file that looks whole
    try:
        convert(path, part, progress=Progress("converting"))
        os.replace(part, csr)
    except BaseException:
        if os.path.exists(part):
            os.remove(part)
        raise
    return csr


def _roots(args, graph) -> np.ndarray:
    """The roots to search from: ``--root`` (each a vertex of the graph), else ``--roots``
    sampled among the vertices with an edge other than a self loop."""
    if args.root:
        bad = [r for r in args.root if r >= graph.n_vertices]
        if bad:
            raise UsageError(f"--root {bad[0]} is not a vertex: the graph has vertices 0 to "
                             f"{graph.n_vertices - 1:,}")
        return np.array(args.root, dtype=np.int64)
    roots = sample_bfs_roots(graph, args.roots, seed=args.seed)
    if roots.size == 0:
        raise UsageError("no vertex has an edge other than a self loop: nothing to search")
    return roots


def _graph_info(graph) -> dict:
    h = graph.header
    return {"path": graph.path, "n_vertices": graph.n_vertices, "n_entries": graph.n_edges,
            "n_input_edges": int(h.n_input_edges), "neighbour_bytes":
            int(graph.n_edges * h.neighbour_dtype.itemsize), "metadata": h.metadata}


def _runs(args, arrays):
    """``(data_path, options, emulation)`` for every data path and, where it has a cache, every
    size; a path that reads through a Runtime again under each emulated SSD array of
    ``arrays`` (after its unemulated runs, so the table shows it both ways)."""
    page_size = args.page_size or (512 if gids.SIMULATOR else 4096)
    for name in args.data_path:
        path = DATA_PATHS[name]
        if path.cached:
            for emulation in [None, *arrays] if path.runtime else [None]:
                tiers = _tiers(args) if path.runtime and args.host_tier else [{}]
                for fraction in args.cache_fractions:
                    for tier in tiers:
                        options = {"cache_fraction": fraction, "page_size": page_size}
                        if path.runtime:
                            options["storage"] = args.storage
                        if emulation is not None:
                            options["runtime_options"] = emulation.runtime_options
                        options.update(tier)
                        yield name, options, emulation
        else:
            # A path that reads the file while it runs reads it as gids does (--storage): a
            # baseline reading the disk beside gids reading RAM would measure the disk.
            options = {"storage": args.storage} if path.takes_storage else {}
            if name == "cpu_batch" and args.page_size:
                options["page_size"] = args.page_size
            yield name, options, None


def _tiers(args) -> list[dict]:
    """The host tier options of each run: every ranking in every mode, except that a tier of
    every page in copy or direct mode is the same whatever the ranking (only split mode's
    preload follows it): that one runs with the first ranking only."""
    fraction = args.host_tier_fraction or 0.25
    return [{"host_tier": method, "host_tier_fraction": fraction, "host_tier_mode": mode}
            for k, method in enumerate(args.host_tier)
            for mode in args.host_tier_mode or ["copy"]
            if k == 0 or fraction < 1 or mode == "split"]


def _emulations(args):
    """The emulated SSD arrays asked for (a :class:`UsageError` where the options are wrong,
    these or the host tier's)."""
    if args.host_tier is None and (args.host_tier_fraction is not None
                                   or args.host_tier_mode is not None):
        raise UsageError("--host-tier-fraction and --host-tier-mode need --host-tier "
                         "(degree or pagerank)")
    try:
        return emulations(args, any(DATA_PATHS[name].runtime for name in args.data_path))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _traced(options: dict, trace: TraceRecorder) -> dict:
    """``options`` for :func:`open_device_graph`, its Runtime recording to the trace's next
    part when ``--trace`` is given (the JSON record keeps ``options`` without it)."""
    part = trace()
    if part is None or "cache_fraction" not in options:
        return options
    return {**options, "runtime_options": {**options.get("runtime_options", {}), "trace": part}}


def _world() -> str:
    return ("CUDA simulator: times are simulator figures (Python threads), not GPU ones"
            if gids.SIMULATOR else "GPU")


def _fmt_rate(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.3g}"


def _cache_cells(dg) -> tuple[str, str]:
    src = dg.source
    if src.cache_fraction is None:
        return "-", "-"
    return f"{src.cache_fraction:.0%}", str(getattr(src, "cache_pages", "-"))


def _write_json(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    _say(f"wrote {path}")


def _finish(args, report: dict, emulated: bool, failed: int, failure: str) -> int:
    """A command's end after its table: the emulation note, the JSON report, and status 1 with
    ``FAILED: <failed> <failure>`` where runs failed."""
    if emulated:
        print(EMULATION_NOTE)
    if args.json:
        _write_json(args.json, report)
    if failed:
        print(f"FAILED: {failed} {failure}")
        return 1
    return 0


# ---------------------------------------------------------------------------------- bfs
def _slowest_level(r) -> str:
    """``", slowest level L: S s, V vertices"`` of a search (its JSON has every level)."""
    if not r.level_seconds:
        return ""
    level = int(np.argmax(r.level_seconds))
    return (f", slowest level {level}: {r.level_seconds[level]:.4f} s, "
            f"{r.level_vertices[level]:,} vertices")


def _warm_up_search(dg, label: str, root: int, direction: str) -> None:
    """One search from ``root`` before the timed ones, untimed and unvalidated.

    Every path's first search pays one-time costs that are not traversal: the first GPU touch
    of a buffer (zero-copy's first search of a scale-24 graph ran at a quarter of its later
    ones, cpu_batch's at a seventh). And with ``--warm-cache`` it is what
    makes the first timed search warm: the cache then holds what a whole search read.
    """
    r = dg.bfs(root, direction=direction)
    ios = (r.stats or {}).get("ios")
    _say(f"bfs {label}: warm-up search from root {root} (untimed): {r.seconds:.4f} s"
         f"{'' if ios is None else f', {ios:,} I/Os'}")


def _bfs_run(args, graph, roots, name: str, options: dict, emulation,
             trace: TraceRecorder) -> tuple[dict, list[str], int]:
    """All searches of one data path and cache size: its JSON record, table row, failures."""
    failed = 0
    searches = []
    with open_device_graph(graph, name, cold_cache=not args.warm_cache,
                           **_traced(options, trace)) as dg:
        label = dg.source.label
        cache_pct, pages = _cache_cells(dg)
        engine = engine_record(getattr(dg.source, "runtime", None), options.get("storage"))
        if roots.size:
            _warm_up_search(dg, label, int(roots[0]), args.direction)
        for i, root in enumerate(roots.tolist()):
            r = dg.bfs(root, direction=args.direction)
            valid = None
            if args.validate != "none":
                try:
                    validate_bfs_result(graph, r, against_scipy=args.validate == "scipy")
                    valid = True
                except (BFSValidationError, ReferenceMismatchError) as exc:
                    valid = False
                    failed += 1
                    _say(f"  INVALID: {exc}")
            _say(f"bfs {label}: root {i + 1}/{roots.size} ({root}): {r.seconds:.4f} s, "
                 f"{r.traversed_edges:,} edges, {r.teps:.3g} TEPS, depth {r.depth} [{r.steps}]"
                 f"{_slowest_level(r)}{_miss_path(r.stats)}"
                 f"{'' if valid is None else ' valid' if valid else ' INVALID'}")
            searches.append({"root": root, "seconds": r.seconds,
                             "traversed_edges": r.traversed_edges, "teps": r.teps,
                             "depth": r.depth, "steps": r.steps, "valid": valid, "stats": r.stats,
                             "level_seconds": r.level_seconds,
                             "level_vertices": r.level_vertices})
    edges = [s["traversed_edges"] for s in searches]
    times = [s["seconds"] for s in searches]
    teps = (dataclasses.asdict(teps_statistics(edges, times)) if all(e > 0 for e in edges)
            else None)
    ios = [s["stats"]["ios"] for s in searches if s["stats"] and "ios" in s["stats"]]
    hits = [s["stats"]["hit_rate"] for s in searches if s["stats"] and "hit_rate" in s["stats"]]
    tiered = "host_tier" in options

    def per_search(key):
        values = [s["stats"][key] for s in searches if s["stats"] and key in s["stats"]]
        return f"{np.mean(values):,.0f}" if tiered and values else "-"

    record = {"data_path": name, "label": label, "options": dict(options),
              "emulation": emulation_record(emulation), **engine, "teps": teps,
              "searches": searches}
    rate = lambda key: _fmt_rate(teps[key] if teps else None)   # noqa: E731
    tier = (f"{options['host_tier_fraction']:.0%} {options['host_tier']}, "
            f"{options['host_tier_mode']}" if tiered else "-")
    row = [name, emulation_cell(record["emulation"]), engine_cell(engine), cache_pct, pages,
           tier, str(len(searches)),
           rate("harmonic_mean_TEPS"), rate("min_TEPS"), rate("median_TEPS"), rate("max_TEPS"),
           f"{np.mean(times):.4f}",
           f"{np.mean(ios):,.0f}" if ios else "-", f"{np.mean(hits):.1%}" if hits else "-",
           per_search("tier_hits"), per_search("tier_direct"),
           "-" if args.validate == "none" else f"{sum(bool(s['valid']) for s in searches)}/"
                                                f"{len(searches)}"]
    return record, row, failed


#: Under the table where a run had a host tier: what its two columns count.
TIER_NOTE = ("tier copies: GPU-cache misses served by copying the page from the host tier "
             "(no file read); tier direct: lookups whose page was read in place in the host "
             "tier, taking no GPU slot (one per page and warp; hit rate leaves them out)")


def cmd_bfs(args) -> int:
    """Run ``gids bfs``; returns the exit status (0, 1 if a search was invalid, 2 on error)."""
    arrays = _emulations(args)
    if gids.SIMULATOR:
        sys.setswitchinterval(1e-4)   # host <-> simulated-kernel handshakes go faster
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, TraceRecorder(args.trace) as trace:
        try:
            graph = _open_graph(args, tmp)
            roots = _roots(args, graph)
            report = {"command": "bfs", "world": _world(), "simulator": gids.SIMULATOR,
                      "graph": _graph_info(graph),
                      "config": {"roots": roots.tolist(), "direction": args.direction,
                                 "validate": args.validate, "warm_cache": args.warm_cache,
                                 "emulations": [e.as_json() for e in arrays]},
                      "runs": []}
            rows, failed = [], 0
            for name, options, emulation in _runs(args, arrays):
                record, row, bad = _bfs_run(args, graph, roots, name, options, emulation, trace)
                report["runs"].append(record)
                rows.append(row)
                failed += bad
        except (GraphFormatError, gids.GidsError, OSError) as exc:
            raise UsageError(str(exc)) from None
    info = report["graph"]
    print(f"gids bfs on {_world()}")
    print(f"graph: {info['n_vertices']:,} vertices, {info['n_input_edges']:,} input edges, "
          f"{info['n_entries']:,} entries ({info['neighbour_bytes']:,} bytes of neighbours); "
          f"{roots.size} roots, {args.direction}, cache {'warm' if args.warm_cache else 'cold'} "
          "at each search")
    print(table(["data path", "SSDs", "engine", "cache", "pages", "host tier", "searches",
                 "hmean TEPS", "min TEPS", "median TEPS", "max TEPS", "mean s", "I/Os/search",
                 "hit rate", "tier copies/search", "tier direct/search", "valid"], rows))
    if any(r[-3] != "-" for r in rows):
        print(TIER_NOTE)
    return _finish(args, report, bool(arrays), failed, "search(es) broke a validation rule")


# ---------------------------------------------------------------------------------- cc
def _cc_run(args, graph, expected, name: str, options: dict, emulation,
            trace: TraceRecorder) -> tuple[dict, list[str], bool]:
    """Components through one data path and cache size: JSON record, table row, validity."""
    with open_device_graph(graph, name, cold_cache=not args.warm_cache,
                           **_traced(options, trace)) as dg:
        # One untimed run first, as for bfs (_warm_up_search): first-touch costs out of the
        # timed run, and with --warm-cache a cache that holds what a whole run read.
        dg.connected_components()
        r = dg.connected_components()
        cache_pct, pages = _cache_cells(dg)
        engine = engine_record(getattr(dg.source, "runtime", None), options.get("storage"))
    valid = None
    if args.validate == "reference":
        valid = bool(np.array_equal(r.labels, expected))
        if not valid:
            _say(f"  INVALID: labels differ from the CPU reference at "
                 f"{int(np.count_nonzero(r.labels != expected)):,} vertices")
    elif args.validate == "scipy":
        try:
            validate_cc_result(graph, r)
            valid = True
        except ComponentsMismatchError as exc:
            valid = False
            _say(f"  INVALID: {exc}")
    verdict = "" if valid is None else " valid" if valid else " INVALID"
    _say(f"cc {r.data_path}: {r.seconds:.4f} s, {r.n_components:,} components, "
         f"{r.edges_per_second:.3g} edges/s{verdict}")
    record = {"data_path": name, "label": r.data_path, "options": dict(options),
              "emulation": emulation_record(emulation), **engine, "seconds": r.seconds,
              "n_components": r.n_components,
              "edges_per_second": r.edges_per_second, "valid": valid, "stats": r.stats}
    s = r.stats or {}
    row = [name, emulation_cell(record["emulation"]), engine_cell(engine), cache_pct, pages,
           f"{r.seconds:.4f}",
           _fmt_rate(r.edges_per_second), f"{r.n_components:,}",
           f"{s['ios']:,}" if "ios" in s else "-",
           f"{s['hit_rate']:.1%}" if "hit_rate" in s else "-",
           "-" if valid is None else "yes" if valid else "NO"]
    return record, row, valid


def _miss_path(stats) -> str:
    """``; misses: mean I/O .. us, mean miss .. us`` from a Runtime's stats, else ``""``: where a
    search through gids spent its misses' time (see gids.Stats), and what the host tier
    served."""
    if not stats or "io_latency_us" not in stats:
        return ""
    tier = ""
    if stats.get("tier_hits") or stats.get("tier_direct"):
        tier = (f"; host tier: {stats['tier_hits']:,} pages copied, {stats['tier_direct']:,} "
                "read in place")
    if "preloaded_pages" in stats:
        tier += (f" ({stats['preloaded_pages']:,} pages preloaded in "
                 f"{stats['preload_seconds']:.3f} s, untimed)")
    if not stats.get("misses"):
        return tier
    return (f"; {stats['misses']:,} misses, {stats['ios']:,} I/Os: mean I/O "
            f"{stats['io_latency_us']:.1f} us, mean miss {stats['miss_latency_us']:.1f} us, "
            f"{stats['slot_retries']:,} slot retries{tier}")


def cmd_cc(args) -> int:
    """Run ``gids cc``; returns the exit status (0, 1 if a result was wrong, 2 on error)."""
    arrays = _emulations(args)
    if gids.SIMULATOR:
        sys.setswitchinterval(1e-4)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, TraceRecorder(args.trace) as trace:
        try:
            graph = _open_graph(args, tmp)
            expected = None
            if args.validate == "reference":
                _say("computing the CPU reference components")
                expected = connected_components_reference(graph)
            report = {"command": "cc", "world": _world(), "simulator": gids.SIMULATOR,
                      "graph": _graph_info(graph),
                      "config": {"validate": args.validate, "warm_cache": args.warm_cache,
                                 "emulations": [e.as_json() for e in arrays]},
                      "runs": []}
            rows, failed = [], 0
            for name, options, emulation in _runs(args, arrays):
                record, row, valid = _cc_run(args, graph, expected, name, options, emulation,
                                             trace)
                report["runs"].append(record)
                rows.append(row)
                failed += valid is False
        except (GraphFormatError, gids.GidsError, OSError) as exc:
            raise UsageError(str(exc)) from None
    info = report["graph"]
    print(f"gids cc on {_world()}")
    print(f"graph: {info['n_vertices']:,} vertices, {info['n_input_edges']:,} input edges, "
          f"{info['n_entries']:,} entries ({info['neighbour_bytes']:,} bytes of neighbours)")
    print(table(["data path", "SSDs", "engine", "cache", "pages", "seconds", "edges/s",
                 "components", "I/Os", "hit rate", "valid"], rows))
    return _finish(args, report, bool(arrays), failed, "run(s) disagree with the reference")


def main(argv=None) -> int:
    """``python -m workloads.graph.cli {bfs,cc} ...`` (the same as ``gids bfs`` / ``gids cc``)."""
    parser = ArgumentParser(prog="gids", description="GPU graph traversal through gids")
    add_bfs_arguments(parser.add_subparsers(dest="cmd", required=True))
    return run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
