"""Vector search workload: an SSD-resident IVF index that GPU kernels search through gids.

Host side: data sets (:mod:`.datasets`), k-means training and the on-disk index
(:mod:`.ivf`), and the exact host reference the GPU search must match
(:mod:`.reference`). The file layout is in ``docs/formats.md (vector section)``.

Long operations take ``progress=None``: a callable ``progress(stage, done, total)``
called as work completes, e.g. to drive one progress bar per stage.
"""

from .datasets import (
    SyntheticClusters,
    VectorFileError,
    iter_row_chunks,
    load_vectors,
    save_vectors,
)
from .ivf import IndexFormatError, IVFIndex, assign_lists, build_ivf, open_ivf, train_kmeans
from .reference import (
    exact_search,
    ivf_search,
    pair_distances,
    probe_lists,
    recall_at_k,
    recall_by_nprobe,
)

__all__ = [
    "SyntheticClusters",
    "VectorFileError",
    "iter_row_chunks",
    "load_vectors",
    "save_vectors",
    "IndexFormatError",
    "IVFIndex",
    "assign_lists",
    "build_ivf",
    "open_ivf",
    "train_kmeans",
    "exact_search",
    "ivf_search",
    "pair_distances",
    "probe_lists",
    "recall_at_k",
    "recall_by_nprobe",
]
