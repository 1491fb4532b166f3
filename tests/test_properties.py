"""Property-based tests of the cache state machine (simulator): random sequences of gathers and
invalidations over random page sizes, cache sizes, dtypes and offsets; every value read equals
numpy's, and the counters stay consistent."""
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
