"""Timing model of NVMe SSDs and arrays of them: when may a read complete?

One ``njit`` function, :func:`model_submit`, is the single source of truth for timing. Given the
model state (an array of "busy until" times per drive resource, and a lock word), the parameters,
the time a request arrives and its byte range, it reserves the resources the read needs and returns the earliest
time its completion may be posted. Two users call it:

- the host daemon (real-time emulation): for each batch of requests it serves from a queue it
  calls :func:`model_submit` under one hold of the model's lock, from its own ``njit`` loop,
  with ``now_ns`` = each request's arrival on its monotonic clock, and posts each completion no
  earlier than the returned time, so a run's wall clock shows the modelled device;
- trace replay (:mod:`host_daemon.trace`): the same function, driven by recorded or synthetic
  request streams, predicts time, IOPS and latency percentiles.

The model (equations in ``docs/ssd_models.md``): a request is split by the array's striping into
one command per drive (optionally after a host-side submission cost per command, serialised
across the array); each command holds the drive controller's command slot (a FIFO server) for a
fixed time plus its bytes at the controller's data path (plus an optional per-command cost of
the drive's path to the issuer), pays a fixed controller latency, then
each flash page it touches is read by its die/plane (FIFO per unit, busy for that page type's
tR), moved over its flash channel, and over the drive's PCIe link; the whole request also
crosses the host's link (the GPU's PCIe port). Channels and links are bandwidth resources
modelled as rate limiters on the admission order (see the docs for why not strict FIFO on the
data's ready time). The time each kind of resource was busy is summed, so that a replay can say
what bounds a run (:meth:`SsdModel.utilisation`).

Thread safety: callers serialise. All daemon threads share one model (one state) and call
:func:`model_submit_locked`, which holds a spin lock in ``state.lock`` for the ~50 ns the call
takes, or take the lock once for a batch of calls (:func:`model_lock`, :func:`model_unlock`:
the host daemon and the NVMe controller do, since a lock taken per request by every thread
serialised them: docs/design-notes.md, "The emulated drives and the replay").
Per-thread shards would be wrong: the drives, channels and links are shared by every queue,
so a shard per thread would model one private copy of the array per thread and multiply its
throughput by the thread count; and splitting the drives among threads does not work either,
because a request's drive follows from its address, not from the thread that serves it.
"""
import math
from collections import namedtuple
from dataclasses import dataclass, field

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Striping unit of an array of drives: one GIDS cache page, as in BaM's page striping.
DEFAULT_STRIPE_BYTES = 4096
#: The GPU's own PCIe port, shared by all drives of the array (GB/s, 1e9 B/s): 52 GB/s is the
#: pinned host-to-device copy rate measured on the lent H200 (gen 5 x16), docs/ssd_models.md.
DEFAULT_HOST_LINK_GBPS = 52.0

#: Request size the published random-read IOPS figures (``iops_cap``) are measured at.
CAP_REQUEST_BYTES = 4096
#: Request size of a profile's small-read rate (``PublishedFigures.small_read_iops``).
SMALL_REQUEST_BYTES = 512
#: Most flash page types a profile's ``read_levels`` may give (TLC has 3, QLC 4).
MAX_PAGE_TYPES = 4

#: Transfer rate of one PCIe lane in GT/s, by generation; gen 3 and later use 128b/130b coding.
PCIE_GT_PER_LANE = {3: 8.0, 4: 16.0, 5: 32.0}
PCIE_ENCODING = 128.0 / 130.0
#: Payload share of a TLP: 256 B max payload per TLP against ~24 B of header, sequence number,
#: LCRC and framing. DLLP traffic (acks, flow-control credits) is ignored.
PCIE_TLP_EFFICIENCY = 256.0 / 280.0


def pcie_payload_GBps(gen: int, lanes: int) -> float:
    """Payload bandwidth of a PCIe link of generation ``gen`` and ``lanes`` lanes, GB/s."""
    return PCIE_GT_PER_LANE[gen] * lanes * PCIE_ENCODING / 8.0 * PCIE_TLP_EFFICIENCY


@dataclass(frozen=True)
class Figure:
    """One published number and where it comes from."""

    value: float
    source: str


@dataclass(frozen=True)
class PublishedFigures:
    """The drive figures a profile is checked against.

    Attributes
    ----------
    qd1_read_latency_us : Figure or None
        Mean latency of 4 KiB random reads at queue depth 1, microseconds.
    rand_read_iops : Figure
        Saturated 4 KiB random-read IOPS.
    seq_read_GBps : Figure
        Saturated 128 KiB sequential-read bandwidth, GB/s (1e9 B/s).
    small_read_iops : Figure or None
        Saturated 512 B random-read IOPS, where a source gives the drive's own rate; with the
        4 KiB figure it splits the command cost (:meth:`SsdProfile.command_costs_ns`).
    small_read_latency_us : Figure or None
        Mean latency of 512 B random reads at queue depth 1, the drive's own (the host's
        layers measured apart), where a source gives it; a profile with it fits its
        controller latency to it instead of to ``qd1_read_latency_us``.
    """

    qd1_read_latency_us: Figure | None
    rand_read_iops: Figure
    seq_read_GBps: Figure
    small_read_iops: Figure | None = None
    small_read_latency_us: Figure | None = None


