"""One graph, five colourings: what the network alone does, and what a search gets with and without it.

- the network alone: the argmax of its probabilities at the graph's budget q (χ for benchmarks, the planted
  k, degeneracy + 1 for Erdős–Rényi), scored by conflicting edges; nothing repairs it;
- network-seeded search: the Tabucol q-search (``tabucol.fewest_colours``) starting from the network's
  argmax, ties broken by its probabilities, the network rerun at each q;
- random-seeded search: the same search, same seed and move budget, from uniform random preferences;
- networkx's DSATUR and largest-first greedy colourings.

The searches are scored by the colours of the best proper colouring they find and by the moves they
needed for a proper colouring at q. Both searches run twice: with the full move budget, and with a short one
(``short_moves``) where the start matters: with thousands of moves Tabucol finds the same colourings of a
12–40-node graph from any start, so only the short budget shows the network's start in colours. The
difference between the two searches is what the network adds: a collapsed network (every node the same
colour) seeds a search no better than a random start.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gputrain.train.gnn_coloring.graphs import Graph, clique_bound, to_networkx
from gputrain.train.gnn_coloring.tabucol import Adjacency, fewest_colours

#: Where each family's budget q comes from (the network's input and the argmax's colour count).
Q_SOURCE = {"planted": "planted k", "erdos_renyi": "degeneracy+1", "mycielski": "χ", "queen": "χ"}


def conflicts(graph: Graph, colours: np.ndarray) -> int:
    if graph.num_edges == 0:
        return 0
    return int((colours[graph.edges[:, 0]] == colours[graph.edges[:, 1]]).sum())


def networkx_colours(graph: Graph) -> dict[str, int]:
    """Colours used by networkx's DSATUR and largest-first greedy colourings (both always proper)."""
    import networkx as nx

    g = to_networkx(graph.num_nodes, graph.edges)
    out = {}
    for name, strategy in (("dsatur", "DSATUR"), ("largest_first", "largest_first")):
        out[name] = max(nx.greedy_color(g, strategy=strategy).values(), default=-1) + 1
    return out


@dataclass
class GraphResult:
    name: str
    kind: str
    nodes: int
    edges: int
    q: int  # the budget the network is given
    q_source: str
    chi: int | None
    lower_bound: int  # χ when known, else the largest clique
    network_conflicts: int  # conflicting edges of the network's argmax at q
    colours_network_search: int
    colours_random_search: int
    moves_network_search: int  # moves to a proper colouring at q; search_moves + 1 when none was found
    moves_random_search: int
    colours_dsatur: int
    colours_largest_first: int
    colours_network_short_search: int | None = None  # the same two searches with the short move budget
    colours_random_short_search: int | None = None


def graph_seed(graph: Graph) -> int:
    return zlib.crc32(graph.name.encode())


def random_preferences(num_nodes: int, seed: int) -> Callable[[int], np.ndarray]:
    return lambda q: np.random.default_rng([seed, q, 1]).random((num_nodes, q))


def evaluate_graph(graph: Graph, network_probs: Callable[[int], np.ndarray], search_moves: int,
                   short_moves: int | None = None) -> GraphResult:
    """``network_probs(q)``: the network's (N, q) colour probabilities when its input says budget q;
    ``short_moves``: also run both searches with that many moves per q."""
    adj = Adjacency.from_edges(graph.num_nodes, graph.edges)
    lower = graph.chi if graph.chi is not None else clique_bound(graph.num_nodes, graph.edges)
    seed = graph_seed(graph)
    argmax = network_probs(graph.q).argmax(axis=1)
    searches = {
        "network": fewest_colours(adj, network_probs, graph.q, lower, search_moves, seed),
        "random": fewest_colours(adj, random_preferences(graph.num_nodes, seed), graph.q, lower, search_moves, seed),
    }
    if short_moves is not None:
        searches["network_short"] = fewest_colours(adj, network_probs, graph.q, lower, short_moves, seed)
        searches["random_short"] = fewest_colours(adj, random_preferences(graph.num_nodes, seed), graph.q, lower,
                                                  short_moves, seed)
    for found in searches.values():
        assert conflicts(graph, found.colouring) == 0, f"{graph.name}: the q-search returned an improper colouring"
    short = {"network_short", "random_short"} <= set(searches)
    nxc = networkx_colours(graph)
    return GraphResult(
        name=graph.name,
        kind=graph.kind,
        nodes=graph.num_nodes,
        edges=graph.num_edges,
        q=graph.q,
        q_source=Q_SOURCE.get(graph.kind, "given"),
        chi=graph.chi,
        lower_bound=lower,
        network_conflicts=conflicts(graph, argmax),
        colours_network_search=searches["network"].colours,
        colours_random_search=searches["random"].colours,
        moves_network_search=searches["network"].moves_at_start,
        moves_random_search=searches["random"].moves_at_start,
        colours_dsatur=nxc["dsatur"],
        colours_largest_first=nxc["largest_first"],
        colours_network_short_search=searches["network_short"].colours if short else None,
        colours_random_short_search=searches["random_short"].colours if short else None,
    )


