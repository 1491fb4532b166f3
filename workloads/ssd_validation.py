"""Held-out validation of the SSD profiles: published measurements that no profile parameter was
fitted to, each replayed as a synthetic trace of its own conditions through the model (or,
where the measuring host was a loop of batched calls, timed as that loop: :func:`issuer_loop`).

Every profile is fitted to its data sheet (``SsdProfile.published``: QD1 latency, 4 KiB random
IOPS, sequential bandwidth; for the P5800X a measured 512 B rate and latency instead of a QD1
figure; ``SsdProfile.sources`` says which parameter each figure sets). The rows below are other
people's measurements of the same drives, under other conditions (512 B reads, several drives,
thousands of GPU threads, one thread at QD1 and QD16, chains of dependent reads), with the
source and its exact conditions. Where no such measurement could be found for a profile,
:data:`NOT_FOUND` says so instead of inventing one.

Each row also names the host I/O path it was measured through (:class:`HostPath`): a read
issued by a CPU through the operating system pays a per-command CPU cost that a GPU-initiated
read does not. That cost is a parameter too, so it is fitted, like the drives', to one
published figure that is not a held-out row (``HostPath.fitted_to``); a path with no such
figure has no cost (``command_ns is None``) and its rows say so.

Usage::

    python -m workloads.ssd_validation [--ssd PROFILE ...] [--json PATH]

prints model / measured / error for each row, with its source, then the fitting sources of
each profile and the profiles without held-out data.
"""
import argparse
import heapq
import json
import math
import sys
from dataclasses import asdict, dataclass, replace

import gids
from gids.host import SsdModel, ssd_profile, synthetic_trace

#: Within this relative error a row counts as predicted.
TOLERANCE = 0.15

_BAM = "https://github.com/ZaidQureshi/bam/blob/master/asplosaoe/"
_BAM_CONDITIONS = ("BaM nvm-block-bench (Qureshi et al., ASPLOS'23, artifact-evaluation log): "
                   "262,144 GPU threads each read one {size} block at a random offset "
                   "(rand() % 2,097,152 blocks), all launched at once, {drives}, 128 NVMe "
                   "queue pairs of depth 1024 per drive (at most 1023 commands each; a warp "
                   "uses queue smid % 128 of the drive its turn gives it, so at most one "
                   "queue per SM is in use), GPU-initiated (no CPU in the I/O path), timed by "
                   "CUDA events around the one kernel launch (benchmarks/block/main.cu)")


#: BaM's nvm-pattern-bench log (asplosaoe/nvm_pattern_bench.log, first pass): 131,072 page
#: reads of 4 KiB, 536,870,912 bytes at 5.942330 "GBps", which the benchmark computes as
#: bytes / ms * 1000 / 2**30 (GiB/s).
_PATTERN_READS = 131072
_PATTERN_SECONDS = 536870912 / (5.942330 * 2**30)


@dataclass(frozen=True)
class HostPath:
    """How the measuring host issued its reads, and what that costs per command.

    ``command_ns`` is the CPU time per command on the issuing core (submission and completion),
    served one command at a time: the replay's ``host_command_ns``. It bounds one core's rate at
    ``1e9 / command_ns`` and adds itself to every read's latency. None: no figure to fit it to,
    so the replay times the device alone and the row is marked as not like for like.
    ``fitted_to`` is the published figure ``command_ns`` was set from (never a held-out row).

    ``batch`` is how the issuer keeps its queue full, when it is a loop of calls rather than one
    thread per read: it submits up to ``batch`` reads per call and, once its depth is used,
    waits in that call for ``min(in flight, batch)`` completions. At a queue depth of at most
    ``batch`` it therefore goes in waves: submit the whole depth, wait for all of it (see
    :func:`issuer_loop`). None: reads are issued one at a time as slots free (the replay's
    closed loop). ``submit_share`` is the share of ``command_ns`` spent before a command reaches the
    drive (preparing and submitting it); the rest is spent after it completes (reaping it).
    ``plug`` is how many reads of one call the kernel holds back and hands the drive at once
    (its plug list, flushed when full and when the call's submissions end); None: a call's
    reads reach the drive together.
    ``path_command_ns`` is a per-command cost of each drive's path to the issuer (SQE fetches,
    completion posts, doorbells across the platform's PCIe topology), served by each drive one
    command at a time: the replay's ``path_command_ns``, where ``command_ns`` is one issuer's.
    """

    name: str
    description: str
    command_ns: float | None
    fitted_to: str
    batch: int | None = None
    submit_share: float = 0.5
    plug: int | None = None
    path_command_ns: float = 0.0


#: GPU threads write the submission entries and ring the doorbells themselves (BaM): no CPU
#: and no operating system in the I/O path. Its own per-command costs (SQE writes to GPU memory
#: read by the drive over peer-to-peer PCIe, doorbells, completion polling) have no published
#: figure, so the path costs nothing beyond the drive's own model.
GPU_INITIATED = HostPath(
    name="gpu-initiated", description="GPU threads submit NVMe commands directly (BaM)",
    command_ns=0.0, fitted_to="none: no published per-command figure of this path")

_AXBOE_POST = ("Jens Axboe, 'io_uring and Optane2' (io-uring and linux-block mailing lists, "
               "2020-08-21): https://lore.kernel.org/io-uring/"
               "4af91b50-4a9c-8a16-9470-a51430bd7733@kernel.dk/")
