"""Kernels the Runtime launches itself (the user's kernels call ``gids.read`` and
``gids.write`` the same way)."""
from numba import cuda

from kernels.access import read, write
from kernels.platform import jit


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
