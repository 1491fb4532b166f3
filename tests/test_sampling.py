"""The GPU neighbour sampler against a host reference: every sampled edge exists, a target gets
min(degree, fan-out) distinct neighbours, the node list is the seeds then each new vertex once,
edges index it; the same seed gives the same batch."""
import numpy as np
import pytest

import gids
from gids.errors import ConfigError

torch = pytest.importorskip("torch", reason="torch is not installed (extra: torch)")

from gids.sampling import NeighbourSampler  # noqa: E402
from workloads.graph import generate_kronecker_csr, open_csr  # noqa: E402


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "g.csr"
    seed = int(np.random.default_rng().integers(1 << 30))
    generate_kronecker_csr(path, 7, 4, seed=seed, drop_self_loops=True, drop_duplicates=True)
    return open_csr(path)


def _open(rt, g):
    sec = g.neighbour_section
    return rt.open_array(sec.path, sec.dtype, shape=(sec.n_items,), offset=sec.byte_offset)


def check_batch(g, batch, seeds, fanouts):
    """The reference: the batch's edges against the graph's adjacency lists."""
    nodes = batch.nodes.cpu().numpy()
    assert np.array_equal(nodes[:len(seeds)], seeds)
    assert np.unique(nodes).size == nodes.size
    assert batch.hop_nodes[0] == len(seeds) and batch.hop_nodes[-1] == nodes.size
    for hop, (k, edges) in enumerate(zip(fanouts, batch.edge_indices)):
        src, dst = edges.cpu().numpy()
        lo, hi = batch.hop_nodes[hop - 1] if hop else 0, batch.hop_nodes[hop]
        # targets are the previous hop's new nodes; sources are nodes known after this hop
        assert ((dst >= lo) & (dst < hi)).all()
        assert ((src >= 0) & (src < batch.hop_nodes[hop + 1])).all()
        # new nodes of this hop appear in first-seen order of their edges
        new = src[src >= hi]
        _, first = np.unique(new, return_index=True)
        assert np.array_equal(new[np.sort(first)], np.arange(hi, batch.hop_nodes[hop + 1]))
        for t in range(lo, hi):
            v = nodes[t]
            picked = nodes[src[dst == t]]
            adjacency = g.neighbours_of(v)
            assert picked.size == min(adjacency.size, k)
            assert np.unique(picked).size == picked.size
            assert np.isin(picked, adjacency).all()


def test_sampled_edges_exist_and_respect_fanouts(graph):
    rng = np.random.default_rng()
    fanouts = (4, 3, 2)
    with gids.Runtime(page_size=512, cache_pages=16, daemon_threads=1, queues=2) as rt:
        sampler = NeighbourSampler(rt, graph.offsets, _open(rt, graph), fanouts, seed=5)
        hub = int(np.argmax(graph.degrees()))
        others = rng.choice(np.delete(np.arange(graph.n_vertices), hub), size=5, replace=False)
        seeds = np.concatenate([[hub], others])
        batch = sampler.sample(seeds, batch=3)
        rt.sync()
        check_batch(graph, batch, seeds, fanouts)
        again = sampler.sample(torch.from_numpy(seeds), batch=3)
        other = sampler.sample(seeds, batch=4)
        rt.sync()
    assert torch.equal(batch.nodes, again.nodes)
    for a, b in zip(batch.edge_indices, again.edge_indices):
        assert torch.equal(a, b)
    assert batch.edge_index().shape[0] == 2
    # another batch number draws again: the hub's list is longer than the fan-out
    hub_first = batch.nodes[batch.edge_indices[0][0][batch.edge_indices[0][1] == 0]]
    hub_other = other.nodes[other.edge_indices[0][0][other.edge_indices[0][1] == 0]]
    assert graph.degrees()[hub] > fanouts[0]
    assert not torch.equal(torch.sort(hub_first).values, torch.sort(hub_other).values)


