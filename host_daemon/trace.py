"""I/O traces: the record layout, writing and reading trace files, and replaying them through an
SSD model (:mod:`host_daemon.ssd_model`) to predict time, IOPS, bandwidth and latency.

File layout (little-endian; documented in ``docs/formats.md``): a 24-byte header
(:data:`HEADER_DTYPE`: magic, version, record size, record count) followed by ``count`` records
of :data:`TRACE_DTYPE` (48 bytes each). Version 1 files (32-byte records, without ``ready_ns``
and ``device_ns``) are still read.

What a record's four times say, and what a replay keeps of them: a request arrives
(``issue_ns``), the device is done with it (``device_ns``: the SSD model's completion time under
real-time emulation), the host has done its own part (``ready_ns``: under emulation the store
call that stands in for the data and the model call that times it; without, nothing beyond the
device), and the completion is posted (``complete_ns``). A replay replaces the device's part
only: each request completes, as its issuer sees it, at
``max(issue + host part, modelled device completion) + post delay``, with the host part
(``ready - issue``) and the post delay (``complete - max(ready, device)``: a busy daemon posts
a due completion late) taken from the record. Version 1 traces had neither, and a closed-loop
replay of them ran ahead of the run by the post delay on every link of every slot chain (below):
the 10-18 % by which replays of the H200's emulated runs fell short (``docs/ssd_models.md``,
"Replay").

Replay modes:

- ``"open"``: every request is issued at its recorded issue time (relative to the first), no
  matter how fast the modelled device completes the earlier ones.
- ``"closed"``: the trace's concurrency is kept through *slot chains*. Scanning the trace in
  issue order, each request takes over the slot of the request whose completion most recently
  preceded its issue (and whose slot no later request took yet); if no slot is free it opens a
  new one. In the replay a request is issued ``think`` ns after its slot predecessor completes,
  ``think`` being the gap the trace shows between that completion and this issue (the issuer's
  own work in between). So no more requests are in flight than the trace's peak, and a faster
  device pulls the whole chain earlier. Dependencies that are not one-to-one (a kernel that
  waits for a whole batch) are approximated by the chain through the batch's last completion.

CLI (the future ``gids simulate``)::

    python -m host_daemon.trace simulate TRACE --ssd PROFILE --n-ssd N [--mode closed|open]
    python -m host_daemon.trace calibrate [--ssd PROFILE ...]
"""
import argparse
import os
import sys
import threading
from dataclasses import dataclass, field

import numba
import numpy as np

from host_daemon.minheap import heap_pop, heap_push
from host_daemon.ssd_model import (
    DEFAULT_HOST_LINK_GBPS,
    DEFAULT_STRIPE_BYTES,
    PROFILES,
    SsdModel,
    get_profile,
    model_submit,
)
from kernels.layout import OP_READ, OP_WRITE  # one definition: the queue's op word

#: First 8 bytes of every trace file.
MAGIC = b"GIDSTRCE"
#: Layout version; bump when TRACE_DTYPE or HEADER_DTYPE change.
VERSION = 2

#: File header. ``count`` is rewritten after every appended chunk, so a trace cut short by a
#: crash still says how many whole records it holds.
HEADER_DTYPE = np.dtype([
    ("magic", "S8"),
    ("version", "<u4"),
    ("record_bytes", "<u4"),  # TRACE_DTYPE.itemsize, to reject a layout mismatch
    ("count", "<u8"),
])
HEADER_BYTES = HEADER_DTYPE.itemsize
_COUNT_OFFSET = HEADER_DTYPE.fields["count"][1]

#: One I/O. Times are ns on the recorder's monotonic clock; only differences matter.
TRACE_DTYPE = np.dtype([
    ("offset", "<u8"),       # byte offset in the array's storage (page id * page size; LBA * 512)
    ("issue_ns", "<i8"),     # when the request was issued (the daemon saw it)
    ("ready_ns", "<i8"),     # when the host's own part was done (= issue_ns if it has none)
    ("device_ns", "<i8"),    # when the device was done (the SSD model's time under emulation)
    ("complete_ns", "<i8"),  # when its completion was posted
    ("nbytes", "<u4"),       # request size
    ("queue", "<u2"),        # submission queue id
    ("op", "<u2"),           # OP_READ or OP_WRITE
])

