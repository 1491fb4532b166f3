"""Arrays striped over several files (simulator): ``rt.open_array([paths], stripe=...)`` and
``gids.StripedStore`` read and write the same bytes numpy sees in one file, on both back ends;
bad stripe sets are refused before any kernel runs; ``gids stripe`` splits a file and checks
it; ``rt.stats().files`` counts each file's I/Os.

The reference layout here is built with numpy's reshapes (units dealt round-robin to the files),
not with the code under test."""
import os

import numpy as np
import pytest

import gids
from gids.cli import main
from tests.helpers import poisoned

PAGE = 512
BACKENDS = ["host", "nvme"]


def _stripe_parts(data, unit, n):
    """The files' bytes of ``data`` striped over ``n`` files in units of ``unit`` bytes:
    unit k of the data goes to file k % n, after the file's earlier units."""
    units = [data[k:k + unit] for k in range(0, data.size, unit)]
    return [np.concatenate(units[f::n]) if units[f::n] else np.zeros(0, np.uint8)
            for f in range(n)]


def _write_stripes(tmp_path, data, unit, n, name="s"):
    paths = [tmp_path / f"{name}.{f}" for f in range(n)]
    for path, part in zip(paths, _stripe_parts(data, unit, n)):
        part.tofile(path)
    return paths


def _read_stripes(paths, unit):
    """The byte range the files hold, put back together (the inverse of _stripe_parts)."""
    parts = [np.fromfile(p, dtype=np.uint8) for p in paths]
    out, k = [], 0
    while any(k * unit < p.size for p in parts):
        for p in parts:
            out.append(p[k * unit:(k + 1) * unit])
        k += 1
    return np.concatenate(out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_files, unit_pages", [(2, 1), (3, 1), (2, 2), (3, 2)])
def test_striped_array_reads_and_writes_match_numpy(tmp_path, backend, n_files, unit_pages):
    """Fresh random bytes striped by hand; gathers through a cache smaller than the array match
    numpy over the same bytes, and scattered values reach the right stripe files (evicted dirty
    pages and flushed ones), byte for byte. 13.5 pages: the last unit is partial."""
    unit = unit_pages * PAGE
    rng = np.random.default_rng(100 * n_files + unit_pages)
    raw = rng.integers(0, 256, 13 * PAGE + PAGE // 2, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, unit, n_files)
    model = raw.view(np.int32).copy()
    with gids.Runtime(backend, cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array(paths, np.int32, mode="r+", stripe=unit)
        assert a.size == model.size
        written = []
        for _ in range(2):
            idx = rng.integers(0, model.size, 64)
            got = rt.gather(a, idx, out=_device(poisoned(64, np.int32))).copy_to_host()
            np.testing.assert_array_equal(got, model[idx])
            widx = rng.choice(model.size, 48, replace=False)
            vals = rng.integers(-(1 << 30), 1 << 30, 48).astype(np.int32)
            rt.scatter(a, widx, vals)
            model[widx] = vals
            written.append(widx)
        # Read back: every written element and each page's first and last (the whole file is
        # compared after the flush below).
        per_page = PAGE // 4
        idx = np.unique(np.concatenate([np.arange(0, model.size, per_page),
                                        np.arange(per_page - 1, model.size, per_page),
                                        [model.size - 1], *written]))
        got = rt.gather(a, idx).copy_to_host()
        np.testing.assert_array_equal(got, model[idx])
        rt.flush()
        assert rt.stats().writebacks > 0          # some pages went back on eviction
        np.testing.assert_array_equal(_read_stripes(paths, unit), model.view(np.uint8))
        for path, part in zip(paths, _stripe_parts(model.view(np.uint8), unit, n_files)):
            assert os.path.getsize(path) == part.size


def _device(host):
    from numba import cuda
    return cuda.to_device(host)


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_file_stats_add_up_to_the_totals(tmp_path, backend):
    """Reads and writes counted per stripe file add up to the Runtime's totals; each file got
    its share (pages deal round-robin), and every counted I/O has a latency."""
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, 12 * PAGE, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, PAGE, 3)
    with gids.Runtime(backend, cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array([str(p) for p in paths], np.int64, mode="r+")
        rt.gather(a, np.arange(0, a.size, PAGE // 8))           # each page once: 4 per file
        files = rt.stats().files
        assert [f.path for f in files] == [str(p) for p in paths]
        assert [f.reads for f in files] == [4, 4, 4]
        rt.set_daemon_threads(2)                   # a new daemon: the counts carry over
        rt.scatter(a, rng.choice(a.size, 40, replace=False), np.arange(40, dtype=np.int64))
        rt.flush()
        s = rt.stats()
        assert sum(f.reads for f in s.files) == s.ios
        assert sum(f.bytes_read for f in s.files) == s.bytes_read
        assert sum(f.writes for f in s.files) == s.writebacks + s.flushed
        assert sum(f.bytes_written for f in s.files) == s.bytes_written
        assert all(f.read_ns > 0 for f in s.files)
        assert all(f.write_ns > 0 for f in s.files if f.writes)
        rt.reset_stats()
        assert all(f.ios == 0 for f in rt.stats().files)


def test_striped_store_object_and_invalidate(tmp_path):
    """A gids.StripedStore passed as a store; invalidate() drops the cache and the next reads
    come from the files again (and see bytes changed there meanwhile)."""
    raw = np.random.default_rng(3).integers(0, 256, 8 * PAGE, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, 2 * PAGE, 2)
    with gids.StripedStore(paths, 2 * PAGE) as store, \
            gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
        a = rt.open_array(store, np.uint8)
        idx = np.arange(0, raw.size, 97)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), raw[idx])
        changed = raw.copy()
        changed[2 * PAGE:3 * PAGE] ^= 0xFF            # unit 1: file 1's first unit
        _write_stripes(tmp_path, changed, 2 * PAGE, 2)
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), raw[idx])   # cached
        rt.invalidate()
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), changed[idx])


