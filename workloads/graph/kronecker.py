"""Graph500 Kronecker graph generator, chunked and multi-core.

Follows the Graph500 specification's reference kernel (``kronecker_generator.m``, spec v3.0
section 3): ``N = 2**scale`` vertices, ``M = edgefactor * N`` edge tuples, each drawn by
``scale`` rounds of choosing one quadrant of the adjacency matrix with probabilities
``A, B, C, D`` (default 0.57, 0.19, 0.19, 0.05), then vertex ids scrambled by a permutation.

Where this differs from the Octave reference (none of it changes the distribution of graphs):

* Random numbers come from a counter-based generator (SplitMix64 applied to
  ``seed_key + (counter + 1) * golden_gamma``, counter = edge index * 64 + hash number, each
  64-bit hash giving the four 16-bit draws of two rounds), so edge ``e`` is a
  pure function of ``(seed, scale, A, B, C, e)``. Any range of edges can be generated
  on its own: the graph is bit-for-bit the same whatever ``chunk_edges`` is, and slices of a
  chunk are made in parallel (:mod:`workloads.graph.parallel`).
* The vertex permutation is the reference C generator's ``scramble`` (graph500
  ``generator/graph_generator.c``): two rounds of "add, multiply by an odd constant, bit-reverse
  the low ``scale`` bits", a bijection on ``[0, 2**scale)`` that costs no memory, instead of
  ``randperm(N)`` (8 bytes per vertex).
* The Octave code's final shuffle of the edge list is left out: the tuples are drawn
  independently and identically, so their order is already exchangeable.

Self loops and repeated edges are part of a Graph500 edge list and are kept here; the CSR writer
can drop them.

The per-edge work is one ``numba.njit`` loop (:func:`_kronecker_kernel`): every step is 64-bit
integer arithmetic, which numba compiles to straight-line code, where numpy needed a dozen
temporaries per round. ``tests/test_graph_generate.py`` checks it against a pure-Python
transcription of the definition above.
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
from numba import njit

from . import parallel
from .csr_file import CSRHeader, Progress, write_csr
from .edges import DEFAULT_CHUNK_EDGES, EdgeChunk

GRAPH500_EDGEFACTOR = 16
GRAPH500_A, GRAPH500_B, GRAPH500_C = 0.57, 0.19, 0.19

# The hash counter (edge index * 64) must fit in 64 bits; scale 40 already means 2**44 edge
# tuples at edgefactor 16, far past any single-node run.
MAX_SCALE = 40

# Constants are numpy uint64 scalars so that numba types every expression that uses them as
# uint64 (a plain Python int below 2**63 is int64 to numba, and uint64 op int64 gives float64).
_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Odd multipliers of the reference scramble (graph500 generator/graph_generator.c).
_SCRAMBLE_ODD0 = np.uint64(0x4519840211493211)
_SCRAMBLE_ODD1 = np.uint64(0x3050852102C843A5)
# Hash counters per edge: room for 64 (scale <= 40 needs at most 20), so (edge, hash) pairs
# never collide.
_HASHES_PER_EDGE = np.uint64(64)
_U64_1, _U64_16, _U64_32 = np.uint64(1), np.uint64(16), np.uint64(32)
_LOW_16_BITS = np.uint64(0xFFFF)
# Masks of the bit-reversal swaps of 1-, 2-, 4-, 8- and 16-bit fields.
_M1, _M2 = np.uint64(0x5555555555555555), np.uint64(0x3333333333333333)
_M4, _M8 = np.uint64(0x0F0F0F0F0F0F0F0F), np.uint64(0x00FF00FF00FF00FF)
_M16 = np.uint64(0x0000FFFF0000FFFF)
# Edges per task handed to a thread: below this a chunk is made in the calling thread alone.
_MIN_EDGES_PER_TASK = 1 << 15


@njit(nogil=True, cache=True)
def _splitmix64(state):
    """SplitMix64's output function of one uint64 state."""
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


#: SplitMix64's output function and its counter step, for other counter-based generators
#: (``workloads.gnn.dataset``'s feature rows).
splitmix64 = _splitmix64
GOLDEN_GAMMA = _GOLDEN_GAMMA


