"""Counters of a Runtime's page cache, read after kernels finish."""
from dataclasses import dataclass, fields

from host_daemon.stores import F_READ_BYTES, F_READ_NS, F_READS, F_WRITE_BYTES, F_WRITE_NS, F_WRITES


def _mean_us(total_ns, count):
    """``total_ns / count`` in microseconds (0 for no count)."""
    return total_ns / count / 1e3 if count else 0.0


@dataclass(frozen=True)
class FileStats:
    """I/O on one store file (each file of a striped store has its own): completed reads and
    writes, their bytes, and the time their store calls took (``pread``/``pwrite`` as the daemon
    or the NVMe controller timed them, or the host's write-back in ``flush``). Bytes are those
    transferred: the last page of an array that ends inside it counts only its own bytes."""

    path: str
    reads: int = 0
    bytes_read: int = 0
    read_ns: int = 0
    writes: int = 0
    bytes_written: int = 0
    write_ns: int = 0

    @classmethod
    def from_counts(cls, path, row):
        """From a row of the per-file counters (``host_daemon.stores.F_*`` columns)."""
        return cls(path, int(row[F_READS]), int(row[F_READ_BYTES]), int(row[F_READ_NS]),
                   int(row[F_WRITES]), int(row[F_WRITE_BYTES]), int(row[F_WRITE_NS]))

    @property
    def ios(self):
        return self.reads + self.writes

    @property
    def read_latency_us(self):
        """Mean microseconds per read."""
        return _mean_us(self.read_ns, self.reads)

    @property
    def write_latency_us(self):
        """Mean microseconds per write."""
        return _mean_us(self.write_ns, self.writes)

    @property
    def latency_us(self):
        """Mean microseconds per I/O, reads and writes together."""
        return _mean_us(self.read_ns + self.write_ns, self.ios)

    def __sub__(self, other):
        return FileStats(self.path, *(getattr(self, f.name) - getattr(other, f.name)
                                      for f in fields(self)[1:]))

    def __str__(self):
        return (f"{self.path}: {self.reads:,} reads ({self.bytes_read:,} B, "
                f"{self.read_latency_us:.1f} us), {self.writes:,} writes "
                f"({self.bytes_written:,} B, {self.write_latency_us:.1f} us)")


