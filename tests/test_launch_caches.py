"""What ``gather_rows`` keeps between calls to cut its host cost: Numba views of torch tensors
(never one for another tensor at a freed pointer, never keeping a tensor alive), Numba stream
objects by (device, handle), the Runtime's events from a pool, and a set-aside list per
stream."""
import gc
import time
import types
import weakref

import numpy as np
import pytest

import gids
from gids import interop, waiting
from gids.interop import ViewCache

try:
    import torch
except ImportError:   # the torch extra is not installed
    torch = None


def _made(keys):
    def make(key):
        keys.append(key)
        return types.SimpleNamespace(key=key)   # like a view: made from the key alone
    return make


def test_views_are_kept_by_what_they_are():
    cache, made = ViewCache(size=4), []
    key = (0x7000, (4, 8), (8, 1), "float32", 0)
    view = cache.get(key, _made(made))
    assert cache.get(key, _made(made)) is view and made == [key]
    # other memory, shape, strides or dtype: another view
    for other in ((0x9000, (4, 8), (8, 1), "float32", 0), (0x7000, (2, 8), (8, 1), "float32", 0),
                  (0x7000, (4, 8), (1, 4), "float32", 0), (0x7000, (4, 8), (8, 1), "int32", 0)):
        assert cache.get(other, _made(made)).key == other
    assert len(cache) == 4    # bounded: the oldest went
    assert cache.get(key, _made(made)) is not view


@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_torch_key_is_everything_a_view_reads_and_holds_no_tensor():
    t = torch.zeros(4, 8)
    key = interop.torch_view_key(t)
    assert key == (t.data_ptr(), (4, 8), (8, 1), torch.float32, t.get_device())
    assert interop.torch_view_key(t[:2]) != key and interop.torch_view_key(t.t()) != key
    # a freed tensor's key names no tensor: a view cached under it cannot keep it (or read
    # it) once another tensor has the memory: that view is the new tensor's own, made afresh
    ref = weakref.ref(t)
    cache = ViewCache()
    cache.get(key, _made([]))
    del t
    gc.collect()
    assert ref() is None
    assert all(not isinstance(part, torch.Tensor) for part in key)
    assert interop._numpy_dtype(torch.float32) == np.float32
    assert interop._numpy_dtype(torch.bfloat16) is None   # no numpy dtype: the interface path


@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_out_at_a_cached_pointer_checked_again_for_shape_dtype_and_device(monkeypatch):
    # A torch out's view (and its device) are kept by what they are: another tensor at the
    # same pointer with another shape, dtype or device gets its own view, checked afresh.
    from gids import rows
    made = []

    def view_from_key(key):
        made.append(key)
        return types.SimpleNamespace(shape=key[1], dtype=interop._numpy_dtype(key[3]))

    device = {"id": 0}
    monkeypatch.setattr(interop, "SIMULATOR", False)     # the GPU's path, with CPU tensors
    monkeypatch.setattr(interop, "_TORCH_VIEWS", ViewCache())
    monkeypatch.setattr(interop, "view_from_key", view_from_key)
    monkeypatch.setattr(interop, "torch_view_key", lambda t: (
        t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, device["id"]))
    monkeypatch.setattr(rows, "is_cuda_array", lambda obj: True)
    buf = torch.empty(64)
    first = buf[:32].view(4, 8)
    assert rows.output_array(first, (4, 8), np.dtype(np.float32), 0)[1] is first
    assert rows.output_array(buf[:32].view(4, 8), (4, 8), np.dtype(np.float32), 0)[0] \
        is rows.output_array(first, (4, 8), np.dtype(np.float32), 0)[0]
    assert len(made) == 1     # one view for one (pointer, shape, strides, dtype, device)
    with pytest.raises(gids.ConfigError, match=r"\(4, 8\) of float32, got \(2, 16\)"):
        rows.output_array(buf[:32].view(2, 16), (4, 8), np.dtype(np.float32), 0)
    with pytest.raises(gids.ConfigError, match=r"got \(4, 8\) of int32"):
        rows.output_array(buf.view(torch.int32)[:32].view(4, 8), (4, 8),
                          np.dtype(np.float32), 0)
    device["id"] = 1
    with pytest.raises(gids.ConfigError, match="out is on device 1, the Runtime on device 0"):
        rows.output_array(first, (4, 8), np.dtype(np.float32), 0)
    assert len(made) == 4


