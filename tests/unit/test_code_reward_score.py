"""The reward end to end through the real sandbox: gold 1.0, empty 0, partial credit, all-or-nothing,
HumanEval gold, the toy task's random-policy signal and TRL's reward-function form."""

from __future__ import annotations

import random

import pytest

from gputrain.train.code_reward import (
    TOY_ALPHABET,
    load_humaneval,
    load_mbpp,
    score_completions,
    score_completions_detailed,
    toy_tasks,
    trl_reward_function,
)

TASKS = load_mbpp()


def fenced(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```\n"


def test_gold_solutions_score_one_and_empty_answers_zero() -> None:
    assert score_completions([fenced(t["reference"]) for t in TASKS], TASKS, workers=2) == [1.0] * len(TASKS)
    assert score_completions([t["reference"] for t in TASKS], TASKS, workers=2) == [1.0] * len(TASKS)
    assert score_completions([""] * 3, TASKS[:3]) == [0.0, 0.0, 0.0]


def test_partial_credit_and_all_or_nothing() -> None:
    task = TASKS[0]  # digit_square_sum: 0 -> 0, 12 -> 5, 907 -> 130
    almost = "def digit_square_sum(n):\n    return 0 if n == 0 else 5"
    assert score_completions([almost], [task]) == [pytest.approx(2 / 3)]
    assert score_completions([almost], [task], all_or_nothing=True) == [0.0]
    assert score_completions([task["reference"]], [task], all_or_nothing=True) == [1.0]


def test_details_explain_each_test() -> None:
    task = TASKS[0]
    broken = "def digit_square_sum(n):\n    return (n"
    (detail,) = score_completions_detailed([fenced(broken)], [task])
    assert detail.reward == 0.0 and detail.total == 3
    assert {o.reason for o in detail.outcomes} == {"syntax error"}
    (detail,) = score_completions_detailed(["no idea, sorry"], [task])
    assert {o.reason for o in detail.outcomes} == {"no code found"}
    (detail,) = score_completions_detailed(["def digit_square_sum(n):\n    raise KeyError(n)"], [task])
    assert all(o.status == "failed" and "KeyError" in o.reason for o in detail.outcomes)


def test_raw_mbpp_rows_are_accepted_as_tasks() -> None:
    row = {"text": "add", "code": "", "test_list": ["assert add(1, 2) == 3"], "test_setup_code": ""}
    assert score_completions(["def add(a, b):\n    return a + b"], [row]) == [1.0]


@pytest.mark.slow  # hundreds of sandboxed programs: 3-8 s
def test_humaneval_gold_passes_on_a_sample() -> None:
    tasks = load_humaneval()[::20]
    assert score_completions([t["reference"] for t in tasks], tasks, workers=2) == [1.0] * len(tasks)
    body_only = [t["reference"][len(t["prompt_code"]):] for t in tasks]
    assert score_completions(body_only, tasks, workers=2) == [1.0] * len(tasks)
    assert score_completions(["    return None\n"] * len(tasks), tasks, workers=2) == [0.0] * len(tasks)


@pytest.mark.slow  # hundreds of sandboxed programs: 3-8 s
def test_toy_task_gold_passes_and_a_random_policy_sometimes_does() -> None:
    tasks = toy_tasks()
    gold = [t["reference"][len(t["prompt_code"]):] for t in tasks]
    assert score_completions(gold, tasks, workers=2) == [1.0] * len(tasks)
    rng = random.Random(0)
    many = toy_tasks(120, seed=3)
    random_answers = ["".join(rng.choice(TOY_ALPHABET) for _ in range(rng.randint(1, 3))) for _ in many]
    rewards = score_completions(random_answers, many, workers=2)
    assert 0.0 < sum(rewards) / len(rewards) < 0.5
    assert any(r == 1.0 for r in rewards)


def test_trl_reward_function_reads_dataset_columns() -> None:
    reward = trl_reward_function(workers=2)
    tasks = TASKS[:2]
    completions = [[{"role": "assistant", "content": fenced(t["reference"])}] for t in tasks]
    out = reward(prompts=["p", "p"], completions=completions,
                 test_list=[t["tests"] for t in tasks], test_setup_code=[t["setup_code"] for t in tasks],
                 unrelated=[1, 2])
    assert out == [1.0, 1.0]
    assert reward.__name__ == "code_pass_rate"
