"""The ``direct`` feature path: a CPU-initiated loader at its honest best over a file that is
not in the page cache.

What a PyTorch data loader would do once the features outgrow the host's RAM: the batch's node
list comes to the host, a pool of host threads (``threads``, 64 by default: the queue depth the
drive sees) reads each row with ``O_DIRECT`` ``pread`` calls into pinned memory, and the rows
are copied to the GPU in slices of ``chunk_rows``, each slice's copy queued as soon as its reads
are done, so that the copy of one slice overlaps the reads of the next (a ring of ``buffers``
pinned slices, all but one queued for reading at once, so the threads never wait for the
thread that hands out the work; a slice is reused once its copy has finished).

The reads are the host daemon's own (``gids.host.serve_page`` over the store's table row,
4 KiB-aligned units, ``O_DIRECT`` where the file system allows it); a row that is not whole
aligned units is read through a per-thread bounce buffer. Before the first batch the file's
dirty pages are written back (``fsync``, timed as ``flush_s``): Linux writes a dirty range
back before an ``O_DIRECT`` read of it, which would otherwise be charged to the loader.

Under emulation (``emulation``, a ``workloads.ssd_options.Emulation``), the rows come from
the file's memory map (RAM: the page cache) and each read is held until an array of the
modelled drives would have completed it (``gids.host.model_submit_locked``, the model the gids
rows' host daemon uses, with the same stripe unit): the loader as it would run against those
drives.
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import njit, types

from gids import SIMULATOR
from gids import layout as L
from gids.errors import ConfigError, IndexOutOfRangeError, StorageIOError
from gids.host import DIRECT_ALIGN, SsdModel, model_submit_locked, now_ns, serve_page
from workloads import baselines as B

#: Host threads reading rows (each has one read in flight: the queue depth the drives see).
DEFAULT_THREADS = 64
#: Rows per slice copied to the GPU at once (64 MiB of 4 KiB rows).
DEFAULT_CHUNK_ROWS = 1 << 14
#: Pinned slices in the ring: all but one being read while the oldest is copied.
DEFAULT_BUFFERS = 3
#: The drive model used only to give the reader's arguments their types when nothing is
#: emulated (the reader never calls it then).
_UNUSED_PROFILE = "p5800x"

_memcpy = types.ExternalFunction("memcpy", types.uintp(types.uintp, types.uintp, types.uintp))
_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@njit(nogil=True, cache=True)
def read_rows(table, rows, first, step, row_bytes, unit, dst, bounce, emulate, state, params,
              clock):
    """Rows ``rows[first::step]`` of the store in row 0 of ``table`` to host address ``dst``
    (row ``rows[k]`` to ``dst + k * row_bytes``), in ``unit``-byte pages read by
    ``serve_page``; straight to ``dst`` where a row is whole aligned pages, else through
    ``bounce`` (an aligned buffer of at least ``row_bytes + 2 * unit`` bytes). With
    ``emulate``, each row is held until the model (``state``, ``params``) completes its read.

    Returns ``(-1, STATUS_OK)``, or the first failed position ``k`` and its status."""
    aligned = row_bytes % unit == 0
    for k in range(first, rows.size, step):
        start = rows[k] * row_bytes
        due = 0
        if emulate:
            due = model_submit_locked(state, params, now_ns(clock), start, row_bytes)
        target = dst + k * row_bytes
        page = start // unit
        pages = (start + row_bytes - 1) // unit - page + 1
        to = target if aligned else bounce.ctypes.data
        for j in range(pages):
            status, _ = serve_page(table, 0, page + j, unit, to + j * unit)
            if status != L.STATUS_OK:
                return k, status
        if not aligned:
            _memcpy(target, to + (start - page * unit), row_bytes)
        if emulate:
            while now_ns(clock) < due:
                _sched_yield()
    return -1, L.STATUS_OK


def _aligned_bytes(nbytes, pin):
    """A uint8 torch tensor of ``nbytes`` whose address is a multiple of ``DIRECT_ALIGN``
    (O_DIRECT's rule for buffers), pinned where ``pin``."""
    raw = torch.empty(nbytes + DIRECT_ALIGN, dtype=torch.uint8, pin_memory=pin)
    skip = -raw.data_ptr() % DIRECT_ALIGN
    return raw[skip:skip + nbytes]


class DirectRows:
    """The feature path ``direct`` (see the module's notes): ``gather(nodes, out)``, ``check()``,
    ``close()``, like the paths of :mod:`workloads.gnn.paths`."""

    #: Nothing to warm: every read goes to the file (or the modelled drives).
    cacheless = True

    def __init__(self, data, *, threads=DEFAULT_THREADS, chunk_rows=DEFAULT_CHUNK_ROWS,
                 buffers=DEFAULT_BUFFERS, emulation=None, page_size=4096):
        for name, value in (("threads", threads), ("chunk_rows", chunk_rows),
                            ("buffers", buffers)):
            if int(value) < 1:
                raise ConfigError(f"gids: the direct loader's {name} must be >= 1, got {value}")
        self.threads, self.chunk_rows = int(threads), int(chunk_rows)
        self.row_bytes = data.dim * 4
        self.dim, self.n_rows = data.dim, data.n_vertices
        # Emulated: the bytes from the file's pages in the page cache (a map, not a copy of a
        # file as large as the features), the time from the model.
        storage = "mmap" if emulation else "file"
        self.store, _, _, _, _ = B.open_store(str(data.features_path), np.float32,
                                              (data.n_vertices, data.dim), 0, storage)
        self.flush_s = 0.0
        if emulation is None:
            t0 = time.perf_counter()
            os.fsync(self.store.fileno())     # no dirty page left for an O_DIRECT read to flush
            self.flush_s = time.perf_counter() - t0
            self.direct = self.store.direct_enabled
            self.name = "direct" if self.direct else "direct (buffered: O_DIRECT refused)"
        else:
            self.direct = False
            self.name = f"direct on {emulation.label}"
        self.table = B.gather_table(self.store, 0, data.feature_bytes)
        model = SsdModel(emulation.profile if emulation else _UNUSED_PROFILE,
                         n_ssd=emulation.n_ssd if emulation else 1, stripe_bytes=page_size)
        self.model, self.emulate = model, emulation is not None
        self.unit = DIRECT_ALIGN
        pin = not SIMULATOR
        self.slices = [_aligned_bytes(self.chunk_rows * self.row_bytes, pin)
                       .view(torch.float32).view(self.chunk_rows, self.dim)
                       for _ in range(int(buffers))]
        # Per slice and thread: a slice's task t may run beside the next slice's task t.
        self.bounces = [[_aligned_bytes(self.row_bytes + 2 * self.unit, False).numpy()
                         for _ in range(self.threads)] for _ in self.slices]
        self.clocks = [[np.zeros(2, dtype=np.int64) for _ in range(self.threads)]
                       for _ in self.slices]
        self.copied = [None] * len(self.slices)
        self.turn = 0
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="gids-direct")

    def _start(self, rows, k):
        """Queue the reads of ``rows`` (int64 numpy) into slice ``k`` on the pool; their
        futures."""
        state, params = self.model.njit_args()
        parts = min(self.threads, rows.size)
        dst = self.slices[k].data_ptr()
        return [self.pool.submit(read_rows, self.table, rows, t, parts, self.row_bytes,
                                 self.unit, dst, self.bounces[k][t], self.emulate, state,
                                 params, self.clocks[k][t]) for t in range(parts)]

    def _finish(self, rows, futures):
        for future in futures:
            k, status = future.result()
            if k >= 0:
                raise StorageIOError(f"gids: the direct loader could not read row {rows[k]} of "
                                     f"{self.store.name} (status {status})",
                                     path=getattr(self.store, "path", None),
                                     page=int(rows[k]) * self.row_bytes // self.unit)

    def gather(self, nodes, out):
        rows = nodes.cpu().numpy().astype(np.int64, copy=False)
        n = rows.size
        if n and (rows.min() < 0 or rows.max() >= self.n_rows):
            raise IndexOutOfRangeError(f"gids: a row index is outside 0..{self.n_rows - 1} "
                                       "(direct loader)")
        # All slices but one are being read while the oldest is copied: the threads go from
        # one slice to the next without waiting for this thread.
        in_flight = []
        try:
            for a in range(0, n, self.chunk_rows):
                b = min(n, a + self.chunk_rows)
                k = self.turn % len(self.slices)
                self.turn += 1
                if self.copied[k] is not None:
                    self.copied[k].synchronize()     # this slice's last copy to the GPU is done
                in_flight.append((a, b, k, self._start(rows[a:b], k)))
                if len(in_flight) == max(1, len(self.slices) - 1):
                    self._copy(out, rows, *in_flight.pop(0))
            while in_flight:
                self._copy(out, rows, *in_flight.pop(0))
        finally:
            for *_, futures in in_flight:       # an error: let the reads still queued end
                for future in futures:
                    future.exception()

    def _copy(self, out, rows, a, b, k, futures):
        """Wait for slice ``k``'s reads (rows ``a:b``), then queue its copy to ``out``."""
        self._finish(rows[a:b], futures)
        out[a:b].copy_(self.slices[k][:b - a], non_blocking=True)
        if not SIMULATOR:
            self.copied[k] = torch.cuda.Event()
            self.copied[k].record()

    def check(self):
        pass

    def info(self):
        """What the JSON row records of the loader: O_DIRECT or not, threads, the first
        write-back's seconds."""
        return {"o_direct": self.direct, "threads": self.threads, "flush_s": self.flush_s}

    def close(self):
        self.pool.shutdown()
        self.store.close()
