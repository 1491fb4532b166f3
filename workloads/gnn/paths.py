"""The ways a mini-batch's feature rows reach the GPU, side by side (``gids gnn``).

Each path is an object with ``gather(nodes, out)``: ``nodes`` a torch int64 tensor on the GPU
(the batch's node list), ``out`` a float32 ``(len(nodes), dim)`` torch tensor on the GPU; the
rows are in ``out`` once torch's current stream reaches that point (the paths that return
earlier queue their work on it). ``close()`` frees what the path holds.

- ``gids``: ``rt.gather_rows`` through the GPU cache (a fraction of the features), misses served
  by the host daemon from the store (``storage``: the file read with ``pread``, or RAM).
- ``memory``: every row in GPU memory, ``torch.index_select`` (the upper bound).
- ``zero_copy``: the rows in pinned, device-mapped host memory; the same row kernel as gids
  (``kernels.rows``) reads them over PCIe, a warp per row (DGL's UVA mode).
- ``mmap``: the PyTorch data loader's way: ``np.memmap`` -> ``torch.from_numpy(...)`` ->
  ``index_select`` on the CPU (torch's threads) into a pinned buffer -> ``copy_(...,
  non_blocking=True)`` to the GPU.
- ``direct``: the CPU-initiated loader over a file outside the page cache
  (:mod:`workloads.gnn.direct`): ``O_DIRECT`` reads by a pool of host threads into pinned
  memory, each slice's copy to the GPU overlapped with the next slice's reads; under emulation,
  each row read from RAM and held until modelled drives would have served it.
- ``cpu_batch``: the CPU-initiated batch pattern (``workloads.baselines.CpuBatchPath``): the row
  kernel lists the pages it lacks and exits, host threads gather them from the store into pinned
  memory, one copy, the kernel runs again.
"""
import gids  # first: picks the GPU or the simulator before numba.cuda loads

# isort: split

import numpy as np
import torch

from gids import SIMULATOR
from gids.device import rows_template
from gids.sampling import numba_view, torch_device
from workloads import baselines as B
from workloads.gnn.direct import DEFAULT_THREADS, DirectRows

PATHS = ("gids", "memory", "zero_copy", "mmap", "cpu_batch", "direct")


def row_kernel_template(pager):
    """``kernels.rows``' row gather over a baseline path's pager (``workloads.baselines``)."""
    return rows_template(pager.pin, pager.value, pager.unpin_after, pager.page_elems)