_AXBOE_CONDITIONS = ("t/io_uring from fio, one thread on one core of an Intel Ice Lake-SP Xeon, "
                     "kernel 5.9.0-rc1, single Gen2 Optane SSD (a pre-release sample of the "
                     "drive launched as the P5800X), random 512 B O_DIRECT reads, polled I/O, "
                     "registered buffers and files")

#: t/io_uring's default batch_submit and batch_complete (fio's t/io_uring.c, BATCH_SUBMIT and
#: BATCH_COMPLETE): its loop submits up to 32 reads per io_uring_enter and, when the depth is
#: used, waits in that call for ``min(inflight + to_submit, batch_complete)`` completions; a
#: polled ring's wait returns early only when nothing is left in flight. So at QD16 each call
#: submits 16 reads and returns when all 16 are done.
T_IO_URING_BATCH = 32

#: Reads one plug list holds in the kernel Axboe ran (5.9): BLK_MAX_REQUEST_COUNT, 16 until
#: "block: bump max plugged deferred size from 16 to 32" (Linux 5.16, backported to 5.10 and
#: 5.15 stable in 2021-11). blk_mq_submit_bio flushes the list when a read finds 16 in it; the
#: NVMe driver (which has commit_rqs) writes the flushed SQEs and rings the doorbell once.
LINUX_5_9_PLUG_REQUESTS = 16

#: Linux io_uring with polled completions on one core (t/io_uring). Fitted to Axboe's QD128
#: figure, 2.58 M IOPS per core: at QD128 the core, not the drive, is the limit (the P5800X
#: serves more 512 B reads than that: 5.09 M/s, its measured 512 B rate), so
#: 1 / 2.58 M = 387.6 ns is the core's time per command. His QD1 and QD16 figures from the
#: same post are held out. Half of it is taken as spent submitting a read and half reaping it
#: (``submit_share``): an assumption, no figure splits a polled read's CPU time; the QD16 rows
#: come out the same for any share up to one half (the QD128 run's own latency would take 0.79,
#: which moves them further off: docs/ssd_models.md).
IO_URING_POLLED = HostPath(
    name="io_uring-polled", description="Linux io_uring, polled I/O, one core (t/io_uring)",
    command_ns=1e9 / 2.58e6, batch=T_IO_URING_BATCH, plug=LINUX_5_9_PLUG_REQUESTS,
    fitted_to=f"QD128: 2.58M IOPS per core (34.9 usec avg latency); {_AXBOE_POST}; "
              f"{_AXBOE_CONDITIONS}")

#: A desktop benchmark tool through Windows' interrupt-driven NVMe stack. No published figure
#: of that stack's own per-command cost was found (one would need the same tool's QD1 latency
#: on a device of known latency), so it is not modelled.
DESKTOP_OS = HostPath(
    name="desktop-os", description="a desktop benchmark tool through the OS's interrupt-driven "
                                   "NVMe stack (Windows)",
    command_ns=None, fitted_to="none found: the stack's cost is not modelled")

#: A reviewer's benchmark tool through an operating system the source does not state.
UNSTATED_OS = HostPath(
    name="os-unstated", description="a reviewer's benchmark tool through an OS stack the "
                                    "source does not state",
    command_ns=None, fitted_to="none: the stack is not stated, so its cost is not modelled")

#: BaM's artifact-evaluation testbed ran its 980 PRO block-bench logs from another GPU than its
#: P5800X logs. Two marks of it: the logs as first committed (nvm_block_bench.log at commit
#: c6f472b, 2022-10-18) run the P5800X with --gpu=0 and the 980 PROs with --gpu=2 (commit
#: 6d3bb8e, "gpu number in asplosaoe log fixed", later rewrote those command lines to --gpu=0,
#: the printed results unchanged); and each log prints the bus address of the GPU memory its
#: drives write into (pages_dma): 0x580... in every P5800X log, 0x3f020410000 and
#: 0x3f040410000 in the 980 PRO block-bench logs, 1.6 TiB apart, more than one GPU's BAR spans.
#: So the GPU-initiated path to the 980 PROs there is another path through the platform's PCIe
#: topology. Its per-command cost per drive is fitted to the one-drive 980 PRO log (the drive's
#: data-sheet rate, 1 M IOPS, against 798,519 measured: 1e9 / 798,519 - 1e9 / 1e6 = 252 ns);
#: the two-drive log is held out. The logs cannot tell this path cost from a slower drive (a
#: 500 GB 980 PRO is rated 800 K IOPS) or a slower drive link: they name neither the capacity
#: nor the slots.
_BAM_980PRO_ONE_DRIVE_IOPS = 798519.0
BAM_GPU2 = HostPath(
    name="gpu-initiated-gpu2",
    description="GPU threads submit NVMe commands directly (BaM), from the GPU of BaM's "
                "artifact-evaluation testbed that its 980 PRO block-bench logs ran on (GPU 2 "
                "in the logs as first committed)",
    command_ns=0.0,
    path_command_ns=1e9 / _BAM_980PRO_ONE_DRIVE_IOPS - 1e9 / 1.0e6,
    fitted_to=f"{_BAM}nvm_block_bench_1_sam.log (Ops/sec: 798519), one 980 PRO at 4 KiB "
              f"against its 1 M IOPS data sheet: the rest of each command's time, "
              f"{1e9 / _BAM_980PRO_ONE_DRIVE_IOPS - 1e3:.0f} ns, per drive")