def test_gather_keeps_the_callers_arrays_until_its_launch_is_done(monkeypatch):
    # The views hold no memory: the launch's list holds the caller's index and output arrays.
    from gids import rows
    kept = []
    monkeypatch.setattr(rows, "note_launch", lambda rt, s, keep=(): kept.append(keep))
    data = np.arange(40 * 8, dtype=np.float32).reshape(40, 8)
    with gids.Runtime(page_size=512, cache_pages=8, daemon_threads=1, queues=2) as rt:
        a = rt.open_array(data)
        idx, out = np.array([3, 1]), np.zeros((2, 8), np.float32)
        rt.gather_rows(a, idx, out=out)
        assert any(k is idx for k in kept[-1]) and any(k is out for k in kept[-1])


@pytest.mark.parametrize("resident_first", [False, True])
def test_gather_keeps_the_output_it_made_until_its_launch_is_done(monkeypatch, resident_first):
    # A caller may drop the returned array at once (a warm-up gather): the launch's list holds
    # the memory the kernel writes, else a pooled or stream-ordered allocator hands it on while
    # the kernel still writes it.
    from gids import rows
    kept = []
    monkeypatch.setattr(rows, "note_launch", lambda rt, s, keep=(): kept.append(keep))
    data = np.arange(40 * 8, dtype=np.float32).reshape(40, 8)
    with gids.defaults.set(rows_resident_first=resident_first), \
            gids.Runtime(page_size=512, cache_pages=8, daemon_threads=1, queues=2) as rt:
        a = rt.open_array(data)
        got = rt.gather_rows(a, np.array([3, 1]))
        assert any(k is got.device_array for k in kept[-1])


def test_numba_streams_made_once_per_device_and_handle(monkeypatch):
    made = []

    def external_stream(handle):
        made.append(handle)
        return types.SimpleNamespace(handle=handle)

    monkeypatch.setattr(interop, "SIMULATOR", False)
    monkeypatch.setattr(interop, "_STREAMS", {})
    monkeypatch.setattr(interop.cuda, "external_stream", external_stream, raising=False)
    monkeypatch.setattr(interop.cuda, "default_stream", lambda: "default", raising=False)
    s = interop.numba_stream(0x55, 0)
    assert interop.numba_stream(0x55, 0) is s and made == [0x55]
    assert interop.numba_stream(0x55, 1) is not s and made == [0x55, 0x55]
    assert interop.numba_stream(0x66, 0).handle == 0x66
    assert interop.numba_stream(0, 0) == "default"
    for h in range(1, 2 * interop.MAX_STREAMS):
        interop.numba_stream(h, 0)
    assert len(interop._STREAMS) <= interop.MAX_STREAMS


class _Event:
    def __init__(self):
        self.done, self.streams = False, []

    def record(self, stream=0):
        self.streams.append(stream)
        self.done = False


def test_launch_events_come_from_a_pool(monkeypatch):
    created = []

    def event(timing=True):
        created.append(_Event())
        return created[-1]

    from numba import cuda
    monkeypatch.setattr(cuda, "event", event, raising=False)
    monkeypatch.setattr(waiting, "event_done", lambda e: e.done)
    w = waiting.KernelWaiter()
    first = w.record("s1", keep=("rows",))
    second = w.record("s2")
    assert len(created) == 2 and first is not second
    first.done = True
    third = w.record("s1")    # the oldest is done: its event is recorded again
    assert third is first and first.streams == ["s1", "s1"] and len(created) == 2
    assert all(k != ("rows",) for _, k in w._on_streams)   # its arrays let go
    fourth = w.record("s3")   # the oldest (second) is not done: a new event
    assert fourth not in (first, second) and len(created) == 3
    assert len(w._on_streams) == 3


