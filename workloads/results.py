"""The results page: current figures, one record each, and docs/results.md rendered from them.

``docs/results/figures.json`` holds the store: the areas (their order and what each is measured
against), a short list of what changed (latest first) and one record per figure, keyed by
``(area, figure)``. ``docs/results.md`` is never edited by hand; it is rendered from the store.

    python -m workloads.results update OUT/bench.json OUT/bfs_whole.json ...   # replace figures
    python -m workloads.results render                                         # write the page
    python -m workloads.results update --change "what moved, in a line" OUT/*.json

``update`` reads what the benchmarks write (``gids bench``'s bench.json and files.json,
``gids bench prefetch``'s prefetch.json, ``gids bfs --json``, ``gids search --json``, ``gids gnn --json``, ``workloads.microbench``'s
``*_suite.json`` (rows-launch's too), ``workloads.stress --json``, ``workloads.stripe_bench --json``) or a file of records in
this module's own format (``{"figures": [record, ...]}``, see :func:`record`), replaces the
records with the same area and figure, stamps date, commit and machine, and renders the page.
A benchmark that is not read here emits records itself with :func:`record` and
:func:`write_records`. Simulator runs are refused: they are not performance figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORE = os.path.join(ROOT, "docs", "results", "figures.json")
PAGE = os.path.join(ROOT, "docs", "results.md")

FIELDS = ("area", "figure", "value", "unit", "target", "reference", "ratio", "command", "date",
          "commit", "machine")

# Area names the readers below use; the store's "areas" list gives their order and reference.
CORE, HITS, NVME, EMULATION, WORKLOADS, BFS, SEARCH = (
    "core I/O path", "hit path", "NVMe path", "emulation and replay", "workloads vs baselines",
    "BFS", "vector search")
ENGINES, GNN, WRITES = "storage engines on a real disk", "GNN training", \
    "writes, stress and GPU tests"
PREFETCH = "prefetch and window hints"
TIER = "host tier"


def record(area, figure, value, unit="", target="", reference="", ratio=None, command="",
           date=None, commit=None, machine=None):
    """One figure. ``value`` a number; ``target`` as text (">= 8 M pages/s"); ``ratio`` the
    value over its ``reference`` (named in a few words), or None. date, commit and machine are
    filled in by ``update`` where left None."""
    return {"area": area, "figure": figure, "value": value, "unit": unit, "target": target,
            "reference": reference, "ratio": ratio, "command": command, "date": date,
            "commit": commit, "machine": machine}


def write_records(path, records):
    """Write ``records`` (from :func:`record`) as a file ``update`` reads."""
    with open(path, "w") as f:
        json.dump({"figures": list(records)}, f, indent=1)
        f.write("\n")


# ------------------------------------------------------------------ the store

def load(path=STORE):
    with open(path) as f:
        return json.load(f)


def save(store, path=STORE):
    with open(path, "w") as f:
        json.dump(store, f, indent=1, ensure_ascii=False)
        f.write("\n")


def merge(store, records):
    """Replace the store's records of the same (area, figure) by ``records``, in place; new
    figures go after their area's last one. Returns the keys added (not replaced)."""
    figures = store["figures"]
    index = {(r["area"], r["figure"]): i for i, r in enumerate(figures)}
    added = []
    for r in records:
        missing = [k for k in FIELDS if k not in r]
        if missing:
            raise ValueError(f"record {r.get('figure')!r} lacks {', '.join(missing)}")
        key = (r["area"], r["figure"])
        if key in index:
            figures[index[key]] = r
            continue
        if r["area"] not in [a["name"] for a in store["areas"]]:
            store["areas"].append({"name": r["area"], "reference": ""})
        last = max((i for i, f in enumerate(figures) if f["area"] == r["area"]), default=-1)
        pos = last + 1 if last >= 0 else len(figures)
        figures.insert(pos, r)
        index = {(f["area"], f["figure"]): i for i, f in enumerate(figures)}
        added.append(key)
    return added


# ------------------------------------------------------------------ the page