_XRP_DRAFT = ("Zhong et al., 'XRP: In-Kernel Storage Functions with eBPF' (OSDI'22), the draft "
              "in https://github.com/xrp-project/XRP ('XRP Draft.pdf')")
_XRP_CONDITIONS = ("one Intel Optane P5800X (a prototype), Linux 5.12.0, a 6-core Intel "
                   "i5-8500 at 3 GHz, Ubuntu 20.04, O_DIRECT, hyper-threading, C-states and "
                   "turbo off, KPTI on")

#: XRP's breakdown of a 512 B random read() on the P5800X (Table 1): the layers a synchronous
#: read through ext4 crosses, 6.27 us in all. The drive's share (3,224 ns) is the P5800X
#: profile's latency fit; the rest, 3,048 ns on one core, is this path's cost per read.
XRP_READ_LAYERS_NS = {"kernel crossing": 351.0, "read syscall": 199.0, "ext4": 2006.0,
                      "bio": 379.0, "NVMe driver": 113.0}
READ_EXT4 = HostPath(
    name="read-ext4",
    description="Linux read() on an ext4 file, O_DIRECT, interrupt-driven completion, one "
                "thread (XRP's testbed)",
    command_ns=sum(XRP_READ_LAYERS_NS.values()),
    fitted_to=f"{_XRP_DRAFT}, Table 1, average latency breakdown of a 512 B random read() on "
              f"the P5800X: " + ", ".join(f"{k} {v:.0f} ns" for k, v in
                                          XRP_READ_LAYERS_NS.items())
              + f" (storage device 3224 ns, total 6.27 us); {_XRP_CONDITIONS}")

#: SPDK's user-space, polled NVMe driver. No published per-command figure of its path was
#: found, so it is not modelled: its rows are timed device-only.
SPDK_POLLED = HostPath(
    name="spdk",
    description="SPDK's user-space NVMe driver, polled completions, one thread",
    command_ns=None, fitted_to="none found: SPDK's per-read cost is not modelled")

HOST_PATHS = (GPU_INITIATED, BAM_GPU2, IO_URING_POLLED, READ_EXT4, SPDK_POLLED, DESKTOP_OS,
              UNSTATED_OS)


@dataclass(frozen=True)
class Measurement:
    """One published measurement and the synthetic load that reproduces its conditions.

    ``metric`` is ``"iops"`` (requests / wall time of the run), ``"latency_us_mean"`` or
    ``"bandwidth_GBps"`` (1e9 B/s).
    The load: ``n_requests`` reads of ``nbytes`` at ``pattern`` aligned offsets, a closed loop of
    ``queue_depth`` (``queue_depth == n_requests``: all issued at once), at most
    ``max_in_flight`` in flight (None: unbounded), on ``n_ssd`` drives striped every
    ``nbytes``.
    """

    profile: str
    metric: str
    value: float
    n_ssd: int
    nbytes: int
    queue_depth: int
    n_requests: int
    max_in_flight: int | None
    source: str
    conditions: str
    host: HostPath
    pattern: str = "random"


#: XRP's Table 3 (the draft): average BPF-KV lookup latency (us) at 1 and at 6 index I/Os
#: per lookup, by I/O path. Each index level is one more dependent 512 B read, so the
#: difference over 5 levels is one read's latency through that path, the lookup's fixed work
#: (key choice, the value's read, parsing) cancelled.
XRP_LOOKUP_US = {"spdk": (5.2, 20.2), "io_uring": (13.6, 49.3), "read": (13.4, 48.8)}


def _xrp_per_read(path: str) -> float:
    one, six = XRP_LOOKUP_US[path]
    return (six - one) / 5


