"""Everything a lent GPU should run, in stages that fit one device call each.

    python -m workloads.gpu_session --out $OUT [STAGE ...]

Stages, in order of priority (default: all, in this order):

- ``diagnose``: why the BFS and search kernels run far below the microbenchmarks over gids
  (a search once read 22 k pages/s where the all-miss benchmark serves 11 M): all-miss
  pages one per thread against one per warp (``python -m workloads.microbench misses``), then a
  small search and a small BFS, each over gids beside all-in-GPU-memory, every gids row with the
  kernels' own mean I/O latency and mean miss time (``gids.Stats``);
- ``tests``: the GPU tests (``pytest -m gpu``, one process per file: ``workloads.gpu_tests``),
  first, since every figure after them assumes the runtime reads the right values;
- ``core``: the core's GPU suite (``python -m workloads.microbench gpu-suite``): all-miss pages
  (host daemon and direct NVMe path), hits, QD1 latency, emulation replay, with the ceilings of
  the same run;
- ``hits``: issue 2's hit figures with kernel times that hold out the launch's host cost: the
  host cost of one launch (``python -m workloads.microbench launch``), the hit benchmarks
  (``microbench hits --caps 128,80,64``), the PTX load flavors (``microbench loads``);
- ``bench``: first ``gids bench workloads --quick`` over every data path, which measures issue 4's
  four targets side by side and ends its report with each ratio, met or missed (capped at
  240 s); then the other sweeps of ``gids bench --quick`` (iops, bandwidth, cache, latency);
- ``bfs``: ``gids bfs`` on a Graph500 graph over the data paths and cache sizes, and a smaller
  graph over gids and the direct NVMe path, unemulated and under real-time emulation of 1 and 4
  modelled SSDs (``--ssd p5800x --n-ssd 1,4``);
- ``bfs-warm``: the scale-24 graph with the cache holding all of it, warm, beside the
  all-in-GPU-memory path in the same run, with the traversal capped at 64 registers (the
  default for a whole cache), then at 48 and at 80;
- ``bfs-targets``: issue 5's targets side by side at scale 24: the cache at 25 % (cold) beside
  zero-copy and the CPU-initiated batch path, then the whole graph cached (warm) between two
  runs of the all-in-GPU-memory path;
- ``bfs-ssd``: issue 5's scale-24 graph through a quarter-size cache on gids and the NVMe path
  under real-time emulation of 1 and 4 modelled P5800X drives;
- ``search``: ``gids search`` on synthetic vectors over the data paths, and a smaller index over
  gids and the NVMe path, unemulated and emulated the same way;
- ``tier``: issue 23's host-tier rows (``gids bench tier``): pointer chasing through a file
  store held in the host tier (direct) vs zero-copy, Zipf GPU cache x host tier sizes vs gids
  over RAM;
- ``tier-emulated``: ``gids bench tier --ssd p5800x --n-ssd 1,4``: the tier sweep, then its
  Zipf target's rows (MemoryStore; a page-cached file with no tier, a 20 % tier, a
  victim-filled one; GPU cache 10 %) under real-time emulation of 1 and 4 P5800X drives;
- ``tier-bfs``: BFS at scale 24 through a file store, GPU cache 25 % + a host tier of every
  page, copied into the cache on a miss or (split) the top pages preloaded in the cache and the
  rest read in place from the tier, vs zero-copy over RAM;
- ``tier-ssd``: a GPU cache of 25 % and a host tier of 75 % (copy) under real-time emulation
  of 1 and 4 P5800X drives;
- ``regress``: the RAM-store figures no new back end may move (all-miss pages, QD1
  latency, hits at the default register cap);
- ``engine``: ``gids bench files`` on the machine's disk (the probe and the disk's ceiling,
  each storage engine at 1 and 8 daemon threads with the engine's own columns, each timed run
  between two probes of the disk, the io_uring rows in three rounds, page-cached file vs the
  MemoryStore copy, one and four emulated drives through each engine and what bounds them);
  about 420 s;
- ``engine-writes``: the write stress run on io_uring, one file against four stripe files;
- ``gnn``: ``gids gnn --gather-only`` (feature rows/s on every data path) and two GraphSAGE
  epochs on every feature path;
- ``gnn22``: issue 24's end-to-end epoch at scale 22 (17 GB of 1024-float rows): the mmap
  loader, all in GPU memory, gids at 25 % and 100 % (plain and through the loader);
- ``gnn22-ssd``: the scale-22 feature gather under real-time emulation of 1 and 4 P5800X
  drives: gids at 25 %, the mmap loader, and the O_DIRECT loader on the real disk and on the
  emulated drives;
- ``gnn22-ssd-train``: one short scale-22 epoch (4 batches) the same way: mmap, gids at 25 %
  and the O_DIRECT loader, each on 1 and 4 emulated P5800X drives, the loader also on the disk;
- ``gnn-resident``: the gather-only bench at scale 20 (caches of 25 % and 100 % of the
  features, RAM-backed) beside GPU memory, mmap and zero-copy, the whole cache warmed with the
  timed rows (its hit rate in the JSON); then the host's cost of one ``gather_rows`` call
  beside ``torch.index_select`` (``python -m workloads.microbench rows-launch``); then the
  whole cache with ``GIDS_ROWS_RESIDENT_FIRST=1`` (two launches, resident rows first, where
  the default picks one launch for these gathers of ~32 k rows);
- ``prefetch``: ``gids bench prefetch --n-ssd 1,4``: a batch loop whose compute per batch is
  its I/O time, with the next batch prefetched (``Runtime.prefetch`` on a side stream) or held
  (``Runtime.hold``) against neither, on a RAM store and emulated drives, batches of 8192 and
  of 32768 pages side by side (prefetch.json);
- ``prefetch-demos``: ``gids search --query-batch 1000`` with the next query batch's probed
  lists prefetched (``Runtime.prefetch``), then ``--no-prefetch`` on the same index
  (search_prefetch.json, search_no_prefetch.json);
- ``stress``: the write path under load (``python -m workloads.stress``): 60 s of 1 M threads
  writing and reading a sparse 16 GiB file through a cache of 1 % of it, then flush, fsync and
  a check of the whole file against the model (table of operations, bytes, evictions,
  write-backs, mismatches).

Before each stage its expected time (``ESTIMATES``) and its limit are printed.
Each stage runs its commands, one process each, within the stage's time limit and writes their
log and outputs under ``OUT/<stage>/``; ``OUT/summary.md`` collects the tail of every log. At
the end everything is packed into ``OUT/gpu_session.tar.gz`` as well (the device tool returns
at most 8 files). The JSON files a stage wrote become the results page's figures with
``python -m workloads.results update OUT/<stage>/...json`` (run where the repository is).
Prepare the machine first (numpy < 2.5): see ``../shared/GPU_NOTES.md``.
"""
import argparse
import os
import subprocess
import sys
import tarfile
import time

