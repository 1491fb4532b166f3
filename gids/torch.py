"""PyTorch training from storage: a mini-batch loader and a PyG ``FeatureStore`` over gids.

Imported only as ``import gids.torch`` (``import gids`` never imports torch).

:class:`NodeLoader` yields ``(nodes, edge_indices, features, labels)`` per mini-batch of seed
vertices: the sampled neighbourhood (:class:`gids.sampling.NeighbourSampler`, the graph read
through gids), every node's feature row gathered through the cache (``rt.gather_rows``) into a
torch tensor, and the seeds' labels. On a GPU it prepares the next batch (sampling and gather,
on a stream of its own) while the caller trains on the current one; the caller's stream waits
for a batch's event before the batch is handed out.

:class:`GidsFeatureStore` (where ``torch_geometric`` is installed) lets PyG code fetch feature
rows through gids: ``store[group, attr, index]``.
"""
from typing import NamedTuple

import numpy as np
import torch

from gids.errors import ConfigError
from gids.sampling import NeighbourSampler, SampledBatch, torch_device  # noqa: F401
from kernels.platform import SIMULATOR

__all__ = ["NodeLoader", "MiniBatch", "NeighbourSampler", "gather_rows"]


class MiniBatch(NamedTuple):
    """What :class:`NodeLoader` yields: global node ids (seeds first), one ``(2, E_h)`` local
    edge index per hop, the nodes' feature rows, the seeds' labels (``len(labels)`` seeds)."""
    nodes: torch.Tensor
    edge_indices: list
    features: torch.Tensor
    labels: torch.Tensor

    def edge_index(self):
        """Every hop's edges in one ``(2, E)`` tensor."""
        return torch.cat(self.edge_indices, dim=1)


def gather_rows(rt, array, rows, stream=None):
    """Rows ``rows`` of ``array`` as a new torch tensor (on torch's current stream, or
    ``stream``), through ``rt.gather_rows``; does not wait."""
    out = torch.empty((int(rows.numel()) if isinstance(rows, torch.Tensor) else len(rows),
                       array.shape[1]), dtype=_torch_dtype(array.dtype), device=torch_device())
    if stream is None and not SIMULATOR:
        stream = torch.cuda.current_stream()
    rt.gather_rows(array, rows, out=out, stream=stream)
    return out


def _torch_dtype(dtype):
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


