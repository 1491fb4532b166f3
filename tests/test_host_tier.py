"""The host tier (``Runtime(host_cache_bytes=...)``, ``rt.host_tier``) in the simulator, against
a numpy model of the store: static fill, copy and direct modes, writes (a write-back drops the
stale tier copy, a flush updates it), invalidate and clear, statistics, bad input.

That the tier served a page is shown independently of the counters: after the fill, the file's
bytes are changed behind the Runtime's back, so a page read from the tier has the old bytes and
one read from the store the new ones."""
import textwrap

import gids  # first: picks the world before numba.cuda loads

# isort: split
import numpy as np
import pytest
from numba import cuda

from gids.errors import ConfigError, HostTierFullError
from tests.helpers import CompileScript, Warp32Script, check_warp32, started_early

PAGE = 512
ELEMS = PAGE // 8          # int64 elements per page
N_PAGES = 24


def _file(tmp_path, seed=0, n_pages=N_PAGES):
    data = np.random.default_rng(seed).integers(-2**40, 2**40, n_pages * ELEMS, dtype=np.int64)
    path = tmp_path / "data.bin"
    data.tofile(path)
    return path, data


def _runtime(tier_pages, cache_pages=4, **kw):
    return gids.Runtime(cache_pages=cache_pages, page_size=PAGE,
                        host_cache_bytes=tier_pages * PAGE, **kw)


def _changed_behind(path, data):
    """Rewrite the whole file with other bytes; return them (what the store now holds)."""
    new = ~data
    new.tofile(path)
    return new


def _expected(old, new, tier_pages):
    """Element values when pages in ``tier_pages`` come from the tier (old bytes), the rest
    from the store (new bytes)."""
    want = new.copy()
    for p in tier_pages:
        want[p * ELEMS:(p + 1) * ELEMS] = old[p * ELEMS:(p + 1) * ELEMS]
    return want