def _num(x):
    """A number as the page shows it: four significant digits, 1.07e10 rather than 1.07e+10."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if x == int(x) and abs(x) < 1e6 or 1e3 <= abs(x) < 1e6:
        return f"{x:,.0f}"
    return f"{x:.4g}".replace("e+0", "e").replace("e+", "e")


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(store):
    """docs/results.md's text: the same store always gives the same page."""
    out = ["# Results", "",
           "The current figures, one table per area. The page is generated: "
           "`python -m workloads.results update OUT/*.json` takes what the benchmarks write, "
           "`python -m workloads.results render` writes this page from "
           "`docs/results/figures.json` (record format: docs/formats.md, \"Results records\"). "
           "GPU figures are from one NVIDIA H200 (16 host cores, PCIe gen 5); the machine column "
           "says where each figure was measured. Simulator runs are never figures. "
           "Why the code is shaped as it is: docs/design-notes.md. Older figures and their "
           "raw files are in the git history.", ""]
    if store.get("changes"):
        out += ["## What changed", ""]
        out += [f"- {c}" for c in store["changes"]]
        out.append("")
    for area in store["areas"]:
        rows = [r for r in store["figures"] if r["area"] == area["name"]]
        if not rows:
            continue
        out += [f"## {area['name'][0].upper()}{area['name'][1:]}", ""]
        if area.get("reference"):
            out += [f"Reference: {area['reference']}", ""]
        out += ["| figure | value | target | ratio to reference | machine | command | date | commit |",
                "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            unit = r["unit"] if r["unit"] in ("", "x") else " " + r["unit"]
            value = f"{_num(r['value'])}{unit}"
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}x {r['reference']}".strip()
            command = f"`{r['command']}`" if r["command"] else "-"
            commit = f"`{r['commit']}`" if r["commit"] else "-"
            out.append("| " + " | ".join(_cell(c) for c in (
                r["figure"], value, r["target"] or "-", ratio, r["machine"] or "-", command,
                r["date"] or "-", commit)) + " |")
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------ reading the benchmarks' JSON

def _array(emulation):
    """An emulated SSD array as the figures name it: "4 x p5800x"."""
    return f"{emulation['n_ssd']} x {emulation['ssd']}"


def _bench(d):
    """``gids bench`` (bench.json): its targets' ratios, the tier sweep's rows on emulated SSDs
    and the pinned copy ceiling."""
    recs = []
    for t in d.get("targets", []):
        # Issue 23's targets (the tier sweep's) have their own area; their setting names the
        # reference row, which may be gids itself over another store (on emulated drives: the
        # same drives, named at the setting's end).
        tier = t.get("sweep") == "tier"
        emu = t.get("emulation")
        for q in t["ratios"]:
            if q.get("ratio") is None:
                continue
            figure = t["setting"] if tier else f"{t['setting']}: gids / {q['path']}"
            reference = (q["path"] if emu is None
                         else f"{q['path']} over a MemoryStore on {_array(emu)}")
            recs.append(record(TIER if tier else WORKLOADS, figure, q["ratio"], "x",
                               f">= {q['least']:g}x", reference, q["ratio"],
                               d.get("command", "")))
    recs += _bench_emulated_tier(d)
    c = d.get("ceilings") or {}
    if c.get("h2d_pinned_Bps"):
        recs.append(record(WORKLOADS, "pinned host-to-device copy (the PCIe ceiling)",
                           c["h2d_pinned_Bps"] / 1e9, "GB/s", "", "", None, d.get("command", "")))
    return recs


def _bench_emulated_tier(d):
    """The tier sweep's rows on emulated SSDs (``gids bench tier --ssd``): requests/s of each,
    so the page shows what the host tier is worth with drives behind it (a MemoryStore, the
    page-cached file without a tier, with a static tier, with a victim-filled one)."""
    recs = []
    for r in d.get("results", []):
        emu = r.get("emulation")
        if (r["sweep"], r["workload"]) != ("tier", "zipf") or emu is None or not r["correct"] \
                or not r["requests_per_s"]:
            continue
        p = r["params"]
        store = {"memory": "MemoryStore", "cached": "page-cached file"}.get(p["store"],
                                                                         p["store"])
        tier = (f"host tier {100 * r['x']:.3g} %"
                + (" filled by evictions" if p.get("tier_fill") == "victims" else "")
                if r["x"] else "no tier")
        size = p["request_bytes"]
        size = f"{size >> 10} KiB" if size % 1024 == 0 else f"{size} B"
        recs.append(record(TIER, f"Zipf(0.99) {size} reads, {store}, GPU cache "
                                 f"{100 * p['cache_fraction']:.3g} %, {tier}, on "
                                 f"{_array(emu)} (emulated): requests/s",
                           r["requests_per_s"], "requests/s", "", "", None,
                           d.get("command", "")))
    return recs


def _hmean(run):
    return run["teps"]["harmonic_mean_TEPS"]


