"""Acquire loads and release stores for ``njit`` host code polling memory the GPU writes.

A plain ``while flag[0] == 0`` in ``njit`` is optimised into a loop that never reloads the word.
These intrinsics emit LLVM atomic loads/stores with acquire/release ordering, which are reloaded
every iteration and order the accesses around them (on x86 they cost a plain mov).

:func:`private_array` gives a thread's hot words (counters, clock buffers) memory of their own.
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _pointer(context, builder, aryty, ary_value, idx):
    ary = context.make_array(aryty)(context, builder, ary_value)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)


@intrinsic
def load_acquire(typingctx, arr, idx):
    """``arr[idx]`` with acquire ordering (reads after it see what the writer released)."""
    sig = arr.dtype(arr, types.intp)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", sig.args[0].dtype.bitwidth // 8)
    return sig, codegen


@intrinsic
def load_word(typingctx, address):
    """The int64 at host address ``address`` (an integer: memory the store table points at).

    Reads it in place: the alternative, copying it into a fresh array, allocates, which the
    NVMe controller's loop (compiled without the runtime's reference counting) cannot do."""
    sig = types.int64(address)

    def codegen(context, builder, sig, args):
        at = context.cast(builder, args[0], sig.args[0], types.intp)
        return builder.load(builder.inttoptr(at, ir.IntType(64).as_pointer()))
    return sig, codegen


@intrinsic
def store_release(typingctx, arr, idx, value):
    """``arr[idx] = value`` with release ordering (writes before it are seen first)."""
    sig = types.void(arr, types.intp, arr.dtype)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        val = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        builder.store_atomic(val, ptr, "release", sig.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()
    return sig, codegen


#: Bytes of memory that words written by one thread share with nobody: two 64-byte cache lines,
#: because x86 cores also fetch the adjacent line of a pair (the spatial prefetcher).
PRIVATE_BYTES = 128


def private_array(shape, dtype=np.int64):
    """A zeroed array that shares no ``PRIVATE_BYTES`` block with any other data.

    For words one thread writes often (a served count per request, a clock buffer per clock
    read). Small numpy arrays allocated one after another (one per thread) can share a cache
    line; every write by one thread then takes the line from the others (false sharing), so
    threads that share nothing still slow each other down.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(nbytes + 2 * PRIVATE_BYTES, dtype=np.uint8)
    start = -raw.ctypes.data % PRIVATE_BYTES
    return raw[start:start + nbytes].view(dtype).reshape(shape)   # a view: raw stays alive


@intrinsic
def store_word(typingctx, address, value):
    """Write the int64 ``value`` at host address ``address`` (memory the store table points at),
    in place, as :func:`load_word` reads it."""
    sig = types.void(address, value)

    def codegen(context, builder, sig, args):
        at = context.cast(builder, args[0], sig.args[0], types.intp)
        val = context.cast(builder, args[1], sig.args[1], types.int64)
        builder.store(val, builder.inttoptr(at, ir.IntType(64).as_pointer()))
        return context.get_dummy_value()
    return sig, codegen
