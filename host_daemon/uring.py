"""io_uring through its kernel ABI: a ring per daemon thread, driven from ``njit`` code.

A :class:`Ring` is set up in Python (``io_uring_setup`` through libc's ``syscall`` with ctypes,
then the three ``mmap`` regions the kernel offers: the SQ ring, the CQ ring and the SQE array)
and handed to ``njit(nogil=True)`` code as a :data:`RingArgs` tuple of numpy views of those
regions. The ``njit`` side fills SQEs, publishes the SQ tail with a release store, calls
``io_uring_enter`` through libc's ``syscall`` (declared by symbol name, so the daemon's loop is
still cached on disk), and reads CQEs after an acquire load of the CQ tail: the kernel's side of
the protocol, with the loads and stores of :mod:`host_daemon.sync`. Every ring offset comes from
the ``io_sqring_offsets`` / ``io_cqring_offsets`` the kernel returns in ``io_uring_params``;
only the fixed-size records (the 64-byte SQE, the 16-byte CQE, the 120-byte params) have their
layout written here (liburing's ``include/liburing/io_uring.h``; little-endian hosts).

No submission-queue polling thread and no interrupts of our own: a daemon thread submits a batch
with one ``io_uring_enter`` and later reaps whatever CQEs have arrived, without waiting for any
(the thread never blocks on one I/O); when it has nothing else to do, or its ring is full,
:func:`ring_submit_wait` submits and sleeps in the kernel until a CQE arrives, with a bound
(``IORING_ENTER_EXT_ARG``'s timeout) instead of spinning. Host-side work such as ``flush`` waits
with a bound too (:func:`ring_rw_all`).

Rings are set up with ``IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG`` where the kernel
has them (5.19; plain setup where it says EINVAL, :attr:`Ring.setup_flags` says which): the
kernel then does not interrupt the thread to post completions, but flags the SQ ring
(``IORING_SQ_TASKRUN``) and posts them at the thread's next ``io_uring_enter``, which
:func:`ring_ready` makes when it sees the flag and no CQE. A daemon thread's ring is its own
(``Ring(entries, owned=True)``, Linux 6.1): ``SINGLE_ISSUER | DEFER_TASKRUN`` as well, so that
completions wait on the ring itself, with no task work queued to the thread, until it enters
the kernel for them; the thread that will submit enables the ring (:meth:`Ring.enable`).

A ring may register buffers (:meth:`Ring.register_buffers`, ``IORING_REGISTER_BUFFERS``): its
READ_FIXED / WRITE_FIXED SQEs (:func:`ring_prep_rw`) then name a buffer the kernel pinned
once, instead of pinning the pages per I/O.

The SQ array (the kernel's indirection from SQ ring position to SQE index) is set to the
identity once, so an SQE's index is its ring position.
"""
import ctypes
import errno
import mmap
import os
import sys
import time
from collections import namedtuple

import numpy as np
from numba import njit, types

from host_daemon.sync import load_acquire, load_word, private_array, store_release

# System call numbers: io_uring's were given the same number on every architecture
# (asm-generic and x86-64 alike), 425 to 427.
SYS_IO_URING_SETUP = 425
SYS_IO_URING_ENTER = 426
SYS_IO_URING_REGISTER = 427
#: io_uring_register opcodes used here, and the kernel's bound on one registered buffer.
IORING_REGISTER_BUFFERS = 0
IORING_UNREGISTER_BUFFERS = 1
MAX_FIXED_BUFFER_BYTES = 1 << 30
MAX_FIXED_BUFFERS = 1 << 14

# mmap offsets of the three regions, and the feature bit that makes SQ and CQ rings one region.
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_FEAT_SINGLE_MMAP = 1 << 0
IORING_FEAT_EXT_ARG = 1 << 8
IORING_ENTER_GETEVENTS = 1 << 0
IORING_ENTER_EXT_ARG = 1 << 3
IORING_SETUP_R_DISABLED = 1 << 6
IORING_SETUP_COOP_TASKRUN = 1 << 8
IORING_SETUP_TASKRUN_FLAG = 1 << 9
IORING_SETUP_SINGLE_ISSUER = 1 << 12
IORING_SETUP_DEFER_TASKRUN = 1 << 13
IORING_REGISTER_ENABLE_RINGS = 12
#: SQ ring flag: completions wait for the owner's next io_uring_enter (COOP_TASKRUN).
IORING_SQ_TASKRUN = 1 << 3
ETIME = 62

