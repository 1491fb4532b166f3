"""Host-side building blocks, for benchmarks and tools that drive the I/O back ends without a
:class:`gids.Runtime`: host CPU threads play the GPU on a daemon's (or an emulated NVMe
controller's) queues, or read a store the way the daemon does.

- ``HostDaemon``, ``NvmeController``: the two back ends' host sides.
- ``serve_page(table, array_id, page, page_size, dst)``: the daemon's read of one page (njit).
- ``sq_word``/``sq_tag``/``cq_seq``/``cq_fields``: the queue records' words (njit, from
  :mod:`gids.layout`); ``load_acquire``/``store_release``: ordered host accesses to a word of
  a shared array (njit); ``now_ns(ts)``: the daemon's clock, CLOCK_MONOTONIC (njit, ``ts`` a
  2-element int64 scratch array).
- ``Store``, ``FileStore``, ``MemoryStore``, ``MmapStore``, ``open_file_store``; ``T_COLUMNS``:
  the width of the daemon's store table (one row per array: ``Store.table_row``);
  ``DIRECT_ALIGN``: the alignment of O_DIRECT buffers, offsets and sizes;
  ``write_stripes(src, paths, unit)``: a file's bytes split over N files, RAID 0 (what a
  ``StripedStore`` reads).
- ``SsdModel``: the timing model of an SSD profile (``gids.ssd_profiles()``);
  ``model_submit_locked(state, params, now_ns, offset, nbytes)``: a read's completion time
  under the model, from njit code of threads sharing it (``SsdModel.njit_args()``);
  ``ssd_profile(name)``: a profile's parameters and its published figures;
  ``TraceWriter``: writes an I/O trace (``gids.read_trace``, ``gids.replay``);
  ``synthetic_trace(n, queue_depth, nbytes)``: a trace of ``n`` random reads at a depth.
- io_uring, the daemon's engine: ``uring_probe()`` (None where a ring can be set up here, else
  why not); ``UringRing(entries, owned=False)`` (a ring; ``owned``: one thread's, which calls
  ``.enable()`` before it submits; ``.args`` is what the njit operations take:
  ``ring_room``, ``ring_prep``, ``ring_submit``, ``ring_submit_wait``, ``ring_enter``,
  ``ring_ready``, ``ring_cqe``, ``ring_consume``, with ``IORING_OP_READ`` and
  ``IORING_ENTER_GETEVENTS``).
- ``host_view(mapped)``: the numpy array behind a mapped (device-visible) host array.
- ``cheap_launches_installed()``: whether kernel launches with a handle keep their marshalled
  arguments on the handle (``kernels/launch.py``; on a GPU, after ``import gids``).
"""
from gids._platform import host_view
from host_daemon.daemon import HostDaemon, cq_fields, cq_seq, serve_page, sq_tag, sq_word
from host_daemon.daemon import _now_ns as now_ns
from host_daemon.nvme_controller import NvmeController
from host_daemon.ssd_model import SsdModel, model_submit_locked
from host_daemon.ssd_model import get_profile as ssd_profile
from host_daemon.stores import (
    DIRECT_ALIGN,
    T_COLUMNS,
    FileStore,
    MemoryStore,
    MmapStore,
    Store,
    open_file_store,
    write_stripes,
)
from host_daemon.sync import load_acquire, store_release
from host_daemon.trace import TraceWriter, synthetic_trace
from host_daemon.uring import (
    IORING_ENTER_GETEVENTS,
    IORING_OP_READ,
    ring_consume,
    ring_cqe,
    ring_enter,
    ring_prep,
    ring_ready,
    ring_room,
    ring_submit,
    ring_submit_wait,
)
from host_daemon.uring import Ring as UringRing
from host_daemon.uring import probe as uring_probe
from kernels.launch import installed as cheap_launches_installed

__all__ = ["HostDaemon", "NvmeController", "serve_page", "sq_word", "sq_tag", "cq_seq",
           "cq_fields", "load_acquire", "store_release", "now_ns", "Store", "FileStore",
           "MemoryStore", "MmapStore", "open_file_store", "T_COLUMNS", "DIRECT_ALIGN",
           "write_stripes", "SsdModel", "model_submit_locked", "ssd_profile", "TraceWriter",
           "synthetic_trace",
           "uring_probe", "UringRing", "ring_room", "ring_prep", "ring_submit",
           "ring_submit_wait", "ring_enter",
           "ring_ready", "ring_cqe", "ring_consume", "IORING_OP_READ", "IORING_ENTER_GETEVENTS",
           "host_view", "cheap_launches_installed"]