def _bfs(d):
    """``gids bfs --json``: gids at 25 % (cold) against zero-copy and the CPU batch path; gids
    with the whole graph cached against the mean of the GPU-memory runs beside it."""
    scale = (d.get("graph", {}).get("metadata") or {}).get("scale", "?")
    cmd = d.get("command_line") or "python -m workloads.gpu_session bfs-targets"
    tiered = [r for r in d["runs"] if r["options"].get("host_tier")]
    runs = [r for r in d["runs"] if not r["options"].get("host_tier")]
    by = lambda path, frac=None: [r for r in runs if r["data_path"] == path and (  # noqa: E731
        frac is None or r["options"].get("cache_fraction") == frac)]
    recs = _bfs_tier(scale, tiered, by("zero_copy"), cmd)
    quarter = by("gids", 0.25)
    if quarter:
        g = _hmean(quarter[0])
        recs.append(record(BFS, f"scale {scale}, gids cache 25 %, cold: TEPS", g, "TEPS", "",
                           "", None, cmd))
        for path, least, name in (("zero_copy", 0.8, "zero-copy"),
                                  ("cpu_batch", 1.5, "CPU batch")):
            if by(path):
                recs.append(record(BFS, f"scale {scale}, cache 25 %, cold: gids / {name}",
                                   g / _hmean(by(path)[0]), "x", f">= {least:g}x", name,
                                   g / _hmean(by(path)[0]), cmd))
    whole, memory = by("gids", 1.0), by("memory")
    if whole and memory:
        g = _hmean(whole[0])
        m = sum(_hmean(r) for r in memory) / len(memory)
        recs.append(record(BFS, f"scale {scale}, whole graph cached, warm: TEPS", g, "TEPS",
                           "", "", None, cmd))
        recs.append(record(BFS, f"scale {scale}, whole graph cached, warm: gids / GPU memory",
                           g / m, "x", ">= 0.70x", "GPU memory", g / m, cmd))
    return recs


def _bfs_tier(scale, tiered, zero_copy, cmd):
    """gids with a host tier (``--host-tier``) against zero-copy over RAM (issue 23); under
    real-time SSD emulation, the TEPS alone (beside the BFS area's emulated rows)."""
    recs = []
    for r in tiered:
        o = r["options"]
        emu = r.get("emulation")
        # Copy mode's figures keep the names they had before the other modes.
        mode = o.get("host_tier_mode", "copy")
        what = (f"scale {scale}, gids cache {100 * o['cache_fraction']:.3g} % + host tier "
                f"{100 * o['host_tier_fraction']:.3g} % by {o['host_tier']}"
                + ("" if mode == "copy" else f" ({mode})") + ", "
                f"{o.get('storage', 'file')} store, cold"
                + (f", emulated {emu['n_ssd']} x {emu['ssd']}" if emu else ""))
        g = _hmean(r)
        recs.append(record(TIER, f"{what}: TEPS", g, "TEPS", "", "", None, cmd))
        if zero_copy and not emu:
            z = _hmean(zero_copy[0])
            recs.append(record(TIER, f"{what}: gids / zero-copy", g / z, "x", ">= 1.2x",
                               "zero-copy over RAM", g / z, cmd))
    return recs


def _search(d):
    """``gids search --json``: at the smallest nprobe whose gids recall is >= 0.95."""
    cmd = d.get("command", "").replace("/work/main/gids/cli.py", "gids")
    ok = sorted(r["nprobe"] for r in d["rows"] if r["data_path"] == "gids" and r["recall"] >= 0.95)
    if not ok:
        return []
    # A run in query batches (--query-batch) is figures of its own, with or without prefetch.
    if d.get("query_batch"):
        n = f"{ok[0]}, query batches of {d['query_batch']}, " + (
            "the next prefetched" if d.get("prefetch") else "no prefetch")
    else:
        n = ok[0]
    at = {r["data_path"]: r for r in d["rows"] if r["nprobe"] == ok[0]}
    g = at["gids"]["qps"]
    recs = [record(SEARCH, f"gids QPS, nprobe {n}", g, "QPS", "recall >= 0.95", "", None, cmd),
            record(SEARCH, f"recall@{d.get('recall_at', 10)}, nprobe {n}", at["gids"]["recall"],
                   "", ">= 0.95", "", None, cmd)]
    faiss = {f["nprobe"]: f for f in d.get("faiss") or []}
    for name, qps, least in (("faiss-cpu IVF-Flat", faiss.get(ok[0], {}).get("qps"), 5.0),
                             ("GPU memory", at.get("memory", {}).get("qps"), 0.5),
                             ("CPU batch", at.get("cpu_batch", {}).get("qps"), 1.2)):
        if qps:
            recs.append(record(SEARCH, f"gids / {name}, nprobe {n}", g / qps, "x",
                               f">= {least:g}x", name, g / qps, cmd))
    return recs


def _hits(d):
    cmd = d.get("meta", {}).get("command", "python -m workloads.microbench hits")
    recs = [record(HITS, "all-hit random 8 B gids.read / plain gather", d["random"]["ratio"], "x",
                   ">= 0.30x", "plain gather", d["random"]["ratio"], cmd)]
    p4 = d.get("paged_sequential_4")
    if p4:
        recs.append(record(HITS, "coalesced sequential hits, pin_page 4 pages a warp call / "
                           "plain read", p4["ratio"], "x", ">= 0.60x", "plain read", p4["ratio"],
                           cmd))
    return recs