def test_striped_array_trace_names_store_offsets(tmp_path):
    """Traces of a striped array record the store's byte offsets (before striping), as for any
    store: the SSD model spreads them over its own drives."""
    raw = np.random.default_rng(4).integers(0, 256, 6 * PAGE, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, PAGE, 2)
    trace = tmp_path / "t.trace"
    with gids.Runtime(cache_pages=32, page_size=PAGE, trace=str(trace)) as rt:
        a = rt.open_array(paths, np.uint8)
        idx = np.arange(0, raw.size, 7)                  # every page, at 73 bytes of each
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), raw[idx])
    records = gids.read_trace(str(trace))
    assert sorted(records["offset"].tolist()) == [p * PAGE for p in range(6)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stripe_file_that_shrinks_names_that_file_and_page(tmp_path, backend):
    """Stripe file 1 truncated under the Runtime: reading a page of it raises StorageIOError
    naming that file and the page; pages of the other file still read, after recovery."""
    raw = np.random.default_rng(6).integers(0, 256, 8 * PAGE, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, PAGE, 2)
    with gids.Runtime(backend, cache_pages=4, page_size=PAGE) as rt:
        a = rt.open_array(paths, np.uint8)
        os.truncate(paths[1], PAGE)                  # file 1 keeps page 1 only
        with pytest.raises(gids.StorageIOError, match=r"page 3 .*stripe file .*s\.1.*short"
                           ) as info:
            rt.gather(a, [3 * PAGE + 5])
        assert info.value.page == 3 and info.value.path == str(paths[1])
        idx = np.array([5, PAGE + 5, 2 * PAGE + 5, 6 * PAGE + 5])   # pages 0, 1, 2, 6
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), raw[idx])


def test_store_layout_matches_the_reference_on_the_host(tmp_path):
    """Without kernels: write_stripes writes the reference layout, stripe_sizes gives its sizes,
    and StripedStore reads and writes byte ranges that span several units and files."""
    from host_daemon.stores import stripe_sizes, write_stripes
    rng = np.random.default_rng(11)
    for trial in range(12):
        n, unit = int(rng.integers(1, 5)), int(rng.choice([512, 1024, 1536]))
        raw = rng.integers(0, 256, int(rng.integers(1, 12 * unit)), dtype=np.uint8)
        src = tmp_path / f"src{trial}"
        raw.tofile(src)
        paths = [tmp_path / f"t{trial}.{f}" for f in range(n)]
        write_stripes(src, paths, unit, chunk=unit * n * 2)   # several chunks
        parts = _stripe_parts(raw, unit, n)
        assert [p.read_bytes() for p in paths] == [part.tobytes() for part in parts]
        assert stripe_sizes(raw.size, unit, n) == [part.size for part in parts]
        with gids.StripedStore(paths, unit, writable=True) as store:
            assert store.read_bytes(0, raw.size) == raw.tobytes()
            at = int(rng.integers(0, raw.size))
            length = int(rng.integers(1, raw.size - at + 1))
            assert store.read_bytes(at, length) == raw[at:at + length].tobytes()
            new = rng.integers(0, 256, length, dtype=np.uint8)
            store.write_bytes(at, new.tobytes())
            raw[at:at + length] = new
            store.sync()
        np.testing.assert_array_equal(_read_stripes(paths, unit)[:raw.size], raw)


# ------------------------------------------------------------------ bad stripe sets

