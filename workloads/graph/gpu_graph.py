"""A CSR graph on the GPU: offsets in device memory, neighbour lists behind a *data path*.

The traversal kernels (:mod:`.gpu_bfs`, :mod:`.gpu_cc`) never touch the neighbours array
directly. Each per-edge read is one call ``read_neighbour(arg, k)``, entry ``k`` of the CSR
neighbours array, where ``read_neighbour`` is a small ``@cuda.jit(device=True)`` function chosen
per data path and ``arg`` is whatever that function needs (a gids array handle, a device array).
The kernel factories (:func:`~.gpu_bfs.make_bfs_kernels`, :func:`~.gpu_cc.make_cc_kernels`) close
over the reader, and Numba compiles one specialisation per reader, so every data path runs the
same traversal code and differs only in that one load.

Data paths built in:

``"gids"``
    The neighbours section of the graph file opened as a gids ``StorageArray``; entries are read
    with ``gids.read`` through the GPU page cache, misses served by the host daemon (the BaM
    model). ``offsets`` stay in device memory, as in BaM.
``"nvme"``
    The same :class:`GidsSource` over a Runtime with ``backend="nvme"``: misses go as NVMe read
    commands through submission rings to the emulated NVMe controller
    (:func:`open_nvme_source`).
``"memory"``
    The whole neighbours array copied to device memory: the "everything fits on the GPU" ceiling.

``"zero_copy"``
    The neighbours array in pinned, device-mapped host memory, read by the kernel over PCIe
    (EMOGI's model; the warp's 32 consecutive reads coalesce): :class:`ZeroCopySource`.
``"cpu_batch"``
    The GPUDirect Storage pattern, level-synchronous: before each launch the host gathers the
    pages of the lists the launch reads (parallel ``njit`` gather into pinned memory), copies them
    to the GPU, and the kernel reads them there: :class:`CpuBatchSource`.

Both reuse :mod:`workloads.baselines` (its zero-copy path, its gather and batch reader).

Hooks for other data paths: subclass
:class:`NeighbourSource` (or use :class:`DeviceArraySource` with any kernel-addressable array,
e.g. a mapped pinned array for zero-copy) and register an opener with
:func:`register_data_path`. A path that must stage data before each launch (a CPU-initiated
batch path) overrides :meth:`NeighbourSource.before_launch`, which is told which adjacency lists
the next launch reads (an :class:`Access`); its reader then resolves ``k`` in what it staged.
"""
from __future__ import annotations

import gids  # first: picks GPU or simulator before numba.cuda loads

# isort: split

import inspect
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np
from numba import cuda

from gids import SIMULATOR
from gids import read as gids_read
from gids.device import WARP_SIZE
from workloads.pager import GIDS_PAGER, GIDS_TIER_PAGER

from ..ssd_options import runtime_emulation
from .csr_file import CSRGraph, GraphFormatError, open_csr
from .gpu_bfs import BFSResult, validate_bfs_result
from .gpu_bfs import bfs as _bfs
from .gpu_cc import CCResult, validate_cc_result
from .gpu_cc import connected_components as _connected_components
from .gpu_launch import Access, launch_geometry  # noqa: F401  (Access: part of this API)
from .tier_pages import ranked_pages


# ---------------------------------------------------------------------------------- readers
@cuda.jit(device=True)
def read_device_array(neighbours, k):
    """Entry ``k`` of a neighbours array the kernel addresses directly.

    The reader of the ``"memory"`` path (a device array), and of any path whose data a kernel
    can load with a plain index: a mapped (zero-copy) pinned host array works unchanged.
    """
    return neighbours[k]


#: The reader of the ``"gids"`` path: ``gids.read(handle, k)``, through the GPU page cache.
read_gids = gids_read


