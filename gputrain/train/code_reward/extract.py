"""Prompts for code tasks and the program a completion stands for.

A chat model answers in a fenced block (often with prose around it); a base model continues the prompt's
code (HumanEval, toy tasks) or writes bare code after some words. ``program_for`` turns any of these into
the program the sandbox runs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gputrain.train.code_reward.tasks import CodeTask

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
# Where a continuation of a function body ends (the HumanEval stop sequences).
STOP = re.compile(r"\n(?=\S)")
CODE_START = re.compile(r"^(def |class |import |from |@|[A-Za-z_][A-Za-z0-9_]* *=)", re.MULTILINE)


def build_prompt(task: CodeTask) -> str:
    """MBPP's prompt (problem + one assert, so the model knows the function's name and signature);
    tasks with ``prompt_code`` are continued as code."""
    if task["prompt_code"]:
        return task["prompt_code"]
    return (
        f"You are an expert Python programmer, and here is your task: {task['text']}\n"
        f"Your code should pass this test:\n\n{task['shown_test']}\n\n"
        "Write the function in one ```python code block.\n"
    )


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """TRL hands conversational completions as message lists: the last message's content is the answer."""
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            return content
    return ""


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def extract_code(text: str) -> str:
    """The code in an answer: the first fenced python block (or the first block with a ``def``; an
    unclosed fence runs to the end), else bare code from its first code-looking line, trimmed at the end
    until it parses."""
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    if blocks:
        for lang, body in blocks:
            if lang in ("python", "py", "python3"):
                return body.strip("\n")
        for _, body in blocks:
            if "def " in body:
                return body.strip("\n")
        return blocks[0][1].strip("\n")
    if _parses(text):
        return text.strip("\n")
    match = CODE_START.search(text)
    if not match:
        return ""
    lines = text[match.start():].splitlines()
    while lines and not _parses("\n".join(lines)):
        lines.pop()
    return "\n".join(lines)


def program_for(completion: str | Sequence[Mapping[str, Any]], task: CodeTask) -> str:
    """The program to run for ``completion`` on ``task`` ("" means nothing to run: scores 0)."""
    text = completion_text(completion)
    prompt_code = task["prompt_code"]
    if not prompt_code:
        return extract_code(text)
    if "```" in text or re.search(r"^def ", text, re.MULTILINE):
        code = extract_code(text)
        return prompt_code + "\n" + code if code else ""
    # A continuation of the prompt's function body: cut where a new top-level statement starts.
    return prompt_code + STOP.split(text, maxsplit=1)[0]


def syntax_ok(program: str) -> bool:
    """Checked in the parent (compiling runs nothing) so broken programs cost no sandbox start."""
    return bool(program.strip()) and _parses(program)