@dataclass(frozen=True)
class NandMedia:
    """Flash back end: ``channels`` buses, each with ``dies_per_channel`` dies of
    ``planes_per_die`` independently readable planes.

    Attributes
    ----------
    channels : int
        Flash channels (buses) of the controller.
    dies_per_channel : int
        Dies sharing one channel.
    planes_per_die : int
        Planes per die that sense pages independently (independent multi-plane reads);
        each plane is one FIFO "unit" that is busy for ``read_us`` per page read.
    page_bytes : int
        Flash page size; a read senses the whole page even if it returns part of it.
    read_us : float
        tR: page sense time, microseconds.
    channel_MBps : float
        Data rate of one channel, MB/s (1e6 B/s).
    """

    channels: int
    dies_per_channel: int
    planes_per_die: int
    page_bytes: int
    read_us: float
    channel_MBps: float


@dataclass(frozen=True)
class XPointMedia:
    """3D XPoint (Optane) back end: ``units`` independent media units, no flash channels.

    Attributes
    ----------
    units : int
        Units that serve reads in parallel; each is busy ``read_us`` per access.
    read_us : float
        Media read latency, microseconds.
    access_bytes : int
        Bytes one media access returns (the controller's internal access size).
    """

    units: int
    read_us: float
    access_bytes: int


@dataclass(frozen=True)
class SsdProfile:
    """A drive: host interface, controller and media parameters, and its published figures.

    Attributes
    ----------
    name : str
        Key in :data:`PROFILES`.
    description : str
        One line: what drive (class) this is.
    media : NandMedia, XPointMedia or None
        None: the media costs nothing (the ideal device).
    pcie_gen, pcie_lanes : int or None, int
        The drive's PCIe link; ``pcie_gen`` None means no drive-side link limit.
    max_read_GBps : float or None
        Controller data-path ceiling (DMA, ECC decode) below the link's rate, GB/s.
    iops_cap : float or None
        4 KiB random-read commands per second the controller processes. With
        ``interface_GBps`` it sets the command slot's fixed and per-byte cost
        (:meth:`command_costs_ns`), so that a 4 KiB command holds the slot ``1 / iops_cap``.
    ctrl_latency_us : float
        Fixed latency of each command outside the media and transfers: SQE fetch, FTL lookup,
        CQE post (and, in published QD1 figures, the host's submission and completion path).
    published : PublishedFigures
        What the profile is calibrated against.
    sources : dict
        Parameter name -> where its value comes from ("assumed: ..." when it is a judgement).
    read_levels : tuple of float
        Relative media read time by flash page type (TLC: lower, middle, upper page sense at
        different numbers of read voltages); normalised to mean 1, so ``read_us`` stays the
        mean. Page ``k`` of a die has type ``k % len(read_levels)``. ``(1.0,)``: no spread.
    read_jitter : float
        Each media read takes ``1 + read_jitter * u`` times its nominal time, ``u`` uniform in
        [-1, 1) drawn from a hash of the model's seed, the page and the arrival time
        (deterministic for a seed, independent of call order). 0: none.
    """

    name: str
    description: str
    media: NandMedia | XPointMedia | None
    pcie_gen: int | None
    pcie_lanes: int
    max_read_GBps: float | None
    iops_cap: float | None
    ctrl_latency_us: float
    published: PublishedFigures
    sources: dict = field(default_factory=dict, compare=False, hash=False)
    read_levels: tuple = (1.0,)
    read_jitter: float = 0.0

    @property
    def link_GBps(self) -> float:
        """Usable payload bandwidth of the drive's PCIe link (inf when unlimited)."""
        if self.pcie_gen is None:
            return math.inf
        return pcie_payload_GBps(self.pcie_gen, self.pcie_lanes)

    @property
    def interface_GBps(self) -> float:
        """Rate at which the drive can deliver read data: link or controller, the lower."""
        ceiling = math.inf if self.max_read_GBps is None else self.max_read_GBps
        return min(self.link_GBps, ceiling)

    def command_costs_ns(self) -> tuple[float, float]:
        """``(fixed, per_byte)``: how long a command holds the controller's command slot is
        ``fixed + nbytes * per_byte`` ns, so that a 4 KiB read holds it ``1 / iops_cap`` (the
        published IOPS figure is for 4 KiB), smaller ones less and larger ones more.

        With a published 512 B rate (``published.small_read_iops``) the two random-read rates
        give both parts: the line through (512 B, its rate) and (4 KiB, the cap). Without one,
        the per-byte part is the controller's data path (``interface_GBps``, the sequential
        figure) and the fixed part what is left of ``1 / iops_cap`` for 4 KiB."""
        if self.iops_cap is None:
            return 0.0, 0.0
        cap_ns = 1e9 / self.iops_cap
        small = self.published.small_read_iops
        if small is not None:
            small_ns = 1e9 / small.value
            per_byte = (cap_ns - small_ns) / (CAP_REQUEST_BYTES - SMALL_REQUEST_BYTES)
            if per_byte < 0 or small_ns < SMALL_REQUEST_BYTES * per_byte:
                raise ValueError(f"{self.name}: a 512 B rate of {small.value:.4g}/s and a "
                                 f"4 KiB rate of {self.iops_cap:.4g}/s give no command cost "
                                 f"that grows with the bytes")
            return small_ns - SMALL_REQUEST_BYTES * per_byte, per_byte
        per_byte = 0.0 if math.isinf(self.interface_GBps) else 1.0 / self.interface_GBps
        return max(0.0, cap_ns - CAP_REQUEST_BYTES * per_byte), per_byte

    def model_params(self, stripe_bytes: int = DEFAULT_STRIPE_BYTES,
                     host_link_GBps: float | None = DEFAULT_HOST_LINK_GBPS,
                     host_command_ns: float = 0.0, seed: int = 0,
                     path_command_ns: float = 0.0) -> "ModelParams":
        """The scalar parameters :func:`model_submit` reads, for this drive in an array.

        Parameters
        ----------
        stripe_bytes : int
            Striping unit across the drives of the array.
        host_link_GBps : float or None
            Bandwidth of the link all drives share (the GPU's port); None: unlimited.
        host_command_ns : float
            Host-side cost of submitting one command (SQE write, doorbell, completion
            handling), serialised across the array; 0: free.
        seed : int
            Seed of the media read-time jitter (``read_jitter``).
        path_command_ns : float
            Per-command cost of the path between each drive and the issuer (SQE fetches,
            completion posts and doorbells across the platform's PCIe topology), served one
            command at a time by each drive: it holds the drive's command slot that much longer.
            0: free.
        """
        if stripe_bytes <= 0:
            raise ValueError(f"stripe_bytes must be positive, got {stripe_bytes}")
        if host_command_ns < 0:
            raise ValueError(f"host_command_ns must be >= 0, got {host_command_ns}")
        if path_command_ns < 0:
            raise ValueError(f"path_command_ns must be >= 0, got {path_command_ns}")
        levels = np.asarray(self.read_levels, dtype=np.float64)
        if not 1 <= len(levels) <= MAX_PAGE_TYPES or (levels <= 0).any():
            raise ValueError(f"read_levels needs 1 to {MAX_PAGE_TYPES} positive values, got "
                             f"{self.read_levels}")
        if not 0 <= self.read_jitter < 1:
            raise ValueError(f"read_jitter must be in [0, 1), got {self.read_jitter}")
        levels = levels / levels.mean()
        media = self.media
        if isinstance(media, NandMedia):
            page_bytes, channels = media.page_bytes, media.channels
            units_per_channel = media.dies_per_channel * media.planes_per_die
            read_ns, channel_ns_per_byte = media.read_us * 1e3, 1e3 / media.channel_MBps
        elif isinstance(media, XPointMedia):
            # One "channel" without a transfer cost: XPoint units sit behind the controller's
            # own buses, whose rate never limits below the PCIe link in the drives modelled.
            page_bytes, channels, units_per_channel = media.access_bytes, 1, media.units
            read_ns, channel_ns_per_byte = media.read_us * 1e3, 0.0
        else:
            # The ideal device: no media time; one huge "page" keeps the chunk loop to one pass.
            page_bytes, channels, units_per_channel = 1 << 40, 1, 1
            read_ns, channel_ns_per_byte = 0.0, 0.0
        command_ns, command_ns_per_byte = self.command_costs_ns()
        read_types = np.full(MAX_PAGE_TYPES, float(read_ns))
        read_types[:len(levels)] = levels * read_ns
        return ModelParams(
            stripe_bytes=int(stripe_bytes),
            page_bytes=int(page_bytes),
            n_channels=int(channels),
            units_per_channel=int(units_per_channel),
            read_ns=float(read_ns),
            channel_ns_per_byte=float(channel_ns_per_byte),
            link_ns_per_byte=float(1.0 / self.interface_GBps),
            command_ns=float(command_ns),
            ctrl_latency_ns=float(self.ctrl_latency_us * 1e3),
            host_ns_per_byte=float(0.0 if host_link_GBps is None else 1.0 / host_link_GBps),
            command_ns_per_byte=float(command_ns_per_byte),
            read_ns_by_type=tuple(float(x) for x in read_types),
            n_page_types=int(len(levels)),
            read_jitter=float(self.read_jitter),
            seed=np.uint64(seed & (2**64 - 1)),
            host_command_ns=float(host_command_ns),
            path_command_ns=float(path_command_ns),
        )


