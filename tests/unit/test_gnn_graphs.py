"""Graph generators: DIMACS sizes, networkx-checked structure, planted colourings, determinism."""

from __future__ import annotations

import numpy as np
import pytest

nx = pytest.importorskip("networkx")
pytest.importorskip("torch")

from gputrain.recipe.algorithms.gnn_coloring import BENCHMARK_CHI, GNNColoringAlgorithm  # noqa: E402
from gputrain.train.gnn_coloring.graphs import (  # noqa: E402
    benchmark,
    collate,
    featurize,
    generate,
    mycielski,
    planted,
    queen,
)

# Nodes and undirected edges of the DIMACS instances (the .col files list 2x the queen edges).
DIMACS = {
    "myciel3": (11, 20),
    "myciel4": (23, 71),
    "myciel5": (47, 236),
    "myciel6": (95, 755),
    "myciel7": (191, 2360),
    "queen5_5": (25, 160),
    "queen6_6": (36, 290),
    "queen7_7": (49, 476),
    "queen8_8": (64, 728),
    "queen9_9": (81, 1056),
    "queen8_12": (96, 1368),
    "queen11_11": (121, 1980),
    "queen13_13": (169, 3328),
}


def _nx(n: int, edges: np.ndarray) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges.tolist())
    return g


@pytest.mark.parametrize("name", sorted(DIMACS))
def test_benchmark_sizes_match_dimacs_and_chi_table(name: str) -> None:
    g = benchmark(name)
    assert (g.num_nodes, g.num_edges) == DIMACS[name]
    assert g.chi == g.q == BENCHMARK_CHI[name]
    assert (g.edges[:, 0] < g.edges[:, 1]).all()


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_mycielski_is_isomorphic_to_networkx_and_triangle_free(k: int) -> None:
    n, edges = mycielski(k)
    ours = _nx(n, edges)
    assert nx.is_isomorphic(ours, nx.mycielski_graph(k + 1))
    assert sum(nx.triangles(ours).values()) == 0


def test_myciel3_needs_four_colours() -> None:
    n, edges = mycielski(3)
    g = _nx(n, edges)
    # No proper 3-colouring exists: brute force over 3^11 assignments is small enough.
    import itertools

    e = edges
    found = any(
        not (np.asarray(c)[e[:, 0]] == np.asarray(c)[e[:, 1]]).any() for c in itertools.product(range(3), repeat=n)
    )
    assert not found
    assert max(nx.greedy_color(g, strategy="DSATUR").values()) + 1 == 4


def test_queen_graph_is_rows_columns_diagonals() -> None:
    n, edges = queen(4, 5)
    g = _nx(n, edges)
    # Square (0, 0) attacks its row (4), column (3) and diagonal (3): degree 10.
    assert g.degree[0] == 4 + 3 + 3
    assert g.has_edge(0, 6) and not g.has_edge(0, 7)  # (1,1) yes; (1,2) no
    # Each row is a clique, so ω >= 5 = cols.
    assert max(len(c) for c in nx.find_cliques(g)) >= 5


def test_planted_partition_is_a_proper_colouring() -> None:
    rng = np.random.default_rng(0)
    edges, colours = planted(60, 4, 0.4, rng)
    assert len(edges) > 100
    assert not (colours[edges[:, 0]] == colours[edges[:, 1]]).any()
    assert np.bincount(colours).tolist() == [15, 15, 15, 15]


def test_generate_is_deterministic_and_seed_dependent() -> None:
    algo = GNNColoringAlgorithm(min_nodes=12, max_nodes=30).model_dump(mode="json")
    a, b = generate(algo, "train", 5), generate(algo, "train", 5)
    assert a.num_nodes == b.num_nodes and np.array_equal(a.edges, b.edges)
    c = generate({**algo, "graph_seed": 1}, "train", 5)
    assert not (a.num_nodes == c.num_nodes and np.array_equal(a.edges, c.edges))
    er = generate(algo, "val", 1)  # odd index: erdos_renyi
    assert er.kind == "erdos_renyi" and er.chi is None and 2 <= er.q <= algo["num_colors"]


def test_erdos_renyi_budget_is_the_degeneracy_bound_not_dsatur() -> None:
    """q must be a bound no compared heuristic computed: degeneracy + 1, which smallest-last greedy attains."""
    algo = GNNColoringAlgorithm(min_nodes=40, max_nodes=80, er_avg_degree=(6.0, 8.0)).model_dump(mode="json")
    differs = 0
    for i in range(1, 40, 2):  # odd indices: erdos_renyi
        er = generate(algo, "train", i)
        g = _nx(er.num_nodes, er.edges)
        assert er.q == max(nx.core_number(g).values()) + 1
        assert max(nx.greedy_color(g, strategy="smallest_last").values()) + 1 <= er.q  # q colours suffice
        differs += er.q != max(nx.greedy_color(g, strategy="DSATUR").values()) + 1
    assert differs  # not DSATUR's count under another name


def test_collate_offsets_edges_and_marks_unknown_chi() -> None:
    graphs = [featurize(benchmark("myciel3"), 8, 4, 0), featurize(benchmark("queen5_5"), 8, 4, 1)]
    batch = collate(graphs)
    assert batch.x.shape == (36, 6)
    assert batch.edge_index.shape == (2, 2 * (20 + 160))
    assert int(batch.edge_index[:, 40:].min()) == 11  # second graph's edges start after 11 nodes
    assert batch.node_graph.tolist() == [0] * 11 + [1] * 25
    assert batch.q.tolist() == [4, 5]


def test_algorithm_settings_reject_bad_ranges() -> None:
    with pytest.raises(ValueError, match="min_nodes"):
        GNNColoringAlgorithm(min_nodes=50, max_nodes=10)
    with pytest.raises(ValueError, match="unknown benchmark"):
        GNNColoringAlgorithm(benchmarks=["queen99_99"])
    with pytest.raises(ValueError, match="extra"):
        GNNColoringAlgorithm.model_validate({"num_colours": 4})
