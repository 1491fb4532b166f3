"""The baseline data paths in the simulator: one kernel body, the same values as numpy on every
path; the cpu_batch pass protocol; the errors each path raises."""
import textwrap

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
import numpy as np
import pytest
from numba import cuda

from gids.errors import ConfigError, IndexOutOfRangeError, StorageIOError
from host_daemon.stores import FaultyStore
from tests.helpers import CompileScript, Warp32Script, check_warp32, started_early
from workloads import baselines as B
from workloads.bench import expected_warp_sums
from workloads.pager import GIDS_PAGER, element_pager

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


def _file_at_offset(tmp_path, data, offset):
    """``data`` written ``offset`` bytes into a file (the bytes before it are not elements)."""
    path = tmp_path / "data.bin"
    with open(path, "wb") as f:
        f.write(b"\x07" * offset)
        f.write(data.tobytes())
    return str(path)


@pytest.mark.parametrize("name", PATHS)
def test_requests_read_a_page_at_a_time_match_numpy(name, tmp_path):
    """The request kernels read a page at a time (one pin per page through gids, element reads
    elsewhere) and give numpy's sums on every path: requests smaller than a page, unaligned ones
    that span two pages, ones longer than a page (3 or 4 pages each), in chains whose next
    address comes from the page read before; the array 12 bytes into a file (no multiple of
    the element or the page). (A page never holds part of an element: gids counts pages from
    element 0, the element sizes (1 to 8 bytes) divide every gids page (512 B to 64 KiB), and
    cpu_batch refuses a page size they do not divide.)"""
    data = np.random.default_rng(5).integers(0, 1 << 40, 3000, dtype=np.int64)
    # 512-byte pages (64 elements); 16 gids slots of the 47 pages: evictions, few waits for a slot.
    path = B.make_path(name, **dict(OPTIONS, cache_pages=16))
    with path.open(_file_at_offset(tmp_path, data, 12), np.int64, shape=data.size,
                   offset=12) as arr:
        for elems, steps in ((16, 1), (40, 3), (160, 2)):
            n_req = data.size // elems
            starts = np.random.default_rng(elems).integers(0, n_req, 5)
            starts[0] = 1        # elements 16..31, 40..79 (pages 0 and 1), 160..319 (2 to 4)
            out = cuda.device_array(64, np.int64)
            path.launch(B.requests_template, arr, 2, 32,
                        [(cuda.to_device(starts), steps, elems, n_req, out)])
            got = out.copy_to_host().reshape(-1, 32).sum(axis=1)
            np.testing.assert_array_equal(
                got, expected_warp_sums(data, starts, steps, elems, n_req, 2), err_msg=str(elems))
        # Queue depth 1, as the latency sweep reads: one warp, one request after another.
        elems, ids = 40, np.array([1, 30, 74])            # 74: the array's last whole request
        t0, t1 = (cuda.device_array(ids.size * 32, np.int64) for _ in range(2))
        out = cuda.device_array(32, np.int64)
        path.launch(B.timed_requests_template, arr, 1, 32,
                    [(cuda.to_device(ids), elems, t0, t1, out)])
        want = data[:75 * elems].reshape(75, elems).sum(axis=1)[ids].sum()
        assert out.copy_to_host().sum() == want
        assert (t1.copy_to_host() >= t0.copy_to_host()).all()


@pytest.mark.parametrize("name", PATHS)
def test_a_paged_request_out_of_range_is_an_error_on_every_path(name):
    """A request the page loop cannot pin (past the end, or before the start) is raised after
    the kernel on every path, and the path reads correctly again afterwards."""
    data = np.arange(1000, dtype=np.int64)
    elems = 40
    path = B.make_path(name, **OPTIONS)
    with path.open(data) as arr:
        out = cuda.device_array(32, np.int64)
        for bad in (25, -1):        # elements 1000..1039; -40..-1
            with pytest.raises(IndexOutOfRangeError):
                path.launch(B.requests_template, arr, 1, 32,
                            [(cuda.to_device(np.array([bad])), 1, elems, 1 << 20, out)])
        path.launch(B.requests_template, arr, 1, 32,
                    [(cuda.to_device(np.array([24])), 1, elems, 25, out)])
        assert out.copy_to_host().sum() == data[960:1000].sum()


