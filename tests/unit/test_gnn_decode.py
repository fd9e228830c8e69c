"""Tabucol, the q-search, and a report whose numbers measure the network (a collapsed one must look bad)."""

from __future__ import annotations

import numpy as np
import pytest

nx = pytest.importorskip("networkx")
torch = pytest.importorskip("torch")

from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm  # noqa: E402
from gputrain.train.gnn_coloring import decode, evaluate  # noqa: E402
from gputrain.train.gnn_coloring.graphs import Graph, benchmark, feature_dim, generate, planted  # noqa: E402
from gputrain.train.gnn_coloring.model import ColoringGNN  # noqa: E402
from gputrain.train.gnn_coloring.tabucol import Adjacency, fewest_colours, tabucol  # noqa: E402


def _adj(name: str) -> tuple[Graph, Adjacency]:
    g = benchmark(name)
    return g, Adjacency.from_edges(g.num_nodes, g.edges)


def _uniform(n: int, seed: int = 0):
    return lambda q: np.random.default_rng([seed, q]).random((n, q))


def test_tabucol_finds_chi_colourings_and_cannot_go_below() -> None:
    for name in ("myciel4", "queen6_6"):
        g, adj = _adj(name)
        found = tabucol(adj, np.random.default_rng(0).random((g.num_nodes, g.q)), g.q, 5000, np.random.default_rng(1))
        assert found.conflicts == 0 and decode.conflicts(g, found.colours) == 0 and found.colours.max() < g.q
    g, adj = _adj("myciel3")  # χ = 4 (brute-forced in test_gnn_graphs): 3 colours must leave a conflict
    assert tabucol(adj, np.random.default_rng(0).random((11, 3)), 3, 2000, np.random.default_rng(1)).conflicts > 0


def test_q_search_goes_down_to_the_bound_and_up_from_an_infeasible_start() -> None:
    g, adj = _adj("queen6_6")  # χ = 7; DSATUR needs 9
    down = fewest_colours(adj, _uniform(g.num_nodes), 10, lower_bound=7, max_moves=5000, seed=0)
    assert down.colours == 7 and down.tried == [10, 9, 8, 7]  # stops at the lower bound: no failing search
    up = fewest_colours(adj, _uniform(g.num_nodes), 5, lower_bound=1, max_moves=300, seed=0)
    assert up.tried[0] == 5 and up.colours >= 7 and up.moves_at_start == 301
    assert decode.conflicts(g, up.colouring) == 0
    starved = fewest_colours(adj, _uniform(g.num_nodes), 3, lower_bound=1, max_moves=1, seed=0)
    assert starved.tried[-1] <= g.num_nodes and decode.conflicts(g, starved.colouring) == 0  # ends, proper


def test_a_perfect_seed_needs_no_moves_and_a_search_is_seeded_by_its_preferences() -> None:
    rng = np.random.default_rng(0)
    edges, hidden = planted(40, 4, 0.4, rng)
    adj = Adjacency.from_edges(40, edges)
    oracle = np.eye(4)[hidden]
    found = tabucol(adj, oracle, 4, 1000, np.random.default_rng(0))
    assert found.moves == 0 and np.array_equal(found.colours, hidden)
    random_start = tabucol(adj, rng.random((40, 4)), 4, 1000, np.random.default_rng(0))
    assert random_start.conflicts == 0 and random_start.moves > 0


def test_erdos_renyi_budget_and_lower_bounds_in_the_rows() -> None:
    algo = GNNColoringAlgorithm(min_nodes=20, max_nodes=30).model_dump(mode="json")
    g = generate(algo, "test", 1)
    assert g.kind == "erdos_renyi"
    row = decode.evaluate_graph(g, _uniform(g.num_nodes, 5), search_moves=500)
    core = max(nx.core_number(decode.to_networkx(g.num_nodes, g.edges)).values()) + 1
    assert (row.q, row.q_source) == (core, "degeneracy+1")
    assert row.lower_bound <= row.colours_network_search <= row.colours_dsatur + 1


def test_held_out_graphs_are_not_the_validation_graphs() -> None:
    settings = GNNColoringAlgorithm(min_nodes=12, max_nodes=40, planted_colors=(3, 5))
    algo = settings.model_dump(mode="json")
    held_out = evaluate.held_out_graphs(settings, 8)
    val = [generate(algo, "val", i) for i in range(8)]
    assert all(h.x is not None for h in held_out)
    assert all(not np.array_equal(h.edges, v.edges) for h, v in zip(held_out, val, strict=True))


def _settings() -> GNNColoringAlgorithm:
    return GNNColoringAlgorithm(
        num_colors=8,
        min_nodes=16,
        max_nodes=30,
        planted_colors=(3, 4),
        random_features=4,
        eval_graphs=8,
        benchmarks=["myciel4", "queen5_5"],
        search_moves=1500,
    )


def test_collapsed_network_does_not_look_good(capsys: pytest.CaptureFixture[str]) -> None:
    """The old report credited local repair (a collapsed model scored 0.0077 conflicts per edge). Now the
    network alone is scored, and the search it seeds is held against the same search from a random start."""
    collapsed = ColoringGNN(feature_dim(4), 16, 2, 8)
    with torch.no_grad():
        collapsed.head.weight.zero_()
        collapsed.head.bias.copy_(torch.tensor([9.0] + [0.0] * 7))  # every node: colour 0
    out = evaluate.report(collapsed, _settings(), torch.device("cpu"))
    for family in ("test", "planted", "erdos_renyi", "mycielski", "queen"):
        summary = out["summary"][family]
        assert summary["network_conflicts_per_edge"] == 1.0 > summary["random_conflicts_per_edge"], family
        assert summary["network_proper_share"] == 0.0
    assert not out["goals"]["beats_random_search"]
    assert "beats random-seeded search: NO" in capsys.readouterr().out
    assert "repair" not in str(out)


def test_a_network_that_knows_the_colouring_beats_the_random_start() -> None:
    """The measures can tell a useful network from a useless one: seeded with the hidden planted colouring,
    the search needs no moves at q, and the goals say it beats the random start."""
    rows = []
    for i in range(6):
        edges, hidden = planted(30, 4, 0.5, np.random.default_rng(i))
        graph = Graph(f"planted{i}", "planted", 30, edges, q=4, chi=None)
        oracle = np.eye(4)[hidden]
        rows.append(decode.evaluate_graph(graph, lambda q, o=oracle: np.pad(o, ((0, 0), (0, 4)))[:, :q], 2000,
                                          short_moves=3))
    summary = decode.summarize(rows)
    # with 3 moves per q the start decides the colours (issue 29): the oracle's start needs none at q
    assert summary["colours_network_short_search"] < summary["colours_random_short_search"]
    assert summary["colours_saved_vs_random_short_search"] > 0
    assert summary["network_short_search_vs_random_short_search"]["more"] == 0
    assert summary["network_conflicts_per_edge"] == 0.0 and summary["network_proper_share"] == 1.0
    assert summary["moves_network_search_median"] == 0 < summary["moves_random_search_median"]
    assert summary["network_search_moves_vs_random_search"]["fewer"] == 6
    assert evaluate.goals({"planted": summary}, rows)["beats_random_search"]
