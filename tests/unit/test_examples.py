"""The examples a user copies must keep working."""

from __future__ import annotations

import pytest

from gputrain.planner import make_plan
from gputrain.planner.validate import validate_recipe_file
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"


def test_example_recipe_validates_and_plans_with_its_own_profile() -> None:
    assert "my_gnn" in validate_recipe_file(EXAMPLES / "my_recipe.yaml")
    plan = make_plan(EXAMPLES / "my_recipe.yaml", gpu="A100", gpus_per_node=4)
    assert plan.profile == "A100-80GB" and plan.recipe.train.batch_size == 96
    assert plan.recipe.train.epochs == 40  # overrides the base recipe's 100
    assert plan.learning_rate == pytest.approx(2e-3 * (384 / 256) ** 0.5)


def test_example_cluster_profile_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(EXAMPLES / "clusters.yaml"))
    plan = make_plan(EXAMPLES / "my_recipe.yaml", cluster="mylab", nodes=2)
    assert plan.gpu.name == "A100-80GB" and plan.gpus_per_node == 4 and plan.nodes == 2
    assert plan.target == "slurm"