@pytest.mark.parametrize("mode", ["copy", "direct"])
def test_misses_on_tier_pages_are_served_from_the_tier(tmp_path, mode):
    path, old = _file(tmp_path)
    rng = np.random.default_rng(3)
    tier = np.sort(rng.choice(N_PAGES, 10, replace=False))
    with _runtime(12) as rt:
        a = rt.open_array(path, np.int64)
        assert rt.host_tier.add(a, tier) == 10
        assert rt.host_tier.add(a, tier[:3]) == 0           # already there
        np.testing.assert_array_equal(rt.host_tier.pages(a), tier)
        rt.host_tier.set_mode(a, mode)
        assert rt.host_tier.mode(a) == mode
        new = _changed_behind(path, old)
        want = _expected(old, new, tier)
        idx = rng.integers(0, old.size, 120)
        got = rt.gather(a, idx).copy_to_host()
        np.testing.assert_array_equal(got, want[idx])
        s = rt.stats()
        assert s.tier_fills == 10 and s.tier_evictions == 0
        tier_reads = np.isin(idx // ELEMS, tier)
        if mode == "copy":
            assert s.tier_hits > 0 and s.tier_direct == 0
        else:
            assert s.tier_direct > 0 and s.tier_hits == 0
            # Direct reads take no slot: no tier page is in the GPU cache.
            state = rt._page_state.copy_to_host()[a.page_base + tier]
            assert not np.any(state & gids.layout.PAGE_VALID)
        # Every store read was of a page outside the tier.
        assert s.ios <= np.unique(idx[~tier_reads] // ELEMS).size + s.evictions
        assert tier_reads.any() and (~tier_reads).any()


@gids.jit
def _read_pages_or_tier(h, idx, out, where, after):
    """Each thread pins its element's page with gids.pin_page_or_tier, reads the element and
    gives the pin back (every lane calls: lanes past the end repeat element 0)."""
    t = cuda.grid(1)
    i = idx[t] if t < idx.size else idx[0]
    k = gids.pin_page_or_tier(h, i)
    v = gids.pinned_or_tier(h, k) if k >= 0 else np.int64(0)
    if after:
        gids.unpin_page_after_or_tier(h, i, k, v)
    else:
        gids.unpin_page_or_tier(h, i, k)
    if t < idx.size:
        out[t] = v
        where[t] = k


@gids.jit
def _pin_and_unpin(h, idx):
    i = idx[min(cuda.grid(1), idx.size - 1)]
    gids.unpin_page(h, i, gids.pin_page(h, i))


def check_pin_page_or_tier(directory, mode, seed=0, n_pages=N_PAGES, page_size=PAGE,
                           n_reads=256, threads=64, **runtime_options):
    """Half the pages in the tier, two of them also preloaded into a GPU cache with room for
    them and every page outside the tier (so that none is evicted); the file
    changed behind the Runtime's back (tier pages keep the old bytes). Every value is right;
    in direct mode a tier page not in the GPU cache is read in place (``k`` past the cache,
    no slot taken, no reference left), in copy mode it is pinned in the cache as by
    gids.pin_page. Used by the simulator, emulated-warp and GPU tests."""
    import os
    elems = page_size // 8
    rng = np.random.default_rng(seed)
    data = rng.integers(-2**40, 2**40, n_pages * elems, dtype=np.int64)
    path = os.path.join(str(directory), f"pin_or_tier_{mode}_{seed}.bin")
    data.tofile(path)
    tier = np.sort(rng.choice(n_pages, n_pages // 2, replace=False))
    hot = tier[:2]
    with gids.Runtime(cache_pages=n_pages - tier.size + hot.size + 4, page_size=page_size,
                      host_cache_bytes=tier.size * page_size, **runtime_options) as rt:
        a = rt.open_array(path, np.int64)
        rt.host_tier.add(a, tier)
        rt.host_tier.set_mode(a, mode)
        (~data).tofile(path)
        want = ~data
        for p in tier:
            want[p * elems:(p + 1) * elems] = data[p * elems:(p + 1) * elems]
        # Copied from the tier into the GPU cache by gids.pin_page (Runtime.prefetch's way; a
        # kernel of one whole warp here, as emulated 32-lane warps want every lane at a pin).
        _pin_and_unpin[1, 32](a.handle, cuda.to_device(hot * elems))
        rt.sync()
        rt.reset_stats()
        n_cache = a.handle.cache.size
        for after in (False, True):
            idx = np.sort(rng.integers(0, data.size, n_reads))
            out = cuda.to_device(np.full(idx.size, -7, dtype=np.int64))
            where = cuda.to_device(np.full(idx.size, -7, dtype=np.int64))
            blocks = -(-idx.size // threads)
            _read_pages_or_tier[blocks, threads](a.handle, cuda.to_device(idx), out, where,
                                                 after)
            rt.sync()
            np.testing.assert_array_equal(out.copy_to_host(), want[idx])
            k = where.copy_to_host()
            in_place = np.isin(idx // elems, np.setdiff1d(tier, hot)) & (mode == "direct")
            assert (k[in_place] >= n_cache).all() and (k[~in_place] >= 0).all()
            assert (k[~in_place] < n_cache).all()
            if in_place.any():
                offset = (k[in_place] - n_cache) % elems
                np.testing.assert_array_equal(offset, idx[in_place] % elems)
        state = rt._page_state.copy_to_host()[a.page_base:a.page_base + n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()
        s = rt.stats()
        if mode == "direct":
            valid = np.flatnonzero(state & gids.layout.PAGE_VALID)
            assert not np.isin(valid, np.setdiff1d(tier, hot)).any()
            assert s.tier_direct > 0 and s.tier_hits == 0, s
        else:
            assert s.tier_hits > 0 and s.tier_direct == 0, s
        assert s.hits > 0 and s.ios > 0


@pytest.mark.parametrize("mode", ["copy", "direct"])
def test_pin_page_or_tier_reads_tier_pages_in_place(tmp_path, mode):
    check_pin_page_or_tier(tmp_path, mode)


def test_the_nvme_path_copies_from_the_tier_too(tmp_path):
    path, old = _file(tmp_path)
    tier = np.arange(0, N_PAGES, 2)
    with _runtime(12, backend="nvme") as rt:
        a = rt.open_array(path, np.int64)
        rt.host_tier.add(a, tier)
        new = _changed_behind(path, old)
        want = _expected(old, new, tier)
        idx = np.random.default_rng(4).integers(0, old.size, 100)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), want[idx])
        assert rt.stats().tier_hits > 0 and rt.daemon.counters["commands"] == rt.stats().ios


def test_no_tier_by_default_and_handles_say_so(tmp_path):
    path, old = _file(tmp_path)
    with gids.Runtime(cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array(path, np.int64)
        assert rt.host_tier.capacity == 0 and not rt.host_tier.enabled
        assert a.handle.tier_mode == gids.layout.TIER_NONE
        with pytest.raises(HostTierFullError):
            rt.host_tier.add(a, [0])
        np.testing.assert_array_equal(rt.gather(a, np.arange(0, old.size, 37)).copy_to_host(),
                                      old[::37])
    with gids.defaults.set(host_cache_bytes=3 * PAGE), gids.Runtime(cache_pages=4,
                                                                    page_size=PAGE) as rt:
        assert rt.host_tier.capacity == 3
        a = rt.open_array(path, np.int64)
        assert a.handle.tier_mode == gids.layout.TIER_COPY


def test_bad_input_is_named(tmp_path):
    path, _ = _file(tmp_path)
    with pytest.raises(ConfigError, match=">= 0"):
        _runtime(-1)
    with pytest.raises(ConfigError, match="RAM"):
        gids.Runtime(cache_pages=4, page_size=PAGE, host_cache_bytes=1 << 62)
    with _runtime(4) as rt:
        a = rt.open_array(path, np.int64)
        w = rt.open_array(path, np.int64, mode="r+")
        with pytest.raises(HostTierFullError, match="do not fit"):
            rt.host_tier.add(a, range(5))
        assert rt.host_tier.pages(a).size == 0            # nothing added
        with pytest.raises(ConfigError, match="pages must be in"):
            rt.host_tier.add(a, [N_PAGES])
        with pytest.raises(ConfigError, match="pages must be in"):
            rt.host_tier.add(a, [-1])
        with pytest.raises(ConfigError, match="mode must be"):
            rt.host_tier.set_mode(a, "zero-copy")
        with pytest.raises(ConfigError, match="writable"):
            rt.host_tier.set_mode(w, "direct")
        with pytest.raises(ConfigError, match="StorageArray"):
            rt.host_tier.add(np.zeros(4), [0])


def test_invalidate_and_clear_cover_the_tier(tmp_path):
    path, old = _file(tmp_path)
    with _runtime(8) as rt:
        a = rt.open_array(path, np.int64)
        rt.host_tier.add(a, [1, 2, 3])
        rt.invalidate(keep_host_tier=True)
        np.testing.assert_array_equal(rt.host_tier.pages(a), [1, 2, 3])
        rt.invalidate()
        assert rt.host_tier.pages(a).size == 0 and rt.stats().tier_evictions == 3
        rt.host_tier.add(a, [4, 5])
        rt.host_tier.clear()
        assert rt.host_tier.pages(a).size == 0 and rt.host_tier.used == 0
        new = _changed_behind(path, old)
        idx = np.arange(4 * ELEMS, 6 * ELEMS, 7)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), new[idx])
        rt.reset_stats()
        assert rt.stats().tier_fills == 0


def test_writes_drop_or_update_the_tier_copy(tmp_path):
    """A written page evicted by a kernel leaves the tier (its copy is stale) and the store
    has it; a flushed one stays in the tier with the new bytes; every read matches the model."""
    path, old = _file(tmp_path)
    model = old.copy()
    rng = np.random.default_rng(5)
    with _runtime(N_PAGES, cache_pages=3) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        rt.host_tier.add(a, range(N_PAGES))
        idx = rng.choice(old.size, 40, replace=False)
        vals = rng.integers(0, 1000, 40)
        rt.scatter(a, idx, vals)
        model[idx] = vals
        left = set(rt.host_tier.pages(a).tolist())
        # Each page written back left the tier (once: a written page reloads from the store).
        written = set((idx // ELEMS).tolist())
        s = rt.stats()
        assert s.writebacks > 0 and s.tier_evictions == N_PAGES - len(left)
        assert set(range(N_PAGES)) - left <= written and s.tier_evictions <= s.writebacks
        probe = rng.integers(0, old.size, 80)
        np.testing.assert_array_equal(rt.gather(a, probe).copy_to_host(), model[probe])
        rt.flush()
        np.testing.assert_array_equal(np.fromfile(path, np.int64), model)
        # The tier's copies are current: with the GPU cache emptied, reads come from it.
        rt.invalidate(keep_host_tier=True)
        rt.reset_stats()
        in_tier = rt.host_tier.pages(a)    # the probe's write-backs may have dropped more
        assert in_tier.size and set(in_tier.tolist()) <= left
        probe = (in_tier[:, None] * ELEMS + rng.integers(0, ELEMS, (in_tier.size, 2))).ravel()
        np.testing.assert_array_equal(rt.gather(a, probe).copy_to_host(), model[probe])
        assert rt.stats().tier_hits > 0 and rt.stats().ios == 0


def test_random_sequences_match_a_numpy_model(tmp_path):
    """Random add / clear / read / write / flush / invalidate sequences: every read equals the
    model, the tier holds only pages added since the last clear, never more than its size."""
    path, old = _file(tmp_path, seed=9)
    model = old.copy()
    rng = np.random.default_rng(11)
    added = set()
    with _runtime(8, cache_pages=3) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        for _ in range(14):
            op = rng.choice(["add", "clear", "read", "write", "flush", "invalidate"])
            if op == "add":
                free = rt.host_tier.capacity - rt.host_tier.used
                pages = rng.choice(N_PAGES, int(rng.integers(1, 5)), replace=False)
                new = [p for p in pages if p not in set(rt.host_tier.pages(a).tolist())]
                if len(new) > free:
                    with pytest.raises(HostTierFullError):
                        rt.host_tier.add(a, pages)
                else:
                    rt.host_tier.add(a, pages)
                    added |= set(pages.tolist())
            elif op == "clear":
                rt.host_tier.clear()
                added = set()
            elif op == "read":
                idx = rng.integers(0, old.size, 40)
                np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), model[idx])
            elif op == "write":
                idx = rng.choice(old.size, 20, replace=False)
                vals = rng.integers(-99, 99, 20)
                rt.scatter(a, idx, vals)
                model[idx] = vals
            elif op == "flush":
                rt.flush()
                np.testing.assert_array_equal(np.fromfile(path, np.int64), model)
            else:
                keep = bool(rng.integers(0, 2))
                rt.invalidate(keep_host_tier=keep)
                if not keep:
                    added = set()
            held = set(rt.host_tier.pages(a).tolist())
            assert held <= added and len(held) <= rt.host_tier.capacity
        rt.flush()
        np.testing.assert_array_equal(np.fromfile(path, np.int64), model)


TIER_PTX = CompileScript(textwrap.dedent('''
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    from tests.helpers import compile_ptx, fake_handle
    from gids.kernels_host import gather_kernel

    h = fake_handle(np.int64)
    ptx, _ = compile_ptx(gather_kernel.py_func,
                         (typeof(h), types.int64[::1], typeof(np.zeros(4, np.int64))))
    lines = [l.strip() for l in ptx.splitlines()]
    entry = next(i for i, l in enumerate(lines) if l.startswith(".visible .entry"))
    end = next((i for i, l in enumerate(lines) if i > entry and ".func" in l), len(lines))
    body = lines[entry:end]
    assert sum(l.startswith("call") for l in body) == 1, [l for l in body if "call" in l]
    assert not [l for l in body if l.startswith("ld.relaxed.gpu")]
    assert sum(l.startswith("atom.relaxed.gpu.global.add.u64") for l in body) == 1
    print("TIER_PTX_OK")
'''))


@started_early(TIER_PTX)
def test_no_tier_hit_path_has_nothing_added():
    """The tier's code is on the miss path only: the kernel's own body (the hit path) still has
    one call (the miss path), no coherent load (the tier's table is read with one) and one pin;
    the miss path tests the tier's mode."""
    pytest.importorskip("numba.cuda")
    proc = TIER_PTX.result()
    assert "TIER_PTX_OK" in proc.stdout, proc.stderr[-3000:]


# ------------------------------------------------------------------------- graphs
def _page_scores_by_loops(offsets, scores, itemsize, page_size, n_pages):
    out = np.zeros(n_pages)
    for v in range(offsets.size - 1):
        lo, hi = offsets[v] * itemsize, offsets[v + 1] * itemsize
        if hi > lo:
            for p in range(lo // page_size, (hi - 1) // page_size + 1):
                out[p] += scores[v]
    return out


def test_graph_pages_by_degree_and_reverse_pagerank(tmp_path):
    from scipy import sparse

    from workloads.graph import generate_kronecker_csr, open_csr
    from workloads.graph.tier_pages import choose_pages, page_scores, vertex_scores
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 7, 8, seed=4)
    graph = open_csr(path)
    offsets = np.asarray(graph.offsets)
    nbrs = np.asarray(graph.neighbours)
    np.testing.assert_array_equal(vertex_scores(graph, "degree"), np.diff(offsets))
    # Reverse PageRank: the dense power iteration over the reversed, column-normalised edges.
    n = offsets.size - 1
    a = sparse.csr_matrix((np.ones(nbrs.size), nbrs, offsets), shape=(n, n)).toarray()
    indeg = a.sum(axis=0)
    m = a / np.where(indeg > 0, indeg, 1)
    r = np.full(n, 1 / n)
    for _ in range(10):
        r = 0.15 / n + 0.85 * m @ r
    np.testing.assert_allclose(vertex_scores(graph, "pagerank"), r, rtol=1e-5)
    s = vertex_scores(graph, "pagerank")
    scores = page_scores(graph, s, PAGE)
    ref = _page_scores_by_loops(offsets, s, nbrs.itemsize, PAGE, scores.size)
    np.testing.assert_allclose(scores, ref)
    chosen = choose_pages(graph, "pagerank", 5, PAGE)
    assert chosen.size == 5 and np.all(np.diff(chosen) > 0)
    assert scores[chosen].min() >= np.sort(scores)[-5]
    np.testing.assert_array_equal(choose_pages(graph, "degree", 10**6, PAGE),
                                  np.arange(scores.size))
    # By lists: a page scores the lists that touch it.
    ones = vertex_scores(graph, "lists")
    np.testing.assert_array_equal(ones, np.ones(n))
    np.testing.assert_allclose(page_scores(graph, ones, PAGE),
                               _page_scores_by_loops(offsets, ones, nbrs.itemsize, PAGE,
                                                     scores.size))
    with pytest.raises(ValueError, match="method"):
        vertex_scores(graph, "random")


@pytest.mark.parametrize("mode, fraction", [("copy", 0.5), ("direct", 0.5), ("split", 0.5),
                                            ("split", 0.75), ("copy", 1.0), ("direct", 1.0),
                                            ("split", 1.0)])
def test_bfs_with_a_host_tier_is_valid_and_uses_it(tmp_path, mode, fraction):
    """Every way the BFS can use a tier gives scipy's levels; a tier of every page leaves the
    file unread; direct and split read tier pages in place (no copy into the GPU cache), and
    split's preloaded pages are what the GPU cache holds."""
    from workloads.graph import generate_kronecker_csr, open_csr, sample_bfs_roots
    from workloads.graph.gpu_bfs import validate_bfs_result
    from workloads.graph.gpu_graph import open_device_graph
    from workloads.graph.tier_pages import choose_pages
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 6, 8, seed=1)
    graph = open_csr(path)
    with open_device_graph(graph, "gids", cache_fraction=0.25, page_size=PAGE,
                           host_tier="degree", host_tier_fraction=fraction,
                           host_tier_mode=mode) as dg:
        src = dg.source
        assert "host tier" in src.label and mode in src.label
        tier = src.runtime.host_tier
        assert tier.used == tier.capacity > 0
        assert tier.mode(src.array) == ("copy" if mode == "copy" else "direct")
        if fraction == 1.0:
            assert tier.used == src.array.n_pages
        for root in sample_bfs_roots(graph, 2, seed=5).tolist():
            result = dg.bfs(root)
            validate_bfs_result(graph, result, against_scipy=True)
            s = result.stats
            assert s["tier_hits"] + s["tier_direct"] > 0
            if fraction == 1.0:
                assert s["ios"] == 0                    # no miss reached the file
            if mode != "copy":
                assert s["tier_direct"] > 0
                if fraction == 1.0:
                    assert s["tier_hits"] == 0          # nothing copied into the GPU cache
            if mode == "split":
                hot = choose_pages(graph, "degree", src.cache_pages, PAGE)
                assert s["preloaded_pages"] == hot.size == src.cache_pages and s["hits"] > 0
                held = tier.pages(src.array)
                if fraction < 1.0:
                    # The tier holds the rest first: none of the preloaded pages at 0.5, all
                    # the others at 0.75 (GPU cache 25 % + the rest), and then the file is
                    # never read by a search.
                    assert not np.isin(hot, held).any()
                if fraction == 0.75:
                    assert np.union1d(hot, held).size == src.array.n_pages
                    assert s["ios"] == 0
                if fraction >= 0.75:
                    # The cache holds the preloaded pages, and only them, after the search.
                    a = src.array
                    state = src.runtime._page_state.copy_to_host()[
                        a.page_base:a.page_base + a.n_pages]
                    np.testing.assert_array_equal(
                        np.flatnonzero(state & gids.layout.PAGE_VALID), hot)
        assert tier.used == tier.capacity       # cold searches keep the tier
        refs = src.runtime._page_state.copy_to_host() & gids.layout.PAGE_REF_MASK
        assert not refs.any()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["copy", "direct", "split"])
def test_bfs_over_a_tier_of_every_page_on_the_gpu(tmp_path, mode):
    """Real warps over a scale-16 graph, GPU cache 25 %, a tier of every page: scipy's levels,
    no file read, and in direct and split mode no page copied into the cache."""
    from workloads.graph import generate_kronecker_csr, open_csr, sample_bfs_roots
    from workloads.graph.gpu_bfs import validate_bfs_result
    from workloads.graph.gpu_graph import open_device_graph
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 16, 16, seed=2)
    graph = open_csr(path)
    with open_device_graph(graph, "gids", cache_fraction=0.25, page_size=4096,
                           host_tier="degree", host_tier_fraction=1.0,
                           host_tier_mode=mode) as dg:
        for root in sample_bfs_roots(graph, 3, seed=1).tolist():
            result = dg.bfs(root)
            validate_bfs_result(graph, result, against_scipy=True)
            s = result.stats
            assert s["ios"] == 0
            assert (s["tier_hits"] > 0) if mode == "copy" else (s["tier_hits"] == 0
                                                                and s["tier_direct"] > 0)
        refs = dg.source.runtime._page_state.copy_to_host() & gids.layout.PAGE_REF_MASK
        assert not refs.any()


def test_bfs_rejects_an_unknown_tier_mode(tmp_path):
    from workloads.graph import generate_kronecker_csr, open_csr
    from workloads.graph.gpu_graph import open_device_graph
    path = tmp_path / "g.csr"
    generate_kronecker_csr(path, 4, 4, seed=1)
    with pytest.raises(ValueError, match="host_tier_mode"):
        open_device_graph(open_csr(path), "gids", host_tier="degree", host_tier_fraction=1,
                          host_tier_mode="sideways")


# ------------------------------------------------------------------ whole warps, the GPU
#: Copy and direct mode with 32-lane warps (lanes of one warp on many pages, some in the tier,
#: some not, several lanes per page): the shuffles, ballots and warp copies of kernels/tier.py.
#: A file changed behind the Runtime's back tells tier pages (old bytes) from store pages.
WARP_SCRIPT = textwrap.dedent('''
    import os, tempfile
    data = np.random.default_rng(0).integers(0, 1 << 62, 64 * 64, dtype=np.int64)  # 64 pages
    path = os.path.join(tempfile.mkdtemp(), "d.bin")
    data.tofile(path)
    for mode in ("copy", "direct"):
        with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32, timeout=60,
                          host_cache_bytes=24 * 512) as rt:
            a = rt.open_array(path, np.int64)
            tier = np.arange(0, 64, 3)[:24]
            rt.host_tier.add(a, tier)
            rt.host_tier.set_mode(a, mode)
            (~data).tofile(path)
            want = ~data
            for p in tier:
                want[p * 64:(p + 1) * 64] = data[p * 64:(p + 1) * 64]
            for seed in range(3):
                idx = np.random.default_rng(seed).integers(0, 24 * 64, 96)   # pages 0-23
                idx[:8] = idx[0]                                            # lanes sharing
                got = rt.gather(a, idx).copy_to_host()
                assert (got == want[idx]).all(), (mode, seed)
            s = rt.stats()
            assert (s.tier_hits if mode == "copy" else s.tier_direct) > 0, s
            state = rt._page_state.copy_to_host()[:rt._n_pages]
            assert not (state & gids.layout.PAGE_REF_MASK).any()
        data.tofile(path)
    # Victim fill: the warp's loaders offer their clean victims, copied by the whole warp.
    with gids.Runtime(cache_pages=32, page_size=512, queues=2, queue_depth=32, timeout=60,
                      host_cache_bytes=24 * 512, host_tier_fill="victims") as rt:
        a = rt.open_array(path, np.int64)
        for seed in range(4):
            idx = np.random.default_rng(seed).integers(0, data.size, 96)
            got = rt.gather(a, idx).copy_to_host()
            bad = np.unique(idx[got != data[idx]] // 64)
            # Which pages came out wrong, and whether the tier holds them (a diagnosis).
            assert bad.size == 0, (seed, bad, np.intersect1d(bad, rt.host_tier.pages(a)),
                                   rt.stats())
        s = rt.stats()
        assert s.tier_fills > 0 and s.tier_hits > 0, s
    # gids.pin_page_or_tier: lanes of a warp on a few pages, some read in place in the tier.
    from tests.test_host_tier import check_pin_page_or_tier
    for mode in ("copy", "direct"):
        check_pin_page_or_tier(tempfile.mkdtemp(), mode, n_pages=64, n_reads=512,
                               queues=2, queue_depth=32, timeout=60)
    print("TIER32_OK")
''')
WARP_SCRIPT_RUN = Warp32Script(WARP_SCRIPT)


@started_early(WARP_SCRIPT_RUN)
def test_emulated_warps_use_the_tier():
    check_warp32(WARP_SCRIPT_RUN.result(), "TIER32_OK")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["copy", "direct"])
