"""CPU reference BFS / components against scipy, Graph500's five validation rules, and TEPS."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.graph import (
    BFSValidationError,
    CSRGraph,
    EdgeArray,
    GraphFormatError,
    bfs_reference,
    connected_components_reference,
    generate_kronecker_csr,
    kronecker_edges,
    open_csr,
    same_partition,
    sample_bfs_roots,
    scipy_bfs,
    scipy_components,
    teps_harmonic_mean,
    teps_statistics,
    traversed_edges,
    tree_depths,
    validate_bfs_levels,
    validate_bfs_tree,
    write_csr,
)

SCALES = [6, 7, 8, 9, 10]


@pytest.fixture(scope="module")
def kronecker_files(tmp_path_factory):
    """One Graph500 graph per scale (kept self loops and duplicates), plus a simple-graph variant."""
    folder = tmp_path_factory.mktemp("kronecker")
    files = {}
    for scale in SCALES:
        files[scale] = folder / f"scale{scale}.csr"
        generate_kronecker_csr(files[scale], scale, seed=100 + scale, chunk_edges=3000)
        files[scale, "simple"] = folder / f"scale{scale}-simple.csr"
        generate_kronecker_csr(files[scale, "simple"], scale, seed=100 + scale, chunk_edges=3000,
                               drop_self_loops=True, drop_duplicates=True)
    return files


def graph500_edge_count(scale, seed, reached):
    """Graph500's m straight from the generated edge list: tuples with an end in the component."""
    src, _ = kronecker_edges(scale, 0, 16 << scale, seed=seed)
    return int(np.count_nonzero(reached[src]))


@pytest.mark.parametrize("scale", SCALES)
def test_bfs_from_many_roots_is_valid_and_matches_scipy(kronecker_files, scale):
    graph = open_csr(kronecker_files[scale], verify=True)
    roots = sample_bfs_roots(graph, 64, seed=scale)
    src, dst = kronecker_edges(scale, 0, 16 << scale, seed=100 + scale)
    has_edge = np.unique(np.concatenate((src[src != dst], dst[src != dst])))
    assert np.isin(roots, has_edge).all() and roots.size == min(64, has_edge.size)
    assert np.unique(roots).size == roots.size
    for root in roots.tolist():
        parents, levels = bfs_reference(graph, root, chunk_edges=512)
        assert np.array_equal(validate_bfs_tree(graph, root, parents, levels), levels)
        validate_bfs_levels(graph, root, levels)
        scipy_parents, scipy_levels = scipy_bfs(graph, root)
        assert np.array_equal(levels, scipy_levels), "levels differ from scipy"
        validate_bfs_tree(graph, root, scipy_parents)
    # Graph500's TEPS edge count, from the CSR, equals counting the input tuples directly.
    assert traversed_edges(graph, levels) == graph500_edge_count(scale, 100 + scale, levels >= 0)


@pytest.mark.parametrize("scale", [6, 10])
def test_bfs_on_the_simple_graph_agrees_with_the_multigraph(kronecker_files, scale):
    multi = open_csr(kronecker_files[scale])
    simple = open_csr(kronecker_files[scale, "simple"], verify=True)
    for root in sample_bfs_roots(multi, 16, seed=1).tolist():
        _, multi_levels = bfs_reference(multi, root)
        parents, levels = bfs_reference(simple, root)
        validate_bfs_tree(simple, root, parents, levels)
        assert np.array_equal(levels, multi_levels)
        assert traversed_edges(simple, levels) <= traversed_edges(multi, levels)


def test_bfs_does_not_depend_on_the_chunk_size(kronecker_files):
    graph = open_csr(kronecker_files[9])
    root = int(sample_bfs_roots(graph, 1, seed=3)[0])
    whole = bfs_reference(graph, root)
    for chunk_edges in (1, 37, 1000):
        parents, levels = bfs_reference(graph, root, chunk_edges=chunk_edges)
        assert np.array_equal(levels, whole[1])
        validate_bfs_tree(graph, root, parents, levels)


@pytest.mark.parametrize("scale", SCALES)
def test_connected_components_match_scipy(kronecker_files, scale):
    for variant in (scale, (scale, "simple")):
        graph = open_csr(kronecker_files[variant])
        labels = connected_components_reference(graph, chunk_edges=700)
        n_components, scipy_labels = scipy_components(graph)
        assert same_partition(labels, scipy_labels)
        assert np.unique(labels).size == n_components
        # Labels are each component's smallest vertex.
        assert np.all(labels <= np.arange(graph.n_vertices))
        assert np.all(labels[labels] == labels)


def test_same_partition_ignores_label_values():
    a = np.array([0, 0, 1, 2, 2, 1])
    assert same_partition(a, np.array([7, 7, 3, 9, 9, 3]))
    assert not same_partition(a, np.array([7, 7, 3, 3, 3, 3]))  # two components merged
    assert not same_partition(a, np.array([7, 8, 3, 9, 9, 3]))  # one component split
    assert not same_partition(a, a[:5])
    assert same_partition(np.array([], dtype=int), np.array([], dtype=int))