def _blocks(n_rows):
    threads = 32 if SIMULATOR else 256
    return max(1, min(-(-n_rows // (threads // 32)), 2 if SIMULATOR else 132 * 16)), threads


class GidsRows:
    """``rt.gather_rows`` through a cache of ``cache_fraction`` of the features; ``store``: a
    store of the feature file to read instead of opening the file as ``storage`` says (one
    RAM copy shared by several rows of a run)."""

    def __init__(self, data, cache_fraction, storage="memory", page_size=4096, rt=None,
                 runtime_options=None, store=None):
        nbytes = data.feature_bytes
        self.owned = rt is None
        if rt is None:
            # A whole cache gets slack: pages of the file's last partial page and the clock's
            # pinned slots never push a row out.
            slack = (1 << 20) if cache_fraction >= 1 else 0
            cache = max(int(nbytes * cache_fraction) + slack, 64 * page_size)
            rt = gids.Runtime(cache_bytes=cache, page_size=page_size,
                              **(runtime_options or {}))
        self.rt = rt
        self.array = rt.open_array(str(data.features_path) if store is None else store,
                                   np.float32, shape=(data.n_vertices, data.dim),
                                   storage=storage)
        self.name = f"gids {cache_fraction:.0%}" + ("" if storage == "file" else f" ({storage})")

    def gather(self, nodes, out):
        self.rt.gather_rows(self.array, nodes, out=out,
                            stream=None if SIMULATOR else torch.cuda.current_stream())

    def check(self):
        self.rt.sync()

    def stats(self):
        s = self.rt.stats()
        return {"hits": s.hits, "misses": s.misses}

    def close(self):
        if self.owned:
            self.rt.close()


class MemoryRows:
    """Every row in GPU memory (``index_select``)."""

    name = "memory"

    def __init__(self, data):
        self.table = torch.from_numpy(np.array(data.features_memmap())).to(
            torch_device())

    def gather(self, nodes, out):
        torch.index_select(self.table, 0, nodes, out=out)

    def check(self):
        pass

    def close(self):
        del self.table


class BaselineRows:
    """A path of ``workloads.baselines`` (zero_copy, cpu_batch) running the row kernel."""

    def __init__(self, data, name, storage="memory", page_size=4096, batch_rows=None):
        if name == "cpu_batch":
            # Every distinct page one launch reads must fit: a row touches at most this many.
            row_bytes = data.dim * 4
            per_row = 1 if page_size % row_bytes == 0 else -(-row_bytes // page_size) + 1
            pages = max(64, int(batch_rows or (1 << 16)) * per_row)
            self.path = B.make_path(name, page_size=page_size, batch_pages=pages)
        else:
            self.path = B.make_path(name)
        self.name = name
        self.width = data.dim
        self.array = self.path.open(str(data.features_path), np.float32,
                                    shape=(data.n_vertices * data.dim,), storage=storage)

    def gather(self, nodes, out):
        if not SIMULATOR:   # the path launches on its own stream(s): nodes must be written
            torch.cuda.current_stream().synchronize()
        blocks, threads = _blocks(int(nodes.numel()))
        self.path.launch(row_kernel_template, self.array, blocks, threads,
                         [(numba_view(nodes), np.int64(self.width), numba_view(out))])

    def check(self):
        pass

    def close(self):
        self.array.close()


class MmapRows:
    """The PyTorch loader's way, in its best form: a memory map indexed by torch's CPU threads
    into a pinned buffer, copied to the GPU without blocking."""

    name = "mmap"

    def __init__(self, data, max_rows):
        self.table = torch.from_numpy(data.features_memmap())
        pin = not SIMULATOR
        self.staging = torch.empty((max_rows, data.dim), dtype=torch.float32, pin_memory=pin)
        self.copied = None

    def gather(self, nodes, out):
        n = int(nodes.numel())
        if self.copied is not None:
            self.copied.synchronize()   # the last copy out of the buffer is done
        torch.index_select(self.table, 0, nodes.cpu(), out=self.staging[:n])
        out.copy_(self.staging[:n], non_blocking=True)
        if not SIMULATOR:
            self.copied = torch.cuda.Event()
            self.copied.record()

    def check(self):
        pass

    def close(self):
        del self.table


def make_feature_path(name, data, *, cache_fraction=0.25, storage="memory", page_size=4096,
                      max_rows=1 << 16, runtime_options=None, emulation=None,
                      direct_threads=DEFAULT_THREADS, store=None):
    """The feature path ``name`` (see :data:`PATHS`) over data set ``data``.

    ``emulation``: a ``workloads.ssd_options.Emulation`` (an emulated SSD array) for gids
    (``Runtime(ssd=, n_ssd=)``) or direct; ``runtime_options``: more ``gids.Runtime``
    arguments; ``direct_threads``: the direct loader's reading threads; ``store``: the feature
    file's store for gids (see :class:`GidsRows`)."""
    if name == "direct":
        return DirectRows(data, threads=direct_threads, emulation=emulation,
                          page_size=page_size)
    if emulation is not None:
        if name != "gids":
            raise ValueError(f"feature path {name!r} has no emulated drives")
        runtime_options = {**(runtime_options or {}), **emulation.runtime_options}
    if name == "gids":
        return GidsRows(data, cache_fraction, storage, page_size,
                        runtime_options=runtime_options, store=store)
    if name == "memory":
        return MemoryRows(data)
    if name == "mmap":
        return MmapRows(data, max_rows)
    if name in ("zero_copy", "cpu_batch"):
        return BaselineRows(data, name, storage, page_size, batch_rows=max_rows)
    raise ValueError(f"unknown feature path {name!r}; choose from {PATHS}")
