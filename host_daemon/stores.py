"""Backing stores: where the pages of an array live when they are not in the GPU cache.

A store is a byte range (a file, or a buffer in RAM); an opened array is a window of it at a
byte offset. The daemon reads (and, for dirty pages written back on eviction, writes) a store
through one row of a table of integers (kind, file descriptors, buffer address, offset, size), so
its ``njit`` loop needs no Python objects. The Runtime's ``flush`` writes the remaining dirty
pages on the host with :meth:`Store.write_bytes` and makes them durable with :meth:`Store.sync`.

Writable stores: a :class:`FileStore` or :class:`MmapStore` made with ``writable=True`` (what
``open_array(path, mode="r+")`` does), and any :class:`MemoryStore` over a writeable numpy array
(its writes land in that array).

- :class:`FileStore`: ``pread`` on the file; pages whose offset and length are 4 KiB-aligned are
  read with ``O_DIRECT`` (no OS page cache) when the file system allows it.
- :class:`MemoryStore`: a numpy array in RAM. With ``zero_copy=True`` (the default) the Runtime
  keeps it in pinned, device-mapped memory, and the daemon serves a page by telling the GPU
  where it is, with no CPU copy; otherwise the daemon copies it into a staging buffer.
- :class:`MmapStore`: the file mapped with ``mmap``; the OS pages it in on first touch.
- :class:`FaultyStore`: a memory store that fails on chosen pages (I/O error, short read, slow
  read, a daemon thread that dies; and the same for writes), for testing what the runtime does
  then.
"""
import mmap
import os

import numpy as np
from numba import njit

from host_daemon.sync import load_word
from kernels import layout as L
from kernels.errors import ConfigError

# Columns of the daemon's store table (host-only, so defined here rather than in gids.layout).
T_KIND = 0
T_FD = 1          # buffered file descriptor, or -1
T_FD_DIRECT = 2   # O_DIRECT file descriptor, or -1
T_ADDRESS = 3     # address of the first byte of the store in host memory, or 0
T_OFFSET = 4      # byte offset of the array's first element in the store
T_NBYTES = 5      # bytes in the array
T_FAULTS = 6      # FaultyStore: address of its int64 [pages, 2] fault table (code, argument)
T_N_FILES = 7     # files the store's bytes lie in: 1 (a file), N (striped over N), 0 (RAM)
T_STRIPE_UNIT = 8  # striped store: bytes per stripe unit (a multiple of the page size), else 0
T_FILES = 9       # striped store: address of its int64 [N, 2] table of (fd, fd_direct), else 0
T_FILE_SLOT = 10  # row of the store's first file in the daemon's per-file I/O counters, or -1
T_MAP = 11        # mapped FileStore: address of its read-only mmap of the file, else 0
T_MAP_BYTES = 12  # and the mapping's length
T_MAP_CHECKED = 13   # address of its int64 per MAP_CHUNK: when mincore last looked (ns), 0 never
T_MAP_RESIDENT = 14  # address of mincore's answer: a byte per OS page of the file (bit 0)
T_COLUMNS = 15

#: A mapped FileStore asks ``mincore`` which pages are resident a chunk of this many bytes at a
#: time, and trusts a chunk's answer for MAP_TRUST_NS (a page evicted meanwhile is read from the
#: mapping anyway: the copy then waits for the disk, see FileStore's notes). One mincore of a
#: chunk walks its 4,096 pages in the page cache (~0.4 ms on a 2-core VM): asked every 10 ms for
#: each chunk of a 4 GiB file, that was more CPU than the copies; asked every second, a tenth of
#: one core.
MAP_CHUNK = 16 << 20
MAP_TRUST_NS = 1_000_000_000
#: The OS page: mincore's unit.
OS_PAGE = mmap.PAGESIZE

# Columns of the daemon's per-file I/O counters (one row per store file; see file_io_counts).
F_READS = 0
F_READ_BYTES = 1
F_READ_NS = 2
F_WRITES = 3
F_WRITE_BYTES = 4
F_WRITE_NS = 5
F_COLUMNS = 6
#: Rows of the per-file counters: files of all stores of one Runtime together.
MAX_FILES = 1024

