"""What ``gather_rows`` keeps between calls to cut its host cost: Numba views of torch tensors
(never one for another tensor at a freed pointer, never keeping a tensor alive), Numba stream
objects by (device, handle), the Runtime's events from a pool, and a set-aside list per
stream."""
import gc
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


class _Owner:
    """Stands for a tensor: memory at ``ptr``; weakly referenceable, as torch's are."""

    def __init__(self, ptr):
        self.ptr = ptr


def _make(made):
    def make(owner):
        made.append(owner.ptr)
        return types.SimpleNamespace(ptr=owner.ptr, token=object())   # holds no owner
    return make


META = (0x7000, (4, 8), (8, 1), "float32", 0)


def test_view_is_kept_for_the_same_live_owner_and_meta():
    cache, made = ViewCache(size=4), []
    a = _Owner(0x7000)
    view = cache.get(a, META, _make(made))
    assert cache.get(a, META, _make(made)) is view and len(made) == 1
    # the same object with other memory (torch's set_, resize_): a new view
    moved = (0x9000,) + META[1:]
    assert cache.get(a, moved, _make(made)) is not view and len(made) == 2


def test_view_cache_does_not_keep_its_owner_alive():
    cache = ViewCache(size=4)
    a = _Owner(0x7000)
    cache.get(a, META, _make([]))
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None


def test_freed_pointer_reused_by_another_owner_gets_its_own_view():
    cache, made = ViewCache(size=4), []
    a = _Owner(0x7000)
    old = cache.get(a, META, _make(made))
    # Another owner at the same pointer, shape and dtype, and (as CPython may give it) the old
    # owner's id: the kept entry is moved to its id to make that certain.
    b = _Owner(0x7000)
    cache._views[id(b)] = cache._views.pop(id(a))
    del a
    gc.collect()
    new = cache.get(b, META, _make(made))
    assert new is not old and new.token is not old.token and len(made) == 2
    assert cache.get(b, META, _make(made)) is new
    # while the first owner lives, the second (same meta, another object) is not given its view
    c = _Owner(0x7000)
    assert cache.get(c, META, _make(made)) is not new


def test_view_cache_is_bounded():
    cache, made = ViewCache(size=3), []
    owners = [_Owner(i) for i in range(10)]
    for o in owners:
        cache.get(o, (o.ptr,), _make(made))
    assert len(cache) == 3


@pytest.mark.skipif(torch is None, reason="torch is not installed (extra: torch)")
def test_torch_meta_sees_other_memory_in_the_same_tensor():
    t = torch.zeros(4, 8)
    before = interop.torch_meta(t)
    assert interop.torch_meta(t) == before
    t.set_(torch.zeros(4, 8))
    assert interop.torch_meta(t) != before
    assert interop.torch_meta(t.t()) != interop.torch_meta(t)   # strides


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

    def record(self, stream):
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


def test_set_aside_list_per_stream_grows_and_is_bounded():
    from numba import cuda

    from gids.rows import MAX_ASIDE_LISTS, _aside_list
    rt = types.SimpleNamespace(_rows_aside_lists={})
    s = cuda.default_stream()
    aside, n_aside = _aside_list(rt, 10, (0, 1), s)
    assert _aside_list(rt, 1000, (0, 1), s)[0] is aside       # reused while it fits
    assert n_aside.copy_to_host()[0] == 0
    bigger, _ = _aside_list(rt, 5000, (0, 1), s)
    assert bigger is not aside and bigger.size >= 5000
    assert _aside_list(rt, 10, (0, 2), s)[0] is not bigger    # another stream, its own
    for h in range(3, 3 + 2 * MAX_ASIDE_LISTS):
        _aside_list(rt, 10, (0, h), s)
    assert len(rt._rows_aside_lists) == MAX_ASIDE_LISTS


def test_count_is_zeroed_on_each_take():
    from numba import cuda

    from gids.rows import _aside_list
    rt = types.SimpleNamespace(_rows_aside_lists={})
    _, n_aside = _aside_list(rt, 10, (0, 1), cuda.default_stream())
    n_aside.copy_to_device(np.array([7], dtype=np.int64))
    _, again = _aside_list(rt, 10, (0, 1), cuda.default_stream())
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
