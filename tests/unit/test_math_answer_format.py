"""One answer form per math recipe: the prompt as the named model sees it, the extraction and the rewards agree.

The chat templates are the real ones of the models the recipes name (``tests/fixtures/chat_templates``, from
their published ``tokenizer_config.json``), put on a locally trained tokenizer: no network. Before issue 29,
``grpo_math_fsdp`` sent GSM8K prompts asking for ``####`` through Qwen2.5-Math's template, whose system turn
asks for ``\\boxed{}``, and rewarded only ``####``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputrain.errors import RecipeError
from gputrain.recipe.loader import load_source, validate_source
from gputrain.train.grpo.policy import train_tiny_tokenizer
from gputrain.train.grpo.prompts import resolve_prompt_format
from gputrain.train.math_rl.data import to_row
from gputrain.train.math_rl.rewards import MathScorer
from gputrain.train.math_rl.task import check_answer_form

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
GSM8K_RECORD = {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
                "answer": "48 / 2 = 24\n48 + 24 = 72\n#### 72"}
DEEPSCALER_RECORD = {"problem": "What is $2^3 + 1$?", "solution": "It is $\\boxed{9}$.", "answer": "9"}
#: recipe -> (a record of its data.source's layout, a completion in the form the model is asked for)
CASES = {
    "grpo_math_fsdp": (GSM8K_RECORD, "48 + 24 = 72, so the answer is \\boxed{72}.", "72"),
    "gdpo_deepscaler": (DEEPSCALER_RECORD, "<think>8 + 1</think> The answer is $\\boxed{9}$.", "9"),
}


def _recipe(name: str) -> Any:
    return validate_source(load_source(ROOT / "recipes" / f"{name}.yaml"))


def _tokenizer(model: str) -> Any:
    tok = train_tiny_tokenizer(["a b c 1 2 3"], vocab_size=64)
    tok.chat_template = (TEMPLATES / f"{model.replace('/', '--')}.jinja").read_text(encoding="utf-8")
    tok.bos_token = "<|endoftext|>"
    return tok


def _seen(recipe: Any, row: dict[str, Any]) -> str:
    algo = recipe.algorithm
    tok = _tokenizer(recipe.model.name)
    fmt = resolve_prompt_format(algo.prompt_format, tok, algo.system_prompt)
    assert fmt.mode == "chat"
    return fmt.render(tok, [row["prompt"]])[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_prompt_the_model_sees_asks_for_the_form_that_is_rewarded(name: str) -> None:
    recipe = _recipe(name)
    record, completion, answer = CASES[name]
    row = to_row(record, None, recipe.algorithm.answer_format)
    seen = _seen(recipe, row)
    assert "\\boxed{}" in seen and "####" not in seen  # both ask for \boxed{} (template or task prompt)
    check_answer_form([seen], [row])  # the run-time check agrees
    assert row["answer"] == answer
    rewards = list(recipe.algorithm.rewards)
    scores = MathScorer(rewards, length_budget=recipe.algorithm.length_budget)([completion], [row])[0]
    assert scores[rewards.index("correctness")] == 1.0
    if "format" in rewards:
        assert scores[rewards.index("format")] == 1.0


def test_the_old_grpo_math_setting_is_refused_before_training() -> None:
    recipe = _recipe("grpo_math_fsdp")
    row = to_row(GSM8K_RECORD, None, "auto")  # the dataset's own form, as before: "end with ####"
    seen = _seen(recipe, row)
    assert "Please reason step by step, and put your final answer within \\boxed{}." in seen
    with pytest.raises(RecipeError, match=r"asks for \\boxed\{\} .* set algorithm.answer_format: boxed"):
        check_answer_form([seen], [row])
    old = MathScorer(["correctness", "format"])(["the answer is \\boxed{72}."], [row])[0]
    assert old == [1.0, 0.0]  # what the model was asked for earned no format reward


def test_the_r1_template_opens_the_think_block_and_the_answer_is_read_after_it() -> None:
    recipe = _recipe("gdpo_deepscaler")
    row = to_row(DEEPSCALER_RECORD, None, recipe.algorithm.answer_format)
    assert _seen(recipe, row).endswith("<｜Assistant｜><think>\n")
