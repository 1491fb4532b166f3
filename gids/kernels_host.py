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
def hold_kernel(h, pages, at):
    """Pin each page of ``pages`` once and keep the pin (``at[k]``: gids.pin_page's index, or
    -1 where it failed: the error is recorded)."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, pages.size, stride):
        pin = pin_page(h, pages[k] << h.elem_shift)
        at[k] = pin
        _count(h, activemask(), L.STAT_HELD_PAGES, pin >= 0)


@jit
def release_kernel(h, pages, at):
    """Give back the pins :func:`hold_kernel` kept."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, pages.size, stride):
        unpin_page(h, pages[k] << h.elem_shift, at[k])


@jit
def prefetch_kernel(h, elems):
    """Load the page of each element of ``elems`` (a pin given back at once)."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, elems.size, stride):
        i = elems[k]
        at = pin_page(h, i)
        unpin_page(h, i, at)
        _count(h, activemask(), L.STAT_PREFETCHED, True)
