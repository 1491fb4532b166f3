"""Graph500 Kronecker graph generator, vectorised and chunked.

Follows the Graph500 specification's reference kernel (``kronecker_generator.m``, spec v3.0
section 3): ``N = 2**scale`` vertices, ``M = edgefactor * N`` edge tuples, each drawn by
``scale`` rounds of choosing one quadrant of the adjacency matrix with probabilities
``A, B, C, D`` (default 0.57, 0.19, 0.19, 0.05), then vertex ids scrambled by a permutation.

Two choices differ from the Octave reference, neither changing the distribution of graphs:

* Random numbers come from a counter-based generator (SplitMix64 applied to
  ``seed_key + counter * golden_gamma``, counter = edge index * 64 + round), so edge ``e`` is a
  pure function of ``(seed, scale, edgefactor, A, B, C, e)``. Any range of edges can be generated
  on its own: the graph is bit-for-bit the same whatever ``chunk_edges`` is, and chunks could be
  made in parallel.
* The vertex permutation is the reference C generator's ``scramble`` (graph500
  ``generator/graph_generator.c``): two rounds of "add, multiply by an odd constant, bit-reverse
  the low ``scale`` bits", a bijection on ``[0, 2**scale)`` that costs no memory, instead of
  ``randperm(N)`` (8 bytes per vertex). The Octave code's final shuffle of the edge list is left
  out: the tuples are drawn independently and identically, so their order is already exchangeable.

Self loops and repeated edges are part of a Graph500 edge list and are kept here; the CSR writer
can drop them.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import numpy as np

from .csr_file import CSRHeader, write_csr
from .edges import DEFAULT_CHUNK_EDGES, EdgeChunk

GRAPH500_EDGEFACTOR = 16
GRAPH500_A, GRAPH500_B, GRAPH500_C = 0.57, 0.19, 0.19

# Vertex ids must leave room for the counter (edge index * 64) in 64 bits; scale 40 already
# means 2**44 edge tuples, far past any single-node run.
MAX_SCALE = 40

_UINT64_MASK = (1 << 64) - 1
_GOLDEN_GAMMA_INT = 0x9E3779B97F4A7C15
_GOLDEN_GAMMA = np.uint64(_GOLDEN_GAMMA_INT)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Odd multipliers of the reference scramble (graph500 generator/graph_generator.c).
_SCRAMBLE_ODD0 = np.uint64(0x4519840211493211)
_SCRAMBLE_ODD1 = np.uint64(0x3050852102C843A5)
_ROUNDS_PER_EDGE = 64


def _splitmix64_finalise(z: np.ndarray, scratch: np.ndarray) -> None:
    """SplitMix64's output function, in place on a uint64 array (``scratch`` avoids temporaries)."""
    np.right_shift(z, np.uint64(30), out=scratch)
    z ^= scratch
    z *= _MIX1
    np.right_shift(z, np.uint64(27), out=scratch)
    z ^= scratch
    z *= _MIX2
    np.right_shift(z, np.uint64(31), out=scratch)
    z ^= scratch


