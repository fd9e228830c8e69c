"""Red-team round 4 — the function under test is the program's, even when its name is a builtin's.

The judge keeps builtin names for itself (a program must not replace the ``set``/``len``/``sorted`` a test
uses). A task whose function *is* named like a builtin (``sum``, ``pow``, ``round``, ``filter`` ...) was
then judged against the builtin: ``assert sum([1, 2]) == 3`` passed for every program — a wrong one, one
that defines nothing — so a wrong program scored 1.0 at every sandbox level. MBPP rows carry no entry point:
it is read from the reference solution, which defines it. Real sandbox, at the level this machine chooses.
"""

from __future__ import annotations

from typing import Any

import pytest

from gputrain.train.code_reward import score_completions_detailed
from gputrain.train.code_reward.tasks import normalize_task
from gputrain.train.sandbox import SandboxLimits

LIMITS = SandboxLimits(wall_seconds=20.0, test_seconds=10.0, cpu_seconds=10)
MBPP_ROW = {"task_id": 1, "text": "Write a function sum that adds the numbers of a list.",
            "code": "def sum(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n",
            "test_list": ["assert sum([1, 2]) == 3", "assert sum([]) == 0", "assert sum([0, 1, 2, 3]) == 6"]}
HUMANEVAL_LIKE = {"task_id": "he/1", "prompt_code": "def pow(a, b):\n    \"\"\"a to the b.\"\"\"\n",
                  "judge_prelude": "def pow(a, b):\n    \"\"\"a to the b.\"\"\"\n", "entry_point": "pow",
                  "tests": ["def check(candidate):\n    assert candidate(2, 3) == 8\n\ncheck(pow)\n",
                            "assert pow(3, 2) == 9"]}


def _rewards(completions: list[str], task: dict[str, Any]) -> list[float]:
    scores = score_completions_detailed(completions, [task] * len(completions), workers=1, limits=LIMITS)
    return [s.reward for s in scores]


def test_the_entry_point_of_an_mbpp_row_comes_from_its_reference() -> None:
    assert normalize_task(MBPP_ROW)["entry_point"] == "sum"


@pytest.mark.parametrize("task", [MBPP_ROW, HUMANEVAL_LIKE], ids=["mbpp", "humaneval"])
def test_a_wrong_program_named_like_a_builtin_scores_nothing(task: dict[str, Any]) -> None:
    name = "sum" if task is MBPP_ROW else "pow"
    right = MBPP_ROW["code"] if task is MBPP_ROW else "def pow(a, b):\n    return a ** b\n"
    wrong = f"```python\ndef {name}(*args):\n    return -1\n```"
    nothing = "```python\nanswer = 42\n```"
    assert _rewards([f"```python\n{right}```", wrong, nothing], task) == [1.0, 0.0, 0.0]
