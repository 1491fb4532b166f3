"""One hop of uniform neighbour sampling without replacement over a CSR graph.

A thread takes a frontier vertex ``v`` (degree ``d = offsets[v+1] - offsets[v]``) and picks
``min(d, k)`` distinct positions of its adjacency list: all of them where ``d <= k``, else ``k``
by Floyd's algorithm (for ``j`` from ``d - k`` to ``d - 1``: draw ``t`` in ``0..j``; take ``t``,
or ``j`` if ``t`` was taken already), each draw a hash of ``(key, v, j)``, so a sample depends
only on the key and the vertex: the same for a seed, whatever the launch geometry. It reads the
neighbour at each position through a reader (``gids.read`` for a graph read through the cache)
and writes it to ``out[f * k + c]``, ``-1`` in the slots it leaves empty.
"""
from functools import lru_cache

import numpy as np
from numba import cuda

from kernels.platform import SIMULATOR, device_helper, jit

#: The largest fan-out a hop may have (Floyd's chosen positions live in a local array).
MAX_FANOUT = 64

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


if SIMULATOR:
    # Python integers, masked: numpy's uint64 scalars warn on the wrap-around the hash relies on.
    _MASK = (1 << 64) - 1

    def mix64(x):
        x = ((x ^ (x >> 30)) * int(_M1)) & _MASK
        x = ((x ^ (x >> 27)) * int(_M2)) & _MASK
        return x ^ (x >> 31)

    def draw(key, v, j):
        x = mix64((int(key) & _MASK) ^ mix64((int(v) * int(_GOLDEN) + int(j)) & _MASK))
        return np.int64(x % (int(j) + 1))
else:
    @device_helper
    def mix64(x):
        """splitmix64's finaliser: a 64-bit value whose bits all depend on every bit of ``x``."""
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))

    @device_helper
    def draw(key, v, j):
        """A uniform integer in ``0 .. j`` for draw ``j`` of vertex ``v`` under ``key``."""
        x = mix64(np.uint64(key) ^ mix64(np.uint64(v) * _GOLDEN + np.uint64(j)))
        return np.int64(x % np.uint64(j + 1))


@lru_cache(maxsize=None)
def sample_hop_template(read):
    """The kernel ``(h, offsets, frontier, k, key, out)`` over a neighbour reader
    ``read(h, i)``. ``k <= MAX_FANOUT``."""

    @jit
    def sample_hop(h, offsets, frontier, k, key, out):
        chosen = cuda.local.array(MAX_FANOUT, np.int64)
        for f in range(cuda.grid(1), frontier.size, cuda.gridsize(1)):
            v = np.int64(frontier[f])
            n = 0
            d = 0
            start = 0
            # An id that is not a vertex (a corrupt neighbours section) samples nothing: it
            # must not index offsets (the host's checks catch seeds; the gather, the rest).
            if v >= 0 and v < offsets.size - 1:
                start = offsets[v]
                d = offsets[v + 1] - start
                n = min(d, k)
            if d <= k:
                for c in range(n):
                    chosen[c] = c
            else:
                m = 0
                for j in range(d - k, d):
                    t = draw(key, v, j)
                    for c in range(m):
                        if chosen[c] == t:
                            t = j
                            break
                    chosen[m] = t
                    m += 1
            for c in range(n):
                out[f * k + c] = np.int64(read(h, start + chosen[c]))
            for c in range(n, k):
                out[f * k + c] = -1
    return sample_hop


def sample_hop_kernel():
    """The kernel for a graph whose neighbours are read through the gids cache."""
    from kernels.access import read
    return sample_hop_template(read)