def _bit_reverse64(x: np.ndarray) -> np.ndarray:
    """Reverse the bit order of each element of a uint64 array."""
    x = x.byteswap()
    for shift, mask in ((4, 0x0F0F0F0F0F0F0F0F), (2, 0x3333333333333333), (1, 0x5555555555555555)):
        s, m = np.uint64(shift), np.uint64(mask)
        x = ((x >> s) & m) | ((x & m) << s)
    return x


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
        Permuted ids, int64.

    Notes
    -----
    Adding a constant and multiplying by an odd number are bijections modulo ``2**64`` whose low
    ``scale`` bits depend only on the input's low ``scale`` bits; bit-reversing and shifting right
    by ``64 - scale`` returns those bits (reversed). Each round is therefore a bijection of
    ``scale``-bit numbers, and so is the composition.
    """
    shift = np.uint64(64 - scale)
    x = v.astype(np.uint64) + np.uint64((val0 + val1) & _UINT64_MASK)
    x *= np.uint64(val0) | _SCRAMBLE_ODD0
    x = _bit_reverse64(x) >> shift
    x *= np.uint64(val1) | _SCRAMBLE_ODD1
    x = _bit_reverse64(x) >> shift
    return x.astype(np.int64)


def _seed_keys(seed: int) -> tuple[int, int, int]:
    """Three well-mixed 64-bit keys from a user seed: the stream key and the scramble keys."""
    key, val0, val1 = np.random.SeedSequence(seed).generate_state(3, dtype=np.uint64)
    return int(key), int(val0), int(val1)


def _quadrant_thresholds(a: float, b: float, c: float) -> tuple[np.uint64, np.uint64, np.uint64]:
    """32-bit thresholds for the two Bernoulli draws of one Kronecker round.

    Row bit = 1 with probability ``C + D = 1 - (A + B)``; column bit = 1 with probability
    ``B / (A + B)`` in the top half and ``D / (C + D)`` in the bottom half (the Octave reference's
    ``a_norm`` and ``c_norm``). A draw ``u`` (uniform 32-bit) gives 1 when ``u >= threshold``.
    """
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < 0 or a + b <= 0 or c + d <= 0:
        raise ValueError(f"Kronecker probabilities A={a}, B={b}, C={c}, D={d} are not a distribution "
                         "with A + B > 0 and C + D > 0")
    as_threshold = lambda p: np.uint64(min(round(p * 2.0**32), 2**32))  # noqa: E731
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
    Memory: about six 8-byte words per edge at peak.
    """
    if not 1 <= scale <= MAX_SCALE:
        raise ValueError(f"scale must be in 1..{MAX_SCALE}, got {scale}")
    if not 0 <= start <= stop:
        raise ValueError(f"bad edge range {start}..{stop}")
    key, val0, val1 = _seed_keys(seed)
    row_threshold, top_col_threshold, bottom_col_threshold = _quadrant_thresholds(a, b, c)

    # SplitMix64 state for (edge e, round r) is key + (e * 64 + r + 1) * gamma, all mod 2**64;
    # ``base`` holds it for round 0 and each round adds one gamma.
    base = np.arange(start, stop, dtype=np.uint64) * np.uint64(_ROUNDS_PER_EDGE) + np.uint64(1)
    base *= _GOLDEN_GAMMA
    base += np.uint64(key)
    src = np.zeros(stop - start, dtype=np.uint64)
    dst = np.zeros(stop - start, dtype=np.uint64)
    z = np.empty_like(base)
    scratch = np.empty_like(base)
    low_mask = np.uint64(0xFFFFFFFF)
    for level in range(scale):
        # The round offset is formed in Python ints: numpy warns on uint64 *scalar* overflow.
        np.add(base, np.uint64(_GOLDEN_GAMMA_INT * level & _UINT64_MASK), out=z)
        _splitmix64_finalise(z, scratch)
        row_bit = (z >> np.uint64(32)) >= row_threshold
        col_threshold = np.where(row_bit, bottom_col_threshold, top_col_threshold)
        col_bit = (z & low_mask) >= col_threshold
        src |= row_bit.astype(np.uint64) << np.uint64(level)
        dst |= col_bit.astype(np.uint64) << np.uint64(level)
    if scramble:
        return scramble_vertices(src, scale, val0, val1), scramble_vertices(dst, scale, val0, val1)
    return src.astype(np.int64), dst.astype(np.int64)


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
                           progress: Callable[[int, int], None] | None = None) -> CSRHeader:
    """Generate a Graph500 Kronecker graph straight into a CSR file.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (see ``docs/formats-graph.md``); written to ``path + ".tmp"`` and renamed, so
        a crash never leaves a half-written file under the final name.
    scale, edgefactor, seed
        As in :class:`KroneckerEdges`.
    chunk_edges : int
        Memory budget: edges generated, and CSR entries sorted, per step. Peak memory is roughly
        ``40 * chunk_edges + 16 * 2**scale`` bytes, independent of the total number of edges.
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