HELD_OUT = (
    Measurement(
        profile="p5800x", metric="iops", value=4.90356e6, n_ssd=1, nbytes=512,
        queue_depth=262144, n_requests=262144, max_in_flight=1 * 128 * 1023,
        source=_BAM + "nvm_block_bench_1_intel.log (Ops/sec: 4.90356e+06)",
        conditions=_BAM_CONDITIONS.format(size="512 B", drives="1 Intel Optane P5800X"),
        host=GPU_INITIATED),
    Measurement(
        profile="p5800x", metric="iops", value=_PATTERN_READS / _PATTERN_SECONDS, n_ssd=1,
        nbytes=4096, queue_depth=_PATTERN_READS, n_requests=_PATTERN_READS,
        max_in_flight=1 * 135 * 1023, pattern="sequential",
        source=_BAM + "nvm_pattern_bench.log (pass P:0: '#READ IOs: 131072', 'data:536870912 "
               "bandwidth: 5.942330 GBps', GBps being GiB/s in benchmarks/pattern/main.cu)",
        conditions="BaM nvm-pattern-bench (Qureshi et al., ASPLOS'23, artifact-evaluation log), "
                   "--impl_type=3 (sequential_warp_pc: each of 131,072 warps reads one 4 KiB "
                   "page through BaM's GPU page cache, pages in order), --n_ctrls=1 with 135 "
                   "queue pairs of depth 1024 on a controller reporting 'SQs: 135', as the "
                   "testbed's P5800X does (nvm_block_bench.log; its 980 PRO reports 'SQs: 129', "
                   "too few for 135 queue pairs), from the P5800X runs' GPU (pages_dma "
                   "0x58022010000); cold cache (every access a miss), GPU-initiated, timed by "
                   "CUDA events around the one kernel launch: 131,072 reads in 512 MiB / "
                   "5.942330 GiB/s = 84.14 ms",
        host=GPU_INITIATED),
    Measurement(
        profile="p5800x", metric="iops", value=74875.0, n_ssd=1, nbytes=4096,
        queue_depth=1, n_requests=20000, max_in_flight=None,
        source="KitGuru, 'Intel Optane DC P5800X 800GB SSD Review', page 7 (4K Random Read v "
               "QD comparison): https://kitguru.net/components/ssd-drives/simon-crisp/"
               "intel-optane-dc-p5800x-800gb-ssd-review/7",
        conditions="4K random read, QD1, one thread, through the reviewer's desktop OS and "
                   "benchmark tool (74,875 IOPS = 13.4 us per read)",
        host=DESKTOP_OS),
    Measurement(
        profile="980pro", metric="iops", value=1.52355e6, n_ssd=2, nbytes=4096,
        queue_depth=262144, n_requests=262144, max_in_flight=2 * 128 * 1023,
        source=_BAM + "nvm_block_bench_2_sam.log (Ops/sec: 1.52355e+06)",
        conditions=_BAM_CONDITIONS.format(size="4 KiB", drives="2 Samsung 980 PRO "
                                          "(requests spread over both), from GPU 2 (pages_dma "
                                          "0x3f040410000)"),
        host=BAM_GPU2),
    Measurement(
        profile="p5800x", metric="latency_us_mean", value=3.4, n_ssd=1, nbytes=512,
        queue_depth=1, n_requests=20000, max_in_flight=None,
        source=_AXBOE_POST + ": 'QD1 : 290K IOPS per core ( 3.4 usec avg latency)'",
        conditions=_AXBOE_CONDITIONS + ", queue depth 1", host=IO_URING_POLLED),
    Measurement(
        profile="p5800x", metric="iops", value=2.06e6, n_ssd=1, nbytes=512,
        queue_depth=16, n_requests=200000, max_in_flight=None,
        source=_AXBOE_POST + ": 'QD16 : 2.06M IOPS per core ( 6.9 usec avg latency)'",
        conditions=_AXBOE_CONDITIONS + ", queue depth 16", host=IO_URING_POLLED),
    Measurement(
        profile="p5800x", metric="latency_us_mean", value=6.9, n_ssd=1, nbytes=512,
        queue_depth=16, n_requests=200000, max_in_flight=None,
        source=_AXBOE_POST + ": 'QD16 : 2.06M IOPS per core ( 6.9 usec avg latency)'",
        conditions=_AXBOE_CONDITIONS + ", queue depth 16 (the same run as the row above: "
                   "its mean latency)", host=IO_URING_POLLED),
    Measurement(
        profile="p5800x", metric="latency_us_mean", value=_xrp_per_read("read"), n_ssd=1,
        nbytes=512, queue_depth=1, n_requests=20000, max_in_flight=None,
        source=f"{_XRP_DRAFT}, Table 3 (average latency of a random BPF-KV lookup by the "
               f"number of index I/Os), read() column: 13.4 us at 1 and 48.8 us at 6",
        conditions="BPF-KV lookups through read() on an ext4 file, one thread, a million "
                   "uniform random keys, caching off, each index level one dependent 512 B "
                   "read; the row is one more level's cost, (48.8 - 13.4) / 5 = 7.08 us per "
                   "read, which cancels the lookup's own fixed work; the same testbed as "
                   "Table 1 (the profile's latency fit and this path's): " + _XRP_CONDITIONS,
        host=READ_EXT4),
    Measurement(
        profile="p5800x", metric="latency_us_mean", value=_xrp_per_read("spdk"), n_ssd=1,
        nbytes=512, queue_depth=1, n_requests=20000, max_in_flight=None,
        source=f"{_XRP_DRAFT}, Table 3, SPDK column: 5.2 us at 1 index I/O and 20.2 us at 6",
        conditions="BPF-KV lookups through SPDK (polled, user space), one thread, as the row "
                   "above: (20.2 - 5.2) / 5 = 3.00 us per dependent 512 B read; "
                   + _XRP_CONDITIONS,
        host=SPDK_POLLED),
    Measurement(
        profile="micron9550", metric="iops", value=3.4e6, n_ssd=1, nbytes=4096,
        queue_depth=262144, n_requests=262144, max_in_flight=1 * 128 * 1023,
        source="Micron, 'Complete AI workloads faster using less power with the Micron 9550 "
               "SSD' (blog): 'This synthetic test is like FIO (flexible IO) but initiated from "
               "the H100 GPU. Here we see the Micron 9550 hitting 3.4 million input/output "
               "operations per second': https://in.micron.com/about/blog/storage/ai/"
               "complete-ai-workloads-faster-using-less-power-with-the-micron-9550-ssd",
        conditions="BaM's synthetic random-read benchmark on an NVIDIA H100 (PCIe Gen5), one "
                   "Micron 9550 U.2 7.68 TB, GPU-initiated; the post states neither the read "
                   "size nor the queues, so the replay assumes BaM's nvm-block-bench load of "
                   "the rows above (4 KiB, 262,144 at once, 128 queues x 1,023)",
        host=GPU_INITIATED),
    Measurement(
        profile="micron9550", metric="bandwidth_GBps", value=14.734, n_ssd=1, nbytes=131072,
        queue_depth=32, n_requests=20000, max_in_flight=None, pattern="sequential",
        source="TweakTown, 'Micron 9550 Pro E1.S 15mm 7.68TB SSD review' (2026): https://www."
               "tweaktown.com/reviews/11347/micron-9550-pro-e1-s-15mm-7-68tb-ssd-g8-flash-for-"
               "read-intensive-ai-storage-compute/index.html; the figure as quoted from it by "
               "https://windowsforum.com/threads/micron-9550-pro-e1-s-fast-gen5-nvme-ai-storage"
               "-for-read-intensive-workloads.402661/ ('peaks of 14,734 MB/s on sequential "
               "reads'); the stored copy of the review itself does not show the number",
        conditions="128 KiB sequential reads, one Micron 9550 PRO E1.S 7.68 TB, a peak (not a "
                   "mean); queue depth and OS not stated (replayed at QD32 as the calibration's "
                   "sequential benchmark); MB taken as 1e6 B",
        host=UNSTATED_OS),
)

