"""The bulk page copy: a page that arrived in host memory, copied into its cache slot by one lane
with the Tensor Memory Accelerator (``cp.async.bulk``, compute capability 9.0 and up).

Why: a lane copying a page with its own loads keeps eight 16-byte loads in flight, so a lone
lane needs 32 PCIe round trips for a 4 KiB page (44 us on the H200, two thirds of one miss at a
time). One bulk copy of the page from host memory into shared memory and from there into the
slot takes 2.05 us (docs/design-notes.md, "Copying a page in"). A full warp already moves a page in one
round of loads, so only warps of few lanes (:data:`~kernels.platform.BULK_COPY_LANES`) take
this path, each such lane copying its own page (``_fetch`` in :mod:`kernels.access`, through
:func:`kernels.cache.copy_in_bulk`).

**The buffer.** There is no global-to-global bulk copy, so the page passes through shared
memory: one static buffer of :data:`BUFFER_BYTES` per block (pages larger than that go in
chunks) and one mbarrier word: 4 KiB + 8 bytes of static shared memory in every kernel that
calls ``gids.read`` (compiled for cc >= 9.0), one symbol per kernel whatever arrays it reads
(:func:`block_buffer`).

**Who may use it.** Any warp of the block may want the buffer at any time. A lock word in
shared memory cannot work: shared memory is garbage at kernel start, and ``gids.read`` is a
device function inlined into user kernels, where there is no ``syncthreads`` before the first
read to initialise it. So the locks are words in global memory (``h.copy_locks``, one array per
CUDA context, shared by every Runtime of the process, since a kernel reading arrays of two
Runtimes still has one buffer per block), lock ``block % N_LOCKS`` for a block. Two blocks
that map to one lock (or blocks of two kernels running at once) only take turns; they never
share a buffer. The lock is a try-lock with a short, bounded wait: a lane that does not get it
within what copying the page with its warp's own loads would take (:data:`LANE_COPY_NS` /
lanes) gives up and its warp copies the page the old way. No lane ever waits on a lock holder
for long, and a holder waits only for its own copies (hardware; bounded all the same, by the
Runtime's timeout but at least :data:`MIN_COPY_WAIT_NS`), so nothing can hang on the buffer.
A holder that gives up on a load that never came keeps the lock for good (the load could
still land in the buffer): its block's later copies take the warp path. (That load would also
be in flight when the block exits; it has never been seen: a load from host memory ends in
microseconds or faults the kernel.)

**The mbarrier.** It is initialised by each holder (garbage at kernel start; an ``mbarrier``
may not be initialised twice without ``mbarrier.inval``) and invalidated before the lock is
released; chunk *k* is phase *k* (parity ``k & 1``).

**Memory order.** The bulk copies run in the async proxy; everything else here is the generic
proxy, and the PTX memory model orders accesses of one location through two proxies only
across a proxy fence (PTX ISA, memory consistency model, "Proxies"; ``fence.proxy.async`` in
"membar/fence"). So, in the copying lane:

1. after the acquire that saw the completion (the host's writes of the page happen before it)
   and the ``mbarrier.init`` (a generic write of shared memory that the bulk load's
   ``complete_tx`` updates), ``fence.proxy.async`` before the first bulk load;
2. after the mbarrier wait saw a chunk arrive (a generic-proxy observation) and before the
   bulk store reads it out, ``fence.proxy.async.shared::cta`` (cheap insurance: the model may
   already order an async copy's completion before later async reads);
3. after the bulk stores completed (``cp.async.bulk.wait_group 0``), ``fence.proxy.async``, so
   that the lock's release (``st.release.gpu``: a ``fence.acq_rel.gpu`` and the store), in
   the generic proxy, orders the slot's new bytes before the loader's publish of VALID, a
   relaxed reduction after it (:func:`kernels.cache.publish`), and so before any reader's
   sight of VALID. (The copying lane is the loader itself; its warp does not fence again
   when every page of the round went in bulk: ``_fetch`` in :mod:`kernels.access`.)

Between one holder and the next, the lock's release (``st.release.gpu``) and acquire
(``atom.acquire.gpu.cas``) order the first holder's finished copies and proxy fence before the
next holder's ``mbarrier.init`` and bulk load.

**The early copy** (:func:`early_copy_start` / :func:`early_copy_end`, called by
:func:`kernels.cache.start_early_copy`): the same steps split in two around the I/O's wait,
for one chunk (a page of at most :data:`BUFFER_BYTES`). Its bulk load is issued before the
lane acquires the completion, so step 1's "the host's writes happen before it" rests on
something else: the Runtime allows it only for a read-only array of a zero-copy store, whose
bytes the host wrote into the mapped buffer before the kernel was launched (a launch orders
the host's earlier writes before the kernel's reads) and which nothing writes while kernels
run. The completion then only confirms the page (status OK, the same words named); the store
into the slot, the fences and the release are step 2 and 3 as above, after it.

**Where it is compiled in.** Only where Numba compiles for compute capability 9.0 or above
(:func:`bulk_copy_available`, at typing), and never in the simulator: other GPUs and the
simulator keep the warp copy, instruction for instruction.
"""
import numpy as np
from numba import cuda