# --- small hand-made graphs, for the edge cases and each rule ------------------------------------

def small_graph(tmp_path, edges, n_vertices, name="g.csr"):
    path = tmp_path / name
    write_csr(path, EdgeArray(np.array(edges, dtype=np.int64).reshape(-1, 2), n_vertices))
    return open_csr(path, verify=True)


def test_isolated_vertices_self_loops_and_duplicates(tmp_path):
    # 0-1 (twice), 1-2, loop on 2 (twice), 3 isolated, loop-only vertex 4, 5-6 apart.
    graph = small_graph(tmp_path, [[0, 1], [1, 0], [1, 2], [2, 2], [2, 2], [4, 4], [5, 6]], 8)
    parents, levels = bfs_reference(graph, 0)
    assert levels.tolist() == [0, 1, 2, -1, -1, -1, -1, -1]
    validate_bfs_tree(graph, 0, parents, levels)
    assert np.array_equal(scipy_bfs(graph, 0)[1], levels)
    # Three tuples 0-1, 1-0, 1-2 and both loops on 2: Graph500 counts all five.
    assert traversed_edges(graph, levels) == 5
    for lonely in (3, 4, 7):
        parents, levels = bfs_reference(graph, lonely)
        validate_bfs_tree(graph, lonely, parents, levels)
        assert np.flatnonzero(levels >= 0).tolist() == [lonely]
    assert traversed_edges(graph, bfs_reference(graph, 4)[1]) == 1  # the loop on 4
    assert traversed_edges(graph, bfs_reference(graph, 3)[1]) == 0
    roots = sample_bfs_roots(graph, 64, seed=0)
    assert sorted(roots.tolist()) == [0, 1, 2, 5, 6]  # not 3 (isolated) nor 4 (only a loop)
    assert same_partition(connected_components_reference(graph), scipy_components(graph)[1])


def test_in_memory_graph_without_a_header():
    # 0-1, 1-2 with a loop on 1, built by hand: the loop scan runs since no header says "none".
    graph = CSRGraph(np.array([0, 1, 4, 5]), np.array([1, 0, 1, 2, 1]))
    parents, levels = bfs_reference(graph, 0)
    validate_bfs_tree(graph, 0, parents, levels)
    assert traversed_edges(graph, levels) == 3


def test_a_neighbour_id_out_of_range_is_a_format_error():
    # 0-1 and 1-2, but vertex 2's list names vertex 7 of 3: a corrupt graph, not a broken tree.
    graph = CSRGraph(np.array([0, 1, 3, 4]), np.array([1, 0, 2, 7]))
    parents = np.array([0, 0, 1])
    with pytest.raises(GraphFormatError, match="a neighbour of vertex 2 is 7, not a vertex id"):
        validate_bfs_tree(graph, 0, parents)


