"""Reward components for math RL, by name, and the scorer the GRPO core calls.

Each component maps (completion, row) to a float in [0, 1]; a recipe lists them in ``algorithm.rewards``
(``correctness``, ``format``, ``integer``, ``length``). Why separate components rather than one blended
score: GDPO normalises each one within its group before the sum, and the metrics report each one.
Nothing here may raise on model output: an unreadable completion scores 0 on every component.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from gputrain.errors import RecipeError
from gputrain.train.math_rl.answers import answers_equal, extract_answer, is_integer

Row = dict[str, Any]
TokenCounter = Callable[[str], int]
_log = logging.getLogger(__name__)


def correctness_reward(completion: str, row: Row) -> float:
    """1 when the stated final answer equals the row's reference (math-verify), else 0."""
    return 1.0 if answers_equal(row.get("answer"), extract_answer(completion)) else 0.0


def format_reward(completion: str, row: Row) -> float:
    """1 when the completion states exactly one final answer in the row's convention (``####``/``\\boxed``).

    The convention matters because evaluation reads answers the same way; a second marker means the model
    hedged, which earns nothing.
    """
    if row.get("style") == "boxed":
        count = completion.count("\\boxed{") + completion.count("\\fbox{")
    else:
        count = completion.count("####")
    return 1.0 if count == 1 and extract_answer(completion) is not None else 0.0


def integer_reward(completion: str, row: Row) -> float:
    """1 when the stated final answer is an integer (GSM8K's answers all are)."""
    return 1.0 if is_integer(extract_answer(completion)) else 0.0


def length_reward(length: int, budget: int) -> float:
    """1 within ``budget`` tokens, then linearly down to 0 at twice the budget.

    A ramp rather than the paper's step so that a policy far over budget still sees which of its samples
    are shorter (a step gives a whole group the same 0 and no signal).
    """
    if length <= budget:
        return 1.0
    return max(0.0, 1.0 - (length - budget) / budget)


TEXT_REWARDS: dict[str, Callable[[str, Row], float]] = {
    "correctness": correctness_reward,
    "format": format_reward,
    "integer": integer_reward,
}
REWARD_NAMES: tuple[str, ...] = (*TEXT_REWARDS, "length")


def whitespace_tokens(text: str) -> int:
    return len(text.split())


class MathScorer:
    """``score(completions, rows) -> [[r_1..r_K] per completion]``, the ``GRPOTask.score`` contract.

    ``count_tokens`` measures completions for the length reward (the policy's tokenizer; built lazily by
    the entrypoint because the core owns the policy).
    """

    def __init__(
        self,
        names: Sequence[str],
        *,
        length_budget: int | None = None,
        count_tokens: TokenCounter | None = None,
    ) -> None:
        unknown = [n for n in names if n not in REWARD_NAMES]
        if unknown:
            raise RecipeError(
                f"algorithm.rewards: unknown reward {unknown[0]!r}; math rewards are {', '.join(REWARD_NAMES)}"
            )
        if "length" in names and not length_budget:
            raise RecipeError("algorithm.length_budget must be set when algorithm.rewards includes 'length'")
        self.names = list(names)
        self.length_budget = length_budget or 0
        self.count_tokens = count_tokens or whitespace_tokens

    def score_one(self, completion: str, row: Row) -> list[float]:
        out: list[float] = []
        for name in self.names:
            try:
                if name == "length":
                    value = length_reward(self.count_tokens(completion), self.length_budget)
                else:
                    value = TEXT_REWARDS[name](completion, row)
            except Exception as exc:  # a reward must never stop training: unscorable output is worth 0
                _log.warning("reward %s failed on a completion (%s): scored 0", name, exc)
                value = 0.0
            out.append(value)
        return out

    def __call__(self, completions: list[str], rows: list[Row]) -> list[list[float]]:
        return [self.score_one(c, r) for c, r in zip(completions, rows, strict=True)]
