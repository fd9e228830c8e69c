"""Final answers: where they sit in a completion, and whether two of them are equal.

Two conventions: GSM8K ends a solution with ``#### <answer>``; MATH and DeepScaleR put it in ``\\boxed{}``.
A completion is read by whichever marker it uses last. Equality is math-verify's (symbolic and numeric:
``\\frac{1}{2}`` equals ``0.5``, ``1,234`` equals ``1234``). Anything that cannot be read or parsed is
"no answer" or "not equal", never an exception: a reward must not stop training.
"""

from __future__ import annotations

import logging
import re

_LEADING_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?![\w/^])")
_INTEGER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)")
_log = logging.getLogger(__name__)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if absent or open."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def last_hash_answer(text: str) -> str | None:
    """The answer after the last ``####``: its leading number if it starts with one (``#### 72 apples`` →
    ``72``, as GSM8K graders read it), else the rest of the line; None if empty."""
    if "####" not in text:
        return None
    rest = text.rsplit("####", 1)[1].split("\n", 1)[0].strip().strip("$").strip()
    number = _LEADING_NUMBER.match(rest)
    if number:
        return number.group(0).rstrip(".,")
    return rest.rstrip(".").strip() or None


def extract_answer(text: str) -> str | None:
    """The final answer a completion states, by its last ``####`` or ``\\boxed{}``, whichever comes later."""
    hash_at, box_at = text.rfind("####"), max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if hash_at < 0 and box_at < 0:
        return None
    return last_hash_answer(text) if hash_at > box_at else last_boxed(text)


def gold_answer(row_answer: str | None, solution: str | None = None) -> str | None:
    """Reference answer of a dataset row: a plain answer field as is, else the ``####``/``\\boxed{}`` in it
    (GSM8K's ``answer``) or in the solution (MATH)."""
    if row_answer and extract_answer(row_answer) is None and "####" not in row_answer:
        return row_answer.strip() or None
    for text in (row_answer, solution):
        found = extract_answer(text) if text else None
        if found:
            return found
    return None


def is_integer(answer: str | None) -> bool:
    """``42``, ``-7``, ``1,234`` (spaces, ``$`` and a trailing period ignored); not ``4.5`` or ``x``."""
    if not answer:
        return False
    return _INTEGER.fullmatch(answer.replace(" ", "").strip("$").rstrip(".")) is not None


def answers_equal(gold: str | None, predicted: str | None, timeout_s: int = 3) -> bool:
    """math-verify equality of two answer strings; False for anything unparseable or on any error."""
    if not gold or not predicted:
        return False
    if gold.strip() == predicted.strip():
        return True
    try:
        from math_verify import parse, verify

        g = parse(f"${gold}$", parsing_timeout=timeout_s)
        p = parse(f"${predicted}$", parsing_timeout=timeout_s)
        return bool(g and p and verify(g, p, timeout_seconds=timeout_s))
    except Exception as exc:  # math-verify (sympy) may raise on odd input; it is just "not equal"
        _log.debug("math-verify failed on %r vs %r: %s", gold, predicted, exc)
        return False