GIDS = [sys.executable, "-m", "gids.cli"]


#: Stage name -> (commands, seconds they may take together). A command is an argv list, or
#: ``(argv, cap)`` where it may take at most ``cap`` of those seconds; each command gets what the
#: commands before it left of the stage's limit. ``{dir}`` is the stage's output folder.
STAGES = {
    # About 4 minutes, most of it compiling (an estimate: not yet run on a GPU).
    "diagnose": ([([sys.executable, "-m", "workloads.microbench", "misses", "--out", "{dir}"], 120),
                  ([*GIDS, "search", "--n", "100000", "--dim", "128", "--lists", "256",
                    "--queries", "1000", "--nprobe", "16", "--data-path", "gids,memory",
                    "--storage", "memory", "--no-faiss", "--json", "{dir}/search_small.json"], 150),
                  [*GIDS, "bfs", "--scale", "18", "--roots", "2", "--storage", "memory",
                   "--data-path", "gids,memory", "--cache-fractions", "0.25,1.0",
                   "--json", "{dir}/bfs_small.json"]], 420),
    # One process per test file, 4 at once, each within 330 s (workloads/gpu_tests.py): a fault
    # or a hang in one file leaves the others' results. tests/test_gpu.py alone took 254 s on
    # the H200; the 12 files together about 300 s.
    "tests": ([[sys.executable, "-m", "workloads.gpu_tests", "--out", "{dir}", "--timeout",
                "330"]], 360),
    "core": ([[sys.executable, "-m", "workloads.microbench", "gpu-suite", "--no-tests",
               "--out", "{dir}"]], 540),
    # Issue 2's hit figures, re-measured now that kernel times hold out a launch's host cost
    # (workloads/timing.py, 2eab8af): first the host cost of one launch with a handle, kept and
    # not (68 vs ~500 us on the H200), then the hit benchmarks at caps 128, 80 and 64,
    # then the PTX load flavors over GPU memory. The stage takes under a minute.
    "hits": ([([sys.executable, "-m", "workloads.microbench", "launch", "--out", "{dir}/launch"],
               60),
              ([sys.executable, "-m", "workloads.microbench", "hits", "--caps", "128,80,64",
                "--out", "{dir}/hits"], 200),
              ([sys.executable, "-m", "workloads.microbench", "loads", "--out", "{dir}/loads"],
               90)], 360),
    # Issue 4's targets first and on their own, so that they are written even if the sweeps
    # after them run out of time (a bench writes its report only at the end): 25 points (5
    # workloads x 5 paths), most of their time compiling the gids and nvme kernels and making
    # Runtimes, capped at 240 s. Its report is OUT/bench/workloads/bench.md. Then the other
    # sweeps in what is left of the 570 s (OUT/bench/sweeps/). Both take ~165 s together. The device tool returns at most 8 files: take the tarball.
    "bench": ([([*GIDS, "bench", "workloads", "--quick", "--no-progress",
                 "--out", "{dir}/workloads"], 240),
               [*GIDS, "bench", "iops", "bandwidth", "cache", "latency", "--quick",
                "--no-progress", "--out", "{dir}/sweeps"]], 570),
    # Two commands in the stage's 600 s (the device tool's limit per call: run this stage
    # alone). First, issue 5's emulated-SSD table, kept small so that it surely finishes: gids
    # and the NVMe path on a scale-18 graph, 2 roots, cache 25 %, each path unemulated and on 1
    # and 4 emulated P5800X drives (capped at 120 s). Then issue 5's setting: scale 24 (16.8 M
    # vertices, 2.1 GB of neighbours), a RAM-backed store, the cache at 25 % (cold each search)
    # beside the other paths, each first running an untimed warm-up search: the stage takes
    # ~173 s.
    "bfs": ([([*GIDS, "bfs", "--scale", "18", "--roots", "2", "--storage", "memory",
               "--data-path", "gids,nvme", "--cache-fractions", "0.25",
               "--ssd", "p5800x", "--n-ssd", "1,4", "--json", "{dir}/bfs_emulated.json"], 120),
             [*GIDS, "bfs", "--scale", "24", "--roots", "4", "--storage", "memory",
              "--data-path", "gids,memory,zero_copy,cpu_batch", "--cache-fractions", "0.25",
              "--json", "{dir}/bfs.json"]], 590),
    # Issue 5's whole-graph target: the scale-24 graph with the GPU-memory path (it saves the
    # file outside {dir}, which must not be sent back), then gids with the cache holding the
    # whole graph, warm (an untimed warm-up search fills it: workloads/graph/cli.py), beside
    # the GPU-memory path again in the same run (the reference moves by ~5 % between runs). Its
    # traversal kernels are capped at 64 registers by default (workloads/graph/gpu_graph.py,
    # WHOLE_CACHE_REGISTERS), then at 48 and 80 (GIDS_WHOLE_CACHE_REGISTERS) for the
    # comparison. The stage takes ~182 s (each warm run opens the graph, fills the cache,
    # validates every search).
    "bfs-warm": ([([*GIDS, "bfs", "--scale", "24", "--roots", "4", "--storage", "memory",
                    "--save-graph", "/tmp/gids-session-k24.csr", "--data-path", "memory",
                    "--json", "{dir}/bfs_memory.json"], 200)]
                 + [([*env, *GIDS, "bfs", "--graph", "/tmp/gids-session-k24.csr", "--roots", "4",
                      "--storage", "memory", "--data-path", paths, "--cache-fractions", "1.0",
                      "--warm-cache", "--json", "{dir}/bfs_warm" + tag + ".json"], 150)
                    for env, paths, tag in (([], "gids,memory", ""),
                                            (["env", "GIDS_WHOLE_CACHE_REGISTERS=48"], "gids",
                                             "_cap48"),
                                            (["env", "GIDS_WHOLE_CACHE_REGISTERS=80"], "gids",
                                             "_cap80"))],
                 590),
    # Issue 5's three targets in one stage, each side by side: scale 24, a RAM-backed store,
    # first the cache at 25 % of the neighbours, cold at each search, beside zero-copy and the
    # CPU-initiated batch path (4 roots, each path after an untimed warm-up search); then the
    # cache holding the whole graph, warm, between two runs of the all-in-GPU-memory path
    # (memory, gids, memory, 8 roots). Two runs of the reference bracket the gids run because
    # a search's host costs move by 10-20 % between blocks of one process (a small copy
    # 114-150 us, a launch 44-68 us), which moves the ratio as much as anything gids does. The
    # stage takes ~285 s.
    "bfs-targets": ([([*GIDS, "bfs", "--scale", "24", "--roots", "4", "--storage", "memory",
                       "--save-graph", "/tmp/gids-session-k24.csr",
                       "--data-path", "gids,zero_copy,cpu_batch", "--cache-fractions", "0.25",
                       "--json", "{dir}/bfs_quarter.json"], 330),
                     [*GIDS, "bfs", "--graph", "/tmp/gids-session-k24.csr", "--roots", "8",
                      "--storage", "memory", "--data-path", "memory,gids,memory",
                      "--cache-fractions", "1.0", "--warm-cache", "--json",
                      "{dir}/bfs_whole.json"]], 590),
    # Issue 5's table under real-time emulation at its own scale: scale 24, cache 25 %, gids
    # and the NVMe path each on 1 and 4 emulated P5800X drives (2 roots after the warm-up
    # search; ~885 k page reads a search, so about 0.6 s a search on one modelled drive):
    # ~4 minutes with generating the graph.
    "bfs-ssd": ([[*GIDS, "bfs", "--scale", "24", "--roots", "2", "--storage", "memory",
                  "--data-path", "gids,nvme", "--cache-fractions", "0.25", "--ssd", "p5800x",
                  "--n-ssd", "1,4", "--json", "{dir}/bfs_ssd.json"]], 590),
    # The same split. The emulated table: 100 k vectors of dim 128 (51 MB, a tenth of the main
    # index), 1,000 queries at nprobe 16, gids and the NVMe path each unemulated and on 1 and 4
    # emulated P5800X drives, capped at 120 s. Then the main run (issue 6's setting): 1 M vectors
    # of dim 128, the skewed query stream (80 % of the queries in 20 % of the lists), over gids,
    # all in GPU memory and the CPU-initiated batch path, with faiss-cpu where it imports.
    # Both read a RAM-backed store (--storage memory): the lent machine has no SSD, only a
    # virtio disk that serves about 85 k random O_DIRECT 4 KiB reads/s, and a file-backed run
    # measures that disk (10,000 queries at nprobe 8 took minutes); the
    # emulated rows are what stands for SSDs.
    "search": ([([*GIDS, "search", "--n", "100000", "--dim", "128", "--lists", "256",
                  "--queries", "1000", "--nprobe", "16", "--data-path", "gids,nvme",
                  "--storage", "memory", "--ssd", "p5800x", "--n-ssd", "1,4", "--no-faiss",
                  "--json", "{dir}/search_emulated.json"], 120),
                [*GIDS, "search", "--n", "1000000", "--dim", "128", "--lists", "1024",
                 "--skewed", "--storage", "memory", "--nprobe", "8,16,32",
                 "--data-path", "gids,memory,cpu_batch", "--json", "{dir}/search.json"]], 480),
    # Issue 23's host-tier rows (`gids bench tier`): pointer chasing over 8-byte elements
    # through a file store held in the host tier (direct mode) beside zero-copy over RAM, and
    # Zipf 4 KiB reads through a file store, GPU cache 10/25 % x host tier 0/20/50 %, beside
    # gids over RAM, and a victim-filled tier; 512 MiB of data in /var/tmp, 2**18 requests a
    # run, 2 runs a point.
    # 51 s on the H200.
    "tier": ([[*GIDS, "bench", "tier", "--quick", "--requests", "262144", "--reps", "2",
               "--dir", "/var/tmp", "--no-progress", "--out", "{dir}/tier"]], 180),
    # The tier stage's rows again, then the Zipf target's rows on 1 and 4 emulated P5800X
    # drives (`--ssd p5800x --n-ssd 1,4`): gids over a MemoryStore, and over the data file read
    # through the page cache (the daemon still reads the file behind the model: O_DIRECT from
    # the machine's virtio disk, ~85 k reads/s, would be the limit, not the drives) with no
    # tier, a static 20 % tier and a victim-filled one, GPU cache 10 %; the Zipf target's ratio
    # (tier row / MemoryStore row) on each array. Expected ~90 s (an estimate: the tier stage's
    # 51 s, then 8 points of 2**18 requests whose misses the model paces at >= 1.5 M/s).
    "tier-emulated": ([[*GIDS, "bench", "tier", "--quick", "--requests", "262144", "--reps",
                        "2", "--dir", "/var/tmp", "--ssd", "p5800x", "--n-ssd", "1,4",
                        "--no-progress", "--out", "{dir}/tier_emulated"]], 240),
    # BFS at scale 24 through a file store (/var/tmp), GPU cache 25 %, a host tier of every
    # neighbours page (2 GiB pinned) so that no miss reaches the disk, in one process beside
    # zero-copy over RAM (one graph), 4 roots after the warm-up search: copy (every miss copies
    # its page from the tier into the GPU cache, which churns), and split (the top-ranked pages
    # preloaded into the GPU cache before each search, untimed; every other page read in place
    # from the tier, taking no slot: gids.pin_page_or_tier) with pages ranked by the lists they
    # hold (the pages read least efficiently in place) and by degree (GIDS's ranking). Copy
    # runs once (with a tier of every page the ranking changes nothing there). A search in
    # split mode reads what it would with a tier of only the pages not preloaded ("GPU cache
    # 25 % + a tier holding the rest": --host-tier-fraction 0.75, whose preload reads the
    # disk); with all pages the untimed preload copies from RAM. The table's tier columns say
    # what the tier served. Expected ~230 s (an estimate: ~60 s to generate the
    # graph; per gids row ~5 s of tier fill, ~20 s of validation, ~30 s compiling for the first
    # row of each mode).
    "tier-bfs": ([[*GIDS, "bfs", "--scale", "24", "--roots", "4", "--storage", "file",
                   "--dir", "/var/tmp", "--data-path", "zero_copy,gids",
                   "--cache-fractions", "0.25", "--host-tier", "lists,degree",
                   "--host-tier-fraction", "1", "--host-tier-mode", "copy,split",
                   "--json", "{dir}/bfs_tier.json"]], 300),
    # GPU cache 25 % and a host tier of the top 75 % of pages (copy) with real SSDs behind the
    # tier: gids alone, unemulated and under real-time emulation of 1 and 4 P5800X drives (2
    # roots after the warm-up search), to set beside the bfs-ssd stage's rows without a tier. Expected under 300 s (an estimate).
    "tier-ssd": ([[*GIDS, "bfs", "--scale", "24", "--roots", "2", "--storage", "file",
                   "--dir", "/var/tmp", "--data-path", "gids", "--cache-fractions", "0.25",
                   "--host-tier", "degree", "--host-tier-fraction", "0.75", "--ssd", "p5800x",
                   "--n-ssd", "1,4", "--json", "{dir}/bfs_tier_ssd.json"]], 480),
    # The RAM-store figures that no new back end may move: all-miss pages (host daemon and
    # NVMe path against the H2D ceiling), QD1 latency, and the hit path at the default cap.
    "regress": ([([sys.executable, "-m", "workloads.microbench", "misses", "--out",
                   "{dir}/misses"], 110),
                 ([sys.executable, "-m", "workloads.microbench", "latency", "--quick",
                   "--out", "{dir}/latency"], 60),
                 [sys.executable, "-m", "workloads.microbench", "hits", "--caps", "128",
                  "--out", "{dir}/hits"]], 240),
    # The storage engines on the machine's real disk: `gids bench files` (the probe and the
    # disk's ceiling, with their CPU per page; one io_uring daemon thread driven from a host
    # thread, no GPU, with registered buffers and without; each engine at 1 and 8 daemon
    # threads (io_uring x1 also without registered buffers), O_DIRECT all-miss, with engine
    # and GPU I/O times, in flight and daemon CPU per page, every timed run between two probes
    # of the disk; page-cached file, mapped, against the MemoryStore copy; emulated 980pro x1
    # and x4 through each engine, beside the same engine and threads with no model, and driven
    # from the host without the GPU: what bounds them), its data file under /var/tmp (on the
    # disk; 4 GiB must not be sent back). Three timed runs a row of 200,000 reads (~2.5 s),
    # the io_uring rows in three rounds (nine runs each), each way of a probe 50,000 reads
    # (~0.6 s): the lent disk moves by 10-15 % between sub-second probes, so each fraction is
    # a median over runs spread over the O_DIRECT part, its runs and probes long enough to
    # average the disk's short swings (about 50 probes of ~2 s). About 420 s.
    "engine": ([[*GIDS, "bench", "files", "--dir", "/var/tmp", "--pages", "200000",
                 "--probe-pages", "50000", "--daemon-threads", "1,8", "--reps", "3",
                 "--direct-rounds", "3", "--n-ssd", "1,4", "--no-progress",
                 "--out", "{dir}/files"]], 560),
    # The write stress run on the io_uring engine, and one file against four stripe files of
    # the same bytes.
    "engine-writes": ([([sys.executable, "-m", "workloads.stress", "--seconds", "45",
                         "--file-gib", "8", "--cache-fraction", "0.01", "--engine", "io_uring",
                         "--dir", "/var/tmp", "--json", "{dir}/stress_io_uring.json"], 110),
                       [sys.executable, "-m", "workloads.stripe_bench", "--files", "4", "--bytes",
                        str(1 << 30), "--pages", "100000", "--reps", "1", "--daemon-threads",
                        "1,4", "--backends", "host", "--dir", "/var/tmp", "--json",
                        "{dir}/stripe.json"]], 260),
    # The GNN path: the feature gather alone (1024-float rows, batches of 1024 seeds x fan-out
    # 10,5,5, the cache at 25 % and 100 %, RAM-backed), then two epochs of GraphSAGE on every
    # feature path. The data set goes to /var/tmp/gnn (made by the first command).
    "gnn": ([([*GIDS, "gnn", "--gather-only", "--scale", "20", "--fanouts", "10,5,5",
               "--batch-size", "1024", "--batches", "16", "--cache-fractions", "0.25,1",
               "--storage", "memory", "--dir", "/var/tmp/gnn", "--json",
               "{dir}/gnn_gather.json"], 170),
             [*GIDS, "gnn", "--scale", "20", "--fanouts", "15,10,5", "--batch-size", "1024",
              "--epochs", "2", "--train-seeds", "16384", "--eval-seeds", "4096",
              "--cache-fractions", "0.25,1", "--dir", "/var/tmp/gnn", "--json",
              "{dir}/gnn_train.json"]], 400),
    # Issue 24's end-to-end target at its own scale: scale 22 (4.2 M vertices, 1024-float rows:
    # 17 GB of features, made in /var/tmp/gids-gnn on every core in well under a minute, or
    # found there from an earlier run), fan-outs 15,10,5, 2 epochs of 16 batches of 1024 seeds,
    # RAM-backed store: the mmap loader, all in GPU memory, then gids at 25 % and 100 % of the
    # features (each plain and through gids.torch.NodeLoader). Rows in order of what the
    # targets need first; the JSON is rewritten after every row, so a run cut short keeps them.
    "gnn22": ([[*GIDS, "gnn", "--scale", "22", "--fanouts", "15,10,5", "--batch-size", "1024",
                "--epochs", "2", "--train-seeds", "16384", "--eval-seeds", "4096",
                "--data-path", "mmap,memory,gids", "--cache-fractions", "0.25,1",
                "--storage", "memory", "--json", "{dir}/gnn22_train.json"]], 480),
    # The same data set under real-time emulation, the feature gather alone (1024 seeds x
    # 10,5,5, 8 timed batches): mmap; gids at 25 % unemulated and on 1 and 4 modelled P5800X
    # drives; the O_DIRECT loader (64 host threads) on the same emulated drives, then on the
    # machine's virtio disk (~85 k random 4 KiB reads/s: ~3 s a batch, the slowest row, last).
    # gids reads the file's memory map here (--storage mmap): the emulation sets the time, and
    # a RAM-backed store costs each of the three Runtimes its own pinned copy of 17 GB.
    "gnn22-ssd": ([[*GIDS, "gnn", "--gather-only", "--scale", "22", "--fanouts", "10,5,5",
                    "--batch-size", "1024", "--batches", "8", "--data-path", "mmap,gids,direct",
                    "--cache-fractions", "0.25", "--storage", "mmap", "--ssd", "p5800x",
                    "--n-ssd", "1,4", "--json", "{dir}/gnn22_ssd.json"]], 240),
    # The emulated epoch, short: scale 22, fan-outs 15,10,5, one epoch of 4 batches of
    # 1024 seeds (the direct loader on the virtio disk takes ~7 s a batch of ~600 k rows):
    # mmap; gids 25 % (the file's map) unemulated and on 1 and 4 modelled P5800X drives
    # (plain rows: the phase split); the direct loader on those drives, then on the disk.
    "gnn22-ssd-train": ([[*GIDS, "gnn", "--scale", "22", "--fanouts", "15,10,5",
                          "--batch-size", "1024", "--epochs", "1", "--train-seeds", "4096",
                          "--eval-seeds", "1024", "--data-path", "mmap,gids,direct",
                          "--cache-fractions", "0.25", "--no-loader", "--storage", "mmap",
                          "--ssd", "p5800x", "--n-ssd", "1,4",
                          "--json", "{dir}/gnn22_ssd_train.json"]], 300),
    # The whole-cache gather against GPU memory: the same gather-only runs (every row of the
    # whole cache warm before timing, the timed hit rate in the JSON) beside GPU memory, mmap
    # and zero-copy; the host's microseconds per gather_rows call (1 and 32 k rows, torch in
    # and out, resident first 0 and 1) beside index_select's, ~30 s, most of it compiling the
    # three kernels; then the whole cache again resident first (GIDS_ROWS_RESIDENT_FIRST=1:
    # two launches; the default makes one for gathers this size), ~25 s. About 110-140 s on
    # the H200 (an estimate), most of it making the data set (shared with ``gnn`` in
    # /var/tmp/gnn).
    "gnn-resident": ([([*GIDS, "gnn", "--gather-only", "--scale", "20", "--fanouts", "10,5,5",
                        "--batch-size", "1024", "--batches", "16", "--cache-fractions", "0.25,1",
                        "--data-path", "gids,memory,mmap,zero_copy", "--storage", "memory",
                        "--dir", "/var/tmp/gnn", "--json", "{dir}/gnn_resident.json"], 100),
                      ([sys.executable, "-m", "workloads.microbench", "rows-launch", "--out",
                        "{dir}/rows_launch"], 50),
                      ["env", "GIDS_ROWS_RESIDENT_FIRST=1", *GIDS, "gnn", "--gather-only",
                       "--scale", "20", "--fanouts", "10,5,5", "--batch-size", "1024",
                       "--batches", "16", "--cache-fractions", "1", "--data-path", "gids,memory",
                       "--storage", "memory", "--dir", "/var/tmp/gnn", "--json",
                       "{dir}/gnn_resident_first.json"]], 150),
    # Issue 23's prefetch target: a batch loop (8192, then 32768 pages a batch, compute = its
    # I/O time) with the next batch prefetched or held, against none; RAM store, then emulated
    # P5800X x1 and x4. 41 s on the H200 for 8192 pages alone, most of it compiling and the
    # 800 MiB of data; 32768 pages add 3.2 GiB of data and ~4x the I/O (estimated ~50 s more).
    "prefetch": ([[*GIDS, "bench", "prefetch", "--n-ssd", "1,4", "--no-progress",
                   "--out", "{dir}"]], 180),
    # The search demo's use of it, with and without: gids search over 200 k vectors (dim 96,
    # 512 lists, a cache of 25 %) in query batches of 1000, the next batch's probed lists
    # prefetched. The index is made once, in /var/tmp. About 55 s (an estimate: not yet run on
    # a GPU).
    "prefetch-demos": ([([*GIDS, "search", "--n", "200000", "--dim", "96", "--lists", "512",
                          "--queries", "10000", "--query-batch", "1000", "--nprobe", "8",
                          "--data-path", "gids", "--no-faiss", "--save-index",
                          "/var/tmp/gids_prefetch_ivf.bin", "--json",
                          "{dir}/search_prefetch.json"], 35),
                        [*GIDS, "search", "--index", "/var/tmp/gids_prefetch_ivf.bin",
                         "--queries", "10000", "--query-batch", "1000", "--no-prefetch",
                         "--nprobe", "8", "--data-path", "gids", "--no-faiss",
                         "--json", "{dir}/search_no_prefetch.json"]], 60),
    # The file goes to the temp dir, not under {dir}: 16 GiB must not be sent back.
    "stress": ([[sys.executable, "-m", "workloads.stress", "--seconds", "60", "--file-gib", "16",
                 "--cache-fraction", "0.01", "--json", "{dir}/stress.json"]], 480),
}