def test_sampler_errors(graph):
    with gids.Runtime(page_size=512, cache_pages=16, daemon_threads=1, queues=2) as rt:
        nbrs = _open(rt, graph)
        with pytest.raises(ConfigError, match="fan-outs"):
            NeighbourSampler(rt, graph.offsets, nbrs, (0,))
        with pytest.raises(ConfigError, match="offsets"):
            NeighbourSampler(rt, graph.offsets + 1, nbrs, (2,))
        sampler = NeighbourSampler(rt, graph.offsets, nbrs, (2,))
        with pytest.raises(ConfigError, match="not a vertex"):
            sampler.sample([0, graph.n_vertices])
        with pytest.raises(ConfigError, match="distinct"):
            sampler.sample([1, 1])


def test_loader_epoch_yields_every_seed_once(graph):
    import gids.torch as gt
    rng = np.random.default_rng()
    n = graph.n_vertices
    feats = rng.standard_normal((n, 8)).astype(np.float32)
    labels = rng.integers(0, 5, size=n)
    seeds = rng.choice(n, size=10, replace=False)
    with gids.Runtime(page_size=512, cache_pages=16, daemon_threads=1, queues=2) as rt:
        sampler = NeighbourSampler(rt, graph.offsets, _open(rt, graph), (3, 2), seed=1)
        loader = gt.NodeLoader(sampler, rt.open_array(feats), labels, seeds, batch_size=4,
                               seed=2)
        seen = []
        for nodes, edge_indices, features, batch_labels in loader:
            n_seeds = len(batch_labels)
            seen.extend(nodes[:n_seeds].tolist())
            np.testing.assert_array_equal(features.numpy(), feats[nodes.numpy()])
            np.testing.assert_array_equal(batch_labels.numpy(), labels[nodes[:n_seeds].numpy()])
            assert len(edge_indices) == 2
        assert len(loader) == 3
        assert sorted(seen) == sorted(seeds.tolist())


def test_pyg_feature_store(graph):
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    import gids.torch as gt
    rng = np.random.default_rng()
    feats = rng.standard_normal((20, 16)).astype(np.float32)
    with gids.Runtime(page_size=512, cache_pages=16, daemon_threads=1, queues=2) as rt:
        store = gt.GidsFeatureStore(rt)
        store.put_tensor(rt.open_array(feats), group_name="paper", attr_name="x", index=None)
        idx = torch.tensor([3, 0, 19])
        np.testing.assert_array_equal(store["paper", "x", idx].numpy(), feats[[3, 0, 19]])
        assert store.get_tensor_size(group_name="paper", attr_name="x", index=None) == (20, 16)
        assert len(store.get_all_tensor_attrs()) == 1
        with pytest.raises(ConfigError):
            store.put_tensor(torch.zeros(2, 2), group_name="paper", attr_name="y", index=None)


@pytest.mark.gpu
def test_gpu_loader_prefetching_on_a_side_stream(tmp_path):
    import gids.torch as gt
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 14, 8, seed=1, drop_self_loops=True, drop_duplicates=True)
    g = open_csr(path)
    rng = np.random.default_rng()
    feats = rng.standard_normal((g.n_vertices, 256)).astype(np.float32)
    labels = rng.integers(0, 7, size=g.n_vertices)
    seeds = rng.choice(g.n_vertices, size=3000, replace=False)
    with gids.Runtime(cache_bytes=4 << 20) as rt:
        sampler = NeighbourSampler(rt, g.offsets, _open(rt, g), (10, 5), seed=4)
        loader = gt.NodeLoader(sampler, rt.open_array(feats), labels, seeds, batch_size=512)
        assert loader.prefetch
        seen = []
        for nodes, edge_indices, features, batch_labels in loader:
            torch.cuda.current_stream().synchronize()
            n_seeds = len(batch_labels)
            host_nodes = nodes.cpu().numpy()
            seen.extend(host_nodes[:n_seeds].tolist())
            np.testing.assert_array_equal(features.cpu().numpy(), feats[host_nodes])
            np.testing.assert_array_equal(batch_labels.cpu().numpy(), labels[host_nodes[:n_seeds]])
        assert sorted(seen) == sorted(seeds.tolist())