from kernels.platform import BULK_COPY_LANES, SIMULATOR

#: Bytes of the block's shared-memory buffer: one bulk copy moves at most this much.
BUFFER_BYTES = 4096
#: The shared-memory symbol holding the buffer, then the mbarrier (8 bytes).
BUFFER_SYMBOL = "gids_bulk_buffer"
#: Lock words (``h.copy_locks``); block ``b`` takes lock ``b % N_LOCKS``. A power of two above
#: the blocks an H200 holds at once (132 SMs x 32 blocks), so that blocks running together
#: rarely share one.
N_LOCKS = 8192
#: About what one lane's own copy of a 4 KiB page from host memory takes (44 us on the H200):
#: a lane waits for the buffer at most ``LANE_COPY_NS / lanes`` per 4 KiB (the warp copy's
#: time), then its warp copies the page itself.
LANE_COPY_NS = 32768
#: Nap between looks at a busy lock.
LOCK_POLL_NS = 256
#: The least time a lane waits for a bulk load to arrive before it gives up on the copy (and
#: leaves the lock taken): a load from host memory takes microseconds, and giving up early only
#: loses the block its buffer (with the Runtime's timeout below this, it would lose it often).
MIN_COPY_WAIT_NS = 1_000_000


def bulk_copy_available():
    """True if the function Numba is compiling now targets compute capability 9.0 or above and
    :data:`~kernels.platform.BULK_COPY_LANES` is not 0 (never in the simulator).

    Called while a device function is typed (:func:`kernels.cache.copy_in_bulk`'s overload):
    the compute capability is the compile flags' (numba-cuda compiles device functions for the
    current device; ``tests/test_ptx.py`` sets it by standing in for the device).
    """
    if SIMULATOR or BULK_COPY_LANES <= 0:
        return False
    from numba.core.targetconfig import ConfigStack
    flags = ConfigStack.top_or_none()
    cc = getattr(flags, "compute_capability", None)
    return cc is not None and tuple(cc) >= (9, 0)


if SIMULATOR:
    def bulk_copy_page(h, lanes, src, src_word, dst, dst_word, n_words):
        raise NotImplementedError("the bulk copy is compiled only for compute capability >= 9.0")

    early_copy_start = early_copy_end = bulk_copy_page

else:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    from kernels.sync import (
        atomic_cas_acquire_gpu,
        fence_proxy_async,
        ld_relaxed_gpu,
        now_ns,
        st_release_gpu,
    )
    from kernels.warp import nanosleep

    @intrinsic
    def address_of(typingctx, arr, idx):
        """The generic address of ``arr[idx]`` as an int64."""
        sig = types.int64(arr, types.intp)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]],
                                           wraparound=False)
            return builder.ptrtoint(ptr, ir.IntType(64))
        return sig, codegen

    @intrinsic
    def block_buffer(typingctx):
        """The generic address of this block's bulk-copy buffer (:data:`BUFFER_BYTES`, 16-byte
        aligned), followed by its mbarrier word.

        One static shared variable, declared here rather than with ``cuda.shared.array``, which
        aligns a buffer only to its element's size (NVVM emitted ``.align 8`` even for 16-byte
        elements) and makes one array per compiled function. Its linkage is ``linkonce_odr``
        (PTX ``.weak .shared``), so every function compiled with it shares one symbol in a
        kernel: 4 KiB + 8 bytes of a block's shared memory, however many read paths use it.
        """
        sig = types.int64()

        def codegen(context, builder, sig, args):
            module = builder.module
            var = module.globals.get(BUFFER_SYMBOL)
            if var is None:
                lltype = ir.ArrayType(ir.IntType(8), BUFFER_BYTES + 8)
                var = cgutils.add_global_variable(module, lltype, BUFFER_SYMBOL, 3)  # shared
                var.align = 16
                var.linkage = "linkonce_odr"
                var.initializer = ir.Constant(lltype, ir.Undefined)
            generic = builder.addrspacecast(var, ir.PointerType(ir.IntType(8)), "generic")
            return builder.ptrtoint(generic, ir.IntType(64))
        return sig, codegen

    def _asm_op(text, n_addresses, n_words=0, returns=False):
        """An intrinsic running PTX ``text`` (side-effecting, memory clobber) on
        ``n_addresses`` generic addresses (int64, operands ``$0..``) then ``n_words`` 32-bit
        values; with ``returns``, ``$0`` is a 32-bit result and the operands follow it. The
        text converts the addresses it needs (``cvta.to.shared`` / ``cvta.to.global``)."""
        n_args = n_addresses + n_words
        arg_types = [types.int64] * n_addresses + [types.uint32] * n_words

        def typer(args):
            if len(args) != n_args:
                raise TypeError(f"expected {n_args} arguments")
            return (types.uint32 if returns else types.void)(*arg_types)

        def codegen(context, builder, sig, args):
            ops = list(args)   # Numba has cast the arguments to the signature's types
            lltypes = [ir.IntType(64)] * n_addresses + [ir.IntType(32)] * n_words
            constraint = ",".join(["l"] * n_addresses + ["r"] * n_words)
            if returns:
                fnty = ir.FunctionType(ir.IntType(32), lltypes)
                asm = ir.InlineAsm(fnty, text, "=r," + constraint + ",~{memory}",
                                   side_effect=True)
                return builder.call(asm, ops)
            fnty = ir.FunctionType(ir.VoidType(), lltypes)
            asm = ir.InlineAsm(fnty, text, (constraint + "," if constraint else "") + "~{memory}",
                               side_effect=True)
            builder.call(asm, ops)
            return context.get_dummy_value()

        # Intrinsics are typed by their Python signature: one per arity used here.
        if n_args == 0:
            @intrinsic
            def op(typingctx):
                return typer(()), codegen
        elif n_args == 1:
            @intrinsic
            def op(typingctx, a):
                return typer((a,)), codegen
        elif n_args == 2:
            @intrinsic
            def op(typingctx, a, b):
                return typer((a, b)), codegen
        elif n_args == 3:
            @intrinsic
            def op(typingctx, a, b, c):
                return typer((a, b, c)), codegen
        elif n_args == 4:
            @intrinsic
            def op(typingctx, a, b, c, d):
                return typer((a, b, c, d)), codegen
        else:
            raise ValueError(n_args)
        return op

    #: ``mbarrier.init`` with an expected arrival count of 1 (the copying lane's arrive).
    mbar_init = _asm_op("{ .reg .u64 m; cvta.to.shared.u64 m, $0; "
                        "mbarrier.init.shared::cta.b64 [m], 1; }", 1)
    #: ``mbarrier.inval``: the word is no mbarrier any more (the next holder initialises it).
    mbar_inval = _asm_op("{ .reg .u64 m; cvta.to.shared.u64 m, $0; "
                         "mbarrier.inval.shared::cta.b64 [m]; }", 1)
    #: ``bulk_load(dst_shared, src_global, mbarrier, nbytes)``: arrive on the mbarrier expecting
    #: ``nbytes``, then the bulk copy global -> shared that completes them on it.
    bulk_load = _asm_op("{ .reg .u64 d, s, m; .reg .b64 t; cvta.to.shared.u64 d, $0; "
                        "cvta.to.global.u64 s, $1; cvta.to.shared.u64 m, $2; "
                        "mbarrier.arrive.expect_tx.shared::cta.b64 t, [m], $3; "
                        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                        "[d], [s], $3, [m]; }", 3, 1)
    #: ``mbar_try_wait(mbarrier, parity)``: 1 once the phase of that parity has completed
    #: (``try_wait`` may suspend the thread for a while in hardware before it answers 0).
    mbar_try_wait = _asm_op("{ .reg .u64 m; .reg .pred p; cvta.to.shared.u64 m, $1; "
                            "mbarrier.try_wait.parity.shared::cta.b64 p, [m], $2; "
                            "selp.u32 $0, 1, 0, p; }", 1, 1, returns=True)
    #: ``fence.proxy.async.shared::cta``: the generic -> async proxy fence for shared memory.
    fence_proxy_async_shared = _asm_op("fence.proxy.async.shared::cta;", 0)
    #: ``bulk_store(dst_global, src_shared, nbytes)``: the bulk copy shared -> global, committed
    #: as a bulk async-group of its own.
    bulk_store = _asm_op("{ .reg .u64 d, s; cvta.to.global.u64 d, $0; cvta.to.shared.u64 s, $1; "
                         "cp.async.bulk.global.shared::cta.bulk_group [d], [s], $2; "
                         "cp.async.bulk.commit_group; }", 2, 1)
    #: Wait until every committed bulk store has read its source (the buffer may be reused).
    bulk_wait_read = _asm_op("cp.async.bulk.wait_group.read 0;", 0)
    #: Wait until every committed bulk store is complete (its writes done).
    bulk_wait = _asm_op("cp.async.bulk.wait_group 0;", 0)

    @cuda.jit(device=True)
    def _take_lock(locks, i, give_up_at):
        """Try to take lock ``i`` (acquire) until ``give_up_at`` (ns). True if taken."""
        while True:
            if atomic_cas_acquire_gpu(locks, i, np.uint32(0), np.uint32(1)) == 0:
                return True
            if now_ns() > give_up_at:
                return False
            nanosleep(LOCK_POLL_NS)
            while ld_relaxed_gpu(locks, i) != 0:   # look before the next atomic
                if now_ns() > give_up_at:
                    return False
                nanosleep(LOCK_POLL_NS)

    @cuda.jit(device=True)
    def _block_lock():
        """The lock word of this block's buffer (``h.copy_locks``)."""
        block = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y
                                                    + cuda.gridDim.y * cuda.blockIdx.z)
        return block & (N_LOCKS - 1)

    @cuda.jit(device=True)
    def _load(src, n):
        """Start the bulk load of ``n`` bytes (at most :data:`BUFFER_BYTES`) from ``src`` into
        the block's buffer, completing on its mbarrier."""
        buf_at = block_buffer()
        bulk_load(buf_at, src, buf_at + BUFFER_BYTES, n)

    @cuda.jit(device=True)
    def _start(src, n, locks, lock, give_up_at):
        """Take the block's buffer (by ``give_up_at``), set up its mbarrier and start the bulk
        load of the first ``n`` bytes (at most :data:`BUFFER_BYTES`) from ``src``, phase 0.
        False if the buffer stayed busy (nothing started)."""
        if not _take_lock(locks, lock, give_up_at):
            return False
        mbar_init(block_buffer() + BUFFER_BYTES)
        # Generic -> async proxy: the mbarrier's initialisation, and the page's bytes that the
        # host wrote before this lane's acquire of them, are seen by the bulk load.
        fence_proxy_async()
        _load(src, n)
        return True

    @cuda.jit(device=True)
    def _landed(phase, deadline):
        """Wait for the bulk load of ``phase`` to fill the buffer. False if it had not by
        ``deadline`` (ns): the earlier stores are waited for, the lock stays taken."""
        bar_at = block_buffer() + BUFFER_BYTES
        while mbar_try_wait(bar_at, phase & 1) == 0:
            if now_ns() > deadline:
                # The load may still land in the buffer: keep the lock (and the mbarrier).
                # Earlier chunks' stores are waited for, so the warp's own copy of the page
                # cannot be overwritten by them.
                bulk_wait()
                fence_proxy_async()
                return False
        return True

    @cuda.jit(device=True)
    def _store_out(dst, n):
        """Bulk-store the buffer's first ``n`` bytes (a chunk that landed) to ``dst`` and wait
        until the buffer has been read out."""
        fence_proxy_async_shared()
        bulk_store(dst, block_buffer(), n)
        bulk_wait_read()    # the buffer has been read out: the next chunk may come in

    @cuda.jit(device=True)
    def _finish(locks, lock):
        """Wait for the bulk stores, then give the buffer back (the lock's release orders
        everything copied before it)."""
        bulk_wait()
        # Async -> generic proxy: the slot's new bytes are ordered before the lock's release
        # below, whose fence orders them before the loader's publish of VALID (no other fence
        # follows where the warp copied nothing itself: kernels/access.py, _fetch).
        fence_proxy_async()
        mbar_inval(block_buffer() + BUFFER_BYTES)
        st_release_gpu(locks, lock, np.uint32(0))

    @cuda.jit(device=True)
    def _bulk_copy(src, dst, nbytes, locks, timeout_ns, lanes):
        """Copy ``nbytes`` from generic address ``src`` (global; 16-byte aligned) to ``dst``
        through the block's buffer. Returns 1 if done, 0 if not started (the buffer stayed
        busy, or an address is misaligned) or given up after the timeout (then nothing of it
        is still being written to ``dst``, but the lock stays taken: a bulk load may still be
        on its way into the buffer, so this block's later copies take the warp path)."""
        if ((src | dst) & 15) != 0:
            return 0
        lock = _block_lock()
        chunks = (nbytes + BUFFER_BYTES - 1) // BUFFER_BYTES
        if not _start(src, min(BUFFER_BYTES, nbytes), locks, lock,
                      now_ns() + chunks * (LANE_COPY_NS // lanes)):
            return 0
        deadline = now_ns() + max(timeout_ns, MIN_COPY_WAIT_NS)
        done = 0
        phase = 0
        while True:
            n = min(BUFFER_BYTES, nbytes - done)
            if not _landed(phase, deadline):
                return 0
            _store_out(dst + done, n)
            done += n
            phase += 1
            if done >= nbytes:
                break
            _load(src + done, min(BUFFER_BYTES, nbytes - done))
        _finish(locks, lock)
        return 1

    @cuda.jit(device=True)
    def early_copy_start(h, lanes, src_word, n_words):
        """Start the bulk load of ``n_words`` words (at most :data:`BUFFER_BYTES`) at
        ``h.zero_copy[src_word:]`` into the block's buffer, before the page's completion has
        come (:func:`kernels.cache.start_early_copy`). True if started: the lane then holds
        the buffer until :func:`early_copy_end`. One try at the buffer, no wait: a lane
        that holds it keeps it for a round trip, and another loader of the block then copies
        after its completion as before."""
        src = address_of(h.zero_copy, src_word)
        if (src & 15) != 0 or n_words * 8 > BUFFER_BYTES:
            return False
        return _start(src, n_words * 8, h.copy_locks, _block_lock(), np.int64(0))

    @cuda.jit(device=True)
    def early_copy_end(h, dst_word, n_words, use):
        """End what :func:`early_copy_start` started: with ``use``, store the page into
        ``h.cache_words[dst_word:]`` and return 1; without (the completion did not confirm
        the page), wait for the load and drop it. Gives the buffer back either way, unless
        the load never landed (0: see :func:`_bulk_copy`)."""
        deadline = now_ns() + max(h.timeout_ns, MIN_COPY_WAIT_NS)
        if not _landed(0, deadline):
            return 0
        if use:
            _store_out(address_of(h.cache_words, dst_word), n_words * 8)
        _finish(h.copy_locks, _block_lock())
        return 1 if use else 0

    @cuda.jit(device=True)
    def bulk_copy_page(h, lanes, src, src_word, dst, dst_word, n_words):
        """Copy ``n_words`` 8-byte words from ``src[src_word:]`` (mapped host memory whose
        completion this lane acquired) to ``dst[dst_word:]`` (a cache slot) by bulk copy,
        ``lanes`` being the calling warp's active lanes. Returns 1 if copied, 0 if the caller
        must copy it another way. Compute capability 9.0 and up only."""
        return _bulk_copy(address_of(src, src_word), address_of(dst, dst_word), n_words * 8,
                          h.copy_locks, h.timeout_ns, lanes)
