"""Which world the device code is compiled for: a real GPU, or Numba's CUDA simulator."""
from numba import config

from kernels import settings

#: True when ``NUMBA_ENABLE_CUDASIM=1``: kernels run as Python threads, one per CUDA thread.
SIMULATOR = bool(config.ENABLE_CUDASIM)

#: Threads that act together as one warp. The simulator has no warp intrinsics, so by default
#: each thread there is a warp of one (its own bit is the mask, a shuffle returns its own value).
#: ``GIDS_SIM_WARP_SIZE=32`` makes the simulator emulate 32-lane warps instead (slow, and every
#: thread of a warp must call ``gids.read`` together), so that tests reach the multi-lane paths:
#: coalescing, per-warp tickets, the cooperative copy. See :mod:`kernels.warp`.
WARP_SIZE = settings.get("sim_warp_size") if SIMULATOR else 32

#: Register cap for kernels that call ``gids.read``. Its miss path took a kernel to 137
#: registers, one 256-thread block per SM; at 128 two fit and hits run faster. The miss path is a
#: call (:func:`out_of_line`), so a lower cap spills in its frame only (docs/design-notes.md,
#: "Register caps and the out-of-line miss path").
#: 256-thread blocks per SM (65536 registers) by cap: 128 -> 2, 80 -> 3, 64 -> 4 (96 is still
#: 2). ``GIDS_MAX_REGISTERS=N`` in the environment, read once at import, sets another default
#: (0: no cap), for measuring; ``gids.jit(max_registers=N)`` sets it for one kernel, and
#: ``python -m workloads.microbench hits --caps 128,80,64`` compares caps in one run.
MAX_REGISTERS = settings.get("max_registers")


#: A warp whose active lanes number at most this copies each page that arrived from host memory
#: with the Hopper bulk copy (TMA) through its block's shared-memory buffer
#: (:mod:`kernels.bulk`; compute capability 9.0 and up, never in the simulator); fuller warps
#: copy with their own loads. 0 turns the bulk copy off. ``GIDS_BULK_COPY_LANES=N`` sets it,
#: read at import. Why 8: a page takes ~44 us / lanes by the lanes' own loads and ~2 us by one bulk
#: copy, but a block has one buffer, so its warps take turns; at 16 lanes the gain is under a
#: microsecond (docs/design-notes.md, "Copying a page in").
BULK_COPY_LANES = settings.get("bulk_copy_lanes")

#: Whether a miss on a read-only zero-copy array starts its page's bulk copy while its request
#: is out (:func:`kernels.cache.start_early_copy`; the Runtime sets each handle's
#: ``early_base``). ``GIDS_EARLY_COPY=0`` turns it off (read at import, for the A/B of
#: ``python -m workloads.microbench latency``).
EARLY_COPY = settings.get("early_copy")

#: The completion poll's schedule (ns): ``(first, min, max)``. A warp's polling lane sleeps
#: ``first`` after its submission before its first poll of a completion, then polls with
#: back-off from ``min`` doubling to ``max``. ``GIDS_POLL_NS=first,min,max`` sets it, read at
#: import (docs/design-notes.md, "The completion poll's schedule").
POLL_FIRST_NS, POLL_MIN_NS, POLL_MAX_NS = settings.get("poll_ns")


def jit(func=None, **options):
    """``numba.cuda.jit`` for kernels that call ``gids.read``: registers capped at
    :data:`MAX_REGISTERS` unless ``max_registers`` is given (``None`` or 0: no cap; the
    simulator has no cap).

    Use it like ``cuda.jit``: ``@gids.jit``, ``@gids.jit(fastmath=True)`` or
    ``@gids.jit(max_registers=64)``.
    """
    from numba import cuda
    if not SIMULATOR:
        options.setdefault("max_registers", MAX_REGISTERS)
        if not options["max_registers"]:
            del options["max_registers"]
    else:
        options.pop("max_registers", None)
    if func is None:
        return cuda.jit(**options)
    return cuda.jit(func, **options)


