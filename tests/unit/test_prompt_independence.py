"""Reward hacking made visible (issue 29): scripted policies through the prompt-independence check.

A constant answer, an echo of the prompt and format-only output are each flagged; a correct policy is not.
The policies write completions for real generated GSM8K-style rows, and the reward components come from the
real math scorer, as in a run.
"""

from __future__ import annotations

import random

import pytest

from gputrain.train.grpo.independence import independence_flags, is_echo, prompt_independence
from gputrain.train.math_rl.answers import extract_answer
from gputrain.train.math_rl.arithmetic import generate_problems
from gputrain.train.math_rl.data import to_row
from gputrain.train.math_rl.rewards import MathScorer

ROWS = [to_row(r, "arithmetic") for r in generate_problems(16, seed=3)]
NAMES = ["correctness", "format", "integer"]


def _correct(row: dict) -> str:
    return f"{row['solution'].splitlines()[0]}\n#### {row['answer']}"


POLICIES = {
    "constant": lambda row: " 42 42 42",
    "constant_marked": lambda row: "#### 42",
    "echo": lambda row: row["prompt"],
    "format_only": lambda row: f"#### {int(row['answer']) + 1 + random.Random(row['problem']).randint(0, 5)}",
    "correct": _correct,
}


def _flags(policy: str, *, gate: str = "none") -> list[str]:
    completions = [POLICIES[policy](row) for row in ROWS]
    figures = prompt_independence([r["prompt"] for r in ROWS], completions, extract_answer)
    scores = MathScorer(NAMES, reward_gate=gate)(completions, ROWS)
    means = {n: sum(s[k] for s in scores) / len(scores) for k, n in enumerate(NAMES)}
    return independence_flags(figures, means)


@pytest.mark.parametrize(
    ("policy", "needle"),
    [("constant", "same completion"), ("constant_marked", "same completion"), ("echo", "copy their prompt"),
     ("format_only", "paid for the shape")],
)
def test_a_hacking_policy_is_flagged(policy: str, needle: str) -> None:
    flags = _flags(policy)
    assert any(needle in f for f in flags), flags


def test_a_correct_policy_is_not_flagged() -> None:
    assert _flags("correct") == []
    assert _flags("correct", gate="correctness") == []


def test_the_same_answer_in_varied_words_is_flagged_as_a_constant_answer() -> None:
    completions = [f"{row['problem'][:12]} so #### 7" for row in ROWS]  # text differs, the answer never does
    figures = prompt_independence([r["prompt"] for r in ROWS], completions, extract_answer)
    assert figures["identical_share"] < 0.5 and figures["same_answer_share"] == 1.0
    assert any("same final answer ('7')" in f for f in independence_flags(figures))


def test_several_samples_per_prompt_count_prompts_not_samples() -> None:
    prompts = [r["prompt"] for r in ROWS[:4] for _ in range(8)]  # GRPO groups: 8 completions per prompt
    same_within_group = [_correct(r) for r in ROWS[:4] for _ in range(8)]
    figures = prompt_independence(prompts, same_within_group, extract_answer)
    assert figures["distinct_prompts"] == 4.0 and figures["identical_share"] == 0.25
    assert independence_flags(figures) == []


def test_too_few_prompts_say_nothing_about_independence() -> None:
    figures = prompt_independence(["a?", "b?"], ["#### 1", "#### 1"], extract_answer)
    assert independence_flags(figures) == []


def test_echo_needs_a_copy_not_shared_numbers() -> None:
    row = ROWS[0]
    assert is_echo(row["prompt"], row["prompt"])
    assert is_echo(row["prompt"], "Answer (end with")
    assert not is_echo(row["prompt"], _correct(row))
    assert not is_echo(row["prompt"], "")
