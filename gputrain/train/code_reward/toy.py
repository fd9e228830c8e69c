"""A toy code task a random tiny policy sometimes solves (the ``cpu`` profile's GRPO workload).

The prompt is a function whose one-line body is cut after the operator, ``return x*``; the comment
above it names the constant and the policy writes it, e.g. ``2``. Three asserts (x = 0, 1, 3) give
partial credit: for ``f(x) = x*2`` any number (or ``x``) passes ``f(0) == 0``; only ``2`` passes all
three. A uniformly random string over ``TOY_ALPHABET`` of length 1–3 earns some credit a good part of
the time and full credit now and then, so a from-scratch policy gets a gradient from the first step,
and the best answer is one token long.
"""

from __future__ import annotations

import random

from gputrain.train.code_reward.tasks import CodeTask

TOY_ALPHABET = "x+-*0123456789"
TOY_INPUTS = (0, 1, 3)
OPS = ("+", "-", "*")


def _apply(op: str, x: int, k: int) -> int:
    return x + k if op == "+" else x - k if op == "-" else x * k


def toy_task(op: str, k: int) -> CodeTask:
    prompt = f"# f(x) = x{op}{k}\ndef f(x):\n    return x{op}"
    tests = [f"assert f({x}) == {_apply(op, x, k)}" for x in TOY_INPUTS]
    return CodeTask(
        task_id=f"toy/x{op}{k}", text=f"f(x) = x{op}{k}", tests=tests, setup_code="",
        reference=f"{prompt}{k}\n", shown_test=tests[0], prompt_code=prompt, judge_prelude="",
        entry_point="f",
    )


def toy_tasks(n: int | None = None, *, seed: int = 0, max_k: int = 9) -> list[CodeTask]:
    """All ``op × k`` tasks (27 by default), shuffled with ``seed``; ``n`` repeats/cuts to that many."""
    tasks = [toy_task(op, k) for op in OPS for k in range(1, max_k + 1)]
    random.Random(seed).shuffle(tasks)
    if n is None:
        return tasks
    return [tasks[i % len(tasks)] for i in range(n)]
