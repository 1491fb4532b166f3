"""``gids gnn``: every feature path gathers the file's rows; the command runs end to end (tiny,
in the simulator) and refuses bad arguments with exit status 2; on a GPU, a short GraphSAGE run
whose loss falls."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (extra: torch)")

from gids.cli import main  # noqa: E402
from workloads.gnn.dataset import make_dataset  # noqa: E402
from workloads.gnn.paths import PATHS, make_feature_path  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("gnn"), 6, 24, edgefactor=4, classes=4,
                        seed=int(np.random.default_rng().integers(1 << 20)))


def _splitmix64(z):
    """SplitMix64's output function over a uint64 array (numpy wraps the products)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def reference_noise(seed, first, stop, dim):
    """The feature file's noise rows, transcribed from docs/formats.md in numpy: pair ``p`` of
    row ``v`` is Marsaglia's polar method over the hashes of counters ``(v * pairs + p) * 64 +
    1, 2, ...``."""
    gamma = np.uint64(0x9E3779B97F4A7C15)
    key = _splitmix64(np.array([(seed + 1) * int(gamma) % 2**64], dtype=np.uint64))[0]
    pairs = (dim + 1) // 2
    counter = np.arange(first * pairs, stop * pairs, dtype=np.uint64) * np.uint64(64)
    u = np.zeros(counter.size)
    v = np.zeros(counter.size)
    s = np.zeros(counter.size)
    pending = np.ones(counter.size, dtype=bool)
    for _ in range(64):
        counter += np.uint64(1)
        x = _splitmix64(key + counter * gamma)
        uu = (x >> np.uint64(32)).astype(np.float64) / 2**31 - 1
        vv = (x & np.uint64(0xFFFFFFFF)).astype(np.float64) / 2**31 - 1
        ss = uu * uu + vv * vv
        take = pending & (ss > 0) & (ss < 1)
        u[take], v[take], s[take] = uu[take], vv[take], ss[take]
        pending &= ~take
    assert not pending.any()
    f = np.sqrt(-2 * np.log(s) / s)
    noise = np.stack([(u * f).astype(np.float32), (v * f).astype(np.float32)], axis=1)
    return noise.reshape(stop - first, 2 * pairs)[:, :dim]


def test_dataset_file_and_labels(data):
    rows = np.fromfile(data.features_path, dtype=np.float32).reshape(data.n_vertices, data.dim)
    assert rows.shape == (64, 24) and np.isfinite(rows).all()
    from workloads.gnn.dataset import class_means, class_of
    np.testing.assert_array_equal(data.labels, class_of(np.arange(64), data.seed, 4))
    assert set(np.unique(data.labels)) <= set(range(4))
    # the planted rule: a row minus its class's mean is the seed's standard normal noise
    noise = rows - class_means(data.dim, 4, data.seed)[data.labels]
    np.testing.assert_allclose(noise, reference_noise(data.seed, 0, 64, data.dim), atol=1e-5)


@pytest.mark.parametrize("dim", [7, 1024])
def test_feature_file_is_the_same_whatever_the_slicing(tmp_path, dim, monkeypatch):
    """Rows made by many threads in small slices equal one slice made alone, and the
    reference; an odd width leaves out the last pair's second half."""
    from workloads.gnn import dataset
    from workloads.graph import parallel
    seed = int(np.random.default_rng().integers(1 << 20))
    n = 37
    monkeypatch.setattr(parallel, "N_THREADS", 3)
    dataset.write_features(tmp_path / "sliced", n, dim, 5, seed, chunk_rows=4)
    sliced = np.fromfile(tmp_path / "sliced", dtype=np.float32).reshape(n, dim)
    whole = dataset.feature_rows(0, n, dim, 5, seed)
    np.testing.assert_array_equal(sliced, whole)
    means = dataset.class_means(dim, 5, seed)[dataset.class_of(np.arange(n), seed, 5)]
    np.testing.assert_allclose(sliced - means, reference_noise(seed, 0, n, dim), atol=1e-5)
    assert 0.7 < np.std(sliced - means) < 1.3


def test_dataset_is_found_again_by_its_parameters(tmp_path):
    from workloads.gnn import dataset
    first = make_dataset(tmp_path, 5, 8, edgefactor=2, classes=3, seed=11)
    stamp = first.features_path.stat().st_mtime_ns
    again = make_dataset(tmp_path, 5, 8, edgefactor=2, classes=3, seed=11)
    assert again.features_path == first.features_path
    assert again.features_path.stat().st_mtime_ns == stamp      # not written again
    other = make_dataset(tmp_path, 5, 8, edgefactor=2, classes=3, seed=12)
    assert other.features_path != first.features_path
    graph_path, features_path = dataset.dataset_paths(tmp_path, 5, 8, edgefactor=2, classes=3,
                                                      seed=12)
    assert (str(graph_path), features_path) == (str(other.graph.path), other.features_path)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("name", PATHS)
