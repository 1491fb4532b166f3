"""A synthetic IGB-like node-classification data set: a Kronecker graph, a float32 feature row
per vertex in a file, and labels planted in the features.

Vertex ``v``'s class is ``c(v) = mix(v) mod classes``; its feature row is standard normal
noise plus ``signal * mu[c(v)]``, ``mu`` a random unit-norm direction per class scaled by
``SIGNAL * sqrt(dim)``: a model of the row alone beats chance by far, so a training run's
accuracy says whether the rows it was fed were right. The file is a function of the seed
(rows are drawn in fixed chunks, each from its own keyed stream).

Files (in ``directory``; reused when present, written once with a progress bar):
``graph-s{scale}-e{edgefactor}.csr`` (``workloads.graph``'s CSR format, simple: no self loops,
no repeated edges), ``features-s{scale}-d{dim}-c{classes}-r{seed}.f32`` (``n_vertices x dim`` float32, row-major,
no header). Labels are computed, not stored.
"""
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.graph import generate_kronecker_csr, open_csr

#: Scale of each class's mean, per dimension, in units of the noise.
SIGNAL = 0.08


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


def feature_rows(first, stop, dim, classes, seed):
    """Rows ``first .. stop - 1`` of the feature file."""
    rng = np.random.default_rng([seed, 2, first])
    rows = rng.standard_normal((stop - first, dim), dtype=np.float32)
    rows += class_means(dim, classes, seed)[class_of(np.arange(first, stop), seed, classes)]
    return rows


def make_dataset(directory, scale, dim, *, edgefactor=8, classes=16, seed=0, progress=None,
                 chunk_rows=1 << 14):
    """The data set, made (or found) in ``directory``. ``progress(stage, done, total)``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    graph_path = directory / f"graph-s{scale}-e{edgefactor}.csr"
    if not graph_path.exists():
        generate_kronecker_csr(graph_path, scale, edgefactor, seed=seed, drop_self_loops=True,
                               drop_duplicates=True,
                               progress=(lambda d, t: progress("graph", d, t)) if progress
                               else None)
    graph = open_csr(graph_path)
    n = graph.n_vertices
    feats = directory / f"features-s{scale}-d{dim}-c{classes}-r{seed}.f32"
    if not feats.exists() or feats.stat().st_size != n * dim * 4:
        tmp = feats.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            # Rows in fixed chunks (the RNG stream is keyed by the chunk's first row).
            for first in range(0, n, chunk_rows):
                stop = min(n, first + chunk_rows)
                f.write(feature_rows(first, stop, dim, classes, seed).tobytes())
                if progress:
                    progress("features", stop, n)
        os.replace(tmp, feats)
    labels = class_of(np.arange(n), seed, classes)
    return Dataset(graph, feats, n, dim, labels, classes, seed)