def _latency(d):
    rows = [r for r in d["rows"] if r["variant"] == "defaults"]
    if not rows:
        return []
    p50 = rows[0]["zero_copy"]["p50_us"]
    return [record(CORE, "QD1 miss latency, median", p50, "us", "<= 10 us", "", None,
                   "python -m workloads.microbench latency")]


def _gpu_tests(d):
    """``python -m workloads.gpu_tests`` (gpu_tests.json): tests passed of those run, one
    process per file; a file that timed out or crashed counts as its tests not passed."""
    run = sum(r.get("passed", 0) + r.get("failed", 0) + r.get("error", 0) for r in d["files"])
    broken = [r["file"] for r in d["files"] if r["exit"] not in (0, 1, 5)]
    note = f"; files that did not finish: {', '.join(broken)}" if broken else ""
    passed = d.get("passed", 0)
    return [record(WRITES, "GPU tests passed, one process per file", passed, "",
                   "all", f"{run} run{note}", passed / run if run else None,
                   "python -m workloads.gpu_tests")]


def _rows_launch(d):
    """``microbench rows-launch`` (rows_launch_suite.json): the host's microseconds per
    ``gather_rows`` call of the largest gather, each setting, against ``torch.index_select``."""
    size = max(r["rows"] for r in d["rows"])
    rows = [r for r in d["rows"] if r["rows"] == size and r["correct"]]
    ref = next((r for r in rows if r["case"].startswith("torch.index_select")), None)
    cmd = (d.get("meta") or {}).get("command", "python -m workloads.microbench rows-launch")
    out = []
    for r in rows:
        if r is ref:
            continue
        ratio = r["host_us_median"] / ref["host_us_median"] if ref else None
        out.append(record(GNN, f"host us per call, {size:,} rows: {r['case']}",
                          r["host_us_median"], "us", "", "torch.index_select's host us", ratio,
                          cmd))
    return out


def _misses(d):
    rows = [r for r in d["rows"] if r.get("backend") == "host" and r.get("zero_copy")
            and not r.get("per_warp") and r.get("ssd") is None]
    if not rows:
        return []
    best = max(rows, key=lambda r: r["Mpages_per_s"])
    return [record(CORE, "all-miss random 4 KiB pages from a RAM store", best["Mpages_per_s"],
                   "M pages/s", ">= 8 M pages/s", "", None, "python -m workloads.microbench misses")]


def _emulation(d):
    return [record(EMULATION, f"replay / wall time, {r.get('profile', 'pm1743')} x{r['n_ssd']}",
                   r["ratio"], "", "within 15 %", "", None,
                   "python -m workloads.microbench emulation") for r in d["rows"]]


def _nvme(d):
    best = max(d["all_miss_nvme"], key=lambda r: r["Mpages_per_s"])
    return [record(NVME, "direct NVMe path, all-miss 4 KiB, ideal profile", best["Mpages_per_s"],
                   "M commands/s", ">= 5 M commands/s", "", None,
                   "python -m workloads.microbench nvme")]


