"""``algorithm:`` settings of the GNN graph-colouring entrypoint (``gputrain.train.gnn_coloring``).

Sizes of the network come from the recipe's ``model:`` (``hidden_size``, ``num_layers``) and the number of
training / validation graphs from ``data:`` (``train_size``, ``val_size``); this section says which graphs
are generated and how the result is decoded, evaluated and exported.

``num_colors`` is the width of the colour head: the most colours any graph may use. Each graph carries its
own budget q (planted k, a benchmark's χ, degeneracy + 1 for Erdős–Rényi graphs); logits beyond q are
masked, so one network serves every q up to ``num_colors``.

The report scores held-out graphs of a ``test`` split (the validation split picks the best model) and the
benchmark graphs: the network's argmax alone, a Tabucol q-search seeded by the network against the same
search from a random start (``search_moves`` moves per q), and networkx's DSATUR and largest-first. The
same pair of searches runs again with ``short_search_moves`` per q: on graphs this small Tabucol reaches the
same colours from any start when it has thousands of moves, so only a short budget shows in colours what the
network's start is worth (issue 29).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Benchmark graphs built in code, with their chromatic numbers (DIMACS colouring instances).
BENCHMARK_CHI: dict[str, int] = {
    "myciel3": 4,
    "myciel4": 5,
    "myciel5": 6,
    "myciel6": 7,
    "myciel7": 8,
    "queen5_5": 5,
    "queen6_6": 7,
    "queen7_7": 7,
    "queen8_8": 9,
    "queen9_9": 10,
    "queen8_12": 12,
    "queen11_11": 11,
    "queen13_13": 13,
}


class GNNColoringAlgorithm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_colors: int = Field(default=16, ge=2, le=64, description="colour head width: the largest budget q")
    generators: list[Literal["planted", "erdos_renyi"]] = Field(
        default=["planted", "erdos_renyi"], min_length=1, description="train/val graph families, mixed evenly"
    )
    min_nodes: int = Field(default=20, ge=2, description="smallest generated graph")
    max_nodes: int = Field(default=100, ge=2, description="largest generated graph")
    planted_colors: tuple[int, int] = Field(default=(3, 8), description="range of k for planted graphs")
    planted_edge_prob: tuple[float, float] = Field(
        default=(0.15, 0.45), description="range of p: chance of an edge between nodes of different classes"
    )
    er_avg_degree: tuple[float, float] = Field(default=(2.0, 8.0), description="range of mean degree (ER)")
    graph_seed: int = Field(default=0, description="seed of the generated graphs (independent of train.seed)")
    random_features: int = Field(default=8, ge=0, description="random node features that break symmetry")
    dropout: float = Field(default=0.0, ge=0, lt=1)
    chromatic_head: bool = Field(default=False, description="also regress χ from a graph readout")
    chromatic_weight: float = Field(default=0.1, ge=0, description="weight of the χ regression loss")
    search_moves: int = Field(
        default=10000, ge=1, description="Tabucol moves per colour budget in the report's q-search"
    )
    short_search_moves: int = Field(
        default=20, ge=1,
        description="Tabucol moves per q of the report's second q-search, network- and random-seeded: a budget "
        "where the start matters (at search_moves both starts reach the same colours on small graphs)",
    )
    benchmarks: list[str] = Field(
        default_factory=lambda: list(BENCHMARK_CHI), description="benchmark graphs in the final report"
    )
    eval_graphs: int = Field(
        default=200, gt=0, description="held-out test-split graphs scored by the report (never validation ones)"
    )
    onnx_export: bool = Field(default=True, description="export the best model to model.onnx and check it")
    onnx_tolerance: float = Field(default=1e-4, gt=0, description="max |torch - onnxruntime| allowed")
    onnx_check_nodes: int = Field(
        default=10000, ge=2, description="nodes of the graph the exported model is checked on"
    )
    onnx_check_runs: int = Field(
        default=20, ge=1, description="onnxruntime runs of that check (default session: all intra-op threads)"
    )

    @model_validator(mode="after")
    def _check(self) -> GNNColoringAlgorithm:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes ({self.min_nodes}) is larger than max_nodes ({self.max_nodes})")
        lo, hi = self.planted_colors
        if not 2 <= lo <= hi <= self.num_colors:
            raise ValueError(f"planted_colors must satisfy 2 <= low <= high <= num_colors ({self.num_colors})")
        if hi > self.min_nodes:
            raise ValueError(f"planted_colors high ({hi}) exceeds min_nodes ({self.min_nodes})")
        plo, phi = self.planted_edge_prob
        if not 0 < plo <= phi <= 1:
            raise ValueError("planted_edge_prob must satisfy 0 < low <= high <= 1")
        dlo, dhi = self.er_avg_degree
        if not 0 <= dlo <= dhi:
            raise ValueError("er_avg_degree must satisfy 0 <= low <= high")
        unknown = [b for b in self.benchmarks if b not in BENCHMARK_CHI]
        if unknown:
            raise ValueError(f"unknown benchmark graph(s) {unknown}; known: {', '.join(BENCHMARK_CHI)}")
        return self
