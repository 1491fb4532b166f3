"""Test setup: the simulator where there is no GPU, and the ``gpu`` marker.

Tests run in Numba's CUDA simulator unless a GPU is present and NUMBA_ENABLE_CUDASIM is unset.
``gpu`` tests need a real GPU and are skipped in the simulator.
"""
import sys

import gids  # noqa: F401  (picks the world before numba.cuda loads)

# isort: split
import pytest

from kernels.platform import SIMULATOR

# Host <-> simulated-kernel handshakes are Python threads taking turns on the GIL: switch often.
sys.setswitchinterval(1e-4)


def pytest_collection_modifyitems(config, items):
    if not SIMULATOR:
        return
    skip = pytest.mark.skip(reason="needs a real GPU (running in the CUDA simulator)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    # The scripts of tests.helpers.started_early run in the background from now on.
    if session.config.option.collectonly:
        return
    from tests.helpers import start_early_scripts
    start_early_scripts(session.items)


def pytest_sessionfinish(session):
    from tests.helpers import stop_early_scripts
    stop_early_scripts()

# The simulator's block manager polls its threads holding the GIL: one that lets it go between
# passes (tests/polite_simulator.py) about halves the time of a simulator test.
if SIMULATOR:
    from tests import polite_simulator
    if not polite_simulator.install():
        import warnings
        warnings.warn("numba-cuda's simulator BlockManager.run changed: tests/polite_simulator.py "
                      "left it as it is (the simulator tests run about twice as long)")
