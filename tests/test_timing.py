"""Kernel timing behind a latch (workloads/timing.py): the GPU's time only, not the launch's
host cost. In the simulator, the wall clock and the latch kernel's logic; with the real
compiler (no GPU), that its poll load stays in its loop; on a GPU, that host time is held out."""
import textwrap
import threading
import time

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
import numpy as np
import pytest
from numba import cuda

from tests.helpers import CompileScript, skip_unless_simulator, started_early
from workloads import microbench, timing


@cuda.jit
def _one(out):
    if cuda.grid(1) == 0:
        out[0] = 1


def test_time_kernel_returns_positive_seconds():
    out = cuda.device_array(1, dtype=np.int64)
    seconds = microbench._time_kernel(lambda: _one[1, 1](out), repeat=2)
    assert isinstance(seconds, float) and seconds > 0
    t = timing.time_launch(lambda: _one[1, 1](out))
    assert isinstance(t.gpu_s, float) and t.gpu_s > 0 and t.host_s > 0 and t.held
    assert out.copy_to_host()[0] == 1


@skip_unless_simulator
def test_latch_kernel_waits_for_its_generation_and_times_out():
    """The latch's body, run by the simulator: it returns once the flag reaches its generation
    (set before, or by another thread while it spins), and on timeout writes the error word."""
    words = cuda.mapped_array(2, dtype=np.int64)
    words[:] = 0
    words[timing.FLAG] = 5
    timing.latch_kernel[1, 1](words, 5, 10 ** 9)           # already released
    assert words[timing.ERR] == 0
    release = threading.Timer(0.05, lambda: words.__setitem__(timing.FLAG, 6))
    release.start()
    start = time.perf_counter()
    timing.latch_kernel[1, 1](words, 6, 10 * 10 ** 9)      # released by the host thread
    release.join()
    assert words[timing.ERR] == 0 and time.perf_counter() - start < 5
    timing.latch_kernel[1, 1](words, 7, 10 ** 6)           # never released: 1 ms bound
    assert words[timing.ERR] == 7


LATCH_SCRIPT = textwrap.dedent('''
    import os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types

    class _Hopper:   # compile device functions for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    from workloads.timing import latch_kernel

    ptx, _ = cuda.compile_ptx(latch_kernel.py_func, (types.int64[::1], types.int64, types.int64),
                              cc=(9, 0))
    lines = [l.strip() for l in ptx.splitlines()]
    labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\\$L__\\w+:$", l)}
    back_edges = [(i, labels[m.group(1)]) for i, l in enumerate(lines)
                  for m in [re.search(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", l)]
                  if m and m.group(1) in labels and labels[m.group(1)] <= i]

    def in_loop(text):
        at = [i for i, l in enumerate(lines) if text in l]
        return bool(at) and any(dst <= i < src for i in at for src, dst in back_edges)

    # The flag is reloaded (system-scope acquire) on every iteration, with a sleep and a look
    # at the global timer between polls; on timeout, the error word by a release store.
    assert in_loop("ld.acquire.sys"), "the latch's poll load was hoisted out of its loop"
    assert in_loop("nanosleep"), "no nanosleep in the latch's loop"
    assert in_loop("%globaltimer"), "the latch's timeout does not read the timer in its loop"
    assert "st.release.sys" in ptx
    print("LATCH_OK")
''')


LATCH_PTX = CompileScript(LATCH_SCRIPT)


@started_early(LATCH_PTX)
def test_latch_poll_load_stays_in_its_loop():
    pytest.importorskip("numba.cuda")
    proc = LATCH_PTX.result()
    assert "LATCH_OK" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.gpu
def test_latch_holds_the_launch_host_time_out():
    """A launch whose host part takes 50 ms: the events time the kernel alone (microseconds).
    Without the latch they would time the 50 ms."""
    out = cuda.device_array(1, dtype=np.int64)
    _one[1, 1](out)
    cuda.synchronize()

    def slow_launch():
        time.sleep(0.05)
        _one[1, 1](out)

    t = timing.time_launch(slow_launch)
    assert t.held and t.host_s >= 0.05
    assert 0 < t.gpu_s < 0.005, t


@pytest.mark.gpu
def test_latch_released_by_the_watchdog_for_a_blocking_launch():
    """A launch that waits for the GPU (a copy to the host) is not deadlocked: the watchdog
    releases the latch, and the copy is still timed on the GPU."""
    out = cuda.device_array(1 << 20, dtype=np.int64)
    t = timing.time_launch(lambda: out.copy_to_host(), hold_s=0.1)
    assert not t.held and t.host_s >= 0.1 and 0 < t.gpu_s < 0.1, t


@pytest.mark.gpu
def test_latch_timeout_raises():
    with pytest.raises(timing.LatchTimeout, match="latch"):
        timing.time_launch(lambda: time.sleep(0.3), timeout_s=0.05, hold_s=5.0)
    # The next timing works (a new generation; the old error word is not taken for its own).
    out = cuda.device_array(1, dtype=np.int64)
    assert timing.time_launch(lambda: _one[1, 1](out)).gpu_s > 0
