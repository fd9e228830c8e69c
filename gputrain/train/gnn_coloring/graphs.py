"""Graphs with a known colour budget: planted k-colourable, Erdős–Rényi, Mycielski and queen graphs.

Every graph carries ``q``, a number of colours with which a proper colouring is known to exist, and
``chi`` when the chromatic number itself is known: benchmark graphs (χ from the DIMACS instances), planted
graphs (χ <= k; ``chi`` is left None because the planted partition only bounds it), Erdős–Rényi graphs
(q = degeneracy + 1, the Szekeres–Wilf bound: an upper bound that no colouring heuristic the report compares
with has computed, unlike the DSATUR count used before). Generation is a pure function of (seed, split,
index), so every rank builds the same data set without talking to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gputrain.recipe.algorithms.gnn_coloring import BENCHMARK_CHI

_SPLITS = {"train": 0, "val": 1, "test": 2}


@dataclass
class Graph:
    name: str
    kind: str  # planted | erdos_renyi | mycielski | queen
    num_nodes: int
    edges: np.ndarray  # (m, 2) int64, u < v, unique
    q: int  # colours known to suffice
    chi: int | None  # chromatic number when known
    x: torch.Tensor | None = None  # node features, filled by ``featurize``

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    def edge_index(self) -> torch.Tensor:
        """Both directions, (2, 2m), the form message passing consumes."""
        e = torch.from_numpy(self.edges).long().t()
        return torch.cat([e, e.flip(0)], dim=1)


def _unique_edges(pairs: np.ndarray) -> np.ndarray:
    if pairs.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    lo, hi = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    keep = lo != hi
    out = np.unique(np.stack([lo[keep], hi[keep]], axis=1), axis=0)
    return out.astype(np.int64)


def planted(n: int, k: int, p: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Edges only between different classes of a hidden balanced k-partition: k colours suffice."""
    colours = rng.permutation(np.arange(n) % k)
    iu, ju = np.triu_indices(n, 1)
    mask = (colours[iu] != colours[ju]) & (rng.random(iu.shape[0]) < p)
    return _unique_edges(np.stack([iu[mask], ju[mask]], axis=1)), colours


def erdos_renyi(n: int, p: float, rng: np.random.Generator) -> np.ndarray:
    iu, ju = np.triu_indices(n, 1)
    mask = rng.random(iu.shape[0]) < p
    return _unique_edges(np.stack([iu[mask], ju[mask]], axis=1))


def sparse_random(n: int, avg_degree: float, rng: np.random.Generator) -> np.ndarray:
    """About n·avg_degree/2 uniform random edges without the O(n²) pair list ``erdos_renyi`` builds: for
    graphs of many thousands of nodes (the ONNX check)."""
    pairs = rng.integers(0, n, size=(int(n * avg_degree / 2), 2))
    return _unique_edges(pairs)


def mycielski(k: int) -> tuple[int, np.ndarray]:
    """DIMACS ``myciel<k>``: Mycielskian applied k-1 times to K2 (χ = k + 1; myciel3 has 11 nodes, 20 edges)."""
    n, edges = 2, [(0, 1)]
    for _ in range(k - 1):
        # Copies u_i = n + i of each v_i, hub w = 2n: u_i joins v_i's neighbours, w joins every u_i.
        new = list(edges)
        for a, b in edges:
            new += [(a, n + b), (b, n + a)]
        new += [(n + i, 2 * n) for i in range(n)]
        n, edges = 2 * n + 1, new
    return n, _unique_edges(np.asarray(edges, dtype=np.int64))


def queen(rows: int, cols: int) -> tuple[int, np.ndarray]:
    """DIMACS ``queen<r>_<c>``: squares of an r×c board joined when a queen on one attacks the other."""
    r, c = np.divmod(np.arange(rows * cols), cols)
    iu, ju = np.triu_indices(rows * cols, 1)
    same = (r[iu] == r[ju]) | (c[iu] == c[ju]) | (np.abs(r[iu] - r[ju]) == np.abs(c[iu] - c[ju]))
    return rows * cols, _unique_edges(np.stack([iu[same], ju[same]], axis=1))


def benchmark(name: str) -> Graph:
    if name not in BENCHMARK_CHI:
        raise KeyError(name)
    chi = BENCHMARK_CHI[name]
    if name.startswith("myciel"):
        n, edges = mycielski(int(name[len("myciel") :]))
        kind = "mycielski"
    else:
        rows, cols = (int(v) for v in name[len("queen") :].split("_"))
        n, edges = queen(rows, cols)
        kind = "queen"
    return Graph(name=name, kind=kind, num_nodes=n, edges=edges, q=chi, chi=chi)