@njit(nogil=True, cache=True)
def _bit_reverse_64(x):
    """The 64-bit word with its bits in reverse order (swap halves of ever smaller fields)."""
    x = ((x >> _U64_1) & _M1) | ((x & _M1) << _U64_1)
    x = ((x >> np.uint64(2)) & _M2) | ((x & _M2) << np.uint64(2))
    x = ((x >> np.uint64(4)) & _M4) | ((x & _M4) << np.uint64(4))
    x = ((x >> np.uint64(8)) & _M8) | ((x & _M8) << np.uint64(8))
    x = ((x >> _U64_16) & _M16) | ((x & _M16) << _U64_16)
    return (x >> _U64_32) | (x << _U64_32)


@njit(nogil=True, cache=True)
def _scramble(v, drop_bits, val0, val1):
    """graph500 ``scramble``: ``drop_bits = 64 - scale``; all arguments uint64."""
    x = v + val0 + val1
    x *= val0 | _SCRAMBLE_ODD0
    x = _bit_reverse_64(x) >> drop_bits
    x *= val1 | _SCRAMBLE_ODD1
    return _bit_reverse_64(x) >> drop_bits


@njit(nogil=True, cache=True)
def _scramble_kernel(v, out, scale, val0, val1):
    drop_bits = np.uint64(64 - scale)
    for i in range(v.size):
        out[i] = np.int64(_scramble(np.uint64(v[i]), drop_bits, val0, val1))


@njit(nogil=True, cache=True)
def _round_bits(draws, row_threshold, top_col_threshold, col_threshold_step):
    """Row and column bit (uint64 0 or 1) of one round from the low 32 bits of a hash.

    The column threshold is chosen without a branch: the row bit is 1 a quarter of the time, too
    often for the branch predictor. ``col_threshold_step`` may have wrapped; so does the sum.
    """
    row = np.uint64((draws & _LOW_16_BITS) >= row_threshold)
    col_threshold = top_col_threshold + row * col_threshold_step
    col = np.uint64(((draws >> _U64_16) & _LOW_16_BITS) >= col_threshold)
    return row, col


@njit(nogil=True, cache=True)
def _kronecker_kernel(first_edge, src, dst, scale, key, row_threshold, top_col_threshold,
                      bottom_col_threshold, scramble, val0, val1):
    """Edges ``first_edge .. first_edge + src.size - 1`` into ``src``, ``dst`` (int64).

    All integers but ``first_edge`` and ``scale`` are uint64. Rounds ``2h`` and ``2h + 1`` of edge
    ``e`` use hash ``h``, SplitMix64 of ``key + (e * 64 + h + 1) * gamma``: of its four
    little-endian 16-bit fields, 0 and 2 are the rounds' row draws, 1 and 3 their column draws.
    Round ``k``'s row draw sets bit ``k`` of the source, its column draw (the threshold chosen by
    the row bit) bit ``k`` of the destination.
    """
    drop_bits = np.uint64(64 - scale)
    step = bottom_col_threshold - top_col_threshold
    for i in range(src.size):
        state = key + (np.uint64(first_edge + i) * _HASHES_PER_EDGE + _U64_1) * _GOLDEN_GAMMA
        u = np.uint64(0)
        v = np.uint64(0)
        # Two rounds written out per hash: 2.5 times faster than a loop over rounds.
        for k in range(0, scale, 2):
            z = _splitmix64(state)
            state += _GOLDEN_GAMMA  # the next hash number
            row, col = _round_bits(z, row_threshold, top_col_threshold, step)
            u |= row << np.uint64(k)
            v |= col << np.uint64(k)
            if k + 1 < scale:
                row, col = _round_bits(z >> _U64_32, row_threshold, top_col_threshold, step)
                u |= row << np.uint64(k + 1)
                v |= col << np.uint64(k + 1)
        if scramble:
            u = _scramble(u, drop_bits, val0, val1)
            v = _scramble(v, drop_bits, val0, val1)
        src[i] = np.int64(u)
        dst[i] = np.int64(v)