#: (page bytes, [(elems, steps)]) for the test below. 512-byte pages (64 int64) on gids and
#: cpu_batch, 1024-element ones elsewhere: 8, 32, 64 divide both (several requests at once), 40
#: and 100 neither (unaligned, over two or three pages: one at a time). 8 KiB pages (1024
#: int64, every path): requests of 1024, 256 and 128 elements are two rounds of loads a lane,
#: one of sixteen, one of eight; 3000 elements, unaligned, parts of 2 to 1024 elements of a
#: page: every size of round, by the whole warp.
SEVERAL_CASES = [(512, [(8, 2), (32, 1), (64, 3), (40, 3), (100, 2)]),
                 (8192, [(1024, 2), (256, 1), (128, 3), (3000, 2)])]


@pytest.mark.parametrize("page_bytes, cases", SEVERAL_CASES, ids=["512B", "8KiB"])
@pytest.mark.parametrize("name", PATHS)
def test_warps_reading_several_requests_at_once_match_numpy(name, page_bytes, cases):
    """Where ``elems`` divides the page, a warp reads ``REQUESTS_PER_WARP`` requests at once (one
    group of lanes each, chains in lockstep); else one at a time. Both give numpy's sums on
    every path, with item counts that leave a warp short of a full step (its idle groups add
    nothing), chains, and requests that are unaligned and span two or three pages."""
    assert B.REQUESTS_PER_WARP > 1
    data = np.random.default_rng(9).integers(0, 1 << 40, 16384, dtype=np.int64)
    path = B.make_path(name, **dict(OPTIONS, page_size=page_bytes, cache_pages=16))
    with path.open(data) as arr:
        for elems, steps in cases:
            n_req = data.size // elems
            rng = np.random.default_rng(elems)
            # Two warps: 1 item (warp 0 short), 3 (warp 1 short), 7 (two steps and a short one).
            item_sets = [rng.integers(0, n_req, n) for n in (1, 3, 7)]
            outs = [cuda.device_array(64, np.int64) for _ in item_sets]
            path.launch(B.requests_template, arr, 2, 32,
                        [(cuda.to_device(c), steps, elems, n_req, o)
                         for c, o in zip(item_sets, outs)])
            for c, o in zip(item_sets, outs):
                got = o.copy_to_host().reshape(-1, 32).sum(axis=1)
                np.testing.assert_array_equal(
                    got, expected_warp_sums(data, c, steps, elems, n_req, 2),
                    err_msg=f"elems {elems}, {c.size} items")


WARP32_REQUESTS = textwrap.dedent('''
    from workloads import baselines as B
    from workloads.bench import expected_warp_sums

    # 64 pages of 512 bytes (64 int64); requests of 40 elements: 1 or 2 pages each.
    data = np.random.default_rng(6).integers(0, 1 << 40, 64 * 64, dtype=np.int64)
    elems, n_req = 40, data.size // 40
    starts = np.array([1, 8, 8, 51], dtype=np.int64)     # 2, 1, 1 and 2 pages; a shared page
    pages = sum((s * elems + elems - 1) // 64 - s * elems // 64 + 1 for s in starts)
    path = B.make_path("gids", page_size=512, cache_pages=32, queues=2, queue_depth=32,
                       timeout=60)
    with path.open(data) as arr:
        for rnd in ("misses", "hits"):
            out = cuda.device_array(128, np.int64)
            arr.reset_counters()
            path.launch(B.requests_template, arr, 1, 128,
                        [(cuda.to_device(starts), 1, elems, n_req, out)])
            got = out.copy_to_host().reshape(-1, 32).sum(axis=1)
            assert (got == expected_warp_sums(data, starts, 1, elems, n_req, 4)).all(), rnd
            st = arr.stats()
            # One lookup per page per warp, not one per 32 elements (2 per page here).
            assert st["hits"] + st["misses"] == pages == 6, (rnd, st)
        assert st["hits"] == pages, st
    print("REQUESTS32_OK")
''')
WARP32_REQUESTS_RUN = Warp32Script(WARP32_REQUESTS)


