"""Decoding, cheap local repair, and the evaluation report (GNN next to networkx greedy and DSATUR).

Three colourings per graph: the argmax at the graph's budget q (what the network learned), the argmax
after a few local-repair sweeps at the same q (each conflicting node moves to the colour fewest of its
neighbours use, ties broken by the network's probabilities), and a proper colouring obtained by giving
each node still in conflict the smallest colour its neighbours leave free (may exceed q). The first two are
scored by conflicts per edge against the random level 1/q; the last by colours used minus the reference
(χ when known, otherwise q), the same measure networkx's greedy and DSATUR get.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gputrain.train.gnn_coloring.graphs import Graph


def neighbours(graph: Graph) -> list[np.ndarray]:
    adj: list[list[int]] = [[] for _ in range(graph.num_nodes)]
    for u, v in graph.edges.tolist():
        adj[u].append(v)
        adj[v].append(u)
    return [np.asarray(a, dtype=np.int64) for a in adj]


def conflicts(graph: Graph, colours: np.ndarray) -> int:
    if graph.num_edges == 0:
        return 0
    return int((colours[graph.edges[:, 0]] == colours[graph.edges[:, 1]]).sum())


def repair(probs: np.ndarray, adj: list[np.ndarray], colours: np.ndarray, q: int, rounds: int) -> np.ndarray:
    colours = colours.copy()
    for _ in range(rounds):
        bad = [u for u in range(len(adj)) if adj[u].size and (colours[adj[u]] == colours[u]).any()]
        if not bad:
            break
        bad.sort(key=lambda u: -int((colours[adj[u]] == colours[u]).sum()))
        for u in bad:
            counts = np.bincount(colours[adj[u]], minlength=max(q, int(colours.max()) + 1))[:q]
            best = np.flatnonzero(counts == counts.min())
            colours[u] = int(best[np.argmax(probs[u, best])])
    return colours


def complete(adj: list[np.ndarray], colours: np.ndarray) -> np.ndarray:
    """Make the colouring proper: each node in conflict takes the smallest colour its neighbours leave."""
    colours = colours.copy()
    for u in range(len(adj)):
        if adj[u].size and (colours[adj[u]] == colours[u]).any():
            used = set(colours[adj[u]].tolist())
            colours[u] = next(c for c in range(len(adj) + 1) if c not in used)
    return colours


def networkx_colours(graph: Graph) -> dict[str, int]:
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from(graph.edges.tolist())
    out = {}
    for name, strategy in (("greedy", "largest_first"), ("dsatur", "DSATUR")):
        colouring = nx.greedy_color(g, strategy=strategy)
        out[name] = max(colouring.values(), default=-1) + 1
    return out


@dataclass
class GraphResult:
    name: str
    kind: str
    nodes: int
    edges: int
    q: int
    chi: int | None
    conflicts_argmax: int
    conflicts_repaired: int
    colours_gnn: int  # proper colouring from the GNN (argmax + repair + completion)
    colours_greedy: int
    colours_dsatur: int


def evaluate_graph(graph: Graph, probs: np.ndarray, rounds: int) -> GraphResult:
    """``probs``: (N, num_colors) masked softmax at the graph's budget q."""
    adj = neighbours(graph)
    argmax = probs[:, : graph.q].argmax(axis=1)
    repaired = repair(probs, adj, argmax, graph.q, rounds)
    proper = complete(adj, repaired)
    assert conflicts(graph, proper) == 0
    nxc = networkx_colours(graph)
    return GraphResult(
        name=graph.name,
        kind=graph.kind,
        nodes=graph.num_nodes,
        edges=graph.num_edges,
        q=graph.q,
        chi=graph.chi,
        conflicts_argmax=conflicts(graph, argmax),
        conflicts_repaired=conflicts(graph, repaired),
        colours_gnn=len(set(proper.tolist())),
        colours_greedy=nxc["greedy"],
        colours_dsatur=nxc["dsatur"],
    )


def summarize(results: list[GraphResult]) -> dict[str, Any]:
    """Micro-averaged conflicts per edge, zero-conflict shares at q, mean colours over the reference."""
    if not results:
        return {"graphs": 0}
    edges = sum(r.edges for r in results)
    with_edges = [r for r in results if r.edges]
    ref = [r.chi if r.chi is not None else r.q for r in results]
    return {
        "graphs": len(results),
        "edges": edges,
        "random_conflicts_per_edge": sum(r.edges / r.q for r in results) / max(1, edges),
        "conflicts_per_edge_argmax": sum(r.conflicts_argmax for r in results) / max(1, edges),
        "conflicts_per_edge_repaired": sum(r.conflicts_repaired for r in results) / max(1, edges),
        "zero_conflict_share_argmax": sum(r.conflicts_argmax == 0 for r in with_edges) / max(1, len(with_edges)),
        "zero_conflict_share": sum(r.conflicts_repaired == 0 for r in with_edges) / max(1, len(with_edges)),
        "colours_minus_ref_gnn": float(np.mean([r.colours_gnn - c for r, c in zip(results, ref, strict=True)])),
        "colours_minus_ref_greedy": float(np.mean([r.colours_greedy - c for r, c in zip(results, ref, strict=True)])),
        "colours_minus_ref_dsatur": float(np.mean([r.colours_dsatur - c for r, c in zip(results, ref, strict=True)])),
    }


def as_rows(results: list[GraphResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


def format_report(summaries: dict[str, dict[str, Any]], bench: list[GraphResult]) -> str:
    lines = ["", "== GNN colouring report (q = χ for benchmarks, planted k, or DSATUR count for ER) =="]
    head = f"{'set':<12}{'graphs':>7}{'random':>9}{'argmax':>9}{'repaired':>10}{'0-confl':>9}"
    head += f"{'gnn-ref':>9}{'greedy':>8}{'dsatur':>8}"
    lines.append(head)
    for name, s in summaries.items():
        if not s.get("graphs"):
            continue
        lines.append(
            f"{name:<12}{s['graphs']:>7}{s['random_conflicts_per_edge']:>9.4f}{s['conflicts_per_edge_argmax']:>9.4f}"
            f"{s['conflicts_per_edge_repaired']:>10.4f}{s['zero_conflict_share']:>9.2f}"
            f"{s['colours_minus_ref_gnn']:>9.2f}{s['colours_minus_ref_greedy']:>8.2f}{s['colours_minus_ref_dsatur']:>8.2f}"
        )
    lines.append("(conflicts per edge; 0-confl: share of graphs with zero conflicts at q after repair;")
    lines.append(" gnn/greedy/dsatur: mean colours used by a proper colouring minus χ or q)")
    if bench:
        lines.append(
            f"{'benchmark':<12}{'χ':>4}{'nodes':>7}{'edges':>7}{'argmax':>8}{'repair':>8}{'gnn':>5}"
            f"{'greedy':>8}{'dsatur':>8}"
        )
        for r in bench:
            lines.append(
                f"{r.name:<12}{r.q:>4}{r.nodes:>7}{r.edges:>7}{r.conflicts_argmax:>8}{r.conflicts_repaired:>8}"
                f"{r.colours_gnn:>5}{r.colours_greedy:>8}{r.colours_dsatur:>8}"
            )
    return "\n".join(lines)