def _files(d):
    """``gids bench files`` (files.json): each engine against the disk's ceiling, the page
    cache against the MemoryStore copy, emulated drives against their model and against the
    host's own ceiling (what bounds them). From version 2 on, each O_DIRECT row's fraction is
    its own, of the disk probed around each of its runs (``of_ceiling``); from version 3 on, of
    the disk's best way of reading over the run at each probe (``ceiling_way``), with the
    fastest way at each probe (``of_ceiling_max``) beside the targets' rows; from version 5
    on, the io_uring rows' over every run of their rounds; a version 1 file's rows are read
    against the one ceiling it measured."""
    cmd = re.sub(r" --out \S+", "", d.get("command", "gids bench files"))
    rows = d["rows"]
    ceiling = d.get("ceiling_pages_per_s") or max(r["pages_per_s"] for r in rows
                                                  if r["kind"] == "ceiling")
    bracketed = d.get("version", 1) >= 2
    way = d.get("ceiling_way")
    disk = ("the disk's ceiling" + (f" ({way}, its best way over the run)" if way else "")
            + (", probed around each run (median)" if bracketed else ""))

    def of_disk(r):
        return r.get("of_ceiling") if bracketed else r["pages_per_s"] / ceiling
    probed = len(d.get("probes") or [])
    recs = [record(ENGINES, "the disk's ceiling, 4 KiB random O_DIRECT reads", ceiling / 1e3,
                   "k IOPS", "", f"the median of {probed} probes between the runs"
                   if probed else "", None, cmd)]
    probe = d.get("probe_pages_per_s")
    if probe:
        recs.append(record(ENGINES, "probe: the engine alone, one thread's ring at depth, no GPU",
                           probe / 1e3, "k IOPS", "", "the disk's ceiling", probe / ceiling, cmd))
    ways = [p.get("ways") for p in d.get("probes") or []]
    if way and all(ways) and "io_uring x1" in ways[0] and way != "io_uring x1":
        # The same probes, each way read beside the other: how much the disk's best way gets
        # over one ring at depth, without the disk's swings between probes.
        paired = statistics.median(w["io_uring x1"] / w[way] for w in ways)
        recs.append(record(ENGINES, f"probe: one thread's ring at depth / {way}, read in turn "
                           "at each probe", paired, "x", "", f"{way} at the same probe (median "
                           f"of {len(ways)})", paired, cmd))
    for r in rows:
        if r["kind"] == "probe" and r.get("daemon_cpu_us_per_page") is not None:
            recs.append(record(ENGINES, "probe: its thread's CPU per page",
                               r["daemon_cpu_us_per_page"], "us", "", "", None, cmd))
        if r["kind"] == "host" and r.get("pages_per_s"):
            what = (f"the daemon driven from the host (no GPU), O_DIRECT file, {r['engine']}, "
                    f"{r['threads']} daemon thread(s)")
            if r.get("buffers", "").startswith("registered buffers: no"):
                what += f" ({r['buffers']})"
            recs.append(record(ENGINES, what, r["pages_per_s"] / 1e3, "k pages/s", "",
                               disk, of_disk(r), cmd))
            if r.get("daemon_cpu_us_per_page") is not None:
                recs.append(record(ENGINES, f"{what}: daemon CPU per page",
                                   r["daemon_cpu_us_per_page"], "us", "", "", None, cmd))
    direct = {(r["engine"], r["threads"]): r for r in rows if r["kind"] == "direct"}
    most = max((t for e, t in direct if e == "io_uring"), default=None)
    for engine, threads, target in (("io_uring", 1, ">= 0.90x"), ("io_uring", most, ">= 0.95x"),
                                    ("threads", 1, ""), ("threads", most, "")):
        r = direct.get((engine, threads))
        if r and r.get("pages_per_s"):
            what = f"gids all-miss from an O_DIRECT file, {engine}, {threads} daemon thread(s)"
            runs = (f", of {len(r['rep_pages_per_s'])} runs in {r['rounds']} rounds"
                    if r.get("rounds", 1) > 1 else "")
            recs.append(record(ENGINES, what, r["pages_per_s"] / 1e3, "k pages/s",
                               target, disk + runs, of_disk(r), cmd))
            if target and r.get("of_ceiling_max") is not None and way:
                recs.append(record(ENGINES, f"{what}, of the fastest way at each probe",
                                   r["pages_per_s"] / 1e3, "k pages/s", "",
                                   "the largest of the ways' noisy rates at each probe (reads "
                                   "high), around each run (median)", r["of_ceiling_max"], cmd))
            if r.get("of_probe") is not None:
                recs.append(record(ENGINES, f"{what}, of the probe", r["pages_per_s"] / 1e3,
                                   "k pages/s", "", "probe x threads (at most the ceiling)"
                                   + (", around each run" if probed else ""), r["of_probe"],
                                   cmd))
            for key, figure, unit in (("engine_io_us", "engine I/O time (taken to CQE)", "us"),
                                      ("gpu_io_us", "GPU I/O time (published to seen)", "us"),
                                      ("in_flight_peak", "peak in flight per thread", ""),
                                      ("daemon_cpu_us_per_page", "daemon CPU per page", "us")):
                if r.get(key) is not None:
                    recs.append(record(ENGINES, f"{what}: {figure}", r[key], unit, "", "", None,
                                       cmd))
    for r in rows:   # the same without registered buffers, beside the row that had them
        if r["kind"] == "direct plain buffers" and r.get("pages_per_s"):
            what = (f"gids all-miss from an O_DIRECT file, {r['engine']}, {r['threads']} daemon "
                    "thread(s), plain buffers (engine_fixed_buffers=0)")
            recs.append(record(ENGINES, what, r["pages_per_s"] / 1e3, "k pages/s", "",
                               disk, of_disk(r), cmd))
            if r.get("daemon_cpu_us_per_page") is not None:
                recs.append(record(ENGINES, f"{what}: daemon CPU per page",
                                   r["daemon_cpu_us_per_page"], "us", "", "", None, cmd))
    if bracketed:   # registered against plain buffers, each as a fraction of its own probes
        pairs = (("host", "host", "driven from the host (no GPU)"),
                 ("direct", "direct plain buffers", "through the GPU"))
        for fixed_kind, plain_kind, how in pairs:
            fixed = next((r for r in rows if r["kind"] == fixed_kind and r["threads"] == 1
                          and r.get("buffers") == "registered buffers: yes"), None)
            plain = next((r for r in rows if r["kind"] == plain_kind and r["threads"] == 1
                          and (r.get("buffers") or "").startswith("registered buffers: no")),
                         None)
            if fixed and plain and fixed.get("of_ceiling") and plain.get("of_ceiling"):
                ratio = fixed["of_ceiling"] / plain["of_ceiling"]
                recs.append(record(ENGINES, f"io_uring, 1 daemon thread, {how}: registered "
                                   "buffers / plain buffers, each of the disk around its runs",
                                   ratio, "x", "", "plain buffers", ratio, cmd))
    cached = {r["engine"]: r for r in rows if r["kind"] == "cached"}
    if "memcpy" in cached:
        for engine in ("io_uring", "threads"):
            r = cached.get(engine)
            if r:
                recs.append(record(ENGINES, f"page-cached file, {engine}, {r['threads']} threads",
                                   r["pages_per_s"] / 1e6, "M pages/s",
                                   ">= 0.8x" if engine == "io_uring" else "",
                                   "MemoryStore copy, paired in each round",
                                   r.get("of_memory") or r["pages_per_s"] /
                                   cached["memcpy"]["pages_per_s"], cmd))
    for r in rows:
        if r["kind"] == "emulated" and r.get("pages_per_s"):   # a row that failed: no figure
            target = ">= 0.90x" if r["engine"] == "io_uring" and r["n_ssd"] == 1 else ""
            what = f"emulated {r['profile']} x{r['n_ssd']}, {r['engine']}, {r['threads']} threads"
            recs.append(record(ENGINES, what, r["pages_per_s"] / 1e3, "k pages/s",
                               target, "the model at that concurrency", r["of_model"], cmd))
            if r.get("of_host") is not None:   # version 2: what bounds it
                recs.append(record(ENGINES, f"{what}, of the host's ceiling",
                                   r["pages_per_s"] / 1e3, "k pages/s", "",
                                   f"no model, same engine and threads (bound: {r['bound']})",
                                   r["of_host"], cmd))
        if r["kind"] == "host emulated" and r.get("ssd") and r.get("pages_per_s"):
            what = (f"emulated {r['profile']} x{r['n_ssd']}, {r['engine']}, {r['threads']} "
                    "threads, driven from the host (no GPU)")
            recs.append(record(ENGINES, what, r["pages_per_s"] / 1e3, "k pages/s", "",
                               "the model at that concurrency", r["of_model"], cmd))
            recs.append(record(ENGINES, f"{what}, of the host's ceiling",
                               r["pages_per_s"] / 1e3, "k pages/s", "",
                               f"no model, same engine and threads (bound: {r['bound']})",
                               r["of_host"], cmd))
    kvikio = next((r for r in rows if r["kind"] == "kvikio"), None)
    if kvikio and kvikio.get("pages_per_s") and direct.get(("io_uring", most)):
        g = direct[("io_uring", most)]["pages_per_s"]
        recs.append(record(ENGINES, "KvikIO (POSIX compat mode), one pread future a page",
                           kvikio["pages_per_s"] / 1e3, "k pages/s", "", "", None, cmd))
        recs.append(record(ENGINES, f"gids io_uring, {most} threads / KvikIO", g /
                           kvikio["pages_per_s"], "x", "", "KvikIO", g / kvikio["pages_per_s"],
                           cmd))
    return recs


