"""Kernels the Runtime launches itself (the user's kernels call ``gids.read`` and
``gids.write`` the same way)."""
from numba import cuda

from kernels import layout as L
from kernels.access import _count, pin_page, read, unpin_page, write
from kernels.platform import jit
from kernels.warp import activemask


@jit
def gather_kernel(h, indices, out):
    """out[k] = array[indices[k]], grid-stride."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, indices.size, stride):
        out[k] = read(h, indices[k])


@jit
def scatter_kernel(h, indices, values):
    """array[indices[k]] = values[k], grid-stride."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, indices.size, stride):
        write(h, indices[k], values[k])


# --- window hints (gids/window.py): one thread per page, named by its first element's index
# (prefetch also takes device element indices, whose pages it finds in the kernel). Their
# counters take one reduction per warp (``_count``), not one per page.

@jit
def hold_kernel(h, buf, n):
    """Pin each page of ``buf[:n]`` once and keep the pin in ``buf[n + k]`` (gids.pin_page's
    index, or -1 where it failed: the error is recorded)."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, n, stride):
        pin = pin_page(h, buf[k] << h.elem_shift)
        buf[n + k] = pin
        _count(h, activemask(), L.STAT_HELD_PAGES, pin >= 0)


@jit
def release_kernel(h, buf, n):
    """Give back the pins :func:`hold_kernel` kept in ``buf[n:2 * n]``."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, n, stride):
        unpin_page(h, buf[k] << h.elem_shift, buf[n + k])


@jit
def prefetch_kernel(h, elems, n):
    """Load the page of each element of ``elems[:n]`` (a pin given back at once); an element
    on the same page as the one before it is skipped (sorted indices: each page once)."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, n, stride):
        i = elems[k]
        first = k == 0 or (elems[k - 1] >> h.elem_shift) != (i >> h.elem_shift)
        if first:
            at = pin_page(h, i)
            unpin_page(h, i, at)
        _count(h, activemask(), L.STAT_PREFETCHED, first)