def test_an_event_not_seen_done_is_never_reused(monkeypatch):
    from numba import cuda
    monkeypatch.setattr(cuda, "event", lambda timing=True: _Event(), raising=False)
    monkeypatch.setattr(waiting, "event_done", lambda e: e.done)
    w = waiting.KernelWaiter()
    events = [w.record("s") for _ in range(20)]
    assert len({id(e) for e in events}) == 20


def test_a_host_far_ahead_waits_for_its_oldest_launch(monkeypatch):
    # With MOST_AHEAD launches in flight, a record waits for the oldest (here: seen done
    # after a few polls) before it records; the launches in flight never exceed the limit.
    from numba import cuda
    monkeypatch.setattr(cuda, "event", lambda timing=True: _Event(), raising=False)
    polls = []

    def done(e):
        polls.append(e)
        if polls.count(e) >= 3:
            e.done = True
        return e.done
    monkeypatch.setattr(waiting, "event_done", done)
    monkeypatch.setattr(waiting.KernelWaiter, "MOST_AHEAD", 4)
    w = waiting.KernelWaiter()
    for n in range(10):
        w.record("s")
        assert len(w._on_streams) <= 4
    assert len(polls) >= 6   # launches 5-10 each found the oldest in flight, at least once


def test_launches_ended_behind_a_slow_one_do_not_count(monkeypatch):
    # The oldest launch never ends (a prefetch waiting on storage, say); the ones behind it
    # do: the host is not ahead, so no record waits (a wait would take ahead_timeout).
    from numba import cuda
    monkeypatch.setattr(cuda, "event", lambda timing=True: _Event(), raising=False)
    slow = []
    monkeypatch.setattr(waiting, "event_done", lambda e: e not in slow)
    monkeypatch.setattr(waiting.KernelWaiter, "MOST_AHEAD", 3)
    w = waiting.KernelWaiter()
    slow.append(w.record("prefetch"))
    start = time.monotonic()
    for _ in range(10):
        w.record("s", ahead_timeout=5.0)
    assert time.monotonic() - start < 2.0
    assert w._on_streams[0][0] is slow[0] and len(w._on_streams) <= 3


def test_the_wait_for_the_oldest_launch_is_bounded(monkeypatch):
    from numba import cuda
    monkeypatch.setattr(cuda, "event", lambda timing=True: _Event(), raising=False)
    monkeypatch.setattr(waiting, "event_done", lambda e: False)   # a launch that never ends
    monkeypatch.setattr(waiting.KernelWaiter, "MOST_AHEAD", 2)
    w = waiting.KernelWaiter()
    for _ in range(4):
        w.record("s", ahead_timeout=0.01)   # waits 10 ms each, then records anyway
    assert len(w._on_streams) == 4


def test_set_aside_list_per_stream_grows_and_is_bounded():
    from numba import cuda

    from gids.rows import MAX_ASIDE_LISTS, _aside_list
    rt = types.SimpleNamespace(_rows_aside_lists={})
    s = cuda.default_stream()
    aside, n_aside, arrays = _aside_list(rt, 10, (0, 1), s)
    assert _aside_list(rt, 1000, (0, 1), s)[0] is aside       # reused while it fits
    assert arrays[1].copy_to_host()[0] == 0
    bigger, _, _ = _aside_list(rt, 5000, (0, 1), s)
    assert bigger is not aside and bigger.size >= 5000
    assert _aside_list(rt, 10, (0, 2), s)[0] is not bigger    # another stream, its own
    for h in range(3, 3 + 2 * MAX_ASIDE_LISTS):
        _aside_list(rt, 10, (0, h), s)
    assert len(rt._rows_aside_lists) == MAX_ASIDE_LISTS