# Fault codes of a FaultyStore page.
FAULT_NONE = 0
FAULT_EIO = 1      # the read fails (as pread returning -1 with EIO)
FAULT_SHORT = 2    # half the page is returned (as a file that shrank)
FAULT_SLOW = 3     # the read takes `argument` microseconds longer
FAULT_CRASH = 4    # the daemon thread serving the page dies (its loop returns)
FAULT_WRITE_EIO = 5    # reads succeed, writes of the page fail (EIO), on the device and the host
FAULT_WRITE_SLOW = 6   # reads succeed, a write takes `argument` microseconds longer
FAULT_WRITE_CRASH = 7  # reads succeed, the daemon thread writing the page back dies

#: O_DIRECT needs the offset, the length and the buffer aligned to the device's logical block;
#: 4 KiB is the safe choice on every device.
DIRECT_ALIGN = 4096


def stripe_location(byte, unit, n_files):
    """Where byte ``byte`` of a store striped over ``n_files`` files in units of ``unit`` bytes
    lies: (file index, byte offset in that file). Unit ``u = byte // unit`` is in file
    ``u % n_files`` at offset ``(u // n_files) * unit`` (RAID 0's layout)."""
    u = byte // unit
    return u % n_files, (u // n_files) * unit + byte % unit


_stripe_location = njit(nogil=True, cache=True)(stripe_location)


@njit(nogil=True, cache=True)
def page_location(table, array_id, page, page_size):
    """Where page ``page`` of array ``array_id`` lies: ``(file, fd, fd_direct, offset)``.

    ``file`` is the index of the store file holding the page (0 unless striped), ``fd`` and
    ``fd_direct`` its buffered and O_DIRECT descriptors (-1 where there is none; -1, -1 for a
    store in RAM), ``offset`` the page's first byte in that file (in RAM: from the store's
    address, ``T_ADDRESS``). Every store kind, striped or not; the caller checks that the page
    is in the array. A page never straddles two stripe files: the Runtime opens striped arrays
    at a page-aligned offset and the unit is a multiple of the page size. Allocates nothing
    (the NVMe controller's loop, compiled without reference counting, calls it).
    """
    byte = table[array_id, T_OFFSET] + page * page_size
    n_files = table[array_id, T_N_FILES]
    if n_files <= 1:
        return 0, table[array_id, T_FD], table[array_id, T_FD_DIRECT], byte
    file, offset = _stripe_location(byte, table[array_id, T_STRIPE_UNIT], n_files)
    at = table[array_id, T_FILES] + 16 * file
    return file, load_word(at), load_word(at + 8), offset


@njit(nogil=True, cache=True)
def count_file_io(counts, table, array_id, file, write, nbytes, ns):
    """Count one I/O of ``nbytes`` that took ``ns`` on store file ``file`` of array ``array_id``
    in a thread's per-file counters (``counts``: int64 [MAX_FILES, F_COLUMNS]); nothing for a
    store without a counter row (``T_FILE_SLOT`` -1: RAM)."""
    slot = table[array_id, T_FILE_SLOT]
    if slot < 0 or slot + file >= counts.shape[0]:
        return
    row = slot + file
    if write:
        counts[row, F_WRITES] += 1
        counts[row, F_WRITE_BYTES] += nbytes
        counts[row, F_WRITE_NS] += ns
    else:
        counts[row, F_READS] += 1
        counts[row, F_READ_BYTES] += nbytes
        counts[row, F_READ_NS] += ns


class Store:
    """A byte range the daemon can read pages from. Subclasses fill :meth:`table_row`."""

    kind = None
    #: Human-readable origin, used in error messages ("file /data/x.bin", "memory store").
    name = "store"
    #: Whether pages may be written (arrays opened with ``mode="r+"`` need a writable store).
    writable = False

    @property
    def nbytes(self):
        raise NotImplementedError

    #: Files the store's bytes lie in (0: RAM); the daemon keeps I/O counters per file.
    n_files = 0

    def table_row(self, offset, nbytes, zero_copy_address=0):
        """The daemon's table row (T_COLUMNS integers) for an array of ``nbytes`` at byte
        ``offset`` of the store (``T_FILE_SLOT`` -1: the Runtime sets it)."""
        raise NotImplementedError

    def _row(self, offset, nbytes, fd=-1, fd_direct=-1, address=0, faults=0, unit=0, files=0,
             mapping=(0, 0, 0, 0)):
        row = [0] * T_COLUMNS
        row[T_MAP], row[T_MAP_BYTES], row[T_MAP_CHECKED], row[T_MAP_RESIDENT] = mapping
        row[T_KIND], row[T_FD], row[T_FD_DIRECT], row[T_ADDRESS] = self.kind, fd, fd_direct, address
        row[T_OFFSET], row[T_NBYTES], row[T_FAULTS] = offset, nbytes, faults
        row[T_N_FILES], row[T_STRIPE_UNIT], row[T_FILES] = self.n_files, unit, files
        row[T_FILE_SLOT] = -1
        return tuple(row)

    def file_of(self, offset):
        """The store file holding byte ``offset``: (its index, a name for messages, its path or
        None); for a store of one file or none, 0 and the store's own name and path."""
        return 0, self.name, getattr(self, "path", None)

    def file_names(self):
        """The paths of the store's ``n_files`` files, in file order (none for RAM)."""
        return []

    def read_bytes(self, offset, nbytes):
        """Read bytes on the host in Python (for error reports and tests; not the data path)."""
        raise NotImplementedError

    def write_bytes(self, offset, data):
        """Write ``data`` (bytes-like) at byte ``offset`` (the host side of ``Runtime.flush``).

        Raises OSError if the store cannot take it."""
        raise OSError(f"gids: {self.name} is read-only")

    def sync(self):
        """Make every byte written so far durable (``fsync``, ``msync``); no-op for RAM."""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileStore(Store):
    """A file read with ``pread``.

    Parameters
    ----------
    path : str or os.PathLike
        The file. It must exist; its size is checked against each array opened on it.
    direct : bool, default True
        Read 4 KiB-aligned pages with ``O_DIRECT``, so that a run measures the device and not
        the OS page cache. Where the file system refuses ``O_DIRECT`` (tmpfs, some overlays),
        every page is read through the page cache instead; ``direct_enabled`` tells which.
    writable : bool, default False
        Open the file for writing too (``O_RDWR``); needed by arrays opened with ``mode="r+"``.
    mapped : bool, optional
        Also map the file read-only, so that the io_uring engine serves a page that is in the
        page cache with a ``memcpy`` from the mapping instead of a read (``mincore`` says which
        pages are resident, per MAP_CHUNK, trusted for MAP_TRUST_NS); other pages are read
        through the ring. Default: True for a file without an ``O_DIRECT`` descriptor
        (``direct=False``, or refused), False otherwise. ``mapped_enabled`` says whether it is.
        The threads engine, and stripe files (a :class:`StripedStore`), always read.

    Notes
    -----
    Partial pages at the end of an array, and pages whose file offset is not 4 KiB-aligned
    (an array opened at an unaligned ``offset``), are read through the page cache.
    A mapped store has two caveats of the mapping: a file truncated below a mapped page while
    gids reads it makes the copy fault with SIGBUS (the process dies, where a read would say
    "short read"); and a page evicted after ``mincore`` saw it resident is read from the disk
    by the copy's page fault, which blocks the daemon thread for that read (its other requests
    wait; the ring keeps its I/Os in flight).
    Writes always go through the page cache (``pwrite`` on the buffered descriptor): no
    alignment rules, and Linux writes the cached range back before an ``O_DIRECT`` read of it,
    so a direct read never sees older bytes; but that read then waits for a disk write. For
    write-heavy work on a file, ``direct=False`` (reads from the page cache too) is faster until
    ``flush``. :meth:`sync` (``fsync``) makes the writes durable.
    """

    kind = L.STORE_KIND_FILE
    n_files = 1

    def __init__(self, path, direct=True, writable=False, mapped=None):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"gids: no such file: {self.path!r}")
        if not os.path.isfile(self.path):
            raise ValueError(f"gids: not a regular file: {self.path!r}")
        self.name = f"file {self.path}"
        self.writable = bool(writable)
        self._fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
        self._fd_direct = -1
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self._fd_direct = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
            except OSError:
                self._fd_direct = -1
        self._map = self._map_view = None
        self._mapping = (0, 0, 0, 0)
        if mapped is None:
            mapped = self._fd_direct < 0
        if mapped:
            self._open_map()

    def _open_map(self):
        """Map the file and make mincore's tables (an empty file, or a mapping refused, leaves
        the store unmapped)."""
        size = self.nbytes
        if size == 0:
            return
        try:
            self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            return
        if hasattr(self._map, "madvise"):   # a copy that faults reads one page, not a window
            self._map.madvise(mmap.MADV_RANDOM)
        self._map_view = np.frombuffer(self._map, dtype=np.uint8)
        self._checked = np.zeros(-(-size // MAP_CHUNK), dtype=np.int64)
        pages = -(-size // OS_PAGE)
        self._resident = np.zeros(-(-pages // 8) * 8, dtype=np.uint8)   # read 8 at a time
        self._mapping = (self._map_view.ctypes.data, size, self._checked.ctypes.data,
                         self._resident.ctypes.data)

    @property
    def mapped_enabled(self):
        """Whether resident pages are copied from a mapping of the file (see ``mapped``)."""
        return self._map is not None

    def fileno(self):
        """The buffered descriptor (what writes and fsync use)."""
        return self._fd

    @property
    def direct_enabled(self):
        return self._fd_direct >= 0

    def file_names(self):
        return [self.path]

    @property
    def nbytes(self):
        return os.fstat(self._fd).st_size

    def table_row(self, offset, nbytes, zero_copy_address=0):
        return self._row(offset, nbytes, fd=self._fd, fd_direct=self._fd_direct,
                         mapping=self._mapping)

    def read_bytes(self, offset, nbytes):
        return os.pread(self._fd, nbytes, offset)

    def write_bytes(self, offset, data):
        if not self.writable:
            raise OSError(f"gids: {self.name} was opened read-only")
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            n = os.pwrite(self._fd, view[done:], offset + done)
            if n <= 0:
                raise OSError(f"gids: short write to {self.name} at byte {offset + done}")
            done += n

    def sync(self):
        if self.writable and self._fd >= 0:
            os.fsync(self._fd)

    def close(self):
        if self._map is not None:
            self._map_view = None
            self._mapping = (0, 0, 0, 0)
            try:
                self._map.close()
            except BufferError:   # a view is still alive; the mapping goes with it
                pass
            self._map = None
        for fd in (self._fd, self._fd_direct):
            if fd >= 0:
                os.close(fd)
        self._fd = self._fd_direct = -1


def stripe_sizes(total, unit, n_files):
    """The sizes of the ``n_files`` files a store of ``total`` bytes striped in units of
    ``unit`` bytes is made of (the first files get the extra whole units, the next the rest)."""
    units, rest = divmod(total, unit)
    sizes = [(units // n_files + (f < units % n_files)) * unit for f in range(n_files)]
    sizes[units % n_files] += rest
    return sizes


class StripedStore(Store):
    """One byte range striped over several files, one per drive (RAID 0, GIDS's list of SSDs).

    Stripe unit ``u`` (bytes ``u * unit`` to ``(u + 1) * unit - 1`` of the store) is in file
    ``u % N`` at offset ``(u // N) * unit``: consecutive units go to consecutive files, so
    that pages spread evenly over the drives. Each file is read as a :class:`FileStore` reads
    its one file (``pread``, ``O_DIRECT`` for aligned pages where allowed) and written the same
    way; :meth:`sync` makes every file durable (``fsync``). ``gids stripe`` splits an existing
    file into such files.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The stripe files, in stripe order; distinct files, each as long as
        :func:`stripe_sizes` says for the store's size (their total).
    unit : int
        Bytes per stripe unit; arrays on the store need a Runtime whose page size divides it.
    direct, writable : bool
        As for :class:`FileStore`.

    Raises
    ------
    ConfigError
        No paths, a unit < 1, the same file twice (same device and inode), or files whose sizes
        are not those of one striped byte range.
    FileNotFoundError
        A path does not exist.
    """

    kind = L.STORE_KIND_FILE

    def __init__(self, paths, unit, direct=True, writable=False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ConfigError("gids: a striped store needs at least one file, got an empty list")
        unit = int(unit)
        if unit < 1:
            raise ConfigError(f"gids: the stripe unit must be >= 1 byte, got {unit}")
        self.unit = unit
        seen = {}
        for path in self.paths:
            if not os.path.exists(path):
                raise FileNotFoundError(f"gids: no such file: {path!r}")
            if not os.path.isfile(path):
                raise ConfigError(f"gids: not a regular file: {path!r}")
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
            if key in seen:
                raise ConfigError(f"gids: stripe files {seen[key]!r} and {path!r} are the same "
                                  "file; each stripe needs a file of its own")
            seen[key] = path
        sizes = [os.path.getsize(p) for p in self.paths]
        expected = stripe_sizes(sum(sizes), unit, len(self.paths))
        if sizes != expected:
            have = ", ".join(f"{p!r} has {n}" for p, n in zip(self.paths, sizes))
            raise ConfigError(
                f"gids: the stripe files' sizes do not fit one byte range striped over "
                f"{len(sizes)} files in units of {unit} bytes: {have} (for {sum(sizes)} bytes in "
                f"all they would have {', '.join(map(str, expected))}); a stripe file of the "
                "wrong size, or the wrong unit")
        self._nbytes = sum(sizes)
        self.n_files = len(self.paths)
        self.name = f"striped store of {self.n_files} files ({', '.join(self.paths)})"
        self.path = self.paths[0] if self.n_files == 1 else None
        self.writable = bool(writable)
        self.files = []
        # (fd, fd_direct) per file: the table the daemon reads through T_FILES.
        self.fds = np.full((self.n_files, 2), -1, dtype=np.int64)
        try:
            for f, path in enumerate(self.paths):
                self.files.append(FileStore(path, direct=direct, writable=writable,
                                            mapped=False))
                self.fds[f] = (self.files[f]._fd, self.files[f]._fd_direct)
        except BaseException:
            self.close()
            raise

    @property
    def direct_enabled(self):
        return all(f.direct_enabled for f in self.files)

    @property
    def nbytes(self):
        return self._nbytes

    def table_row(self, offset, nbytes, zero_copy_address=0):
        return self._row(offset, nbytes, fd=int(self.fds[0, 0]), fd_direct=int(self.fds[0, 1]),
                         unit=self.unit, files=self.fds.ctypes.data)

    def file_of(self, offset):
        f, at = stripe_location(offset, self.unit, self.n_files)
        return (f, f"stripe file {self.paths[f]} (file {f} of {self.n_files}, at its byte {at})",
                self.paths[f])

    def file_names(self):
        return list(self.paths)

    def _pieces(self, offset, nbytes):
        """(file, file offset, start in the caller's buffer, length) of each stripe unit's part
        of bytes ``offset`` to ``offset + nbytes - 1``."""
        done = 0
        while done < nbytes:
            f, at = stripe_location(offset + done, self.unit, self.n_files)
            n = min(nbytes - done, self.unit - (offset + done) % self.unit)
            yield f, at, done, n
            done += n

    def read_bytes(self, offset, nbytes):
        nbytes = max(0, min(nbytes, self._nbytes - offset))
        parts = []
        for f, at, _, n in self._pieces(offset, nbytes):
            got = self.files[f].read_bytes(at, n)
            parts.append(got)
            if len(got) < n:
                break
        return b"".join(parts)

    def write_bytes(self, offset, data):
        if not self.writable:
            raise OSError(f"gids: {self.name} was opened read-only")
        view = memoryview(data).cast("B")
        if offset + len(view) > self._nbytes:
            raise OSError(f"gids: write past the end of {self.name}")
        for f, at, start, n in self._pieces(offset, len(view)):
            self.files[f].write_bytes(at, view[start:start + n])

    def sync(self):
        for f in self.files:
            f.sync()

    def close(self):
        for f in self.files:
            f.close()
        self.files = []
        self.fds[:] = -1


def write_stripes(src, paths, unit, progress=None, chunk=64 << 20):
    """Split file ``src`` into the stripe files ``paths`` of a :class:`StripedStore` with
    stripe unit ``unit`` (each file created or truncated, written, then made durable).

    Reads ``src`` in chunks of about ``chunk`` bytes (whole rows of ``len(paths)`` units);
    ``progress(done, total)`` is called after each. Returns the files' sizes."""
    n = len(paths)
    row = unit * n
    step = max(1, chunk // row) * row
    total = os.path.getsize(src)
    outs = []
    try:
        outs = [open(p, "wb") for p in paths]
        with open(src, "rb") as f:
            done = 0
            while done < total:
                buf = f.read(min(step, total - done))
                if not buf:
                    raise OSError(f"gids: {src!r} shrank while it was read")
                whole = len(buf) // row * row
                if whole:   # rows of n units: unit i of each row goes to file i
                    units = np.frombuffer(buf, dtype=np.uint8, count=whole).reshape(-1, n, unit)
                    for i, out in enumerate(outs):
                        out.write(units[:, i].tobytes())
                # What is left of the file's last row (steps are whole rows): unit k, file k.
                for k in range(0, len(buf) - whole, unit):
                    outs[k // unit].write(buf[whole + k:whole + k + unit])
                done += len(buf)
                if progress is not None:
                    progress(done, total)
        for out in outs:
            out.flush()
            os.fsync(out.fileno())
    finally:
        for out in outs:
            out.close()
    return [os.path.getsize(p) for p in paths]


class MemoryStore(Store):
    """A numpy array (any dtype, C-contiguous) whose bytes stand for a file, kept in RAM.

    Parameters
    ----------
    data : numpy.ndarray or bytes
        The bytes. Arrays opened on the store view them at a byte offset, as they would a file.
    zero_copy : bool, default True
        Keep the bytes in pinned, device-mapped memory (the Runtime copies them there once when
        an array is opened) and serve a miss by handing the GPU the page's address: the daemon
        thread does no copy and the GPU pulls the page over PCIe. ``False`` makes the daemon
        copy each page into a staging buffer, as it must for a file.
    """

    def __init__(self, data, zero_copy=True):
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = np.frombuffer(data, dtype=np.uint8)
        if not isinstance(data, np.ndarray):
            raise TypeError("gids: MemoryStore takes a numpy array or bytes")
        self.data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        # Writes land in the caller's array when it is contiguous (a view), else in our copy.
        self.writable = bool(self.data.flags.writeable)
        self.zero_copy = bool(zero_copy)
        self.kind = L.STORE_KIND_ZERO_COPY if zero_copy else L.STORE_KIND_MEMORY
        self.name = "memory store"

    @property
    def nbytes(self):
        return self.data.nbytes

    def table_row(self, offset, nbytes, zero_copy_address=0):
        if self.zero_copy:
            return self._row(offset, nbytes, address=zero_copy_address)
        return self._row(offset, nbytes, address=self.data.ctypes.data)

    def read_bytes(self, offset, nbytes):
        return self.data[offset:offset + nbytes].tobytes()

    def write_bytes(self, offset, data):
        if not self.writable:
            raise OSError(f"gids: {self.name} is a read-only array")
        data = np.frombuffer(data, dtype=np.uint8)
        self.data[offset:offset + data.size] = data


class MmapStore(Store):
    """A file mapped into memory with ``mmap``; the daemon copies pages out of the mapping.

    The first touch of a page faults it in from the file (through the OS page cache), so cold
    misses cost a fault each; warm ones a ``memcpy``.

    Parameters
    ----------
    path : str or os.PathLike
        The file (not empty).
    writable : bool, default False
        Map it shared and writable (what ``open_array(path, mode="r+", storage="mmap")``
        does): write-backs are ``memcpy`` into the mapping, and :meth:`sync` is ``msync``.
    """

    kind = L.STORE_KIND_MEMORY

    def __init__(self, path, writable=False):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"gids: no such file: {self.path!r}")
        self.name = f"mmap of file {self.path}"
        size = os.path.getsize(self.path)
        if size == 0:
            raise ValueError(f"gids: cannot map an empty file: {self.path!r}")
        self.writable = bool(writable)
        with open(self.path, "r+b" if self.writable else "rb") as f:
            self._mmap = mmap.mmap(f.fileno(), size,
                                   access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ)
        self.data = np.frombuffer(self._mmap, dtype=np.uint8)

    @property
    def nbytes(self):
        return self.data.nbytes

    def table_row(self, offset, nbytes, zero_copy_address=0):
        return self._row(offset, nbytes, address=self.data.ctypes.data)

    def read_bytes(self, offset, nbytes):
        return self.data[offset:offset + nbytes].tobytes()

    def write_bytes(self, offset, data):
        if not self.writable:
            raise OSError(f"gids: {self.name} was opened read-only")
        self._mmap[offset:offset + len(data)] = bytes(data)

    def sync(self):
        if self.writable and self._mmap is not None:
            self._mmap.flush()

    def close(self):
        if self._mmap is not None:
            self.data = None
            try:
                self._mmap.close()
            except BufferError:   # a view still exists; the mapping goes with it
                pass
            self._mmap = None


class FaultyStore(MemoryStore):
    """A memory store that fails on chosen pages: for testing what the runtime does then.

    Parameters
    ----------
    data : numpy.ndarray or bytes
        The bytes, as for :class:`MemoryStore` (served by copying, never zero-copy).
    page_size : int
        The page size the faults are counted in; open arrays on this store at offset 0 in a
        Runtime with this page size.
    faults : dict
        Page index -> a read fault, ``"eio"``, ``"short"``, ``("slow", seconds)`` or ``"crash"``
        (the daemon thread that serves the page dies); or a write fault (reads of the page
        succeed): ``"write_eio"`` (its write-back fails, on eviction or in ``flush``),
        ``("write_slow", seconds)`` or ``"write_crash"``.
    """

    _CODES = {"eio": FAULT_EIO, "short": FAULT_SHORT, "crash": FAULT_CRASH,
              "write_eio": FAULT_WRITE_EIO, "write_crash": FAULT_WRITE_CRASH,
              "slow": FAULT_SLOW, "write_slow": FAULT_WRITE_SLOW}   # the last two: (name, s)

    def __init__(self, data, page_size, faults):
        super().__init__(data, zero_copy=False)
        self.kind = L.STORE_KIND_FAULTY
        self.name = "faulty memory store"
        self.page_size = int(page_size)
        n_pages = -(-self.nbytes // self.page_size)
        self.faults = np.zeros((n_pages, 2), dtype=np.int64)
        for page, fault in faults.items():
            if not 0 <= page < n_pages:
                raise ValueError(f"gids: fault on page {page}, but the store has {n_pages} pages")
            if isinstance(fault, tuple) and fault[0] in ("slow", "write_slow"):
                self.faults[page] = (self._CODES[fault[0]], int(fault[1] * 1e6))
            elif fault in self._CODES and fault not in ("slow", "write_slow"):
                self.faults[page] = (self._CODES[fault], 0)
            else:
                raise ValueError(f"gids: unknown fault {fault!r}")

    def table_row(self, offset, nbytes, zero_copy_address=0):
        if offset != 0:
            raise ValueError("gids: open arrays on a FaultyStore at offset 0")
        return self._row(offset, nbytes, address=self.data.ctypes.data,
                         faults=self.faults.ctypes.data)

    def read_bytes(self, offset, nbytes):
        page = offset // self.page_size
        if self.faults[page, 0] == FAULT_EIO:
            raise OSError(5, "Input/output error (injected)")
        if self.faults[page, 0] == FAULT_SHORT:
            return super().read_bytes(offset, nbytes // 2)
        return super().read_bytes(offset, nbytes)

    def write_bytes(self, offset, data):
        first, last = offset // self.page_size, (offset + len(data) - 1) // self.page_size
        if (self.faults[first:last + 1, 0] == FAULT_WRITE_EIO).any():
            raise OSError(5, "Input/output error (injected)")
        super().write_bytes(offset, data)


#: What ``storage=`` may name: how a file is read (see :func:`open_file_store`).
STORAGE_KINDS = ("file", "mmap", "memory")


def open_file_store(path, storage="file", *, direct=True, writable=False):
    """The store that reads file ``path`` the way ``storage`` names.

    One place for the choice, so that gids and the baselines it is compared with read a file the
    same way: ``"file"`` is a :class:`FileStore` (``pread``; ``O_DIRECT`` for aligned pages when
    ``direct``), ``"mmap"`` a :class:`MmapStore`, ``"memory"`` a :class:`MemoryStore` holding a
    copy of the whole file in RAM (read once, here).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ConfigError
        ``storage`` is not one of :data:`STORAGE_KINDS`.
    """
    if storage == "file":
        return FileStore(path, direct=direct, writable=writable)
    if storage == "mmap":
        return MmapStore(path, writable=writable)
    if storage == "memory":
        if not os.path.exists(path):
            raise FileNotFoundError(f"gids: no such file: {os.fspath(path)!r}")
        return MemoryStore(np.fromfile(path, dtype=np.uint8))
    raise ConfigError(f"gids: storage must be one of {', '.join(map(repr, STORAGE_KINDS))}, "
                      f"got {storage!r}")
