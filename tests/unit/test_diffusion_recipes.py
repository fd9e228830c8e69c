"""The shipped diffusion recipes: a GSM8K length that fits 7,473 rows, CPU profiles whose rows hold the answer."""

from __future__ import annotations

import pytest

from gputrain.planner import make_plan
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.bd3lm import bd3lm_task
from gputrain.train.diffusion.data import ByteTokenizer, final_answer, generate_problems
from gputrain.train.hdp import hdp_task
from tests.conftest import RECIPES

GSM8K_TRAIN_ROWS = 7473


@pytest.mark.parametrize("preset", ["conservative", "recommended", "aggressive", "extreme"])
def test_gsm8k_recipe_runs_tens_of_epochs_not_thousands(preset: str) -> None:
    plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H200", gpus_per_node=1, preset=preset,
                     check_memory=False)  # extreme does not fit (test_planner_diffusion_memory); epochs only
    steps = plan.estimate.total_steps
    epochs = steps * plan.global_batch_size / GSM8K_TRAIN_ROWS
    assert 50 <= epochs <= 200, (steps, plan.global_batch_size, epochs)
    train = plan.recipe.train
    assert train.warmup_steps < steps / 5 and (train.eval_every or 0) < steps / 5
    algo = DiffusionAlgorithm.model_validate(plan.recipe.algorithm.model_dump())
    assert algo.ema == 0.9999 and algo.dropout == 0.1 and algo.time_conditioning is False


@pytest.mark.parametrize(("recipe", "task_for"), [("bd3lm_gsm8k.yaml", bd3lm_task), ("hdp_diffusion.yaml", hdp_task)])
def test_cpu_profile_rows_contain_the_whole_answer(recipe: str, task_for: object) -> None:
    """Every generated row keeps its "#### N" line inside the sequence, so samples can be scored right."""
    recipe_model = make_plan(RECIPES / recipe, gpu="cpu", gpus_per_node=2).recipe
    algo = DiffusionAlgorithm.model_validate(recipe_model.algorithm.model_dump())
    task = task_for(algo, recipe_model.model)  # type: ignore[operator]
    tok = ByteTokenizer()
    for row in generate_problems(2000, seed=11):
        ids = task.encode(tok, row)
        assert len(ids) == task.layout.seq_len
        described = task.describe(tok, ids, row)
        assert described["correct"], (described, row)  # the clean row itself scores as correct
        assert final_answer(row["answer"]) is not None