def _stress(d):
    """``workloads.stress --json``: operations/s and mismatches of the write stress run."""
    engine = d.get("engine", "threads")
    bad = d["bad_own_reads"] + d["bad_reads"] + d["file_mismatches"]
    ops = d["writes"] + d["reads"]
    # The JSON's ``seconds`` is the requested run; ``run_s`` its rounds after the first.
    seconds = d.get("seconds") or round(d["run_s"])
    cmd = (f"python -m workloads.stress --seconds {seconds:g} --file-gib "
           f"{d['file_bytes'] / (1 << 30):g} --cache-fraction {d['cache_fraction']:.2g} "
           f"--engine {engine}")
    ops_after_first = ops * (d["rounds"] - 1) / d["rounds"] if d.get("rounds") else ops
    return [record(WRITES, f"stress run ({engine} engine): operations/s after the first round",
                   ops_after_first / d["run_s"] / 1e6, "M ops/s", "", "", None, cmd),
            record(WRITES, f"stress run ({engine} engine): mismatches (own writes, reads, file) "
                   "and hangs", bad + d.get("hangs", 0), "", "0", "", None, cmd)]


def _stripe(d):
    """``workloads.stripe_bench --json``: striped over N files against one file."""
    cmd = re.sub(r" --(json|dir) \S+", "", d.get("command", "python -m workloads.stripe_bench"))
    recs = []
    for r in d["results"]:
        if r["layout"] != "one file":
            recs.append(record(ENGINES, f"{r['layout']} on one disk, {r['daemon_threads']} "
                               f"daemon thread(s): pages/s / one file", r["vs_one_file"], "x", "",
                               "one file", r["vs_one_file"], cmd))
    return recs


