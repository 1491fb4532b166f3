"""Compile the device code to PTX with the real CUDA compiler (no GPU needed) and check it.

Runs in a subprocess with NUMBA_ENABLE_CUDASIM=0, since this process may be in the simulator
(the one the other compile tests use: tests.helpers.run_compile_script).
Needs the nvidia-nvvm and nvidia-cuda-nvrtc wheels (the ``test`` extra).
"""
import textwrap

import pytest

from tests.helpers import CompileScript, started_early

SCRIPT = textwrap.dedent('''
    import os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:   # compile device functions for cc 9.0 without a device
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    from kernels.sync import ld_acquire_sys
    from kernels.warp import nanosleep
    from tests.helpers import compile_ptx, fake_handle
    from gids.kernels_host import gather_kernel

    def poll(flag, out):
        n = 0
        while ld_acquire_sys(flag, 0) == 0:
            nanosleep(100)
            n += 1
        out[0] = n

    ptx, _ = cuda.compile_ptx(poll, (types.int64[::1], types.int64[::1]), cc=(9, 0))
    lines = [l.strip() for l in ptx.splitlines()]
    loads = [i for i, l in enumerate(lines) if "ld.acquire.sys" in l]
    labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\\$L__\\w+:$", l)}
    back_edges = [(i, labels[m.group(1)]) for i, l in enumerate(lines)
                  for m in [re.search(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", l)] if m and m.group(1) in labels]
    # The compiler may rotate the loop (a first load before it), but one load must lie between
    # a loop label and the branch back to it.
    assert any(dst <= ld < src for ld in loads for src, dst in back_edges), "load hoisted out of the loop"
    print("POLL_OK")

    a = lambda dt: np.zeros(4, dt)
    for dt in (np.int32, np.int64, np.float32, np.float64):
        h = fake_handle(dt)
        # (remembered: the gather kernel of int64 is compiled again below and by other scripts)
        ptx, _ = compile_ptx(gather_kernel.py_func, (typeof(h), types.int64[::1], typeof(a(dt))))
        # The request: one strong store, no release (a read's needs no fence: kernels/queue.py).
        assert "ld.acquire.sys" in ptx and "st.relaxed.sys" in ptx and "match.any.sync" in ptx
        assert "st.release.sys" not in ptx
    # The hit path: the pin a relaxed atomic (an acquire one is followed by an invalidation of
    # the SM's L1) on the page's 64-bit word, the unpin a plain reduction whose operand waits
    # for the values read (no fence), the statistics reductions; the miss path a real call (its
    # registers and spills stay out of the hit path).
    assert "atom.relaxed.gpu.global.add.u64" in ptx, "the pin is not a relaxed 64-bit atomic"
    assert "red.gpu.global.add.u64" in ptx, "statistics are not counted with reductions"
    assert re.search(r"\\.func\\s.*_access_slow", ptx), "the miss path is not a function"
    assert "call.uni" in ptx, "the miss path is inlined"
    # The kernel's own body (the miss path is a function after it): one pin, and the slot comes
    # back in the pin's value, so nothing is loaded between the pin and the element's load
    # (a weak L2 load, ld.global.cg) but what is computed from that value (no load of a slot).
    lines = [l.strip() for l in ptx.splitlines()]
    entry = next(i for i, l in enumerate(lines) if l.startswith(".visible .entry"))
    end = next((i for i, l in enumerate(lines) if i > entry and ".func" in l), len(lines))
    body = lines[entry:end]
    pins = [i for i, l in enumerate(body) if l.startswith("atom.relaxed.gpu.global.add.u64")]
    assert len(pins) == 1, pins
    element = next(i for i, l in enumerate(body) if i > pins[0] and l.startswith("ld.global.cg"))
    assert not [l for l in body[pins[0] + 1:element] if l.startswith(("ld.", "atom."))], \
        "a load between the pin and the element's load"
    assert not [l for l in body if l.startswith("ld.relaxed.gpu")], "a slot load in the hit path"
    # The unpin: a 64-bit reduction of -1 (plus the ballot of the values read, masked to 0).
    minus_one = {m.group(1) for l in body
                 for m in [re.match(r"add\\.s64\\s+(%rd\\d+), %rd\\d+, -1;", l)] if m}
    reds = [m.group(1) for l in body
            for m in [re.match(r"red\\.gpu\\.global\\.add\\.u64 \\[%rd\\d+\\], (%rd\\d+);", l)] if m]
    assert minus_one & set(reds), "the hit path's unpin is not a plain 64-bit reduction of -1"
    print("GATHER_OK")

    # Page-level reads: a pin that is kept (no unpin on the pin's path), weak reads served by L2,
    # and the unpin as a release reduction.
    import gids

    def copy_page(h, i, out):
        at = gids.pin_page(h, i)
        if at >= 0:
            for j in range(cuda.laneid, gids.page_room(h, i), 32):
                out[j] = gids.pinned(h, at + j)
        gids.unpin_page(h, i, at)

    h = fake_handle(np.float32)
    ptx, _ = cuda.compile_ptx(copy_page, (typeof(h), types.int64, typeof(a(np.float32))),
                              cc=(9, 0))
    # The page's bytes by weak L2 loads (pipelined; strong loads of a thread were serialised).
    assert "ld.global.cg.f32" in ptx or "ld.global.cg.b32" in ptx, "pinned reads are not ld.global.cg"
    assert "red.release.gpu.global.add.u64" in ptx
    print("PAGES_OK")

    # gids.write: the same loop plus DIRTY (an atomic OR on the page state), the write-back
    # (a system-scope fence before the WRITE request) and one typed store of the element, never
    # a wider read-modify-write (so lanes writing neighbouring bytes cannot undo each other).
    # int64 is compiled below, in the stress kernel.
    from gids.kernels_host import scatter_kernel
    store_of = {np.int8: "st.global.u8", np.float64: "st.global.f64"}
    for dt, store in store_of.items():
        h = fake_handle(dt)
        ptx, _ = cuda.compile_ptx(scatter_kernel.py_func,
                                  (typeof(h), types.int64[::1], typeof(a(dt))), cc=(9, 0))
        assert "atom.global.or.b64" in ptx, dt
        assert "membar.sys" in ptx or "fence.sc.sys" in ptx, dt
        assert "st.relaxed.sys" in ptx and "ld.acquire.sys" in ptx, dt
        assert store in ptx, (dt, store)
    # The GPU session's stress kernel compiles too (it is only ever run on a GPU at full size).
    from workloads.stress import round_kernel
    h = fake_handle(np.int64)
    i64 = types.int64
    cuda.compile_ptx(round_kernel.py_func, (typeof(h), i64, types.int64[:, ::1], i64, i64, i64,
                                            types.int64[::1]), cc=(9, 0))
    print("WRITE_OK")

    # Lane masks must be non-negative int64: numba-cuda types ballot_sync as int32, and a
    # negative mask made the page-copy loop (`m &= m - 1`) run past lane 31 (wrong pages copied
    # into slots on the H200).
    import kernels.warp as warp
    for name, sig in (("activemask", ()), ("lanemask_lt", ()),
                      ("ballot_sync", (types.int64, types.boolean)),
                      ("match_any_sync", (types.int64, types.int64)), ("popc", (types.int64,))):
        _, restype = cuda.compile_ptx(getattr(warp, name).py_func, sig, device=True, cc=(9, 0))
        assert restype == types.int64, (name, restype)
    print("MASKS_OK")

    # The direct NVMe path: the handle's type picks the I/O step at compile time.
    from kernels.nvme import publish_sq, wait_warp, write_sqes
    from kernels.warp import activemask, laneid
    from tests.helpers import fake_nvme_handle
    hn = fake_nvme_handle(np.int64)
    nvme_ptx, _ = cuda.compile_ptx(gather_kernel.py_func,
                                   (typeof(hn), types.int64[::1], typeof(a(np.int64))), cc=(9, 0))
    host_ptx, _ = compile_ptx(gather_kernel.py_func,
                              (typeof(fake_handle(np.int64)), types.int64[::1],
                               typeof(a(np.int64))))
    # NVMe: 16-byte SQE stores, doorbells and one system-scope fence; the host kernel has no SQE
    # stores and no such fence.
    assert "st.global.v2.b64" in nvme_ptx and "st.global.v2.b64" not in host_ptx, "no SQE stores"
    assert "st.relaxed.sys" in nvme_ptx, "no doorbells"   # (the host queue's request is one too)
    assert "fence.acq_rel.sys" in nvme_ptx and "fence.acq_rel.sys" not in host_ptx, "no fence"
    # No lock: the driver adds no compare-and-swap to what the cache itself uses.
    assert nvme_ptx.count("atom.global.cas") == host_ptx.count("atom.global.cas"), "a lock?"

    def loops(ptx):
        lines = [l.strip() for l in ptx.splitlines()]
        labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\\$L__\\w+:$", l)}
        back = [(labels[m.group(1)], i) for i, l in enumerate(lines)
                for m in [re.search(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", l)]
                if m and m.group(1) in labels and labels[m.group(1)] <= i]
        return lines, back

    # The SQ doorbell (publish_sq), the ordering it relies on: the SQE stores, then one
    # fence.acq_rel.sys, then the handoff's poll of nv_sq_tail (a loop), then the doorbell's
    # st.relaxed.sys (fence + later strong store = a release pattern at system scope).
    def ring(h, out):
        write_sqes(h, activemask(), laneid(), 0, out[1], 2, out[2])
        out[0] = 1 if publish_sq(h, 0, out[1], out[1] + 1, out[3]) else 0
    ptx, _ = cuda.compile_ptx(ring, (typeof(hn), types.int64[::1]), cc=(9, 0))
    lines, back = loops(ptx)
    sqe = [i for i, l in enumerate(lines) if l.startswith("st.global.v2.b64")]
    fence = [i for i, l in enumerate(lines) if l.startswith("fence.acq_rel.sys")]
    poll = [i for i, l in enumerate(lines) if l.startswith("ld.acquire.gpu")]
    bell = [i for i, l in enumerate(lines) if l.startswith("st.relaxed.sys")]
    assert sqe and len(fence) == 1 and poll and len(bell) == 1, (sqe, fence, poll, bell)
    assert max(sqe) < fence[0] < min(poll) and max(poll) < bell[0], "SQ doorbell order"
    assert any(a <= p < b for p in poll for a, b in back), "handoff poll hoisted"

    # The completion wait: its CQE poll (ld.acquire.sys) is re-read each time round the poll
    # loop, not hoisted out of it; the CQ head doorbell is a relaxed store after those acquire
    # loads (no fence needed: acquire orders the later store).
    def wait(h, out):
        done, status, _ = wait_warp(h, activemask(), laneid(), 0, out[1], True, out[2])
        out[0] = status if done else -1
    ptx, _ = cuda.compile_ptx(wait, (typeof(hn), types.int64[::1]), cc=(9, 0))
    lines, back = loops(ptx)
    loads = [i for i, l in enumerate(lines) if l.startswith("ld.acquire.sys")]
    assert loads, "no CQ phase load"
    assert all(any(a <= ld < b for a, b in back) for ld in loads), "CQ phase load hoisted"
    assert "st.relaxed.sys" in ptx
    print("NVME_OK")

    # gids.write over an NvmeHandle: a dirty victim goes out as an NVMe Write command through
    # the same rings, after the system-scope fence that orders the warp's copy into the bounce
    # buffer (host memory) before the SQEs and the doorbell.
    nvme_w, _ = cuda.compile_ptx(scatter_kernel.py_func,
                                 (typeof(hn), types.int64[::1], typeof(a(np.int64))), cc=(9, 0))
    host_w, _ = cuda.compile_ptx(scatter_kernel.py_func,
                                 (typeof(fake_handle(np.int64)), types.int64[::1],
                                  typeof(a(np.int64))), cc=(9, 0))
    assert "membar.sys" in nvme_w or "fence.sc.sys" in nvme_w
    assert "atom.global.or.b64" in nvme_w and "st.global.u64" in nvme_w
    assert "st.global.v2.b64" in nvme_w and "st.relaxed.sys" in nvme_w, "no NVMe step"
    assert nvme_w.count("atom.global.cas") == host_w.count("atom.global.cas"), "a lock?"
    print("NVME_WRITE_OK")
''')
READ_PTX = CompileScript(SCRIPT)