def scramble_vertices(v: np.ndarray, scale: int, val0: int, val1: int) -> np.ndarray:
    """Graph500's vertex permutation: a bijection on ``[0, 2**scale)`` keyed by ``val0, val1``.

    Parameters
    ----------
    v : numpy.ndarray
        Vertex ids in ``[0, 2**scale)``.
    scale : int
        log2 of the number of vertices, 1 to :data:`MAX_SCALE`.
    val0, val1 : int
        64-bit keys (the reference draws them from its seeded generator).

    Returns
    -------
    numpy.ndarray
        Permuted ids, int64: ``scramble(v)`` of graph500 ``generator/graph_generator.c``.

    Notes
    -----
    Adding a constant and multiplying by an odd number are bijections modulo ``2**64`` whose low
    ``scale`` bits depend only on the input's low ``scale`` bits; bit-reversing and shifting right
    by ``64 - scale`` returns those bits (reversed). Each round is therefore a bijection of
    ``scale``-bit numbers, and so is the composition.
    """
    flat = np.ascontiguousarray(v, dtype=np.int64).ravel()
    out = np.empty_like(flat)
    _scramble_kernel(flat, out, scale, np.uint64(val0), np.uint64(val1))
    return out.reshape(np.shape(v))


def _seed_keys(seed: int) -> tuple[int, int, int]:
    """Three well-mixed 64-bit keys from a user seed: the stream key and the scramble keys."""
    key, val0, val1 = np.random.SeedSequence(seed).generate_state(3, dtype=np.uint64)
    return int(key), int(val0), int(val1)


def _quadrant_thresholds(a: float, b: float, c: float) -> tuple[np.uint32, np.uint32, np.uint32]:
    """16-bit thresholds for the two Bernoulli draws of one Kronecker round.

    Row bit = 1 with probability ``C + D = 1 - (A + B)``; column bit = 1 with probability
    ``B / (A + B)`` in the top half and ``D / (C + D)`` in the bottom half (the Octave reference's
    ``a_norm`` and ``c_norm``). A 16-bit uniform draw ``u`` gives 1 when ``u >= threshold``, so
    probabilities are resolved to 1/65536 (the reference C generator resolves them to 1/10000).
    Thresholds are uint32 so that 65536 (probability 0 of a 1) is representable.
    """
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < -1e-12 or a + b <= 0 or c + d <= 0:
        raise ValueError(f"Kronecker probabilities A={a}, B={b}, C={c}, D={d} are not a distribution "
                         "with A + B > 0 and C + D > 0")
    d = max(d, 0.0)
    as_threshold = lambda p: np.uint32(min(round(p * 65536), 65536))  # noqa: E731
    return as_threshold(a + b), as_threshold(a / (a + b)), as_threshold(c / (c + d))


def kronecker_edges(scale: int, start: int, stop: int, *, seed: int = 0,
                    a: float = GRAPH500_A, b: float = GRAPH500_B, c: float = GRAPH500_C,
                    scramble: bool = True) -> EdgeChunk:
    """Edge tuples ``start .. stop - 1`` of a Kronecker graph.

    Parameters
    ----------
    scale : int
        The graph has ``2**scale`` vertices.
    start, stop : int
        Range of edge indices. The total number of edges (``edgefactor * 2**scale``) does not enter:
        edge ``e`` is the same whichever range it is generated in.
    seed : int
        Any non-negative integer; the same seed gives the same graph.
    a, b, c : float
        Quadrant probabilities; ``D = 1 - a - b - c``.
    scramble : bool
        Apply the Graph500 vertex permutation. Without it, low ids are the high-degree vertices,
        which is handy for looking at the structure and wrong for benchmarks (it gives caches an
        unrealistically easy time).

    Returns
    -------
    (src, dst) : tuple of numpy.ndarray
        Two int64 arrays of ``stop - start`` vertex ids.

    Notes
    -----
    The range is cut into one slice per thread (:mod:`workloads.graph.parallel`), each made by
    :func:`_kronecker_kernel`: about 60 M edges/s per core at scale 20, ten times the earlier
    vectorised numpy code. No memory beyond the 16-byte-per-edge result.
    """
    if not 1 <= scale <= MAX_SCALE:
        raise ValueError(f"scale must be in 1..{MAX_SCALE}, got {scale}")
    if not 0 <= start <= stop:
        raise ValueError(f"bad edge range {start}..{stop}")
    key, val0, val1 = (np.uint64(k) for k in _seed_keys(seed))
    thresholds = [np.uint64(t) for t in _quadrant_thresholds(a, b, c)]
    src = np.empty(stop - start, dtype=np.int64)
    dst = np.empty(stop - start, dtype=np.int64)

    def make(lo, hi):
        _kronecker_kernel(start + lo, src[lo:hi], dst[lo:hi], scale, key, *thresholds, scramble,
                          val0, val1)

    parallel.run_all(make, parallel.split(stop - start, _MIN_EDGES_PER_TASK))
    return src, dst