def _gnn(d):
    """``gids gnn --json``: the feature gather alone (rows/s) or the training epoch's time,
    gids against the mmap loader, zero-copy, GPU memory and the O_DIRECT loader; rows under
    emulated drives (labels ending "on N x PROFILE") against the direct loader on the same
    drives and the mmap loader; the direct loader's own rate on the machine's disk."""
    cmd = re.sub(r" --(json|dir) \S+", "", d.get("command", "gids gnn"))
    cmd = re.sub(r"^\S*gids/(cli|__main__)\.py", "gids", cmd)
    rows = {r["label"]: r for r in d["rows"]}
    arrays = sorted({f" on {r['emulation']['n_ssd']} x {r['emulation']['ssd']}"
                     for r in d["rows"] if r.get("emulation")})
    scale = d["scale"]
    recs = []
    if d.get("mode") == "gather":
        # A run with resident first forced on is its own figure (the default, one launch, and
        # "auto", which picks one launch for gathers under 2**18 rows, are the plain figure).
        variant = ", resident first (GIDS_ROWS_RESIDENT_FIRST=1)" \
            if d.get("rows_resident_first") is True else ""
        if variant:     # the command alone would run the default, one launch
            cmd = f"GIDS_ROWS_RESIDENT_FIRST=1 {cmd}"
        rate = {k: r["rows_per_s"] for k, r in rows.items()}
        pairs = [("gids 25%", "mmap", ">= 3x"), ("gids 25%", "zero_copy", ">= 0.8x"),
                 ("gids 100%", "memory", ">= 0.8x"), ("gids 25%", "direct", "")]
        for on in arrays:
            pairs += [(f"gids 25%{on}", "mmap", ""), (f"gids 25%{on}", f"direct{on}", "")]
        for label, ref, target in pairs:
            if label in rate and ref in rate:
                # A store other than RAM is named: the figures are not the RAM-backed ones.
                cache = "cache" if d.get("storage", "memory") == "memory" else \
                    f"cache ({d['storage']} store)"
                gids_part = label.replace("gids 25%", f"gids 25% {cache}").replace(
                    "gids 100%", f"gids 100% {cache}")
                recs.append(record(GNN, f"feature gather, scale {scale}, {gids_part} / {ref}"
                                   f"{variant}",
                                   rate[label] / rate[ref], "x", target, ref,
                                   rate[label] / rate[ref], cmd))
        if "direct" in rows:
            threads = (rows["direct"].get("loader") or {}).get("threads", "")
            recs.append(record(GNN, f"feature gather, scale {scale}, direct loader (O_DIRECT, "
                               f"{threads} threads) on the machine's disk",
                               rate["direct"] / 1e3, "k rows/s", "", "", None, cmd))
        whole = rows.get("gids 100%", {}).get("hit_rate")
        if whole is not None:
            recs.append(record(GNN, f"feature gather, scale {scale}, gids 100% cache: hit "
                               f"rate of the timed batches{variant}", 100 * whole, "%",
                               "100 %", "", None, cmd))
        return recs
    epoch = {k: r["epochs"][-1]["epoch_s"] for k, r in rows.items()}
    pairs = [("gids 25% loader", "mmap", ">= 2x"), ("gids 100% loader", "memory", ">= 0.8x"),
             ("gids 25%", "mmap", ""), ("gids 25% loader", "direct", ""),
             ("gids 25%", "direct", "")]
    for on in arrays:
        pairs += [(f"gids 25%{on}", "mmap", ""), (f"gids 25%{on}", f"direct{on}", "")]
    note = "" if d.get("storage", "memory") == "memory" else f" ({d['storage']} store)"
    for label, ref, target in pairs:
        if label in epoch and ref in epoch:
            recs.append(record(GNN, f"epoch, scale {scale}, {label}{note} / {ref}: speed-up",
                               epoch[ref] / epoch[label], "x", target, ref,
                               epoch[ref] / epoch[label], cmd))
    return recs


def _prefetch(d):
    """``gids bench prefetch`` (prefetch.json): each loop's time per batch over max(I/O,
    compute), the next batch prefetched or held against none, per batch size; and the host's
    time in the prefetch / hold calls per batch. A version 1 file (one batch size, in its
    config) reads as its rows of that size."""
    cmd = re.sub(r" --out \S+", "", d.get("command", "gids bench prefetch"))
    size = (d.get("config") or {}).get("batch_pages")
    recs = []
    for r in d["rows"]:
        e = r.get("emulation")
        where = "RAM store" if e is None else f"emulated {e['ssd']} x{e['n_ssd']}"
        loop = f"batch loop of {r.get('batch_pages', size)} pages, compute = I/O, {where}, " \
               f"{r['mode']}"
        target = f"<= {d.get('target_vs_max', 1.15)}x" if r["mode"] != "none" else ""
        recs.append(record(PREFETCH, f"{loop}: per batch / max(I/O, compute)", r["vs_max"], "x",
                           target, "max(I/O, compute)", r["vs_max"], cmd))
        if r["mode"] != "none" and "host_calls_ms" in r and "per_batch_ms" in r:
            recs.append(record(PREFETCH, f"{loop}: host time in its calls per batch",
                               r["host_calls_ms"], "ms", "", "per batch time",
                               r["host_calls_ms"] / r["per_batch_ms"], cmd))
    return recs