def test_bad_stripe_sets_are_refused(tmp_path):
    raw = np.random.default_rng(5).integers(0, 256, 8 * PAGE, dtype=np.uint8)
    paths = _write_stripes(tmp_path, raw, PAGE, 2)
    with gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
        with pytest.raises(gids.ConfigError, match="empty list"):
            rt.open_array([], np.uint8)
        with pytest.raises(gids.ConfigError, match="same file"):
            rt.open_array([paths[0], paths[1], paths[0]], np.uint8)
        os.link(paths[0], tmp_path / "hard")             # another name, the same inode
        with pytest.raises(gids.ConfigError, match="same file"):
            rt.open_array([paths[0], tmp_path / "hard"], np.uint8)
        with pytest.raises(gids.ConfigError, match="multiple of the page size"):
            rt.open_array(paths, np.uint8, stripe=PAGE + 8)
        with pytest.raises(gids.ConfigError, match="multiple of the page size"):
            rt.open_array(paths, np.uint8, stripe=PAGE // 2)
        with pytest.raises(gids.ConfigError, match="stripe=.*list of paths"):
            rt.open_array(paths[0], np.uint8, stripe=PAGE)
        with pytest.raises(gids.ConfigError, match="page size.*offset"):
            rt.open_array(paths, np.uint8, shape=100, offset=8)
        with open(paths[1], "ab") as f:                   # file 1 one byte too long
            f.write(b"x")
        with pytest.raises(gids.ConfigError, match=r"sizes do not fit.*s\.1' has 2049"):
            rt.open_array(paths, np.uint8)
        with pytest.raises(FileNotFoundError):
            rt.open_array([paths[0], tmp_path / "missing"], np.uint8)
        assert rt.stats().files == ()                     # nothing was opened


# ------------------------------------------------------------------ gids stripe

@pytest.mark.parametrize("n, unit", [(3, PAGE), (2, 2 * PAGE)])
def test_gids_stripe_round_trip(tmp_path, capsys, n, unit):
    """The files gids stripe writes are the reference layout, and read back through a Runtime
    they are the source's bytes."""
    src = tmp_path / "src.bin"
    raw = np.random.default_rng(n).integers(0, 256, 7 * PAGE + 100, dtype=np.uint8)
    raw.tofile(src)
    assert main(["stripe", str(src), str(tmp_path / "d"), "--n", str(n),
                 "--unit", str(unit)]) == 0
    assert "OK" in capsys.readouterr().out
    paths = [tmp_path / f"d.{f}" for f in range(n)]
    for path, part in zip(paths, _stripe_parts(raw, unit, n)):
        assert path.read_bytes() == part.tobytes()
    with gids.Runtime(cache_pages=32, page_size=PAGE) as rt:
        a = rt.open_array(paths, np.uint8, stripe=unit)
        idx = np.r_[np.arange(0, raw.size, 7), raw.size - 1]   # every page, and the last byte
        np.testing.assert_array_equal(rt.gather(a, idx).copy_to_host(), raw[idx])


def _status(argv):
    """``gids ARGV``'s exit status, whether main returned it (a UsageError) or argparse exited
    with it (an argument's type refused it)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv, message", [
    (["{missing}", "{dst}", "--n", "2"], "no such file"),
    (["{src}", "{dst}", "--n", "0"], "argument --n: must be at least 1, got 0"),
    (["{src}", "{dst}", "--n", "2", "--unit", "1000"], "--unit must be a positive multiple"),
    (["{src}", "{tmp}/nodir/d", "--n", "2"], "no such directory"),
    (["{src}", "{exists}", "--n", "2"], "exists"),
])
def test_gids_stripe_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    src = tmp_path / "src.bin"
    src.write_bytes(b"\1" * 4096)
    (tmp_path / "e.0").write_bytes(b"keep")
    names = dict(missing=tmp_path / "nope", dst=tmp_path / "d", src=src, tmp=tmp_path,
                 exists=tmp_path / "e")
    assert _status(["stripe"] + [a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gids stripe: error: ") and message in err[0]
    assert (tmp_path / "e.0").read_bytes() == b"keep"


def test_gids_stripe_needs_n(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["stripe", "a", "b"])
    assert exc.value.code == 2


def test_stripe_bench_runs_and_checks_its_reads(tmp_path, capsys):
    """The benchmark's harness (tiny, in the simulator): both layouts, every read checked."""
    from workloads import stripe_bench
    out = tmp_path / "r.json"
    assert stripe_bench.main(["--bytes", str(32 * PAGE), "--page-size", str(PAGE), "--files",
                              "3", "--pages", "24", "--daemon-threads", "1", "--backends",
                              "host", "--dir", str(tmp_path), "--json", str(out)]) == 0
    import json
    rows = json.loads(out.read_text())["results"]
    assert [r["layout"] for r in rows] == ["one file", "striped x3"]
    assert sum(f["reads"] for f in rows[1]["files"]) == rows[1]["ios"] == 24
    assert os.listdir(tmp_path) == ["r.json"]          # its files were removed
