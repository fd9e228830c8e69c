"""Neighbour sums in two forms: ``index_add_`` for training, sorted segments for the exported ONNX model.

Why two: the dynamo exporter writes ``index_add_`` as ``ScatterND(reduction="add")``, and onnxruntime's
CPU kernel for it races under the default intra-op thread pool (wrong, run-to-run different outputs on
graphs of a few thousand nodes; onnxruntime issues #18048 and #23396). The sorted-segment form uses only
ops every runtime computes deterministically: edges are sorted by destination (``TopK`` on unique keys), each node's
run of edges is found by a binary search written as ``Gather``/``Less``/``Where`` (no ``searchsorted``
in ONNX), and a run's sum is the difference of two entries of a float64 ``CumSum`` (float64 so the
difference of two large prefix sums keeps float32 precision on graphs of any size).

Training keeps ``index_add_``: on CPU a ``cumsum`` over (edges, hidden) costs about as much as the whole
scatter it replaces and doubles the aggregation's backward (benchmarks/RESULTS.md). Both forms compute
the same sum; ``tests/unit/test_gnn_export.py`` holds them (and onnxruntime's output) to 1e-4.
"""

from __future__ import annotations

from typing import Protocol

import torch

#: Binary-search rounds: enough for 2**32 edges. The loop is unrolled into the exported graph.
SEARCH_ROUNDS = 32


class Aggregator(Protocol):
    def degree(self, dtype: torch.dtype) -> torch.Tensor: ...

    def neighbour_sum(self, h: torch.Tensor) -> torch.Tensor: ...


class ScatterAggregator:
    """Σ_{(u→v)} h[u] per destination v with ``index_add_`` (fast to train, atomics on GPU)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int) -> None:
        self.src, self.dst, self.num_nodes = edge_index[0], edge_index[1], num_nodes

    def degree(self, dtype: torch.dtype) -> torch.Tensor:
        ones = torch.ones_like(self.dst, dtype=dtype)
        return torch.zeros(self.num_nodes, dtype=dtype, device=self.dst.device).index_add_(0, self.dst, ones)

    def neighbour_sum(self, h: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(h).index_add_(0, self.dst, h.index_select(0, self.src))


def lower_bound(sorted_values: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Number of ``sorted_values`` below each query (``torch.searchsorted``, left side), as a branchless
    binary search over powers of two: integer Add/Min/Gather/Less/Where only, so the exported graph has
    no float division (which would lose integers above 2**24)."""
    n = sorted_values.shape[0]
    sentinel = torch.full((1,), torch.iinfo(sorted_values.dtype).max, dtype=sorted_values.dtype)
    padded = torch.cat([sorted_values, sentinel.to(sorted_values.device)])  # a step past the end reads it
    pos = torch.zeros_like(queries)
    for k in reversed(range(SEARCH_ROUNDS)):
        step = pos + 2**k
        below = padded[torch.clamp(step - 1, max=n)] < queries
        pos = torch.where(below, step, pos)
    return pos


class SortedSegmentAggregator:
    """The same sums from edges sorted by destination: prefix sums, no scatter (deterministic in ONNX)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int) -> None:
        dst = edge_index[1]
        # Unique keys (destination, then position) make any sort give one order; the exporter has no
        # stable sort.
        order = torch.argsort(dst * dst.shape[0] + torch.arange(dst.shape[0], device=dst.device))
        # Row 0 of the gathered messages is a zero row (index 0 of the padded features below), so the
        # prefix sums start with the empty sum without concatenating an (edges, hidden) tensor.
        self.src = torch.cat([dst.new_zeros(1), edge_index[0].index_select(0, order) + 1])
        nodes = torch.arange(num_nodes + 1, dtype=dst.dtype, device=dst.device)
        self.bounds = lower_bound(dst.index_select(0, order), nodes)  # node v's edges: bounds[v]:bounds[v+1]

    def degree(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.bounds[1:] - self.bounds[:-1]).to(dtype)

    def neighbour_sum(self, h: torch.Tensor) -> torch.Tensor:
        padded = torch.cat([h.new_zeros((1, h.shape[1])), h]).double()  # cast (nodes, hidden), not edges
        prefix = torch.cumsum(padded.index_select(0, self.src), dim=0)  # prefix[i]: sum of the first i edges
        return (prefix.index_select(0, self.bounds[1:]) - prefix.index_select(0, self.bounds[:-1])).to(h.dtype)
