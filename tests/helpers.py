"""Helpers shared by the tests (as numba-cuda's own test helper module)."""
import json
import threading

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


def default_engine():
    """The storage engine a default Runtime reads files with here (``io_uring`` where the kernel
    allows it, unless ``GIDS_ENGINE`` says threads), the reads each daemon thread of it keeps in
    flight (the ring's entries: ``engine_depth`` rounded up to a power of two; 1 for threads),
    and the demos' engine cell for them."""
    from host_daemon.uring import probe
    engine = gids.defaults.get("engine")
    if engine == "io_uring" and probe() is not None:
        engine = "threads"
    if engine == "threads":
        return engine, 1, engine
    depth = 1 << (gids.defaults.get("engine_depth") - 1).bit_length()
    return engine, depth, f"io_uring/{depth}"


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
        staging=a(np.uint64), zero_copy=a(np.uint64), early_base=-1, sq_ticket=a(np.int64),
        entry_turn=a(np.int64), n_queues=1, depth=1, err=a(np.int64), stats=a(np.uint64),
        timeout_ns=1, abort=a(np.int64), copy_locks=a(np.uint32),
        tier_slot=a(np.int64), tier=a(dtype), tier_words=a(np.uint64), tier_mode=0,
        tier_ref=a(np.int32), tier_free=a(np.int64), tier_free_top=a(np.int64), tier_victims=0)


def fake_nvme_handle(dtype):
    """An NvmeHandle (``backend="nvme"``) for compiling kernels to PTX without a GPU."""
    from kernels.handle import NvmeHandle
    a = lambda dt: np.zeros(4, dt)   # noqa: E731
    return NvmeHandle(*fake_handle(dtype), nv_sq=a(np.int64), nv_cq=a(np.int64),
                      nv_db=a(np.int64), nv_ring=2, nv_sq_tail=a(np.int64),
                      nv_sq_head=a(np.int64), nv_cq_head=a(np.int64), nv_cpl=a(np.int64),
                      nv_prp_base=0)


_ptx_memo = {}


def compile_ptx(func, sig, cc=(9, 0)):
    """``numba.cuda.compile_ptx(func, sig, cc=cc)`` remembered for the process: the compile
    scripts that share a process (:func:`run_compile_script`) compile a kernel once."""
    from numba import cuda
    key = (func, tuple(sig), tuple(cc))
    if key not in _ptx_memo:
        _ptx_memo[key] = cuda.compile_ptx(func, sig, cc=cc)
    return _ptx_memo[key]


#: What every emulated-warp script starts with: a short GIL switch interval (the 32 Python
#: threads of a warp must interleave often), gids before numba, the simulator's block manager
#: that lets the GIL go (tests/polite_simulator.py), and a check that the subprocess really
#: emulates 32-lane warps.
WARP32_PREAMBLE = """\
import sys
sys.setswitchinterval(1e-4)
import numpy as np
import gids
from numba import cuda
from tests import polite_simulator
polite_simulator.install()
from kernels.platform import WARP_SIZE
assert WARP_SIZE == 32
"""


