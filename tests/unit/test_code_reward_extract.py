"""Prompts and code extraction from completions (fenced, unclosed, bare, chat messages, continuations)."""

from __future__ import annotations

from gputrain.train.code_reward import build_prompt, extract_code, load_mbpp, program_for, toy_tasks

MBPP_TASK = load_mbpp()[0]


def test_mbpp_prompt_shows_exactly_one_assert() -> None:
    prompt = build_prompt(MBPP_TASK)
    assert MBPP_TASK["text"] in prompt
    assert MBPP_TASK["tests"][0] in prompt
    assert all(t not in prompt for t in MBPP_TASK["tests"][1:])
    assert "```python" in prompt


def test_continuation_tasks_prompt_with_their_code() -> None:
    task = toy_tasks()[0]
    assert build_prompt(task) == task["prompt_code"]


def test_fenced_python_block_wins_over_prose_and_other_blocks() -> None:
    text = "Sure!\n```text\nnot code\n```\nHere:\n```python\ndef f(x):\n    return x\n```\nDone. def nope"
    assert extract_code(text) == "def f(x):\n    return x"


def test_unlabelled_and_unclosed_fences() -> None:
    assert extract_code("```\ndef g():\n    return 2\n```") == "def g():\n    return 2"
    assert extract_code("Answer:\n```python\ndef g():\n    return 2\n") == "def g():\n    return 2"


def test_bare_code_after_prose_is_trimmed_until_it_parses() -> None:
    text = "Here is my solution.\ndef g(a):\n    return a * 2\nThis doubles the input."
    assert extract_code(text) == "def g(a):\n    return a * 2"
    assert extract_code("def h():\n    return 1\n") == "def h():\n    return 1"
    assert extract_code("I don't know.") == ""


def test_chat_messages_use_the_last_message() -> None:
    messages = [{"role": "assistant", "content": "```python\ndef f():\n    return 3\n```"}]
    assert program_for(messages, MBPP_TASK) == "def f():\n    return 3"


def test_continuation_stops_at_the_next_top_level_statement() -> None:
    task = toy_tasks()[0]
    assert program_for("2\nprint('junk')\nmore", task) == task["prompt_code"] + "2"
    assert program_for("", task) == task["prompt_code"]


def test_full_function_in_a_continuation_task_keeps_the_prompt() -> None:
    task = {**toy_tasks()[0], "prompt_code": "import math\ndef f(x):\n    return x"}
    program = program_for("```python\ndef f(x):\n    return math.floor(x)\n```", task)
    assert program.startswith("import math\n")
    assert program.endswith("return math.floor(x)")