def test_tier_on_the_gpu_many_warps(tmp_path, mode):
    """Real warps, thousands of threads, a cache far smaller than the data: every value right,
    the tier serving its pages, no reference left."""
    n_pages = 4096
    data = np.random.default_rng(1).integers(0, 1 << 62, n_pages * 512, dtype=np.int64)
    path = tmp_path / "d.bin"
    data.tofile(path)
    with gids.Runtime(cache_pages=256, page_size=4096,
                      host_cache_bytes=n_pages // 2 * 4096) as rt:
        a = rt.open_array(path, np.int64)
        tier = np.random.default_rng(2).choice(n_pages, n_pages // 2, replace=False)
        rt.host_tier.add(a, tier)
        rt.host_tier.set_mode(a, mode)
        new = _changed_behind(path, data)
        want = new.copy()
        for p in tier:
            want[p * 512:(p + 1) * 512] = data[p * 512:(p + 1) * 512]
        for seed in range(3):
            idx = np.random.default_rng(seed).integers(0, data.size, 1 << 18)
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), want[idx])
        s = rt.stats()
        assert (s.tier_hits if mode == "copy" else s.tier_direct) > 0
        state = rt._page_state.copy_to_host()[:rt._n_pages]
        assert not (state & gids.layout.PAGE_REF_MASK).any()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["copy", "direct"])
