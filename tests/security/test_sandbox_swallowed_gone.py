"""Red-team round 5 — a program that dies or runs out of time never passes a test, whatever the test catches.

The attack, on the tree before this round: when the program died (``os._exit``, a crash) or timed out during a
call, the judge raised ``ProgramGone`` inside the test, a ``BaseException`` so that ``except Exception`` does
not swallow it, but a test that checks for an error with a bare ``except:`` (or ``except BaseException:``) did
swallow it, finished, and its verdict "passed" was taken: a program that kills itself (or hangs until its time
is spent) on every call passed every such test. The trainer is the one that knows the program is gone (it
built that reply), so now a test during which the program went is that status — crashed or timed out — not
the judge's word.
"""

from __future__ import annotations

import pytest

from gputrain.train.sandbox import Job, SandboxLimits, SandboxPool

LIMITS = SandboxLimits(wall_seconds=6.0, test_seconds=2.0, cpu_seconds=3)
EXPECTS_AN_ERROR = "try:\n    f(-1)\nexcept:\n    pass\nelse:\n    raise AssertionError('no error')\n"


@pytest.fixture(scope="module")
def pool() -> SandboxPool:
    return SandboxPool(workers=1, limits=LIMITS)


def _statuses(pool: SandboxPool, program: str, tests: list[str]) -> list[str]:
    return [o.status for o in pool.run(Job(program, tests)).outcomes]


def test_a_program_that_dies_does_not_pass_a_test_that_catches_everything(pool: SandboxPool) -> None:
    dies = "import os\n\ndef f(x):\n    os._exit(0)\n"
    assert _statuses(pool, dies, [EXPECTS_AN_ERROR, "assert f(2) == 4"]) == ["crashed", "crashed"]
    raises = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return 2 * x\n"
    assert _statuses(pool, raises, [EXPECTS_AN_ERROR, "assert f(2) == 4"]) == ["passed", "passed"]


def test_a_program_that_hangs_does_not_pass_a_test_that_catches_everything(pool: SandboxPool) -> None:
    hangs = "def f(x):\n    while True:\n        pass\n"
    test = "try:\n    f(-1)\nexcept BaseException:\n    pass\n"
    assert _statuses(pool, hangs, [test]) == ["timed_out"]
