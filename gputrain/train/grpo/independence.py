"""Does the policy's output still depend on the prompt? Reward-hacking flags for every RL ``result.json``.

Why (issue 29): the GDPO CPU profile learned to answer every question with " 42 42 42": its format and
length rewards rose, accuracy stayed 0, and nothing said so. A policy that ignores its prompt shows in what it
writes, whatever the rewards: different prompts get the same completion (or the same final answer), or each
completion is a copy of its own prompt. A policy paid for form shows in its rewards: the auxiliary
components are earned while correctness stays at the floor.

Pure: the trainer hands in the prompts, the completions, and (optionally) the answer each one states and
its reward components; :func:`independence_flags` turns the figures into plain-language warnings, which
``result.json["flags"]`` carries and ``gputrain logs --summary`` shows as warning rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

#: Different prompts needed before "the same completion for most prompts" means anything.
MIN_PROMPTS = 4
#: Share of distinct prompts answered with one same completion / final answer that is flagged.
IDENTICAL_LIMIT = 0.5
#: Share of completions copied from their own prompt that is flagged.
ECHO_LIMIT = 0.5
#: A completion whose word trigrams are at least this share of its prompt's is a copy of it.
ECHO_OVERLAP = 0.8
#: A completion under three words must be at least this long to count as a copy: a short answer (a number,
#: the digit the toy code prompt names) often stands in its prompt, and writing it is answering, not copying.
ECHO_MIN_CHARS = 8
#: Correctness at or below this while an auxiliary reward is earned at least AUX_EARNED: paid for form.
CORRECT_FLOOR = 0.05
AUX_EARNED = 0.5
CORRECTNESS_NAMES = ("correctness", "code_pass_rate")


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _trigrams(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def is_echo(prompt: str, completion: str) -> bool:
    """Whether ``completion`` is (mostly) a copy of ``prompt``: 80 % of its word trigrams occur in the prompt,
    or, under three words, the whole completion is a substring of the prompt of at least
    :data:`ECHO_MIN_CHARS` characters. Empty is not an echo."""
    words = _norm(completion).split()
    if not words:
        return False
    if len(words) < 3:
        text = " ".join(words)
        return len(text) >= ECHO_MIN_CHARS and text in _norm(prompt)
    mine = _trigrams(words)
    theirs = _trigrams(_norm(prompt).split())
    return len(mine & theirs) / len(mine) >= ECHO_OVERLAP


def _top_share(by_prompt: Mapping[str, Counter[str]]) -> tuple[float, str | None]:
    """Largest share of distinct prompts whose commonest value (ties: each tied one) is one same value.

    The commonest, not any: with many samples per prompt (a GRPO group) and a small answer space, a value
    sampled now and then lands in most prompts' groups while each prompt's own answer is different."""
    counts: Counter[str] = Counter()
    for values in by_prompt.values():
        nonempty = {v: n for v, n in values.items() if v}
        top = max(nonempty.values(), default=0)
        counts.update(v for v, n in nonempty.items() if n == top)
    if not counts or not by_prompt:
        return 0.0, None
    value, n = counts.most_common(1)[0]
    return n / len(by_prompt), value


def prompt_independence(
    prompts: Sequence[str],
    completions: Sequence[str],
    answer_of: Callable[[str], str | None] | None = None,
) -> dict[str, float | str | None]:
    """Figures over one batch of (prompt, completion) pairs, several completions per prompt allowed:

    - ``identical_share``: the largest share of distinct prompts whose commonest (whitespace- and
      case-normalised, non-empty) completion is one same completion; ``identical_completion`` is that one;
    - ``same_answer_share``: the same over the final answers ``answer_of`` reads (math), when given;
    - ``echo_share``: share of non-empty completions that copy their own prompt (:func:`is_echo`);
    - ``distinct_prompts``: how many different prompts the figures rest on.
    """
    texts: dict[str, Counter[str]] = {}
    answers: dict[str, Counter[str]] = {}
    echoes, nonempty = 0, 0
    for prompt, completion in zip(prompts, completions, strict=True):
        texts.setdefault(prompt, Counter())[_norm(completion)] += 1
        if answer_of is not None:
            answer = answer_of(completion)
            answers.setdefault(prompt, Counter())[_norm(answer) if answer else ""] += 1
        if completion.strip():
            nonempty += 1
            echoes += is_echo(prompt, completion)
    identical, top = _top_share(texts)
    out: dict[str, float | str | None] = {
        "distinct_prompts": float(len(texts)),
        "identical_share": identical,
        "identical_completion": top,
        "echo_share": echoes / nonempty if nonempty else 0.0,
    }
    if answer_of is not None:
        share, answer = _top_share(answers)
        out["same_answer_share"], out["same_answer"] = share, answer
    return out


def independence_flags(
    figures: Mapping[str, float | str | None],
    rewards: Mapping[str, float] | None = None,
    where: str = "final evaluation",
) -> list[str]:
    """Plain-language warnings from :func:`prompt_independence`'s figures and mean reward components.

    ``rewards``: component name → mean over the same completions (or the last training steps). Flagged:
    most prompts answered identically; most completions copying their prompt; an auxiliary component earned
    (≥ 0.5) while correctness stays at the floor (≤ 0.05).
    """
    flags: list[str] = []
    enough = float(figures.get("distinct_prompts") or 0) >= MIN_PROMPTS
    identical = float(figures.get("identical_share") or 0)
    if enough and identical >= IDENTICAL_LIMIT:
        text = str(figures.get("identical_completion") or "")[:40]
        flags.append(f"{identical:.0%} of the {where}'s different prompts got the same completion ({text!r}): "
                     "the output does not depend on the prompt (reward hacking?)")
    same = float(figures.get("same_answer_share") or 0)
    if enough and same >= IDENTICAL_LIMIT and identical < IDENTICAL_LIMIT:
        answer = str(figures.get("same_answer") or "")[:40]
        flags.append(f"{same:.0%} of the {where}'s different prompts got the same final answer ({answer!r}): "
                     "the answer does not depend on the question (reward hacking?)")
    echo = float(figures.get("echo_share") or 0)
    if echo >= ECHO_LIMIT:
        flags.append(f"{echo:.0%} of the {where}'s completions copy their prompt: the policy echoes instead of "
                     "answering (reward hacking?)")
    flags += form_without_substance(rewards or {}, where)
    return flags


def form_without_substance(rewards: Mapping[str, float], where: str) -> list[str]:
    """An auxiliary component earned while every correctness component present stays at the floor."""
    correct = {n: v for n, v in rewards.items() if n in CORRECTNESS_NAMES}
    earned = {n: v for n, v in rewards.items() if n not in CORRECTNESS_NAMES and v >= AUX_EARNED}
    if not correct or not earned or max(correct.values()) > CORRECT_FLOOR:
        return []
    paid = ", ".join(f"{n} {v:.2f}" for n, v in earned.items())
    right = ", ".join(f"{n} {v:.2f}" for n, v in correct.items())
    return [f"{where}: rewards for form are earned ({paid}) while {right}: the policy is paid for the "
            "shape of an answer, not for answering (reward hacking?)"]