@started_early(READ_PTX)
def test_poll_load_stays_in_the_loop_and_read_compiles():
    pytest.importorskip("numba.cuda")
    proc = READ_PTX.result()
    assert "POLL_OK" in proc.stdout and "GATHER_OK" in proc.stdout, proc.stderr[-3000:]
    assert "PAGES_OK" in proc.stdout, proc.stderr[-3000:]
    assert "MASKS_OK" in proc.stdout, proc.stderr[-3000:]
    assert "NVME_OK" in proc.stdout, proc.stderr[-3000:]
    assert "NVME_WRITE_OK" in proc.stdout, proc.stderr[-3000:]
    assert "WRITE_OK" in proc.stdout, proc.stderr[-3000:]


# The bulk page copy (kernels/bulk.py): compiled in for compute capability 9.0 and up, and only
# there. The compute capability is the one numba-cuda compiles device functions for, the current
# device's; the script stands in for a device of the capability under test.
BULK_SCRIPT = textwrap.dedent('''
    import os, re, sys
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    CC = tuple(int(x) for x in sys.argv[1].split("."))

    class _Device:
        compute_capability = CC
    dispatcher.get_current_device = lambda: _Device()

    from tests.helpers import compile_ptx, fake_handle
    from gids.kernels_host import gather_kernel

    h = fake_handle(np.int64)
    ptx, _ = compile_ptx(gather_kernel.py_func,
                         (typeof(h), types.int64[::1], typeof(np.zeros(4, np.int64))), cc=CC)
    lines = [l.strip() for l in ptx.splitlines()]
    # A completion is one word, status and source with the sequence: the acquire that polls it
    # is its only load, with no second (status/source) load from host memory after it.
    assert any(l.startswith("ld.acquire.sys.b64") for l in lines), "completion poll"
    assert not any(l.startswith("ld.relaxed.sys.global.v2") for l in lines), "second load"
    if "cp.async.bulk" not in ptx:
        assert "mbarrier" not in ptx and "fence.proxy.async" not in ptx
        assert not [l for l in lines if ".shared" in l and l.endswith("];")], "shared memory"
        print("NO_BULK")
        raise SystemExit(0)

    labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\\$L__\\w+:$", l)}
    back = [(labels[m.group(1)], i) for i, l in enumerate(lines)
            for m in [re.search(r"bra(?:\\.uni)?\\s+(\\$L__\\w+);", l)]
            if m and m.group(1) in labels and labels[m.group(1)] <= i]
    at = lambda text: [i for i, l in enumerate(lines) if text in l]   # noqa: E731
    init, load, wait = at("mbarrier.init.shared"), at("cp.async.bulk.shared::cluster.global"), \\
        at("mbarrier.try_wait.parity")
    store, done = at("cp.async.bulk.global.shared::cta.bulk_group"), \\
        at("cp.async.bulk.wait_group 0;")
    fence = [i for i, l in enumerate(lines) if l == "fence.proxy.async;"]
    assert init and load and wait and store and done and fence, (init, load, wait, store, done)
    # The arrival of a chunk is awaited in a loop (the wait is re-read, not hoisted).
    assert any(a <= w < b for w in wait for a, b in back), "mbarrier wait not in a loop"
    # Generic -> async proxy fence after the mbarrier's init, before the first bulk load.
    assert any(min(init) < f < min(load) for f in fence), "no proxy fence before the bulk load"
    # Async -> generic proxy fence after the stores completed, before the lock is released (and
    # so before the loader's release of VALID, which follows in program order).
    release = at("st.release.gpu.b32")
    assert any(d < f < r for d in done for f in fence for r in release), \
        "no proxy fence after the stores"
    # Static shared memory: the one 4 KiB buffer and its mbarrier, one symbol for the kernel.
    shared = [l for l in lines if ".shared" in l and l.endswith("];")]
    assert shared == [".weak .shared .align 16 .b8 gids_bulk_buffer[4104];"], shared
    print("BULK")
''')
# At cc 9.0 and the default settings, in the process the other compile scripts use; another
# capability or setting, in a process of its own (device functions are typed for one).
BULK_PTX = {(cc, lanes): CompileScript(BULK_SCRIPT, cc,
                                       env={} if lanes is None else {"GIDS_BULK_COPY_LANES": lanes},
                                       shared=(cc == "9.0" and lanes is None))
            for cc, lanes in (("9.0", None), ("8.0", None), ("9.0", "0"))}


