"""Memory-ordering primitives for kernels that talk to the host or to other blocks.

Why not ``cuda.ldcv`` or a plain ``a[i]`` in a loop: those are emitted without side effects and
the compiler hoists them out of a spin loop (the kernel then hangs; see GPU_NOTES). Each function
here is inline PTX marked ``side_effect=True`` with a ``~{memory}`` clobber, so it is executed on
every iteration and orders the memory accesses around it.

Scopes: ``*_sys`` for words in mapped host memory that the CPU reads or writes (queue records);
``*_gpu`` for words in device memory shared between blocks (page states, queue entry turns).

The relaxed atomics (``atomic_add`` ...) are Numba's on the GPU; use these names rather than
``cuda.atomic`` so that the simulator gets its single-lock versions.

In the simulator loads and stores are plain Python reads and writes: it runs one Python thread
per CUDA thread over shared numpy arrays, where the GIL already orders accesses.
"""
import time

from kernels.platform import SIMULATOR

if SIMULATOR:
    import threading

    # The simulator gives each cuda.atomic operation its own lock, so an atomic OR and an
    # atomic ADD on the same word can interleave. Ours share one lock: all read-modify-writes
    # of a word are atomic with respect to each other, as on the GPU.
    _ATOMIC_LOCK = threading.Lock()

    def _wrap(arr, value):
        if arr.dtype.kind == "u":
            return value & ((1 << (8 * arr.dtype.itemsize)) - 1)
        return value

    def _rmw(arr, i, op):
        with _ATOMIC_LOCK:
            old = arr[i]
            new = _wrap(arr, op(int(old)))
            # A failed compare-and-swap (or any no-op) writes nothing, as on the GPU: writing
            # the old value back would undo a plain store made meanwhile (a try-lock's release
            # store was lost this way: kernels/nvme.py).
            if new != old:
                arr[i] = new
        return old

    def atomic_add(arr, i, value):
        return _rmw(arr, i, lambda old: old + int(value))

    def atomic_or(arr, i, value):
        return _rmw(arr, i, lambda old: old | int(value))

    def atomic_and(arr, i, value):
        return _rmw(arr, i, lambda old: old & int(value))

    def atomic_exch(arr, i, value):
        return _rmw(arr, i, lambda old: int(value))

    def atomic_cas(arr, i, expected, value):
        return _rmw(arr, i, lambda old: int(value) if old == int(expected) else old)

    atomic_add_relaxed_gpu = atomic_add
    red_add_release_gpu = atomic_add
    red_add = atomic_add

    def zero_of(arr):
        return arr.dtype.type(0)
    atomic_add_release_gpu = atomic_add

    def ld_acquire_sys(arr, i):
        return arr[i]

    ld_acquire_gpu = ld_acquire_sys

    def st_release_sys(arr, i, value):
        arr[i] = value

    st_release_gpu = st_release_sys
    st_relaxed_sys = st_release_sys
    st_relaxed_gpu = st_release_sys

    def st_pair(arr, i, a, b):
        arr[i] = a
        arr[i + 1] = b

    def fence_acq_rel_sys():
        pass

    def now_ns():
        return time.monotonic_ns()

    def ld_relaxed_gpu(arr, i):
        return arr[i]

    ld_relaxed_sys = ld_relaxed_gpu
    ld_weak_l2 = ld_relaxed_gpu

    def make_load(qualifiers):
        """In the simulator every load flavor is a plain read."""
        return ld_relaxed_gpu

    def ld_pair(arr, i):
        return arr[i], arr[i + 1]

    ld_pair_l2 = ld_pair

    atomic_cas_acquire_gpu = atomic_cas

    def fence_proxy_async():
        pass