#: Scalars of one model instance, passed to :func:`model_submit` as one (typed) tuple.
#: Times in ns; ``*_ns_per_byte`` are inverse bandwidths (0: unlimited).
ModelParams = namedtuple("ModelParams", [
    "stripe_bytes",         # int: striping unit across drives
    "page_bytes",           # int: media access unit (flash page, XPoint access)
    "n_channels",           # int: channels per drive
    "units_per_channel",    # int: independently reading units (die planes) per channel
    "read_ns",              # float: time a unit is busy per access (tR)
    "channel_ns_per_byte",  # float
    "link_ns_per_byte",     # float: drive -> host interface
    "command_ns",           # float: 1 / IOPS cap
    "ctrl_latency_ns",      # float: fixed per-command latency
    "host_ns_per_byte",     # float: link shared by the array
    "command_ns_per_byte",  # float: command slot time per byte (controller data path)
    "read_ns_by_type",      # 4 floats: media read time by page type (mean read_ns)
    "n_page_types",         # int: page types in use (1: no spread)
    "read_jitter",          # float: +- fraction of uniform read-time jitter
    "seed",                 # uint64: seed of the jitter
    "host_command_ns",      # float: host-side submission cost per command, serialised
    "path_command_ns",      # float: per-command cost of each drive's path to the issuer
])

#: Columns of a drive's row in ``ModelState.busy`` (its channels and units follow).
COMMAND_COLUMN = 0   # controller command slot free at
LINK_COLUMN = 1      # drive link has admitted bytes up to
CHANNEL_COLUMN = 2   # first of n_channels columns; units start after the channels
#: Columns of the host row (row n_ssd).
HOST_LINK_COLUMN = 0     # the shared host link has admitted bytes up to
HOST_COMMAND_COLUMN = 1  # the host's submission path is free at
#: Columns of the work row (row n_ssd + 1): busy time summed over every request, per kind of
#: resource (ns), from which :meth:`SsdModel.utilisation` says what bounds a run.
WORK_COMMAND, WORK_MEDIA, WORK_CHANNEL, WORK_LINK, WORK_HOST_LINK, WORK_HOST_COMMAND = range(6)
WORK_NAMES = ("controller", "media", "flash channels", "drive link", "host link",
              "host submission")