# ---------------------------------------------------------------------------------- data paths
class NeighbourSource:
    """The neighbours array of one graph, made readable by kernels through one data path.

    Attributes
    ----------
    name : str
        The data path (``"gids"``, ``"memory"``, ...).
    label : str
        What tables print, e.g. ``"gids, cache 25% (13 pages of 512 B)"``.
    reader : numba.cuda device function
        ``reader(arg, k)`` returns neighbours entry ``k`` (any integer type). Set it on the
        instance, not the class: a dispatcher read through an instance from a class attribute
        binds like a method.
    arg : object
        Passed to kernels as the reader's first argument; read before every launch, so a path may
        replace it.
    cache_fraction : float or None
        Cache size over the neighbours array's size, for paths with a cache.

    Notes
    -----
    A search calls :meth:`begin_search`, then for each launch :meth:`before_launch` and, after
    it, :meth:`check`; then :meth:`end_search`. :meth:`close` releases what the source made.
    """

    name = "?"
    label = "?"
    reader = None
    #: A :class:`~workloads.pager.Pager` for kernels that read a page at a time
    #: (the BFS's top-down step), or None: they then read element by element with ``reader``.
    pager = None
    arg = None
    cache_fraction = None
    #: Register cap of the traversal kernels that read through this source (``None``: that of
    #: ``gids.jit``); see :data:`WHOLE_CACHE_REGISTERS`.
    max_registers = None
    #: Whether the top-down kernel touches pages ahead of its reads (the first entries of a
    #: run's lists, the next window of a long list), so that their misses are in flight
    #: together. Set by :meth:`begin_search`; a source whose every page is resident turns it off.
    touch_ahead = True
    #: Whether every page the kernels read is in the source's cache as the search starts (set
    #: by :meth:`begin_search`; only a gids cache that holds the whole array, warm): the BFS
    #: then runs its top-down step without a miss path (``gpu_bfs.RESIDENT_FIRST``).
    all_resident = False

    def begin_search(self, cold: bool = True) -> None:
        """Before a timed search; ``cold`` asks for an empty cache (for paths that have one)."""

    def before_launch(self, access: Access) -> None:
        """Before each kernel launch: the hook for paths that stage data ahead of the kernel."""

    def check(self) -> None:
        """After a launch: wait for it and raise any error the data path recorded."""
        cuda.synchronize()

    def end_search(self) -> dict | None:
        """After a search: the data path's counters for it (``None`` if it keeps none)."""
        return None

    def close(self) -> None:
        """Release what the source allocated or opened."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DeviceArraySource(NeighbourSource):
    """Neighbours in an array kernels index directly: device memory, or mapped pinned memory.

    Parameters
    ----------
    array : device array
        The neighbours (at least one element: an edgeless graph gets a one-element dummy).
    name : str
        Data path name.
    label : str, optional
        Table label; default ``name``.
    """

    def __init__(self, array, name: str = "memory", label: str | None = None):
        # An instance attribute: a Numba dispatcher is a descriptor (it binds as a method when
        # read from a class attribute through an instance).
        self.reader = read_device_array
        self.arg = array
        self.name = name
        self.label = label or name


#: Register cap of the BFS kernels over a gids cache that holds the whole neighbours array.
#: There a miss is only a page's first touch and the hit path sets the pace, so more blocks an
#: SM pay: at scale 24 on the H200 (``gpu_session bfs-warm``) warm searches ran fastest at cap 64
#: (four blocks of 256 threads an SM; 80 and 128 slower or within the spread between runs).
#: Through a quarter-size cache, where misses are many and the slow path spills, a low cap costs
#: (80: 11 % slower at scale 22), so it applies to the whole cache only (docs/design-notes.md,
#: "Register caps and the out-of-line miss path"). The setting ``whole_cache_registers``
#: (``GIDS_WHOLE_CACHE_REGISTERS=N``, read at import); 0 keeps the default cap everywhere.
WHOLE_CACHE_REGISTERS = gids.defaults.get("whole_cache_registers") or None


#: How a :class:`GidsSource` uses its host tier (``host_tier_mode``; see there).
TIER_MODES = ("copy", "direct", "split")


#: The setting ``bfs_touch``: ``GIDS_BFS_TOUCH=always`` (read at import) keeps the top-down
#: kernel's touches ahead even when every page is resident (:attr:`NeighbourSource.touch_ahead`),
#: to measure what they cost.
TOUCH_AHEAD = gids.defaults.get("bfs_touch")


class GidsSource(NeighbourSource):
    """The neighbours section of the graph file, read through a gids Runtime's page cache.

    Serves both Runtime data paths: its :attr:`name` is ``"gids"`` on a host-daemon Runtime and
    ``"nvme"`` on one with ``backend="nvme"`` (:func:`open_nvme_source`), and its label says
    which, and which SSD array the Runtime emulates, if any.

    Parameters
    ----------
    graph : CSRGraph
        Opened from a file (:func:`~.csr_file.open_csr`).
    runtime : gids.Runtime, optional
        Use this Runtime (and its cache size); it stays open after :meth:`close`. Without one, a
        Runtime is made with a cache of ``cache_fraction`` of the neighbours array and closed by
        :meth:`close`.
    cache_fraction : float, optional
        Cache size as a fraction of the neighbours array's pages (rounded up, at least one warp's
        pages). Default 1.0 (the whole array fits). Only without ``runtime``.
    page_size : int, optional
        For a Runtime made here; default ``gids.defaults``.
    storage : {"file", "mmap", "memory"}
        How the Runtime reads the file (``Runtime.open_array``'s ``storage``).
    runtime_options : dict, optional
        More keyword arguments for a Runtime made here (``backend``, ``ssd``, ``n_ssd``,
        ``daemon_threads``, ``queues``, ...).
    host_tier : {"degree", "pagerank"}, optional
        Give a Runtime made here a host tier of ``host_tier_fraction`` of the neighbours'
        pages (1: all of them), filled with the pages of highest score by that method
        (:mod:`workloads.graph.tier_pages`), used as ``host_tier_mode`` says
        (:data:`TIER_MODES`):

        ``"copy"``
            a miss on a tier page copies it into the GPU cache (whose content stays dynamic:
            with a tier of every page, no miss reaches the file once the tier is filled);
        ``"direct"``
            a page in the tier but not in the GPU cache is read in place over PCIe and takes
            no GPU slot (the traversal pins with :data:`~workloads.pager.GIDS_TIER_PAGER`);
            the GPU cache holds the pages outside the tier;
        ``"split"``
            ``"direct"``, with the pages of highest score preloaded into the GPU cache before
            each search (untimed; as many as it has slots), and the tier filled with the other
            pages first: the top pages are read from GPU memory, every other one in place, and
            where the tier holds every page not preloaded (``host_tier_fraction`` at least
            ``1 - cache_fraction``), nothing evicts the preloaded ones and no search reads the
            file. Preloaded pages come from the tier where it has them (fraction 1), else from
            the file.

    Attributes
    ----------
    emulation : workloads.ssd_options.Emulation or None
        The SSD array the Runtime emulates in real time (``ssd=``, ``n_ssd=``).
    max_registers : int or None
        :data:`WHOLE_CACHE_REGISTERS` where the cache holds every page of the neighbours array,
        else None (``gids.jit``'s cap).
    """

    name = "gids"
    #: Pages preloaded into the GPU cache before each cold search (``host_tier_mode="split"``;
    #: a warm search keeps what the last one left).
    preload = None

    def __init__(self, graph: CSRGraph, *, runtime=None, cache_fraction: float | None = None,
                 page_size: int | None = None, storage: str = "file",
                 runtime_options: dict | None = None, host_tier: str | None = None,
                 host_tier_fraction: float = 0.0, host_tier_mode: str = "copy"):
        if runtime is not None and (cache_fraction is not None or page_size is not None
                                    or runtime_options or host_tier):
            raise ValueError("give a runtime, or cache_fraction / page_size / runtime_options "
                             "for one made here, not both")
        path, byte_offset, n_items, dtype = graph.neighbour_section
        self.reader = read_gids
        self.pager = GIDS_PAGER
        self._own_runtime = runtime is None
        if runtime is None:
            fraction = 1.0 if cache_fraction is None else float(cache_fraction)
            if not 0 < fraction <= 1:
                raise ValueError(f"cache_fraction must be in (0, 1], got {fraction}")
            page = gids.defaults.get("page_size") if page_size is None else int(page_size)
            data_pages = max(1, math.ceil(n_items * dtype.itemsize / page))
            pages = max(WARP_SIZE, math.ceil(fraction * data_pages))
            options = dict(runtime_options or {})
            tier_pages = 0
            if host_tier:
                if not 0 < host_tier_fraction <= 1:
                    raise ValueError(f"host_tier_fraction must be in (0, 1], got "
                                     f"{host_tier_fraction}")
                if host_tier_mode not in TIER_MODES:
                    raise ValueError(f"host_tier_mode must be one of {TIER_MODES}, got "
                                     f"{host_tier_mode!r}")
                tier_pages = math.ceil(host_tier_fraction * data_pages)
                options["host_cache_bytes"] = tier_pages * page
            runtime = gids.Runtime(cache_pages=pages, page_size=page, **options)
        self.runtime = runtime
        try:
            self.array = runtime.open_array(path, dtype, shape=n_items, offset=byte_offset,
                                            storage=storage)
            if host_tier:
                ranked = ranked_pages(graph, host_tier, page)
                if host_tier_mode == "split":
                    # The GPU cache gets the top pages, the tier the rest first (then, with
                    # room, the top pages too, from where the preload copies them).
                    self.preload = np.sort(ranked[:runtime.cache_slots])
                    ranked = np.concatenate([ranked[runtime.cache_slots:],
                                             ranked[:runtime.cache_slots]])
                in_tier = np.sort(ranked[:tier_pages])
                runtime.host_tier.add(self.array, in_tier)
                runtime.host_tier.set_mode(self.array,
                                           "copy" if host_tier_mode == "copy" else "direct")
                if host_tier_mode != "copy":
                    # Pages the tier has but the GPU cache does not take no slot: read in place.
                    self.pager = GIDS_TIER_PAGER
        except BaseException:
            self.close()
            raise
        data_pages = self.array.n_pages
        # Every page is in a direct-mode tier or preloaded (split): touches ahead would bring
        # nothing in.
        self._nothing_to_load = False
        if host_tier_mode != "copy" and host_tier is not None:
            placed = in_tier if self.preload is None else np.union1d(in_tier, self.preload)
            self._nothing_to_load = placed.size >= data_pages
        self._preloaded = False
        self._preload_seconds = 0.0
        self._resident_at_start = 0
        self.cache_pages = runtime.cache_slots
        self.cache_fraction = self.cache_pages / data_pages
        if self.cache_pages >= data_pages:
            self.max_registers = WHOLE_CACHE_REGISTERS
        self.name = _BACKEND_PATHS[runtime.backend]
        self.emulation = runtime_emulation(runtime)
        self.label = (f"{_RUNTIME_PATH_TITLES[self.name]}, cache {self.cache_fraction:.0%} "
                      f"({self.cache_pages} pages of {runtime.page_size} B"
                      + (f"; kernels at {self.max_registers} registers"
                         if self.max_registers and not SIMULATOR else "") + ")"
                      + (f", host tier {runtime.host_tier.used / data_pages:.0%} by {host_tier}"
                         f" ({host_tier_mode}"
                         + (f": {self.preload.size} top pages preloaded in the GPU cache"
                            if self.preload is not None else "") + ")"
                         if host_tier else "")
                      + (f", emulated {self.emulation.label}" if self.emulation else ""))
        # Taken after the array is open: opening another array may grow the page tables.
        self.arg = self.array.handle

    def begin_search(self, cold: bool = True) -> None:
        if cold:
            # The host tier is filled once, as GIDS's CPU buffer: a cold search starts from it.
            self.runtime.invalidate(keep_host_tier=True)
            self._preloaded = False
        if self.preload is not None and not self._preloaded:
            # Split mode's static placement, as the tier's fill: untimed, before the search.
            start = time.perf_counter()
            self.runtime.prefetch(self.array, self.preload << self.array.elem_shift)
            self.runtime.sync()
            self._preload_seconds = time.perf_counter() - start
            self._preloaded = True
            self._resident_at_start = self.array.resident_pages()
        self.runtime.reset_stats()
        # Touches ahead only bring pages in: with every page resident (a warm cache that holds
        # the whole array) each would be one more lookup, an atomic and a reduction on the
        # page's word, for nothing.
        self.all_resident = not cold and self.array.resident_pages() >= self.array.n_pages
        self.touch_ahead = TOUCH_AHEAD == "always" or not (self.all_resident
                                                           or self._nothing_to_load)

    def check(self) -> None:
        # Waits for the kernel, raises StorageIOError / GidsTimeoutError / ... a thread recorded
        # (a failed read returned 0, so the launch's result cannot be trusted).
        self.runtime.sync()

    def end_search(self) -> dict:
        s = self.runtime.stats()
        return {"lookups": s.lookups, "hits": s.hits, "misses": s.misses, "ios": s.ios,
                "bytes_read": s.bytes_read, "evictions": s.evictions, "hit_rate": s.hit_rate,
                "io_latency_us": s.io_latency_us, "miss_latency_us": s.miss_latency_us,
                "slot_retries": s.slot_retries, "tier_hits": s.tier_hits,
                "tier_direct": s.tier_direct,
                **({"preloaded_pages": self._resident_at_start,
                    "preload_seconds": self._preload_seconds}
                   if self.preload is not None else {})}

    def close(self) -> None:
        if self._own_runtime and getattr(self, "runtime", None) is not None:
            self.runtime.close()


def _neighbours_or_dummy(graph: CSRGraph) -> np.ndarray:
    if graph.n_edges == 0:
        # Kernels never read an edgeless graph's neighbours, but they need an array to pass.
        return np.zeros(1, dtype=np.asarray(graph.neighbours).dtype)
    return np.ascontiguousarray(graph.neighbours)


def open_memory_source(graph: CSRGraph) -> DeviceArraySource:
    """The ``"memory"`` data path: the whole neighbours array in device memory."""
    return DeviceArraySource(cuda.to_device(_neighbours_or_dummy(graph)), "memory",
                             "memory (all in GPU memory)")


#: Data path name of each Runtime backend, and how tables title it.
_BACKEND_PATHS = {"host": "gids", "nvme": "nvme"}
_RUNTIME_PATH_TITLES = {"gids": "gids", "nvme": "gids NVMe path"}


def open_gids_source(graph: CSRGraph, *, runtime=None, cache_fraction: float | None = None,
                     page_size: int | None = None, storage: str = "file",
                     runtime_options: dict | None = None,
                     **tier_options) -> NeighbourSource:
    """The ``"gids"`` data path (parameters as :class:`GidsSource`; ``tier_options``: its
    ``host_tier``, ``host_tier_fraction``, ``host_tier_mode``)."""
    if graph.n_edges == 0:
        # A StorageArray needs one element at least, and no kernel reads an edgeless graph.
        backend = (runtime.backend if runtime is not None
                   else (runtime_options or {}).get("backend", "host"))
        name = _BACKEND_PATHS[backend]
        return DeviceArraySource(cuda.to_device(_neighbours_or_dummy(graph)), name,
                                 f"{_RUNTIME_PATH_TITLES[name]} (edgeless graph: nothing to read)")
    return GidsSource(graph, runtime=runtime, cache_fraction=cache_fraction, page_size=page_size,
                      storage=storage, runtime_options=runtime_options, **tier_options)


def open_nvme_source(graph: CSRGraph, *, runtime=None, cache_fraction: float | None = None,
                     page_size: int | None = None, storage: str = "file",
                     runtime_options: dict | None = None,
                     **tier_options) -> NeighbourSource:
    """The ``"nvme"`` data path: :class:`GidsSource` over a Runtime with ``backend="nvme"``.

    Parameters as :class:`GidsSource`; a Runtime made here gets ``backend="nvme"`` added to
    ``runtime_options``. What the NVMe back end does not do is never asked of it: the traversal
    only reads (the back end opens arrays read-only), the neighbours section may start at any
    byte of the file (commands address pages of the array, whatever its offset) and every
    ``storage`` and page size a Runtime takes works. Its one extra limit, ``queue_depth`` at
    most 1024, is checked by :class:`gids.Runtime` (``ConfigError``).

    Raises
    ------
    ValueError
        ``runtime`` is not an NVMe Runtime, or ``runtime_options`` names another backend.
    """
    if runtime is not None:
        if runtime.backend != "nvme":
            raise ValueError(f"the nvme data path reads through a Runtime made with "
                             f"backend='nvme', not backend={runtime.backend!r} (use the gids "
                             "data path for that one)")
    else:
        runtime_options = dict(runtime_options or {})
        if runtime_options.setdefault("backend", "nvme") != "nvme":
            raise ValueError(f"the nvme data path makes its Runtime with backend='nvme', not "
                             f"{runtime_options['backend']!r}")
    return open_gids_source(graph, runtime=runtime, cache_fraction=cache_fraction,
                            page_size=page_size, storage=storage, runtime_options=runtime_options,
                            **tier_options)


def _baseline_source(graph: CSRGraph):
    """``(source, dtype, n_items, byte_offset)`` for :mod:`workloads.baselines`' ``open``: the
    graph file's neighbours section where there is a file, else the in-memory array."""
    if graph.n_edges and graph.header is not None and graph.path is not None:
        path, byte_offset, n_items, dtype = graph.neighbour_section
        return path, dtype, n_items, byte_offset
    data = _neighbours_or_dummy(graph)
    return data, data.dtype, data.size, 0


class ZeroCopySource(NeighbourSource):
    """The ``"zero_copy"`` data path: neighbours in pinned, device-mapped host memory (EMOGI).

    The array is loaded from the file into a ``cuda.mapped_array`` by the baselines' zero-copy
    path (:class:`workloads.baselines.ZeroCopyPath`); kernels read it over PCIe with
    :func:`workloads.baselines.plain_read` (bounds-checked). The traversal's warp reads 32
    consecutive entries, so the loads coalesce.
    """

    name = "zero_copy"

    def __init__(self, graph: CSRGraph):
        from .. import baselines
        source, dtype, n_items, offset = _baseline_source(graph)
        self.array = baselines.make_path("zero_copy").open(source, dtype, shape=n_items,
                                                           offset=offset)
        self.reader = baselines.plain_read
        self.arg = self.array.handle
        self.label = "zero-copy (pinned host memory over PCIe)"

    def check(self) -> None:
        cuda.synchronize()
        self.array.check()

    def close(self) -> None:
        if getattr(self, "array", None) is not None:
            self.array.close()
            self.array = None


def open_zero_copy_source(graph: CSRGraph) -> ZeroCopySource:
    """The ``"zero_copy"`` data path (see :class:`ZeroCopySource`)."""
    return ZeroCopySource(graph)


def _mark_pages_impl(offsets, vertices, count, shift, mark):
    for i in numba.prange(count):
        v = vertices[i]
        start = offsets[v]
        end = offsets[v + 1]
        if end > start:
            for p in range(start >> shift, ((end - 1) >> shift) + 1):
                mark[p] = 1


_mark_pages = numba.njit(parallel=True, nogil=True, cache=False)(_mark_pages_impl)


class CpuBatchSource(NeighbourSource):
    """The ``"cpu_batch"`` data path: the GPUDirect Storage pattern, one batch per level.

    Before each launch (:meth:`before_launch`) the host works out which pages of the neighbours
    array the launch may read, from the graph's offsets: the lists of the frontier (top-down),
    of every unvisited vertex (bottom-up: the levels are copied to the host), or every list
    (components). It gathers those pages from the store into pinned memory with the baselines'
    parallel ``njit`` gather (:func:`workloads.baselines.gather_pages`, one ``pread`` per page,
    the daemon's own ``serve_page``), copies them to a batch buffer in GPU memory in one copy,
    and points a page table at them; the kernel reads entry ``k`` through
    :func:`workloads.baselines.batch_read` (page table, then the buffer). Whole lists are
    staged: the host cannot know where a bottom-up or sorted-list scan will stop.

    The buffer grows to the largest level's pages (all pages, for a bottom-up step or
    components). A read whose page was not staged is a bug here, raised by :meth:`check`.

    Parameters
    ----------
    graph : CSRGraph
    page_size : int, optional
        Bytes per page read (default 4096; 512 in the simulator).
    gather_threads : int, optional
        Numba threads of the host gather (default all).
    storage : {"file", "mmap", "memory"}
        How the gather reads the graph file (as the gids path's ``storage``): ``pread``
        (``O_DIRECT`` where aligned), a mapping, or a copy in RAM.
    """

    name = "cpu_batch"

    def __init__(self, graph: CSRGraph, *, page_size: int | None = None,
                 gather_threads: int | None = None, storage: str = "file"):
        from .. import baselines as B
        self._B = B
        self.reader = B.batch_read
        source, dtype, n_items, offset = _baseline_source(graph)
        page = (512 if SIMULATOR else 4096) if page_size is None else int(page_size)
        self.page_size = B.check_page_size(page, np.dtype(dtype))
        if gather_threads is not None:
            gather_threads = B.positive_int("gather_threads", gather_threads)
        self.gather_threads = gather_threads
        self.store, self.dtype, shape, offset, self._owned = B.open_store(
            source, dtype, n_items, offset, storage)
        try:
            self.n_items = int(np.prod(shape))
            self.epp = self.page_size // self.dtype.itemsize
            self.shift = self.epp.bit_length() - 1
            self.n_pages = math.ceil(self.n_items / self.epp)
            self.table = B.gather_table(self.store, offset, self.n_items * self.dtype.itemsize)
            self.offsets = np.ascontiguousarray(graph.offsets, dtype=np.int64)
            self._mark = np.zeros(self.n_pages, dtype=np.uint8)
            self.page_slot = cuda.to_device(np.full(self.n_pages, B.ABSENT, dtype=np.int64))
            self.ctr = cuda.to_device(np.zeros(B.N_COUNTERS, dtype=np.int64))
            self._zero = cuda.to_device(np.zeros(1, dtype=self.dtype))
            self.capacity = 0
            self.used = 0            # slots holding the current batch's pages
            self._grow(1)
            # Compile the host gather and page marking now, not in the first timed search.
            none = np.zeros(0, dtype=np.int64)
            _mark_pages(self.offsets, none, 0, self.shift, self._mark)
            B.gather_pages(self.table, none, self.page_size, self.staging.ctypes.data)
        except BaseException:
            self.close()
            raise
        self.label = f"cpu_batch (host gather, {self.page_size} B pages)"
        self._counts = self._zero_counts()

    @staticmethod
    def _zero_counts() -> dict:
        return {"batches": 0, "pages_fetched": 0, "bytes_to_gpu": 0, "gather_seconds": 0.0,
                "host_seconds": 0.0}

    def _grow(self, pages: int) -> None:
        """Room for ``pages`` pages in the batch buffer (and its pinned staging and list)."""
        if pages <= self.capacity:
            return
        capacity = min(self.n_pages, max(pages, 2 * self.capacity))
        B = self._B
        self.buf = cuda.device_array(capacity * self.epp, dtype=self.dtype)
        self.staging = cuda.pinned_array(capacity * self.epp, dtype=self.dtype)
        self.req = cuda.device_array(capacity, dtype=np.int64)
        self.capacity = capacity
        self.arg = B.BatchHandle(buf=self.buf, page_slot=self.page_slot, req=self.req,
                                 ctr=self.ctr, zero=self._zero, n_elems=self.n_items,
                                 shift=self.shift, capacity=capacity)

    def _pages(self, access: Access) -> np.ndarray:
        """The pages the next launch may read, ascending."""
        if access.kind == "all":
            return np.arange(self.n_pages, dtype=np.int64)
        if access.kind == "frontier":
            count = int(access.count)
            vertices = access.vertices[:count].copy_to_host() if count else np.zeros(0, np.int64)
        elif access.kind == "unvisited":
            vertices = np.flatnonzero(access.levels.copy_to_host() == -1)
            count = vertices.size
        else:
            raise ValueError(f"unknown access kind {access.kind!r}")
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        mark = self._mark
        _mark_pages(self.offsets, np.ascontiguousarray(vertices, dtype=np.int64), count,
                    self.shift, mark)
        pages = np.flatnonzero(mark).astype(np.int64)
        mark[pages] = 0
        return pages

    def begin_search(self, cold: bool = True) -> None:
        # Nothing is kept between launches: every batch is read from the store.
        self._counts = self._zero_counts()

    def before_launch(self, access: Access) -> None:
        B = self._B
        t0 = time.perf_counter()
        pages = self._pages(access)
        count = pages.size
        # The previous batch's pages leave the page table (its list is still in req).
        if self.used:
            B.clear_slots[math.ceil(self.used / 256), 256](self.page_slot, self.req, self.used)
            self.used = 0
        self._grow(count)
        self.ctr.copy_to_device(np.zeros(B.N_COUNTERS, dtype=np.int64))
        if count:
            if self.gather_threads is not None:
                numba.set_num_threads(self.gather_threads)
            t = time.perf_counter()
            status = B.gather_pages(self.table, pages, self.page_size, self.staging.ctypes.data)
            self._counts["gather_seconds"] += time.perf_counter() - t
            bad = np.flatnonzero(status != gids.layout.STATUS_OK)
            if bad.size:
                page = int(pages[bad[0]])
                raise gids.StorageIOError(
                    f"gids: cpu_batch could not read page {page} of {self.store.name} "
                    f"(status {int(status[bad[0]])})", path=getattr(self.store, "path", None),
                    page=page)
            self.buf[:count * self.epp].copy_to_device(self.staging[:count * self.epp])
            self.req[:count].copy_to_device(pages)
            B.assign_slots[math.ceil(count / 256), 256](self.page_slot, self.req, 0, count)
            self.used = count
        self._counts["batches"] += 1
        self._counts["pages_fetched"] += count
        self._counts["bytes_to_gpu"] += count * self.page_size
        self._counts["host_seconds"] += time.perf_counter() - t0

    def check(self) -> None:
        B = self._B
        cuda.synchronize()
        ctr = self.ctr.copy_to_host()
        if ctr[B.C_BAD]:
            raise gids.IndexOutOfRangeError(
                f"gids: a kernel read index {int(ctr[B.C_BAD_INDEX])} of an array of "
                f"{self.n_items} elements (cpu_batch path)")
        if ctr[B.C_MISSED]:
            # Every page a launch may read was staged: a miss is a bug in _pages.
            self._reset_table()
            raise RuntimeError("cpu_batch: a kernel read a page that was not staged for it")

    def _reset_table(self) -> None:
        self.page_slot.copy_to_device(np.full(self.n_pages, self._B.ABSENT, dtype=np.int64))
        self.used = 0

    def end_search(self) -> dict:
        # One pread per page fetched: "ios" and "bytes_read" as the gids path counts them.
        return dict(self._counts, ios=self._counts["pages_fetched"],
                    bytes_read=self._counts["bytes_to_gpu"])

    def close(self) -> None:
        if getattr(self, "_owned", False):
            self.store.close()
            self._owned = False


def open_cpu_batch_source(graph: CSRGraph, *, page_size: int | None = None,
                          gather_threads: int | None = None,
                          storage: str = "file") -> CpuBatchSource:
    """The ``"cpu_batch"`` data path (see :class:`CpuBatchSource`)."""
    return CpuBatchSource(graph, page_size=page_size, gather_threads=gather_threads,
                          storage=storage)


@dataclass(frozen=True)
class DataPath:
    """A registered data path: how to open it, whether it has a cache to size, and whether it
    reads the graph file through a gids Runtime (``storage``, ``runtime_options``, emulation)
    or through a store of its own (``storage``)."""

    name: str
    opener: Callable[..., NeighbourSource]
    cached: bool = False
    runtime: bool = False
    reads_store: bool = False

    @property
    def takes_storage(self) -> bool:
        """The path reads the graph file while it runs, as ``storage`` says."""
        return self.runtime or self.reads_store


#: Data path name -> :class:`DataPath`.
DATA_PATHS: dict[str, DataPath] = {}


def register_data_path(name: str, opener: Callable[..., NeighbourSource], *,
                       cached: bool = False, runtime: bool = False,
                       reads_store: bool = False) -> None:
    """Make a data path available to :func:`open_device_graph`, ``run_bfs`` and the CLI.

    Parameters
    ----------
    name : str
        E.g. ``"zero-copy"`` or ``"cpu-batch"``.
    opener : callable
        ``opener(graph, **options)`` returning a :class:`NeighbourSource`; ``options`` are those
        the caller gave :func:`open_device_graph`.
    cached : bool
        The path takes ``cache_fraction`` (and ``page_size``): the CLI sweeps cache sizes for it,
        and runs it once, with no options, otherwise.
    runtime : bool
        The path reads the graph file through a :class:`gids.Runtime` it makes: it takes
        ``storage`` and ``runtime_options`` too, needs a graph opened from a file, and the CLI
        runs it under SSD emulation (``--ssd``).
    reads_store : bool
        The path reads the graph file itself while it runs (not through a Runtime): it takes
        ``storage`` (``"file"``, ``"mmap"``, ``"memory"``), so that it reads what gids reads.
    """
    DATA_PATHS[name] = DataPath(name, opener, cached, runtime, reads_store)


register_data_path("gids", open_gids_source, cached=True, runtime=True)
register_data_path("nvme", open_nvme_source, cached=True, runtime=True)
register_data_path("memory", open_memory_source)
register_data_path("zero_copy", open_zero_copy_source)
register_data_path("cpu_batch", open_cpu_batch_source, reads_store=True)


def data_path_options(data_path: str, runtime=None, cache_fraction: float | None = None,
                      page_size: int | None = None, storage: str | None = None) -> dict:
    """The opener options of ``run_bfs`` / ``run_cc``'s arguments, for one data path.

    ``runtime``, ``cache_fraction`` and ``page_size`` go to cached paths only (``gids``,
    ``nvme``, or one registered with ``cached=True``), ``storage`` to the paths that read the
    file while they run (``gids``, ``nvme``, ``cpu_batch``: :attr:`DataPath.takes_storage`);
    unset ones are left out.

    Raises
    ------
    ValueError
        Cache options for a path without a cache, or an unknown path.
    """
    if data_path not in DATA_PATHS:
        raise ValueError(f"unknown data path {data_path!r}; known: {', '.join(DATA_PATHS)}")
    cache = {"runtime": runtime, "cache_fraction": cache_fraction, "page_size": page_size}
    options = {k: v for k, v in cache.items() if v is not None}
    if options and not DATA_PATHS[data_path].cached:
        raise ValueError(f"{', '.join(options)} apply to data paths with a cache (gids, nvme), not "
                         f"{data_path!r}")
    if DATA_PATHS[data_path].takes_storage and storage is not None:
        options["storage"] = storage
    return options


# ---------------------------------------------------------------------------------- the graph
class DeviceGraph:
    """A CSR graph ready for the GPU kernels: offsets in device memory, neighbours via a path.

    Use :func:`open_device_graph` to make one. It is a context manager; :meth:`close` closes the
    data path (and a Runtime it made).

    Attributes
    ----------
    graph : CSRGraph
    offsets : device array
        int64, ``n_vertices + 1``.
    source : NeighbourSource
    cold_cache : bool
        Empty the data path's cache before each search (default True: each search is measured
        from storage, whatever ran before).
    """

    def __init__(self, graph: CSRGraph, source: NeighbourSource, *, cold_cache: bool = True):
        self.graph = graph
        self.source = source
        self.cold_cache = cold_cache
        self.offsets = cuda.to_device(np.ascontiguousarray(graph.offsets, dtype=np.int64))
        self._bad = cuda.to_device(np.array([-1, 0], dtype=np.int64))
        self._scratch = {}
        self._used = set()

    @property
    def n_vertices(self) -> int:
        return self.graph.n_vertices

    def scratch(self, name: str, count: int, size: int) -> list:
        """``count`` int64 device arrays of ``size`` kept under ``name`` and reused by later calls.

        Searches from many roots then allocate their working arrays once.
        """
        arrays = self._scratch.get(name)
        if arrays is None or len(arrays) != count or arrays[0].size != size:
            arrays = [cuda.device_array(max(size, 1), dtype=np.int64)[:size] for _ in range(count)]
            self._scratch[name] = arrays
        return arrays

    def first_use(self, key) -> bool:
        """True the first time ``key`` is asked about (to compile kernels once, untimed)."""
        if key in self._used:
            return False
        self._used.add(key)
        return True

    def reset_bad(self) -> None:
        self._bad.copy_to_device(np.array([-1, 0], dtype=np.int64))

    @property
    def bad(self):
        """Device record of the first out-of-range neighbour id (see :func:`report_bad_entry`)."""
        return self._bad

    def check(self) -> None:
        """After a launch: data-path errors first, then a corrupt neighbour id, as exceptions.

        Raises
        ------
        GraphFormatError
            A kernel read a neighbour id outside ``0 .. n_vertices - 1``.
        gids.GidsError
            From the gids data path (I/O error, timeout, ...).
        """
        self.source.check()
        entry, value = (int(x) for x in self._bad.copy_to_host())
        if entry >= 0:
            self.reset_bad()
            where = self.graph.path or "<graph>"
            raise GraphFormatError(
                f"{where}: neighbours entry {entry} holds vertex id {value}, outside "
                f"0..{self.n_vertices - 1}: the neighbours section is corrupt "
                "(open_csr(path, verify=True) checks the whole section)")

    def bfs(self, root: int, **options):
        """Breadth-first search from ``root``: see :func:`.gpu_bfs.bfs`."""
        return _bfs(self, root, **options)

    def connected_components(self):
        """Connected components: see :func:`.gpu_cc.connected_components`."""
        return _connected_components(self)

    def close(self) -> None:
        self._scratch.clear()
        self.source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_device_graph(graph: CSRGraph | str | os.PathLike, data_path: str = "gids", *,
                      cold_cache: bool = True, verify: bool = False, **options) -> DeviceGraph:
    """Put a graph's offsets on the GPU and open its neighbours through a data path.

    Parameters
    ----------
    graph : CSRGraph, str or os.PathLike
        An open graph, or a CSR file path (opened with :func:`~.csr_file.open_csr`).
    data_path : str
        A name in :data:`DATA_PATHS`: ``"gids"``, ``"nvme"``, ``"memory"``, ``"zero_copy"`` and
        ``"cpu_batch"`` built in.
    cold_cache : bool
        Empty the cache before each search.
    verify : bool
        For a path: also check the whole neighbours section (``open_csr(verify=True)``).
    **options
        For the data path's opener: for ``"gids"`` and ``"nvme"``, ``runtime``,
        ``cache_fraction``, ``page_size``, ``storage``, ``runtime_options`` (see
        :class:`GidsSource`; ``runtime_options={"ssd": "p5800x", "n_ssd": 4}`` emulates SSDs).

    Returns
    -------
    DeviceGraph

    Raises
    ------
    GraphFormatError
        The file is not a valid graph file (truncated, corrupt header or offsets, ...).
    ValueError
        Unknown data path, or options it does not take.
    """
    if not isinstance(graph, CSRGraph):
        graph = open_csr(graph, verify=verify)
    if data_path not in DATA_PATHS:
        raise ValueError(f"unknown data path {data_path!r}; known: {', '.join(DATA_PATHS)}")
    if (DATA_PATHS[data_path].runtime and graph.n_edges
            and (graph.header is None or graph.path is None)):
        raise ValueError(f"the {data_path} data path reads the graph's file: open it with "
                         "open_csr")
    opener = DATA_PATHS[data_path].opener
    try:
        inspect.signature(opener).bind(graph, **options)
    except TypeError as exc:
        raise ValueError(f"data path {data_path!r} does not take options {sorted(options)}: "
                         f"{exc}") from None
    source = opener(graph, **options)
    try:
        return DeviceGraph(graph, source, cold_cache=cold_cache)
    except BaseException:
        source.close()
        raise


def run_bfs(graph_path: str | os.PathLike | CSRGraph, root: int, runtime=None,
            data_path: str = "gids", cache_fraction: float | None = None, *,
            direction: str = "top-down", validate: bool = False, page_size: int | None = None,
            storage: str = "file") -> BFSResult:
    """Open a graph, run one GPU BFS from ``root`` through a data path, close.

    Parameters
    ----------
    graph_path : str, os.PathLike or CSRGraph
        A CSR graph file (``docs/formats.md``), or a graph opened with ``open_csr``.
    root : int
    runtime : gids.Runtime, optional
        For ``data_path="gids"`` (or ``"nvme"``, with a ``backend="nvme"`` Runtime): read
        through this Runtime (its cache size); it stays open.
    data_path : str
        ``"gids"`` (through the page cache, misses served by the host daemon), ``"nvme"`` (the
        same over the direct NVMe path), ``"memory"`` (all in GPU memory), or another
        registered path (:func:`~.gpu_graph.register_data_path`).
    cache_fraction : float, optional
        For ``"gids"`` / ``"nvme"`` without ``runtime``: cache size over the neighbours array
        (default 1).
    direction : {"top-down", "auto"}
    validate : bool
        Check the result by Graph500's five rules (raises ``BFSValidationError``).
    page_size : int, optional
        For ``"gids"`` / ``"nvme"`` without ``runtime``.
    storage : {"file", "mmap", "memory"}
        For ``"gids"`` / ``"nvme"``: how the daemon (or NVMe controller) reads the file.

    Returns
    -------
    BFSResult
        ``parents``, ``levels``, ``seconds``, ``traversed_edges`` (and ``teps``).

    Raises
    ------
    GraphFormatError
        The file is truncated or corrupt.
    """
    options = data_path_options(data_path, runtime, cache_fraction, page_size, storage)
    with open_device_graph(graph_path, data_path, **options) as dg:
        result = dg.bfs(root, direction=direction)
    if validate:
        validate_bfs_result(dg.graph, result)
    return result


def run_cc(graph_path: str | os.PathLike | CSRGraph, runtime=None, data_path: str = "gids",
           cache_fraction: float | None = None, *, validate: bool = False,
           page_size: int | None = None, storage: str = "file") -> CCResult:
    """Open a graph, find its connected components on the GPU through a data path, close.

    Parameters as :func:`run_bfs`; ``validate`` compares with scipy.
    """
    options = data_path_options(data_path, runtime, cache_fraction, page_size, storage)
    with open_device_graph(graph_path, data_path, **options) as dg:
        result = dg.connected_components()
    if validate:
        validate_cc_result(dg.graph, result)
    return result
