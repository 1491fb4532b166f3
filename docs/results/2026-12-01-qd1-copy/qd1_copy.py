"""Experiment (not part of gids): how fast can ONE GPU thread pull a 4 KiB page from mapped
host memory into device memory? Variants of the copy, each timed per page with %globaltimer.

    python exp/qd1_copy.py
"""
import json, sys
import numpy as np
from numba import cuda, types, int64, uint32
from numba.cuda.extending import intrinsic
from llvmlite import ir
from numba.core import cgutils

sys.path.insert(0, ".")
from kernels.sync import now_ns, ld_pair


def _ptr(context, builder, aryty, ary, idx):
    a = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, a, [idx], wraparound=False)


def _asm_void(text, n_ptr, extra_i32=0):
    n_args = 2 * n_ptr + extra_i32

    def typer(args):
        sig = types.void(*args)

        def codegen(context, builder, sig, a):
            ops = []
            for k in range(n_ptr):
                ops.append(_ptr(context, builder, sig.args[2 * k], a[2 * k], a[2 * k + 1]))
            for k in range(extra_i32):
                ops.append(context.cast(builder, a[2 * n_ptr + k], sig.args[2 * n_ptr + k], types.uint32))
            fnty = ir.FunctionType(ir.VoidType(), [o.type for o in ops])
            c = ",".join(["l"] * n_ptr + ["r"] * extra_i32) + ",~{memory}"
            builder.call(ir.InlineAsm(fnty, text, c, side_effect=True), ops)
            return context.get_dummy_value()
        return sig, codegen

    if n_args == 2:
        @intrinsic
        def fn(typingctx, a, b):
            return typer((a, b))
    elif n_args == 3:
        @intrinsic
        def fn(typingctx, a, b, c):
            return typer((a, b, c))
    elif n_args == 4:
        @intrinsic
        def fn(typingctx, a, b, c, d):
            return typer((a, b, c, d))
    elif n_args == 5:
        @intrinsic
        def fn(typingctx, a, b, c, d, e):
            return typer((a, b, c, d, e))
    elif n_args == 7:
        @intrinsic
        def fn(typingctx, a, b, c, d, e, f, g):
            return typer((a, b, c, d, e, f, g))
    return fn


cp_async16 = _asm_void("{ .reg .u64 d, s; cvta.to.shared.u64 d, $0; cvta.to.global.u64 s, $1; "
                       "cp.async.cg.shared.global [d], [s], 16; }", 2)
prefetch_l2 = _asm_void("{ .reg .u64 s; cvta.to.global.u64 s, $0; prefetch.global.L2 [s]; }", 1)
bulk_prefetch = _asm_void("{ .reg .u64 s; cvta.to.global.u64 s, $0; "
                          "cp.async.bulk.prefetch.L2.global [s], $1; }", 1, 1)
mbar_init = _asm_void("{ .reg .u64 m; cvta.to.shared.u64 m, $0; mbarrier.init.shared::cta.b64 [m], 1; }", 1)
# arrive + expect tx bytes, then the bulk copy global -> shared completing on the mbarrier
tma_load = _asm_void("{ .reg .u64 d, s, m; .reg .b64 st; cvta.to.shared.u64 d, $0; cvta.to.global.u64 s, $1; "
                     "cvta.to.shared.u64 m, $2; "
                     "mbarrier.arrive.expect_tx.shared::cta.b64 st, [m], $3; "
                     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [d], [s], $3, [m]; }", 3, 1)
tma_store = _asm_void("{ .reg .u64 d, s; cvta.to.global.u64 d, $0; cvta.to.shared.u64 s, $1; "
                      "cp.async.bulk.global.shared::cta.bulk_group [d], [s], $2; "
                      "cp.async.bulk.commit_group; cp.async.bulk.wait_group 0; }", 2, 1)


@intrinsic
def cp_wait_all(typingctx):
    sig = types.void()

    def codegen(context, builder, sig, a):
        builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "cp.async.wait_all;",
                                  "~{memory}", side_effect=True), [])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def mbar_try_wait(typingctx, arr, idx, parity):
    sig = types.uint32(arr, types.intp, types.uint32)

    def codegen(context, builder, sig, a):
        p = _ptr(context, builder, sig.args[0], a[0], a[1])
        par = context.cast(builder, a[2], sig.args[2], types.uint32)
        fnty = ir.FunctionType(ir.IntType(32), [p.type, ir.IntType(32)])
        text = ("{ .reg .u64 m; .reg .pred q; cvta.to.shared.u64 m, $1; "
                "mbarrier.try_wait.parity.shared::cta.b64 q, [m], $2; selp.u32 $0, 1, 0, q; }")
        return builder.call(ir.InlineAsm(fnty, text, "=r,l,r,~{memory}", side_effect=True), [p, par])
    return sig, codegen


@intrinsic
def addr_of(typingctx, arr, idx):
    sig = types.int64(arr, types.intp)

    def codegen(context, builder, sig, a):
        return builder.ptrtoint(_ptr(context, builder, sig.args[0], a[0], a[1]), ir.IntType(64))
    return sig, codegen


W = 512  # int64 words per 4 KiB page
W2 = W + 2


