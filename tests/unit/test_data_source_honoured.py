"""Every documented field is honoured or refused (issue 31.6): a data path given to a training that generates
its own data is refused at planning, in one line, before any job folder exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.errors import RecipeError
from gputrain.planner.resolve import make_plan

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("recipe", ["gnn_coloring", "selftest"])
def test_a_data_path_for_generated_data_is_refused(recipe: str) -> None:
    with pytest.raises(RecipeError, match=r"data.source '/nonexistent/graphs': .* generates itself") as err:
        make_plan(RECIPES / f"{recipe}.yaml", gpu="cpu", gpus_per_node=2, overrides=["data.source=/nonexistent/graphs"])
    assert "\n" not in str(err.value)


def test_generated_data_still_plans() -> None:
    plan = make_plan(RECIPES / "gnn_coloring.yaml", gpu="cpu", gpus_per_node=2)
    assert plan.recipe.data.source == "generated"