@dataclass(frozen=True)
class Stats:
    """Cache and I/O counters.

    ``hits`` and ``misses`` count page lookups (reads and writes): threads of a warp that use
    the same page share one lookup. A miss either loaded the page (one I/O) or waited for the
    thread loading it. ``writebacks`` counts dirty pages a kernel wrote back when it evicted
    them (among ``evictions``); ``flushed`` counts dirty pages written back from the host
    (``Runtime.flush``, ``invalidate``, recovery after an error, closing); ``bytes_written``
    is both, in whole pages.

    Where the misses' time went (summed over lookups, in nanoseconds, measured on the GPU):
    ``io_ns`` from each request's submission to its completion (so ``io_ns / ios`` is the
    I/O latency the kernels saw, queueing included), ``miss_ns`` over each miss's whole slow
    path (a slot, a write-back, the request and the page copy, or the wait for another warp's
    load: ``miss_ns / misses``). ``slot_retries`` counts the rounds in which a loader found no
    evictable slot (too many pages in use or in flight for the cache).

    ``bulk_copies`` counts the pages (among ``ios``) that a warp of few lanes copied from host
    memory into the cache by bulk copy (TMA, compute capability 9.0 and up; the others were
    copied by the warp's own loads); ``early_copies`` those of them whose copy started while
    the request was out (a read-only array of a zero-copy ``MemoryStore``: the copy runs during
    the I/O's round trip).

    The host tier (``rt.host_tier``): ``tier_hits`` counts misses whose loader copied the page
    from the tier into its slot (no I/O: not among ``ios``), ``tier_direct`` page lookups of
    direct mode answered by reading the elements from the tier (not among ``misses``),
    ``tier_fills`` and ``tier_evictions`` pages put in the tier and dropped from it (by
    ``host_tier.clear``, ``invalidate``, or a write-back that made the tier's copy stale).

    ``files``: a :class:`FileStats` per file of the Runtime's file stores (one per stripe file
    of a striped store), in the order they were opened; stores in RAM have none.

    Two parts of ``io_ns`` and after it, summed over I/Os: ``submit_ns`` from a loader's ticket
    to its request published (the wait for its queue entry, the record's stores to host memory),
    ``copy_ns`` from the completion seen to the page in its slot, visible GPU-wide. Before the
    request, ``claim_ns``: a loader's time finding its slot (the clock's scan and the victim's
    unmapping, retries included).

    Window hints (:mod:`gids.window`): ``prefetched`` counts the pages ``Runtime.prefetch``
    named (device indices: each index), ``held_pages`` the pages ``Runtime.hold`` pinned (over
    all holds; ``Runtime.held_pages`` is how many are held now).
    """

    hits: int = 0
    misses: int = 0
    ios: int = 0
    bytes_read: int = 0
    evictions: int = 0
    writebacks: int = 0
    flushed: int = 0
    bytes_written: int = 0
    io_ns: int = 0
    miss_ns: int = 0
    slot_retries: int = 0
    bulk_copies: int = 0
    submit_ns: int = 0
    copy_ns: int = 0
    claim_ns: int = 0
    early_copies: int = 0
    tier_hits: int = 0
    tier_direct: int = 0
    tier_fills: int = 0
    tier_evictions: int = 0
    prefetched: int = 0
    held_pages: int = 0
    files: tuple = ()
    #: The host daemon's storage engine in use ("io_uring" or "threads"), and why it is not the
    #: one asked for ("" when it is).
    engine: str = ""
    engine_note: str = ""
    #: Whether the io_uring engine's rings use registered buffers, and if not why
    #: (``HostDaemon.buffers_note``; "" for the threads engine).
    engine_buffers: str = ""

    @property
    def lookups(self):
        return self.hits + self.misses

    @property
    def hit_rate(self):
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def io_latency_us(self):
        """Mean microseconds from a request's submission to its completion, as kernels saw it."""
        return _mean_us(self.io_ns, self.ios)

    @property
    def miss_latency_us(self):
        """Mean microseconds a miss spent on the slow path (including waits for other loads)."""
        return _mean_us(self.miss_ns, self.misses)

    @property
    def submit_latency_us(self):
        """Mean microseconds from a loader's ticket to its request published (part of I/O)."""
        return _mean_us(self.submit_ns, self.ios)

    @property
    def copy_latency_us(self):
        """Mean microseconds from a completion seen to its page in the slot, visible."""
        return _mean_us(self.copy_ns, self.ios)

    @property
    def claim_latency_us(self):
        """Mean microseconds a loader spent finding its slot, per I/O."""
        return _mean_us(self.claim_ns, self.ios)

    def __sub__(self, other):
        before = {f.path: f for f in other.files}
        files = tuple(f - before[f.path] if f.path in before else f for f in self.files)
        return Stats(**{f.name: (getattr(self, f.name) - getattr(other, f.name)
                                 if f.type is int or f.type == "int" else getattr(self, f.name))
                        for f in fields(self) if f.name != "files"}, files=files)

    def __str__(self):
        return (f"lookups {self.lookups:,} (hits {self.hits:,}, misses {self.misses:,}, "
                f"hit rate {self.hit_rate:.1%}), I/Os {self.ios:,}, "
                f"bytes read {self.bytes_read:,}, evictions {self.evictions:,} "
                f"(write-backs {self.writebacks:,}), flushed {self.flushed:,}, "
                f"bytes written {self.bytes_written:,}, mean I/O {self.io_latency_us:.1f} us, "
                f"mean miss {self.miss_latency_us:.1f} us, slot retries {self.slot_retries:,}, "
                f"bulk copies {self.bulk_copies:,} (early {self.early_copies:,}), "
                + (f"host tier: hits {self.tier_hits:,}, direct {self.tier_direct:,}, "
                   f"fills {self.tier_fills:,}, evictions {self.tier_evictions:,}, "
                   if self.tier_hits or self.tier_direct or self.tier_fills else "")
                + f"engine {self.engine or '-'}"
                + (f" ({self.engine_note})" if self.engine_note else "")
                + (f", {self.engine_buffers}" if self.engine_buffers else ""))
