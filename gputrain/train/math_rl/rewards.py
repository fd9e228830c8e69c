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
from gputrain.train.math_rl.answers import (
    answers_equal,
    count_answer_markers,
    extract_answer,
    is_integer,
    is_stated_answer,
)

Row = dict[str, Any]
TokenCounter = Callable[[str], int]
_log = logging.getLogger(__name__)


def correctness_reward(completion: str, row: Row) -> float:
    """1 when the stated final answer equals the row's reference (math-verify), else 0."""
    return 1.0 if answers_equal(row.get("answer"), extract_answer(completion)) else 0.0


def format_reward(completion: str, row: Row) -> float:
    """1 when the completion states exactly one final answer in the row's convention (``####``/``\\boxed``).

    The convention matters because evaluation reads answers the same way; a second marker means the model
    hedged, which earns nothing. The marker must carry an answer (a number after ``####``; something in the
    box that is not a placeholder): ``#### and the number`` echoed from the prompt, or ``\\boxed{}``, earn
    nothing, or a policy could collect the reward without ever answering.
    """
    style = "boxed" if row.get("style") == "boxed" else "gsm8k"
    if count_answer_markers(completion, style) != 1:
        return 0.0
    return 1.0 if is_stated_answer(extract_answer(completion), style) else 0.0


def integer_reward(completion: str, row: Row) -> float:
    """1 when the stated final answer is an integer (GSM8K's answers all are)."""
    return 1.0 if is_integer(extract_answer(completion)) else 0.0


def length_reward(length: int, budget: int) -> float:
    """1 within ``budget`` tokens, then linearly down to 0 at twice the budget (ungated: see ``MathScorer``).

    A ramp rather than the paper's step so that a policy far over budget still sees which of its samples
    are shorter (a step gives a whole group the same 0 and no signal). On its own it pays most for saying
    nothing; the scorer multiplies it by a gate (``algorithm.length_gate``).
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
LENGTH_GATES: tuple[str, ...] = ("correctness", "format", "none")
REWARD_GATES: tuple[str, ...] = ("correctness", "none")
#: Rewards for answering in form, which a prompt-independent answer can earn; ``reward_gate`` conditions them.
AUXILIARY_REWARDS: tuple[str, ...] = ("format", "integer")


def whitespace_tokens(text: str) -> int:
    return len(text.split())


class MathScorer:
    """``score(completions, rows) -> [[r_1..r_K] per completion]``, the ``GRPOTask.score`` contract.

    ``count_tokens`` measures completions for the length reward (the policy's tokenizer; built lazily by
    the entrypoint because the core owns the policy). ``length_gate`` conditions the length reward on the
    harder one, as the GDPO paper does for its length constraint: a short answer earns the length reward only
    when it is correct (``correctness``) or well-formed (``format``); ``none`` pays any short completion,
    the empty one included. ``reward_gate="correctness"`` does the same for the format and integer rewards:
    a wrong answer then earns nothing at all, so a constant answer (" 42" for every question) raises the
    total only on the questions whose answer is 42 -- no more than its accuracy.
    """

    def __init__(
        self,
        names: Sequence[str],
        *,
        length_budget: int | None = None,
        count_tokens: TokenCounter | None = None,
        length_gate: str = "correctness",
        reward_gate: str = "none",
    ) -> None:
        unknown = [n for n in names if n not in REWARD_NAMES]
        if unknown:
            raise RecipeError(
                f"algorithm.rewards: unknown reward {unknown[0]!r}; math rewards are {', '.join(REWARD_NAMES)}"
            )
        if "length" in names and not length_budget:
            raise RecipeError("algorithm.length_budget must be set when algorithm.rewards includes 'length'")
        if length_gate not in LENGTH_GATES:
            raise RecipeError(f"algorithm.length_gate: {length_gate!r} is not one of {', '.join(LENGTH_GATES)}")
        if reward_gate not in REWARD_GATES:
            raise RecipeError(f"algorithm.reward_gate: {reward_gate!r} is not one of {', '.join(REWARD_GATES)}")
        self.names = list(names)
        self.length_gate = length_gate
        self.reward_gate = reward_gate
        self.length_budget = length_budget or 0
        self.count_tokens = count_tokens or whitespace_tokens

    def _text_reward(self, name: str, completion: str, row: Row) -> float:
        value = TEXT_REWARDS[name](completion, row)
        if value and self.reward_gate == "correctness" and name in AUXILIARY_REWARDS:
            value *= correctness_reward(completion, row)
        return value

    def score_one(self, completion: str, row: Row) -> list[float]:
        out: list[float] = []
        for name in self.names:
            try:
                if name == "length":
                    gate = 1.0 if self.length_gate == "none" else self._text_reward(self.length_gate, completion, row)
                    value = gate * length_reward(self.count_tokens(completion), self.length_budget) if gate else 0.0
                else:
                    value = self._text_reward(name, completion, row)
            except Exception as exc:  # a reward must never stop training: unscorable output is worth 0
                _log.warning("reward %s failed on a completion (%s): scored 0", name, exc)
                value = 0.0
            out.append(value)
        return out

    def __call__(self, completions: list[str], rows: list[Row]) -> list[list[float]]:
        return [self.score_one(c, r) for c, r in zip(completions, rows, strict=True)]