#: Version 1's record: no ``ready_ns`` or ``device_ns`` (read as ``issue_ns`` and
#: ``complete_ns``: no host part, no post delay, which is what a replay of it assumed).
TRACE_DTYPE_V1 = np.dtype([
    ("offset", "<u8"),
    ("issue_ns", "<i8"),
    ("complete_ns", "<i8"),
    ("nbytes", "<u4"),
    ("queue", "<u2"),
    ("op", "<u2"),
])
_RECORD_DTYPES = {1: TRACE_DTYPE_V1, 2: TRACE_DTYPE}

REPLAY_MODES = ("closed", "open")


class TraceFormatError(ValueError):
    """A trace file (or record array) that is not a valid gids trace: wrong magic or version,
    truncated, trailing bytes, or impossible records."""


def upgrade_records(records: np.ndarray) -> np.ndarray:
    """Version 1 records as :data:`TRACE_DTYPE` (``ready_ns = issue_ns``,
    ``device_ns = complete_ns``); records of :data:`TRACE_DTYPE` are returned as they are."""
    if records.dtype == TRACE_DTYPE:
        return records
    if records.dtype != TRACE_DTYPE_V1:
        raise TypeError(f"not trace records: {records.dtype}")
    out = np.zeros(len(records), dtype=TRACE_DTYPE)
    for name in TRACE_DTYPE_V1.names:
        out[name] = records[name]
    out["ready_ns"] = records["issue_ns"]
    out["device_ns"] = records["complete_ns"]
    return out


def _check_records(records, where):
    """Raise TraceFormatError naming the first impossible record of ``records``."""
    checks = (
        (records["nbytes"] == 0, "nbytes is 0"),
        (records["complete_ns"] < records["issue_ns"], "completes before it is issued"),
        (records["ready_ns"] < records["issue_ns"], "is ready before it is issued"),
        (records["device_ns"] < records["issue_ns"], "leaves the device before it is issued"),
        (records["complete_ns"] < np.maximum(records["ready_ns"], records["device_ns"]),
         "is posted before the host and the device are done with it"),
        ((records["op"] != OP_READ) & (records["op"] != OP_WRITE), "unknown op"),
    )
    for bad, what in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceFormatError(f"{where}: record {i} {what}: {records[i]}")


class TraceWriter:
    """Writes a trace file, chunk by chunk; safe to share between threads.

    Parameters
    ----------
    path : str or os.PathLike
        Created or truncated.

    Examples
    --------
    >>> with TraceWriter(path) as writer:          # doctest: +SKIP
    ...     chunk = np.zeros(n, dtype=TRACE_DTYPE)  # filled by the daemon
    ...     writer.append(chunk)
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._count = 0
        self._file = open(self.path, "wb")
        header = np.zeros(1, dtype=HEADER_DTYPE)
        header["magic"], header["version"] = MAGIC, VERSION
        header["record_bytes"] = TRACE_DTYPE.itemsize
        self._file.write(header.tobytes())

    def set_engine(self, engine: str, engine_depth: int) -> None:
        """Say which storage engine served the traced run and how many requests it could have
        in flight at once, all daemon threads together (threads x ring depth; threads for the
        ``threads`` engine): written to the sidecar :func:`sidecar_path` as JSON
        ``{"engine": ..., "engine_depth": ...}`` for replays that honour it."""
        import json
        with open(sidecar_path(self.path), "w") as f:
            json.dump({"engine": str(engine), "engine_depth": int(engine_depth)}, f)
            f.write("\n")

    @property
    def count(self) -> int:
        """Records appended so far."""
        return self._count

    def append(self, records: np.ndarray) -> None:
        """Append ``records`` (an array of :data:`TRACE_DTYPE`) and update the header count."""
        if not isinstance(records, np.ndarray) or records.dtype != TRACE_DTYPE:
            raise TypeError(f"records must be a numpy array of TRACE_DTYPE, got "
                            f"{getattr(records, 'dtype', type(records))}")
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: append to a closed TraceWriter")
            # Records first, count second (seek flushes the buffer): the header never counts
            # records that are not in the file yet.
            self._file.write(np.ascontiguousarray(records).tobytes())
            self._count += len(records)
            self._file.seek(_COUNT_OFFSET)
            self._file.write(np.array(self._count, dtype="<u8").tobytes())
            self._file.seek(0, os.SEEK_END)

    def close(self) -> None:
        """Flush and close; further appends raise. Closing twice is harmless."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sidecar_path(path) -> str:
    """The JSON file beside trace ``path`` that names the run's storage engine
    (:meth:`TraceWriter.set_engine`)."""
    return os.fspath(path) + ".json"