#: Expected seconds of a stage on the H200 (measured where a comment above says so, else
#: estimated), printed before it runs; stages not listed print their limit only.
ESTIMATES = {"diagnose": 240, "tests": 300, "hits": 60, "bench": 165, "bfs": 175,
             "bfs-warm": 185, "bfs-targets": 285, "bfs-ssd": 240,
             # measured: tier 51 s, prefetch 41 s (8192 pages alone, before its warm-up ran
             # all three loops; 32768 pages estimated ~50 s more), regress 81 s
             "tier": 60, "prefetch": 100, "regress": 90,
             # estimated: the tier stage's 51 s and 8 emulated Zipf points
             "tier-emulated": 90,
             # estimated, not yet run: ~30 s to make the data set, ~25 s compiling, the mmap
             # loader ~40 s, GPU memory ~25 s, each gids row 20-45 s
             "gnn22": 330,
             # estimated: data set ~30 s if not yet made, the direct loader on the disk ~35 s
             "gnn22-ssd": 150,
             # estimated: data set ~30 s if not yet made, the direct loader on the disk ~45 s
             "gnn22-ssd-train": 180}


def estimate_line(name):
    """What is printed before stage ``name`` runs: its expected time and its limit."""
    limit = STAGES[name][1]
    expected = ESTIMATES.get(name)
    guess = f"expected ~{expected} s, " if expected else ""
    return f"== {name} ({guess}limit {limit} s)"