def to_networkx(num_nodes: int, edges: np.ndarray) -> Any:
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(range(num_nodes))
    g.add_edges_from(edges.tolist())
    return g


def degeneracy_bound(num_nodes: int, edges: np.ndarray) -> int:
    """χ <= degeneracy + 1 (colour greedily in smallest-last order): a bound with no colouring search in it."""
    import networkx as nx

    cores = nx.core_number(to_networkx(num_nodes, edges))
    return max(cores.values(), default=0) + 1


def clique_bound(num_nodes: int, edges: np.ndarray) -> int:
    """χ >= ω: the largest clique (exact; milliseconds on the generated and benchmark graphs)."""
    import networkx as nx

    return int(nx.max_weight_clique(to_networkx(num_nodes, edges), weight=None)[1]) if num_nodes else 0


def generate(algo: dict[str, Any], split: str, index: int) -> Graph:
    """Graph ``index`` of ``split``: the same on every rank and every run with the same graph_seed."""
    rng = np.random.default_rng([int(algo["graph_seed"]), _SPLITS[split], index])
    kinds = list(algo["generators"])
    kind = kinds[index % len(kinds)]
    n = int(rng.integers(int(algo["min_nodes"]), int(algo["max_nodes"]) + 1))
    if kind == "planted":
        lo, hi = algo["planted_colors"]
        k = int(rng.integers(int(lo), int(hi) + 1))
        p = float(rng.uniform(*algo["planted_edge_prob"]))
        edges, _ = planted(n, k, p, rng)
        q, chi = k, None
    else:
        deg = float(rng.uniform(*algo["er_avg_degree"]))
        edges = erdos_renyi(n, min(1.0, deg / max(1, n - 1)), rng)
        q = min(max(2, degeneracy_bound(n, edges)), int(algo["num_colors"]))  # capped: then maybe too few
        chi = None
    return Graph(name=f"{split}{index}", kind=kind, num_nodes=n, edges=edges, q=max(q, 1), chi=chi)


def featurize(graph: Graph, num_colors: int, random_features: int, seed: int) -> Graph:
    """Node features: log degree, the budget q / num_colors, and fixed random values (symmetry breaking)."""
    gen = torch.Generator().manual_seed(seed)
    deg = torch.zeros(graph.num_nodes)
    if graph.num_edges:
        e = torch.from_numpy(graph.edges)
        deg.index_add_(0, e.reshape(-1), torch.ones(e.numel()))
    cols = [torch.log1p(deg) / math.log(2.0 + graph.num_nodes), torch.full_like(deg, graph.q / num_colors)]
    feats = torch.stack(cols, dim=1)
    if random_features:
        feats = torch.cat([feats, torch.randn(graph.num_nodes, random_features, generator=gen)], dim=1)
    graph.x = feats
    return graph


def features_at_budget(graph: Graph, q: int, num_colors: int) -> torch.Tensor:
    """The graph's features with the budget column set to q (capped at the head's width): the network's
    input when a q-search asks it for a colouring with q colours."""
    assert graph.x is not None, "featurize() the graph first"
    x = graph.x.clone()
    x[:, 1] = min(q, num_colors) / num_colors
    return x


def feature_dim(random_features: int) -> int:
    return 2 + random_features


@dataclass
class Batch:
    x: torch.Tensor  # (N, F)
    edge_index: torch.Tensor  # (2, 2M)
    node_graph: torch.Tensor  # (N,) graph id of each node
    q: torch.Tensor  # (G,) colour budget per graph
    chi: torch.Tensor  # (G,) float, NaN when unknown
    num_graphs: int

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.x.to(device),
            self.edge_index.to(device),
            self.node_graph.to(device),
            self.q.to(device),
            self.chi.to(device),
            self.num_graphs,
        )


def collate(graphs: list[Graph]) -> Batch:
    xs, eis, owner, offset = [], [], [], 0
    for i, g in enumerate(graphs):
        assert g.x is not None, "featurize() the graph first"
        xs.append(g.x)
        eis.append(g.edge_index() + offset)
        owner.append(torch.full((g.num_nodes,), i, dtype=torch.long))
        offset += g.num_nodes
    chi = [float(g.chi) if g.chi is not None else float("nan") for g in graphs]
    return Batch(
        x=torch.cat(xs),
        edge_index=torch.cat(eis, dim=1) if eis else torch.zeros((2, 0), dtype=torch.long),
        node_graph=torch.cat(owner),
        q=torch.tensor([g.q for g in graphs], dtype=torch.long),
        chi=torch.tensor(chi),
        num_graphs=len(graphs),
    )
