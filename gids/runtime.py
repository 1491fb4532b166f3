"""``Runtime``: the page cache on the GPU and the arrays read through it; an I/O back end
(:mod:`gids.backends`) serves its misses."""
import math
import os
import time

import numpy as np
from numba import cuda

from gids import defaults
from gids import layout as L
from gids._platform import host_view
from gids.array import SUPPORTED_DTYPES, StorageArray
from gids.backends import BACKENDS as BACKEND_CLASSES
from gids.errors import (
    AbortedError,
    CacheExhaustedError,
    ConfigError,
    DaemonError,
    GidsTimeoutError,
    IndexOutOfRangeError,
    ReadOnlyError,
    SharedFileError,
    StaleHandleError,
    StorageIOError,
)
from gids.host_tier import HostTier
from gids.interop import current_device_id
from gids.staging import Staging
from gids.stats import FileStats, Stats
from gids.waiting import KernelWaiter
from gids.window import Window
from host_daemon.daemon import ENGINES
from host_daemon.ssd_model import SsdModel
from host_daemon.stores import (
    F_COLUMNS,
    F_WRITE_BYTES,
    F_WRITE_NS,
    F_WRITES,
    MAX_FILES,
    T_COLUMNS,
    T_FILE_SLOT,
    FaultyStore,
    MemoryStore,
    Store,
    StripedStore,
    open_file_store,
)
from kernels.platform import EARLY_COPY, SIMULATOR, WARP_SIZE

MIN_PAGE_SIZE = 512
MAX_PAGE_SIZE = 64 << 10
BACKENDS = tuple(BACKEND_CLASSES)
MODES = ("r", "r+")

#: How long stopping the daemon waits at most for a thread still inside a store call (a stalled
#: ``pread``/``pwrite``), or twice the Runtime's timeout if longer: then the Runtime gives up.
STUCK_STORE_CALL_S = 60.0

#: What Runtimes that gave up on a stuck daemon thread leave allocated for it: the back end
#: (its daemon, queues and staging pages), the stores (their files open), the zero-copy
#: buffers. The thread may still read or write them when its call returns; freeing them would
#: crash the process.
_STRANDED = []
#: Host-side write-backs copy the whole cache from the GPU once when more pages than this are
#: dirty (one large copy), else each dirty slot on its own.
_WHOLE_CACHE_COPY_PAGES = 64

_TIMEOUT_WHAT = {
    L.ERR_TIMEOUT_QUEUE: "a free submission queue entry",
    L.ERR_TIMEOUT_IO: "an I/O to complete",   # the back end names what it waited for
    L.ERR_TIMEOUT_SLOT: "a cache slot that could be evicted",
    L.ERR_TIMEOUT_LOADER: "another thread loading the same page",
}


#: The bulk page copy's locks (kernels/bulk.py), one array per CUDA context for the whole
#: process: ``id(context) -> (context, array)``.
_COPY_LOCKS = {}


def _copy_locks():
    """The current context's lock words of the blocks' bulk-copy buffers (zeros when made).

    Not one array per Runtime: a kernel has one shared-memory buffer per block whichever
    Runtimes its handles come from, so every Runtime's reads must take the same locks. A lock
    is free again whenever a copy ends; one is kept only after a bulk copy timed out (its block
    then copies with the warp's loads), so the array is never reset.
    """
    from kernels.bulk import N_LOCKS
    ctx = cuda.current_context()
    held = _COPY_LOCKS.get(id(ctx))
    if held is None or held[0] is not ctx:
        held = _COPY_LOCKS[id(ctx)] = (ctx, cuda.to_device(np.zeros(N_LOCKS, dtype=np.uint32)))
    return held[1]


def _is_device_array(obj):
    """A Numba/CuPy/PyTorch device array (or the simulator's stand-in for one)."""
    if SIMULATOR:
        return hasattr(obj, "copy_to_host")
    return hasattr(obj, "__cuda_array_interface__")


def _converted(values, dtype):
    """Host ``values`` as a 1-D array of ``dtype``, or ConfigError if that would change one.

    Any values that ``dtype`` holds exactly are taken (1.0 into float32, 3.0 into int32, Python
    ints into int8 when they fit); the first that would change is named."""
    values = np.asarray(values)
    if values.dtype == dtype:
        return values.reshape(-1)
    if values.dtype.kind not in "biuf":
        raise ConfigError(f"gids: values of dtype {values.dtype} cannot be written to an array "
                          f"of {dtype}")
    values = values.reshape(-1)
    if np.can_cast(values.dtype, dtype, "safe"):
        return values.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        converted = values.astype(dtype)
        # A value is kept if converting it back gives it again (out of range integers wrap
        # and floats with a fraction round, so neither comes back; NaN is NaN again).
        back = converted.astype(values.dtype)
    same = back == values
    if values.dtype.kind == "f" and dtype.kind == "f":
        same |= np.isnan(values) & np.isnan(back)
    if not np.all(same):
        first = int(np.flatnonzero(~same)[0])
        value = values[first].item()
        if values.dtype.kind in "iu" and dtype.kind in "iu":
            info = np.iinfo(dtype)
            raise ConfigError(f"gids: values do not fit in {dtype} (range {info.min}.."
                              f"{info.max}): {value!r} at position {first}")
        raise ConfigError(f"gids: dtype mismatch: value {value!r} (position {first}) of "
                          f"{values.dtype} would change when written to an array of {dtype}; "
                          "convert the values first")
    return converted


def _source_key(source, store):
    """What makes two openings the same bytes: a path's file (device and inode, so that two
    names of one file match), or a Store object itself; None for a numpy array."""
    if isinstance(source, (str, os.PathLike)):
        st = os.stat(source)
        return ("file", st.st_dev, st.st_ino)
    if isinstance(source, Store):
        return ("store", id(store))
    return None


def _allocate_cache(cache_pages, page_size):
    """The cache's bytes in GPU memory (host memory in the simulator), or ConfigError naming
    the size when there is not that much."""
    nbytes = cache_pages * page_size
    try:
        return cuda.device_array(nbytes, dtype=np.uint8)
    except (MemoryError, ValueError) as exc:   # the simulator's numpy: _ArrayMemoryError
        reason = exc
    except Exception as exc:   # noqa: BLE001  (the driver's out-of-memory error, re-raised if not)
        if "OUT_OF_MEMORY" not in str(exc) and "out of memory" not in str(exc).lower():
            raise
        reason = exc
    where = "host memory (the simulator's GPU memory)" if SIMULATOR else "GPU memory"
    raise ConfigError(f"gids: cannot allocate a cache of {nbytes:,} bytes ({cache_pages:,} pages "
                      f"of {page_size} B) in {where}: {type(reason).__name__}; give a smaller "
                      "cache_bytes or cache_pages") from None


def _describe_page_word(word):
    """A page's state word (``page_state``, bits in :mod:`gids.layout`) in words."""
    word = int(word)
    flags = [name for name, bit in (("VALID", L.PAGE_VALID), ("BUSY", L.PAGE_BUSY),
                                    ("ERROR", L.PAGE_ERROR), ("DIRTY", L.PAGE_DIRTY))
             if word & int(bit)]
    refs = word & int(L.PAGE_REF_MASK)
    return (f"page state word {word:#018x}: {'|'.join(flags) or 'no flags'}, {refs} references, "
            f"slot field {word >> int(L.PAGE_SLOT_SHIFT)}")