# Opcodes used here.
IORING_OP_NOP = 0
IORING_OP_FSYNC = 3
IORING_OP_READ_FIXED = 4
IORING_OP_WRITE_FIXED = 5
IORING_OP_READ = 22
IORING_OP_WRITE = 23
IORING_FSYNC_DATASYNC = 1 << 0

_SQ_OFFSETS = np.dtype([("head", "<u4"), ("tail", "<u4"), ("ring_mask", "<u4"),
                        ("ring_entries", "<u4"), ("flags", "<u4"), ("dropped", "<u4"),
                        ("array", "<u4"), ("resv1", "<u4"), ("user_addr", "<u8")])
_CQ_OFFSETS = np.dtype([("head", "<u4"), ("tail", "<u4"), ("ring_mask", "<u4"),
                        ("ring_entries", "<u4"), ("overflow", "<u4"), ("cqes", "<u4"),
                        ("flags", "<u4"), ("resv1", "<u4"), ("user_addr", "<u8")])
#: ``struct io_uring_params`` (120 bytes).
PARAMS_DTYPE = np.dtype([("sq_entries", "<u4"), ("cq_entries", "<u4"), ("flags", "<u4"),
                         ("sq_thread_cpu", "<u4"), ("sq_thread_idle", "<u4"),
                         ("features", "<u4"), ("wq_fd", "<u4"), ("resv", "<u4", 3),
                         ("sq_off", _SQ_OFFSETS), ("cq_off", _CQ_OFFSETS)])
assert PARAMS_DTYPE.itemsize == 120

#: ``struct io_uring_sqe`` as eight int64 words (64 bytes): word 0 holds opcode (byte 0), flags
#: (byte 1), ioprio (bytes 2-3) and fd (bytes 4-7); word 1 the file offset; word 2 the buffer
#: address; word 3 the length (low 4 bytes) and the op's flags (high 4: rw_flags, fsync_flags);
#: word 4 user_data; word 5 buf_index (low 2 bytes: the registered buffer of a READ_FIXED or
#: WRITE_FIXED); the rest zero.
SQE_WORDS = 8
#: ``struct io_uring_cqe`` as two int64 words (16 bytes): user_data, then res (low 4 bytes,
#: signed) and flags (high 4).
CQE_WORDS = 2

# Columns of RingArgs.idx: indices (in 4-byte words) of the ring fields in the mapped regions,
# and the ring's constants.
I_FD = 0
I_SQ_HEAD = 1
I_SQ_TAIL = 2
I_SQ_MASK = 3
I_SQ_ENTRIES = 4
I_CQ_HEAD = 5
I_CQ_TAIL = 6
I_CQ_MASK = 7
I_CQ_ENTRIES = 8
I_SQ_FLAGS = 9     # the SQ ring's flags word
I_FEATURES = 10    # io_uring_params.features
I_SETUP_FLAGS = 11  # the flags the ring was set up with
I_COLUMNS = 12

# Columns of RingArgs.state (written by the one thread that owns the ring).
S_TAIL = 0        # SQEs filled (the SQ tail we will publish)
S_UNSUBMITTED = 1  # of which not yet taken by io_uring_enter
S_IN_FLIGHT = 2   # submitted, CQE not yet reaped
S_SUBMITS = 3     # io_uring_enter calls that submitted (a counter)
S_SUBMITTED = 4   # SQEs they took (a counter)
S_PEAK_IN_FLIGHT = 5  # the most requests in flight at once
S_WAITS = 6       # io_uring_enter calls that waited for a CQE (a counter)
S_ERROR = 7       # the first hard io_uring_enter error (-errno), 0 while the ring works
S_FIXED = 8       # 1 once buffers are registered (Ring.register_buffers): fixed ops may be used
S_COLUMNS = 9

#: ``struct io_uring_getevents_arg`` (sigmask, sigmask_sz + pad, ts pointer) then the
#: ``__kernel_timespec`` it points to (seconds, nanoseconds), as int64 words in RingArgs.wait.
W_TS_POINTER = 2
W_SECONDS = 3
W_NANOSECONDS = 4
W_WORDS = 5
GETEVENTS_ARG_BYTES = 24

