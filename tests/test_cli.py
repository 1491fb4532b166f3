"""The ``gids`` command's own subcommands in the simulator: the demo the README runs first,
and ``info``, which names the world and every setting a figure depends on."""
import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gids.cli import main
from kernels.platform import SIMULATOR


@pytest.mark.skipif(not SIMULATOR, reason="the demo's simulator sizes")
def test_demo_reads_through_a_small_cache_and_checks_every_value(capsys, tmp_path):
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CUDA simulator" in out and "all 256 values equal numpy's" in out
    assert "simulator: not a GPU figure" in out


def test_info_names_the_world_and_the_settings_read_at_import(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert ("CUDA simulator" if SIMULATOR else "GPU") in out
    for name in ("GIDS_MAX_REGISTERS=", "GIDS_POLL_NS=",
                 "GIDS_BULK_COPY_LANES=", "GIDS_HOT_QUEUE_EVERY="):
        assert name in out


# ------------------------------------------------------------------ mistakes: one line, status 2

def _status(argv):
    """``gids ARGV``'s exit status, whether main returned it or argparse exited with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _bad_files(tmp_path):
    (tmp_path / "bad.trace").write_bytes(b"not a gids trace, at all: garbage")
    (tmp_path / "bad.fvecs").write_bytes(b"\xff\xff\xff\x7f" + bytes(12))
    (tmp_path / "bad.txt").write_text("# an edge list with a word in it\n0 1\n1 two\n")
    return tmp_path


MISTAKES = [
    (["demo", "--size", "100"], "--size 100 is less than one page"),
    (["demo", "--reads", "-3"], "argument --reads: must be at least 1, got -3"),
    (["demo", "--cache-fraction", "-1"], "argument --cache-fraction: must lie in (0, 1]"),
    (["demo", "--page-size", "1000"], "argument --page-size: must be a power of two"),
    (["demo", "--dir", "{tmp}/nowhere"], "argument --dir: no such folder"),
    (["simulate", "{tmp}/bad.trace", "--ssd", "bogus"], "valid profiles: 980pro"),
    (["simulate", "{tmp}/bad.trace", "--n-ssd", "0"], "argument --n-ssd: must be at least 1"),
    (["simulate", "{tmp}/bad.trace", "--stripe-bytes", "0"], "must be at least 1"),
    (["simulate", "{tmp}/bad.trace"], "not a gids I/O trace"),
    (["simulate", "{tmp}/missing.trace"], "No such file or directory"),
    (["bfs", "--scale", "4", "--roots", "0"], "argument --roots: must be at least 1, got 0"),
    (["bfs", "--scale", "0"], "argument --scale: must be at least 1"),
    (["bfs", "--scale", "4", "--root", "-1"], "argument --root: must be at least 0"),
    (["bfs", "--scale", "4", "--page-size", "3"], "argument --page-size: must be a power of two"),
    (["bfs", "--graph", "{tmp}/bad.txt", "--root", "0"], "not an edge list line"),
    (["cc", "--scale", "4", "--edgefactor", "0"], "argument --edgefactor: must be at least 1"),
    (["search", "--n", "5"], "--n 5 vectors cannot fill 16 lists"),
    (["search", "--lists", "0"], "argument --lists: must be at least 1, got 0"),
    (["search", "--k", "0"], "argument --k: must be at least 1"),
    (["search", "--vectors", "{tmp}/bad.fvecs"], "cannot read vectors from"),
    (["search", "--vectors", "{tmp}/none.fvecs"], "No such file or directory"),
    (["search", "--index", "{tmp}/bad.fvecs"], "cannot open the index"),
    (["search", "--json", "{tmp}/no/dir/out.json"], "argument --json: no folder"),
    (["search", "--threads", "48"], "--threads must be a power of two"),
    (["bench", "--dir", "{tmp}/nowhere"], "argument --dir: no such folder"),
    (["bench", "--seed", "-1"], "argument --seed: must be at least 0"),
    (["bench", "--reps", "0"], "reps must be an integer >= 1"),
]


@pytest.mark.parametrize("argv, message", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_gets_one_line_and_status_2(argv, message, tmp_path, capsys):
    tmp = _bad_files(tmp_path)
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    assert _status(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and errors[0].startswith(f"gids {argv[0]}: error: "), err
    assert message in errors[0], err
    assert "Traceback" not in err


def test_python_m_gids_runs_the_command_and_answers_a_mistake_with_status_2(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    ok = subprocess.run([sys.executable, "-m", "gids", "--help"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and all(c in ok.stdout for c in ("demo", "bfs", "search", "bench"))
    bad = subprocess.run([sys.executable, "-m", "gids", "demo", "--reads", "x"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_the_library_does_not_import_the_workloads(tmp_path):
    # Only the subcommand that runs has its workload module imported.
    code = ("import sys, gids, gids.cli\n"
            "gids.cli.build_parser(None).parse_args(['info'])\n"
            "assert not [m for m in sys.modules if m.startswith('workloads')], 'imported'\n"
            "gids.cli.build_parser('bfs')\n"
            "assert 'workloads.graph.cli' in sys.modules and 'workloads.bench' not in sys.modules\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=root), timeout=120)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ your own graph, your roots

@pytest.mark.skipif(not SIMULATOR, reason="simulator sizes")
def test_bfs_and_cc_read_edge_lists_and_npy_edges_take_roots_and_record_a_trace(tmp_path, capsys):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from host_daemon.trace import read_trace
    rng = np.random.default_rng()
    n = 40
    edges = rng.integers(0, n, (60, 2))
    text = tmp_path / "edges.txt"
    text.write_text("# FromNodeId\tToNodeId\n" + "".join(f"{u}\t{v}\n" for u, v in edges))
    roots = [int(edges[0, 0]), int(edges[1, 1])]
    trace = tmp_path / "bfs.trace"
    argv = ["bfs", "--graph", str(text), "--root", str(roots[0]), "--root", str(roots[1]),
            "--data-path", "gids", "--cache-fractions", "1", "--validate", "scipy",
            "--json", str(tmp_path / "bfs.json"), "--trace", str(trace)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "converting the edge list" in captured.err and (tmp_path / "edges.txt.csr").exists()
    report = json.loads((tmp_path / "bfs.json").read_text())
    assert report["config"]["roots"] == roots
    assert all(s["valid"] for s in report["runs"][0]["searches"])
    assert report["graph"]["n_input_edges"] == len(edges)
    ios = sum(s["stats"]["ios"] for s in report["runs"][0]["searches"])
    assert len(read_trace(trace)) >= ios > 0          # the timed searches' I/Os and the warm-up's
    assert main(["simulate", str(trace), "--ssd", "p5800x"]) == 0
    assert "IOPS" in capsys.readouterr().out
    # The second time the converted file is used as it is.
    assert main(argv[:3] + ["--data-path", "memory", "--root", "0"]) == 0
    assert "using " in capsys.readouterr().err

    npy = tmp_path / "edges.npy"
    np.save(npy, edges)
    assert main(["cc", "--graph", str(npy), "--data-path", "gids", "--cache-fractions", "0.5",
                 "--json", str(tmp_path / "cc.json")]) == 0
    capsys.readouterr()
    n_vertices = int(edges.max()) + 1
    m = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n_vertices,) * 2)
    expected = connected_components(m, directed=False)[0]
    run = json.loads((tmp_path / "cc.json").read_text())["runs"][0]
    assert run["valid"] and run["n_components"] == expected

    assert main(argv[:3] + ["--root", str(n_vertices)]) == 2
    assert f"--root {n_vertices} is not a vertex" in capsys.readouterr().err


@pytest.mark.skipif(not SIMULATOR, reason="simulator sizes")
def test_bench_records_a_trace_of_its_gids_runs(tmp_path, capsys):
    from host_daemon.trace import read_trace
    trace = tmp_path / "bench.trace"
    assert main(["bench", "latency", "--paths", "gids,memory", "--latency-requests", "3",
                 "--no-progress", "--trace", str(trace)]) == 0
    assert "wrote " in capsys.readouterr().err
    assert len(read_trace(trace)) > 0
    assert main(["simulate", str(trace), "--ssd", "pm1743", "--n-ssd", "2"]) == 0
    assert "2 x pm1743" in capsys.readouterr().out