class Runtime:
    """A GPU page cache over file-backed arrays, with its queues and host daemon.

    Parameters
    ----------
    backend : {"host", "nvme"}
        Who serves misses: ``"host"``, CPU daemon threads reading the stores from request
        queues; ``"nvme"``, the direct NVMe path: kernels write NVMe Read commands (and Write
        commands for dirty pages they evict) into submission rings and ring doorbells, an
        emulated NVMe controller (host threads) serves them and posts completions by phase tag
        (``docs/architecture.md``).
    cache_bytes : int, optional
        GPU memory for cached pages; rounded down to whole pages. Default
        ``gids.defaults.get("cache_bytes")``. Alternatively give ``cache_pages``.
    cache_pages : int, optional
        Number of cache slots (pages). At least one warp's worth: 32 on a GPU (1 in the
        simulator, where a thread is a warp of one).
    page_size : int, optional
        Bytes per page and per I/O, a power of two from 512 to 65536. Every element type read
        through the Runtime must divide it.
    daemon_threads : int, optional
        Host threads serving requests (for ``"nvme"``: the controller's threads).
    queues, queue_depth : int, optional
        Submission/completion queue pairs and entries per queue (depth >= warp size; for
        ``"nvme"`` at most 1024, the commands in flight per queue pair). Each entry has a
        staging page in pinned memory: ``queues * queue_depth * page_size`` bytes. By default
        (depth 128) as many queues as keep that within 256 MiB, at most 512: requests in flight
        are what fills PCIe (see :mod:`gids.defaults`).
    timeout : float, optional
        Seconds any one wait inside a kernel may take before it gives up with an error.
    ssd : str or host_daemon.ssd_model.SsdProfile, optional
        Emulate an array of ``n_ssd`` such drives in real time: the daemon posts each
        completion no earlier than the SSD model says (profiles: ``gids.ssd_profiles()``).
        Default: no model, completions as soon as the page is read.
    n_ssd : int
        Drives in the emulated array (pages striped across them).
    trace : str or os.PathLike, optional
        Record every I/O (store offset, size, queue, time seen, time completed) to this file,
        for ``gids simulate``.
    engine : {"io_uring", "threads"}, optional
        How daemon threads read and write files: an io_uring ring each, ``engine_depth`` I/Os
        in flight per thread (falls back to ``"threads"``, saying so, where the kernel refuses
        it), or one synchronous ``pread``/``pwrite`` at a time. Default: ``gids.defaults``
        (``GIDS_ENGINE``, io_uring). ``rt.stats().engine`` says which runs.
    engine_depth : int, optional
        Ring entries per daemon thread (default 256, ``GIDS_ENGINE_DEPTH``).
    host_cache_bytes : int, optional
        Pinned, device-mapped host memory for the host tier (:attr:`host_tier`), rounded down
        to whole pages: pages there are served to kernels without a request to the daemon.
        Default ``gids.defaults.get("host_cache_bytes")`` (0: no tier).
    host_tier_fill : {"static", "victims"}, optional
        ``"victims"``: clean pages of read-only arrays evicted from the GPU cache enter the
        host tier too, which frees slots by clock after each :meth:`sync`. Default
        ``gids.defaults.get("host_tier_fill")`` (``"static"``: only ``host_tier.add``).

    Notes
    -----
    Kernels read arrays with ``gids.read(array.handle, i)`` and write arrays opened with
    ``mode="r+"`` with ``gids.write(array.handle, i, value)``. After launching a kernel that does,
    call :meth:`sync`: it waits for the kernel and raises the first error a thread met
    (:class:`~gids.errors.StorageIOError`, :class:`~gids.errors.IndexOutOfRangeError`,
    :class:`~gids.errors.GidsTimeoutError`, :class:`~gids.errors.ReadOnlyError`).
    :meth:`gather` and :meth:`scatter` do this themselves.

    Written pages stay in the GPU cache, marked dirty, until they are evicted (the evicting
    kernel thread writes them back through the daemon, or with ``backend="nvme"`` as an NVMe
    Write command), until :meth:`flush`, or until the Runtime closes. Only :meth:`flush` (and
    closing, which flushes) makes them durable, whichever the back end.

    Use as a context manager: leaving the block flushes (unless an exception is leaving it:
    then dirty pages still in the cache are dropped, see :meth:`close`), stops the daemon and
    frees the cache.
    """

    def __init__(self, backend="host", *, cache_bytes=None, cache_pages=None, page_size=None,
                 daemon_threads=None, queues=None, queue_depth=None, timeout=None, ssd=None,
                 n_ssd=1, trace=None, engine=None, engine_depth=None, host_cache_bytes=None,
                 host_tier_fill=None):
        if backend not in BACKENDS:
            raise ConfigError(f"gids: unknown backend {backend!r}; choose one of {BACKENDS}")
        page_size = defaults.get("page_size") if page_size is None else int(page_size)
        if not (MIN_PAGE_SIZE <= page_size <= MAX_PAGE_SIZE) or page_size & (page_size - 1):
            raise ConfigError(f"gids: page_size must be a power of two from {MIN_PAGE_SIZE} to "
                              f"{MAX_PAGE_SIZE} bytes, got {page_size}")
        if cache_pages is not None and cache_bytes is not None:
            raise ConfigError("gids: give cache_bytes or cache_pages, not both")
        if cache_pages is None:
            cache_bytes = defaults.get("cache_bytes") if cache_bytes is None else int(cache_bytes)
            cache_pages = cache_bytes // page_size
        cache_pages = int(cache_pages)
        if cache_pages < WARP_SIZE:
            raise ConfigError(
                f"gids: a cache of {cache_pages} page(s) is smaller than one warp's pages "
                f"({WARP_SIZE}): a warp reading {WARP_SIZE} different pages could never hold "
                f"them all; give at least {WARP_SIZE * page_size} bytes")
        queue_depth = defaults.get("queue_depth") if queue_depth is None else int(queue_depth)
        queues = defaults.get("queues") if queues is None else int(queues)
        if queues is None:
            queues = defaults.default_queues(page_size, max(queue_depth, 1))
        if queues < 1:
            raise ConfigError(f"gids: queues must be >= 1, got {queues}")
        if queue_depth < WARP_SIZE:
            raise ConfigError(f"gids: queue_depth must be >= the warp size ({WARP_SIZE}), "
                              f"got {queue_depth}")
        if queue_depth > L.MAX_QUEUE_DEPTH:
            raise ConfigError(f"gids: queue_depth must be at most {L.MAX_QUEUE_DEPTH} (the "
                              f"completion word's sequence field), got {queue_depth}")
        io_class = BACKEND_CLASSES[backend]
        io_class.check_options(queue_depth)
        daemon_threads = (defaults.get("daemon_threads") if daemon_threads is None
                          else int(daemon_threads))
        if daemon_threads < 1:
            raise ConfigError(f"gids: daemon_threads must be >= 1, got {daemon_threads}")
        engine = defaults.get("engine") if engine is None else engine
        if engine not in ENGINES:
            raise ConfigError(f"gids: engine must be one of {', '.join(map(repr, ENGINES))}, "
                              f"got {engine!r}")
        engine_depth = (defaults.get("engine_depth") if engine_depth is None
                        else int(engine_depth))
        if not 1 <= engine_depth <= 32768:
            raise ConfigError(f"gids: engine_depth must be 1..32768, got {engine_depth}")
        timeout = defaults.get("timeout") if timeout is None else float(timeout)
        if not timeout > 0:
            raise ConfigError(f"gids: timeout must be > 0 seconds, got {timeout}")
        if not SIMULATOR and not cuda.is_available():
            raise ConfigError("gids: no CUDA GPU is usable here; set NUMBA_ENABLE_CUDASIM=1 "
                              "before importing numba (or import gids first) to run in the "
                              "simulator")

        model = None
        if ssd is not None:
            if int(n_ssd) < 1:
                raise ConfigError(f"gids: n_ssd must be >= 1, got {n_ssd}")
            try:
                model = SsdModel(ssd, n_ssd=int(n_ssd), stripe_bytes=page_size)
            except ValueError as exc:
                raise ConfigError(f"gids: {exc}") from None
        self.backend = backend
        self.page_size = page_size
        self.cache_slots = cache_pages
        self.queues = queues
        self.queue_depth = queue_depth
        self.daemon_threads = daemon_threads
        self.engine_requested = engine
        self.engine_depth = engine_depth
        self.timeout = timeout
        self.simulator = SIMULATOR
        self._closed = False
        self._stranded = None      # the DaemonError of a daemon thread stuck in a store call
        self._arrays = []          # indexed by array id
        self._aliases = []         # arrays that share an earlier array's id and pages
        self._stores = []          # stores the Runtime opened itself (closed with it)
        self._zero_copy = {}       # id(MemoryStore) -> its pinned, mapped buffer
        self._written = {}         # id(store) -> store, for every store of an array opened "r+"
        self._n_pages = 0
        self._flushed_pages = 0    # pages written back on the host (flush, invalidate, recovery)
        self._lost = []            # (array, page): dirty pages the last host write-back dropped
        self._file_slots = {}      # id(store) -> (its first row in the per-file counters, store)
        # Per-file I/O counts not in the running daemon's: host-side writes, stopped daemons'.
        self._file_io = np.zeros((MAX_FILES, F_COLUMNS), dtype=np.int64)

        # The cache (device memory).
        self._cache = _allocate_cache(cache_pages, page_size)
        self._slot_page = self._to_device(np.full(cache_pages, L.SLOT_EMPTY, dtype=np.int64))
        self._clock = self._to_device(np.zeros(1, dtype=np.int64))
        # One uint64 word per page: its state and, while it has one, its slot (gids.layout).
        self._page_state = self._to_device(np.zeros(1, dtype=np.uint64))
        # Each array's first global page, so that an evicting thread can name a dirty victim's
        # array in its write request; unused rows sort after every page.
        self._page_bases_host = np.full(L.MAX_ARRAYS, np.iinfo(np.int64).max, dtype=np.int64)
        self._page_bases = self._to_device(self._page_bases_host)
        #: The host tier (:class:`gids.host_tier.HostTier`; ``capacity`` 0 without one).
        self.host_tier = HostTier(self, defaults.get("host_cache_bytes")
                                  if host_cache_bytes is None else host_cache_bytes,
                                  defaults.get("host_tier_fill")
                                  if host_tier_fill is None else host_tier_fill)
        self._err = self._to_device(np.zeros(L.ERR_WORDS, dtype=np.int64))
        # Where sync() reads it back, allocated once: a short launch's sync should not pay for
        # an allocation.
        self._err_host = cuda.pinned_array(L.ERR_WORDS, dtype=np.int64)
        self._kernels = KernelWaiter()   # what sync() polls (gids.rows adds its streams)
        self._device_id = current_device_id()   # where its memory is (0 in the simulator)
        self._rows_aside_lists = {}       # gids.rows' lists of rows set aside, per stream
        self._stats = self._to_device(np.zeros(L.N_STAT_SHARDS * L.N_STATS, dtype=np.uint64))
        self._no_zero_copy = self._to_device(np.zeros(1, dtype=np.uint64))
        self._copy_locks = _copy_locks()
        # Mapped, so the host can raise it while kernels run (abort(), Ctrl-C in sync()).
        self._abort = cuda.mapped_array(1, dtype=np.int64)
        self._abort_host = host_view(self._abort)
        self._abort_host[0] = 0
        # The stores' rows, filled as arrays open; the back end's server reads them.
        self._table = np.zeros((L.MAX_ARRAYS, T_COLUMNS), dtype=np.int64)
        # What serves the misses: its queues, staging pages, tickets and threads.
        self._io = io_class(self._table, queues=queues, queue_depth=queue_depth,
                            page_size=page_size, threads=daemon_threads, model=model,
                            trace=trace, engine=engine, engine_depth=engine_depth)
        #: Pinned and device buffers for the host index lists of launches (gids/staging.py).
        self._staging = Staging()
        self._window = Window(self)   # holds (gids/window.py)
        self._io.start()

    # ----------------------------------------------------------------- life cycle
    def _restart_server(self):
        # The stopped server's per-file counts stay in the Runtime's.
        self._file_io += self._io.server.file_io()
        self._io.start()

    def _stop_daemon(self):
        """Stop the back end's server and wait until none of its threads runs any more.

        A thread still inside a store call (a stalled pread or pwrite) goes on when the call
        returns: it fills its entry's staging page (a read) or stores that page (a write), and
        posts a completion. Whoever stops the daemon then reuses the queues and staging pages
        (recovery, set_daemon_threads) or closes the stores and frees the buffers (close), so
        the thread is waited for: else a stalled write-back, waking up, would store the bytes a
        later read put in its staging page as its own page (or, after close, crash the process).

        The wait is bounded all the same (:data:`STUCK_STORE_CALL_S`, or twice the timeout):
        past it, this Runtime gives up for good. Its daemon, queues, staging pages and stores
        are kept allocated and open (in :data:`_STRANDED`), so the thread can still finish its
        call harmlessly, and every later use of the Runtime raises this DaemonError.

        Raises
        ------
        DaemonError
            A daemon thread is still inside a store call after the bound.
        """
        bound = max(STUCK_STORE_CALL_S, 2 * self.timeout)
        try:
            self._io.stop(bound)
        except DaemonError as exc:
            _STRANDED.append((self._io, list(self._arrays), list(self._stores),
                              dict(self._zero_copy)))
            self._closed = True
            names = ", ".join(dict.fromkeys(a.store.name for a in self._arrays)) or "a store"
            self._stranded = DaemonError(
                f"gids: a daemon thread is still inside a store call (a read or write of "
                f"{names} that has not returned) after {bound:.0f} s; this Runtime cannot be "
                f"used again (its queues, staging pages and files stay allocated and open until "
                f"the call returns)")
            raise self._stranded from exc

    def set_daemon_threads(self, n):
        """Restart the daemon with ``n`` threads (between kernels)."""
        self._check_open()
        n = int(n)
        if n < 1:
            raise ConfigError(f"gids: daemon_threads must be >= 1, got {n}")
        cuda.synchronize()
        self._stop_daemon()
        self.daemon_threads = self._io.threads = n
        self._io.reset()
        self._restart_server()

    def close(self, flush=True):
        """Flush (unless ``flush=False``), stop the daemon and free the cache. Idempotent.

        Parameters
        ----------
        flush : bool
            Write back every dirty page and make the written stores durable first, as
            :meth:`flush`. With ``False``, dirty pages still in the cache are dropped: what an
            earlier :meth:`flush` or an eviction wrote back is in the store, the rest is not
            (for a zero-copy memory store, evictions write to its pinned copy: only what a
            :meth:`flush` copied reaches the user's numpy array).

        Raises
        ------
        StorageIOError, GidsError
            What :meth:`flush` raised; the Runtime is closed all the same.
        """
        if self._closed:
            return
        error = None
        if flush:
            try:
                self.flush()
            except BaseException as exc:   # noqa: BLE001  (close anyway; re-raised below)
                error = exc
        self._window.drop_all()
        self._closed = True
        # A kernel still holding one of its handles (launched outside gids.jit's check, or
        # running now) gives up its waits at once instead of running into the timeout.
        self._abort_host[0] = 1
        try:
            self._stop_daemon()
        except DaemonError as exc:
            # Stranded: a thread may still use the stores' files, so they stay open.
            if error is None:
                error = exc
        else:
            for store in self._stores:
                store.close()
        finally:
            self._io.close()
            self._arrays.clear()
            self._aliases.clear()
            self._zero_copy.clear()
            self._written.clear()
            self.host_tier.close()
        if error is not None:
            raise error

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # An exception in flight may have left kernels or the cache in any state, and an error
        # raised by a flush here would hide it: close without flushing (documented in close()).
        self.close(flush=exc_type is None)

    def _check_launch(self):
        """The launch guard of this Runtime's handles (kernels/launch.py): a closed Runtime's
        handle is refused before the kernel starts."""
        if self._stranded is not None:
            raise self._stranded
        if self._closed:
            raise StaleHandleError("gids: a kernel was launched with the handle of an array "
                                   "whose Runtime is closed; open the array again in an open "
                                   "Runtime and pass its handle")

    def _check_open(self):
        if self._stranded is not None:
            raise self._stranded
        if self._closed:
            raise ConfigError("gids: this Runtime is closed")

    @staticmethod
    def _to_device(host_array, stream=0):
        """A device copy of ``host_array``; on ``stream`` (a Numba stream) for a launch there.

        Why the stream: a copy from pageable memory without one returns once the bytes are
        staged, before they reach the device, and only the legacy default stream and the
        streams that wait for it are ordered after it: a kernel on a non-blocking stream (CuPy's
        ``non_blocking=True``, torch's, :func:`gids.window.side_stream`) could read the array
        before it is there. On the launch's stream it is ordered before the launch."""
        return cuda.to_device(host_array, stream=stream)

    # ----------------------------------------------------------------- arrays
    def open_array(self, source, dtype=None, shape=None, offset=0, *, mode="r", storage="file",
                   direct=True, stripe=None):
        """Open an array of ``dtype`` at byte ``offset`` of a file or store.

        Parameters
        ----------
        source : str, os.PathLike, numpy.ndarray, Store, or a list of paths
            A file path; a numpy array (kept in RAM, a :class:`~host_daemon.stores.MemoryStore`);
            a store object; or a list of paths, the files one byte range is striped over
            (a :class:`~host_daemon.stores.StripedStore`: one file per drive, as RAID 0).
        dtype : numpy dtype
            Element type (``source.dtype`` for a numpy array). Its size must divide the page size.
        shape : int or tuple, optional
            Default: as many elements as the bytes after ``offset`` hold.
        offset : int
            Byte offset of element 0 in the file; any value (pages are counted from it).
        mode : {"r", "r+"}
            ``"r"`` (the default): read-only; ``gids.write`` and :meth:`scatter` on it raise
            :class:`~gids.errors.ReadOnlyError`. ``"r+"``: read and write (the file is opened
            for writing; a numpy array's own memory receives the writes).
        storage : {"file", "mmap", "memory"}
            For a path: read with ``pread`` (``"file"``), through an ``mmap``, or load the file
            into pinned RAM first (``"memory"``; read-only, since writes would never reach the
            file).
        direct : bool
            For ``storage="file"``: use ``O_DIRECT`` for aligned pages where possible.
        stripe : int, optional
            For a list of paths: bytes per stripe unit, a multiple of the page size (default:
            one page). Striped arrays start at a multiple of the page size (``offset``).

        Returns
        -------
        StorageArray

        Raises
        ------
        FileNotFoundError, ConfigError
            Missing file, file shorter than ``offset + shape``, unsupported dtype, a dtype whose
            size does not divide the page size, too many arrays, an unknown mode; for a list of
            paths: an empty list, the same file twice, a stripe unit that is not a multiple of
            the page size, stripe files of the wrong sizes, an offset not a multiple of the
            page size.
        SharedFileError
            The file (or store) is open already in an array whose bytes overlap the new one's
            without being shareable (see Notes), and one of the two is writable.
        ReadOnlyError
            ``mode="r+"`` on a store that cannot be written (a read-only numpy array, a store
            object made without ``writable=True``, ``storage="memory"``).

        Notes
        -----
        The same file (device and inode) or Store opened again at the same ``offset``, with
        no more bytes than the first array, shares the first array's cached pages: a write
        through one is read through the other.
        """
        self._check_open()
        if mode not in MODES:
            raise ConfigError(f"gids: mode must be one of {MODES}, got {mode!r}")
        writable = mode == "r+"
        if writable and storage == "memory" and isinstance(source, (str, os.PathLike)):
            raise ReadOnlyError("gids: storage='memory' loads a copy of the file, which writes "
                                "would never reach; use storage='file' or 'mmap' with mode='r+'")
        store, owned = self._make_store(source, storage, direct, writable, stripe)
        try:
            if dtype is None:
                if not isinstance(source, np.ndarray):
                    raise ConfigError("gids: open_array needs a dtype")
                dtype = source.dtype
            dtype = np.dtype(dtype)
            if dtype not in SUPPORTED_DTYPES:
                raise ConfigError(f"gids: unsupported dtype {dtype}; supported: "
                                  f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")
            if self.page_size % dtype.itemsize:
                raise ConfigError(f"gids: dtype {dtype} ({dtype.itemsize} bytes) does not divide "
                                  f"the page size {self.page_size}")
            offset = int(offset)
            if offset < 0:
                raise ConfigError(f"gids: offset must be >= 0, got {offset}")
            available = store.nbytes - offset
            if shape is None:
                if isinstance(source, np.ndarray) and offset == 0:
                    shape = source.shape
                else:
                    if available <= 0 or available % dtype.itemsize:
                        raise ConfigError(
                            f"gids: {store.name} has {store.nbytes} bytes; from offset {offset} "
                            f"that is not a whole number of {dtype} elements: give a shape")
                    shape = (available // dtype.itemsize,)
            shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
            if any(s < 0 for s in shape):
                raise ConfigError(f"gids: negative dimension in shape {shape}")
            size = int(np.prod(shape, dtype=np.int64))
            if size == 0:
                raise ConfigError("gids: an array must have at least one element")
            if size * dtype.itemsize > available:
                raise ConfigError(
                    f"gids: {store.name} is too short: {store.nbytes} bytes, but shape {shape} of "
                    f"{dtype} at offset {offset} needs {offset + size * dtype.itemsize}")
            if len(self._arrays) >= L.MAX_ARRAYS:
                raise ConfigError(f"gids: at most {L.MAX_ARRAYS} arrays per Runtime")
            if writable and not store.writable:
                raise ReadOnlyError(f"gids: {store.name} cannot be written (mode='r+'): "
                                    "make the store writable (writable=True, or a writeable "
                                    "numpy array)")
            key = _source_key(source, store)
            base = self._shared_base(key, store, offset, size * dtype.itemsize, writable)
            if base is not None:
                return self._open_alias(base, store, owned, dtype, shape, writable)
            array = self._register(store, owned, dtype, shape, offset, size * dtype.itemsize,
                                   writable)
            array._source_key = key
            return array
        except BaseException:
            if owned:
                store.close()
            raise

    def _make_store(self, source, storage, direct, writable, stripe):
        if isinstance(source, (list, tuple)):
            if storage != "file":
                raise ConfigError(f"gids: a list of paths is striped and read as files; "
                                  f"storage={storage!r} is not possible there")
            unit = self.page_size if stripe is None else int(stripe)
            self._check_stripe_unit(unit)   # before the files' sizes, which depend on it
            return StripedStore(source, unit, direct=direct, writable=writable), True
        if stripe is not None:
            raise ConfigError("gids: stripe= is for a list of paths (a striped store)")
        if isinstance(source, Store):
            return source, False
        if isinstance(source, np.ndarray):
            return MemoryStore(source), True
        if isinstance(source, (str, os.PathLike)):
            return open_file_store(source, storage, direct=direct, writable=writable), True
        raise ConfigError(f"gids: cannot open {type(source).__name__}: give a path, a numpy "
                          "array or a Store")

    def _shared_base(self, key, store, offset, nbytes, writable):
        """The open array whose cached pages a new array of the same file (or store) at
        ``offset`` uses: one at the same offset holding at least ``nbytes``. None when the new
        array needs pages of its own; SharedFileError when it would then alias another's bytes
        and one of the two is writable (two cached copies of a page go stale)."""
        if key is None:
            return None
        for other in self._arrays:
            if getattr(other, "_source_key", None) != key:
                continue
            if other.offset == offset and nbytes <= other.nbytes:
                return other
            overlap = offset < other.offset + other.nbytes and other.offset < offset + nbytes
            if overlap and (writable or id(other.store) in self._written):
                raise SharedFileError(
                    f"gids: {store.name} is already open in this Runtime at byte offset "
                    f"{other.offset} ({other.nbytes} bytes), and one of the two arrays is "
                    f"writable: the new one (offset {offset}, {nbytes} bytes) cannot share "
                    "its cached pages. Open the array with the larger extent first, at the "
                    "same offset, or use one array")
        return None

    def _open_alias(self, base, store, owned, dtype, shape, writable):
        """A second array on ``base``'s bytes: the same array id and pages, so that both read
        the same cached pages (a write through one is seen by the other). ``store`` (just
        opened for it) serves both from now on if it is writable and base's store is not;
        else it is closed."""
        if writable and not base.store.writable:
            self._replace_store(base.array_id, store)
            if owned:
                self._stores.append(store)
        elif owned:
            store.close()
        shared = base.store
        array = StorageArray(self, shared, dtype, shape, base.offset, base.array_id,
                             base.page_base, base.n_pages, base._zero_copy, writable)
        array._source_key = base._source_key
        if writable:
            self._written[id(shared)] = shared
            for other in [base, *self._aliases]:
                if other.array_id == base.array_id:
                    other._early_base = -1
                    other._handle = None
        self._aliases.append(array)
        return array

    def _replace_store(self, array_id, store):
        """Serve array ``array_id`` (and its aliases) from ``store`` from now on (between
        kernels): the daemon's table row, and each array's store and handle."""
        base = self._arrays[array_id]
        self._table[array_id] = store.table_row(base.offset, base.nbytes, 0)
        for array in [base, *self._aliases]:
            if array.array_id == array_id:
                array.store = store
                array._zero_copy = self._no_zero_copy
                array._early_base = -1
                array._handle = None

    def _register(self, store, owned, dtype, shape, offset, nbytes, writable):
        array_id = len(self._arrays)
        n_pages = math.ceil(nbytes / self.page_size)
        if n_pages > L.SQ_MAX_PAGE + 1:
            raise ConfigError(f"gids: an array of {n_pages} pages of {self.page_size} B: a "
                              f"request names at most {L.SQ_MAX_PAGE + 1} pages of one array "
                              "(gids.layout); use larger pages")
        page_base = self._n_pages
        self._grow_page_tables(page_base + n_pages)
        zero_copy = self._no_zero_copy
        address = 0
        early_base = -1
        if isinstance(store, MemoryStore) and store.zero_copy:
            zero_copy, address = self._zero_copy_buffer(store)
            # A miss may start copying its page before the completion comes where the page's
            # bytes are in the mapped buffer before any kernel runs and stay as they are (no
            # array of the store is writable), where the back end's completion names those
            # words and no SSD model times it (IoBackend.allows_early_copy), and the words are
            # 16-byte aligned (as the bulk copy wants) and within a completion's reach.
            if (EARLY_COPY and not writable and id(store) not in self._written
                    and self._io.allows_early_copy and offset % 16 == 0
                    and (offset + n_pages * self.page_size) // 8 <= L.CQ_MAX_SOURCE):
                early_base = offset // 8
        if isinstance(store, FaultyStore) and store.page_size != self.page_size:
            raise ConfigError(f"gids: the FaultyStore counts pages of {store.page_size} bytes, "
                              f"the Runtime {self.page_size}")
        if isinstance(store, StripedStore):
            self._check_stripe_unit(store.unit)
            if offset % self.page_size:
                raise ConfigError(f"gids: a striped array starts at a multiple of the page size "
                                  f"({self.page_size}), got offset {offset}")
        slot = self._file_slot(store)
        try:
            self._table[array_id] = store.table_row(offset, nbytes, address)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._table[array_id, T_FILE_SLOT] = slot
        array = StorageArray(self, store, dtype, shape, offset, array_id, page_base, n_pages,
                             zero_copy, writable, early_base)
        self._page_bases_host[array_id] = page_base
        self._page_bases.copy_to_device(self._page_bases_host)
        if writable:
            self._written[id(store)] = store
            # The store's bytes may change from now on: its read-only arrays copy no page
            # before its completion any more (their next handle says so).
            for other in self._arrays:
                if other.store is store:
                    other._early_base = -1
                    other._handle = None
        self._arrays.append(array)
        if owned:
            self._stores.append(store)
        return array

    def _check_stripe_unit(self, unit):
        if unit < 1 or unit % self.page_size:
            raise ConfigError(f"gids: the stripe unit ({unit} bytes) must be a positive "
                              f"multiple of the page size ({self.page_size})")

    def _file_slot(self, store):
        """The store's first row in the per-file I/O counters (-1: not a file, or no rows
        left: its I/Os are then not counted per file)."""
        if store.n_files == 0:
            return -1
        if id(store) not in self._file_slots:
            used = sum(s.n_files for _, s in self._file_slots.values())
            if used + store.n_files > MAX_FILES:
                return -1
            self._file_slots[id(store)] = (used, store)
        return self._file_slots[id(store)][0]

    def _zero_copy_buffer(self, store):
        """The store's bytes in pinned, device-mapped memory (made once per store)."""
        key = id(store)
        if key not in self._zero_copy:
            # One page of slack: the GPU copies whole pages, also the array's last one.
            words = (store.nbytes + self.page_size + 7) // 8
            mapped = cuda.mapped_array(words, dtype=np.uint64)
            host = host_view(mapped).view(np.uint8)
            host[:store.nbytes] = store.data
            host[store.nbytes:] = 0
            self._zero_copy[key] = (mapped, store)
        mapped = self._zero_copy[key][0]
        return mapped, host_view(mapped).ctypes.data

    def _grow_page_tables(self, n_pages):
        if n_pages <= self._page_state.size and self._n_pages:
            self._n_pages = n_pages
            return
        capacity = max(n_pages, 2 * self._page_state.size)
        state = np.zeros(capacity, dtype=np.uint64)
        if self._n_pages:
            state[:self._n_pages] = self._page_state.copy_to_host()[:self._n_pages]
        self._page_state = self._to_device(state)
        self._n_pages = n_pages
        self.host_tier.grow(capacity)

    # ----------------------------------------------------------------- the handle
    def handle_fields(self, dtype):
        """The fields of the kernels' handle that every array of ``dtype`` shares, by name: the
        cache and its page tables, error and statistics words, and the back end's queues
        (:mod:`kernels.handle`). :class:`~gids.array.StorageArray` adds its own and makes the
        handle with :attr:`handle_class`."""
        return dict(
            cache=self._cache.view(dtype),
            cache_words=self._cache.view(np.uint64),
            page_words=self.page_size // 8,
            page_state=self._page_state,
            slot_page=self._slot_page,
            clock=self._clock,
            n_slots=self.cache_slots,
            page_bases=self._page_bases,
            err=self._err,
            stats=self._stats,
            timeout_ns=int(self.timeout * 1e9),
            abort=self._abort,
            copy_locks=self._copy_locks,
            **self._io.handle_fields())

    @property
    def handle_class(self):
        """The handle type of this Runtime's back end (its I/O step, chosen at compile time)."""
        return self._io.handle_class

    # ----------------------------------------------------------------- kernels
    def _check_array(self, array, what):
        self._check_open()
        if not isinstance(array, StorageArray) or array.runtime is not self:
            raise ConfigError(f"gids: {what} takes a StorageArray opened by this Runtime")

    def _device_indices(self, array, indices):
        """Indices as a 1-D int64 device array; host indices are range-checked here."""
        if _is_device_array(indices):
            return self._device_index_array(indices)
        return self._to_device(self._host_indices(array, indices))

    @staticmethod
    def _device_index_array(indices):
        """Device indices as a Numba 1-D int64 device array, their type checked (their range
        is the kernel's to check)."""
        d_idx = indices if SIMULATOR else cuda.as_cuda_array(indices)
        if d_idx.dtype != np.int64 or d_idx.ndim != 1:
            raise ConfigError("gids: device indices must be a 1-D int64 array")
        return d_idx

    @staticmethod
    def _host_indices(array, indices):
        """Host indices as a 1-D int64 numpy array, range-checked."""
        host_idx = np.asarray(indices).reshape(-1)
        if host_idx.size == 0:   # np.asarray([]) is float64: no index, nothing to check
            return np.zeros(0, dtype=np.int64)
        if host_idx.dtype.kind not in "iu":
            raise ConfigError(f"gids: indices must be integers, got {host_idx.dtype}")
        # Checked before the conversion to int64, which would wrap a uint64 above 2**63 - 1.
        from gids.rows import first_out_of_range
        first = first_out_of_range(host_idx, array.size)
        if first >= 0:
            raise IndexOutOfRangeError(
                f"gids: index {int(host_idx[first])} (position {first}) is out of range for "
                f"an array of {array.size} elements")
        return host_idx.astype(np.int64, copy=False)

    @staticmethod
    def _grid(n):
        threads = 32 if SIMULATOR else 256
        return max(1, min(math.ceil(n / threads), 2 if SIMULATOR else 4096)), threads

    def gather(self, array, indices, out=None):
        """Read ``array.flat[indices]`` on the GPU through the cache, into ``out`` or a new
        :class:`gids.interop.DeviceArray`; waits for the kernel (errors are raised here).

        Parameters
        ----------
        array : StorageArray
        indices : array-like of int, or a device array of int64
            Host indices are checked before the kernel runs; device indices in the kernel.
        out : CUDA array, optional
            Where to write: any 1-D array of ``len(indices)`` elements of ``array.dtype`` with
            ``__cuda_array_interface__`` (torch, CuPy, Numba; checked before the kernel).

        Returns
        -------
        gids.interop.DeviceArray, or ``out``
            A new array exposes ``__cuda_array_interface__`` and DLPack:
            ``torch.from_dlpack(result)``, ``cupy.from_dlpack(result)`` and
            ``cupy.asarray(result)`` take it without a copy; ``copy_to_host()`` reads it.
        """
        # imported here: the kernel compiles on first use
        from gids.kernels_host import gather_kernel
        from gids.rows import output_array
        self._check_array(array, "gather")
        d_idx = self._device_indices(array, indices)
        n = d_idx.size
        target, result = output_array(out, (n,), array.dtype)
        if n:
            blocks, threads = self._grid(n)
            gather_kernel[blocks, threads](array.handle, d_idx, target)
            self.sync()
        return result

    def gather_rows(self, array, rows, out=None, stream=None):
        """Rows ``rows`` of a 2-D ``array`` into ``out`` (any CUDA array: torch, CuPy, Numba) or
        a new :class:`gids.interop.DeviceArray` (CUDA Array Interface and DLPack), a warp per
        row through the cache, on ``stream`` (torch/CuPy/Numba stream or raw handle; default
        stream if None). Does not wait: errors are raised by the next :meth:`sync` or
        :meth:`check`. Rows are host or device integer arrays of any integer dtype (host ones
        checked before the launch). See :mod:`gids.rows`."""
        from gids.rows import gather_rows
        return gather_rows(self, array, rows, out, stream)

    def hold(self, array, indices, stream=None):
        """Load the pages of ``array.flat[indices]`` (where missing) and keep them in the cache
        until the returned :class:`~gids.window.Hold` is released (:meth:`release`,
        ``hold.release()``, or leaving ``with hold:``): later kernels' reads of them hit
        (GIDS's window buffering). Launched on ``stream`` without waiting (``hold.wait()``
        waits and raises what the kernel met). Device indices are copied to the host first.

        Raises
        ------
        HoldLimitError
            The pages held, with these, would exceed ``hold_fraction`` of the cache (setting
            ``GIDS_HOLD_FRACTION``, default 0.5); nothing of this hold is held.
        IndexOutOfRangeError
            An index outside the array (before any kernel runs).

        :meth:`invalidate`, recovery after a failed kernel and :meth:`close` release every
        hold (see :mod:`gids.window`).
        """
        return self._window.hold(array, indices, stream)

    def release(self, hold):
        """Let the pages of ``hold`` be evicted again (does not wait).

        Raises
        ------
        NotHeldError
            ``hold`` is not held: released already (also by :meth:`invalidate` or recovery).
        """
        self._window.release(hold)

    def prefetch(self, array, indices, stream=None):
        """Start loading the pages of ``array.flat[indices]`` on ``stream`` and return at once
        (``gids.side_stream()`` gives a stream that overlaps the default one): the pages are
        loaded, not held, and kernels that read them later hit, unless evicted meanwhile.
        Host indices are checked here (:class:`~gids.errors.IndexOutOfRangeError`); errors of
        the kernel are raised by the next :meth:`sync`."""
        self._window.prefetch(array, indices, stream)

    @property
    def held_pages(self):
        """Distinct pages held by :meth:`hold` now."""
        return self._window.held_pages

    def check(self):
        """Without waiting: False while kernels run; once all have ended, :meth:`sync` (raising
        their first error) and True."""
        from gids.rows import check
        return check(self)

    def scatter(self, array, indices, values):
        """Write ``array.flat[indices] = values`` on the GPU through the cache (``gids.write``).

        The written pages stay in the cache, dirty, until evicted, flushed or the Runtime
        closes. Where ``indices`` repeat, which of their values is kept is not defined.

        Parameters
        ----------
        array : StorageArray
            Opened with ``mode="r+"``.
        indices : array-like of int, or a device array of int64
            Host indices are checked before the kernel runs; device indices in the kernel.
        values : scalar, array-like or device array
            One value per index, or one for all. Host values must be held exactly by
            ``array.dtype`` (1.0 into float32 or int32, Python ints into int8 if they fit; not
            0.1 into float32 nor 1.5 into an integer array: the first such value is named);
            device values must have ``array.dtype`` exactly.

        Raises
        ------
        ReadOnlyError
            The array was opened read-only (before any kernel runs).
        ConfigError
            A length mismatch, or a value the dtype does not hold exactly.
        IndexOutOfRangeError
            A host index out of range (before any kernel runs) or a device one.
        """
        # imported here: the kernel compiles on first use
        from gids.kernels_host import scatter_kernel
        self._check_array(array, "scatter")
        if not array.writable:
            raise ReadOnlyError(f"gids: the array on {array.store.name} was opened read-only; "
                                "open it with mode='r+' to write")
        d_idx = self._device_indices(array, indices)
        n = d_idx.size
        if _is_device_array(values):
            d_val = values if SIMULATOR else cuda.as_cuda_array(values)
            if d_val.dtype != array.dtype or d_val.ndim != 1 or d_val.size != n:
                raise ConfigError(f"gids: device values must be {n} elements of {array.dtype} "
                                  f"(got {d_val.size} of {d_val.dtype})")
        else:
            host_val = _converted(values, array.dtype)
            if host_val.size == 1 and n != 1:
                host_val = np.full(n, host_val[0], dtype=array.dtype)
            if host_val.size != n:
                raise ConfigError(f"gids: {n} indices but {host_val.size} values")
            d_val = self._to_device(host_val)
        if n:
            blocks, threads = self._grid(n)
            scatter_kernel[blocks, threads](array.handle, d_idx, d_val)
            self.sync()

    def flush(self):
        """Write back every dirty page and make every written store durable, then return.

        Waits for the kernels launched so far (as :meth:`sync`, raising their first error),
        writes each dirty page still in the GPU cache to its store, from the host, and then
        calls ``fsync`` (files), ``msync`` (mmaps) or copies the pinned buffer back into the
        numpy array (zero-copy memory stores) for every store an array was opened on with
        ``mode="r+"`` (pages written back by evictions are made durable here too). The pages
        stay cached, clean.

        Returns
        -------
        int
            Pages written back by this call.

        Raises
        ------
        StorageIOError
            A store refused a page (names the file and the page); the pages not yet written stay
            dirty in the cache, and nothing was synced.
        """
        self.sync()
        written = self._write_back_dirty()
        for store in list(self._written.values()):
            self._sync_store(store)
        return written

    def _sync_store(self, store):
        if id(store) in self._zero_copy:
            # The GPU's write-backs went to the pinned copy: bring them to the store's array.
            mapped = host_view(self._zero_copy[id(store)][0]).view(np.uint8)
            store.data[:] = mapped[:store.nbytes]
        try:
            self._io.server.sync_store(store)
        except OSError as exc:
            raise StorageIOError(f"gids: cannot make {store.name} durable: "
                                 f"{exc.strerror or exc}", path=getattr(store, "path", None)
                                 ) from exc

    def _write_back_dirty(self, best_effort=False):
        """Write every dirty cached page to its store from the host (no kernel may run), and
        mark it clean. Returns the pages written; with ``best_effort`` a page the store refuses
        is skipped (noted in ``self._lost``) instead of raising :class:`StorageIOError`."""
        cuda.synchronize()
        state = self._page_state.copy_to_host()
        dirty = np.flatnonzero(state[:self._n_pages] & L.PAGE_DIRTY)
        self._lost = []
        if dirty.size == 0:
            return 0
        # Each page's slot is in its word's high half (kept there as long as the slot holds the
        # page's bytes, also through a write-back: VALID | DIRTY or BUSY | DIRTY).
        slots = (state[dirty] >> L.PAGE_SLOT_SHIFT).astype(np.int64)
        ps = self.page_size
        cache = self._cache.copy_to_host() if dirty.size > _WHOLE_CACHE_COPY_PAGES else None
        owners = np.searchsorted(self._page_bases_host, dirty, side="right") - 1
        written = 0
        error = None
        for gpage, slot, array_id in zip(dirty.tolist(), slots.tolist(), owners.tolist()):
            array = self._arrays[array_id]
            page = gpage - array.page_base
            start = page * ps
            n = min(ps, array.nbytes - start)
            if cache is not None:
                data = cache[slot * ps:slot * ps + n]
            else:
                data = self._cache[slot * ps:slot * ps + n].copy_to_host()
            try:
                self._store_write(array, array.offset + start, data)
            except OSError as exc:
                if not best_effort:
                    error = self._write_error(array, page, str(exc.strerror or exc))
                    break
                self._lost.append((array, page))
                continue
            self.host_tier.written(gpage, data)
            state[gpage] &= ~L.PAGE_DIRTY   # a uint64 mask: the slot stays
            written += 1
        self._page_state.copy_to_device(state)
        self._flushed_pages += written
        if error is not None:
            raise error
        return written

    def _store_write(self, array, offset, data):
        entry = self._zero_copy.get(id(array.store))
        if entry is not None:   # the GPU reads misses from the pinned copy: keep it current
            host_view(entry[0]).view(np.uint8)[offset:offset + data.size] = data
        start = time.perf_counter_ns()
        self._io.server.write_store(array.store, offset, data)
        slot = self._file_slots.get(id(array.store), (-1,))[0]
        if slot >= 0:   # counted per file as the daemon counts its writes
            row = self._file_io[slot + array.store.file_of(offset)[0]]
            row[F_WRITES] += 1
            row[F_WRITE_BYTES] += data.size
            row[F_WRITE_NS] += time.perf_counter_ns() - start

    def _write_error(self, array, page, reason):
        start = array.offset + page * self.page_size
        n = min(self.page_size, array.nbytes - page * self.page_size)
        _, name, path = array.store.file_of(start)   # a striped store: the one file
        return StorageIOError(f"gids: cannot write page {page} (bytes {start}-{start + n - 1}) "
                              f"of {name}: {reason}", path=path, page=page)

    def sync(self, timeout=None):
        """Wait for the kernels launched so far; raise the first error one of their threads met.

        After an error the Runtime writes back the dirty pages it can (from the host, not
        synced), resets its queues and empties the cache, so it can be used again; a dirty page
        its store refuses then is dropped, and the raised exception has a note naming it.
        Ctrl-C while waiting stops the kernels (every waiting thread gives up within a few
        polls), recovers the same way and re-raises KeyboardInterrupt.

        Every wait inside the kernels is bounded (the Runtime's ``timeout``); the kernels' own
        work is not. ``timeout`` (seconds) bounds this wait as a whole: kernels still running
        then are stopped as Ctrl-C stops them and :class:`~gids.errors.GidsTimeoutError` is
        raised, the Runtime reset.
        """
        self._check_open()
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise ConfigError(f"gids: sync's timeout must be a number of seconds >= 0 or None, "
                              f"got {timeout!r}")
        try:
            finished = self._kernels.wait(timeout)
        except KeyboardInterrupt:
            self._stop_kernels("Ctrl-C")
            self._recover()
            raise
        if not finished:
            self._stop_kernels(f"sync(timeout={timeout})")
            exc = GidsTimeoutError(f"gids: the kernels did not finish within sync's timeout of "
                                   f"{timeout} s; they were stopped (Runtime.abort) and the "
                                   "Runtime reset", what="sync")
            self._recover(exc)
            raise exc
        self._io.drain_trace()
        err = self._err.copy_to_host(self._err_host)
        aborted = bool(self._abort_host[0])
        daemon_error = None
        try:
            self._io.check()
        except DaemonError as exc:
            daemon_error = exc
        if err[L.ERR_CODE] == L.ERR_NONE and daemon_error is None and not aborted:
            self.host_tier.after_kernels()
            return
        if aborted:
            exc = AbortedError("gids: the kernels were stopped by Runtime.abort()")
        else:
            exc = daemon_error or self._error_from_record(err)
        self._recover(exc)
        raise exc

    def _stop_kernels(self, why):
        """Abort the running kernels and wait for them: every wait in them gives up within the
        Runtime's timeout, so this wait has that bound too (a kernel that loops without
        waiting on gids would not stop: named, not waited for forever)."""
        self.abort()
        bound = self.timeout + 5.0
        if not self._kernels.wait(bound):
            raise GidsTimeoutError(f"gids: after {why} the kernels were aborted but still ran "
                                   f"{bound:.0f} s later: a kernel loops without waiting on "
                                   "gids, or a long kernel that does not use gids is queued "
                                   "before this wait; the Runtime cannot be reset while it "
                                   "runs",
                                   what="abort")

    def abort(self):
        """Ask every thread of the running kernels to stop waiting (callable from any thread).

        Threads give up within a few polls, recording an error; the next :meth:`sync` raises
        :class:`~gids.errors.AbortedError` and resets the Runtime.
        """
        self._abort_host[0] = 1

    def _error_from_record(self, err):
        code, array_id, page, detail = (int(err[k]) for k in
                                        (L.ERR_CODE, L.ERR_ARRAY, L.ERR_PAGE, L.ERR_DETAIL))
        array = self._arrays[array_id] if 0 <= array_id < len(self._arrays) else None
        if code == L.ERR_INDEX:
            size = array.size if array is not None else "?"
            return IndexOutOfRangeError(
                f"gids: a kernel read index {detail} of an array of {size} elements")
        if code == L.ERR_IO:
            return self._io_error(array, page, detail)
        if code == L.ERR_WRITE_IO:
            if array is None:
                return StorageIOError(f"gids: cannot write page {page}", page=page)
            reason = {L.STATUS_IO_ERROR: "the write failed (I/O error)",
                      L.STATUS_SHORT_WRITE: "short write (disk full?)",
                      L.STATUS_BAD_REQUEST: "bad request"}.get(detail, f"status {detail}")
            return self._write_error(array, page, reason + ", on eviction from the GPU cache")
        if code == L.ERR_READ_ONLY:
            name = array.store.name if array is not None else "?"
            return ReadOnlyError(f"gids: a kernel wrote index {detail} of an array opened "
                                 f"read-only ({name}); open it with mode='r+' to write")
        if code in _TIMEOUT_WHAT:
            what = self._io.waits_for if code == L.ERR_TIMEOUT_IO else _TIMEOUT_WHAT[code]
            if code == L.ERR_TIMEOUT_LOADER and detail == L.DETAIL_NO_LEADER:
                what = "the lane of its warp that looks the page up (it was not among the lanes)"
            cls = CacheExhaustedError if code == L.ERR_TIMEOUT_SLOT else GidsTimeoutError
            hint = (f" (the cache has {self.cache_slots} slots: too few for the pages in use at "
                    "once)" if code == L.ERR_TIMEOUT_SLOT else "")
            where = f" of {array.store.name}" if array is not None else ""
            return cls(f"gids: a kernel thread waited more than {self.timeout} s for {what} "
                       f"(page {page}{where}){hint}", what=what)
        return GidsTimeoutError(f"gids: unknown error record {err.tolist()}")

    def _io_error(self, array, page, status):
        if array is None:
            return StorageIOError(f"gids: I/O error on page {page}", page=page)
        start = array.offset + page * self.page_size
        n = min(self.page_size, array.nbytes - page * self.page_size)
        reason = {L.STATUS_SHORT_READ: "short read", L.STATUS_IO_ERROR: "read failed",
                  L.STATUS_OK: "an earlier read of it failed",
                  L.STATUS_BAD_REQUEST: "bad request"}.get(status, f"status {status}")
        if status == L.STATUS_OK:
            # A reader found the page marked ERROR, and no load failure was recorded before it:
            # name the word, so that a report of this shows the state that said so.
            reason += f" ({_describe_page_word(self._page_state[array.page_base + page])})"
        try:   # read it again here to name the OS's reason
            got = len(array.store.read_bytes(start, n))
            if got < n:
                reason = f"short read ({got} of {n} bytes: the file shrank?)"
        except OSError as exc:
            reason = f"{reason}: {exc.strerror or exc}"
        _, name, path = array.store.file_of(start)   # a striped store: the one file
        return StorageIOError(f"gids: cannot read page {page} (bytes {start}-{start + n - 1}) of "
                              f"{name}: {reason}", path=path, page=page)

    def _recover(self, exc=None):
        """After a failed kernel: dirty pages written back where possible, fresh queues, an
        empty cache, no error, a new daemon. Pages that could not be written back are dropped
        and named in a note on ``exc``."""
        try:
            self._stop_daemon()
        except DaemonError as stuck:
            if exc is not None:
                stuck.add_note(f"gids: the kernels had failed with: {exc}")
            raise
        self._io.reset()
        self._write_back_dirty(best_effort=True)
        if self._lost and exc is not None:
            lost = ", ".join(f"page {p} of {a.store.name}" for a, p in self._lost[:8])
            more = f" and {len(self._lost) - 8} more" if len(self._lost) > 8 else ""
            exc.add_note(f"gids: dirty pages that could not be written back were dropped: "
                         f"{lost}{more}")
        # The tier never holds newer bytes than the store (a dirty page's write-back drops
        # it there; a flush writes both), so it stays.
        self.invalidate(discard_dirty=True, keep_host_tier=True)
        self._err.copy_to_device(np.zeros(L.ERR_WORDS, dtype=np.int64))
        self._abort_host[0] = 0
        self._restart_server()

    def invalidate(self, discard_dirty=False, keep_host_tier=False):
        """Drop every cached page (between kernels), and the host tier's unless
        ``keep_host_tier``.

        Dirty pages are written back to their stores first (not synced: see :meth:`flush`),
        unless ``discard_dirty=True``, which drops their writes (e.g. after :meth:`flush` raised
        for a page the store keeps refusing). Every :meth:`hold` is released.
        """
        self._check_open()
        cuda.synchronize()
        self._window.drop_all()
        if not discard_dirty:
            self._write_back_dirty()
        self._page_state.copy_to_device(np.zeros(self._page_state.size, dtype=np.uint64))
        self._slot_page.copy_to_device(np.full(self.cache_slots, L.SLOT_EMPTY, dtype=np.int64))
        self._clock.copy_to_device(np.zeros(1, dtype=np.int64))
        if not keep_host_tier:
            self.host_tier.clear()

    # ----------------------------------------------------------------- stats
    def stats(self):
        """Counters since the Runtime started (or :meth:`reset_stats`); call after :meth:`sync`."""
        self._check_open()
        counts = self._stats.copy_to_host().reshape(L.N_STAT_SHARDS, L.N_STATS).sum(axis=0)
        ios = int(counts[L.STAT_IOS])
        writebacks = int(counts[L.STAT_WRITEBACKS])
        return Stats(hits=int(counts[L.STAT_HITS]), misses=int(counts[L.STAT_MISSES]), ios=ios,
                     bytes_read=ios * self.page_size, evictions=int(counts[L.STAT_EVICTIONS]),
                     writebacks=writebacks, flushed=self._flushed_pages,
                     bytes_written=(writebacks + self._flushed_pages) * self.page_size,
                     io_ns=int(counts[L.STAT_IO_NS]), miss_ns=int(counts[L.STAT_MISS_NS]),
                     slot_retries=int(counts[L.STAT_SLOT_RETRIES]),
                     bulk_copies=int(counts[L.STAT_BULK_COPIES]),
                     submit_ns=int(counts[L.STAT_SUBMIT_NS]),
                     copy_ns=int(counts[L.STAT_COPY_NS]),
                     claim_ns=int(counts[L.STAT_CLAIM_NS]),
                     early_copies=int(counts[L.STAT_EARLY_COPIES]),
                     tier_hits=int(counts[L.STAT_TIER_HITS]),
                     tier_direct=int(counts[L.STAT_TIER_DIRECT]),
                     tier_fills=int(counts[L.STAT_TIER_FILLS]) + self.host_tier.fills,
                     tier_evictions=self.host_tier.evictions,
                     prefetched=int(counts[L.STAT_PREFETCHED]),
                     held_pages=int(counts[L.STAT_HELD_PAGES]),
                     files=self._file_stats(), engine=self._io.server.engine,
                     engine_note=self._io.server.engine_note,
                     engine_buffers=self._io.server.buffers_note)

    def _file_stats(self):
        """A FileStats per file of the stores opened, in the order they were opened."""
        counts = self._file_io + self._io.server.file_io()
        return tuple(FileStats.from_counts(name, counts[slot + f])
                     for slot, store in self._file_slots.values()
                     for f, name in enumerate(store.file_names()))

    def reset_stats(self):
        self._check_open()
        self._stats.copy_to_device(np.zeros(L.N_STAT_SHARDS * L.N_STATS, dtype=np.uint64))
        self._flushed_pages = 0
        self.host_tier.reset_counts()
        self._file_io[:] = 0
        self._io.server.reset_file_io()

    @property
    def daemon(self):
        """What serves the misses: the :class:`~host_daemon.daemon.HostDaemon`, or for
        ``backend="nvme"`` the :class:`~host_daemon.nvme_controller.NvmeController`."""
        return self._io.server

    @property
    def ssd_model(self):
        """The emulated SSD array (:class:`~host_daemon.ssd_model.SsdModel`), or None."""
        return self._io.model

    def __repr__(self):
        world = "simulator" if self.simulator else "GPU"
        return (f"Runtime(backend={self.backend!r}, {world}, page_size={self.page_size}, "
                f"cache_slots={self.cache_slots}, queues={self.queues}x{self.queue_depth}, "
                f"daemon_threads={self.daemon_threads})")