def test_pin_page_or_tier_on_the_gpu(tmp_path, mode):
    check_pin_page_or_tier(tmp_path, mode, n_pages=4096, page_size=4096, n_reads=1 << 18,
                           threads=256)


@pytest.mark.gpu
def test_tier_writes_on_the_gpu(tmp_path):
    path, old = _file(tmp_path, n_pages=512)
    model = old.copy()
    rng = np.random.default_rng(8)
    with gids.Runtime(cache_pages=64, page_size=PAGE, host_cache_bytes=512 * PAGE) as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        rt.host_tier.add(a, range(512))
        for _ in range(3):
            idx = rng.choice(old.size, 4096, replace=False)
            vals = rng.integers(-1000, 1000, idx.size)
            rt.scatter(a, idx, vals)
            model[idx] = vals
            probe = rng.integers(0, old.size, 1 << 16)
            np.testing.assert_array_equal(rt.gather(a, probe).copy_to_host(), model[probe])
        rt.flush()
        np.testing.assert_array_equal(np.fromfile(path, np.int64), model)


# ------------------------------------------------------------------ a state machine
def _tier_machine():
    from hypothesis import settings
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

    class TierMachine(RuleBasedStateMachine):
        """A read-only array (its tier mode switched at will) and a writable one over one
        Runtime with a small GPU cache and tier, against a numpy model of both files."""

        @initialize(seed=st.integers(0, 2**16))
        def start(self, seed):
            import tempfile
            self.dir = tempfile.mkdtemp()
            self.rt = _runtime(6, cache_pages=3)
            self.arrays, self.models, self.paths, self.added = [], [], [], []
            for k, mode in enumerate(("r", "r+")):
                data = np.random.default_rng([seed, k]).integers(-2**40, 2**40, 8 * ELEMS)
                path = f"{self.dir}/a{k}.bin"
                data.tofile(path)
                self.arrays.append(self.rt.open_array(path, np.int64, mode=mode))
                self.models.append(data.copy())
                self.paths.append(path)
                self.added.append(set())

        def teardown(self):
            if hasattr(self, "rt"):
                self.rt.close(flush=False)

        @rule(k=st.integers(0, 1), pages=st.lists(st.integers(0, 7), min_size=1, max_size=4))
        def add(self, k, pages):
            held = set(self.rt.host_tier.pages(self.arrays[k]).tolist())
            new = set(pages) - held
            if len(new) > self.rt.host_tier.capacity - self.rt.host_tier.used:
                with pytest.raises(HostTierFullError):
                    self.rt.host_tier.add(self.arrays[k], pages)
            else:
                assert self.rt.host_tier.add(self.arrays[k], pages) == len(new)
                self.added[k] |= set(pages)

        @rule()
        def clear(self):
            self.rt.host_tier.clear()
            self.added = [set(), set()]

        @rule(mode=st.sampled_from(["copy", "direct"]))
        def set_mode(self, mode):
            self.rt.host_tier.set_mode(self.arrays[0], mode)

        @rule(k=st.integers(0, 1), seed=st.integers(0, 2**16))
        def read(self, k, seed):
            idx = np.random.default_rng(seed).integers(0, 8 * ELEMS, 24)
            np.testing.assert_array_equal(self.rt.gather(self.arrays[k], idx).copy_to_host(),
                                          self.models[k][idx])

        @rule(seed=st.integers(0, 2**16))
        def write(self, seed):
            rng = np.random.default_rng(seed)
            idx = rng.choice(8 * ELEMS, 12, replace=False)
            vals = rng.integers(-99, 99, 12)
            self.rt.scatter(self.arrays[1], idx, vals)
            self.models[1][idx] = vals

        @rule()
        def flush(self):
            self.rt.flush()
            np.testing.assert_array_equal(np.fromfile(self.paths[1], np.int64), self.models[1])

        @rule(keep=st.booleans())
        def invalidate(self, keep):
            self.rt.invalidate(keep_host_tier=keep)
            if not keep:
                self.added = [set(), set()]

        @invariant()
        def tier_holds_only_added_pages(self):
            if not hasattr(self, "rt"):
                return
            for k in range(2):
                assert set(self.rt.host_tier.pages(self.arrays[k]).tolist()) <= self.added[k]
            assert 0 <= self.rt.host_tier.used <= self.rt.host_tier.capacity

    TierMachine.TestCase.settings = settings(max_examples=4, stateful_step_count=10,
                                             deadline=None)
    return TierMachine


