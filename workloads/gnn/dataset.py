"""A synthetic IGB-like node-classification data set: a Kronecker graph, a float32 feature row
per vertex in a file, and labels planted in the features.

Vertex ``v``'s class is ``c(v) = mix(v) mod classes``; its feature row is standard normal
noise plus ``mu[c(v)]``, ``mu`` a random unit-norm direction per class scaled by
``SIGNAL * sqrt(dim)``: a model of the row alone beats chance by far, so a training run's
accuracy says whether the rows it was fed were right.

The noise is counter-based: the pair of elements ``2p, 2p + 1`` of row ``v`` is Marsaglia's
polar method over SplitMix64 hashes of counters ``(v * pairs + p) * 64 + 1, 2, ...``, keyed
by the seed (``docs/formats.md``). Every row is a pure function of ``(seed, v)``, so the file
is written by all cores at once (an ``njit(nogil=True)`` kernel per slice of rows, each slice
``pwrite``-n where it belongs) and is the same whatever the thread count: at scale 22 with
1024-float rows (17 GB) the features take seconds where one numpy stream took minutes.

Files (in ``directory``, named by every parameter that changes their bytes, so a later run with
the same parameters finds them and skips the work; each written to a temporary name and renamed):
``graph-s{scale}-e{edgefactor}-r{seed}.csr`` (``workloads.graph``'s CSR format, simple: no self
loops, no repeated edges), ``features-v2-s{scale}-d{dim}-c{classes}-r{seed}.f32``
(``n_vertices x dim`` float32, row-major, no header). Labels are computed, not stored.
"""
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from workloads.graph import generate_kronecker_csr, open_csr, parallel
from workloads.graph.kronecker import GOLDEN_GAMMA, splitmix64

#: Scale of each class's mean, per dimension, in units of the noise.
SIGNAL = 0.08
#: The feature file's generator version, in its name (a file of another version is not reused).
FEATURES_VERSION = 2
#: Rows one task makes and writes (64 MiB at 1024 floats): threads x this is the memory in use.
CHUNK_ROWS = 1 << 14

_U32 = np.uint64(32)
_LOW_32 = np.uint64(0xFFFFFFFF)
_INV_2_31 = 1.0 / 2147483648.0
_ATTEMPTS = np.uint64(64)


@dataclass
class Dataset:
    graph: object          # workloads.graph.CSRGraph
    features_path: Path
    n_vertices: int
    dim: int
    labels: np.ndarray
    classes: int
    seed: int = 0

    @property
    def feature_bytes(self):
        return self.n_vertices * self.dim * 4

    def features_memmap(self):
        return np.memmap(self.features_path, dtype=np.float32, mode="c",
                         shape=(self.n_vertices, self.dim))


def class_of(v, seed, classes):
    """The planted class of vertices ``v`` (int64 array)."""
    x = (v.astype(np.uint64) + np.uint64(seed + 1)) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(31)
    return (x % np.uint64(classes)).astype(np.int64)


def class_means(dim, classes, seed):
    rng = np.random.default_rng([seed, 1])
    mu = rng.standard_normal((classes, dim)).astype(np.float32)
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    return mu * np.float32(SIGNAL * np.sqrt(dim))


def noise_key(seed):
    """The uint64 key of the seed's noise stream."""
    return np.uint64(splitmix64(np.uint64((seed + 1) * int(GOLDEN_GAMMA) % 2**64)))


