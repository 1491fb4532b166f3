"""Which pages of a graph's neighbours array to keep in the host tier (``rt.host_tier``).

GIDS fills its CPU buffer with the nodes most likely to be read: by degree, or by reverse
PageRank (PageRank over the reversed edges: a vertex scores by what it points to, the
likelihood that a walk along in-edges, as a sampler or a traversal takes them, reaches it).
Here a vertex's score goes to every page its neighbour list touches, and the pages of highest
total score are chosen. A third ranking, by the number of lists a page holds, picks the pages
to keep in GPU memory in front of a tier that holds every page (see :func:`vertex_scores`).
"""
import numpy as np

#: How pages can be chosen (``gids bfs/cc --host-tier``).
METHODS = ("degree", "pagerank", "lists")


def vertex_scores(graph, method: str, *, iterations: int = 10,
                  damping: float = 0.85) -> np.ndarray:
    """A float64 score per vertex: its out-degree (``"degree"``), its reverse PageRank
    (``"pagerank"``, ``iterations`` power steps), or 1 (``"lists"``: a page then scores the
    lists it holds).

    ``"lists"`` is for a traversal that reads every list once (a top-down BFS), to which every
    page is worth its bytes whatever its vertices' degrees: a page of many short lists is the
    one looked up most often, and read least efficiently in place over PCIe (each list a
    partial, unaligned run of 128-byte lines), so it is the page to keep in GPU memory; a hub's
    long list streams over PCIe in whole lines."""
    if method not in METHODS:
        raise ValueError(f"host tier pages: method must be one of {METHODS}, got {method!r}")
    offsets = np.asarray(graph.offsets, dtype=np.int64)
    degree = np.diff(offsets).astype(np.float64)
    if method == "degree":
        return degree
    if method == "lists":
        return np.ones_like(degree)
    from scipy import sparse
    n = offsets.size - 1
    neighbours = np.asarray(graph.neighbours)
    adjacency = sparse.csr_matrix((np.ones(neighbours.size, dtype=np.float32), neighbours,
                                   offsets), shape=(n, n))
    # Reversed edges: u's score flows in from each v it points to, divided among v's in-edges.
    in_degree = np.bincount(neighbours, minlength=n).astype(np.float64)
    share = np.divide(1.0, in_degree, out=np.zeros(n), where=in_degree > 0)
    rank = np.full(n, 1.0 / max(n, 1))
    for _ in range(iterations):
        rank = (1.0 - damping) / n + damping * (adjacency @ (rank * share))
    return rank


def page_scores(graph, scores: np.ndarray, page_size: int) -> np.ndarray:
    """Per page of the neighbours array: the summed scores of the vertices whose lists touch
    it (a list over several pages counts on each)."""
    offsets = np.asarray(graph.offsets, dtype=np.int64)
    itemsize = np.asarray(graph.neighbours).dtype.itemsize
    n_pages = max(1, -(-int(offsets[-1]) * itemsize // page_size))
    has = offsets[1:] > offsets[:-1]
    first = offsets[:-1][has] * itemsize // page_size
    last = (offsets[1:][has] * itemsize - 1) // page_size
    edge = np.zeros(n_pages + 1)
    np.add.at(edge, first, scores[has])
    np.add.at(edge, last + 1, -scores[has])
    return np.cumsum(edge[:-1])


def ranked_pages(graph, method: str, page_size: int) -> np.ndarray:
    """Every page of the neighbours array, highest score first (ties: lower page first)."""
    scores = page_scores(graph, vertex_scores(graph, method), page_size)
    return np.argsort(-scores, kind="stable").astype(np.int64)


def choose_pages(graph, method: str, n_pages: int, page_size: int) -> np.ndarray:
    """The ``n_pages`` pages of highest score (ascending page order), all pages if fewer."""
    return np.sort(ranked_pages(graph, method, page_size)[:max(0, int(n_pages))])