def device_helper(func):
    """``cuda.jit(device=True)`` for a small device function that uses no ``cuda.`` attribute;
    in the simulator, the Python function itself.

    The simulator runs every ``cuda.jit`` device function through a wrapper that takes a lock of
    the function's module twice per call, to swap ``cuda`` in the module's globals. In a loop that
    is a convoy: the 64 KiB page copy called its store helper 37 k times per gather, and the
    threads waiting on that page, also calling device functions, once stalled it past the 60 s
    timeout. Helpers called in loops go without the wrapper; they must not
    touch ``cuda.`` (threadIdx, fences), which only the wrapper makes work, and that is checked.
    """
    from numba import cuda
    if not SIMULATOR:
        return cuda.jit(device=True)(func)
    if "cuda" in func.__code__.co_names:
        raise TypeError(f"{func.__name__} uses cuda.*: decorate it with cuda.jit(device=True)")
    return func


#: Python functions (by module and qualified name) that :func:`out_of_line` compiles as calls.
_OUT_OF_LINE = set()


def _mark_out_of_line_functions():
    """Make Numba declare the functions of :data:`_OUT_OF_LINE` ``noinline``.

    numba-cuda 0.30 has no option for it (``forceinline`` only adds ``alwaysinline``), so the
    one place where a function's LLVM declaration is made, ``FunctionDescriptor.
    declare_function``, is wrapped to add the attribute. NVVM then keeps the function a real
    ``call``. Checked by tests/test_ptx.py; pyproject pins numba-cuda to 0.30.
    """
    from numba.cuda.core import funcdesc
    declare = funcdesc.FunctionDescriptor.declare_function
    if getattr(declare, "_gids_out_of_line", False):
        return

    def declare_function(self, module):
        fn = declare(self, module)
        if (self.modname, self.qualname) in _OUT_OF_LINE:
            fn.attributes.discard("alwaysinline")
            fn.attributes.add("noinline")
        return fn
    declare_function._gids_out_of_line = True
    funcdesc.FunctionDescriptor.declare_function = declare_function


def out_of_line(func):
    """``cuda.jit(device=True)``, compiled as a function that its callers *call*, never inlined.

    For a slow path that most calls skip (the miss path of ``gids.read``): inlined, its
    registers and spills became the caller's, around the fast path too (128 registers and spill
    stores at the top of every ``gids.read``); called, it has its own
    frame, and only the calls that take it pay for the call. In the simulator: ``cuda.jit``.
    """
    from numba import cuda
    if not SIMULATOR:
        _mark_out_of_line_functions()
        _OUT_OF_LINE.add((func.__module__, func.__qualname__))
    return cuda.jit(device=True)(func)


def _make_register_copy():
    """:func:`register_copy` (an intrinsic on a GPU)."""
    if SIMULATOR:
        return lambda value: value
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def register_copy(typingctx, value):
        if not isinstance(value, types.Integer) or value.bitwidth not in (32, 64):
            raise TypeError("register_copy takes a 32- or 64-bit integer")
        sig = value(value)

        def codegen(context, builder, sig, args):
            bits = sig.args[0].bitwidth
            kind = "l" if bits == 64 else "r"
            fnty = ir.FunctionType(ir.IntType(bits), [ir.IntType(bits)])
            # Side-effecting, so that it is neither merged with the value nor hoisted out of
            # the loop that it is meant for.
            asm = ir.InlineAsm(fnty, f"mov.b{bits} $0, $1;", f"={kind},{kind}", side_effect=True)
            return builder.call(asm, args)
        return sig, codegen

    return register_copy


#: ``register_copy(x)``: ``x`` (a 32- or 64-bit integer) as a new value that the compiler does not
#: know to be equal to ``x`` (``mov``; the value itself in the simulator).
#:
#: For a loop with no call in it inside one that makes calls (:func:`out_of_line`): a value
#: live across a call must sit in one of the few registers that a call preserves or be spilled to
#: local memory, and ptxas reloads a spilled value at each use, in the inner loop too. A copy
#: made just before the inner loop is not live across any call, so it stays in a register there
#: (the BFS top-down scan: six local loads per segment of 32 neighbours without it).
register_copy = _make_register_copy()
