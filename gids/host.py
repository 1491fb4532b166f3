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
  the width of the daemon's store table (one row per array: ``Store.table_row``).
- ``SsdModel``: the timing model of an SSD profile (``gids.ssd_profiles()``);
  ``TraceWriter``: writes an I/O trace (``gids.read_trace``, ``gids.replay``).
- ``host_view(mapped)``: the numpy array behind a mapped (device-visible) host array.
- ``cheap_launches_installed()``: whether kernel launches with a handle keep their marshalled
  arguments on the handle (``kernels/launch.py``; on a GPU, after ``import gids``).
"""
from gids._platform import host_view
from host_daemon.daemon import HostDaemon, cq_fields, cq_seq, serve_page, sq_tag, sq_word
from host_daemon.daemon import _now_ns as now_ns
from host_daemon.nvme_controller import NvmeController
from host_daemon.ssd_model import SsdModel
from host_daemon.stores import T_COLUMNS, FileStore, MemoryStore, MmapStore, Store, open_file_store
from host_daemon.sync import load_acquire, store_release
from host_daemon.trace import TraceWriter
from kernels.launch import installed as cheap_launches_installed

__all__ = ["HostDaemon", "NvmeController", "serve_page", "sq_word", "sq_tag", "cq_seq",
           "cq_fields", "load_acquire", "store_release", "now_ns", "Store", "FileStore",
           "MemoryStore", "MmapStore", "open_file_store", "T_COLUMNS", "SsdModel", "TraceWriter",
           "host_view", "cheap_launches_installed"]
