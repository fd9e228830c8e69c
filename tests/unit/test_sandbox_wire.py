"""The sandbox child's JSON lines (``wire.py``) and what a sandboxed process imports before a program runs.

Starting the two interpreters of each program is most of what the code reward costs (#26): the child
speaks JSON through CPython's ``_json`` instead of the ``json`` package (which imports ``re``), and
imports neither ``typing``, ``signal``, ``functools`` nor ``ast`` (the judge parses with ``_ast``). The
trainer reads the child's lines with ``json.loads``, so the text must be what ``json.dumps`` writes.
"""

from __future__ import annotations

import json
import math

import pytest

from gputrain.train.sandbox import Job, SandboxLimits, SandboxPool, wire

PLAIN = [
    None, True, False, 0, -7, 10**40, 1.5, -0.0, 1e300, 5e-324, "", "plain", 'quote " backslash \\ nul \x00',
    "é ü 😀 \u2028", [], {}, [1, [2, [3, []]]], {"a": {"l": [None, 1.25, "x"]}, "id": "ab12"},
    {"value": {"d": [["k", {"t": [1, 2]}]]}, "id": None},
]


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_the_child_writes_what_json_dumps_writes_and_reads_it_back(value: object) -> None:
    text = wire.dumps(value)
    assert text == json.dumps(value)
    assert wire.loads(text + "\n") == json.loads(text)


def test_non_finite_floats_and_tuples_as_json_writes_them() -> None:
    values = [math.nan, math.inf, -math.inf, (1, "a")]
    assert wire.dumps(values) == json.dumps(values) == '[NaN, Infinity, -Infinity, [1, "a"]]'
    back = wire.loads(' [NaN, Infinity, -Infinity] ')
    assert math.isnan(back[0]) and back[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize("text", ["", "   ", "{", '{"a": 1} {"b": 2}', "nope", "[1, 2"])
def test_a_line_that_is_not_one_json_document_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        wire.loads(text)


@pytest.mark.parametrize("value", [{1: 2}, object(), {b"k": 1}, [set()]])
def test_what_the_protocol_never_sends_is_refused_not_mangled(value: object) -> None:
    with pytest.raises(TypeError):
        wire.dumps(value)


HEAVY = ("json", "re", "typing", "signal", "enum", "ast", "functools", "collections")


def test_a_program_runs_in_a_process_that_imported_none_of_the_heavy_modules() -> None:
    """What the program's process had loaded when the program started, and the judge's, on this machine's
    isolation level: a regression here costs every program of a code-RL run its start-up again."""
    program = (
        "import sys\n"
        f"LOADED = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "def loaded():\n"
        "    return LOADED\n"
    )
    judge_side = f"import sys\nassert sorted(m for m in {HEAVY!r} if m in sys.modules) == []"
    pool = SandboxPool(workers=1, limits=SandboxLimits(wall_seconds=10.0, test_seconds=5.0), allow_weak=True)
    result = pool.run(Job(program, ["assert loaded() == []", judge_side]))
    assert [(o.status, o.reason) for o in result.outcomes] == [("passed", ""), ("passed", "")], result.outcomes