class KroneckerEdges:
    """A Graph500 Kronecker graph as an :class:`~workloads.graph.edges.EdgeSource`.

    Parameters
    ----------
    scale : int
        ``2**scale`` vertices.
    edgefactor : int
        Edge tuples per vertex; Graph500 uses 16.
    seed : int
        Same seed, same graph (bit for bit, whatever the chunk size).
    a, b, c : float
        Quadrant probabilities, Graph500's 0.57, 0.19, 0.19 by default (D = 0.05).
    scramble : bool
        Apply the Graph500 vertex permutation (see :func:`kronecker_edges`).

    Examples
    --------
    >>> g = KroneckerEdges(scale=10, seed=1)
    >>> g.n_vertices, g.n_edges
    (1024, 16384)
    """

    def __init__(self, scale: int, edgefactor: int = GRAPH500_EDGEFACTOR, *, seed: int = 0,
                 a: float = GRAPH500_A, b: float = GRAPH500_B, c: float = GRAPH500_C,
                 scramble: bool = True):
        if edgefactor < 1:
            raise ValueError(f"edgefactor must be at least 1, got {edgefactor}")
        _quadrant_thresholds(a, b, c)  # fail at construction, not in the middle of a write
        if not 1 <= scale <= MAX_SCALE:
            raise ValueError(f"scale must be in 1..{MAX_SCALE}, got {scale}")
        self.scale, self.edgefactor, self.seed = scale, edgefactor, seed
        self.a, self.b, self.c = a, b, c
        self.scramble = scramble
        self.n_vertices = 1 << scale
        self.n_edges = edgefactor << scale

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[EdgeChunk]:
        for start in range(0, self.n_edges, chunk_edges):
            yield kronecker_edges(self.scale, start, min(start + chunk_edges, self.n_edges),
                                  seed=self.seed, a=self.a, b=self.b, c=self.c,
                                  scramble=self.scramble)

    def metadata(self) -> dict:
        """Provenance to store in the CSR header, so a result can name the exact graph."""
        return {"generator": "graph500-kronecker", "scale": self.scale,
                "edgefactor": self.edgefactor, "seed": self.seed, "A": self.a, "B": self.b,
                "C": self.c, "scramble": self.scramble, "rng": "splitmix64-counter-v1"}


def generate_kronecker_csr(path: str | os.PathLike, scale: int,
                           edgefactor: int = GRAPH500_EDGEFACTOR, *, seed: int = 0,
                           chunk_edges: int = DEFAULT_CHUNK_EDGES, drop_self_loops: bool = False,
                           drop_duplicates: bool = False, tmp_dir: str | os.PathLike | None = None,
                           progress: Progress | None = None) -> CSRHeader:
    """Generate a Graph500 Kronecker graph straight into a CSR file.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (see ``docs/formats.md (graph section)``); written to ``path + ".tmp"`` and renamed, so
        a crash never leaves a half-written file under the final name.
    scale, edgefactor, seed
        As in :class:`KroneckerEdges`.
    chunk_edges : int
        Memory budget: edges generated, and CSR entries sorted, per step. Peak memory is about
        ``50 * chunk_edges + 16 * 2**scale`` bytes (measured), independent of the edge count.
    drop_self_loops, drop_duplicates : bool
        Graph500 keeps both (its BFS must tolerate them); drop them for a simple graph.
    tmp_dir : str or os.PathLike, optional
        Where the edge spill file goes (default: next to ``path``); needs room for
        ``2 * 2 * edgefactor * 2**scale`` vertex ids.
    progress : callable, optional
        ``progress(done, total)``, called as work advances (arbitrary but monotone units).

    Returns
    -------
    CSRHeader
        The header of the written file.
    """
    source = KroneckerEdges(scale, edgefactor, seed=seed)
    return write_csr(path, source, chunk_edges=chunk_edges, drop_self_loops=drop_self_loops,
                     drop_duplicates=drop_duplicates, tmp_dir=tmp_dir, progress=progress,
                     metadata=source.metadata())