@cuda.jit(device=True, inline=True)
def copy8(src, s0, dst, d0):
    for j in range(0, W, 16):
        a0, a1 = ld_pair(src, s0 + j)
        b0, b1 = ld_pair(src, s0 + j + 2)
        c0, c1 = ld_pair(src, s0 + j + 4)
        e0, e1 = ld_pair(src, s0 + j + 6)
        f0, f1 = ld_pair(src, s0 + j + 8)
        g0, g1 = ld_pair(src, s0 + j + 10)
        h0, h1 = ld_pair(src, s0 + j + 12)
        k0, k1 = ld_pair(src, s0 + j + 14)
        dst[d0 + j] = a0; dst[d0 + j + 1] = a1; dst[d0 + j + 2] = b0; dst[d0 + j + 3] = b1
        dst[d0 + j + 4] = c0; dst[d0 + j + 5] = c1; dst[d0 + j + 6] = e0; dst[d0 + j + 7] = e1
        dst[d0 + j + 8] = f0; dst[d0 + j + 9] = f1; dst[d0 + j + 10] = g0; dst[d0 + j + 11] = g1
        dst[d0 + j + 12] = h0; dst[d0 + j + 13] = h1; dst[d0 + j + 14] = k0; dst[d0 + j + 15] = k1


@cuda.jit
def k_ld8(src, dst, pages, times):
    for it in range(pages.size):
        s0 = pages[it] * W
        t0 = now_ns()
        copy8(src, s0, dst, it * W)
        cuda.threadfence()
        times[it] = now_ns() - t0


@cuda.jit
def k_pf(src, dst, pages, times):
    for it in range(pages.size):
        s0 = pages[it] * W
        t0 = now_ns()
        for j in range(0, W, 16):
            prefetch_l2(src, s0 + j)
        copy8(src, s0, dst, it * W)
        cuda.threadfence()
        times[it] = now_ns() - t0


@cuda.jit
def k_bulkpf(src, dst, pages, times):
    for it in range(pages.size):
        s0 = pages[it] * W
        t0 = now_ns()
        bulk_prefetch(src, s0, 4096)
        copy8(src, s0, dst, it * W)
        cuda.threadfence()
        times[it] = now_ns() - t0


@cuda.jit
def k_cpasync(src, dst, pages, times):
    sh = cuda.shared.array(W2, int64)
    o = 0 if addr_of(sh, 0) % 16 == 0 else 1
    for it in range(pages.size):
        s0 = pages[it] * W
        t0 = now_ns()
        for j in range(0, W, 2):
            cp_async16(sh, o + j, src, s0 + j)
        cp_wait_all()
        d0 = it * W
        for j in range(0, W, 2):
            a0 = sh[o + j]
            a1 = sh[o + j + 1]
            dst[d0 + j] = a0
            dst[d0 + j + 1] = a1
        cuda.threadfence()
        times[it] = now_ns() - t0


@cuda.jit
def k_tma(src, dst, pages, times):
    sh = cuda.shared.array(W2, int64)
    o = 0 if addr_of(sh, 0) % 16 == 0 else 1
    mb = cuda.shared.array(1, int64)
    mbar_init(mb, 0)
    cuda.threadfence_block()
    for it in range(pages.size):
        s0 = pages[it] * W
        t0 = now_ns()
        tma_load(sh, o, src, s0, mb, 0, 4096)
        par = uint32(it & 1)
        while mbar_try_wait(mb, 0, par) == 0:
            pass
        tma_store(dst, it * W, sh, o, 4096)
        cuda.threadfence()
        times[it] = now_ns() - t0


def main():
    n_pages = 4096
    rng = np.random.default_rng(1)
    src = cuda.mapped_array(n_pages * W, dtype=np.int64)
    src[:] = rng.integers(0, 1 << 62, src.size)
    out = {}
    iters = 400
    for name, k in [("ld8", k_ld8), ("prefetch_l2_lines", k_pf), ("bulk_prefetch_l2", k_bulkpf),
                    ("cp_async_16B_x256", k_cpasync), ("tma_bulk", k_tma)]:
        try:
            pages = rng.permutation(n_pages)[:iters].astype(np.int64)
            dst = cuda.device_array(iters * W, dtype=np.int64)
            times = cuda.device_array(iters, dtype=np.int64)
            d_pages = cuda.to_device(pages)
            k[1, 1](src, dst, d_pages, times)
            cuda.synchronize()
            t = times.copy_to_host()[20:]
            ok = bool(np.array_equal(dst.copy_to_host().reshape(iters, W), src.reshape(n_pages, W)[pages]))
            out[name] = {"p50_us": float(np.median(t)) / 1e3, "p99_us": float(np.percentile(t, 99)) / 1e3,
                         "min_us": float(t.min()) / 1e3, "values_ok": ok}
        except Exception as e:  # noqa
            out[name] = {"error": repr(e)[:300]}
        print(name, out[name], flush=True)
    return out


if __name__ == "__main__":
    res = main()
    import os
    if os.environ.get("OUT"):
        json.dump(res, open(os.path.join(os.environ["OUT"], "qd1_copy.json"), "w"), indent=1)