def test_count_is_zeroed_on_each_take():
    from numba import cuda

    from gids.rows import _aside_list
    rt = types.SimpleNamespace(_rows_aside_lists={})
    _, _, (_, n_aside) = _aside_list(rt, 10, (0, 1), cuda.default_stream())
    n_aside.copy_to_device(np.array([7], dtype=np.int64))
    _, _, (_, again) = _aside_list(rt, 10, (0, 1), cuda.default_stream())
    assert again is n_aside and again.copy_to_host()[0] == 0


@pytest.mark.gpu
@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_gpu_torch_out_at_a_freed_and_reused_pointer():
    # torch's allocator hands the freed block to the next tensor of its size: the second
    # gather must write the new tensor (its own view), and the first tensor is not kept.
    rng = np.random.default_rng()
    data = rng.standard_normal((500, 64)).astype(np.float32)
    with gids.Runtime() as rt:
        a = rt.open_array(data)
        rows = rng.integers(0, 500, size=300)
        out = torch.full((300, 64), float("nan"), device="cuda")
        rt.gather_rows(a, torch.from_numpy(rows).cuda(), out=out)
        rt.sync()
        np.testing.assert_array_equal(out.cpu().numpy(), data[rows])
        ref = weakref.ref(out)
        del out
        gc.collect()
        rt.sync()
        assert ref() is None
        again = torch.full((300, 64), float("nan"), device="cuda")
        rows2 = rng.integers(0, 500, size=300)
        rt.gather_rows(a, torch.from_numpy(rows2).cuda(), out=again)
        rt.sync()
        np.testing.assert_array_equal(again.cpu().numpy(), data[rows2])


@pytest.mark.gpu
@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_gpu_view_from_a_key_reads_the_tensor():
    for t in (torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6),
              torch.arange(24, dtype=torch.int64, device="cuda").reshape(4, 6).t(),
              torch.arange(48, dtype=torch.int32, device="cuda").reshape(8, 6)[2:5, 1:4]):
        view = interop.view_from_key(interop.torch_view_key(t))
        np.testing.assert_array_equal(view.copy_to_host(), t.cpu().numpy())
        assert interop.as_numba(t).device_ctypes_pointer.value == t.data_ptr()


@pytest.mark.gpu
@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_gpu_gathers_into_slices_of_one_buffer():
    # The loader's pattern: a new slice object of one buffer per batch, new index tensors.
    rng = np.random.default_rng()
    data = rng.standard_normal((700, 32)).astype(np.float32)
    buffer = torch.full((400, 32), float("nan"), device="cuda")
    with gids.Runtime() as rt:
        a = rt.open_array(data)
        for n in (400, 5, 400, 1, 77):
            rows = rng.integers(0, 700, size=n)
            rt.gather_rows(a, torch.from_numpy(rows).to("cuda", torch.int32), out=buffer[:n])
            rt.sync()
            np.testing.assert_array_equal(buffer[:n].cpu().numpy(), data[rows])


def test_a_wait_gives_each_event_back_once(monkeypatch):
    from numba import cuda
    monkeypatch.setattr(cuda, "event", lambda timing=True: _Event(), raising=False)
    monkeypatch.setattr(waiting, "event_done", lambda e: e.done)
    monkeypatch.setattr(waiting, "SIMULATOR", False)
    w = waiting.KernelWaiter()
    events = [w.record("s") for _ in range(5)]
    assert len({id(e) for e in events}) == 5
    for e in events:
        e.done = True
    w._event = _Event()
    w._event.done = True
    monkeypatch.setattr(w._event, "record", lambda stream=0: None)
    w.wait()
    assert w._on_streams == [] and sorted(map(id, w._free)) == sorted(map(id, events))
    assert w.record("s") in events and len(w._free) == 4


@pytest.mark.skipif(not gids.SIMULATOR, reason="the harness runs in the simulator")
def test_rows_host_harness_runs_and_puts_the_launch_back(capsys):
    from gids import rows
    from workloads import rows_host
    launch = rows.launch
    assert rows_host.main(["--calls", "1000", "--batch", "8"]) == 0
    assert rows.launch is launch
    assert capsys.readouterr().out.count("us per call") == 3