@pytest.mark.parametrize("cc, lanes, bulk", [
    pytest.param(cc, lanes, bulk, marks=started_early(BULK_PTX[cc, lanes]))
    for cc, lanes, bulk in (("9.0", None, True), ("8.0", None, False), ("9.0", "0", False))])
def test_bulk_page_copy_is_compiled_in_for_hopper_only(cc, lanes, bulk):
    """gids.read compiled for cc 9.0 copies a page for a warp of few lanes by bulk copy (TMA:
    a bulk load completing on an mbarrier waited for in a loop, a bulk store, the proxy fences,
    4 KiB + 8 bytes of static shared memory); for cc 8.0, or with GIDS_BULK_COPY_LANES=0,
    none of it is there."""
    pytest.importorskip("numba.cuda")
    proc = BULK_PTX[cc, lanes].result()
    assert ("BULK" if bulk else "NO_BULK") in proc.stdout.split(), proc.stderr[-3000:]


WINDOW_SCRIPT = textwrap.dedent('''
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, typeof, types

    class _Hopper:
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Hopper()

    from gids.kernels_host import hold_kernel, prefetch_kernel, release_kernel
    from tests.helpers import fake_handle
    h = typeof(fake_handle(np.int64))
    i64s = types.int64[::1]
    for kernel in (hold_kernel, release_kernel, prefetch_kernel):
        sig = (h, i64s, types.int64)
        cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    print("WINDOW_OK")
''')
WINDOW_PTX = CompileScript(WINDOW_SCRIPT)


@started_early(WINDOW_PTX)
def test_window_kernels_compile():
    """Runtime.hold / release / prefetch's kernels (their counters one reduction per warp)."""
    pytest.importorskip("numba.cuda")
    proc = WINDOW_PTX.result()
    assert "WINDOW_OK" in proc.stdout, proc.stderr[-3000:]
