"""Helpers shared by the tests (as numba-cuda's own test helper module)."""
import numpy as np
import pytest

from kernels.platform import SIMULATOR

skip_on_simulator = pytest.mark.skipif(SIMULATOR, reason="not supported in the CUDA simulator")
skip_unless_simulator = pytest.mark.skipif(not SIMULATOR, reason="simulator-only test")


def random_file(path, nbytes, seed):
    """Write ``nbytes`` of fresh random bytes to ``path``; return them as a uint8 array."""
    data = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    data.tofile(path)
    return data


def poisoned(n, dtype):
    """A host array filled with a value no test data will contain in the checked places."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(n, np.nan, dtype=dtype)
    return np.full(n, np.iinfo(dtype).max, dtype=dtype)