def test_tier_state_machine():
    pytest.importorskip("hypothesis")
    from hypothesis.stateful import run_state_machine_as_test
    machine = _tier_machine()
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


# ------------------------------------------------------------------ victim fill
def _check_free_slots(tier):
    """No slot is free twice (it would be handed to two victims) or free and holding a page."""
    free = tier._free
    held = np.flatnonzero(tier._page_of_slot >= 0)
    assert len(set(free)) == len(free) and not set(free) & set(held.tolist())
    assert len(free) + held.size == tier.capacity


def test_the_clock_frees_each_slot_once(tmp_path):
    """Every slot holds a page, all but slot 0 were hit: the hand frees slot 0, clears the
    others' bits, comes round to slot 0 again and must free another, not slot 0 twice."""
    path, _ = _file(tmp_path)
    with _runtime(8, cache_pages=3, host_tier_fill="victims") as rt:
        rt.open_array(path, np.int64)
        tier = rt.host_tier
        tier._free = np.zeros(0, dtype=np.int64)
        tier._page_of_slot[:] = np.arange(8)
        tier._table_host = np.full(tier._table.size, -1, dtype=np.int64)
        tier._table_host[:8] = np.arange(8)
        tier._ref.copy_to_device(np.array([0] + [1] * 7, dtype=np.int32))
        tier._clock()
        _check_free_slots(tier)
        assert len(tier._free) == 2 * 8 // 8


