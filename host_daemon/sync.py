"""Acquire loads and release stores for ``njit`` host code polling memory the GPU writes.

A plain ``while flag[0] == 0`` in ``njit`` is optimised into a loop that never reloads the word.
These intrinsics emit LLVM atomic loads/stores with acquire/release ordering, which are reloaded
every iteration and order the accesses around them (on x86 they cost a plain mov).
"""
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
def store_release(typingctx, arr, idx, value):
    """``arr[idx] = value`` with release ordering (writes before it are seen first)."""
    sig = types.void(arr, types.intp, arr.dtype)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        val = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        builder.store_atomic(val, ptr, "release", sig.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()
    return sig, codegen
