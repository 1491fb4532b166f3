"""GraphSAGE training and the feature-gather benchmark over the paths of
:mod:`workloads.gnn.paths`.

Every path trains on the same batches: the seeds' order, the sampled neighbourhoods (the graph
read through gids, a cache that holds it all, so sampling costs the same on every path) and the
model's initial weights all come from the seed, and the feature rows are the same bytes. An
epoch's time is split into sampling, feature gather and training, each phase timed to its end
on the GPU (a synchronisation between phases, on every path alike).
"""
import math
import time

import numpy as np
import torch

import gids
from gids import SIMULATOR
from gids.sampling import NeighbourSampler, torch_device


def _sync():
    if not SIMULATOR:
        torch.cuda.synchronize()


def make_model(dim, hidden, classes, layers, seed):
    from torch_geometric.nn import SAGEConv

    class GraphSAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            sizes = [dim] + [hidden] * (layers - 1) + [classes]
            self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes, sizes[1:]))

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i + 1 < len(self.convs):
                    x = torch.relu(x)
            return x

    torch.manual_seed(seed)
    return GraphSAGE().to(torch_device())


class GraphSampler:
    """The graph read through gids (a Runtime whose cache holds the neighbours section)."""

    def __init__(self, data, fanouts, seed, page_size=4096):
        sec = data.graph.neighbour_section
        # Two daemon threads: misses are first touches only, and the cores are the CPU paths'.
        self.rt = gids.Runtime(cache_bytes=max(sec.n_items * sec.dtype.itemsize + page_size,
                                               64 * page_size), page_size=page_size,
                               daemon_threads=min(2, gids.defaults.get("daemon_threads")))
        nbrs = self.rt.open_array(sec.path, sec.dtype, shape=(sec.n_items,),
                                  offset=sec.byte_offset)
        self.sampler = NeighbourSampler(self.rt, data.graph.offsets, nbrs, fanouts, seed=seed)

    def close(self):
        self.rt.close()


def batches(seeds, batch_size, epoch, seed):
    order = np.random.default_rng([seed, epoch]).permutation(seeds)
    return [order[i:i + batch_size] for i in range(0, order.size, batch_size)]


