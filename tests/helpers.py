"""Helpers shared by the tests (as numba-cuda's own test helper module)."""
import numpy as np
import pytest
from numba import cuda

import gids
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


def fake_handle(dtype):
    """An ArrayHandle of tiny host arrays with the field types of a real one: enough to compile
    kernels that call gids.read or gids.write to PTX without a GPU (its values mean nothing)."""
    from kernels.handle import ArrayHandle
    a = lambda dt: np.zeros(4, dt)   # noqa: E731
    return ArrayHandle(
        cache=a(dtype), cache_words=a(np.uint64), zero=a(dtype), n_elems=1, elem_shift=1,
        page_words=1, array_id=0, page_base=0, writable=1, zero_word=np.uint32(0), page_state=a(np.uint64),
        slot_page=a(np.int64), clock=a(np.int64), n_slots=1, page_bases=a(np.int64), sq=a(np.int64), cq=a(np.int64),
        staging=a(np.uint64), zero_copy=a(np.uint64), sq_ticket=a(np.int64),
        entry_turn=a(np.int64), n_queues=1, depth=1, err=a(np.int64), stats=a(np.uint64),
        timeout_ns=1, abort=a(np.int64), copy_locks=a(np.uint32), slot_epoch=a(np.int64),
        l1_epoch=a(np.int64))


def fake_nvme_handle(dtype):
    """An NvmeHandle (``backend="nvme"``) for compiling kernels to PTX without a GPU."""
    from kernels.handle import NvmeHandle
    a = lambda dt: np.zeros(4, dt)   # noqa: E731
    return NvmeHandle(*fake_handle(dtype), nv_sq=a(np.int64), nv_cq=a(np.int64),
                      nv_db=a(np.int64), nv_ring=2, nv_sq_tail=a(np.int64),
                      nv_sq_head=a(np.int64), nv_cq_head=a(np.int64), nv_cpl=a(np.int64),
                      nv_prp_base=0)


#: What every emulated-warp script starts with: a short GIL switch interval (the 32 Python
#: threads of a warp must interleave often), gids before numba, and a check that the subprocess
#: really emulates 32-lane warps.
WARP32_PREAMBLE = """\
import sys
sys.setswitchinterval(1e-4)
import numpy as np
import gids
from numba import cuda
from kernels.platform import WARP_SIZE
assert WARP_SIZE == 32
"""


def run_with_warp32(body, marker, timeout=600):
    """Run ``WARP32_PREAMBLE + body`` in a subprocess of the simulator with emulated 32-lane
    warps (``GIDS_SIM_WARP_SIZE=32``, which must be set before numba loads) and check that it
    printed ``marker``."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GIDS_SIM_WARP_SIZE="32")
    proc = subprocess.run([sys.executable, "-c", WARP32_PREAMBLE + body], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert marker in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@cuda.jit
def write_then_read(h, idx, values, out):
    """Each thread writes its element through gids, then reads it back in the same kernel."""
    k = cuda.grid(1)
    if k < idx.size:
        gids.write(h, idx[k], values[k])
        out[k] = gids.read(h, idx[k])