_MIN_COLUMNS = len(WORK_NAMES)

#: Mutable state of one model instance. Two arrays, not one per resource: every njit call that
#: is not inlined increfs and decrefs each array it is passed (an atomic add each, ~100 ns per
#: call for six arrays), and the daemon makes one call per request.
ModelState = namedtuple("ModelState", [
    "busy",  # float64[n_ssd + 2, max(6, 2 + n_channels * (1 + units_per_channel))]: "busy
             # until" (ns). Row d < n_ssd is drive d: COMMAND_COLUMN, LINK_COLUMN, then its
             # channels, then its units (channel c's units are adjacent). Row n_ssd: the host
             # (HOST_LINK_COLUMN, HOST_COMMAND_COLUMN). Row n_ssd + 1: summed work (WORK_*).
    "lock",  # int64[1]: 0 free, 1 held (model_submit_locked)
])


def new_state(n_ssd: int, params: ModelParams) -> ModelState:
    """Idle model state for ``n_ssd`` drives (every resource free since time 0)."""
    if n_ssd < 1:
        raise ValueError(f"n_ssd must be at least 1, got {n_ssd}")
    columns = CHANNEL_COLUMN + params.n_channels * (1 + params.units_per_channel)
    return ModelState(busy=np.zeros((n_ssd + 2, max(columns, _MIN_COLUMNS))),
                      lock=np.zeros(1, dtype=np.int64))


@numba.njit(nogil=True, cache=False, inline="always")
def _unit_draw(seed, drive, page, now):
    """A number uniform in [-1, 1) from a hash (splitmix64's finaliser) of its arguments."""
    x = seed ^ (np.uint64(drive) * np.uint64(0x9E3779B97F4A7C15))
    x ^= np.uint64(page) * np.uint64(0xC2B2AE3D27D4EB4F)
    x ^= np.uint64(now) * np.uint64(0x165667B19E3779F9)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)) * (2.0 / 9007199254740992.0) - 1.0