#: What ``njit`` code gets of a ring: ``on`` (0: a stand-in of the same types, no ring), the SQ
#: and CQ ring regions as uint32 words, the SQEs and the CQEs as int64 words (the CQEs are a
#: view of the CQ region from ``cq_off.cqes``), ``idx`` (I_* columns), ``state`` (S_*) and
#: ``wait`` (W_*: the timeout argument of :func:`ring_submit_wait`).
RingArgs = namedtuple("RingArgs", ["on", "sq", "cq", "sqes", "cqes", "idx", "state", "wait"])


def _wait_words():
    wait = private_array(W_WORDS)
    wait[W_TS_POINTER] = wait.ctypes.data + W_SECONDS * 8
    return wait

#: io_uring is Linux's; elsewhere the ring functions compile to stand-ins (no such symbols to
#: link) and probe() says why there is no ring.
LINUX = sys.platform.startswith("linux")
if LINUX:
    _syscall = types.ExternalFunction("syscall", types.intp(types.intp, types.intp, types.intp,
                                                            types.intp, types.intp, types.intp,
                                                            types.intp))
    _errno_location = types.ExternalFunction("__errno_location", types.uintp())
else:
    @njit(nogil=True, cache=True)
    def _syscall(number, a, b, c, d, e, f):
        return -1
_usleep = types.ExternalFunction("usleep", types.int32(types.uint32))
_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.uintp))


class UringUnavailable(OSError):
    """io_uring cannot be set up here (no kernel support, forbidden by seccomp or sysctl)."""


_libc = ctypes.CDLL(None, use_errno=True)
if hasattr(_libc, "syscall"):
    _libc.syscall.restype = ctypes.c_long


def io_uring_setup(entries, params):
    """The ``io_uring_setup`` system call: a ring fd, or ``-errno``. ``params``: one record of
    :data:`PARAMS_DTYPE`, filled by the kernel. (A function of its own so that tests can make
    it fail.)"""
    r = _libc.syscall(ctypes.c_long(SYS_IO_URING_SETUP), ctypes.c_long(entries),
                      ctypes.c_void_p(params.ctypes.data))
    return r if r >= 0 else -ctypes.get_errno()


def io_uring_register(fd, opcode, arg, nr_args):
    """The ``io_uring_register`` system call: its result, or ``-errno``. ``arg``: an address.
    (A function of its own so that tests can make it fail.)"""
    r = _libc.syscall(ctypes.c_long(SYS_IO_URING_REGISTER), ctypes.c_long(fd),
                      ctypes.c_long(opcode), ctypes.c_void_p(arg), ctypes.c_long(nr_args))
    return r if r >= 0 else -ctypes.get_errno()


def _register_reason(err):
    """Why buffers could not be registered, in words, for ``-errno`` ``err``."""
    what = {errno.EFAULT: "EFAULT: the kernel cannot pin this memory (CUDA's pinned memory?)",
            errno.ENOMEM: "ENOMEM: RLIMIT_MEMLOCK too small?",
            errno.EPERM: "EPERM", errno.EOPNOTSUPP: "EOPNOTSUPP: memory the kernel will not "
                                                     "pin for long (a file mapping?)"}
    return what.get(-err, f"{os.strerror(-err)} (errno {-err})")


def _reason(err):
    """Why io_uring is not usable, in words, for ``-errno`` ``err``."""
    what = {errno.ENOSYS: "the kernel has no io_uring (ENOSYS)",
            errno.EPERM: "io_uring is not permitted here (EPERM: a seccomp filter or "
                         "kernel.io_uring_disabled)",
            errno.EACCES: "io_uring is not permitted here (EACCES)",
            errno.ENOMEM: "no memory for an io_uring ring (ENOMEM: RLIMIT_MEMLOCK?)"}
    return what.get(-err, f"io_uring_setup failed: {os.strerror(-err)} (errno {-err})")


