"""What a GRPO run reports in ``result.json``: every reward component next to the sum, the evaluation, and
flags for runs whose numbers went up for the wrong reason.

Why: the summed reward alone rose in runs that learned to output nothing (a length reward paid the empty
completion) or to print markers without answers. A reader of ``result.json`` (and of ``gputrain logs
--summary``, which shows it) must see per-component trends and the evaluation's accuracy, length and
format rate, and be told when they contradict the sum. Pure: the trainer hands in its per-step metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Reward components that measure getting the task right, and those that measure answering in form.
CORRECTNESS_REWARDS = ("correctness", "code_pass_rate")
FORMAT_REWARDS = ("format",)
WINDOW = 10
TOLERANCE = 0.02
EMPTY_EVAL_LIMIT = 0.5


def _window_means(series: Sequence[float]) -> tuple[float | None, float | None]:
    if not series:
        return None, None
    head, tail = series[:WINDOW], series[-WINDOW:]
    return sum(head) / len(head), sum(tail) / len(tail)


def run_flags(trends: Mapping[str, tuple[float | None, float | None]], evaluation: Mapping[str, float]) -> list[str]:
    """Plain-language warnings: empty evaluation outputs; the summed reward rising while every correctness
    and format component present falls."""
    flags: list[str] = []
    empty = evaluation.get("empty_rate")
    if empty is not None and empty >= EMPTY_EVAL_LIMIT:
        flags.append(f"{empty:.0%} of the final evaluation's completions are empty: the policy may have "
                     "learned to say nothing")
    first, last = trends.get("reward", (None, None))
    if first is None or last is None or last <= first + TOLERANCE:
        return flags
    quality = [n for n in (*CORRECTNESS_REWARDS, *FORMAT_REWARDS) if n in trends]
    falling = [n for n in quality if _falls(trends[n])]
    if quality and falling == quality:
        names = " and ".join(falling)
        flags.append(f"summed reward rose ({first:.3f} -> {last:.3f}) while {names} fell: the gain comes from "
                     "the other components (reward hacking?)")
    return flags


def _falls(trend: tuple[float | None, float | None]) -> bool:
    first, last = trend
    return first is not None and last is not None and last < first - TOLERANCE


def run_result(
    history: Sequence[Mapping[str, float]], evaluation: Mapping[str, float], reward_names: Sequence[str]
) -> dict[str, Any]:
    """The reward, each component (first/last ``WINDOW`` steps), the final evaluation as ``eval_*``, flags."""
    series: dict[str, list[float]] = {"reward": [h["reward_mean"] for h in history if "reward_mean" in h]}
    for name in reward_names:
        key = f"rewards/{name}/mean"
        series[name] = [h[key] for h in history if key in h]
    trends = {name: _window_means(values) for name, values in series.items()}
    out: dict[str, Any] = {
        "reward_first10": trends["reward"][0],
        "reward_last10": trends["reward"][1],
        "rewards": {name: {"first10": trends[name][0], "last10": trends[name][1]} for name in reward_names},
        **{f"eval_{k}": v for k, v in evaluation.items()},
    }
    out["flags"] = run_flags(trends, evaluation)
    return out
