"""``gids gnn``: every feature path gathers the file's rows; the command runs end to end (tiny,
in the simulator) and refuses bad arguments with exit status 2; on a GPU, a short GraphSAGE run
whose loss falls."""
import json

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


def test_dataset_file_and_labels(data):
    rows = np.fromfile(data.features_path, dtype=np.float32).reshape(data.n_vertices, data.dim)
    assert rows.shape == (64, 24) and np.isfinite(rows).all()
    from workloads.gnn.dataset import class_means, class_of
    np.testing.assert_array_equal(data.labels, class_of(np.arange(64), data.seed, 4))
    assert set(np.unique(data.labels)) <= set(range(4))
    # the planted rule: a row minus its class's mean is the seed's standard normal noise
    noise = rows - class_means(data.dim, 4, data.seed)[data.labels]
    expected = np.random.default_rng([data.seed, 2, 0]).standard_normal((64, 24),
                                                                        dtype=np.float32)
    np.testing.assert_allclose(noise, expected, atol=1e-6)


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
                                  ["--page-size", "1000"]])
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