# error_model="numpy": integer division by a parameter then has no ZeroDivisionError path, whose
# raise branch keeps Numba from pruning reference counting. Inlined: a call would incref and
# decref `busy` (atomic adds), a large share of the ~50 ns a request costs.
@numba.njit(nogil=True, cache=False, error_model="numpy", inline="always")
def _drive_command(busy, params, drive, now, lo, hi):
    """Reserve drive ``drive``'s resources for reading its local bytes [lo, hi); return when the
    last byte has crossed the drive's link."""
    work = busy.shape[0] - 1
    start = max(now, busy[drive, COMMAND_COLUMN])
    slot = params.command_ns + (hi - lo) * params.command_ns_per_byte + params.path_command_ns
    busy[drive, COMMAND_COLUMN] = start + slot
    busy[work, WORK_COMMAND] += slot
    start += params.ctrl_latency_ns
    # Rate limiters take their admission time from `start`, which never decreases for one
    # drive; FIFO on the data's ready time would let one queued die stall every later transfer.
    link_time = (hi - lo) * params.link_ns_per_byte
    link = max(busy[drive, LINK_COLUMN], start) + link_time
    busy[drive, LINK_COLUMN] = link
    busy[work, WORK_LINK] += link_time
    done = link
    page = params.page_bytes
    n_channels = params.n_channels
    units = params.units_per_channel
    n_types = params.n_page_types
    first_unit_column = CHANNEL_COLUMN + n_channels
    for p in range(lo // page, (hi - 1) // page + 1):
        chunk = min(hi, (p + 1) * page) - max(lo, p * page)
        channel = p % n_channels
        unit = first_unit_column + channel * units + (p // n_channels) % units
        read = params.read_ns
        if n_types > 1:  # integer division and a tuple index only for drives with page types
            kind = (p // (n_channels * units)) % n_types
            times = params.read_ns_by_type  # constant indices: no copy of the tuple
            read = times[0] if kind == 0 else times[1] if kind == 1 else (
                times[2] if kind == 2 else times[3])
        if params.read_jitter > 0.0:
            read *= 1.0 + params.read_jitter * _unit_draw(params.seed, drive, p, now)
        sensed = max(start, busy[drive, unit]) + read
        busy[drive, unit] = sensed
        busy[work, WORK_MEDIA] += read
        transfer = chunk * params.channel_ns_per_byte
        channel_done = max(busy[drive, CHANNEL_COLUMN + channel], start) + transfer
        busy[drive, CHANNEL_COLUMN + channel] = channel_done
        busy[work, WORK_CHANNEL] += transfer
        done = max(done, max(sensed + transfer, channel_done) + chunk * params.link_ns_per_byte)
    return done


@numba.njit(nogil=True, cache=False, error_model="numpy")
def model_submit(state, params, now_ns, offset, nbytes):
    """Reserve the array's resources for one read; return its completion time.

    Parameters
    ----------
    state : ModelState
        Mutated in place. Not thread-safe: see :func:`model_submit_locked`.
    params : ModelParams
    now_ns : int
        Arrival time of the request, ns, on the caller's monotonic clock. Calls should come in
        (nearly) non-decreasing ``now_ns``: the model serves in call order.
    offset, nbytes : int
        Byte range in the array's address space (``offset`` >= 0, ``nbytes`` >= 1).

    Returns
    -------
    int
        Earliest time (ns, same clock) at which the read's completion may be posted.
    """
    busy = state.busy
    now = float(now_ns)
    # A uint64 offset (a page id times a page size) mixed with int64 would promote to float64.
    offset = np.int64(offset)
    nbytes = np.int64(nbytes)
    n_ssd = busy.shape[0] - 2
    work = n_ssd + 1
    stripe = params.stripe_bytes
    end = offset + nbytes
    first_stripe = offset // stripe
    last_stripe = (end - 1) // stripe
    done = now
    # Stripe units s, s + n_ssd, ... of one drive are adjacent on that drive, so a request
    # becomes one command with one contiguous local range per drive it touches.
    for j in range(min(last_stripe - first_stripe + 1, n_ssd)):
        first = first_stripe + j
        drive = first % n_ssd
        last = first + ((last_stripe - first) // n_ssd) * n_ssd
        lo = (first // n_ssd) * stripe + (offset - first * stripe if j == 0 else 0)
        hi = (last // n_ssd) * stripe + (end - last * stripe if last == last_stripe else stripe)
        # The host submits the array's commands one at a time (SQE, doorbell, completion).
        submitted = now
        if params.host_command_ns > 0.0:
            submitted = max(now, busy[n_ssd, HOST_COMMAND_COLUMN]) + params.host_command_ns
            busy[n_ssd, HOST_COMMAND_COLUMN] = submitted
            busy[work, WORK_HOST_COMMAND] += params.host_command_ns
        done = max(done, _drive_command(busy, params, drive, submitted, lo, hi))
    host_time = nbytes * params.host_ns_per_byte
    host = max(busy[n_ssd, HOST_LINK_COLUMN], now) + host_time
    busy[n_ssd, HOST_LINK_COLUMN] = host
    busy[work, WORK_HOST_LINK] += host_time
    return np.int64(math.ceil(max(done, host)))


def _word_pointer(context, builder, aryty, ary_value):
    ary = context.make_array(aryty)(context, builder, ary_value)
    zero = context.get_constant(types.intp, 0)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [zero], wraparound=False)


@intrinsic
def _try_lock(typingctx, words):
    """Compare-and-swap ``words[0]`` from 0 to 1 with acquire ordering; True if it was taken."""
    sig = types.boolean(words)

    def codegen(context, builder, sig, args):
        ptr = _word_pointer(context, builder, sig.args[0], args[0])
        zero = context.get_constant(types.int64, 0)
        one = context.get_constant(types.int64, 1)
        pair = builder.cmpxchg(ptr, zero, one, "acquire", "monotonic")
        return builder.extract_value(pair, 1)
    return sig, codegen


@intrinsic
def _lock_word(typingctx, words):
    """``words[0]``, reloaded on every call (a relaxed atomic load) so a spin loop sees changes."""
    sig = types.int64(words)

    def codegen(context, builder, sig, args):
        ptr = _word_pointer(context, builder, sig.args[0], args[0])
        return builder.load_atomic(ptr, "monotonic", 8)
    return sig, codegen


@intrinsic
def _unlock(typingctx, words):
    """``words[0] = 0`` with release ordering: the holder's state updates are seen first."""
    sig = types.void(words)

    def codegen(context, builder, sig, args):
        ptr = _word_pointer(context, builder, sig.args[0], args[0])
        builder.store_atomic(context.get_constant(types.int64, 0), ptr, "release", 8)
        return context.get_dummy_value()
    return sig, codegen


# Declared by symbol name (not a ctypes pointer), so that njit callers can be cached on disk.
_sched_yield = types.ExternalFunction("sched_yield", types.int32())
#: Reads of a held lock word before a waiter gives its core away: the lock is held ~50 ns, so a
#: longer wait means the holder was preempted, and spinning on would only delay it further.
LOCK_SPINS = 1000


@numba.njit(nogil=True, cache=False, inline="always")
def model_lock(state):
    """Take the spin lock in ``state.lock`` (for :func:`model_submit` calls by threads that
    share one model; :func:`model_unlock` releases it)."""
    # Test-and-test-and-set: waiters spin on a plain read, not on the cache-line-stealing CAS.
    while not _try_lock(state.lock):
        spins = 0
        while _lock_word(state.lock) != 0:
            spins += 1
            if spins == LOCK_SPINS:
                _sched_yield()
                spins = 0


@numba.njit(nogil=True, cache=False, inline="always")
def model_unlock(state):
    """Release the lock :func:`model_lock` took (the state's updates are seen first)."""
    _unlock(state.lock)


@numba.njit(nogil=True, cache=False, error_model="numpy")
def model_submit_locked(state, params, now_ns, offset, nbytes):
    """:func:`model_submit` under the spin lock in ``state.lock``: the call for daemon threads
    that share one model. Same arguments and result. (A thread with several requests at hand
    may take the lock once for all: :func:`model_lock`, ``model_submit`` each, then
    :func:`model_unlock`.)"""
    model_lock(state)
    done = model_submit(state, params, now_ns, offset, nbytes)
    model_unlock(state)
    return done


_SRC_GPU_NOTES = "GPU_NOTES.md, Published figures"
#: TLC pages by number of read voltages sensed, as in the common 2-3-2 Gray code (lower and
#: upper page 2, middle page 3); a page's sense time taken as proportional to it.
_TLC_READ_LEVELS = (2.0, 3.0, 2.0)
_TLC_LEVELS_SOURCE = ("assumed: 2-3-2 TLC coding, sense time proportional to the read "
                      "voltages sensed (vendors publish only the mean tR)")

PROFILES: dict[str, SsdProfile] = {}


def _register(profile: SsdProfile) -> None:
    PROFILES[profile.name] = profile


_register(SsdProfile(
    name="980pro",
    description="Samsung 980 PRO 1 TB: PCIe 4 x4 client drive, 8-channel controller, 128-layer TLC",
    media=NandMedia(channels=8, dies_per_channel=2, planes_per_die=4, page_bytes=16384,
                    read_us=36.45, channel_MBps=1200.0),
    pcie_gen=4, pcie_lanes=4, max_read_GBps=7.0, iops_cap=1.0e6, ctrl_latency_us=5.0,
    published=PublishedFigures(
        qd1_read_latency_us=Figure(
            1e6 / 22000, "Samsung 980 PRO data sheet: 22,000 IOPS 4 KiB random read QD1 (1 TB); "
            "not in GPU_NOTES.md; KitGuru measured 20,176 IOPS (49.6 us) for a comparable PCIe 4 "
            "TLC drive (Corsair MP600 PRO XT)"),
        rand_read_iops=Figure(1.0e6, _SRC_GPU_NOTES),
        seq_read_GBps=Figure(7.0, _SRC_GPU_NOTES)),
    sources={
        "channels": "8-channel Samsung Elpis controller (launch coverage)",
        "dies_per_channel": "1 TB of 512 Gbit dies = 16 dies over 8 channels",
        "planes_per_die": "assumed: 4 independently read planes (needed for 1 M IOPS from 16 dies)",
        "page_bytes": "assumed: 16 KiB, the usual TLC page",
        "read_us": "fitted so QD1 latency = published QD1 figure",
        "channel_MBps": "assumed: 1.2 GT/s Toggle-class 8-bit bus",
        "max_read_GBps": "fitted: published sequential read",
        "iops_cap": "fitted: published random-read IOPS",
        "ctrl_latency_us": "assumed: 5 us firmware + protocol (+ host stack in the QD1 figure)",
        "read_levels": _TLC_LEVELS_SOURCE,
    },
    read_levels=_TLC_READ_LEVELS))

_register(SsdProfile(
    name="pm1743",
    description="Samsung PM1743 7.68 TB: PCIe 5 x4 enterprise drive, TLC",
    media=NandMedia(channels=16, dies_per_channel=8, planes_per_die=4, page_bytes=16384,
                    read_us=52.12, channel_MBps=1600.0),
    pcie_gen=5, pcie_lanes=4, max_read_GBps=13.0, iops_cap=2.5e6, ctrl_latency_us=5.0,
    published=PublishedFigures(
        qd1_read_latency_us=Figure(
            60.0, "class figure: Samsung publishes no QD1 latency for the PM1743; this is the "
            "Micron 9550's 60 us typical read latency (same class), GPU_NOTES.md"),
        rand_read_iops=Figure(2.5e6, _SRC_GPU_NOTES + "; Samsung announcement (computerbase.de)"),
        seq_read_GBps=Figure(13.0, _SRC_GPU_NOTES + "; Samsung announcement (computerbase.de)")),
    sources={
        "channels": "assumed: 16, usual for enterprise controllers",
        "dies_per_channel": "7.68 TB of 512 Gbit dies = 120 dies, rounded to 8 per channel",
        "planes_per_die": "assumed: 4",
        "page_bytes": "assumed: 16 KiB",
        "read_us": "fitted so QD1 latency = the class figure",
        "channel_MBps": "assumed: 1.6 GT/s bus",
        "max_read_GBps": "fitted: published sequential read (below the 14.4 GB/s link)",
        "iops_cap": "fitted: published random-read IOPS",
        "ctrl_latency_us": "assumed: 5 us",
        "read_levels": _TLC_LEVELS_SOURCE,
    },
    read_levels=_TLC_READ_LEVELS))

_register(SsdProfile(
    name="micron9550",
    description="Micron 9550 PRO 7.68 TB: PCIe 5 x4 enterprise drive, 232-layer TLC",
    media=NandMedia(channels=16, dies_per_channel=4, planes_per_die=6, page_bytes=16384,
                    read_us=53.0, channel_MBps=2400.0),
    pcie_gen=5, pcie_lanes=4, max_read_GBps=14.0, iops_cap=3.3e6, ctrl_latency_us=5.0,
    published=PublishedFigures(
        qd1_read_latency_us=Figure(60.0, _SRC_GPU_NOTES + "; Micron 9550 spec table "
                                   "(storagereview.com 9550 MAX review): 60 us typical read"),
        rand_read_iops=Figure(3.3e6, _SRC_GPU_NOTES),
        seq_read_GBps=Figure(14.0, _SRC_GPU_NOTES)),
    sources={
        "channels": "assumed: 16",
        "dies_per_channel": "7.68 TB of 1 Tbit dies = 60 dies, rounded to 4 per channel",
        "planes_per_die": "Micron 232-layer NAND: six-plane die",
        "page_bytes": "assumed: 16 KiB",
        "read_us": "fitted so QD1 latency = published typical read latency",
        "channel_MBps": "Micron 232-layer NAND: 2.4 GB/s I/O",
        "max_read_GBps": "fitted: published sequential read (just below the 14.4 GB/s link)",
        "iops_cap": "fitted: published random-read IOPS",
        "ctrl_latency_us": "assumed: 5 us",
        "read_levels": _TLC_LEVELS_SOURCE,
    },
    read_levels=_TLC_READ_LEVELS))

#: 3D XPoint media read time: Izraelevitz et al., "Basic Performance Measurements of the Intel
#: Optane DC Persistent Memory Module" (arXiv 1903.05714, 2019) measured random loads from the
#: same media at ~305 ns, including the module's own controller; Intel (architecture day, 2018,
#: as quoted by pcper.com) put the DIMM's idle read latency at ~350 ns against ~10 us for an
#: Optane SSD. So a media unit is busy a few hundred ns
#: per access, and the rest of the SSD's latency is its controller, firmware and PCIe: a delay,
#: not a unit held busy (a burst of reads then collides far less on the units).
XPOINT_READ_US = 0.305
_XPOINT_READ_SOURCE = ("Izraelevitz et al. 2019 (arXiv 1903.05714): random loads from Optane DC "
                       "PMM (first-generation 3D XPoint) ~305 ns, the module's controller "
                       "included; taken as the time a unit is busy per access")

#: The P5800X's own 512 B random-read rate, measured where the drive, not the host, was the
#: limit: four of them, one polled io_uring thread each (t/io_uring's output: 512 B reads,
#: 20.36 M IOPS at 9.94 "GiB/s", which is MiB/s over 1000), "about 5.1M/drive, which is what
#: they can deliver".
_P5800X_512B_SOURCE = (
    "Jens Axboe, 'Re: [PATCH 00/15] Coalesced Interrupt Delivery with posted MSI' (LKML, kvm and "
    "iommu lists, 2024-02-08), https://lore.kernel.org/all/051cf099-9ecf-4f5a-a3ac-"
    "ee2d63a62fa6@kernel.dk/: 4 gen2 Optane drives, 'IOPS bound on the drive', 1 thread per "
    "drive, polled io_uring, 512 B random reads: IOPS=20.36M, 'about 5.1M/drive, which is what "
    "they can deliver'")

#: The P5800X's own latency of a 512 B random read: the "storage device" share of a read()
#: syscall's latency in XRP's breakdown (Table 1 of Zhong et al., "XRP: In-Kernel Storage
#: Functions with eBPF", OSDI'22; the draft in github.com/xrp-project/XRP, "XRP Draft.pdf"):
#: kernel crossing 351 ns, read syscall 199 ns, ext4 2,006 ns, bio 379 ns, NVMe driver 113 ns,
#: storage device 3,224 ns, 6.27 us in all (Linux 5.12, 6-core i5-8500 at 3 GHz, O_DIRECT, C-states
#: and turbo off). The device's share runs from the driver's doorbell to its completion handling,
#: so it includes the completion interrupt's delivery that a polled reader does not pay.
P5800X_DEVICE_READ_512B_US = 3.224
_P5800X_DEVICE_LATENCY_SOURCE = (
    "Zhong et al., 'XRP: In-Kernel Storage Functions with eBPF' (OSDI'22), Table 1: average "
    "latency breakdown of a 512 B random read() on an Intel Optane P5800X, 'storage device "
    "3224 ns' of 6.27 us (the rest: kernel crossing 351, read syscall 199, ext4 2006, bio 379, "
    "NVMe driver 113 ns); github.com/xrp-project/XRP, 'XRP Draft.pdf'")

_register(SsdProfile(
    name="p5800x",
    description="Intel Optane SSD DC P5800X: PCIe 4 x4, 3D XPoint media",
    media=XPointMedia(units=32, read_us=XPOINT_READ_US, access_bytes=4096),
    pcie_gen=4, pcie_lanes=4, max_read_GBps=None, iops_cap=1.5e6,
    # What the media read and the 512 B transfer over the link leave of the device's measured
    # 512 B latency.
    ctrl_latency_us=(P5800X_DEVICE_READ_512B_US - XPOINT_READ_US
                     - SMALL_REQUEST_BYTES / (pcie_payload_GBps(4, 4) * 1e3)),
    published=PublishedFigures(
        # Intel's brief bounds the QD1 latency ("< 6 us", GPU_NOTES.md: "about 5-6 us") rather
        # than stating a typical figure, so the profile is fitted to the measured 512 B device
        # latency instead; its 4 KiB QD1 read (3.7 us) stays within that bound.
        qd1_read_latency_us=None,
        rand_read_iops=Figure(1.5e6, _SRC_GPU_NOTES),
        seq_read_GBps=Figure(7.2, "Intel P5800X product brief: 7,200 MB/s 128 KiB sequential "
                             "read; not in GPU_NOTES.md"),
        small_read_iops=Figure(20.36e6 / 4, _P5800X_512B_SOURCE),
        small_read_latency_us=Figure(P5800X_DEVICE_READ_512B_US, _P5800X_DEVICE_LATENCY_SOURCE)),
    sources={
        "units": "assumed: 32 independent XPoint units (Intel does not publish the layout)",
        "read_us": _XPOINT_READ_SOURCE,
        "access_bytes": "4 KiB internal access (AnandTech P4800X review: performance needs >= 4 kB)",
        "max_read_GBps": "none: the 7.2 GB/s link is the published sequential figure",
        "iops_cap": "fitted: published 4 KiB random-read IOPS; with the measured 512 B rate "
                    "it splits into ~129 ns per command + bytes at 7.62 GB/s",
        "ctrl_latency_us": "fitted so the 512 B QD1 latency = the device's measured share "
                           "(XRP, OSDI'22: 3,224 ns), less the media read and the transfer; "
                           "before that source, fitted to the data sheet's bound (5.5 us at "
                           "4 KiB: 4.625 us), ~2 us slower than every measurement",
    }))

_register(SsdProfile(
    name="ideal",
    description="Ideal device: no media, controller or drive-link cost; only the host link limits",
    media=None,
    pcie_gen=None, pcie_lanes=0, max_read_GBps=None, iops_cap=None, ctrl_latency_us=0.0,
    published=PublishedFigures(
        qd1_read_latency_us=None,
        rand_read_iops=Figure(52.0e9 / 4096, "GPU_NOTES.md: PCIe limit for 4 KiB pages about "
                              "12.7 M/s (52 GB/s pinned H2D on the H200)"),
        seq_read_GBps=Figure(52.0, "GPU_NOTES.md: 52 GB/s pinned H2D on the H200")),
    sources={"media": "none by definition", "host link": "DEFAULT_HOST_LINK_GBPS"}))


def get_profile(name: str) -> SsdProfile:
    """The profile called ``name``; ValueError naming the valid ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown SSD profile {name!r}; valid profiles: {valid}") from None


class SsdModel:
    """An array of ``n_ssd`` identical drives striped every ``stripe_bytes``, with its state.

    Parameters
    ----------
    profile : str or SsdProfile
        A name from :data:`PROFILES` or a profile of one's own.
    n_ssd : int
        Drives in the array.
    stripe_bytes : int
        Striping unit: byte ``b`` of the array lives on drive ``(b // stripe_bytes) % n_ssd``.
        ``gids.Runtime`` passes its page size (one cache page per stripe unit).
    host_link_GBps : float or None
        Bandwidth of the link the whole array shares (the GPU's PCIe port); None: unlimited.
    host_command_ns : float
        Host-side cost of submitting one command, serialised across the array (0: free).
    path_command_ns : float
        Per-command cost of each drive's path to the issuer, served by each drive's command
        slot (0: free; :meth:`SsdProfile.model_params`).
    seed : int
        Seed of the media read-time jitter (profiles with ``read_jitter > 0``).

    Examples
    --------
    >>> model = SsdModel("980pro")
    >>> done = model.submit(0, 0, 4096)        # QD1 read at t = 0: ~41 us (a lower page)
    >>> state, params = model.njit_args()       # for a daemon's njit loop:
    >>> # done = model_submit_locked(state, params, now_ns, offset, nbytes)
    """

    def __init__(self, profile, n_ssd: int = 1, stripe_bytes: int = DEFAULT_STRIPE_BYTES,
                 host_link_GBps: float | None = DEFAULT_HOST_LINK_GBPS,
                 host_command_ns: float = 0.0, seed: int = 0, path_command_ns: float = 0.0):
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.n_ssd = int(n_ssd)
        self.stripe_bytes = int(stripe_bytes)
        self.host_link_GBps = host_link_GBps
        self.host_command_ns = float(host_command_ns)
        self.path_command_ns = float(path_command_ns)
        self.params = self.profile.model_params(self.stripe_bytes, host_link_GBps,
                                                self.host_command_ns, int(seed),
                                                self.path_command_ns)
        self.state = new_state(self.n_ssd, self.params)

    def submit(self, now_ns: int, offset: int, nbytes: int) -> int:
        """Completion time (ns) of a read of ``nbytes`` at ``offset`` arriving at ``now_ns``."""
        if nbytes < 1 or offset < 0:
            raise ValueError(f"need offset >= 0 and nbytes >= 1, got {offset}, {nbytes}")
        return int(model_submit_locked(self.state, self.params, now_ns, offset, nbytes))

    def njit_args(self) -> tuple[ModelState, ModelParams]:
        """``(state, params)``: pass both to :func:`model_submit_locked` from ``njit`` code."""
        return self.state, self.params

    def reset(self) -> None:
        """Make every resource idle again (as at construction)."""
        for array in self.state:
            array[...] = 0

    def utilisation(self, span_ns: float) -> dict[str, float]:
        """Share of ``span_ns`` each kind of resource was busy, averaged over its instances
        (drives, channels, units), from the work summed since construction or :meth:`reset`:
        a value near 1 names what bounds the run. Keys: :data:`WORK_NAMES`."""
        work = self.state.busy[self.n_ssd + 1]
        p = self.params
        span = max(float(span_ns), 1.0)
        counts = (self.n_ssd, self.n_ssd * p.n_channels * p.units_per_channel,
                  self.n_ssd * p.n_channels, self.n_ssd, 1, 1)
        return {name: float(work[k]) / (span * counts[k]) for k, name in enumerate(WORK_NAMES)}

    # Named views of ``state.busy`` (same memory), for reading the model from Python.
    @property
    def command_free(self) -> np.ndarray:
        """Per drive: when its controller takes the next command (ns)."""
        return self.state.busy[:self.n_ssd, COMMAND_COLUMN]

    @property
    def link_free(self) -> np.ndarray:
        """Per drive: up to when its link has admitted bytes (ns)."""
        return self.state.busy[:self.n_ssd, LINK_COLUMN]

    @property
    def channel_free(self) -> np.ndarray:
        """Per drive and channel: up to when the channel has admitted bytes (ns)."""
        return self.state.busy[:self.n_ssd, CHANNEL_COLUMN:CHANNEL_COLUMN + self.params.n_channels]

    @property
    def unit_free(self) -> np.ndarray:
        """Per drive, channel and unit (die plane): when the unit finishes its reads (ns)."""
        p = self.params
        first = CHANNEL_COLUMN + p.n_channels
        last = first + p.n_channels * p.units_per_channel
        return self.state.busy[:self.n_ssd, first:last].reshape(
            self.n_ssd, p.n_channels, p.units_per_channel)

    @property
    def host_free(self) -> float:
        """Up to when the shared host link has admitted bytes (ns)."""
        return float(self.state.busy[self.n_ssd, HOST_LINK_COLUMN])

    def __repr__(self) -> str:
        return (f"SsdModel({self.profile.name!r}, n_ssd={self.n_ssd}, "
                f"stripe_bytes={self.stripe_bytes}, host_link_GBps={self.host_link_GBps}, "
                f"host_command_ns={self.host_command_ns}, "
                f"path_command_ns={self.path_command_ns})")
