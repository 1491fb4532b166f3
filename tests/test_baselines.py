"""The baseline data paths in the simulator: one kernel body, the same values as numpy on every
path; the cpu_batch pass protocol; the errors each path raises."""
import os
import subprocess
import sys
import textwrap

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)
import numpy as np
import pytest
from numba import cuda

from gids.errors import ConfigError, IndexOutOfRangeError, StorageIOError
from host_daemon.stores import FaultyStore
from workloads import baselines as B
from workloads.bench import expected_warp_sums

PATHS = B.available_paths()
# Small pages and caches: several pages per test, evictions on gids, a few batch slots.
OPTIONS = dict(page_size=512, cache_pages=4, batch_pages=64)


def _chain_data(n, dtype, seed):
    """Values in [0, n) (integer-valued for floats), so each value is an index of the array."""
    return np.random.default_rng(seed).integers(0, n, n).astype(dtype)


@pytest.fixture(scope="module", params=[np.int64, np.float32], ids=["int64", "float32"])
def data(request):
    return _chain_data(2048, request.param, seed=1)


@pytest.mark.parametrize("name", PATHS)
def test_gather_and_chains_match_numpy(name, data):
    """The same two kernels (random gather, dependent element chains) on every path."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, data.size, 40)
    idx[:2] = [0, data.size - 1]
    starts = rng.integers(0, data.size, 6)
    steps = 3
    path = B.make_path(name, **OPTIONS)
    with path.open(data) as arr:
        out = cuda.device_array(idx.size, data.dtype)
        path.launch(B.gather_template, arr, 2, 32, [(cuda.to_device(idx), out)])
        np.testing.assert_array_equal(out.copy_to_host(), data[idx])

        chains = cuda.device_array(starts.size * steps, data.dtype)
        path.launch(B.element_chains_template, arr, 1, 32,
                    [(cuda.to_device(starts), steps, data.size, chains)])
        want = np.empty((starts.size, steps), data.dtype)
        i = starts.copy()
        for s in range(steps):
            want[:, s] = data[i]
            i = data[i].astype(np.int64) % data.size
        np.testing.assert_array_equal(chains.copy_to_host().reshape(-1, steps), want)


@pytest.mark.parametrize("name", PATHS)
def test_request_chains_match_numpy(name):
    """Warps reading whole requests, as chains, in three launches (two pipelined buffers)."""
    data = np.random.default_rng(3).integers(0, 1 << 40, 4096, dtype=np.int64)
    elems, n_req, steps = 64, 64, 2            # 512-byte requests
    starts = np.random.default_rng(4).integers(0, n_req, 6)
    chunks = [starts[0:2], starts[2:4], starts[4:6]]
    path = B.make_path(name, **OPTIONS)
    with path.open(data) as arr:
        outs = [cuda.device_array(64, np.int64) for _ in chunks]
        info = path.launch(B.requests_template, arr, 2, 32,
                           [(cuda.to_device(c), steps, elems, n_req, o)
                            for c, o in zip(chunks, outs)])
        for c, o in zip(chunks, outs):
            got = o.copy_to_host().reshape(-1, 32).sum(axis=1)
            np.testing.assert_array_equal(got, expected_warp_sums(data, c, steps, elems, n_req, 2))
    assert info["passes"] >= 3


def test_cpu_batch_takes_one_pass_per_dependent_step():
    """A chain through distinct pages: the kernel runs once per step, plus once to finish."""
    n, steps = 1024, 4                       # 8 elements per 64-byte page: 128 pages
    data = np.zeros(n, dtype=np.int64)
    visit = [5, 300, 620, 1000, 77]          # each on its own page
    for a, b in zip(visit, visit[1:]):
        data[a] = b
    path = B.make_path("cpu_batch", page_size=64, batch_pages=16)
    with path.open(data) as arr:
        out = cuda.device_array(steps, np.int64)
        info = path.launch(B.element_chains_template, arr, 1, 32,
                           [(cuda.to_device(np.array([visit[0]])), steps, n, out)])
        np.testing.assert_array_equal(out.copy_to_host(), visit[1:])
        assert info["passes"] == steps + 1
        assert arr.stats()["pages_fetched"] == steps
        # Launch again: the first launch's pages left the buffer, all fetched anew.
        arr.reset_counters()
        path.launch(B.element_chains_template, arr, 1, 32,
                    [(cuda.to_device(np.array([visit[0]])), steps, n, out)])
        assert arr.stats()["pages_fetched"] == steps


def test_cpu_batch_reads_files_and_refuses_a_batch_too_large(tmp_path):
    data = np.arange(4096, dtype=np.int64)
    data.tofile(tmp_path / "d.bin")
    path = B.make_path("cpu_batch", page_size=512, batch_pages=4)
    with path.open(str(tmp_path / "d.bin"), dtype=np.int64) as arr:
        idx = np.array([0, 64, 128, 4095])            # 4 pages: fits
        out = cuda.device_array(4, np.int64)
        path.launch(B.gather_template, arr, 1, 32, [(cuda.to_device(idx), out)])
        np.testing.assert_array_equal(out.copy_to_host(), idx)
        idx5 = cuda.to_device(np.array([0, 64, 128, 192, 256]))   # 5 pages: does not
        out5 = cuda.device_array(5, np.int64)
        with pytest.raises(ConfigError, match="batch_pages"):
            path.launch(B.gather_template, arr, 1, 32, [(idx5, out5)])
        # and the array is usable again
        path.launch(B.gather_template, arr, 1, 32, [(cuda.to_device(idx), out)])
        np.testing.assert_array_equal(out.copy_to_host(), idx)


@pytest.mark.parametrize("name", PATHS)
def test_out_of_range_index_is_an_error_on_every_path(name):
    data = np.arange(1000, dtype=np.int64)
    path = B.make_path(name, **OPTIONS)
    with path.open(data) as arr:
        out = cuda.device_array(2, np.int64)
        with pytest.raises(IndexOutOfRangeError, match="1000"):
            path.launch(B.gather_template, arr, 1, 32, [(cuda.to_device(np.array([3, 1000])),
                                                          out)])
        # the path recovers
        path.launch(B.gather_template, arr, 1, 32, [(cuda.to_device(np.array([3, 999])), out)])
        np.testing.assert_array_equal(out.copy_to_host(), [3, 999])


def test_cpu_batch_names_a_page_it_cannot_read():
    data = np.arange(1024, dtype=np.int64)
    store = FaultyStore(data, page_size=512, faults={3: "eio"})
    path = B.make_path("cpu_batch", page_size=512)
    with path.open(store, dtype=np.int64) as arr:
        out = cuda.device_array(2, np.int64)
        with pytest.raises(StorageIOError, match="page 3") as info:
            path.launch(B.gather_template, arr, 1, 32,
                        [(cuda.to_device(np.array([0, 3 * 64])), out)])
        assert info.value.page == 3


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ConfigError, match="unknown data path 'spdk'.*memory, zero_copy, gids, nvme"):
        B.make_path("spdk")
    with pytest.raises(ConfigError, match="gather_threads must be an integer >= 1"):
        B.make_path("cpu_batch", gather_threads=0)
    with pytest.raises(ConfigError, match="batch_pages must be an integer >= 1"):
        B.make_path("cpu_batch", batch_pages=0)
    data = np.arange(100, dtype=np.int64)
    with pytest.raises(ConfigError, match="page_size 4 is not a multiple of the element"):
        B.make_path("cpu_batch", page_size=4).open(data)
    with pytest.raises(ConfigError, match="power of two"):
        B.make_path("cpu_batch", page_size=48).open(data)
    with pytest.raises(ConfigError, match="unsupported dtype"):
        B.make_path("memory").open(np.zeros(4, dtype=np.complex64))
    with pytest.raises(ConfigError, match="too short"):
        B.make_path("memory").open(data, shape=200)
    mem, zc = B.make_path("memory"), B.make_path("zero_copy")
    with mem.open(data) as arr:
        out = cuda.device_array(1, np.int64)
        with pytest.raises(ConfigError, match="opened on the 'memory' path"):
            zc.launch(B.gather_template, arr, 1, 32, [(cuda.to_device(np.array([1])), out)])
        with pytest.raises(ConfigError, match="blockdim .* must be an integer >= 1"):
            mem.launch(B.gather_template, arr, 1, 0, [(cuda.to_device(np.array([1])), out)])
    if "cpu_batch_kvikio" not in PATHS:
        with pytest.raises(ConfigError, match="'cpu_batch_kvikio' is not available here"):
            B.make_path("cpu_batch_kvikio").open(data)


def test_one_kernel_per_template_and_path():
    path = B.make_path("memory")
    assert path.kernel(B.gather_template) is path.kernel(B.gather_template)
    # every path object with the same reader shares it (compiled once on a GPU)
    assert B.make_path("zero_copy").kernel(B.gather_template) is path.kernel(B.gather_template)
    assert (B.make_path("gids", queues=2).kernel(B.requests_template)
            is B.make_path("gids", queues=4).kernel(B.requests_template))
    assert B.make_path("gids").reader is gids.read
    assert B.make_path("zero_copy").reader is B.plain_read


PTX_SCRIPT = textwrap.dedent('''
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    import gids
    from workloads import baselines as B

    a = lambda dt: np.zeros(4, dt)
    I64 = types.int64[::1]
    for dt in (np.int64, np.float32):
        plain = B.PlainHandle(data=a(dt), n_elems=1, zero=a(dt), err=a(np.int64))
        batch = B.BatchHandle(buf=a(dt), page_slot=a(np.int64), req=a(np.int64),
                              ctr=a(np.int64), zero=a(dt), n_elems=1, shift=1, capacity=1)
        for h, read in ((plain, B.plain_read), (batch, B.batch_read)):
            sigs = {"gather": (typeof(h), I64, typeof(a(dt))),
                    "element_chains": (typeof(h), I64, types.int64, types.int64, typeof(a(dt))),
                    "requests": (typeof(h), I64, types.int64, types.int64, types.int64, I64)}
            if dt == np.int64:
                sigs["timed_requests"] = (typeof(h), I64, types.int64, I64, I64, I64)
            for name, sig in sigs.items():
                ptx, _ = cuda.compile_ptx(B.TEMPLATES[name](read).py_func, sig, cc=(9, 0))
                if name == "timed_requests":
                    assert "%globaltimer" in ptx
    for k, sig in ((B._assign_slots, (I64, I64, types.int64, types.int64)),
                   (B._clear_slots, (I64, I64, types.int64))):
        cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    print("BASELINES_PTX_OK")
''')


def test_templates_compile_for_the_gpu():
    """Every template with the memory/zero-copy and cpu_batch readers compiles to PTX (sm_90),
    so the closures over device functions and the handles type on a GPU too."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", PTX_SCRIPT], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    if "cannot be found" in proc.stderr and "NVVM" in proc.stderr:
        pytest.skip("NVVM not installed (pip install nvidia-nvvm nvidia-cuda-nvrtc)")
    assert "BASELINES_PTX_OK" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("storage", ["file", "mmap", "memory"])
@pytest.mark.parametrize("name", ["cpu_batch", "zero_copy"])
def test_a_file_read_as_storage_says(name, storage, tmp_path):
    """A path opened on a file reads it as ``storage`` says, as the gids path does, so that a
    comparison reads the same medium on both sides; the values are the file's either way."""
    data = _chain_data(1024, np.int64, seed=7)
    path = tmp_path / "data.bin"
    header = 4096
    with open(path, "wb") as f:
        f.write(b"\xff" * header)
        f.write(data.tobytes())
    idx = np.random.default_rng(8).integers(0, data.size, 64)
    p = B.make_path(name, **OPTIONS)
    with p.open(str(path), np.int64, shape=data.size, offset=header, storage=storage) as arr:
        kind = {"file": "FileStore", "mmap": "MmapStore", "memory": "MemoryStore"}[storage]
        assert type(arr.store).__name__ == kind
        out = cuda.device_array(idx.size, np.int64)
        p.launch(B.gather_template, arr, 2, 32, [(cuda.to_device(idx), out)])
        np.testing.assert_array_equal(out.copy_to_host(), data[idx])
    with pytest.raises(ConfigError, match="storage must be one of"):
        p.open(str(path), np.int64, storage="tape")