def compare_counts(a: list[int], b: list[int]) -> dict[str, int]:
    return {
        "fewer": sum(x < y for x, y in zip(a, b, strict=True)),
        "same": sum(x == y for x, y in zip(a, b, strict=True)),
        "more": sum(x > y for x, y in zip(a, b, strict=True)),
    }


def summarize(results: list[GraphResult]) -> dict[str, Any]:
    """Per-set figures: the network alone (micro-averaged conflicts per edge at q against the random level
    1/q), mean colours of every method, and head-to-head counts of the network-seeded search (colours
    against DSATUR and the random start; moves to a proper colouring at q against the random start, with
    medians: a failed search counts its whole budget, so means would measure the failures)."""
    if not results:
        return {"graphs": 0}
    edges = sum(r.edges for r in results)
    with_edges = [r for r in results if r.edges]
    net = [r.colours_network_search for r in results]

    def mean(field: str) -> float:
        return float(np.mean([getattr(r, field) for r in results]))

    return {
        "graphs": len(results),
        "edges": edges,
        "q_source": sorted({r.q_source for r in results}),
        "network_conflicts_per_edge": sum(r.network_conflicts for r in results) / max(1, edges),
        "random_conflicts_per_edge": sum(r.edges / r.q for r in results) / max(1, edges),
        "network_proper_share": sum(r.network_conflicts == 0 for r in with_edges) / max(1, len(with_edges)),
        "colours_network_search": mean("colours_network_search"),
        "colours_random_search": mean("colours_random_search"),
        "colours_dsatur": mean("colours_dsatur"),
        "colours_largest_first": mean("colours_largest_first"),
        "colours_lower_bound": mean("lower_bound"),
        "moves_network_search_median": float(np.median([r.moves_network_search for r in results])),
        "moves_random_search_median": float(np.median([r.moves_random_search for r in results])),
        "network_search_moves_vs_random_search": compare_counts(
            [r.moves_network_search for r in results], [r.moves_random_search for r in results]
        ),
        # what the network adds over a random start of the same search at the same move budget (issue 29)
        "colours_saved_vs_random_search": float(np.mean([r.colours_random_search - r.colours_network_search
                                                         for r in results])),
        "moves_saved_vs_random_search_median": float(np.median([r.moves_random_search - r.moves_network_search
                                                                for r in results])),
        "network_search_vs_dsatur": compare_counts(net, [r.colours_dsatur for r in results]),
        "network_search_vs_random_search": compare_counts(net, [r.colours_random_search for r in results]),
        **_short_summary(results),
    }


def _short_summary(results: list[GraphResult]) -> dict[str, Any]:
    """The short-budget pair of searches (where the start matters), when they ran on every graph."""
    net = [r.colours_network_short_search for r in results]
    rand = [r.colours_random_short_search for r in results]
    if any(v is None for v in net + rand):
        return {}
    n, r = [int(v) for v in net if v is not None], [int(v) for v in rand if v is not None]
    return {
        "colours_network_short_search": float(np.mean(n)),
        "colours_random_short_search": float(np.mean(r)),
        "colours_saved_vs_random_short_search": float(np.mean(r)) - float(np.mean(n)),
        "network_short_search_vs_random_short_search": compare_counts(n, r),
    }


def as_rows(results: list[GraphResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