@pytest.mark.parametrize("threads", [1, 3])
def test_the_edge_scan_gives_one_answer_for_any_thread_count(kronecker_files, threads,
                                                             monkeypatch):
    """The scan splits each chunk's vertices over threads: valid trees pass and the first
    broken entry is the one reported, whatever the split."""
    from workloads.graph import parallel
    monkeypatch.setattr(parallel, "N_THREADS", threads)
    graph = open_csr(kronecker_files[10])
    parents, levels = bfs_reference(graph, 1)
    validate_bfs_tree(graph, 1, parents, levels, chunk_edges=5000)
    reached = np.flatnonzero(levels > 1)
    broken = levels.copy()
    broken[reached[len(reached) // 2:]] = -1            # cut the tree: an edge leaves it
    with pytest.raises(BFSValidationError) as caught:
        validate_bfs_levels(graph, 1, broken, chunk_edges=5000)
    assert caught.value.rule == 4
    first = next(v for v in range(graph.n_vertices)
                 if any((broken[v] >= 0) != (broken[u] >= 0) for u in graph.neighbours_of(v)))
    assert caught.value.vertex == first


@pytest.fixture
def path_with_chord(tmp_path):
    """0-1-2-3-4 path, plus 0-5, 5-3 and 1-3 (3 is at level 2, via 1 or 5), plus isolated 6."""
    return small_graph(tmp_path, [[0, 1], [1, 2], [2, 3], [3, 4], [0, 5], [5, 3], [1, 3]], 7)


def test_tree_depths_follow_parent_pointers():
    parents = np.array([0, 0, 1, 2, -1, 1])
    assert tree_depths(parents, 0).tolist() == [0, 1, 2, 3, -1, 2]


def test_valid_trees_pass(path_with_chord):
    graph = path_with_chord
    parents, levels = bfs_reference(graph, 0)
    assert levels.tolist() == [0, 1, 2, 2, 3, 1, -1]
    validate_bfs_tree(graph, 0, parents, levels)
    # Another valid BFS tree: 3's parent may be 1 or 5.
    parents[3] = 1 if parents[3] == 5 else 5
    validate_bfs_tree(graph, 0, parents, levels)


@pytest.mark.parametrize("change, rule, message", [
    (lambda p: p.__setitem__(0, 1), 1, "parent of the root"),
    (lambda p: p.__setitem__(slice(1, 3), [2, 1]), 1, "cycle"),
    (lambda p: p.__setitem__(4, 6), 1, "not in the tree"),
    (lambda p: p.__setitem__(4, 99), 1, "not a vertex"),
    (lambda p: p.__setitem__(4, -1), 4, "leaves the tree"),
    (lambda p: p.__setitem__(6, 4), 5, "no edge"),  # isolated 6 hung under 4: no edge to it
    (lambda p: p.__setitem__(4, 1), 5, "no edge"),
])
def test_each_rule_catches_a_broken_tree(path_with_chord, change, rule, message):
    parents, _ = bfs_reference(path_with_chord, 0)
    change(parents)
    with pytest.raises(BFSValidationError, match=message) as caught:
        validate_bfs_tree(path_with_chord, 0, parents)
    assert caught.value.rule == rule


def test_rule_3_catches_a_tree_that_is_not_breadth_first(path_with_chord):
    # A depth-first tree along the path: a tree whose edges are all in the graph (rules 1, 2, 4
    # and 5 hold), but 3 sits at depth 3 while its neighbour 5 is at depth 1.
    parents = np.array([0, 0, 1, 2, 3, 0, -1])
    with pytest.raises(BFSValidationError) as caught:
        validate_bfs_tree(path_with_chord, 0, parents)
    assert caught.value.rule == 3


def test_rule_2_checks_reported_levels(path_with_chord):
    parents, levels = bfs_reference(path_with_chord, 0)
    levels[4] = 4
    with pytest.raises(BFSValidationError) as caught:
        validate_bfs_tree(path_with_chord, 0, parents, levels)
    assert caught.value.rule == 2 and caught.value.vertex == 4
    levels[4], levels[0] = 3, 1
    with pytest.raises(BFSValidationError) as caught:
        validate_bfs_tree(path_with_chord, 0, parents, levels)
    assert caught.value.rule == 2


@pytest.mark.parametrize("change, rule", [
    ({0: 1}, 1),          # root not at level 0
    ({6: 0}, 1),          # a second vertex at level 0
    ({4: -1}, 4),         # reached vertex 3's neighbour left out
    ({6: 2}, 5),          # isolated vertex claims a level: nothing one level closer
    ({4: 5, 3: 4}, 3),    # 3 at 4, but its neighbour 5 is at 1
])
def test_levels_only_validation(path_with_chord, change, rule):
    _, levels = bfs_reference(path_with_chord, 0)
    validate_bfs_levels(path_with_chord, 0, levels)
    for vertex, level in change.items():
        levels[vertex] = level
    with pytest.raises(BFSValidationError) as caught:
        validate_bfs_levels(path_with_chord, 0, levels)
    assert caught.value.rule == rule


def test_wrong_shapes_are_rejected(path_with_chord):
    with pytest.raises(ValueError, match="shape"):
        validate_bfs_tree(path_with_chord, 0, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        validate_bfs_levels(path_with_chord, 0, np.zeros(7))
    with pytest.raises(ValueError, match="root"):
        bfs_reference(path_with_chord, 7)


# --- TEPS ----------------------------------------------------------------------------------------

def test_teps_harmonic_mean_is_total_edges_over_total_time_for_equal_edges():
    edges, times = [1000, 1000, 1000], [1.0, 2.0, 4.0]
    assert teps_harmonic_mean(edges, times) == pytest.approx(3000 / 7.0)
    assert teps_harmonic_mean([500, 2000], [1.0, 1.0]) == pytest.approx(2 / (1 / 500 + 1 / 2000))


def test_teps_statistics_follow_the_graph500_reference():
    edges = np.array([4e6, 5e6, 3e6, 6e6])
    times = np.array([0.1, 0.2, 0.05, 0.3])
    stats = teps_statistics(edges, times)
    teps = edges / times
    hmean = len(teps) / np.sum(1 / teps)
    # Octave reference: tmp = 1./TEPS - 1/hmean; (sqrt(sum(tmp.^2)) / (N-1)) * hmean^2
    octave_hstddev = np.sqrt(np.sum((1 / teps - 1 / hmean) ** 2)) / (len(teps) - 1) * hmean**2
    assert stats.harmonic_mean_TEPS == pytest.approx(hmean)
    assert stats.harmonic_stddev_TEPS == pytest.approx(octave_hstddev)
    assert stats.min_TEPS == teps.min() and stats.max_TEPS == teps.max()
    assert stats.median_TEPS == pytest.approx(np.median(teps))
    assert teps_statistics([10], [1.0]).harmonic_stddev_TEPS == 0.0


def test_teps_rejects_bad_input():
    with pytest.raises(ValueError):
        teps_harmonic_mean([1, 2], [1.0])
    with pytest.raises(ValueError):
        teps_harmonic_mean([1, 2], [1.0, 0.0])
    with pytest.raises(ValueError):
        teps_harmonic_mean([], [])