#: Profiles for which no independent measurement was found in the sources searched (the
#: stored copies of reviews, papers and repositories this project can read), and why.
NOT_FOUND = {
    "pm1743": "no review or paper with PM1743 random-read IOPS or latency numbers was found; "
              "only Samsung's announcement (the fitting source). Papers that ran PM1743s "
              "report their systems' figures, not the drives': GustANN (SIGMOD'25, six "
              "drives under an A100: searches/s and 'up to 86.7 % SSD utilization'), "
              "BoostX-NTI (16 drives behind an NVMe/TCP target: network line rate). Hitchhike "
              "(ASPLOS'26) ran fio through io_uring, libaio and SPDK on a 3.84 TB PM1743 "
              "(MZWLO3T8HCLS, its 'SSD1'), but its artifact repository "
              "(github.com/haslaboratory/Hitchhike-AE) holds the scripts only (the result "
              "files are git-ignored) and the paper is not in the stored copies. No PM1743 "
              "review (StorageReview, ServeTheHome, TweakTown, Phoronix) is in the stored "
              "copies",
    "micron9550": "only two rows (Micron's own GPU-initiated run and a review's sequential "
                  "peak); StorageReview's 9550 MAX and TweakTown's 9550 PRO E1.S reviews were "
                  "found, but their stored copies give only the specification table (the "
                  "fitting source) and prose, not their measured 4 KiB random-read or QD1 "
                  "latency results; Micron's other blogs on the 9550 (GTC'24, BaM on a "
                  "pre-release Gen5 E3.S drive; 'Inference = IOPS', 2025-06) give charts and "
                  "ratios against an unnamed competitor, not drive-level figures",
    "980pro": "only one row (2 drives on BaM's testbed; its one-drive log fits that testbed's "
              "GPU-initiated path, gpu-initiated-gpu2); AnandTech's 980 PRO review was found but "
              "its stored copy has the charts' captions, not their numbers. Torp, Lund and "
              "Tozun, 'Path to GPU-Initiated I/O for Data-Intensive Systems' (DaMoN'25) ran BaM "
              "against SPDK on a V100 with four 980 PRO 1 TB (the 'legacy GPU server' of "
              "xnvme.io/aisio/environments.html), but the stored copy (pure.itu.dk) is the "
              "abstract; BaM issue #34 (github.com/ZaidQureshi/bam/issues/34), a user's "
              "nvm-block-bench run on a 980 PRO, is cut off in the stored copy before its "
              "figures; no KitGuru, Tom's Hardware or Phoronix 980 PRO review is in the "
              "stored copies",
    "ideal": "not a real drive: nothing to measure",
}

