"""Seeded arithmetic word problems in GSM8K's format (``question`` / ``answer`` ending ``#### n``).

Why: CPU profiles and tests need math data without a download, easy enough that a tiny random-init model
learns something in a minute. What it learns first is the shape (one ``#### <integer>`` and a short
answer), which is exactly what the format, integer and length rewards measure; exact sums come later.
"""

from __future__ import annotations

import random
from typing import Any

_NAMES = ("Ana", "Ben", "Cai", "Dee", "Eli", "Fay", "Gus", "Ida")
_THINGS = ("apples", "books", "coins", "cards", "pens", "shells")


def _problem(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("add", "sub", "mul", "bare"))
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(1, 20), rng.randint(1, 20)
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
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        c = a * b
        question = f"{name} buys {a} boxes with {b} {thing} each. How many {thing} is that?"
        work = f"{a} * {b} = {c}"
    else:
        c = a + b
        question = f"What is {a} + {b}?"
        work = f"{a} + {b} = {c}"
    return {"question": question, "answer": f"{work}\n#### {c}"}


def generate_problems(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` problems; the same ``(n, seed)`` always gives the same list, on every rank."""
    rng = random.Random(seed)
    return [_problem(rng) for _ in range(n)]
