"""``NeighbourSampler``: mini-batch neighbourhoods of a CSR graph whose adjacency lists are read
through the gids cache, in the shape PyG layers take. Needs PyTorch (its tensors are the output;
``import gids`` never imports this module).

Per hop, one kernel (:mod:`kernels.sampling`) picks up to ``fanout`` distinct neighbours of each
frontier vertex, uniformly without replacement, from a hash of ``(seed, batch, hop, vertex)``:
the batch is the same for the same seed, on the GPU and in the simulator. Then, in torch on the
same stream, the sampled vertices are relabelled: the batch's node list keeps the seeds first
(local ids ``0 .. len(seeds) - 1``) and adds each new vertex in the order of its first sampled
edge; hop ``h``'s edges point from a sampled neighbour to the frontier vertex it was drawn for
(``edge_index[0]`` = neighbour, ``edge_index[1]`` = target, PyG's ``source_to_target``), and the
next frontier is the vertices hop ``h`` added.

A graph read through gids: ``offsets`` (``n_vertices + 1`` int64) in GPU memory and the
neighbours section as a 1-D :class:`~gids.StorageArray` (for the CSR file of
``workloads.graph``: ``rt.open_array(path, dtype, shape=(n_edges,), offset=neighbours_offset)``).
"""
from typing import NamedTuple

import numpy as np

from gids.errors import ConfigError
from gids.interop import current_device_id, numba_stream
from gids.rows import note_launch
from kernels.platform import SIMULATOR
from kernels.sampling import MAX_FANOUT


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise ImportError("gids: the neighbour sampler and gids.torch need PyTorch "
                          "(pip install 'gids[torch]')") from exc
    return torch


def torch_device():
    """Where gids's torch tensors live: the current CUDA device, or the CPU in the simulator."""
    torch = _torch()
    return torch.device("cpu") if SIMULATOR else torch.device("cuda", current_device_id())


def numba_view(tensor):
    """A Numba array over a torch tensor's memory (the simulator: a numpy view)."""
    if SIMULATOR:
        return tensor.numpy()
    from numba import cuda
    return cuda.as_cuda_array(tensor, sync=False)


def torch_stream_handle():
    """The raw handle of torch's current stream (0 in the simulator)."""
    if SIMULATOR:
        return 0
    return _torch().cuda.current_stream().cuda_stream


class SampledBatch(NamedTuple):
    """A mini-batch's neighbourhood (torch tensors on :func:`torch_device`).

    ``nodes``: global ids, the seeds first; ``edge_indices[h]``: hop ``h``'s edges as a
    ``(2, E_h)`` int64 tensor of local ids (row 0 the sampled neighbour, row 1 its target);
    ``hop_nodes[h]``: how many nodes the batch had after hop ``h - 1`` (``hop_nodes[0]`` is the
    seed count; the last entry is ``len(nodes)``).
    """
    nodes: object
    edge_indices: list
    hop_nodes: list

    @property
    def n_seeds(self):
        return self.hop_nodes[0]

    def edge_index(self):
        """Every hop's edges in one ``(2, E)`` tensor (what a stack of ``SAGEConv`` takes)."""
        return _torch().cat(self.edge_indices, dim=1)


def _mix(*values):
    """A 63-bit key from integers (splitmix64 steps on the host)."""
    x = 0
    for v in values:
        x = (x ^ (int(v) & (2**64 - 1))) * 0x9E3779B97F4A7C15 % 2**64
        x ^= x >> 29
    return x >> 1