def test_every_feature_path_gathers_the_files_rows(data, name):
    rng = np.random.default_rng()
    nodes = torch.from_numpy(rng.choice(data.n_vertices, size=9, replace=False))
    expected = np.fromfile(data.features_path, dtype=np.float32).reshape(-1, data.dim)[nodes]
    out = torch.full((9, data.dim), float("nan"))
    path = make_feature_path(name, data, cache_fraction=0.25, storage="memory", page_size=512,
                             max_rows=16)
    try:
        path.gather(nodes, out)
        path.check()
    finally:
        path.close()
    np.testing.assert_array_equal(out.numpy(), expected)


def test_gather_only_command(tmp_path):
    out = tmp_path / "g.json"
    assert main(["gnn", "--gather-only", "--scale", "5", "--dim", "8", "--fanouts", "2,2",
                 "--batch-size", "2", "--batches", "1", "--data-path", "gids,memory,mmap",
                 "--cache-fractions", "0.5", "--dir", str(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["label"] for r in report["rows"]] == ["gids 50%", "memory", "mmap"]
    assert all(r["rows_per_s"] > 0 for r in report["rows"])
    assert 0 <= report["rows"][0]["hit_rate"] <= 1
    assert report["rows"][1]["hit_rate"] is None


def test_gather_only_whole_cache_times_hits_only(tmp_path):
    # The whole cache is warmed with the timed rows: the timed batches never miss.
    out = tmp_path / "g.json"
    assert main(["gnn", "--gather-only", "--scale", "5", "--dim", "8", "--fanouts", "2,2",
                 "--batch-size", "2", "--batches", "1", "--data-path", "gids",
                 "--cache-fractions", "1", "--dir", str(tmp_path), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["hit_rate"] == 1.0


@pytest.mark.parametrize("argv", [["--fanouts", "0,2"], ["--data-path", "disk"],
                                  ["--cache-fractions", "1.5"], ["--scale", "0"],
                                  ["--page-size", "1000"],
                                  ["--json", "/nonexistent-folder/gnn.json"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(["gnn", *argv])
    assert e.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_training_loss_falls(tmp_path):
    pytest.importorskip("torch_geometric")
    from workloads.gnn import train
    data = make_dataset(tmp_path, 14, 128, edgefactor=8, classes=8)
    graph = train.GraphSampler(data, (10, 5), seed=0)
    path = make_feature_path("gids", data, cache_fraction=0.25, storage="file")
    try:
        seeds = np.random.default_rng(0).permutation(data.n_vertices)
        result = train.run_epochs(data, path, graph, train_seeds=seeds[:8192],
                                  eval_seeds=seeds[8192:10240], batch_size=512, epochs=3,
                                  hidden=64, lr=0.01, seed=0, log=lambda s: None)
    finally:
        path.close()
        graph.close()
    losses = [e["loss"] for e in result["epochs"]]
    assert losses[-1] < losses[0]
    assert result["accuracy"] > 1.5 / data.classes   # chance is 1 / classes


def test_every_path_trains_the_same(data):
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    from workloads.gnn import train
    graph = train.GraphSampler(data, (2, 2), seed=3, page_size=512)
    seeds = np.random.default_rng(1).permutation(data.n_vertices)
    kw = dict(train_seeds=seeds[:8], eval_seeds=seeds[8:12], batch_size=4, epochs=1, hidden=8,
              lr=0.01, seed=3, log=lambda s: None)
    results = []
    try:
        for name, run in (("memory", train.run_epochs), ("mmap", train.run_epochs),
                          ("direct", train.run_epochs),
                          ("gids", train.run_loader_epochs)):
            path = make_feature_path(name, data, cache_fraction=0.5, page_size=512,
                                     max_rows=64)
            try:
                results.append(run(data, path, graph, **kw))
            finally:
                path.close()
    finally:
        graph.close()
    losses = {r["epochs"][0]["loss"] for r in results}
    assert len(losses) == 1, losses
    assert len({r["accuracy"] for r in results}) == 1


def test_ssd_count_without_profile_exits_2(capsys):
    assert main(["gnn", "--n-ssd", "2", "--data-path", "mmap"]) == 2
    assert "--n-ssd needs --ssd" in capsys.readouterr().err


@pytest.mark.parametrize("dim, buffers", [(24, 3), (1024, 1), (1024, 3)])
def test_direct_loader_reads_the_files_rows(tmp_path, dim, buffers):
    """The direct loader over many slices and threads (fewer rows than threads in the last
    slice; one slice at a time, or two read while one is copied), rows of part of a 4 KiB unit
    (bounce buffer) and of one whole unit (straight into the pinned slice), against the file's
    bytes; a row out of range is a named error."""
    from gids.errors import IndexOutOfRangeError
    from workloads.gnn.direct import DirectRows
    data = make_dataset(tmp_path, 7, dim, edgefactor=2, classes=3,
                        seed=int(np.random.default_rng().integers(1 << 20)))
    expected = np.fromfile(data.features_path, dtype=np.float32).reshape(-1, dim)
    rng = np.random.default_rng()
    path = DirectRows(data, threads=5, chunk_rows=7, buffers=buffers)
    try:
        assert path.info()["threads"] == 5
        for size in (1, 23, 128):
            nodes = torch.from_numpy(rng.choice(data.n_vertices, size=size, replace=False))
            out = torch.full((size, dim), float("nan"))
            path.gather(nodes, out)
            np.testing.assert_array_equal(out.numpy(), expected[nodes.numpy()])
        with pytest.raises(IndexOutOfRangeError):
            path.gather(torch.tensor([0, data.n_vertices]), torch.empty((2, dim)))
    finally:
        path.close()


def test_direct_loader_under_emulation(tmp_path):
    """Emulated drives: the rows from RAM, each held for the model; still the file's rows."""
    from workloads.gnn.direct import DirectRows
    from workloads.ssd_options import Emulation
    data = make_dataset(tmp_path, 6, 1024, edgefactor=2, classes=3, seed=5)
    expected = np.fromfile(data.features_path, dtype=np.float32).reshape(-1, 1024)
    nodes = torch.from_numpy(np.random.default_rng().permutation(data.n_vertices)[:40])
    out = torch.full((40, 1024), float("nan"))
    path = DirectRows(data, threads=4, chunk_rows=16, emulation=Emulation("p5800x", 2))
    try:
        assert path.name == "direct on 2 x p5800x" and not path.info()["o_direct"]
        path.gather(nodes, out)
    finally:
        path.close()
    np.testing.assert_array_equal(out.numpy(), expected[nodes.numpy()])


def test_gather_only_with_direct_and_emulated_drives(tmp_path):
    out = tmp_path / "g.json"
    assert main(["gnn", "--gather-only", "--scale", "5", "--dim", "8", "--fanouts", "2,2",
                 "--batch-size", "2", "--batches", "1", "--data-path", "gids,mmap,direct",
                 "--cache-fractions", "0.5", "--ssd", "p5800x", "--n-ssd", "1,4",
                 "--direct-threads", "3", "--dir", str(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["label"] for r in report["rows"]] == [
        "gids 50%", "gids 50% on 1 x p5800x", "gids 50% on 4 x p5800x", "mmap",
        "direct on 1 x p5800x", "direct on 4 x p5800x", "direct"]
    direct = report["rows"][6]
    assert direct["loader"]["threads"] == 3 and direct["emulation"] is None
    assert report["rows"][5]["emulation"] == {"ssd": "p5800x", "n_ssd": 4}


@pytest.mark.gpu
def test_gpu_direct_loader_matches_the_file(tmp_path):
    """On the GPU: pinned slices copied on torch's stream, several in flight, three batches
    back to back into poisoned CUDA tensors, then checked against the file's bytes."""
    from gids.sampling import torch_device
    from workloads.gnn.direct import DirectRows
    data = make_dataset(tmp_path, 14, 1024, edgefactor=4, classes=4,
                        seed=int(np.random.default_rng().integers(1 << 20)))
    expected = np.fromfile(data.features_path, dtype=np.float32).reshape(-1, 1024)
    rng = np.random.default_rng()
    path = DirectRows(data, threads=16, chunk_rows=1000)
    outs = []
    try:
        for size in (1, 5000, 16384):
            nodes = torch.from_numpy(rng.choice(data.n_vertices, size=size, replace=False))
            out = torch.full((size, 1024), float("nan"), device=torch_device())
            path.gather(nodes.to(torch_device()), out)
            outs.append((nodes, out))
        torch.cuda.synchronize()
    finally:
        path.close()
    for nodes, out in outs:
        np.testing.assert_array_equal(out.cpu().numpy(), expected[nodes.numpy()])


def test_direct_loader_names_a_failed_read(tmp_path):
    """A file cut short under the loader: the read of a row past its new end is a
    StorageIOError naming the row, raised by gather (not a row of zeros)."""
    from gids.errors import StorageIOError
    from workloads.gnn.direct import DirectRows
    data = make_dataset(tmp_path, 6, 1024, edgefactor=2, classes=3, seed=9)
    path = DirectRows(data, threads=3, chunk_rows=8)
    try:
        os.truncate(data.features_path, 10 * 4096)
        with pytest.raises(StorageIOError, match="row 40 "):
            path.gather(torch.tensor([1, 40, 2]), torch.empty((3, 1024)))
    finally:
        path.close()


def test_a_data_set_folder_that_cannot_be_made_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["gnn", "--gather-only", "--scale", "5", "--dim", "8", "--data-path", "mmap",
                 "--dir", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert "cannot make the data set" in err and "Traceback" not in err


@pytest.mark.gpu
def test_gpu_gather_only_with_emulated_drives_and_the_direct_loader(tmp_path):
    """gnn22-ssd's command, small: every row runs on the GPU and gathers something."""
    out = tmp_path / "g.json"
    assert main(["gnn", "--gather-only", "--scale", "12", "--dim", "1024", "--fanouts", "5,5",
                 "--batch-size", "256", "--batches", "2", "--data-path", "gids,mmap,direct",
                 "--cache-fractions", "0.25", "--storage", "mmap", "--ssd", "p5800x",
                 "--n-ssd", "1,4", "--direct-threads", "16", "--dir", str(tmp_path),
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 7 and all(r["rows_per_s"] > 0 for r in rows)