#: Published figures that were found and deliberately not used, and why.
NOT_USED = (
    ("BaM nvm-array-bench logs (asplosaoe/nvm_array_bench_*.log): their time includes the GPU "
     "software cache serving 128 M accesses (0.9375 hit rate), which the drive model does not "
     "see, so they measure the cache, not the drive"),
    ("Axboe's later per-core io_uring figures on P5800X drives (3.8 M, 5.1 M, 10 M IOPS per "
     "core, 2021, Phoronix): each is bounded by the host core on a newer kernel and CPU (a "
     "Ryzen 9 5950X, two drives), so they measure the host path's progress, not the drive; "
     "using them would need a host path fitted per kernel (his 2024 figure with the drives "
     "the limit, 5.1 M per drive, is a fitting source of the P5800X profile instead)"),
    ("fio issue #1206 (github.com/axboe/fio/issues/1206, P5800X through io_uring and SPDK): "
     "random writes, which the model does not time"),
    ("Axboe's queue-depth sweep of one Gen2 Optane drive through interrupt-driven io_uring "
     "(QD1-64, 512 B, Linux 5.19-rc3; io-uring list, 2022-06-22, lore.kernel.org/io-uring/"
     "57061b21-f31a-13b3-5311-7f250c87fd53@kernel.dk): that kernel's interrupt-driven io_uring "
     "path has no fitted cost of its own. XRP's layers other than ext4 (1,042 ns, another "
     "kernel and CPU) with the drive's 3.22 us would put its QD1 median (4.04 us) at 4.27 us; "
     "not a row, since the stored copies did not show the run's conditions again (a raw "
     "device or a file) to say which layers it crossed"),
    ("XRP's Table 3, io_uring column (7.14 us per dependent 512 B read through io_uring on "
     "ext4, within 1 % of read()'s): no breakdown of io_uring's own layers to give it a path "
     "of its own, and read()'s path would count the same table twice; its XRP column: measured "
     "under an older XRP kernel (the repository's README), through a resubmission path the "
     "model does not have"),
    ("Level1Techs forum, 'Toward 20 Million I/Ops - Part 1' (2021-04-29): one P5800X, fio with "
     "6 jobs at QD32, 512 B random reads, 2.589 M IOPS at 60 % system CPU: six cores' host "
     "path bounds it (the drive serves 5.09 M/s), and neither the engine nor a per-read cost "
     "of that path is given"),
    ("Micron's blog figure of 2.9 M IOPS for the 9550 training a GNN through BaM: the rate a "
     "training workload asked for, not what the drive can serve"),
    ("a survey note in a public repository quoting a PM1743 at 118 MB/s with 1 thread and "
     "5,606 MB/s with 64: no source, read size or I/O engine given"),
    ("Ren and Trivedi, 'Performance Characterization of Modern Storage Stacks: POSIX I/O, "
     "libaio, SPDK, and io_uring' (CHEOPS'23, Intel Optane SSDs) and Didona et al., "
     "'Understanding Modern Storage APIs' (SYSTOR'22): the artifact repository "
     "(github.com/atlarge-research/Performance-Characterization-Storage-Stacks) holds fio job "
     "files but no results, and the stored copies of the papers are abstracts; their figures "
     "would give spdk and libaio host paths a fitting figure and rows on one drive"),
    ("BaM's nvm_pattern_bench.log passes after the first: every access hits BaM's GPU cache, "
     "so they time the cache, not the drive"),
    ("nvm-block-bench runs posted in BaM's and GIDS's issues on drives they do not name: "
     "bam#28, a V100 with six 'Intel NVMe SSDs', 4 KiB random, 4,194,304 reads at once, 128 "
     "queues: 1.3523 M ops/s on one drive, 2.12461 M on two, about 10 GB/s on four (a V100 "
     "is a PCIe gen 3 device); bam#49, six 'Samsung SSD (PCIe 4.0)', about 5 GB/s of 4 KiB reads each "
     "(about 1.2 M/s, above the 980 PRO's 1 M rating, so not that drive), 18 GB/s on four and "
     "20 GB/s on six; GIDS#26, one 'gen5 TLC' drive, 12 GB/s at 4 KiB and 13.8 GB/s at 8 KiB; "
     "a code-search excerpt with no repository named, an H100 PCIe with one queue of depth "
     "1,024 on a '3500 GB' drive, 723,451 IOPS at 4 KiB: no drive, so no profile to replay "
     "them on"),
    ("SwarmIO (Kim, Yeo and Rhu, arXiv 2604.06668): an SSD emulator validated against 'a real "
     "SSD' with fio and BaM (7.7 % and 7.4 % IOPS error); the stored copies (an arxivlens "
     "summary, github.com/VIA-Research/SwarmIO) neither name the drive nor give its figures"),
    ("xNVMe's AiSIO study (xnvme.io/aisio): GPU-initiated 512 B reads (xnvmeperf cuda-run) "
     "on 16 Samsung PM1753, up to a 61.7 M IOPS roofline: a drive no profile models"),
    ("AGILE (SC'25, github.com/arc-research-lab/AGILE) and Solidigm's BaM and GIDS white paper "
     "measured GPU-initiated reads on Samsung 990 PRO and Solidigm D7-PS1010 drives: drives no "
     "profile models"),
    ("BaM's nvm_cache_bench.log (first pass: 32,768 cold 4 KiB page reads in 21.35 ms, "
     "1.535 M/s, on the P5800X from the same GPU as nvm_pattern_bench.log): the same quantity "
     "as the pattern-bench row, measured again (the model's 1.500 M is -2.3 % from it), so not "
     "counted as a further row"),
)


#: The published figure each host path's ``command_ns`` was fitted to, as a load the replay
#: reproduces (shown beside the fitting sources; never counted as validation).
HOST_PATH_FITS = {
    BAM_GPU2.name: Measurement(
        profile="980pro", metric="iops", value=_BAM_980PRO_ONE_DRIVE_IOPS, n_ssd=1, nbytes=4096,
        queue_depth=262144, n_requests=262144, max_in_flight=1 * 128 * 1023,
        source=_BAM + "nvm_block_bench_1_sam.log (Ops/sec: 798519)",
        conditions=_BAM_CONDITIONS.format(size="4 KiB", drives="1 Samsung 980 PRO, from GPU 2 "
                                          "(pages_dma 0x3f020410000)"),
        host=BAM_GPU2),
    READ_EXT4.name: Measurement(
        profile="p5800x", metric="latency_us_mean", value=6.27, n_ssd=1, nbytes=512,
        queue_depth=1, n_requests=20000, max_in_flight=None,
        source=f"{_XRP_DRAFT}, Table 1: 'total 6.27 us' of a 512 B random read()",
        conditions="one synchronous 512 B random read() at a time; " + _XRP_CONDITIONS,
        host=READ_EXT4),
    IO_URING_POLLED.name: Measurement(
        profile="p5800x", metric="iops", value=2.58e6, n_ssd=1, nbytes=512,
        queue_depth=128, n_requests=100000, max_in_flight=None,
        source=_AXBOE_POST + ": 'QD128 : 2.58M IOPS per core (34.9 usec avg latency)'",
        conditions=_AXBOE_CONDITIONS + ", queue depth 128", host=IO_URING_POLLED),
}

#: The other figure of each fitting run, which nothing was fitted to: shown beside the fit as a
#: check of the issuer's model, and not counted as validation (it is not independent of the
#: figure that was fitted: the same run).
HOST_PATH_CHECKS = {
    IO_URING_POLLED.name: replace(
        HOST_PATH_FITS[IO_URING_POLLED.name], metric="latency_us_mean", value=34.9),
}


