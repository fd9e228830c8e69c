"""The math task the entrypoints hand to the GRPO core: rows, rewards by name, token-true length reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputrain.errors import RecipeError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import DataSpec, ModelSpec
from gputrain.train.math_rl.task import build_math_task


def build(job_dir: Path, name: str, default_rewards: list[str], algorithm: dict[str, Any]) -> Any:
    """The math task of a recipe with the tiny policy and 64 generated problems."""
    return build_math_task(
        name, default_rewards, data=DataSpec(source="generated", train_size=64),
        model=ModelSpec(name="tiny-qwen2", vocab_size=300), algo=GRPOAlgorithm.model_validate(algorithm),
        seed=0, job_dir=job_dir,
    )


def test_reference_solutions_earn_every_reward_and_length_counts_policy_tokens(tmp_path: Path) -> None:
    algo = {"rewards": ["correctness", "format", "integer", "length"], "length_budget": 3, "eval_samples": 4}
    task = build(tmp_path, "gdpo", ["correctness"], algo)
    assert (len(task.train_rows), len(task.eval_rows)) == (64, 4)
    assert task.reward_names == ["correctness", "format", "integer", "length"]
    assert any("####" in text for text in task.corpus)
    solutions = [r["solution"] for r in task.train_rows[:8]]
    scores = task.score(solutions, list(task.train_rows[:8]))
    assert all(s[:3] == [1.0, 1.0, 1.0] for s in scores)
    # "a + b = c\n#### c" is more than 3 BPE tokens of the tiny tokenizer: over budget, less than 1.
    assert all(0.0 <= s[3] < 1.0 for s in scores)
    gold = task.train_rows[0]["answer"]
    assert task.score([f"#### {gold}"], [task.train_rows[0]])[0][3] == 1.0
    # a short wrong answer earns no length reward (length_gate: correctness, the default)
    assert task.score([f"#### {int(gold) + 1}"], [task.train_rows[0]])[0][3] == 0.0


def test_entry_default_rewards_apply_when_the_recipe_lists_none(tmp_path: Path) -> None:
    task = build(tmp_path, "grpo_math", ["correctness", "format"], {"eval_samples": 2})
    assert task.reward_names == ["correctness", "format"]
    assert task.evaluate is not None
    metrics = task.evaluate(["#### 1"], [task.eval_rows[0]])
    assert set(metrics) >= {"accuracy", "gsm8k_accuracy", "valid_format_rate", "mean_length"}
    assert (tmp_path / "eval_samples.jsonl").exists()


def test_length_reward_without_budget_is_a_recipe_error(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="length_budget"):
        build(tmp_path, "gdpo", ["length"], {"rewards": ["length"]})
