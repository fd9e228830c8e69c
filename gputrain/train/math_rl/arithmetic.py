"""Seeded arithmetic word problems in GSM8K's format (``question`` / ``answer`` ending ``#### n``).

Why: CPU profiles and tests need math data without a download. A tiny random-init policy almost never
states a right answer to these (issue 29: under 1 % of samples in 80 GRPO steps), so the math ``cpu``
profiles use one-digit operands (``max_operand=9``) and a supervised warm start
(``gputrain.train.grpo.warm_start``) before GRPO.
"""

from __future__ import annotations

import random
from typing import Any

_NAMES = ("Ana", "Ben", "Cai", "Dee", "Eli", "Fay", "Gus", "Ida")
_THINGS = ("apples", "books", "coins", "cards", "pens", "shells")


#: Largest operand of sums and differences by default (products: 2..9).
MAX_OPERAND = 20


def _problem(rng: random.Random, top: int) -> dict[str, Any]:
    kind = rng.choice(("add", "sub", "mul", "bare"))
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(1, top), rng.randint(1, top)
    if kind == "add":
        c = a + b
        question = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have?"
        work = f"{a} + {b} = {c}"
    elif kind == "sub":
        a, b = max(a, b), min(a, b)
        c = a - b
        question = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?"
        work = f"{a} - {b} = {c}"
    elif kind == "mul":
        a, b = rng.randint(2, min(9, top)), rng.randint(2, min(9, top))
        c = a * b
        question = f"{name} buys {a} boxes with {b} {thing} each. How many {thing} is that?"
        work = f"{a} * {b} = {c}"
    else:
        c = a + b
        question = f"What is {a} + {b}?"
        work = f"{a} + {b} = {c}"
    return {"question": question, "answer": f"{work}\n#### {c}"}


def generate_problems(n: int, seed: int = 0, max_operand: int | None = None) -> list[dict[str, Any]]:
    """``n`` problems; the same ``(n, seed, max_operand)`` always gives the same list, on every rank.

    ``max_operand`` (``data.max_operand``; default 20) bounds every operand: 9 gives one-digit operands, whose
    sums, differences and products a tiny model's tokenizer holds as single tokens -- a task a policy trained
    from scratch on a CPU can learn in minutes (issue 29); the default draws are unchanged."""
    rng = random.Random(seed)
    top = max_operand or MAX_OPERAND
    return [_problem(rng, top) for _ in range(n)]