def in_loop(row: Measurement) -> bool:
    """Whether ``row`` is timed as its issuer's loop of calls (:func:`issuer_loop`): its host
    path submits and waits in batches (:class:`HostPath`, ``batch``)."""
    return row.host.batch is not None


def in_waves(row: Measurement) -> bool:
    """Whether ``row``'s issuer goes in waves: a batched issuer whose whole queue depth fits in
    one batch submits all of it and waits for all of it (:class:`HostPath`, ``batch``)."""
    return in_loop(row) and 1 < row.queue_depth <= row.host.batch


@dataclass(frozen=True)
class LoopResult:
    """What :func:`issuer_loop` measured: reads per second, mean latency (us, from a read's
    preparation to its reaping), reads submitted per call and the core's busy share."""

    iops: float
    latency_us: float
    reads_per_call: float
    core_busy: float


def issuer_loop(trace, profile, queue_depth: int, command_ns: float, submit_share: float,
                batch: int, plug: int | None = None, n_ssd: int = 1,
                stripe_bytes: int | None = None) -> LoopResult:
    """Time one core running t/io_uring's loop over ``trace``'s reads through ``profile``'s
    model, as fio's t/io_uring.c (commit 5bd526f2, the version of Axboe's post) and a polled
    ring in Linux 5.9 run it.

    Each turn the issuer prepares up to ``batch`` reads for the free slots of its
    ``queue_depth`` (its ``inflight`` count goes up), then makes one call that submits them and,
    unless the submitted reads still leave room (``inflight + to_submit <= depth``), waits for
    ``min(inflight + to_submit, batch)`` completions; then it reaps the completions the call
    posted (``inflight`` goes down). The core spends ``submit_share`` of ``command_ns`` per read
    submitting it and the rest completing it. A waiting call polls the drive: it completes
    every read the drive has finished, spinning when none has, until it has its count or
    nothing is left in flight (io_iopoll_getevents), and returns at once when completions are
    already posted (io_iopoll_check). A call that does not wait polls nothing. The kernel hands
    the drive ``plug`` submitted reads at a time, each group when its last read is submitted
    (None: the whole call): blk-mq's plug list with the NVMe driver's ``commit_rqs``.

    So at a depth of at most ``batch`` the load goes in waves (submit the depth, wait for all of
    it), and deeper the loop keeps ``batch`` reads per call turning over. A read's latency is
    from its preparation to its reaping: Little's law on ``inflight``."""
    offsets, sizes = trace["offset"], trace["nbytes"]
    n = len(trace)
    model = SsdModel(profile, n_ssd, stripe_bytes or int(sizes[0]))
    submit, complete = command_ns * submit_share, command_ns * (1.0 - submit_share)
    pending = []        # drive completion times of reads submitted and not yet polled
    now = presence = 0.0  # presence: the sum over reads of (reaped - prepared)
    inflight = prepped = issued = reaped = calls = 0
    while reaped < n:
        if not prepped and inflight < queue_depth and issued < n:
            prepped = min(queue_depth - inflight, batch, n - issued)
            inflight += prepped
            presence -= prepped * now
        to_submit, prepped = prepped, 0
        to_wait = (0 if to_submit and inflight + to_submit <= queue_depth
                   else min(inflight + to_submit, batch))
        calls += 1
        group = plug or max(to_submit, 1)
        for lo in range(issued, issued + to_submit, group):
            hi = min(lo + group, issued + to_submit)
            now += (hi - lo) * submit
            for i in range(lo, hi):
                heapq.heappush(pending, model.submit(math.ceil(now), int(offsets[i]),
                                                     int(sizes[i])))
        issued += to_submit
        posted = 0
        while to_wait and pending and posted < to_wait:
            now = max(now, pending[0])
            while pending and pending[0] <= now:
                heapq.heappop(pending)
                now += complete
                posted += 1
        inflight -= posted
        reaped += posted
        presence += posted * now
    return LoopResult(iops=n / now * 1e9, latency_us=presence / n / 1e3,
                      reads_per_call=n / calls, core_busy=n * command_ns / now)


def model_value(row: Measurement) -> tuple[float, str]:
    """``(figure, bound)``: the model's figure for ``row``'s conditions and what bounds it, from
    the synthetic trace replayed for it (or, for a batched host, its loop: :func:`issuer_loop`)."""
    trace = synthetic_trace(row.n_requests, row.queue_depth, row.nbytes, row.pattern)
    if in_loop(row):
        host = row.host
        loop = issuer_loop(trace, row.profile, row.queue_depth, host.command_ns,
                           host.submit_share, host.batch, host.plug, row.n_ssd, row.nbytes)
        figures = {"iops": loop.iops, "latency_us_mean": loop.latency_us,
                   "bandwidth_GBps": loop.iops * row.nbytes / 1e9}
        shape = ("waves: the depth submitted per call, the call waits for all of it"
                 if in_waves(row) else f"{loop.reads_per_call:.1f} reads per call")
        return figures[row.metric], f"the issuer's loop ({shape}); core {loop.core_busy:.0%} busy"
    report = gids.replay(trace, row.profile, n_ssd=row.n_ssd, stripe_bytes=row.nbytes,
                         max_in_flight=row.max_in_flight,
                         host_command_ns=row.host.command_ns or 0.0,
                         path_command_ns=row.host.path_command_ns)
    figures = {"iops": report.iops, "latency_us_mean": report.latency_us_mean,
               "bandwidth_GBps": report.bandwidth_GBps}
    return figures[row.metric], report.bound


