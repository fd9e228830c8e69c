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


def test_a_short_answer_named_in_its_prompt_is_not_an_echo() -> None:
    """The toy code task (grpo_code's cpu profile): the right answer is the digit its prompt names, so a
    correct policy's one-character completions all stand in their prompts; that is answering, not copying.
    A constant digit is still flagged, by the identical-completion share."""
    from gputrain.train.code_reward import build_prompt, toy_tasks

    tasks = toy_tasks(27, seed=1)
    prompts = [build_prompt(t) for t in tasks]
    correct = [t["task_id"][-1] for t in tasks]  # "toy/x*6" -> "6"
    assert independence_flags(prompt_independence(prompts, correct)) == []
    flags = independence_flags(prompt_independence(prompts, ["1"] * len(prompts)))
    assert len(flags) == 1 and "same completion ('1')" in flags[0]
    assert is_echo(prompts[0], prompts[0])


def test_a_value_sampled_now_and_then_in_every_group_is_not_the_prompts_answer() -> None:
    """A GRPO rollout of the toy code task: 16 samples per prompt, each prompt's commonest sample its own digit,
    one stray "4" in every group. The prompts do not share an answer; a policy whose commonest is "4" does."""
    from gputrain.train.code_reward import build_prompt, toy_tasks

    tasks = toy_tasks(8, seed=1)
    prompts = [build_prompt(t) for t in tasks for _ in range(16)]
    stray = [c for t in tasks for c in [t["task_id"][-1]] * 15 + ["4"]]
    assert independence_flags(prompt_independence(prompts, stray)) == []
    constant = [c for t in tasks for c in ["4"] * 15 + [t["task_id"][-1]]]
    flags = independence_flags(prompt_independence(prompts, constant))
    assert len(flags) == 1 and "same completion ('4')" in flags[0]
