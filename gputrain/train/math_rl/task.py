"""The math task handed to the GRPO core: rows, reward components, evaluation — shared by grpo_math and gdpo.

The two entrypoints differ only in their default rewards and aggregation; everything else (data, rewards
by name, evaluation and its samples table) is this one builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import DataSpec, ModelSpec
from gputrain.train.grpo.task import GRPOTask
from gputrain.train.math_rl.data import load_math_rows
from gputrain.train.math_rl.evaluate import MathEvaluator
from gputrain.train.math_rl.rewards import MathScorer


class PolicyTokenCounter:
    """Counts tokens with the policy's tokenizer (built on first use, as the core builds it), so the length
    reward and the reported lengths are in the units of ``algorithm.length_budget``."""

    def __init__(self, model: ModelSpec, corpus: list[str]) -> None:
        self.model, self.corpus = model, corpus
        self._tok: Any = None

    def __call__(self, text: str) -> int:
        if self._tok is None:
            from gputrain.train.grpo.policy import policy_tokenizer

            self._tok = policy_tokenizer(self.model, self.corpus)
        return len(self._tok(text, add_special_tokens=False)["input_ids"])


def build_math_task(
    name: str,
    default_rewards: Sequence[str],
    *,
    data: DataSpec,
    model: ModelSpec,
    algo: GRPOAlgorithm,
    seed: int,
    job_dir: Path,
) -> GRPOTask:
    """A :class:`GRPOTask` from the resolved recipe's ``data``, ``model`` and ``algorithm`` sections."""
    rewards = list(algo.rewards or default_rewards)
    train_rows, eval_rows = load_math_rows(data, seed=seed, eval_size=algo.eval_samples)
    corpus = [r["prompt"] for r in train_rows] + [r["solution"] or "" for r in train_rows]
    counter = PolicyTokenCounter(model, corpus)
    return GRPOTask(
        name=name,
        train_rows=train_rows,
        eval_rows=eval_rows,
        reward_names=rewards,
        score=MathScorer(rewards, length_budget=algo.length_budget, count_tokens=counter,
                         length_gate=algo.length_gate),
        evaluate=MathEvaluator(job_dir, counter),
        corpus=corpus,
    )