def _clock_by_hand(page_of_slot, ref, hand, need):
    """The clock a slot at a time (the model of gids.host_tier.clock)."""
    page_of_slot, freed = page_of_slot.copy(), []
    for _ in range(2 * page_of_slot.size):
        if len(freed) >= need:
            break
        s, hand = hand, (hand + 1) % page_of_slot.size
        if page_of_slot[s] < 0:
            continue
        if ref[s]:
            ref[s] = 0
        else:
            freed.append(s)
            page_of_slot[s] = -1
    return freed, hand


def test_the_clock_matches_the_hand_by_hand_model():
    from gids.host_tier import clock
    rng = np.random.default_rng()
    for _ in range(400):
        capacity = int(rng.integers(1, 40))
        page_of_slot = np.where(rng.random(capacity) < rng.random(),
                                rng.integers(0, 999, capacity), -1)
        ref = (rng.random(capacity) < rng.random()).astype(np.int32)
        hand, need = int(rng.integers(0, capacity)), int(rng.integers(-1, capacity + 2))
        want_ref = ref.copy()
        want, want_hand = _clock_by_hand(page_of_slot, want_ref, hand, need)
        freed, got_hand = clock(page_of_slot, ref, hand, need)
        assert freed.tolist() == want and got_hand == want_hand
        np.testing.assert_array_equal(ref, want_ref)