def from_json(d):
    """The records a benchmark's JSON holds, by its shape (see the module's docstring)."""
    if "figures" in d:
        return [dict(r) for r in d["figures"]]
    if d.get("simulator") or d.get("world") in ("simulator",) or \
            (d.get("meta") or {}).get("gpu") == "CUDA simulator":
        raise ValueError("a simulator run: not a performance figure")
    if "schema_version" in d and "targets" in d:
        return _bench(d)
    if d.get("sweep") == "files":
        return _files(d)
    if d.get("sweep") == "prefetch":
        return _prefetch(d)
    if d.get("command") == "python -m workloads.gpu_tests" and "files" in d:
        return _gpu_tests(d)
    if "file_mismatches" in d:
        return _stress(d)
    if "results" in d and "vs_one_file" in (d["results"] or [{}])[0]:
        return _stripe(d)
    if d.get("mode") in ("gather", "train") and "fanouts" in d:
        return _gnn(d)
    if d.get("command") == "bfs" and "runs" in d:
        return _bfs(d)
    if "faiss" in d and "rows" in d:
        return _search(d)
    if "random" in d and "paged_sequential" in d:
        return _hits(d)
    if set(d) == {"all_miss_nvme"}:
        return _nvme(d)
    rows = d.get("rows") or []
    if rows and "variant" in rows[0]:
        return _latency(d)
    if rows and "host_us_median" in rows[0] and "case" in rows[0]:
        return _rows_launch(d)
    if rows and "Mpages_per_s" in rows[0]:
        return _misses(d)
    if rows and "n_ssd" in rows[0] and "ratio" in rows[0]:
        return _emulation(d)
    raise ValueError("not a JSON this command reads (bench.json, gids bfs/search --json, "
                     "microbench *_suite.json, or {\"figures\": [...]})")


def _git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def stamp(records, d, date=None, commit=None, machine=None):
    """Fill in each record's date, commit and machine where it has none: the arguments first,
    then what the benchmark's JSON says, then today, the checkout's commit, "H200"."""
    meta = {**(d.get("meta") or {}), **(d.get("machine") or {})}
    date = date or str(d.get("date") or meta.get("date") or time.strftime("%Y-%m-%d"))[:10]
    commit = commit or meta.get("commit") or _git_commit()
    gpu = meta.get("gpu") or d.get("gpu")
    machine = machine or ("H200" if gpu in (None, "NVIDIA H200") else gpu)
    for r in records:
        r["command"] = re.sub(r" --(out|json) \S+", "", r["command"])
        r["date"] = r.get("date") or date
        r["commit"] = r.get("commit") or commit
        r["machine"] = r.get("machine") or machine
    return records


# ------------------------------------------------------------------ command line

def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m workloads.results", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--store", default=STORE, help="figures file (default: docs/results/figures.json)")
    p.add_argument("--page", default=PAGE, help="page to write (default: docs/results.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("update", help="replace figures from benchmarks' JSON, then render")
    u.add_argument("files", nargs="+", metavar="FILE.json")
    u.add_argument("--commit", help="commit the figures were measured at (default: the JSON's, "
                                    "else this checkout's HEAD)")
    u.add_argument("--date", help="YYYY-MM-DD (default: the JSON's, else today)")
    u.add_argument("--machine", help="where they were measured (default: H200)")
    u.add_argument("--command", help="the command that wrote the files, for their figures' "
                                     "command column (gids bfs's JSON does not say it; the "
                                     "default there is gpu_session bfs-targets)")
    u.add_argument("--change", action="append", default=[],
                   help="a line for 'What changed' (repeatable; goes first)")
    sub.add_parser("render", help="write the page from the figures file")
    args = p.parse_args(argv)

    store = load(args.store)
    if args.cmd == "update":
        for path in args.files:
            try:
                with open(path) as f:
                    d = json.load(f)
                recs = stamp(from_json(d), d, args.date, args.commit, args.machine)
                for r in recs:
                    r["command"] = args.command or r["command"]
            except (OSError, ValueError, KeyError) as exc:
                p.exit(2, f"{p.prog}: error: {path}: {exc}\n")
            added = merge(store, recs)
            print(f"{path}: {len(recs)} figures ({len(added)} new)")
        store["changes"] = args.change + store.get("changes", [])
        save(store, args.store)
    with open(args.page, "w") as f:
        f.write(render(store))
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