def run_stage(name, out_dir):
    """Run one stage's commands in order, within its limit, into one log.

    Returns
    -------
    tuple
        (exit code or ``"timeout"``, a comma-separated string of them for a stage of several
        commands; seconds; log path).
    """
    commands, limit = STAGES[name]
    stage_dir = os.path.join(out_dir, name)
    os.makedirs(stage_dir, exist_ok=True)
    log_path = os.path.join(stage_dir, "log.txt")
    start = time.monotonic()
    codes = []
    with open(log_path, "w") as log:
        for command in commands:
            command, cap = command if isinstance(command, tuple) else (command, None)
            command = [part.replace("{dir}", stage_dir) for part in command]
            left = limit - (time.monotonic() - start)
            timeout = left if cap is None else min(cap, left)
            log.write("$ " + " ".join(command) + "\n")
            log.flush()
            if timeout <= 0:
                log.write("(not run: the stage's time is spent)\n")
                codes.append("not run")
                continue
            try:
                codes.append(subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                            timeout=timeout,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode)
            except subprocess.TimeoutExpired:
                codes.append("timeout")
            log.flush()
    rc = codes[0] if len(codes) == 1 else ", ".join(str(c) for c in codes)
    return rc, time.monotonic() - start, log_path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workloads.gpu_session",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="*", metavar="STAGE",
                        help=f"any of {', '.join(STAGES)} (default: all)")
    parser.add_argument("--out", default="out", help="output folder (default: out)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    stages = args.stages or list(STAGES)
    os.makedirs(args.out, exist_ok=True)
    summary = [f"# GPU session {time.strftime('%Y-%m-%d %H:%M')}", ""]
    known = sum(ESTIMATES.get(n, STAGES[n][1]) for n in stages)
    print(f"stages: {', '.join(stages)}; expected at most ~{known} s in all", flush=True)
    for name in stages:
        print(estimate_line(name), flush=True)
        rc, secs, log_path = run_stage(name, args.out)
        with open(log_path) as f:
            tail = f.read()[-4000:]
        print(tail, flush=True)
        summary += [f"## {name}: exit {rc}, {secs:.0f} s", "", "```", tail, "```", ""]
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(summary))
    with tarfile.open(os.path.join(args.out, "gpu_session.tar.gz"), "w:gz") as tar:
        for name in stages:
            tar.add(os.path.join(args.out, name), arcname=name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