@started_early(WARP32_REQUESTS_RUN)
def test_emulated_warps_look_a_request_page_up_once():
    """With 32-lane warps, the gids request kernel makes one cache lookup per page of a request
    and warp (the lanes share it), misses and hits alike, and reads the right values."""
    check_warp32(WARP32_REQUESTS_RUN.result(), "REQUESTS32_OK")


WARP32_SEVERAL = textwrap.dedent('''
    from workloads import baselines as B
    from workloads.bench import chain_ids, expected_warp_sums

    R = B.REQUESTS_PER_WARP
    # 64 pages of 512 bytes (64 int64); requests of 32 elements, two to a page.
    data = np.random.default_rng(10).integers(0, 1 << 40, 64 * 64, dtype=np.int64)
    elems, n_req, steps, n_warps = 32, data.size // 32, 2, 4
    # Warp w takes items w, w + 4: warp 0 requests 0 and 1 (one page), warps 1 and 2 two
    # pages, warp 3 one item (its second group idle).
    starts = np.array([0, 2, 10, 77, 1, 5, 126], dtype=np.int64)
    ids = chain_ids(data, starts, steps, elems, n_req)
    # One lookup per distinct page of a warp's step: its groups' pins are one call, and an
    # idle group follows the warp's first chain.
    lookups = 0
    for w in range(n_warps):
        mine = list(range(w, starts.size, n_warps))
        for c in range(0, len(mine), R):
            for s in range(steps):
                lookups += len({int(ids[k, s]) * elems // 64 for k in mine[c:c + R]})
    assert lookups < starts.size * steps
    path = B.make_path("gids", page_size=512, cache_pages=32, queues=2, queue_depth=32,
                       timeout=60)
    with path.open(data) as arr:
        for rnd in ("misses", "hits"):
            out = cuda.device_array(32 * n_warps, np.int64)
            arr.reset_counters()
            path.launch(B.requests_template, arr, 1, 32 * n_warps,
                        [(cuda.to_device(starts), steps, elems, n_req, out)])
            got = out.copy_to_host().reshape(-1, 32).sum(axis=1)
            want = expected_warp_sums(data, starts, steps, elems, n_req, n_warps)
            assert (got == want).all(), rnd
            st = arr.stats()
            assert st["hits"] + st["misses"] == lookups, (rnd, st, lookups)
        assert st["hits"] == lookups, st
    print("SEVERAL32_OK")
''')
WARP32_SEVERAL_RUN = Warp32Script(WARP32_SEVERAL)


@started_early(WARP32_SEVERAL_RUN)
def test_emulated_warps_pin_a_steps_pages_in_one_call():
    """With 32-lane warps and requests that lie in one page, a warp's groups pin their pages
    in one call: one lookup per distinct page of the step (two requests on one page: one),
    none for an idle group; chains in lockstep; the right values."""
    check_warp32(WARP32_SEVERAL_RUN.result(), "SEVERAL32_OK")


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
    # Templates get the path's pager: real page pins on gids (and nvme), element reads elsewhere.
    assert B.make_path("gids").pager is GIDS_PAGER and B.make_path("nvme").pager is GIDS_PAGER
    assert B.make_path("zero_copy").pager is element_pager(B.plain_read)
    assert B.make_path("cpu_batch").pager.value is element_pager(B.batch_read).value


