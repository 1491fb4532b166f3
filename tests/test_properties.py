"""Property-based tests of the cache and queue state machines (simulator): random sequences of
gathers, scatters, invalidations and flushes over random page sizes, cache sizes, queue depths,
dtypes, offsets and stores; every value read equals numpy's, every flush leaves the store equal
to the numpy model byte for byte, and the counters stay consistent."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gids

DTYPES = [np.int8, np.int32, np.int64, np.float32, np.float64]

operation = st.one_of(
    st.tuples(st.just("gather"), st.lists(st.integers(0, 10**9), min_size=1, max_size=24)),
    st.tuples(st.just("invalidate"), st.just(None)),
)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(page_size=st.sampled_from([512, 1024, 2048]), cache_pages=st.integers(1, 6),
       dtype=st.sampled_from(DTYPES), offset=st.integers(0, 40), n_pages=st.integers(1, 9),
       ops=st.lists(operation, min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_any_sequence_of_reads_matches_numpy(page_size, cache_pages, dtype, offset, n_pages,
                                             ops, seed):
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(seed).integers(0, 256, offset + n_pages * page_size,
                                               dtype=np.uint8)
    size = (raw.size - offset) // dtype.itemsize
    ref = raw[offset:offset + size * dtype.itemsize].view(dtype)
    with gids.Runtime(cache_pages=cache_pages, page_size=page_size) as rt:
        a = rt.open_array(gids.MemoryStore(raw, zero_copy=bool(seed & 1)), dtype, shape=size,
                          offset=offset)
        touched = set()
        for name, arg in ops:
            if name == "invalidate":
                rt.invalidate()
                touched.clear()
                rt.reset_stats()
                continue
            idx = np.array(arg, dtype=np.int64) % size
            got = rt.gather(a, idx).copy_to_host()
            np.testing.assert_array_equal(got.view(np.uint8), ref[idx].view(np.uint8))
            touched |= set((idx * dtype.itemsize // page_size).tolist())
            s = rt.stats()
            assert s.lookups == s.hits + s.misses
            assert s.ios >= len(touched)            # every page read at least once since reset
            assert s.evictions <= s.ios
            assert s.ios <= s.misses


write_operation = st.one_of(
    st.tuples(st.just("gather"), st.lists(st.integers(0, 10**9), min_size=1, max_size=16)),
    st.tuples(st.just("scatter"), st.lists(st.integers(0, 10**9), min_size=1, max_size=16)),
    st.tuples(st.just("invalidate"), st.just(None)),
    st.tuples(st.just("flush"), st.just(None)),
)


#: The random cases of the write property, for either back end.
write_cases = given(
    page_size=st.sampled_from([512, 1024]), cache_pages=st.integers(1, 4),
    dtype=st.sampled_from(DTYPES), offset=st.integers(0, 24), n_pages=st.integers(1, 6),
    queue_depth=st.integers(1, 3), store=st.sampled_from(["file", "memory", "zero_copy"]),
    ops=st.lists(write_operation, min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@write_cases
def test_any_sequence_of_reads_writes_evictions_and_flushes_matches_numpy(
        tmp_path_factory, page_size, cache_pages, dtype, offset, n_pages, queue_depth, store, ops,
        seed):
    """The cache and queue state machines under random reads, writes, evictions (tiny caches,
    ``invalidate``) and flushes, over shallow queues that wrap often: every value read equals
    the numpy model, and after each flush (and at the end) the store equals it byte for byte."""
    _reads_writes_evictions_flushes("host", tmp_path_factory, page_size, cache_pages, dtype,
                                    offset, n_pages, queue_depth, store, ops, seed)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@write_cases
def test_nvme_any_sequence_of_reads_writes_evictions_and_flushes_matches_numpy(
        tmp_path_factory, page_size, cache_pages, dtype, offset, n_pages, queue_depth, store, ops,
        seed):
    """The same over the direct NVMe path (dirty evictions are NVMe Write commands through
    rings of 2 to 4 entries); fewer cases, since the host path's cover the cache itself."""
    _reads_writes_evictions_flushes("nvme", tmp_path_factory, page_size, cache_pages, dtype,
                                    offset, n_pages, queue_depth, store, ops, seed)


def _reads_writes_evictions_flushes(backend, tmp_path_factory, page_size, cache_pages, dtype,
                                    offset, n_pages, queue_depth, store, ops, seed):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, offset + n_pages * page_size + 5, dtype=np.uint8)
    model = raw.copy()
    size = n_pages * page_size // dtype.itemsize - (1 if seed & 2 else 0)   # a partial page too
    view = model[offset:offset + size * dtype.itemsize].view(dtype)
    path = tmp_path_factory.mktemp("w") / "data.bin"
    raw.tofile(path)

    def stored():
        return np.fromfile(path, np.uint8) if store == "file" else raw

    with gids.Runtime(backend, cache_pages=cache_pages, page_size=page_size,
                      queue_depth=queue_depth) as rt:
        source = path if store == "file" else gids.MemoryStore(raw, zero_copy=store == "zero_copy")
        a = rt.open_array(source, dtype, shape=size, offset=offset, mode="r+")
        for name, arg in ops:
            if name == "invalidate":
                rt.invalidate()
            elif name == "flush":
                rt.flush()
                assert stored().tobytes() == model.tobytes()
            else:
                idx = np.unique(np.array(arg, dtype=np.int64) % size)
                if name == "gather":
                    got = rt.gather(a, idx).copy_to_host()
                    np.testing.assert_array_equal(got.view(np.uint8), view[idx].view(np.uint8))
                else:
                    vals = rng.integers(-100, 100, idx.size).astype(dtype)   # no NaN bits
                    rt.scatter(a, idx, vals)
                    view[idx] = vals
            s = rt.stats()
            assert s.writebacks <= s.evictions <= s.ios
            if backend == "nvme":
                assert rt.daemon.counters["writes"] == s.writebacks
    assert stored().tobytes() == model.tobytes()