def read_engine(path) -> dict:
    """``{"engine": ..., "engine_depth": ...}`` of the run that recorded trace ``path``, or
    ``{}`` when its sidecar is absent (a trace from before the engines, or not from a run)."""
    import json
    try:
        with open(sidecar_path(path)) as f:
            meta = json.load(f)
    except FileNotFoundError:
        return {}
    return {"engine": str(meta["engine"]), "engine_depth": int(meta["engine_depth"])}


def read_trace(path, strict: bool = True) -> np.ndarray:
    """Read a trace file written by :class:`TraceWriter`.

    Parameters
    ----------
    path : str or os.PathLike
    strict : bool
        If False, bytes after the records the header counts (left by a writer killed in the
        middle of an append) are ignored instead of raising.

    Returns
    -------
    numpy.ndarray of TRACE_DTYPE

    Raises
    ------
    TraceFormatError
        Not a trace, an unsupported version or record layout, fewer bytes than the header
        promises (truncated), trailing bytes (``strict``), or an impossible record.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        raise TraceFormatError(f"{path}: {size} bytes, shorter than the {HEADER_BYTES}-byte "
                               f"trace header (truncated, or not a gids trace)")
    header = np.frombuffer(raw, dtype=HEADER_DTYPE)[0]
    if header["magic"] != MAGIC:
        raise TraceFormatError(f"{path}: not a gids I/O trace (starts with "
                               f"{bytes(header['magic'])!r}, expected {MAGIC!r})")
    version = int(header["version"])
    if version not in _RECORD_DTYPES:
        raise TraceFormatError(f"{path}: trace format version {version}, this gids reads "
                               f"versions {', '.join(map(str, sorted(_RECORD_DTYPES)))}")
    dtype = _RECORD_DTYPES[version]
    if header["record_bytes"] != dtype.itemsize:
        raise TraceFormatError(f"{path}: {header['record_bytes']}-byte records, expected "
                               f"{dtype.itemsize} (version {version})")
    count = int(header["count"])
    body, expected = size - HEADER_BYTES, count * dtype.itemsize
    if body < expected:
        raise TraceFormatError(f"{path}: truncated: the header counts {count} records "
                               f"({expected} bytes) but only {body} bytes follow it")
    if body > expected and strict:
        raise TraceFormatError(f"{path}: {body - expected} bytes after the {count} records the "
                               f"header counts (a writer interrupted mid-append?); "
                               f"read_trace(path, strict=False) returns the counted records")
    records = upgrade_records(np.fromfile(path, dtype=dtype, count=count, offset=HEADER_BYTES))
    _check_records(records, path)
    return records


def synthetic_trace(n_requests: int, queue_depth: int = 1, nbytes: int = 4096,
                    pattern: str = "random", span_bytes: int = 1 << 36, seed: int = 0,
                    latency_ns: int = 10_000) -> np.ndarray:
    """A trace as a closed loop of ``queue_depth`` requests on a fixed-latency device records it.

    Requests go in batches of ``queue_depth``, each batch issued the instant the previous one
    completes, so closed-loop replay keeps exactly ``queue_depth`` in flight with no think time:
    the fio-style benchmark the published drive figures come from.

    Parameters
    ----------
    n_requests, queue_depth, nbytes : int
    pattern : {"random", "sequential"}
        Random offsets are ``nbytes``-aligned and uniform in ``[0, span_bytes)``; sequential
        ones follow each other, wrapping at ``span_bytes``.
    span_bytes : int
    seed : int
    latency_ns : int
        The recording device's latency (any value; closed-loop replay does not depend on it).
    """
    if n_requests < 1 or queue_depth < 1 or nbytes < 1 or span_bytes < nbytes:
        raise ValueError("need n_requests, queue_depth, nbytes >= 1 and span_bytes >= nbytes")
    index = np.arange(n_requests, dtype=np.int64)
    slots = span_bytes // nbytes
    if pattern == "random":
        block = np.random.default_rng(seed).integers(0, slots, n_requests)
    elif pattern == "sequential":
        block = index % slots
    else:
        raise ValueError(f"pattern must be 'random' or 'sequential', got {pattern!r}")
    records = np.zeros(n_requests, dtype=TRACE_DTYPE)
    records["offset"] = block * nbytes
    records["nbytes"] = nbytes
    records["issue_ns"] = records["ready_ns"] = (index // queue_depth) * latency_ns
    records["complete_ns"] = records["device_ns"] = records["issue_ns"] + latency_ns
    records["queue"] = index % queue_depth
    records["op"] = OP_READ
    return records


@numba.njit(nogil=True, cache=False)
def _slot_chains(issue, complete):
    """Slot chains of a trace sorted by issue time (see the module docstring).

    Returns ``successor`` (the next request of each request's slot, -1 for none) and
    ``is_head`` (True for requests that opened a slot).
    """
    n = issue.shape[0]
    successor = np.full(n, -1, dtype=np.int64)
    is_head = np.zeros(n, dtype=np.bool_)
    busy_keys = np.empty(n, dtype=np.int64)
    busy_items = np.empty(n, dtype=np.int64)
    n_busy = 0
    free = np.empty(n, dtype=np.int64)  # a stack: its top is the most recently freed slot
    n_free = 0
    for i in range(n):
        while n_busy > 0 and busy_keys[0] <= issue[i]:
            _, j, n_busy = heap_pop(busy_keys, busy_items, n_busy)
            free[n_free] = j
            n_free += 1
        if n_free > 0:
            n_free -= 1
            successor[free[n_free]] = i
        else:
            is_head[i] = True
        n_busy = heap_push(busy_keys, busy_items, n_busy, complete[i], i)
    return successor, is_head


@numba.njit(nogil=True, cache=False)
def _replay_events(state, params, offsets, sizes, head_ns, successor, think_ns, host_ns, post_ns,
                   max_in_flight, issue_out, device_out, complete_out):
    """Issue every request through :func:`model_submit` in time order.

    Heads (``head_ns >= 0``) are issued at ``head_ns``; the successor of a request is issued
    ``think_ns[successor]`` after that request completes. A request completes at
    ``max(issue + host_ns, device) + post_ns``: its host part runs beside the modelled device,
    and its completion reaches the issuer ``post_ns`` after both are done (the recorded host
    costs, see the module docstring). With ``max_in_flight`` > 0 a request due while that many
    are in flight waits for the earliest of them to complete (the host's queues are full).
    Fills ``issue_out``, ``device_out`` (the model's completion) and ``complete_out``; returns
    how many requests waited for queue space, and their summed wait (ns).
    """
    n = offsets.shape[0]
    keys = np.empty(n, dtype=np.int64)
    items = np.empty(n, dtype=np.int64)
    size = 0
    bounded = max_in_flight > 0
    m = n if bounded else 1
    # Completion times of the requests in flight (a min-heap; items unused), and a FIFO of
    # requests waiting for queue space with the times they were due.
    flight_keys = np.empty(m, dtype=np.int64)
    flight_items = np.empty(m, dtype=np.int64)
    in_flight = 0
    waiting = np.empty(m, dtype=np.int64)
    waiting_due = np.empty(m, dtype=np.int64)
    first_waiting = 0
    n_waiting = 0
    n_waited = 0
    waited_ns = 0
    for i in range(n):
        if head_ns[i] >= 0:
            size = heap_push(keys, items, size, head_ns[i], i)
    while size > 0 or n_waiting > 0:
        if n_waiting > 0 and (size == 0 or flight_keys[0] <= keys[0]):
            # A request in flight completes before the next event: its queue slot goes to
            # the longest-waiting request.
            now, _, in_flight = heap_pop(flight_keys, flight_items, in_flight)
            i = waiting[first_waiting]
            n_waited += 1
            waited_ns += now - waiting_due[first_waiting]
            first_waiting += 1
            n_waiting -= 1
        else:
            now, i, size = heap_pop(keys, items, size)
            if bounded:
                while n_waiting == 0 and in_flight > 0 and flight_keys[0] <= now:
                    _, _, in_flight = heap_pop(flight_keys, flight_items, in_flight)
                if in_flight >= max_in_flight:
                    waiting[first_waiting + n_waiting] = i
                    waiting_due[first_waiting + n_waiting] = now
                    n_waiting += 1
                    continue
        device = model_submit(state, params, now, offsets[i], sizes[i])
        done = max(now + host_ns[i], device) + post_ns[i]
        issue_out[i] = now
        device_out[i] = device
        complete_out[i] = done
        if bounded:
            in_flight = heap_push(flight_keys, flight_items, in_flight, done, i)
        nxt = successor[i]
        if nxt >= 0:
            size = heap_push(keys, items, size, done + think_ns[nxt], nxt)
    return n_waited, waited_ns


@numba.njit(nogil=True, cache=False)
def _inflight_stats(starts, ends):
    """Time-averaged and peak number of requests in flight over [first issue, last completion],
    by sweeping the issue times ``starts`` and completion times ``ends``, both sorted
    (completions first on ties). Sorted by the caller: np.sort inside njit costs seconds of
    compilation."""
    n = starts.shape[0]
    i = 0
    j = 0
    in_flight = 0
    peak = 0
    area = 0.0
    last = starts[0]
    while j < n:
        if i < n and starts[i] < ends[j]:
            t = starts[i]
            area += in_flight * float(t - last)
            in_flight += 1
            peak = max(peak, in_flight)
            i += 1
        else:
            t = ends[j]
            area += in_flight * float(t - last)
            in_flight -= 1
            j += 1
        last = t
    span = ends[n - 1] - starts[0]
    return (area / span if span > 0 else float(in_flight)), peak


def common_request_bytes(trace: np.ndarray) -> int:
    """The most common request size of a (non-empty) trace: its cache page size."""
    sizes, counts = np.unique(trace["nbytes"], return_counts=True)
    return int(sizes[np.argmax(counts)])


@dataclass(frozen=True)
class ReplayReport:
    """What a replay predicts. Times in the model's ns; bandwidth in GB/s (1e9 B/s).

    ``issue_ns``, ``device_ns`` (the modelled device's completion) and ``complete_ns`` (when
    the issuer sees it: the device's, plus the host costs the trace recorded) hold each
    request's predicted times, in the trace's (issue-sorted) order, starting at 0. The time,
    IOPS, latencies and in-flight figures are the issuer's (so ``mean_inflight = iops x
    latency_us_mean`` is Little's law); ``device_latency_us_mean`` is the device's part alone
    and ``host_us_mean`` the mean of what the recorded host costs added to a request.
    ``utilisation`` is each modelled resource's busy share of the time (averaged over its
    instances, :meth:`~host_daemon.ssd_model.SsdModel.utilisation`), ``waited`` the share of
    requests that waited for host queue space (``max_in_flight``; None: unbounded), and
    ``bound`` names what limits the run (:func:`what_bounds`).
    """

    profile: str
    n_ssd: int
    mode: str
    n_requests: int
    total_bytes: int
    time_s: float
    iops: float
    bandwidth_GBps: float
    latency_us_mean: float
    latency_us_p50: float
    latency_us_p90: float
    latency_us_p99: float
    latency_us_p999: float
    mean_inflight: float
    peak_inflight: int
    device_latency_us_mean: float
    host_us_mean: float
    max_in_flight: int | None
    waited: float
    utilisation: dict = field(compare=False)
    bound: str
    issue_ns: np.ndarray = field(repr=False, compare=False)
    device_ns: np.ndarray = field(repr=False, compare=False)
    complete_ns: np.ndarray = field(repr=False, compare=False)

    def format(self) -> str:
        """A short human-readable table."""
        return "\n".join([
            f"device      {self.n_ssd} x {self.profile}, {self.mode} loop",
            f"requests    {self.n_requests:,} ({self.total_bytes / 2**30:.3f} GiB)",
            f"time        {self.time_s:.6g} s",
            f"IOPS        {self.iops / 1e6:.4g} M/s",
            f"bandwidth   {self.bandwidth_GBps:.4g} GB/s",
            f"latency us  p50 {self.latency_us_p50:.4g}  p90 {self.latency_us_p90:.4g}  "
            f"p99 {self.latency_us_p99:.4g}  p99.9 {self.latency_us_p999:.4g}  "
            f"mean {self.latency_us_mean:.4g}",
            f"of which    device mean {self.device_latency_us_mean:.4g} us, host mean "
            f"{self.host_us_mean:.4g} us (recorded host work and posting delays)",
            f"in flight   mean {self.mean_inflight:.4g}, peak {self.peak_inflight}, host "
            f"limit {'none' if self.max_in_flight is None else self.max_in_flight}",
            "busy        " + ", ".join(f"{name} {share:.0%}"
                                       for name, share in self.utilisation.items()),
            f"bound by    {self.bound}",
        ])


#: A resource busy this share of the time or more is what bounds a run.
SATURATED = 0.85


def what_bounds(utilisation: dict, waited: float, max_in_flight, host_us_mean: float,
                device_us_mean: float, mean_inflight: float, mode: str) -> str:
    """What limits a replayed run, in words: the busiest modelled resource if it is saturated,
    else the host's queues if most requests waited for space, else the recorded host costs if
    they exceed the device's time, else the trace itself (its dependencies or issue times)."""
    name, share = max(utilisation.items(), key=lambda item: item[1])
    if share >= SATURATED:
        return f"{name} ({share:.0%} busy): a faster or wider {name} would move it"
    if max_in_flight is not None and waited >= 0.5:
        return (f"host queues: {waited:.0%} of requests waited for one of {max_in_flight} "
                f"in-flight slots; deeper or more queues would move it")
    if host_us_mean > device_us_mean:
        return (f"the host's recorded work and posting delays ({host_us_mean:.3g} us per "
                f"request against {device_us_mean:.3g} us of device time)")
    if mode == "open":
        return "the trace's issue times (the offered load is below what the device serves)"
    return (f"the trace's own dependencies: {mean_inflight:.3g} in flight on average, each "
            f"issued after the one its issuer waited for ({name} {share:.0%} busy); more "
            f"concurrency in the workload, not faster hardware, would move it")


def replay(trace: np.ndarray, profile, n_ssd: int = 1, mode: str = "closed",
           stripe_bytes: int | None = None,
           host_link_GBps: float | None = DEFAULT_HOST_LINK_GBPS,
           max_in_flight: int | None = None, host_command_ns: float = 0.0,
           seed: int = 0, path_command_ns: float = 0.0) -> ReplayReport:
    """Replay ``trace`` through a fresh model of ``n_ssd`` drives of ``profile``.

    Parameters
    ----------
    trace : numpy.ndarray of TRACE_DTYPE (or of version 1's TRACE_DTYPE_V1)
        Reads only (the model times reads); any order (sorted by issue time here). Each
        request's host part and post delay are kept as recorded (see the module docstring).
    profile : str or SsdProfile
    n_ssd, stripe_bytes, host_link_GBps, host_command_ns, seed, path_command_ns
        The array, as for :class:`~host_daemon.ssd_model.SsdModel`. ``stripe_bytes`` None:
        the trace's most common request size (a run's cache page: ``gids.Runtime`` stripes
        its emulated array by its page size).
    mode : {"closed", "open"}
        See the module docstring.
    max_in_flight : int or None
        The host's total in-flight capacity (queues x depth, an I/O engine's depth): a request
        due while this many are in flight waits for the earliest to complete. None: unbounded.
        ``gids simulate`` takes it from the trace's sidecar (``engine_depth``, :func:`read_engine`) when present.

    Returns
    -------
    ReplayReport
    """
    if max_in_flight is not None and int(max_in_flight) < 1:
        raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
    if mode not in REPLAY_MODES:
        raise ValueError(f"mode must be one of {REPLAY_MODES}, got {mode!r}")
    if not isinstance(trace, np.ndarray) or trace.dtype not in (TRACE_DTYPE, TRACE_DTYPE_V1):
        raise TypeError("trace must be a numpy array of TRACE_DTYPE (see read_trace)")
    trace = upgrade_records(trace)
    if len(trace) == 0:
        raise ValueError("empty trace: nothing to replay")
    _check_records(trace, "trace")
    n_writes = int(np.count_nonzero(trace["op"] == OP_WRITE))
    if n_writes:
        raise ValueError(f"the SSD model times reads only; this trace has {n_writes} writes")
    if stripe_bytes is None:
        stripe_bytes = common_request_bytes(trace)
    model = SsdModel(profile, n_ssd=n_ssd, stripe_bytes=stripe_bytes,
                     host_link_GBps=host_link_GBps, host_command_ns=host_command_ns, seed=seed,
                     path_command_ns=path_command_ns)

    ordered = trace[np.argsort(trace["issue_ns"], kind="stable")]
    issue = ordered["issue_ns"].astype(np.int64)
    complete = ordered["complete_ns"].astype(np.int64)
    ready = ordered["ready_ns"].astype(np.int64)
    start = issue[0]
    if mode == "open":
        head_ns = issue - start
        successor = np.full(len(ordered), -1, dtype=np.int64)
        think_ns = np.zeros(len(ordered), dtype=np.int64)
    else:
        successor, is_head = _slot_chains(issue, complete)
        head_ns = np.where(is_head, issue - start, -1)
        think_ns = np.zeros(len(ordered), dtype=np.int64)
        has_pred = successor >= 0
        think_ns[successor[has_pred]] = issue[successor[has_pred]] - complete[has_pred]
    # The host's costs, kept as recorded (the replay replaces the device's part only).
    host_ns = ready - issue
    post_ns = complete - np.maximum(ready, ordered["device_ns"].astype(np.int64))

    sizes = ordered["nbytes"].astype(np.int64)
    issue_out = np.empty(len(ordered), dtype=np.int64)
    device_out = np.empty(len(ordered), dtype=np.int64)
    complete_out = np.empty(len(ordered), dtype=np.int64)
    state, params = model.njit_args()
    n_waited, _ = _replay_events(
        state, params, ordered["offset"].astype(np.int64), sizes, head_ns, successor, think_ns,
        host_ns, post_ns, 0 if max_in_flight is None else int(max_in_flight), issue_out,
        device_out, complete_out)

    span_ns = max(int(complete_out.max() - issue_out.min()), 1)
    latency_us = (complete_out - issue_out) / 1e3
    p50, p90, p99, p999 = np.percentile(latency_us, [50, 90, 99, 99.9])
    mean_inflight, peak_inflight = _inflight_stats(np.sort(issue_out), np.sort(complete_out))
    total_bytes = int(sizes.sum())
    utilisation = model.utilisation(span_ns)
    waited = n_waited / len(ordered)
    device_us = float((device_out - issue_out).mean() / 1e3)
    host_us = float((complete_out - device_out).mean() / 1e3)
    return ReplayReport(
        profile=model.profile.name, n_ssd=model.n_ssd, mode=mode, n_requests=len(ordered),
        total_bytes=total_bytes, time_s=span_ns / 1e9, iops=len(ordered) / span_ns * 1e9,
        bandwidth_GBps=total_bytes / span_ns, latency_us_mean=float(latency_us.mean()),
        latency_us_p50=float(p50), latency_us_p90=float(p90), latency_us_p99=float(p99),
        latency_us_p999=float(p999), mean_inflight=float(mean_inflight),
        peak_inflight=int(peak_inflight), device_latency_us_mean=device_us,
        host_us_mean=host_us, max_in_flight=None if max_in_flight is None else int(max_in_flight),
        waited=waited, utilisation=utilisation,
        bound=what_bounds(utilisation, waited, max_in_flight, host_us, device_us,
                          float(mean_inflight), mode),
        issue_ns=issue_out, device_ns=device_out, complete_ns=complete_out)


#: Benchmarks behind :func:`calibrate`: (requests, queue depth, request bytes, pattern). The
#: saturated ones run deeper than the vendors' test conditions (e.g. QD32 x 16 threads = 512)
#: so that the device, not the load, limits.
CALIBRATION_RUNS = {
    "qd1_read_latency_us": (2_000, 1, 4096, "random"),
    "rand_read_iops": (200_000, 512, 4096, "random"),
    "seq_read_GBps": (20_000, 32, 128 * 1024, "sequential"),
    "small_read_iops": (100_000, 512, 512, "random"),
    "small_read_latency_us": (2_000, 1, 512, "random"),
}


def calibrate(profile) -> dict[str, float]:
    """Model one drive of ``profile`` on the benchmarks its published figures come from.

    Returns
    -------
    dict
        ``qd1_read_latency_us`` (mean), ``rand_read_iops``, ``seq_read_GBps``,
        ``small_read_iops`` (512 B), ``small_read_latency_us`` (512 B, mean): the keys of
        :class:`~host_daemon.ssd_model.PublishedFigures`.
    """
    results = {}
    for metric, (n, depth, nbytes, pattern) in CALIBRATION_RUNS.items():
        report = replay(synthetic_trace(n, depth, nbytes, pattern), profile)
        results[metric] = {"qd1_read_latency_us": report.latency_us_mean,
                           "rand_read_iops": report.iops,
                           "seq_read_GBps": report.bandwidth_GBps,
                           "small_read_iops": report.iops,
                           "small_read_latency_us": report.latency_us_mean}[metric]
    return results


def _number_at_least(minimum, kind=int):
    """An argparse type: a number of ``kind`` that is at least ``minimum``."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value
    return parse


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``simulate`` (for a ``gids simulate`` subparser)."""
    parser.add_argument("trace", help="trace file written by a gids run")
    parser.add_argument("--ssd", default="980pro", metavar="PROFILE",
                        help=f"drive profile: {', '.join(sorted(PROFILES))} (default 980pro)")
    parser.add_argument("--n-ssd", type=_number_at_least(1), default=1, metavar="N",
                        help="drives (default 1)")
    parser.add_argument("--mode", choices=REPLAY_MODES, default="closed",
                        help="closed: keep the trace's concurrency; open: keep its issue times")
    parser.add_argument("--stripe-bytes", type=_number_at_least(1), default=None,
                        help="striping unit across drives (default: the trace's most common "
                             "request size, one cache page per stripe unit)")
    parser.add_argument("--host-link-GBps", type=_number_at_least(0.0, float),
                        default=DEFAULT_HOST_LINK_GBPS,
                        help="bandwidth shared by the array, GB/s; 0 for unlimited "
                             f"(default {DEFAULT_HOST_LINK_GBPS})")
    parser.add_argument("--max-in-flight", type=_number_at_least(1), default=None, metavar="N",
                        help="the host's total in-flight capacity (queues x depth); default: "
                             "the engine_depth of the trace's sidecar (TRACE.json) if it has "
                             "one, else unbounded")
    parser.add_argument("--host-command-ns", type=_number_at_least(0.0, float), default=0.0,
                        metavar="NS",
                        help="host-side submission cost per command, serialised (default 0)")
    parser.add_argument("--path-command-ns", type=_number_at_least(0.0, float), default=0.0,
                        metavar="NS",
                        help="per-command cost of each drive's path to the issuer, served by "
                             "each drive (default 0)")


def trace_engine_depth(path) -> int | None:
    """The host's in-flight capacity (``engine_depth``: daemon threads x ring depth) of the run
    that recorded trace ``path``, from its sidecar (:func:`read_engine`); None without one."""
    depth = read_engine(path).get("engine_depth", 0)
    return depth if depth > 0 else None


def run_simulate(args: argparse.Namespace) -> str:
    """Replay ``args.trace`` as ``add_simulate_arguments`` parsed it; return the table."""
    profile = get_profile(args.ssd)   # a wrong name is told before the trace is read
    trace = read_trace(args.trace)
    stripe = args.stripe_bytes
    if stripe is None:
        stripe = common_request_bytes(trace) if len(trace) else DEFAULT_STRIPE_BYTES
    depth = args.max_in_flight
    if depth is None:
        depth = trace_engine_depth(args.trace)
    report = replay(trace, profile, n_ssd=args.n_ssd, mode=args.mode,
                    stripe_bytes=stripe, host_link_GBps=args.host_link_GBps or None,
                    max_in_flight=depth, host_command_ns=args.host_command_ns,
                    path_command_ns=args.path_command_ns)
    return f"trace       {args.trace}\nstripe      {stripe} B\n{report.format()}"


def calibration_table(names) -> str:
    """Model vs published figures for each profile in ``names``, as a text table."""
    units = {"qd1_read_latency_us": (1.0, "us"), "rand_read_iops": (1e6, "M IOPS"),
             "seq_read_GBps": (1.0, "GB/s"), "small_read_iops": (1e6, "M IOPS"),
             "small_read_latency_us": (1.0, "us")}
    lines = [f"{'profile':<11} {'metric':<20} {'model':>9} {'published':>9} {'error':>7}"]
    for name in names:
        profile = get_profile(name)
        for metric, value in calibrate(profile).items():
            scale, unit = units[metric]
            figure = getattr(profile.published, metric)
            published = "-" if figure is None else f"{figure.value / scale:.4g}"
            error = "-" if figure is None else f"{(value / figure.value - 1) * 100:+.1f}%"
            lines.append(f"{name:<11} {metric:<20} {value / scale:>9.4g} {published:>9} "
                         f"{error:>7}  {unit}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``simulate TRACE --ssd P --n-ssd N [--mode M]`` or ``calibrate [--ssd P ...]``."""
    parser = argparse.ArgumentParser(prog="python -m host_daemon.trace",
                                     description="Replay gids I/O traces through SSD models.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_simulate_arguments(commands.add_parser(
        "simulate", help="predict time, IOPS, bandwidth and latency of a trace"))
    calibrate_parser = commands.add_parser(
        "calibrate", help="model vs published figures of each drive profile")
    calibrate_parser.add_argument("--ssd", nargs="*", default=sorted(PROFILES),
                                  metavar="PROFILE", help="profiles (default: all)")
    args = parser.parse_args(argv)
    try:
        if args.command == "simulate":
            print(run_simulate(args))
        else:
            print(calibration_table(args.ssd))
    except (OSError, ValueError) as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
