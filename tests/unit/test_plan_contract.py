"""The typed plan contract: plan.json round trip, versions, one-line errors, typed algorithm settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gputrain.contract.plan import SCHEMA_VERSION, load_job_plan, plan_json_schema
from gputrain.errors import PlanFileError
from gputrain.planner import make_plan
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.schema import algorithm_model
from tests.conftest import RECIPES
from tests.support.plans import plan_recipe, toy_recipe


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_plan_round_trips_through_plan_json(recipe: Path, tmp_path: Path) -> None:
    plan = make_plan(recipe, gpu="cpu", gpus_per_node=2)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    again = load_job_plan(path)
    assert again == plan
    assert again.schema_version == SCHEMA_VERSION
    assert type(again.recipe.algorithm) is algorithm_model(again.recipe.entrypoint)
    assert again.module == ENTRYPOINTS[again.recipe.entrypoint].module
    assert again.recipe.profiles == {}  # applied by the planner, not carried along


def test_plan_of_another_schema_version_is_one_line_naming_both(tmp_path: Path) -> None:
    data = json.loads(plan_recipe(toy_recipe()).to_json())
    data["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError) as err:
        load_job_plan(path)
    message = str(err.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message and f"reads version {SCHEMA_VERSION}" in message
    assert "\n" not in message and err.value.exit_code == 2


@pytest.mark.parametrize(("text", "expected"), [
    ("not json", r"not a gputrain plan \(not JSON"),
    ("[1, 2]", r"not a gputrain plan \(a JSON list"),
    ('{"steps": 3}', r"not a gputrain plan \(no schema_version\)"),
    ('{"config": {"train": {}}}', r"not a gputrain plan \(no schema_version\)"),  # a pre-contract plan
])
def test_non_plan_files_are_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(PlanFileError, match=expected) as err:
        load_job_plan(path)
    assert "\n" not in str(err.value)


def test_invalid_field_names_the_field(tmp_path: Path) -> None:
    data = json.loads(plan_recipe(toy_recipe()).to_json())
    data["recipe"]["algorithm"]["iterashuns"] = 3
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError, match=r"invalid plan: recipe\.algorithm\.iterashuns: Extra inputs"):
        load_job_plan(path)
    data["recipe"]["algorithm"] = {}
    data["world_size"] = 5
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError, match="world_size 5 is not gpus_per_node 2 × nodes 1"):
        load_job_plan(path)


def test_plan_is_frozen_and_resolved_values_live_in_the_recipe() -> None:
    plan = make_plan(RECIPES / "grpo_code_mbpp.yaml", cluster="supercloud")
    with pytest.raises(ValidationError):
        plan.precision = "bf16"  # type: ignore[misc]
    assert plan.recipe.train.precision == plan.precision == "fp16"
    assert (plan.recipe.resources.gpus, plan.recipe.resources.nodes) == (plan.gpus_per_node, plan.nodes)
    assert plan.cluster is not None and plan.cluster.name == "supercloud"


def test_schema_defaults_reach_the_plan_where_the_recipe_is_silent() -> None:
    """keep_checkpoints (3) and lr_schedule (cosine) come from the schema: trainers used to fall back
    to their own 2 and "constant" when a plan lacked them."""
    plan = plan_recipe(toy_recipe())
    assert plan.recipe.train.keep_checkpoints == 3
    assert plan.recipe.train.lr_schedule == "cosine"


def test_plan_json_schema_describes_the_typed_algorithm() -> None:
    document = plan_json_schema()
    assert document["title"] == f"gputrain plan (schema version {SCHEMA_VERSION})"
    for model in ("GRPOAlgorithm", "DiffusionAlgorithm", "GNNColoringAlgorithm", "SelftestAlgorithm",
                  "GPUFacts", "Estimate", "ClusterProfile"):
        assert model in document["$defs"]
    assert "world_size" in document["properties"] and "schema_version" in document["properties"]
