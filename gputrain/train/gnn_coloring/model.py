"""Message-passing colouring network and the Potts loss, in plain PyTorch.

Aggregation is a degree-normalised neighbour sum (``aggregate``): ``index_add_`` while training, sorted
segments when ``segment_aggregation`` is set, which ``export.export_onnx`` does so that the ONNX graph has
no scatter (onnxruntime's ``ScatterND(reduction="add")`` races under its default thread pool). No
softmax/max aggregations, no PyG: the exported graph has two inputs, ``x`` (N, F) and ``edge_index``
(2, E), both dynamic.
"""

from __future__ import annotations

import torch
from torch import nn

from gputrain.train.gnn_coloring.aggregate import Aggregator, ScatterAggregator, SortedSegmentAggregator


class MessageLayer(nn.Module):
    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__()
        self.message = nn.Linear(hidden, hidden)
        self.update = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, hidden)
        )
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, aggregator: Aggregator, inv_deg: torch.Tensor) -> torch.Tensor:
        agg = aggregator.neighbour_sum(self.message(h)) * inv_deg
        return self.norm(h + self.update(torch.cat([h, agg], dim=-1)))


class ColoringGNN(nn.Module):
    """Node features → colour logits (N, num_colors); optional graph readout for a χ estimate."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        layers: int,
        num_colors: int,
        dropout: float = 0.0,
        chromatic_head: bool = False,
    ) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.layers = nn.ModuleList(MessageLayer(hidden, dropout) for _ in range(layers))
        self.head = nn.Linear(hidden, num_colors)
        self.chi_head = nn.Linear(hidden, 1) if chromatic_head else None
        self.num_colors = num_colors
        self.segment_aggregation = False  # not a weight: export_onnx sets it on its copy

    def encode(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        kind = SortedSegmentAggregator if self.segment_aggregation else ScatterAggregator
        aggregator = kind(edge_index, x.shape[0])
        inv_deg = (1.0 / aggregator.degree(x.dtype).clamp(min=1.0)).unsqueeze(-1)
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, aggregator, inv_deg)
        return h

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, node_graph: torch.Tensor | None = None, num_graphs: int = 0
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits; with ``node_graph`` also the χ estimate per graph. Training must come through here, not
        ``encode``: DDP only all-reduces gradients of a backward whose forward ran through its wrapper."""
        h = self.encode(x, edge_index)
        if node_graph is None:
            return self.head(h)
        return self.head(h), self.chromatic(h, node_graph, num_graphs)

    def chromatic(self, h: torch.Tensor, node_graph: torch.Tensor, num_graphs: int) -> torch.Tensor:
        """Mean-pooled readout → predicted χ per graph (only with ``chromatic_head``)."""
        assert self.chi_head is not None
        counts = torch.zeros(num_graphs, device=h.device, dtype=h.dtype).index_add_(
            0, node_graph, torch.ones_like(node_graph, dtype=h.dtype)
        )
        pooled = torch.zeros(num_graphs, h.shape[1], device=h.device, dtype=h.dtype).index_add_(0, node_graph, h)
        pooled = pooled / counts.clamp(min=1).unsqueeze(-1)
        return nn.functional.softplus(self.chi_head(pooled).squeeze(-1)) + 1.0


def masked_probs(logits: torch.Tensor, node_q: torch.Tensor) -> torch.Tensor:
    """Softmax over each node's first q colours (the graph's budget); later colours get probability 0."""
    cols = torch.arange(logits.shape[1], device=logits.device)
    masked = logits.float().masked_fill(cols.unsqueeze(0) >= node_q.unsqueeze(1), float("-inf"))
    return torch.softmax(masked, dim=-1)


def potts_loss(
    logits: torch.Tensor, edge_index: torch.Tensor, node_graph: torch.Tensor, q: torch.Tensor, num_graphs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected share of monochromatic edges per graph, averaged over graphs with edges.

    Σ_c p_u(c)·p_v(c) is the probability that edge (u, v) is monochromatic when colours are drawn from
    the softmax; it does not change when colours are relabelled. Uniform probabilities give 1/q.
    Returns (mean over graphs, per-graph values).
    """
    p = masked_probs(logits, q[node_graph])
    src, dst = edge_index[0], edge_index[1]
    mono = (p[src] * p[dst]).sum(-1)
    edge_graph = node_graph[src]
    per_graph = torch.zeros(num_graphs, device=p.device).index_add_(0, edge_graph, mono)
    counts = torch.zeros(num_graphs, device=p.device).index_add_(0, edge_graph, torch.ones_like(mono))
    has_edges = counts > 0
    per_graph = torch.where(has_edges, per_graph / counts.clamp(min=1), torch.zeros_like(per_graph))
    loss = per_graph.sum() / has_edges.sum().clamp(min=1)
    return loss, per_graph