class NodeLoader:
    """Mini-batches of seed vertices with their sampled neighbourhoods, features and labels.

    Parameters
    ----------
    sampler : gids.sampling.NeighbourSampler
    features : gids.StorageArray
        2-D, a row per vertex (of the sampler's Runtime or another: the graph and the
        features may have caches of their own).
    labels : torch.Tensor or numpy array
        A label per vertex (moved to the device once).
    seeds : array-like of int
        The vertices to train on (each yielded once per epoch).
    batch_size : int
    shuffle : bool
        A new order of the seeds each epoch, from ``seed`` and the epoch number.
    seed : int
    prefetch : bool
        Prepare the next batch on a stream of its own while the caller uses this one (GPU only).
    """

    def __init__(self, sampler, features, labels, seeds, batch_size, *, shuffle=True, seed=0,
                 prefetch=True):
        from gids.array import StorageArray
        if not isinstance(features, StorageArray):
            raise ConfigError("gids: features must be a gids array (rt.open_array(...))")
        rt = features.runtime
        rt._check_array(features, "NodeLoader")
        if features.ndim != 2 or features.shape[0] != sampler.n_vertices:
            raise ConfigError(f"gids: features must have a row per vertex "
                              f"({sampler.n_vertices}), got shape {features.shape}")
        if int(batch_size) < 1:
            raise ConfigError(f"gids: batch_size must be >= 1, got {batch_size}")
        self.rt = rt                 # the features' Runtime (the graph's may be another)
        self._runtimes = [rt] if sampler.rt is rt else [rt, sampler.rt]
        self.sampler = sampler
        self.features = features
        self.device = torch_device()
        labels = labels if isinstance(labels, torch.Tensor) else torch.from_numpy(
            np.asarray(labels))
        if labels.shape[0] != sampler.n_vertices:
            raise ConfigError(f"gids: labels must have one entry per vertex "
                              f"({sampler.n_vertices}), got {labels.shape[0]}")
        self.labels = labels.to(self.device)
        self.seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
        sampler._check_seeds(self.seeds)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.prefetch = bool(prefetch) and not SIMULATOR
        self.epoch = 0
        self._side = torch.cuda.Stream() if self.prefetch else None

    def __len__(self):
        return -(-self.seeds.size // self.batch_size)

    def _order(self, epoch):
        if not self.shuffle:
            return self.seeds
        return np.random.default_rng([self.seed, epoch]).permutation(self.seeds)

    def _prepare(self, seeds, number):
        """Sample and gather batch ``number`` (on the side stream when prefetching)."""
        if self._side is None:
            return self._make(seeds, number), None
        with torch.cuda.stream(self._side):
            batch = self._make(seeds, number)
            ready = torch.cuda.Event()
            ready.record(self._side)
        return batch, ready

    def _make(self, seeds, number):
        sampled = self.sampler.sample(seeds, batch=number)
        features = gather_rows(self.rt, self.features, sampled.nodes)
        labels = self.labels[sampled.nodes[:sampled.n_seeds]]
        return MiniBatch(sampled.nodes, sampled.edge_indices, features, labels)

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        order = self._order(epoch)
        starts = range(0, order.size, self.batch_size)
        first = epoch * len(self)
        pending = self._prepare(order[:self.batch_size], first) if len(self) else None
        for n, start in enumerate(starts):
            batch, ready = pending
            if n + 1 < len(self):
                nxt = starts[n + 1]
                pending = self._prepare(order[nxt:nxt + self.batch_size], first + n + 1)
            if ready is not None:
                main = torch.cuda.current_stream()
                main.wait_event(ready)
                # the tensors were made on the side stream: keep them until main is done
                for t in (batch.nodes, batch.features, batch.labels, *batch.edge_indices):
                    t.record_stream(main)
            for rt in self._runtimes:
                rt.check()    # raises a finished kernel's error without waiting
            yield batch
        for rt in self._runtimes:
            rt.sync()         # every batch's errors, at the latest at the epoch's end


try:
    from torch_geometric.data import FeatureStore, TensorAttr
except ImportError:   # PyG is not installed: the loader works without it
    FeatureStore = None

if FeatureStore is not None:
    __all__.append("GidsFeatureStore")

    class GidsFeatureStore(FeatureStore):
        """A read-only PyG ``FeatureStore`` whose tensors are 2-D gids arrays: a get of rows
        gathers them through the cache into a torch tensor (and waits for it).

        ``store.put_tensor(array, group_name="paper", attr_name="x", index=None)`` registers a
        :class:`gids.StorageArray`; ``store["paper", "x", idx]`` gathers rows ``idx``.
        """

        def __init__(self, rt):
            super().__init__()
            self.rt = rt
            self._arrays = {}

        @staticmethod
        def _key(attr):
            return (attr.group_name, attr.attr_name)

        def _put_tensor(self, tensor, attr):
            from gids.array import StorageArray
            if not isinstance(tensor, StorageArray):
                raise ConfigError("gids: GidsFeatureStore holds gids arrays "
                                  "(rt.open_array(...)), not in-memory tensors")
            self.rt._check_array(tensor, "GidsFeatureStore")
            if tensor.ndim != 2:
                raise ConfigError(f"gids: a feature array must be 2-D, got {tensor.shape}")
            self._arrays[self._key(attr)] = tensor
            return True

        def _get_tensor(self, attr):
            array = self._arrays.get(self._key(attr))
            if array is None:
                return None
            index = attr.index if attr.is_set("index") and attr.index is not None else None
            if index is None:
                index = torch.arange(array.shape[0])
            elif isinstance(index, slice):
                index = torch.arange(array.shape[0])[index]
            out = gather_rows(self.rt, array, index)
            self.rt.sync()
            return out

        def _remove_tensor(self, attr):
            return self._arrays.pop(self._key(attr), None) is not None

        def _get_tensor_size(self, attr):
            array = self._arrays.get(self._key(attr))
            return None if array is None else tuple(array.shape)

        def get_all_tensor_attrs(self):
            return [TensorAttr(group, name) for group, name in self._arrays]