@njit(nogil=True, cache=True)
def _fill_rows(out, first, key, mu, labels):
    """Rows ``first .. first + len(out) - 1`` into ``out`` (float32, ``n x dim``): the noise
    of the counter-based stream plus ``mu[labels[i]]``.

    Pair ``p`` of row ``v`` is Marsaglia's polar method over the hashes of counters
    ``(v * pairs + p) * 64 + 1, + 2, ...`` (each hash two uniforms in [-1, 1) from its 32-bit
    halves), the first inside the unit disc taken (a draw is rejected with probability 0.21, so
    64 always suffice): one ``log`` and one ``sqrt`` a pair, no ``sin``/``cos``, twice as fast
    as Box-Muller here."""
    n, dim = out.shape
    pairs = (dim + 1) // 2
    for i in range(n):
        c = labels[i]
        base = np.uint64(first + i) * np.uint64(pairs)
        for p in range(pairs):
            counter = (base + np.uint64(p)) * _ATTEMPTS
            u = v = s = 0.0
            for _ in range(64):
                counter += np.uint64(1)
                x = splitmix64(key + counter * GOLDEN_GAMMA)
                u = np.float64(x >> _U32) * _INV_2_31 - 1.0
                v = np.float64(x & _LOW_32) * _INV_2_31 - 1.0
                s = u * u + v * v
                if 0.0 < s < 1.0:
                    break
            f = math.sqrt(-2.0 * math.log(s) / s)
            out[i, 2 * p] = np.float32(u * f) + mu[c, 2 * p]
            if 2 * p + 1 < dim:
                out[i, 2 * p + 1] = np.float32(v * f) + mu[c, 2 * p + 1]


def feature_rows(first, stop, dim, classes, seed):
    """Rows ``first .. stop - 1`` of the feature file (float32 ``(stop - first) x dim``)."""
    out = np.empty((stop - first, dim), dtype=np.float32)
    _fill_rows(out, first, noise_key(seed), class_means(dim, classes, seed),
               class_of(np.arange(first, stop), seed, classes))
    return out


def write_features(path, n, dim, classes, seed, progress=None, chunk_rows=CHUNK_ROWS):
    """Write the ``n x dim`` feature file to ``path`` on every core (``workloads.graph.parallel``):
    slices of ``chunk_rows`` rows, made and ``pwrite``-n by the pool's threads, a wave of one
    slice per thread at a time. ``progress(done_rows, n)`` after each wave."""
    mu = class_means(dim, classes, seed)
    key = noise_key(seed)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, n * dim * 4)

        def task(first, stop):
            rows = np.empty((stop - first, dim), dtype=np.float32)
            _fill_rows(rows, first, key, mu, class_of(np.arange(first, stop), seed, classes))
            view, at = memoryview(rows).cast("B"), first * dim * 4
            while view:        # pwrite may write less than asked
                done = os.pwrite(fd, view, at)
                view, at = view[done:], at + done

        slices = [(first, min(n, first + chunk_rows)) for first in range(0, n, chunk_rows)]
        wave = max(1, parallel.N_THREADS)
        for k in range(0, len(slices), wave):
            parallel.run_all(task, slices[k:k + wave])
            if progress:
                progress(slices[min(k + wave, len(slices)) - 1][1], n)
    finally:
        os.close(fd)


def dataset_paths(directory, scale, dim, *, edgefactor=8, classes=16, seed=0):
    """``(graph file, feature file)`` of the data set with these parameters in ``directory``."""
    directory = Path(directory)
    return (directory / f"graph-s{scale}-e{edgefactor}-r{seed}.csr",
            directory / f"features-v{FEATURES_VERSION}-s{scale}-d{dim}-c{classes}-r{seed}.f32")


def make_dataset(directory, scale, dim, *, edgefactor=8, classes=16, seed=0, progress=None,
                 chunk_rows=CHUNK_ROWS):
    """The data set, made (or found: files of the same parameters are reused) in
    ``directory``. ``progress(stage, done, total)``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    graph_path, feats = dataset_paths(directory, scale, dim, edgefactor=edgefactor,
                                      classes=classes, seed=seed)
    if not graph_path.exists():
        generate_kronecker_csr(graph_path, scale, edgefactor, seed=seed, drop_self_loops=True,
                               drop_duplicates=True,
                               progress=(lambda d, t: progress("graph", d, t)) if progress
                               else None)
    graph = open_csr(graph_path)
    n = graph.n_vertices
    if not feats.exists() or feats.stat().st_size != n * dim * 4:
        tmp = feats.with_name(f"{feats.name}.{os.getpid()}.tmp")   # two runs never share one
        try:
            write_features(tmp, n, dim, classes, seed,
                           progress=(lambda d, t: progress("features", d, t)) if progress
                           else None, chunk_rows=chunk_rows)
            os.replace(tmp, feats)
        finally:
            if tmp.exists():
                tmp.unlink()
    labels = class_of(np.arange(n), seed, classes)
    return Dataset(graph, feats, n, dim, labels, classes, seed)