class NeighbourSampler:
    """Uniform neighbour sampling without replacement over a graph read through gids.

    Parameters
    ----------
    rt : gids.Runtime
    offsets : array-like of int64
        ``n_vertices + 1`` offsets into ``neighbours`` (copied to the GPU once).
    neighbours : gids.StorageArray
        The adjacency lists, 1-D, an integer dtype, ``offsets[-1]`` elements.
    fanouts : sequence of int
        Neighbours drawn per vertex at each hop (``(15, 10, 5)``: 15 for the seeds, ...).
    seed : int
        With the batch number, fixes every draw.
    """

    def __init__(self, rt, offsets, neighbours, fanouts, seed=0):
        rt._check_array(neighbours, "NeighbourSampler")
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size < 2:
            raise ConfigError("gids: offsets must be a 1-D array of n_vertices + 1 entries")
        if neighbours.ndim != 1 or neighbours.dtype.kind not in "iu":
            raise ConfigError(f"gids: neighbours must be a 1-D integer array, got shape "
                              f"{neighbours.shape} of {neighbours.dtype}")
        if offsets[0] != 0 or offsets[-1] != neighbours.size or np.any(np.diff(offsets) < 0):
            raise ConfigError(f"gids: offsets must rise from 0 to the neighbours' size "
                              f"({neighbours.size})")
        fanouts = tuple(int(k) for k in fanouts)
        if not fanouts or min(fanouts) < 1 or max(fanouts) > MAX_FANOUT:
            raise ConfigError(f"gids: fan-outs must be 1..{MAX_FANOUT}, got {fanouts}")
        self.rt = rt
        self.neighbours = neighbours
        self.fanouts = fanouts
        self.seed = int(seed)
        self.n_vertices = offsets.size - 1
        self._offsets = rt._to_device(offsets)
        torch = _torch()
        self.device = torch_device()
        self._torch = torch

    def sample(self, seeds, batch=0):
        """The neighbourhood of ``seeds`` (distinct vertex ids: numpy or a torch tensor) for
        batch number ``batch``, launched on torch's current stream; a :class:`SampledBatch`.

        Host seeds are range-checked here; errors of the kernels (a page that could not be
        read) are raised by the next ``rt.sync()``.
        """
        from kernels.sampling import sample_hop_kernel
        torch = self._torch
        if isinstance(seeds, torch.Tensor):
            if seeds.device.type == "cpu":
                self._check_seeds(seeds.numpy())
            nodes = seeds.to(self.device, torch.int64).reshape(-1)
            if seeds.device.type != "cpu":   # checked on the device (the sampling waits anyway)
                self._check_device_seeds(nodes)
        else:
            host = np.asarray(seeds)
            self._check_seeds(host)
            nodes = torch.from_numpy(host.astype(np.int64).reshape(-1)).to(self.device)
        kernel = sample_hop_kernel()
        handle = torch_stream_handle()
        stream = numba_stream(handle)
        h = self.neighbours.handle
        frontier = nodes
        edge_indices, hop_nodes = [], [int(nodes.numel())]
        for hop, k in enumerate(self.fanouts):
            first_local = hop_nodes[-1] - int(frontier.numel())
            picked = torch.empty(int(frontier.numel()) * k, dtype=torch.int64, device=self.device)
            if frontier.numel():
                blocks, threads = self._grid(int(frontier.numel()))
                kernel[blocks, threads, stream](h, self._offsets, numba_view(frontier),
                                                np.int64(k),
                                                np.uint64(_mix(self.seed, batch, hop)),
                                                numba_view(picked))
                note_launch(self.rt, stream)
            nodes, edges = self._relabel(nodes, picked, first_local, k)
            edge_indices.append(edges)
            frontier = nodes[hop_nodes[-1]:]
            hop_nodes.append(int(nodes.numel()))
        return SampledBatch(nodes, edge_indices, hop_nodes)

    def _check_device_seeds(self, nodes):
        torch = self._torch
        if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= self.n_vertices):
            bad = nodes[(nodes < 0) | (nodes >= self.n_vertices)][0]
            raise ConfigError(f"gids: seed {int(bad)} is not a vertex "
                              f"(0..{self.n_vertices - 1})")
        if torch.unique(nodes).numel() != nodes.numel():
            raise ConfigError("gids: the seeds of a batch must be distinct")

    def _check_seeds(self, host):
        if host.dtype.kind not in "iu" or host.ndim != 1:
            raise ConfigError(f"gids: seeds must be a 1-D integer array, got {host.ndim}-D "
                              f"{host.dtype}")
        bad = (host < 0) | (host >= self.n_vertices)
        if bad.any():
            raise ConfigError(f"gids: seed {int(host[np.flatnonzero(bad)[0]])} is not a vertex "
                              f"(0..{self.n_vertices - 1})")
        if np.unique(host).size != host.size:
            raise ConfigError("gids: the seeds of a batch must be distinct")

    def _relabel(self, nodes, picked, first_local, k):
        """The node list with the new vertices of ``picked`` appended (first-seen order), and
        the hop's edges in local ids."""
        torch = self._torch
        valid = picked >= 0
        neighbours = picked[valid]
        targets = (torch.arange(picked.numel() // k if k else 0, device=self.device)
                   .repeat_interleave(k)[valid] + first_local)
        seen = torch.cat([nodes, neighbours])
        unique, inverse = torch.unique(seen, return_inverse=True)
        positions = torch.arange(seen.numel(), device=self.device)
        first = torch.full((unique.numel(),), seen.numel(), dtype=torch.int64,
                           device=self.device)
        first.scatter_reduce_(0, inverse, positions, reduce="amin")
        order = torch.argsort(first)             # the old nodes keep their places: 0 .. n - 1
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=self.device)
        sources = rank[inverse[nodes.numel():]]
        return unique[order], torch.stack([sources, targets])

    @staticmethod
    def _grid(n):
        threads = 32 if SIMULATOR else 256
        return max(1, min(-(-n // threads), 2 if SIMULATOR else 4096)), threads