else:
    from llvmlite import ir
    from numba import cuda, types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    # Relaxed, GPU-scope read-modify-writes on device memory: Numba's own, wrapped because its
    # stubs cannot be re-bound to other names.
    @cuda.jit(device=True, inline=True)
    def atomic_add(arr, i, value):
        return cuda.atomic.add(arr, i, value)

    @cuda.jit(device=True, inline=True)
    def atomic_or(arr, i, value):
        return cuda.atomic.or_(arr, i, value)

    @cuda.jit(device=True, inline=True)
    def atomic_and(arr, i, value):
        return cuda.atomic.and_(arr, i, value)

    @cuda.jit(device=True, inline=True)
    def atomic_exch(arr, i, value):
        return cuda.atomic.exch(arr, i, value)

    @cuda.jit(device=True, inline=True)
    def atomic_cas(arr, i, expected, value):
        return cuda.atomic.cas(arr, i, expected, value)

    def _element_pointer(context, builder, aryty, ary_value, idx):
        ary = context.make_array(aryty)(context, builder, ary_value)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)

    def _check_word(arr):
        if not isinstance(arr, types.Array) or arr.dtype.bitwidth not in (32, 64):
            raise TypeError("sync primitives take arrays of 32- or 64-bit integers")
        return arr.dtype.bitwidth

    def _make_load(sem, scope):
        """``ld.{sem}.{scope}`` of any 1-, 2-, 4- or 8-byte element, as side-effecting asm."""
        @intrinsic
        def load(typingctx, arr, idx):
            if not isinstance(arr, types.Array) or arr.dtype.bitwidth not in (8, 16, 32, 64):
                raise TypeError("loads take arrays of 1-, 2-, 4- or 8-byte elements")
            sig = arr.dtype(arr, types.intp)

            def codegen(context, builder, sig, args):
                dtype = sig.args[0].dtype
                bits = dtype.bitwidth
                ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
                # PTX registers are at least 16 bits; a byte is loaded into a 32-bit one.
                reg_bits, reg = {8: (32, "r"), 16: (16, "h"), 32: (32, "r"), 64: (64, "l")}[bits]
                kind = "u8" if bits == 8 else f"b{bits}"
                fnty = ir.FunctionType(ir.IntType(reg_bits), [ptr.type])
                asm = ir.InlineAsm(fnty, f"ld.{sem}.{scope}.{kind} $0, [$1];",
                                   f"={reg},l,~{{memory}}", side_effect=True)
                raw = builder.call(asm, [ptr])
                if reg_bits != bits:
                    raw = builder.trunc(raw, ir.IntType(bits))
                return builder.bitcast(raw, context.get_value_type(dtype))
            return sig, codegen
        return load

    def _make_word_op(asm_fmt, returns):
        """One PTX instruction on a 32- or 64-bit word ``arr[idx]`` with operand ``value``, as
        side-effecting asm with a memory clobber. ``asm_fmt`` names the width as ``{bits}``;
        with ``returns`` its first operand is the old value (an ``atom``), else it has only the
        address and the value (a store or a ``red``) and returns nothing."""
        @intrinsic
        def word_op(typingctx, arr, idx, value):
            bits = _check_word(arr)
            sig = (arr.dtype if returns else types.void)(arr, types.intp, arr.dtype)

            def codegen(context, builder, sig, args):
                ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
                val = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
                reg = "l" if bits == 64 else "r"
                text = asm_fmt.format(bits=bits)
                if returns:
                    fnty = ir.FunctionType(ir.IntType(bits), [ptr.type, ir.IntType(bits)])
                    asm = ir.InlineAsm(fnty, text, f"={reg},l,{reg},~{{memory}}", side_effect=True)
                    return builder.call(asm, [ptr, val])
                fnty = ir.FunctionType(ir.VoidType(), [ptr.type, ir.IntType(bits)])
                asm = ir.InlineAsm(fnty, text, f"l,{reg},~{{memory}}", side_effect=True)
                builder.call(asm, [ptr, val])
                return context.get_dummy_value()
            return sig, codegen
        return word_op

    def _make_store(sem, scope):
        """``st.{sem}.{scope}`` of a 4- or 8-byte element, as side-effecting asm."""
        return _make_word_op(f"st.{sem}.{scope}.b{{bits}} [$0], $1;", False)

    def _make_atomic_add(sem):
        """``atom.{sem}.gpu.global.add`` (device memory only). ``.global``: on a generic
        address the compiler adds a test for shared memory and a CAS loop for that case to
        every atomic (SASS, sm_90)."""
        return _make_word_op(f"atom.{sem}.gpu.global.add.u{{bits}} $0, [$1], $2;", True)

    def _make_red_add(sem):
        """``red{sem}.gpu.global.add``: an atomic add whose old value nobody waits for.

        The same read-modify-write as an ``atom`` (no update is lost), but fire-and-forget: the
        thread goes on at once. For a reference drop or a statistics counter, whose old value is
        never used.
        """
        return _make_word_op(f"red{sem}.gpu.global.add.u{{bits}} [$0], $1;", False)

    #: Drop a page reference (release, as :func:`atomic_add_release_gpu`) without waiting for
    #: the old value: the unpin after a hit.
    red_add_release_gpu = _make_red_add(".release")
    #: A relaxed GPU-scope add whose old value is not returned (statistics counters).
    red_add = _make_red_add("")

    @intrinsic
    def zero_of(typingctx, arr):
        """0 of ``arr``'s dtype, a constant (a read of ``h.zero[0]`` costs a global load)."""
        if not isinstance(arr, types.Array):
            raise TypeError("zero_of takes an array")
        sig = arr.dtype(arr)

        def codegen(context, builder, sig, args):
            return context.get_constant(sig.return_type, 0)
        return sig, codegen

    #: ``ld.acquire.sys``: poll a word the host writes (completion sequence numbers).
    ld_acquire_sys = _make_load("acquire", "sys")
    #: ``ld.acquire.gpu``: poll a word other blocks write (page states, entry turns).
    ld_acquire_gpu = _make_load("acquire", "gpu")
    #: ``st.release.sys``: publish a record to the host after writing its body.
    st_release_sys = _make_store("release", "sys")
    #: ``st.release.gpu``: hand a queue entry on to the next ticket holder.
    st_release_gpu = _make_store("release", "gpu")
    #: ``st.relaxed.sys``: a strong store the host sees, with no fence of its own. A doorbell
    #: after an explicit ``fence.sc.sys`` (the fence and the store form a release pattern,
    #: with other work between them), or after acquire loads whose values decided it.
    st_relaxed_sys = _make_store("relaxed", "sys")
    #: ``st.relaxed.gpu``: a strong store other blocks' acquires see, with no fence of its own:
    #: for a store that an earlier fence of this thread already orders (a release pattern).
    st_relaxed_gpu = _make_store("relaxed", "gpu")
    #: Drop a page reference; earlier reads of the slot cannot move after it.
    atomic_add_release_gpu = _make_atomic_add("release")
    #: Take a page reference on the hit path (``kernels.cache.take_reference``): no acquire,
    #: hence no invalidation of the SM's L1 after it. As asm with a memory clobber, unlike
    #: Numba's ``atomic_add``, so that the compiler keeps the slot's reads after it.
    atomic_add_relaxed_gpu = _make_atomic_add("relaxed")

    #: ``ld.relaxed.gpu``: a read of device memory that other SMs write (a slot's bytes, the
    #: page table). Not served from the SM's own L1, which is not coherent, and, being a
    #: side-effecting asm, never moved by the compiler before the acquire that guards it
    #: (``cuda.ldcg`` is neither: its asm is pure and may be hoisted).
    ld_relaxed_gpu = _make_load("relaxed", "gpu")
    #: ``ld.relaxed.sys``: the same for mapped host memory the CPU writes (staging pages, a
    #: completion's status and source).
    ld_relaxed_sys = _make_load("relaxed", "sys")

    def make_load(qualifiers):
        """``ld.{qualifiers}`` (``"global.cg"``, ``"relaxed.gpu"``, ``"global.L1::no_allocate"``
        ...) of any 1-, 2-, 4- or 8-byte element, as side-effecting asm: for comparing load
        flavors (``python -m workloads.microbench loads``)."""
        sem, scope = qualifiers.split(".", 1)
        return _make_load(sem, scope)

    #: ``ld.global.cg``: a load served by L2, never by this SM's L1: the read of a cache
    #: slot's bytes after the pin (``gids.pinned``, the hit path). Its address depends on the
    #: slot, known only once the pin saw VALID (``kernels.cache.take_reference``), and ``.cg``
    #: keeps stale L1 lines of the slot's previous page out. The asm is side-effecting with a
    #: memory clobber, so the compiler keeps it between the pin and the unpin; the hardware
    #: still overlaps the loads themselves. Not weak, whatever PTX calls it: on sm_90 ptxas
    #: compiles ``ld.global.cg`` to ``LDG.E.64.STRONG.GPU``, the same instruction as
    #: ``ld.relaxed.gpu``, where a plain load is ``LDG.E.64`` (ptxas + nvdisasm). Strong or weak
    #: made no difference that counts: every flavor within ~10 % of plain loads for 4 KiB pages
    #: (``python -m workloads.microbench loads``).
    ld_weak_l2 = _make_load("global", "cg")

    def _make_pair_load(op):
        """``{op}.v2.b64`` of words ``i`` and ``i + 1`` (16-byte aligned) of a 64-bit array.

        Unlike the loads above, this asm has no side effect and no memory clobber, so the
        compiler may issue many of them before their results are used (one lane then has many
        PCIe reads in flight). Ordering comes from the caller: a page copy runs only after an
        acquire of the completion, on which it is control-dependent.
        """
        @intrinsic
        def load_pair(typingctx, arr, idx):
            if not isinstance(arr, types.Array) or arr.dtype.bitwidth != 64:
                raise TypeError("pair loads take arrays of 8-byte elements")
            sig = types.UniTuple(arr.dtype, 2)(arr, types.intp)

            def codegen(context, builder, sig, args):
                dtype = sig.args[0].dtype
                ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
                i64 = ir.IntType(64)
                fnty = ir.FunctionType(ir.LiteralStructType([i64, i64]), [ptr.type])
                asm = ir.InlineAsm(fnty, f"{op}.v2.b64 {{$0, $1}}, [$2];", "=l,=l,l")
                pair = builder.call(asm, [ptr])
                ty = context.get_value_type(dtype)
                words = [builder.bitcast(builder.extract_value(pair, k), ty) for k in range(2)]
                return context.make_tuple(builder, sig.return_type, words)
            return sig, codegen
        return load_pair

    #: ``ld.global.v2.b64``, a weak 16-byte load: the bulk load of page copies from mapped host
    #: memory. Weak, not ``ld.relaxed.sys``: strong system-scope loads of one thread were served
    #: one after another (a lone thread took 200 us per 4 KiB page on the H200, 67 us with weak
    #: loads). A weak load is enough after the acquire that saw the completion: the
    #: host's writes happen before it, and for the warp's other lanes the ``syncwarp`` after
    #: the acquire carries that order on (causality order is transitive in the PTX model).
    ld_pair = _make_pair_load("ld.global")

    #: ``ld.global.cg.v2.b64``: a 16-byte load served by L2, not by this SM's L1 (which may
    #: hold lines of a cache slot's previous page): the row gather's copy out of a pinned page.
    ld_pair_l2 = _make_pair_load("ld.global.cg")

    @intrinsic
    def atomic_cas_acquire_gpu(typingctx, arr, idx, expected, value):
        """``atom.acquire.gpu.global.cas`` on a 32- or 64-bit word: returns the old value; the
        caller's later accesses cannot move before it (a try-lock's acquire)."""
        bits = _check_word(arr)
        sig = arr.dtype(arr, types.intp, arr.dtype, arr.dtype)

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
            dtype = sig.args[0].dtype
            old = context.cast(builder, args[2], sig.args[2], dtype)
            new = context.cast(builder, args[3], sig.args[3], dtype)
            reg = "l" if bits == 64 else "r"
            fnty = ir.FunctionType(ir.IntType(bits), [ptr.type, ir.IntType(bits), ir.IntType(bits)])
            asm = ir.InlineAsm(fnty, f"atom.acquire.gpu.global.cas.b{bits} $0, [$1], $2, $3;",
                               f"={reg},l,{reg},{reg},~{{memory}}", side_effect=True)
            return builder.call(asm, [ptr, old, new])
        return sig, codegen

    def _make_fence(text, doc):
        """A no-argument fence instruction ``text`` as side-effecting asm with a memory clobber."""
        @intrinsic
        def fence(typingctx):
            sig = types.void()

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.VoidType(), [])
                builder.call(ir.InlineAsm(fnty, text, "~{memory}", side_effect=True), [])
                return context.get_dummy_value()
            return sig, codegen
        fence.__doc__ = doc
        return fence

    fence_proxy_async = _make_fence("fence.proxy.async;", """\
        ``fence.proxy.async``: a bidirectional fence between the generic proxy (ordinary
        loads and stores) and the async proxy (``cp.async.bulk``, TMA) for this thread, over
        every state space. The PTX memory model orders accesses to one location through two
        proxies only across such a fence ("Proxies" in the PTX ISA's memory consistency model;
        ``fence.proxy.async`` in "Parallel synchronization: membar/fence"): see
        :mod:`kernels.bulk` for where a bulk page copy needs it.""")

    @intrinsic
    def st_pair(typingctx, arr, idx, a, b):
        """``st.global.v2.b64`` of words ``i`` and ``i + 1`` (16-byte aligned) of a 64-bit array:
        a weak 16-byte store. SQEs go to mapped host memory this way, a warp's lanes writing
        one contiguous run (whole lines across PCIe); a fence orders them before the doorbell.
        Side-effecting, with a memory clobber, so it stays on its side of that fence."""
        if not isinstance(arr, types.Array) or arr.dtype.bitwidth != 64:
            raise TypeError("pair stores take arrays of 8-byte elements")
        sig = types.void(arr, types.intp, arr.dtype, arr.dtype)

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
            i64 = ir.IntType(64)
            lo = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
            hi = context.cast(builder, args[3], sig.args[3], sig.args[0].dtype)
            fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i64, i64])
            asm = ir.InlineAsm(fnty, "st.global.v2.b64 [$0], {$1, $2};", "l,l,l,~{memory}",
                               side_effect=True)
            builder.call(asm, [ptr, builder.bitcast(lo, i64), builder.bitcast(hi, i64)])
            return context.get_dummy_value()
        return sig, codegen

    fence_acq_rel_sys = _make_fence("fence.acq_rel.sys;", """\
        ``fence.acq_rel.sys``: with a later strong store, a release pattern at system scope
        (enough to publish to the host; lighter than ``fence.sc.sys``, which
        ``cuda.threadfence_system`` emits). Cumulative: it also orders the writes of other
        lanes that a ``syncwarp`` ordered before it.""")

    @intrinsic
    def now_ns(typingctx):
        """The GPU's global nanosecond timer (``%globaltimer``), for bounding spins in time."""
        sig = types.int64()  # int64, not uint64: mixed comparisons with int64 would go to float

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            asm = ir.InlineAsm(fnty, "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])
        return sig, codegen
