"""Prompts for code tasks and the program a completion stands for.

A chat model answers in a fenced block (often with prose around it, sometimes a draft then a fix, or a
usage example after the solution); a base model continues the prompt's code (HumanEval, toy tasks) or
writes bare code after some words. ``program_for`` turns any of these into the program the sandbox runs.

The rule for fenced answers: the *last* fenced block that parses and defines the task's entry point (the
function the tests call) is the program; failing that, the last python block, the last block with a
``def``, the last block. So a corrected second attempt is graded, not the draft before it, and an example
call after the solution is not mistaken for it. For a continuation task (HumanEval, toy) a completion
that writes no such block is the function body: it ends at the first line that starts at column 0
(HumanEval's stop sequences), a closing fence included.
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


def defines(code: str, name: str) -> bool:
    """Whether ``code`` parses and defines ``name`` at top level (a function or class of that name)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(isinstance(node, kinds) and node.name == name for node in tree.body)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order; an unclosed last fence runs to the end."""
    return [(lang.lower(), body.strip("\n")) for lang, body in FENCE.findall(text)]


def extract_code(text: str, entry_point: str = "") -> str:
    """The code in an answer: the fenced block the module docstring's rule picks, else bare code from its
    first code-looking line, trimmed at the end until it parses."""
    blocks = fenced_blocks(text)
    if blocks:
        ranked = (
            [b for _, b in blocks if entry_point and defines(b, entry_point)],
            [b for lang, b in blocks if lang in ("python", "py", "python3")],
            [b for _, b in blocks if "def " in b],
            [b for _, b in blocks],
        )
        return next(tier for tier in ranked if tier)[-1]
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
    prompt_code, entry = task["prompt_code"], task.get("entry_point", "")
    if not prompt_code:
        return extract_code(text, entry)
    whole = [b for _, b in fenced_blocks(text) if entry and defines(b, entry)]
    if whole:  # the whole function rewritten: keep the prompt's imports and helpers in front of it
        return prompt_code + "\n" + whole[-1]
    if not entry and ("```" in text or re.search(r"^def ", text, re.MULTILINE)):
        code = extract_code(text)
        return prompt_code + "\n" + code if code else ""
    if entry and re.search(rf"^def {re.escape(entry)}\b", text, re.MULTILINE):
        code = extract_code(text, entry)
        return prompt_code + "\n" + code if code else ""
    if text.startswith("```"):  # the body alone, inside a fence
        text = fenced_blocks(text)[0][1] if fenced_blocks(text) else ""
    # A continuation of the prompt's function body: cut where a new top-level statement (or a fence) starts.
    return prompt_code + STOP.split(text, maxsplit=1)[0]


def syntax_ok(program: str) -> bool:
    """Checked in the parent (compiling runs nothing) so broken programs cost no sandbox start."""
    return bool(program.strip()) and _parses(program)