PTX_SCRIPT = textwrap.dedent('''
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    import re
    import gids
    from tests.helpers import fake_handle
    from workloads import baselines as B
    from workloads.pager import GIDS_PAGER, element_pager

    a = lambda dt: np.zeros(4, dt)
    I64 = types.int64[::1]
    REQUESTS = (I64, types.int64, types.int64, types.int64, I64)
    for dt in (np.int64, np.float32):
        plain = B.PlainHandle(data=a(dt), n_elems=1, zero=a(dt), err=a(np.int64))
        batch = B.BatchHandle(buf=a(dt), page_slot=a(np.int64), req=a(np.int64),
                              ctr=a(np.int64), zero=a(dt), n_elems=1, shift=1, capacity=1)
        for h, read in ((plain, B.plain_read), (batch, B.batch_read)):
            sigs = {"gather": (typeof(h), I64, typeof(a(dt))),
                    "element_chains": (typeof(h), I64, types.int64, types.int64, typeof(a(dt))),
                    "requests": (typeof(h), *REQUESTS)}
            if dt == np.int64:
                sigs["timed_requests"] = (typeof(h), I64, types.int64, I64, I64, I64)
            for name, sig in sigs.items():
                kernel = B.TEMPLATES[name](element_pager(read))
                ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
                if name == "timed_requests":
                    assert "%globaltimer" in ptx

    # The gids request kernel looks a page up once per page, not once per element: the lookup
    # (its pin, a relaxed atomic) has one call site, and the loop of pinned loads (weak L2
    # loads, ld.global.cg) holds no atomic, reduction or warp vote: only loads and adds.
    h = fake_handle(np.int64)
    ptx, _ = cuda.compile_ptx(B.requests_template(GIDS_PAGER).py_func, (typeof(h), *REQUESTS),
                              cc=(9, 0))
    lines = [l.strip() for l in ptx.splitlines()]
    # The kernel's own body: the miss path is a function of its own after it (a call).
    entry = next(i for i, l in enumerate(lines) if l.startswith(".visible .entry"))
    end = next((i for i, l in enumerate(lines) if i > entry and ".func" in l), len(lines))
    lines = lines[entry:end]
    labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\\$L__\\w+:$", l)}
    loops = [(labels[m.group(1)], i) for i, l in enumerate(lines)
             for m in [re.search(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", l)]
             if m and m.group(1) in labels and labels[m.group(1)] <= i]
    # (The pin is a relaxed add, kernels.cache.take_reference.)
    assert sum("atom.relaxed.gpu" in l and ".add." in l for l in lines) == 1, \
        "more than one lookup site"
    lookups = [i for i, l in enumerate(lines) if re.match(r"(atom|red|match)\\.", l)]
    value_loops = [(s, e) for s, e in loops
                   if any("ld.global.cg" in lines[i] for i in range(s, e + 1))
                   and not any(s <= i <= e for i in lookups)]
    assert value_loops, "no loop of pinned loads free of lookups"

    # A round of pinned loads: LOADS_PER_ROUND a lane, all issued before any value is added.
    def loads_before_use(s, e):
        loaded = set()
        for l in lines[s:e + 1]:
            m = re.match(r"ld\\.global\\.cg\\.b64\\s+(%rd\\d+),", l)
            if m:
                loaded.add(m.group(1))
            elif l.startswith("add.") and loaded & set(re.findall(r"%rd\\d+", l.split(",", 1)[1])):
                break
        return len(loaded)
    assert max(loads_before_use(s, e) for s, e in value_loops) >= B.LOADS_PER_ROUND
    for k, sig in ((B._assign_slots, (I64, I64, types.int64, types.int64)),
                   (B._clear_slots, (I64, I64, types.int64))):
        cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    print("BASELINES_PTX_OK")
''')
BASELINES_PTX = CompileScript(PTX_SCRIPT)


@started_early(BASELINES_PTX)
def test_templates_compile_for_the_gpu():
    """Every template with the memory/zero-copy and cpu_batch readers compiles to PTX (sm_90),
    so the closures over device functions and the handles type on a GPU too; the gids request
    kernel pins once per page (one lookup site, whether a warp reads one request or several; no
    lookup in the loop of pinned loads, whose rounds issue all their loads before adding)."""
    proc = BASELINES_PTX.result()
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
