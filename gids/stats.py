"""Counters of a Runtime's page cache, read after kernels finish."""
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Stats:
    """Cache and I/O counters.

    ``hits`` and ``misses`` count page lookups (reads and writes): threads of a warp that use
    the same page share one lookup. A miss either loaded the page (one I/O) or waited for the
    thread loading it. ``writebacks`` counts dirty pages a kernel wrote back when it evicted
    them (among ``evictions``); ``flushed`` counts dirty pages written back from the host
    (``Runtime.flush``, ``invalidate``, recovery after an error, closing); ``bytes_written``
    is both, in whole pages.
    """

    hits: int = 0
    misses: int = 0
    ios: int = 0
    bytes_read: int = 0
    evictions: int = 0
    writebacks: int = 0
    flushed: int = 0
    bytes_written: int = 0

    @property
    def lookups(self):
        return self.hits + self.misses

    @property
    def hit_rate(self):
        return self.hits / self.lookups if self.lookups else 0.0

    def __sub__(self, other):
        return Stats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __str__(self):
        return (f"lookups {self.lookups:,} (hits {self.hits:,}, misses {self.misses:,}, "
                f"hit rate {self.hit_rate:.1%}), I/Os {self.ios:,}, "
                f"bytes read {self.bytes_read:,}, evictions {self.evictions:,} "
                f"(write-backs {self.writebacks:,}), flushed {self.flushed:,}, "
                f"bytes written {self.bytes_written:,}")
