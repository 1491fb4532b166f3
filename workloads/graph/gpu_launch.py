"""What the GPU traversal kernels (:mod:`.gpu_bfs`, :mod:`.gpu_cc`) share with the graph's data
paths (:mod:`.gpu_graph`): launch geometry, warp masks, the report of a corrupt neighbour id,
and the :class:`Access` a launch announces to its data path.
"""
from __future__ import annotations

import gids  # noqa: F401  (first: picks GPU or simulator before numba.cuda loads)

# isort: split

import math
from dataclasses import dataclass
from typing import Any

from numba import cuda

from gids import SIMULATOR
from gids.device import WARP_SIZE, atomic_cas

#: Threads per block. The simulator runs one Python thread per CUDA thread and one block at a
#: time: a few small blocks keep it fast while still interleaving threads.
THREADS_PER_BLOCK = 32 if SIMULATOR else 256
#: Most blocks per launch; the kernels are grid-stride, so any grid is correct.
MAX_BLOCKS = 2 if SIMULATOR else 8192

#: Every lane of a warp: the loops below are warp-uniform, so the whole warp reaches each
#: collective (named explicitly rather than ``activemask()``, which need not be the whole warp
#: on a GPU with independent thread scheduling, even where every lane will arrive).
FULL_MASK = (1 << WARP_SIZE) - 1
#: numba-cuda types ``ballot_sync`` as int32: a ballot with lane 31 is negative, and Numba's
#: integer promotion would sign-extend it into bits 32-63. Masking makes it a plain bit set.
LANE_BITS = 0xFFFFFFFF


# ---------------------------------------------------------------------------------- geometry
def launch_geometry(n_warps: int, *, whole: bool = False) -> tuple[int, int]:
    """``(blocks, threads)`` for a grid-stride kernel with ``n_warps`` warps' worth of work.

    Every kernel here gives one warp a vertex (a warp is one thread in the simulator unless it
    emulates 32-lane warps), so the grid is sized in warps and always whole warps: the warp-
    cooperative loops need every lane of a warp present. At most :data:`MAX_BLOCKS` blocks,
    unless ``whole`` (on a GPU): a warp for each of the ``n_warps``, so that the work is done in
    about the order of the warps (blocks start in order), not in ``MAX_BLOCKS``-sized stripes.
    """
    n_warps = max(1, int(n_warps))
    if SIMULATOR and WARP_SIZE == 1:
        # Python threads are expensive: no more than the work needs.
        threads = min(THREADS_PER_BLOCK, n_warps)
    else:
        threads = THREADS_PER_BLOCK
    warps_per_block = threads // WARP_SIZE
    blocks = math.ceil(n_warps / warps_per_block)
    if not whole or SIMULATOR:
        blocks = min(MAX_BLOCKS, blocks)
    return max(1, blocks), threads


# ---------------------------------------------------------------------------------- corrupt ids
#: ``bad`` record layout (int64[2], device memory): first bad entry index (-1: none), its value.
BAD_ENTRY, BAD_VALUE = 0, 1


@cuda.jit(device=True)
def report_bad_entry(bad, k, value):
    """Record a neighbour id outside ``0 .. n-1`` (the first one wins); the kernel skips it.

    A corrupt neighbours section must not make a kernel write outside its arrays (on a GPU
    that corrupts memory silently): the id is checked before it indexes anything, and the host
    raises :class:`GraphFormatError` after the launch.
    """
    if atomic_cas(bad, BAD_ENTRY, -1, k) == -1:
        bad[BAD_VALUE] = value


@dataclass(frozen=True)
class Access:
    """Which adjacency lists the next launch reads (told to :meth:`NeighbourSource.before_launch`).

    Attributes
    ----------
    kind : {"frontier", "unvisited", "all"}
        ``"frontier"``: the lists of ``vertices[:count]`` (top-down BFS);
        ``"unvisited"``: the lists of vertices whose ``levels`` entry is -1, each possibly only a
        prefix (bottom-up BFS stops at the first parent found); ``"all"``: every list, possibly
        only the prefix of entries below the vertex itself when lists are sorted (connected
        components).
    vertices : device array, optional
        int64 vertex ids (``"frontier"``).
    count : int
        Vertices in ``vertices`` (``"frontier"``).
    levels : device array, optional
        int64 BFS levels, -1 where unvisited (``"unvisited"``).
    """

    kind: str
    vertices: Any = None
    count: int = 0
    levels: Any = None
