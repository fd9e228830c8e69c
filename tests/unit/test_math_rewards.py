"""Math answers and reward components: GSM8K ``####``, MATH ``\\boxed{}``, math-verify, never a crash."""

from __future__ import annotations

import pytest

from gputrain.errors import RecipeError
from gputrain.train.math_rl.answers import answers_equal, extract_answer, gold_answer, is_integer, last_boxed
from gputrain.train.math_rl.rewards import MathScorer, format_reward, length_reward

GSM = {"answer": "72", "style": "gsm8k"}
BOXED = {"answer": "\\frac{1}{2}", "style": "boxed"}


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("48 + 24 = 72\n#### 72", "72"),
        ("so 1,234 total.\n####  1,234.", "1,234"),
        ("Thus $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("first \\boxed{3} then #### 4", "4"),  # the later marker wins
        ("#### 4 ... no wait \\boxed{\\sqrt{2}}", "\\sqrt{2}"),
        ("no answer here", None),
        ("#### ", None),
        ("#### 72 apples\nand more", "72"),  # the leading number, as GSM8K graders read it
        ("#### 1/2", "1/2"),
        ("#### 5 #### #### ####", None),  # the last marker has nothing after it
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_nested_braces_in_boxed() -> None:
    assert last_boxed("\\boxed{\\frac{a}{b^{2}}} and more") == "\\frac{a}{b^{2}}"


def test_gold_answers_of_the_three_layouts() -> None:
    assert gold_answer("Natalia sold 48/2 = 24 clips.\n#### 72") == "72"  # GSM8K answer
    assert gold_answer(None, "... so the answer is $\\boxed{5}$.") == "5"  # MATH solution
    assert gold_answer("\\frac{3}{4}", "long solution") == "\\frac{3}{4}"  # DeepScaleR answer


@pytest.mark.parametrize(
    ("gold", "predicted", "equal"),
    [
        ("72", "72", True),
        ("1234", "1,234", True),
        ("\\frac{1}{2}", "0.5", True),
        ("x^2+1", "1+x^2", True),
        ("72", "73", False),
        ("3", "\\pi", False),
        ("72", None, False),
        ("72", "}{\\frac{{", False),  # unparseable: not equal, no exception
    ],
)
def test_answers_equal_uses_math_verify(gold: str, predicted: str | None, equal: bool) -> None:
    assert answers_equal(gold, predicted) is equal


def test_is_integer() -> None:
    assert [is_integer(a) for a in ("42", "-7", "1,234", "12.", "4.5", "x", "", None)] == [
        True, True, True, True, False, False, False, False,
    ]  # fmt: skip


def test_format_reward_wants_exactly_one_marker_of_the_row_convention() -> None:
    assert format_reward("work\n#### 72", GSM) == 1.0
    assert format_reward("#### 7 #### 72", GSM) == 0.0
    assert format_reward("\\boxed{72}", GSM) == 0.0
    assert format_reward("so \\boxed{1/2}", BOXED) == 1.0
    assert format_reward("\\boxed{1} or \\boxed{2}", BOXED) == 0.0


def test_length_reward_ramps_down_past_the_budget() -> None:
    assert [length_reward(n, 10) for n in (0, 10, 15, 20, 50)] == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_scorer_returns_one_row_per_completion_in_reward_order() -> None:
    scorer = MathScorer(["correctness", "format", "integer", "length"], length_budget=8)
    completions = ["48 + 24 = 72\n#### 72", "#### 71", "I think \\boxed{0.5}", "", " ".join("w" * 16)]
    rows = [GSM, GSM, BOXED, GSM, GSM]
    assert scorer(completions, rows) == [
        [1.0, 1.0, 1.0, 1.0],
        [0.0, 1.0, 1.0, 0.0],  # short but wrong: the length reward is gated on correctness
        [1.0, 1.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0],  # the empty completion earns nothing
        [0.0, 0.0, 0.0, 0.0],
    ]


def test_garbage_completions_score_zero_without_raising() -> None:
    scorer = MathScorer(["correctness", "format", "integer"])
    junk = ["#### \\boxed{", "\\boxed{}}}}", "#### ((((((", "\x00\xff####\u202e", "#### " + "9" * 5000]
    scores = scorer(junk, [GSM] * len(junk))
    assert [r[0] for r in scores] == [0.0] * len(junk)  # correctness
    assert [r[2] for r in scores] == [0.0, 0.0, 0.0, 0.0, 1.0]  # integer: only the long number


def test_a_failing_component_scores_zero_instead_of_crashing() -> None:
    def boom(text: str) -> int:
        raise RuntimeError("tokenizer broke")

    scorer = MathScorer(["format", "length"], length_budget=4, count_tokens=boom)
    assert scorer(["#### 72"], [GSM]) == [[1.0, 0.0]]


def test_unknown_reward_and_missing_budget_are_recipe_errors() -> None:
    with pytest.raises(RecipeError, match="unknown reward 'speed'"):
        MathScorer(["correctness", "speed"])
    with pytest.raises(RecipeError, match="length_budget"):
        MathScorer(["length"])