def test_only_the_spans_kernels_may_change_are_read(tmp_path):
    """The table words the host reads back: a writable array's held pages (a write-back drops
    them), a victim array's pages once kernels took free slots; nothing of a read-only array's
    static pages."""
    from gids.host_tier import spans
    assert spans(np.array([], dtype=np.int64)) == []
    assert spans(np.array([1, 2, 9, 30]), gap=7) == [(1, 10), (30, 31)]
    path, data = _file(tmp_path)
    with _runtime(8, cache_pages=3, host_tier_fill="victims") as rt:
        r = rt.open_array(path, np.int64)
        w = rt.open_array(data.copy(), mode="r+")
        v = rt.open_array(data.copy())
        assert r.handle.tier_victims == 1 and w.handle.tier_victims == 0
        rt.host_tier.add(r, [1, 5])
        rt.host_tier.add(w, [2, 6])
        assert v.handle.tier_victims == 1
        tier = rt.host_tier
        assert tier._changed_spans(False) == [(w.page_base + 2, w.page_base + 7)]
        assert tier._changed_spans(True) == [(r.page_base, r.page_base + r.n_pages),
                                             (w.page_base + 2, w.page_base + 7),
                                             (v.page_base, v.page_base + v.n_pages)]


@pytest.mark.parametrize("tier_pages", [10, 2 * N_PAGES])
def test_the_host_table_follows_the_device_table(tmp_path, tier_pages):
    """Victim fill beside a writable array with pages in the tier, with the clock freeing slots
    and without (a tier larger than both arrays): after each sync the host's copy of the table
    (read back by spans) equals the device's, and every value matches."""
    path, old = _file(tmp_path)
    rng = np.random.default_rng()
    model = rng.integers(-2**40, 2**40, N_PAGES * ELEMS)
    with _runtime(tier_pages, cache_pages=3, host_tier_fill="victims") as rt:
        r = rt.open_array(path, np.int64)
        w = rt.open_array(model.copy(), mode="r+")
        tier = rt.host_tier
        assert tier.add(w, [1, 7, 20]) == 3
        for _ in range(3):
            idx = rng.integers(0, old.size, 40)
            np.testing.assert_array_equal(rt.gather(r, idx).copy_to_host(), old[idx])
            at = rng.choice(model.size, 6, replace=False)
            at[0] = 7 * ELEMS + rng.integers(ELEMS)   # a page in the tier: its write-back drops it
            at = np.unique(at)
            vals = rng.integers(-99, 99, at.size)
            rt.scatter(w, at, vals)
            model[at] = vals
            probe = rng.integers(0, model.size, 40)
            np.testing.assert_array_equal(rt.gather(w, probe).copy_to_host(), model[probe])
            assert tier.used <= tier.capacity
            np.testing.assert_array_equal(tier._table.copy_to_host(), tier._table_host)
            _check_free_slots(tier)
            assert set(tier.pages(w).tolist()) <= {1, 7, 20}
        assert 7 not in tier.pages(w)
        s = rt.stats()
        assert s.tier_fills > 3 and s.writebacks > 0, s
        assert tier_pages > 10 or s.tier_evictions > 0, s      # the clock freed slots


