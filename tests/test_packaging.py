"""What an install and a test run print before any of gids runs: no setuptools deprecation of
the license table, and no invalid-escape warning from compiling the sources and the tests."""
import warnings
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"     # a TOML table is deprecated
    requires = meta["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=") and
               tuple(int(x) for x in r.split(">=")[1].split(".")[:1]) >= (77,) for r in requires)


@pytest.mark.parametrize("folder", ["gids", "kernels", "host_daemon", "workloads", "tests"])
def test_sources_compile_without_warnings(folder):
    for path in sorted((ROOT / folder).rglob("*.py")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")                # invalid escapes: SyntaxWarning
            compile(path.read_text(), str(path), "exec")