def fitting_sources(name: str) -> list[str]:
    """The published figures ``name``'s parameters were fitted to, with their sources."""
    published = ssd_profile(name).published
    return [f"{metric}: {figure.value:.4g} ({figure.source})"
            for metric, figure in vars(published).items() if figure is not None]


def validate(names) -> list[dict]:
    """Model vs measured for every held-out row of the profiles ``names``."""
    results = []
    for row in HELD_OUT:
        if row.profile not in names:
            continue
        value, bound = model_value(row)
        error = value / row.value - 1
        results.append(dict(asdict(row), model=value, error=error, bound=bound,
                            waves=in_waves(row),
                            like_for_like=row.host.command_ns is not None,
                            within=abs(error) <= TOLERANCE))
    return results


def _format_value(metric, value):
    return {"iops": f"{value / 1e6:.3f} M", "latency_us_mean": f"{value:.2f} us",
            "bandwidth_GBps": f"{value:.2f} GB/s"}[metric]


def _path_cost(command_ns, path_command_ns) -> str:
    cost = f"{command_ns:.1f} ns per command"
    if path_command_ns:
        cost += f" + {path_command_ns:.1f} ns per command on each drive's path"
    return cost


def format_table(names, results) -> str:
    """The validation table, the fitting sources and what is missing, as text."""
    lines = [(f"{'profile':<10} {'drives':>6} {'size':>6} {'load':>16} {'metric':<15} "
              f"{'model':>10} {'measured':>10} {'error':>7}")]
    for r in results:
        load = ("QD1" if r["queue_depth"] == 1 else
                f"{r['n_requests']} at once" if r["queue_depth"] == r["n_requests"] else
                f"QD{r['queue_depth']}")
        if r["pattern"] == "sequential":
            load += " seq"
        if r["waves"]:
            load += " waves"
        flag = "" if r["within"] else "  (outside 15 %)"
        lines.append(f"{r['profile']:<10} {r['n_ssd']:>6} {r['nbytes']:>6} {load:>16} "
                     f"{r['metric']:<15} {_format_value(r['metric'], r['model']):>10} "
                     f"{_format_value(r['metric'], r['value']):>10} {r['error']:>+7.1%}{flag}")
        lines.append(f"    source: {r['source']}")
        lines.append(f"    conditions: {r['conditions']}")
        host = r["host"]
        cost = ("not modelled: no figure to fit it to, so the model times the device alone "
                "(not like for like)" if host["command_ns"] is None
                else _path_cost(host["command_ns"], host["path_command_ns"]))
        lines.append(f"    host path: {host['description']}; {cost}")
        lines.append(f"    model bound by: {r['bound']}")
    one = HOST_PATH_FITS[BAM_GPU2.name]
    two = next((r for r in results if r["host"]["name"] == BAM_GPU2.name and r["n_ssd"] == 2),
               None)
    if two:
        scaling = two["model"] / model_value(one)[0]
        lines.append(f"980pro scaling 1 -> 2 drives: model {scaling:.3f}x, measured "
                     f"{two['value'] / one.value:.3f}x (the one-drive log is the "
                     f"{BAM_GPU2.name} path's fit)")
    within = sum(r["within"] for r in results)
    alike = [r for r in results if r["like_for_like"]]
    lines.append(f"within 15 %: {within} of {len(results)} rows "
                 f"({sum(r['within'] for r in alike)} of {len(alike)} like for like, their "
                 f"host path modelled)")
    lines.append("")
    lines.append("fitted to (data sheets and the measurements named; not validation):")
    for name in names:
        for item in fitting_sources(name):
            lines.append(f"  {name:<10} {item}")
    lines.append("host paths fitted to (not validation):")
    for path in HOST_PATHS:
        fit = HOST_PATH_FITS.get(path.name)
        check = ""
        if fit is not None and fit.profile in names:
            runs = [m for m in (fit, HOST_PATH_CHECKS.get(path.name)) if m is not None]
            parts = [f"{_format_value(m.metric, model_value(m)[0])} against "
                     f"{_format_value(m.metric, m.value)}" for m in runs]
            if len(parts) > 1:
                parts[1:] = [f"{part}, not fitted" for part in parts[1:]]
            check = f" (timed: {'; '.join(parts)})"
        cost = ("not modelled" if path.command_ns is None
                else _path_cost(path.command_ns, path.path_command_ns))
        lines.append(f"  {path.name:<18} {cost}: {path.fitted_to}{check}")
    lines.append("")
    lines.append("held-out measurements missing:")
    for name in names:
        if name in NOT_FOUND:
            lines.append(f"  {name:<10} {NOT_FOUND[name]}")
    for item in NOT_USED:
        lines.append(f"  not used: {item}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.ssd_validation",
                                     description="SSD models against held-out measurements.")
    parser.add_argument("--ssd", nargs="*", default=gids.ssd_profiles(), metavar="PROFILE",
                        help="profiles (default: all)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    try:
        for name in args.ssd:
            ssd_profile(name)
    except ValueError as exc:
        parser.error(str(exc))
    results = validate(args.ssd)
    print(format_table(args.ssd, results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tolerance": TOLERANCE, "rows": results,
                       "within": sum(r["within"] for r in results),
                       "host_paths": [asdict(path) for path in HOST_PATHS],
                       "not_found": NOT_FOUND, "not_used": list(NOT_USED)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