def test_victims_enter_the_tier_and_serve_later_misses(tmp_path):
    path, old = _file(tmp_path)
    rng = np.random.default_rng(12)
    with _runtime(8, cache_pages=3, host_tier_fill="victims") as rt:
        a = rt.open_array(path, np.int64)
        assert a.handle.tier_victims == 1
        for seed in range(4):
            idx = np.random.default_rng(seed).integers(0, old.size, 60)
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), old[idx])
            assert 0 < rt.host_tier.used <= rt.host_tier.capacity
            _check_free_slots(rt.host_tier)
        used = rt.host_tier.used   # (taken in before the counts are read)
        s = rt.stats()
        assert s.tier_fills > 0 and s.tier_hits > 0 and s.tier_evictions > 0, s
        # Each page counted once as it entered and once as it left.
        assert s.tier_fills == used + s.tier_evictions, s
        # What the tier holds came from the GPU cache: old bytes, served after the file changed.
        held = rt.host_tier.pages(a)
        rt.invalidate(keep_host_tier=True)
        _changed_behind(path, old)
        idx = (held[:, None] * ELEMS + rng.integers(0, ELEMS, (held.size, 3))).ravel()
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), old[idx])


def test_victim_fill_skips_writable_arrays_and_bad_fill_is_named(tmp_path):
    path, old = _file(tmp_path)
    with pytest.raises(ConfigError, match="host_tier_fill"):
        _runtime(8, host_tier_fill="lru")
    with _runtime(8, cache_pages=3, host_tier_fill="victims") as rt:
        a = rt.open_array(path, np.int64, mode="r+")
        assert a.handle.tier_victims == 0
        idx = np.arange(0, old.size, ELEMS // 2)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), old[idx])
        assert rt.host_tier.used == 0 and rt.stats().tier_fills == 0


@pytest.mark.gpu
def test_victim_fill_on_the_gpu(tmp_path):
    """Thousands of warps evicting into the tier at once (free slots taken by atomics, a page
    offered twice by two warps): every value right, the tier within its size."""
    n_pages = 2048
    data = np.random.default_rng(3).integers(0, 1 << 62, n_pages * 512, dtype=np.int64)
    path = tmp_path / "d.bin"
    data.tofile(path)
    with gids.Runtime(cache_pages=128, page_size=4096, host_cache_bytes=512 * 4096,
                      host_tier_fill="victims") as rt:
        a = rt.open_array(path, np.int64)
        for seed in range(4):
            idx = np.random.default_rng(seed).integers(0, data.size, 1 << 18)
            np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), data[idx])
            assert rt.host_tier.used <= rt.host_tier.capacity
            _check_free_slots(rt.host_tier)
        used = rt.host_tier.used   # (taken in before the counts are read)
        s = rt.stats()
        assert s.tier_fills > 0 and s.tier_hits > 0
        # A page two warps offered at once is counted once (its second slot is freed again).
        assert s.tier_fills == used + s.tier_evictions, s


def test_graph_cli_with_a_host_tier(tmp_path, capsys):
    import json

    from workloads.graph.cli import main as cli_main
    out = tmp_path / "bfs.json"
    assert cli_main(["bfs", "--scale", "5", "--roots", "1", "--data-path", "gids",
                     "--cache-fractions", "0.25", "--host-tier", "pagerank",
                     "--host-tier-fraction", "0.5", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["options"]["host_tier"] == "pagerank" and "host tier" in run["label"]
    assert run["searches"][0]["valid"] and run["searches"][0]["stats"]["tier_hits"] > 0
    assert cli_main(["cc", "--scale", "5", "--host-tier-fraction", "0.5"]) == 2
    assert "need --host-tier" in capsys.readouterr().err
    # Rankings and modes side by side, a tier of every page: no file reads; copy mode runs once
    # (its tier is the same whatever the ranking); the table counts the tier's work.
    assert cli_main(["bfs", "--scale", "5", "--roots", "1", "--data-path", "gids",
                     "--cache-fractions", "0.25", "--host-tier", "lists,degree",
                     "--host-tier-fraction", "1", "--host-tier-mode", "copy,split",
                     "--validate", "scipy", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [(r["options"]["host_tier"], r["options"]["host_tier_mode"]) for r in runs] == \
        [("lists", "copy"), ("lists", "split"), ("degree", "split")]
    copy, split, _ = (r["searches"][0]["stats"] for r in runs)
    assert copy["ios"] == split["ios"] == 0
    assert copy["tier_hits"] > 0 and split["tier_direct"] > 0 and split["tier_hits"] == 0
    text = capsys.readouterr().out
    assert "tier copies/search" in text and "tier direct/search" in text
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bfs", "--scale", "5", "--host-tier", "degree", "--host-tier-mode",
                  "copy,sideways"])
    assert exit_info.value.code == 2 and "host tier modes" in capsys.readouterr().err
