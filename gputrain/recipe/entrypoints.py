"""The bundled training entrypoints, as plain data.

A recipe names its entrypoint by key; launchers run ``python -m <module>``. ``algorithm`` points at the
pydantic model that validates the recipe's ``algorithm:`` section ("module:Class"), imported only when a
recipe with that entrypoint is validated, so listing entrypoints costs nothing.
"""

from __future__ import annotations

from typing import NamedTuple


class Entrypoint(NamedTuple):
    module: str
    algorithm: str
    description: str


ENTRYPOINTS: dict[str, Entrypoint] = {
    "selftest": Entrypoint(
        "gputrain.train.selftest",
        "gputrain.recipe.algorithms.selftest:SelftestAlgorithm",
        "distributed check: ranks, all-reduce correctness and bandwidth",
    ),
    "gnn_coloring": Entrypoint(
        "gputrain.train.gnn_coloring",
        "gputrain.recipe.algorithms.gnn_coloring:GNNColoringAlgorithm",
        "GNN graph colouring (Potts loss), DDP, ONNX export",
    ),
    "bd3lm": Entrypoint(
        "gputrain.train.bd3lm",
        "gputrain.recipe.algorithms.diffusion:DiffusionAlgorithm",
        "BD3-LM block diffusion language model",
    ),
    "hdp": Entrypoint(
        "gputrain.train.hdp",
        "gputrain.recipe.algorithms.diffusion:DiffusionAlgorithm",
        "HDP hierarchical block diffusion (question / plan / execution)",
    ),
    "grpo_code": Entrypoint(
        "gputrain.train.grpo_code",
        "gputrain.recipe.algorithms.grpo:GRPOAlgorithm",
        "GRPO with a sandboxed code-execution reward",
    ),
    "grpo_math": Entrypoint(
        "gputrain.train.grpo_math",
        "gputrain.recipe.algorithms.grpo:GRPOAlgorithm",
        "GRPO on math with verified answers, FSDP full-shard",
    ),
    "gdpo": Entrypoint(
        "gputrain.train.gdpo",
        "gputrain.recipe.algorithms.grpo:GDPOAlgorithm",
        "GDPO multi-reward RL (per-reward group normalisation)",
    ),
}
