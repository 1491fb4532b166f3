"""The README's Python examples run as written (so they cannot rot): extracted from README.md and
run in order, in a fresh Python as a reader would run them (on the GPU if there is one, else in
the simulator, where the examples size themselves small)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gids._platform import _gpu_present

ROOT = Path(__file__).resolve().parent.parent


def readme_examples():
    """The ```python blocks of README.md, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _run(code, cwd, env=None, timeout=240):
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_readme_examples_run_as_written(tmp_path):
    blocks = readme_examples()
    assert len(blocks) >= 2 and "import gids" in blocks[0]
    # As a reader runs them: no NUMBA_ENABLE_CUDASIM, gids picks the world.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = _run("\n".join(blocks), tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    world = "the GPU" if _gpu_present() else "the CUDA simulator"
    assert f"gids runs on {world}" in done.stdout
    # The write example's last line: element 4 untouched + 1, -1 + 1, 42 + 1.
    assert done.stdout.strip().splitlines()[-1] == "[ 5.  0. 43.]"


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present: numba.cuda first is fine there")
def test_numba_cuda_before_gids_without_a_gpu_names_the_import_order(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = _run("import numba.cuda\nimport gids\n", tmp_path, env=env, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gids.errors.ImportOrderError: ")
    assert "import gids before numba.cuda" in last
