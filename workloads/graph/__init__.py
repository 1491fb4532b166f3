"""Graph traversal workload, host side: Graph500 Kronecker generation, the on-disk CSR format,
importers, CPU reference BFS / connected components, and Graph500 validation and TEPS.

The GPU BFS kernels read ``neighbours[offsets[v]:offsets[v+1]]`` from the file's neighbours
section (:attr:`CSRGraph.neighbour_section`) through the page cache, with ``offsets`` in device
memory. File layout: ``docs/formats.md (graph section)``.
"""

from .bfs import UNREACHED, bfs_reference, connected_components_reference, sample_bfs_roots
from .csr_file import (
    FLAG_NO_DUPLICATES,
    FLAG_NO_SELF_LOOPS,
    FLAG_SORTED,
    FLAG_SYMMETRIC,
    FORMAT_VERSION,
    MAGIC,
    SECTION_ALIGN,
    CSRGraph,
    CSRHeader,
    GraphFormatError,
    NeighbourSection,
    neighbour_dtype_for,
    open_csr,
    read_csr_header,
    verify_csr,
    write_csr,
)
from .edges import DEFAULT_CHUNK_EDGES, EdgeArray, EdgeSource, RelabelledEdges
from .importers import ImportResult, import_edge_list, import_npy_edges
from .kronecker import KroneckerEdges, generate_kronecker_csr, kronecker_edges, scramble_vertices
from .validate import (
    RULES,
    BFSValidationError,
    TEPSStatistics,
    same_partition,
    scipy_bfs,
    scipy_components,
    teps_harmonic_mean,
    teps_statistics,
    traversed_edges,
    tree_depths,
    validate_bfs_levels,
    validate_bfs_tree,
)

__all__ = [
    "UNREACHED", "bfs_reference", "connected_components_reference", "sample_bfs_roots",
    "FLAG_NO_DUPLICATES", "FLAG_NO_SELF_LOOPS", "FLAG_SORTED", "FLAG_SYMMETRIC", "FORMAT_VERSION",
    "MAGIC", "SECTION_ALIGN", "CSRGraph", "CSRHeader", "GraphFormatError", "NeighbourSection",
    "neighbour_dtype_for", "open_csr", "read_csr_header", "verify_csr", "write_csr",
    "DEFAULT_CHUNK_EDGES", "EdgeArray", "EdgeSource", "RelabelledEdges",
    "ImportResult", "import_edge_list", "import_npy_edges",
    "KroneckerEdges", "generate_kronecker_csr", "kronecker_edges", "scramble_vertices",
    "RULES", "BFSValidationError", "TEPSStatistics", "same_partition", "scipy_bfs",
    "scipy_components", "teps_harmonic_mean", "teps_statistics", "traversed_edges", "tree_depths",
    "validate_bfs_levels", "validate_bfs_tree",
]