class Ring:
    """One io_uring instance: its fd, mapped regions and the :data:`RingArgs` for ``njit``.

    Parameters
    ----------
    entries : int
        SQ entries asked for (the kernel rounds up to a power of two; ``entries`` is then what
        it gave). The CQ has twice as many, so with at most ``entries`` requests in flight (the
        rule the daemon keeps) no completion is ever dropped.

    owned : bool, optional
        The ring of one thread, which will call :meth:`enable` before it submits: set up as
        :attr:`OWNED` where the kernel allows (else as an unowned ring). Default False.

    Raises
    ------
    UringUnavailable
        The kernel refused the ring (see :func:`probe`).
    """

    #: Setup flags tried first; a kernel without them says EINVAL and gets a plain setup.
    COOP = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG
    #: Setup flags tried first for an owned ring (Linux 6.1): one thread submits, and the
    #: kernel posts completions only when that thread enters it for them, with no task work
    #: sent to the thread meanwhile (one ring read a virtio disk ~10 % faster so than under
    #: COOP: docs/design-notes.md). Set up disabled, so that the thread that submits becomes
    #: the issuer when it enables the ring; buffers may be registered before that.
    OWNED = (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG
             | IORING_SETUP_R_DISABLED)

    def __init__(self, entries, owned=False):
        if entries < 1:
            raise ValueError(f"gids: io_uring entries must be >= 1, got {entries}")
        for flags in ([self.OWNED] if owned else []) + [self.COOP, 0]:
            params = np.zeros(1, dtype=PARAMS_DTYPE)
            params[0]["flags"] = flags
            fd = io_uring_setup(int(entries), params)
            if fd != -errno.EINVAL:
                break
        #: The flags the ring was set up with (OWNED, COOP, or 0 on kernels before 5.19).
        self.setup_flags = flags
        if fd < 0:
            raise UringUnavailable(-fd, _reason(fd))
        self.fd = fd
        self._enabled = not flags & IORING_SETUP_R_DISABLED
        self._maps = []
        try:
            self._map(params[0])
        except BaseException:
            self.close()
            raise

    def _map(self, p):
        sq_off, cq_off = p["sq_off"], p["cq_off"]
        self.entries = int(p["sq_entries"])
        self.cq_entries = int(p["cq_entries"])
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        sq_bytes = int(sq_off["array"]) + self.entries * 4
        cq_bytes = int(cq_off["cqes"]) + self.cq_entries * CQE_WORDS * 8
        single = bool(int(p["features"]) & IORING_FEAT_SINGLE_MMAP)
        if single:
            sq_bytes = cq_bytes = max(sq_bytes, cq_bytes)
        sq_map = mmap.mmap(self.fd, sq_bytes, flags, prot, offset=IORING_OFF_SQ_RING)
        self._maps.append(sq_map)
        if single:
            cq_map = sq_map
        else:
            cq_map = mmap.mmap(self.fd, cq_bytes, flags, prot, offset=IORING_OFF_CQ_RING)
            self._maps.append(cq_map)
        sqe_map = mmap.mmap(self.fd, self.entries * SQE_WORDS * 8, flags, prot,
                            offset=IORING_OFF_SQES)
        self._maps.append(sqe_map)
        sq = np.frombuffer(sq_map, dtype=np.uint32)
        cq = np.frombuffer(cq_map, dtype=np.uint32)
        sqes = np.frombuffer(sqe_map, dtype=np.int64)
        cqes = np.frombuffer(cq_map, dtype=np.int64, count=self.cq_entries * CQE_WORDS,
                             offset=int(cq_off["cqes"]))
        for name, off in (("head", sq_off["head"]), ("tail", sq_off["tail"]),
                          ("array", sq_off["array"]), ("cq head", cq_off["head"]),
                          ("cq tail", cq_off["tail"])):
            if int(off) % 4:
                raise UringUnavailable(errno.EINVAL, f"io_uring: misaligned {name} offset {off}")
        idx = np.zeros(I_COLUMNS, dtype=np.int64)
        idx[I_FD] = self.fd
        idx[I_SQ_HEAD] = int(sq_off["head"]) // 4
        idx[I_SQ_TAIL] = int(sq_off["tail"]) // 4
        idx[I_SQ_MASK] = sq[int(sq_off["ring_mask"]) // 4]
        idx[I_SQ_ENTRIES] = sq[int(sq_off["ring_entries"]) // 4]
        idx[I_CQ_HEAD] = int(cq_off["head"]) // 4
        idx[I_CQ_TAIL] = int(cq_off["tail"]) // 4
        idx[I_CQ_MASK] = cq[int(cq_off["ring_mask"]) // 4]
        idx[I_CQ_ENTRIES] = cq[int(cq_off["ring_entries"]) // 4]
        idx[I_SQ_FLAGS] = int(sq_off["flags"]) // 4
        idx[I_FEATURES] = int(p["features"])
        idx[I_SETUP_FLAGS] = int(p["flags"])
        # SQ ring position i names SQE i, for good.
        array = int(sq_off["array"]) // 4
        sq[array:array + self.entries] = np.arange(self.entries, dtype=np.uint32)
        state = private_array(S_COLUMNS)
        state[S_TAIL] = sq[idx[I_SQ_TAIL]]
        self.args = RingArgs(on=1, sq=sq, cq=cq, sqes=sqes, cqes=cqes, idx=idx, state=state,
                             wait=_wait_words())

    def register_buffers(self, regions):
        """Register ``regions`` (``(address, nbytes)`` pairs; buffer ``i`` is ``regions[i]``)
        with ``IORING_REGISTER_BUFFERS``, so that READ_FIXED / WRITE_FIXED SQEs naming them
        skip pinning the pages per I/O. Returns None once registered (S_FIXED is then 1), else
        why not, in words: the ring works on with plain reads and writes."""
        if not regions:
            return "no buffers to register"
        if len(regions) > MAX_FIXED_BUFFERS:
            return f"{len(regions)} buffers, the kernel registers at most {MAX_FIXED_BUFFERS}"
        iov = np.array(regions, dtype=np.int64).reshape(-1, 2)   # struct iovec {base, len}
        if iov[:, 1].max() > MAX_FIXED_BUFFER_BYTES:
            return f"a buffer of {int(iov[:, 1].max())} bytes (the kernel's bound: 1 GiB)"
        r = io_uring_register(self.fd, IORING_REGISTER_BUFFERS, iov.ctypes.data, len(iov))
        if r < 0:
            return _register_reason(r)
        self.args.state[S_FIXED] = 1
        return None

    @property
    def enabled(self):
        """Whether the ring takes SQEs: an owned ring once :meth:`enable` ran, any other at
        once."""
        return self._enabled

    @property
    def setup_name(self):
        """How the ring was set up, in words: "owned" (:attr:`OWNED`), "coop" (:attr:`COOP`)
        or "plain"."""
        return {self.OWNED: "owned", self.COOP: "coop"}.get(self.setup_flags, "plain")

    def enable(self):
        """Make the calling thread the ring's one issuer: an owned ring (:attr:`OWNED`) takes
        no SQE before this; only that thread may then submit to it or wait on it (another
        gets EEXIST). Does nothing for another ring, or a second time. Raises
        UringUnavailable if the kernel refuses."""
        if self._enabled:
            return
        r = io_uring_register(self.fd, IORING_REGISTER_ENABLE_RINGS, 0, 0)
        if r < 0:
            raise UringUnavailable(-r, f"io_uring: the ring could not be enabled: "
                                       f"{os.strerror(-r)}")
        self._enabled = True

    @property
    def in_flight(self):
        return int(self.args.state[S_IN_FLIGHT]) if self._maps else 0

    def close(self):
        """Unmap and close (the owner has reaped every CQE it waits for). Idempotent."""
        self.args = None
        for m in self._maps:
            try:
                m.close()
            except BufferError:   # a view is still alive; the mapping goes with it
                pass
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stand_in():
    """A :data:`RingArgs` with ``on=0`` and the same types, for threads with no ring."""
    return RingArgs(on=0, sq=np.zeros(1, dtype=np.uint32), cq=np.zeros(1, dtype=np.uint32),
                    sqes=np.zeros(SQE_WORDS, dtype=np.int64),
                    cqes=np.zeros(CQE_WORDS, dtype=np.int64), idx=np.zeros(I_COLUMNS, np.int64),
                    state=private_array(S_COLUMNS), wait=_wait_words())


_probed = {}


def probe(entries=8):
    """None if an io_uring ring can be set up here, else the reason in words (asked of the
    kernel once per process; tests clear ``_probed`` to ask again)."""
    if "reason" not in _probed and not LINUX:
        _probed["reason"] = f"io_uring is Linux's (this is {sys.platform})"
    if "reason" not in _probed:
        try:
            with Ring(entries) as ring:
                # Check the ABI end to end: a NOP through the ring comes back as a CQE.
                if not ring_nop_roundtrip(ring.args):
                    raise UringUnavailable(errno.EIO, "io_uring: a NOP did not complete")
            _probed["reason"] = None
        except UringUnavailable as exc:
            _probed["reason"] = exc.strerror or str(exc)
        except OSError as exc:   # mmap refused, say
            _probed["reason"] = f"io_uring ring could not be mapped: {exc}"
    return _probed["reason"]


# ---- njit side ---------------------------------------------------------------------------

if LINUX:
    @njit(nogil=True, cache=True)
    def _errno():
        return np.int64(load_word(_errno_location()) & 0xFFFFFFFF)
else:
    @njit(nogil=True, cache=True)
    def _errno():
        return np.int64(errno.ENOSYS)


@njit(nogil=True, cache=True, inline="always")
def ring_room(r):
    """SQEs that may still be filled: the ring's entries less those filled, unsubmitted or in
    flight (at most ``entries`` requests are ever out, so the CQ, twice as deep, never
    overflows). Inlined: the daemon's loop asks at every queue visit."""
    return r.idx[I_SQ_ENTRIES] - r.state[S_UNSUBMITTED] - r.state[S_IN_FLIGHT]


@njit(nogil=True, cache=True)
def ring_prep(r, opcode, fd, addr, nbytes, offset, op_flags, user_data):
    """Fill the next SQE (the caller checked :func:`ring_room`); submitted by
    :func:`ring_submit`."""
    tail = r.state[S_TAIL]
    at = (tail & r.idx[I_SQ_MASK]) * SQE_WORDS
    s = r.sqes
    s[at] = (opcode & 0xFF) | ((fd & 0xFFFFFFFF) << 32)
    s[at + 1] = offset
    s[at + 2] = addr
    s[at + 3] = (nbytes & 0xFFFFFFFF) | ((op_flags & 0xFFFFFFFF) << 32)
    s[at + 4] = user_data
    s[at + 5] = 0
    s[at + 6] = 0
    s[at + 7] = 0
    r.state[S_TAIL] = tail + 1
    r.state[S_UNSUBMITTED] += 1


@njit(nogil=True, cache=True)
def ring_prep_rw(r, write, fd, addr, nbytes, offset, buf_index, user_data):
    """Fill the next SQE with a read (``write``: a write) of ``nbytes`` between ``fd`` at
    ``offset`` and ``addr``: READ_FIXED / WRITE_FIXED naming registered buffer ``buf_index``
    (which holds all of ``addr`` to ``addr + nbytes``) when ``buf_index >= 0`` and the ring
    has registered buffers, else plain READ / WRITE."""
    if buf_index >= 0 and r.state[S_FIXED] != 0:
        ring_prep(r, IORING_OP_WRITE_FIXED if write else IORING_OP_READ_FIXED, fd, addr,
                  nbytes, offset, 0, user_data)
        r.sqes[((r.state[S_TAIL] - 1) & r.idx[I_SQ_MASK]) * SQE_WORDS + 5] = buf_index & 0xFFFF
    else:
        ring_prep(r, IORING_OP_WRITE if write else IORING_OP_READ, fd, addr, nbytes, offset,
                  0, user_data)


@njit(nogil=True, cache=True)
def ring_enter(r, to_submit, min_complete, flags):
    """``io_uring_enter``; returns its result or ``-errno``."""
    n = _syscall(SYS_IO_URING_ENTER, r.idx[I_FD], to_submit, min_complete, flags, 0, 0)
    if n < 0:
        return -_errno()
    return n


@njit(nogil=True, cache=True)
def _submitted(r, pending, n):
    """Account for an ``io_uring_enter`` that was handed ``pending`` SQEs and returned ``n``:
    how many it took (0 for EINTR, EAGAIN, EBUSY, ETIME: the kernel is short of room or the
    wait ended; the rest stay for the next call), or ``-errno`` for a hard error, which
    S_ERROR keeps."""
    if n == -4 or n == -11 or n == -16 or n == -ETIME:
        return 0
    if n < 0:
        if r.state[S_ERROR] == 0:
            r.state[S_ERROR] = n
        return n
    if pending == 0:   # a wait alone: its result is not a count of SQEs
        return 0
    r.state[S_UNSUBMITTED] = pending - n
    r.state[S_IN_FLIGHT] += n
    r.state[S_SUBMITS] += 1
    r.state[S_SUBMITTED] += n
    r.state[S_PEAK_IN_FLIGHT] = max(r.state[S_PEAK_IN_FLIGHT], r.state[S_IN_FLIGHT])
    return n


@njit(nogil=True, cache=True)
def _publish(r):
    """Make the filled SQEs visible to the kernel: their stores before the tail's (the kernel
    reads the tail with an acquire load)."""
    store_release(r.sq, r.idx[I_SQ_TAIL], np.uint32(r.state[S_TAIL] & 0xFFFFFFFF))


@njit(nogil=True, cache=True)
def ring_submit(r):
    """Publish the filled SQEs and submit them with one ``io_uring_enter``. Returns how many the
    kernel took (0 when it is busy: EAGAIN, EBUSY, EINTR; the rest stay for the next call), or
    ``-errno`` for another error (kept in S_ERROR)."""
    pending = r.state[S_UNSUBMITTED]
    if pending == 0:
        return 0
    _publish(r)
    return _submitted(r, pending, ring_enter(r, pending, 0, 0))


@njit(nogil=True, cache=True)
def ring_submit_wait(r, timeout_ns):
    """Submit the filled SQEs and wait for a CQE, in one ``io_uring_enter``
    (``IORING_ENTER_GETEVENTS`` with an ``IORING_ENTER_EXT_ARG`` timeout of ``timeout_ns``); it
    returns at once if a CQE is already waiting. What :func:`ring_submit` returns. On a kernel
    without EXT_ARG (before 5.11) it submits, then naps up to ``timeout_ns`` if no CQE is
    waiting."""
    pending = r.state[S_UNSUBMITTED]
    if pending > 0:
        _publish(r)
    r.state[S_WAITS] += 1
    if (r.idx[I_FEATURES] & IORING_FEAT_EXT_ARG) == 0:
        n = _submitted(r, pending, ring_enter(r, pending, 0, 0)) if pending > 0 else 0
        if n >= 0 and ring_ready(r) == 0:
            _usleep(max(1, timeout_ns // 1000))
        return n
    w = r.wait
    w[W_SECONDS] = timeout_ns // 1_000_000_000
    w[W_NANOSECONDS] = timeout_ns % 1_000_000_000
    n = _syscall(SYS_IO_URING_ENTER, r.idx[I_FD], pending, 1,
                 IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, w.ctypes.data,
                 GETEVENTS_ARG_BYTES)
    return _submitted(r, pending, -_errno() if n < 0 else n)


@njit(nogil=True, cache=True)
def ring_ready(r):
    """CQEs waiting to be reaped. Under COOP_TASKRUN a completion the kernel has but not yet
    posted shows as the SQ ring's IORING_SQ_TASKRUN flag: one ``io_uring_enter`` posts it."""
    head = r.cq[r.idx[I_CQ_HEAD]]
    tail = load_acquire(r.cq, r.idx[I_CQ_TAIL])
    n = np.int64((tail - head) & 0xFFFFFFFF)
    if n == 0 and load_acquire(r.sq, r.idx[I_SQ_FLAGS]) & IORING_SQ_TASKRUN:
        ring_enter(r, 0, 0, IORING_ENTER_GETEVENTS)
        tail = load_acquire(r.cq, r.idx[I_CQ_TAIL])
        n = np.int64((tail - head) & 0xFFFFFFFF)
    return n


@njit(nogil=True, cache=True)
def ring_cqe(r, i):
    """The ``i``-th waiting CQE: (user_data, res)."""
    head = np.int64(r.cq[r.idx[I_CQ_HEAD]])
    at = ((head + i) & r.idx[I_CQ_MASK]) * CQE_WORDS
    res = r.cqes[at + 1] & 0xFFFFFFFF
    if res >= 0x80000000:
        res -= 0x100000000
    return r.cqes[at], res


@njit(nogil=True, cache=True)
def ring_consume(r, n):
    """Hand ``n`` reaped CQEs back to the kernel (release: our reads of them come first)."""
    head = r.cq[r.idx[I_CQ_HEAD]]
    store_release(r.cq, r.idx[I_CQ_HEAD], np.uint32((head + n) & 0xFFFFFFFF))
    r.state[S_IN_FLIGHT] -= n


@njit(nogil=True, cache=True)
def ring_nop_roundtrip(r):
    """Submit one NOP and wait for its CQE (the ABI's end-to-end check in :func:`probe`)."""
    ring_prep(r, IORING_OP_NOP, -1, 0, 0, 0, 0, 0x5EED)
    if ring_submit(r) != 1:
        return False
    if ring_enter(r, 0, 1, IORING_ENTER_GETEVENTS) < 0:
        return False
    if ring_ready(r) != 1:
        return False
    data, res = ring_cqe(r, 0)
    ring_consume(r, 1)
    return data == 0x5EED and res == 0


@njit(nogil=True, cache=True)
def _wait_one(r, tag, deadline_ns, clock):
    """Submit what is filled, then reap until the CQE tagged ``tag`` arrives (waiting in
    :func:`ring_submit_wait`, not spinning); returns its res, or -ETIMEDOUT after
    ``deadline_ns`` (a monotonic time). Other CQEs are dropped (host-side rings carry one
    request at a time)."""
    while True:
        n = ring_ready(r)
        for i in range(n):
            data, res = ring_cqe(r, i)
            if data == tag:
                ring_consume(r, n)
                return res
        if n:
            ring_consume(r, n)
        _clock_gettime(1, clock.ctypes.data)
        now = clock[0] * 1_000_000_000 + clock[1]
        if now > deadline_ns:
            return -errno.ETIMEDOUT
        # Submit what is filled and sleep in the kernel until a CQE comes (at most 10 ms).
        s = ring_submit_wait(r, min(10_000_000, deadline_ns - now))
        if s < 0:
            return s


@njit(nogil=True, cache=True)
def ring_rw_all(r, write, fd, addr, nbytes, offset, deadline_ns, clock):
    """Read (or write) exactly ``nbytes`` at ``offset`` through the ring, waiting for each part
    (host-side use: ``flush``). Returns bytes done, or ``-errno`` (``-ETIMEDOUT`` past
    ``deadline_ns``); fewer than ``nbytes`` only at end of file (a read) or when the device
    takes no more (a write)."""
    done = 0
    opcode = IORING_OP_WRITE if write else IORING_OP_READ
    while done < nbytes:
        ring_prep(r, opcode, fd, addr + done, nbytes - done, offset + done, 0, 1)
        res = _wait_one(r, 1, deadline_ns, clock)
        if res < 0:
            return res
        if res == 0:
            break
        done += res
    return done


@njit(nogil=True, cache=True)
def ring_fsync(r, fd, datasync, deadline_ns, clock):
    """``fsync`` (or ``fdatasync``) of ``fd`` through the ring; 0 or ``-errno``."""
    ring_prep(r, IORING_OP_FSYNC, fd, 0, 0, 0, IORING_FSYNC_DATASYNC if datasync else 0, 2)
    return _wait_one(r, 2, deadline_ns, clock)


class HostRing:
    """A ring for host-side work between kernels (``Runtime.flush``'s writes and fsyncs), with
    every wait bounded by ``timeout`` seconds. Raises OSError with the kernel's errno."""

    def __init__(self, entries=8, timeout=60.0):
        self.ring = Ring(entries)
        self.timeout = float(timeout)
        self._clock = np.zeros(2, dtype=np.int64)

    def _deadline(self):
        return time.monotonic_ns() + int(self.timeout * 1e9)

    def pwrite(self, fd, data, offset):
        """Write all of ``data`` (bytes-like) at ``offset``; returns bytes written."""
        buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        n = ring_rw_all(self.ring.args, True, fd, buf.ctypes.data, buf.size, offset,
                        self._deadline(), self._clock)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return n

    def pread(self, fd, nbytes, offset):
        """Read up to ``nbytes`` at ``offset`` (fewer at end of file); returns bytes."""
        buf = np.empty(nbytes, dtype=np.uint8)
        n = ring_rw_all(self.ring.args, False, fd, buf.ctypes.data, nbytes, offset,
                        self._deadline(), self._clock)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return buf[:n].tobytes()

    def fsync(self, fd, datasync=False):
        res = ring_fsync(self.ring.args, fd, datasync, self._deadline(), self._clock)
        if res < 0:
            raise OSError(-res, os.strerror(-res))

    def close(self):
        self.ring.close()

    def __del__(self):   # nothing is in flight between calls: a dropped HostRing may just close
        try:
            self.close()
        except Exception:
            pass