def _run_warp32(body, timeout=600):
    """``WARP32_PREAMBLE + body`` run in a subprocess of the simulator with emulated 32-lane
    warps (``GIDS_SIM_WARP_SIZE=32``, which must be set before numba loads)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GIDS_SIM_WARP_SIZE="32")
    return subprocess.run([sys.executable, "-c", WARP32_PREAMBLE + body], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def check_warp32(proc, marker):
    """Check that a :func:`run_with_warp32` script printed ``marker``."""
    assert marker in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def run_with_warp32(body, marker, timeout=600):
    """Run ``WARP32_PREAMBLE + body`` in a subprocess of the simulator with emulated 32-lane
    warps (``GIDS_SIM_WARP_SIZE=32``, which must be set before numba loads) and check that it
    printed ``marker``."""
    check_warp32(_run_warp32(body, timeout), marker)


@cuda.jit
def write_then_read(h, idx, values, out):
    """Each thread writes its element through gids, then reads it back in the same kernel."""
    k = cuda.grid(1)
    if k < idx.size:
        gids.write(h, idx[k], values[k])
        out[k] = gids.read(h, idx[k])


# --- scripts for the real compiler, in a process shared between tests -----------------------

#: A process that runs scripts sent to it, one JSON line each, each in a namespace of its own
#: (as ``python -c SCRIPT ARGS``), and answers with what the script printed and its exit status.
#: Compiling to PTX is mostly numba typing the device functions behind ``gids.read``, and one
#: process types each (function, signature) once: the compile tests share one such process.
_SCRIPT_SERVER = r'''
import contextlib, io, json, os, sys, traceback
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)          # anything written to fd 1 below Python goes to stderr, not the answers
for line in sys.stdin:
    request = json.loads(line)
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = ["-c", *request["args"]]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(request["script"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    answers.write(json.dumps({"stdout": out.getvalue(), "stderr": err.getvalue(),
                              "returncode": code}) + "\n")
    answers.flush()
'''

_servers = {}
_servers_lock = threading.Lock()


def _compile_env(overrides):
    """The environment of a compile script: this one's without the ``GIDS_*`` settings (the
    scripts check what the defaults compile to), the real compiler, and ``overrides``."""
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIDS_")}
    env["NUMBA_ENABLE_CUDASIM"] = "0"
    env.update(overrides)
    return env


def _close_servers():
    for proc, _ in _servers.values():
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except Exception:
                proc.kill()


def _run_compiled(script, *args, env=None, shared=True, timeout=600):
    """:func:`run_compile_script` without its NVVM check.

    Run ``script`` (which compiles with the real compiler, ``NUMBA_ENABLE_CUDASIM=0``) as
    ``python -c script *args`` would, from the repository root, with the ``GIDS_*`` settings at
    their defaults but for ``env``; return a :class:`subprocess.CompletedProcess` (text).

    ``shared``: in the process kept for scripts with the same ``env`` (device functions typed
    by an earlier script are not typed again). A script that changes what numba compiles device
    functions for (another compute capability) must pass ``shared=False``: a process of its own.
    """
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(env or {})
    full_env = _compile_env(env)
    if not shared:
        return subprocess.run([sys.executable, "-c", script, *args], cwd=root, env=full_env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    with _servers_lock:       # (the early scripts' thread and a test may both ask)
        return _ask_server(script, args, env, full_env, root, timeout)


def _ask_server(script, args, env, full_env, root, timeout):
    import atexit
    import select
    import subprocess
    import sys
    import tempfile
    key = tuple(sorted(env.items()))
    proc, log = _servers.get(key, (None, None))
    if proc is None or proc.poll() is not None:
        if not _servers:
            atexit.register(_close_servers)
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen([sys.executable, "-c", _SCRIPT_SERVER], cwd=root, env=full_env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True)
        _servers[key] = (proc, log)
    proc.stdin.write(json.dumps({"script": script, "args": list(args)}) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:      # timed out, or the process died (its stderr tells why)
        proc.kill()
        proc.wait()
        del _servers[key]
        log.seek(0)
        if not ready:
            raise subprocess.TimeoutExpired(script[:200], timeout, stderr=log.read())
        return subprocess.CompletedProcess(script, proc.returncode, "", log.read())
    answer = json.loads(line)
    return subprocess.CompletedProcess(script, answer["returncode"], answer["stdout"],
                                       answer["stderr"])


def _skip_without_nvvm(proc):
    if "cannot be found" in proc.stderr and "NVVM" in proc.stderr:
        pytest.skip("NVVM not installed (pip install nvidia-nvvm nvidia-cuda-nvrtc)")
    return proc


def run_compile_script(script, *args, env=None, shared=True, timeout=600):
    """Run a script that compiles with the real compiler (see :func:`_run_compiled`) and return
    its :class:`subprocess.CompletedProcess`; skip the calling test where NVVM is not installed
    (the script's compile then fails naming it)."""
    return _skip_without_nvvm(_run_compiled(script, *args, env=env, shared=shared,
                                            timeout=timeout))


_lanes = {}


class EarlyScript:
    """A script run in a process of its own that may run before its test.

    A test marked ``@started_early(S)`` has ``S`` started once the session's tests are collected
    (tests/conftest.py), in a thread that runs the scripts of its kind (:attr:`lane`) one at a
    time in the order of the tests: the script works on another core while the simulator tests
    run in this process, and the test's :meth:`result` waits only for what is left. Unstarted,
    :meth:`result` runs it there and then.
    """

    #: Scripts of one lane run one after the other (those of the compile server must).
    lane = "scripts"

    def __init__(self, run, *args, **options):
        self._call = (run, args, options)
        self._future = None

    def start(self):
        if self._future is None:
            from concurrent.futures import ThreadPoolExecutor
            if self.lane not in _lanes:
                _lanes[self.lane] = ThreadPoolExecutor(1, thread_name_prefix=self.lane)
            run, args, options = self._call
            self._future = _lanes[self.lane].submit(run, *args, **options)

    def result(self):
        """The script's :class:`subprocess.CompletedProcess`."""
        if self._future is None or self._future.cancelled():
            run, args, options = self._call
            return run(*args, **options)
        return self._future.result()


class CompileScript(EarlyScript):
    """:func:`run_compile_script`'s script and arguments, run early."""

    lane = "compile"

    def __init__(self, script, *args, env=None, shared=True, timeout=600):
        super().__init__(_run_compiled, script, *args, env=env, shared=shared, timeout=timeout)

    def result(self):
        return _skip_without_nvvm(super().result())


class Warp32Script(EarlyScript):
    """:func:`run_with_warp32`'s script, run early (check it with :func:`check_warp32`)."""

    lane = "warp32"

    def __init__(self, body, timeout=600):
        super().__init__(_run_warp32, body, timeout=timeout)


def started_early(*scripts):
    """Mark a test as one that waits for these :class:`EarlyScript` objects (started early)."""
    return pytest.mark.early_scripts(*scripts)


def start_early_scripts(items):
    """Start the :class:`EarlyScript` objects the marks of these tests name, in their order."""
    for item in items:
        if item.get_closest_marker("skip"):
            continue
        for mark in item.iter_markers("early_scripts"):
            for script in mark.args:
                script.start()


def stop_early_scripts():
    """Drop the scripts not yet started (a session that ends early waits only for those
    running)."""
    for lane in _lanes.values():
        lane.shutdown(wait=False, cancel_futures=True)
