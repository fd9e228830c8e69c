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
_NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:/\d+)?")
_PLACEHOLDER = re.compile(r"(the|your)?(final)?answer(here)?|n/?a")
_INTEGER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)")
_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_log = logging.getLogger(__name__)


def _boxed_markers(text: str) -> list[re.Match[str]]:
    return list(_BOXED.finditer(text))


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed`` (or ``\\fbox``): ``\\boxed{...}`` with balanced braces, also with
    spaces before the brace (``\\boxed {4}``), or TeX's brace-less ``\\boxed 4`` (up to the next space or
    ``$``, as the MATH graders read it); None if absent or left open."""
    markers = _boxed_markers(text)
    if not markers:
        return None
    marker = markers[-1]
    rest = text[marker.end():]
    stripped = rest.lstrip()
    if not stripped.startswith("{"):
        if not rest[:1].isspace():  # \boxedx is another macro, not a box
            return None
        token = re.match(r"[^\s$]+", stripped)
        return token.group(0).rstrip(".,;") if token else None
    i = marker.end() + (len(rest) - len(stripped)) + 1
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
    markers = _boxed_markers(text)
    hash_at, box_at = text.rfind("####"), (markers[-1].start() if markers else -1)
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


def count_answer_markers(text: str, style: str) -> int:
    """How many final-answer markers of ``style`` (``boxed``: any ``\\boxed``/``\\fbox`` form; else ``####``)."""
    return len(_boxed_markers(text)) if style == "boxed" else text.count("####")


def is_stated_answer(answer: str | None, style: str) -> bool:
    """Whether ``answer`` is an answer at all rather than an empty or placeholder marker.

    GSM8K-style answers are numbers (``#### and the number``, an echo of the prompt, is not); a boxed one
    needs a digit or a letter once TeX braces, ``\\text`` and spaces are gone, and must not be a
    placeholder such as ``\\boxed{answer}`` or ``\\boxed{...}``.
    """
    if not answer:
        return False
    if style != "boxed":
        return _NUMBER.fullmatch(answer.replace(" ", "").strip("$").rstrip(".")) is not None
    core = re.sub(r"\\text\{([^{}]*)\}", r"\1", answer)
    core = re.sub(r"[\s{}$]", "", core)
    if not re.search(r"[0-9A-Za-z]", core):
        return False
    return _PLACEHOLDER.fullmatch(core.lower()) is None


def answer_form_conflict(rendered_prompt: str, style: str) -> str | None:
    """The *other* form's marker where a prompt as the model sees it (chat template, system turn and task
    text) asks for it: ``\\boxed{}`` in a prompt whose answers are read as ``####``, or the reverse. None
    when the prompt and the rewarded form agree."""
    if style == "boxed":
        return "####" if "####" in rendered_prompt else None
    return "\\boxed{}" if _boxed_markers(rendered_prompt) else None


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
