"""The math task handed to the GRPO core: rows, reward components, evaluation — shared by grpo_math and gdpo.

The two entrypoints differ only in their default rewards and aggregation; everything else (data, rewards
by name, evaluation and its samples table) is this one builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gputrain.errors import RecipeError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import DataSpec, ModelSpec
from gputrain.train.grpo.task import GRPOTask
from gputrain.train.math_rl.answers import answer_form_conflict, extract_answer
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


def check_answer_form(rendered: list[str], rows: Sequence[dict[str, Any]]) -> None:
    """Refuse a run whose prompts, as the model sees them, ask for one answer form while the format reward
    and the evaluation expect the other (``grpo_math_fsdp`` before issue 29: Qwen2.5-Math's template asks for
    ``\\boxed{}``, the GSM8K prompt and reward for ``####``)."""
    for text, row in zip(rendered, rows, strict=False):
        style = str(row.get("style", "gsm8k"))
        marker = answer_form_conflict(text, style)
        if marker:
            want = "####" if style != "boxed" else "\\boxed{}"
            fix = "boxed" if style != "boxed" else "gsm8k"
            raise RecipeError(
                f"algorithm.answer_format: the prompt the model sees asks for {marker} (its chat template or "
                f"system prompt) while the rewards read {want}; set algorithm.answer_format: {fix}"
            )


def reference_completion(row: dict[str, Any]) -> str | None:
    """The row's worked solution ending in its answer in the row's form (``#### n`` or ``\\boxed{n}``), the
    target of ``algorithm.warm_start_steps``; None without a solution or an answer."""
    solution, answer = row.get("solution"), row.get("answer")
    if not solution or not answer:
        return None
    body = str(solution).rsplit("####", 1)[0].rstrip()  # GSM8K: the work before its answer line
    if row.get("style") == "boxed":
        return body if extract_answer(body) == answer else f"{body}\nThe answer is \\boxed{{{answer}}}."
    return f"{body}\n#### {answer}"


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
    train_rows, eval_rows = load_math_rows(data, seed=seed, eval_size=algo.eval_samples,
                                           answer_format=algo.answer_format)
    corpus = [r["prompt"] for r in train_rows] + [r["solution"] or "" for r in train_rows]
    counter = PolicyTokenCounter(model, corpus)
    return GRPOTask(
        name=name,
        train_rows=train_rows,
        eval_rows=eval_rows,
        reward_names=rewards,
        score=MathScorer(rewards, length_budget=algo.length_budget, count_tokens=counter,
                         length_gate=algo.length_gate, reward_gate=algo.reward_gate),
        evaluate=MathEvaluator(job_dir, counter),
        corpus=corpus,
        check_prompts=check_answer_form,
        answer_of=extract_answer,
        reference_completion=reference_completion,
    )