def run_epochs(data, path, graph, *, train_seeds, eval_seeds, batch_size, epochs, hidden,
               lr, seed, log=print):
    """Train GraphSAGE on ``path``'s rows; per-epoch phase times, loss, final accuracy."""
    layers = len(graph.sampler.fanouts)
    model = make_model(data.dim, hidden, data.classes, layers, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    labels = torch.from_numpy(data.labels).to(torch_device())
    out = None
    per_epoch = []
    for epoch in range(epochs):
        times = {"sample": 0.0, "gather": 0.0, "train": 0.0}
        losses = []
        epoch_batches = batches(train_seeds, batch_size, epoch, seed)
        for number, seeds in enumerate(epoch_batches):
            t0 = time.perf_counter()
            # batch numbers as gids.torch.NodeLoader counts them: the same draws
            b = graph.sampler.sample(seeds, batch=epoch * len(epoch_batches) + number)
            _sync()
            t1 = time.perf_counter()
            n = int(b.nodes.numel())
            if out is None or out.shape[0] < n:
                out = torch.empty((max(n, 1), data.dim), dtype=torch.float32,
                                  device=torch_device())
            x = out[:n]
            path.gather(b.nodes, x)
            _sync()
            t2 = time.perf_counter()
            model.train()
            opt.zero_grad()
            logits = model(x, b.edge_index())[:b.n_seeds]
            loss = torch.nn.functional.cross_entropy(logits, labels[b.nodes[:b.n_seeds]])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            t3 = time.perf_counter()
            times["sample"] += t1 - t0
            times["gather"] += t2 - t1
            times["train"] += t3 - t2
        path.check()
        graph.rt.sync()
        row = dict(epoch=epoch, loss=float(np.mean(losses)), first_loss=losses[0],
                   last_loss=losses[-1], epoch_s=sum(times.values()),
                   **{f"{k}_s": v for k, v in times.items()})
        log(f"    epoch {epoch}: {row['epoch_s']:.2f} s (sample {times['sample']:.2f}, gather "
            f"{times['gather']:.2f}, train {times['train']:.2f}), mean loss {row['loss']:.4f}")
        per_epoch.append(row)
    accuracy = evaluate(data, path, graph, model, eval_seeds, batch_size)
    return {"epochs": per_epoch, "accuracy": accuracy}


def run_loader_epochs(data, path, graph, *, train_seeds, eval_seeds, batch_size, epochs,
                      hidden, lr, seed, log=print):
    """The same training through :class:`gids.torch.NodeLoader` (``path`` a gids path): the
    next batch sampled and gathered on a side stream during each step; wall time per epoch."""
    from gids.torch import NodeLoader
    layers = len(graph.sampler.fanouts)
    model = make_model(data.dim, hidden, data.classes, layers, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loader = NodeLoader(graph.sampler, path.array, data.labels, train_seeds, batch_size,
                        seed=seed)
    per_epoch = []
    for epoch in range(epochs):
        _sync()
        t0 = time.perf_counter()
        losses = []
        for nodes, edge_indices, x, y in loader:
            model.train()
            opt.zero_grad()
            logits = model(x, torch.cat(edge_indices, dim=1))[:y.numel()]
            loss = torch.nn.functional.cross_entropy(logits, y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())    # no .item(): the host runs ahead to the next batch
        _sync()
        seconds = time.perf_counter() - t0
        losses = [float(v) for v in losses]
        row = dict(epoch=epoch, loss=float(np.mean(losses)), first_loss=losses[0],
                   last_loss=losses[-1], epoch_s=seconds, sample_s=None, gather_s=None,
                   train_s=None)
        log(f"    epoch {epoch}: {seconds:.2f} s (overlapped), mean loss {row['loss']:.4f}")
        per_epoch.append(row)
    accuracy = evaluate(data, path, graph, model, eval_seeds, batch_size)
    return {"epochs": per_epoch, "accuracy": accuracy}


@torch.no_grad()
def evaluate(data, path, graph, model, seeds, batch_size):
    model.eval()
    right = 0
    for number, chunk in enumerate(np.array_split(seeds, max(1, -(-seeds.size // batch_size)))):
        b = graph.sampler.sample(chunk, batch=-1 - number)
        x = torch.empty((int(b.nodes.numel()), data.dim), dtype=torch.float32,
                        device=torch_device())
        path.gather(b.nodes, x)
        pred = model(x, b.edge_index())[:b.n_seeds].argmax(1)
        right += int((pred.cpu().numpy() == data.labels[chunk]).sum())
    path.check()
    return right / max(1, seeds.size)


#: A timed gather shorter than this is timed again over as many passes of its node lists as
#: fill it, where passing again changes nothing but the time (a path without a cache, or a
#: cache warmed with the timed lists): a few ms of batches is mostly a launch's and a sync's
#: fixed cost.
MIN_GATHER_SECONDS = 0.2


def gather_benchmark(data, path, node_lists, warm_lists, *, repeats=1, warm_timed=False,
                     min_seconds=MIN_GATHER_SECONDS):
    """Rows/s of ``path`` over the batches' node lists, after an untimed pass over other
    batches (``warm_lists``: it compiles and fills a cache to its steady state without
    holding the timed batches' rows). ``warm_timed``: the untimed pass also gathers the timed
    lists, for a cache that holds every row (the whole-cache row measures hits, not the misses
    of its first touch). A path with ``stats()`` (gids) reports its hit rate over the timed
    batches (``hit_rate``; None for the others). A path with nothing to warm
    (``path.cacheless``: the direct loader, whose every read goes to the drive) gets the first
    of the warm lists only. ``repeats`` passes over the node lists are timed, more where they
    took under ``min_seconds`` and a pass more changes nothing but the time (``passes``)."""
    if getattr(path, "cacheless", False):
        warm_lists, warm_timed = warm_lists[:1], False
    width = data.dim
    out = torch.empty((max(int(n.numel()) for n in [*node_lists, *warm_lists]), width),
                      dtype=torch.float32, device=torch_device())
    for nodes in [*warm_lists, *(node_lists if warm_timed else ())]:
        path.gather(nodes, out[:int(nodes.numel())])
    _sync()
    path.check()
    before = path.stats() if hasattr(path, "stats") else None
    rows, seconds = _timed_passes(path, node_lists, out, repeats)
    if seconds < min_seconds and (warm_timed or before is None):
        again = repeats * max(2, math.ceil(min_seconds / max(seconds, 1e-6)))
        if before is not None:
            before = path.stats()
        rows, seconds = _timed_passes(path, node_lists, out, again)
        repeats = again
    hit_rate = None
    if before is not None:
        after = path.stats()
        hits, misses = (after[k] - before[k] for k in ("hits", "misses"))
        hit_rate = hits / (hits + misses) if hits + misses else None
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "gb_per_s": rows * width * 4 / seconds / 1e9, "hit_rate": hit_rate,
            "passes": repeats, "batch_rows": rows / (repeats * len(node_lists))}


def _timed_passes(path, node_lists, out, passes):
    """(rows, seconds) of ``passes`` passes of ``path.gather`` over the node lists, from the
    first launch to the end of the last gather and the path's check."""
    rows = 0
    t0 = time.perf_counter()
    for _ in range(passes):
        for nodes in node_lists:
            path.gather(nodes, out[:int(nodes.numel())])
            rows += int(nodes.numel())
    _sync()
    path.check()
    return rows, time.perf_counter() - t0
