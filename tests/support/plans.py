"""Plans for tests, made by the real planner: a recipe given as data → :class:`JobPlan` / ``plan.json``.

Tests that launch a training need a ``plan.json``; writing one by hand would test a format nothing else
produces. These helpers write the recipe to a temporary YAML file and plan it like ``gputrain plan`` does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from gputrain.contract.plan import JobPlan
from gputrain.planner import make_plan

TOY_RECIPE: dict[str, Any] = {
    "name": "toy",
    "entrypoint": "selftest",
    "model": {"name": "toy"},
    "train": {"batch_size": 8, "epochs": 3, "learning_rate": 0.01},
    "distributed": {"backend": "gloo"},
}


def plan_recipe(recipe: dict[str, Any], *, gpu: str = "cpu", gpus: int = 2, nodes: int = 1, **kw: Any) -> JobPlan:
    """Plan ``recipe`` (a recipe as data) for ``gpus`` × ``gpu`` on ``nodes`` node(s)."""
    with tempfile.TemporaryDirectory(prefix="gputrain-test-recipe-") as folder:
        path = Path(folder) / f"{recipe.get('name', 'recipe')}.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        return make_plan(path, gpu=gpu, gpus_per_node=gpus, nodes=nodes, **kw)


def write_plan(job_dir: Path, recipe: dict[str, Any], **kw: Any) -> Path:
    """``job_dir/plan.json`` for ``recipe``; returns its path."""
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / "plan.json"
    path.write_text(plan_recipe(recipe, **kw).to_json())
    return path


def toy_recipe(**train: Any) -> dict[str, Any]:
    """A recipe for scripts that read only ``train:`` (runtime tests): the selftest entrypoint's schema."""
    return {**TOY_RECIPE, "train": {**TOY_RECIPE["train"], **train}}
