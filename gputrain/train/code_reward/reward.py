"""The code reward: run each completion's program against its task's tests in the sandbox.

    from gputrain.train.code_reward import load_mbpp, build_prompt, score_completions
    tasks = load_mbpp("mbpp.jsonl")
    rewards = score_completions(completions, tasks, workers=4)        # list[float], one per completion

Reward = passed tests / all tests (``all_or_nothing=True``: 1.0 only if all pass). Programs that do not
parse score 0 without a sandbox start; identical (program, task) pairs in one call run once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputrain.train.code_reward.extract import program_for, syntax_ok
from gputrain.train.code_reward.tasks import CodeTask, normalize_task
from gputrain.train.sandbox import Job, ProgramResult, SandboxLimits, SandboxPool, TestOutcome

Completion = str | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class CompletionScore:
    reward: float
    passed: int
    total: int
    program: str
    outcomes: tuple[TestOutcome, ...]
    stdout: str = ""
    isolation: str = ""


@functools.lru_cache(maxsize=8)
def get_pool(workers: int, limits: SandboxLimits) -> SandboxPool:
    """One pool per setting for the life of the trainer (the isolation is chosen once per process).

    Raises :class:`gputrain.errors.SandboxError` where only weak isolation is possible and it was not
    explicitly allowed (``GPUTRAIN_SANDBOX_ALLOW_WEAK=1``).
    """
    return SandboxPool(workers=workers, limits=limits)


def _as_task(task: CodeTask | Mapping[str, Any], index: int) -> CodeTask:
    return normalize_task(dict(task), f"task {index}")


def score_completions_detailed(
    completions: Sequence[Completion],
    tasks: Sequence[CodeTask | Mapping[str, Any]],
    *,
    all_or_nothing: bool = False,
    workers: int = 4,
    limits: SandboxLimits | None = None,
) -> list[CompletionScore]:
    if len(completions) != len(tasks):
        raise ValueError(f"{len(completions)} completions but {len(tasks)} tasks")
    pool = get_pool(workers, limits or SandboxLimits())
    normalized = [_as_task(t, i) for i, t in enumerate(tasks)]
    programs = [program_for(c, t) for c, t in zip(completions, normalized, strict=True)]
    keys: list[tuple[str, ...] | None] = []
    unique: dict[tuple[str, ...], Job] = {}
    for program, task in zip(programs, normalized, strict=True):
        if not syntax_ok(program):
            keys.append(None)
            continue
        key = (program, task["setup_code"], task["judge_prelude"], task["entry_point"], *task["tests"])
        keys.append(key)
        unique.setdefault(key, Job(program, task["tests"], task["setup_code"], task["judge_prelude"],
                                   task["entry_point"]))
    results: dict[tuple[str, ...], ProgramResult] = dict(
        zip(unique, pool.map(list(unique.values())), strict=True)
    )
    scores = []
    for maybe_key, program, task in zip(keys, programs, normalized, strict=True):
        total = len(task["tests"])
        if maybe_key is None:
            reason = "no code found" if not program.strip() else "syntax error"
            outcomes = tuple(TestOutcome(t, "crashed", reason) for t in task["tests"])
            scores.append(CompletionScore(0.0, 0, total, program, outcomes))
            continue
        result = results[maybe_key]
        passed = result.passed
        reward = (1.0 if passed == total else 0.0) if all_or_nothing else passed / total
        scores.append(CompletionScore(reward, passed, total, program, result.outcomes,
                                      result.stdout[:2000], result.isolation))
    return scores


def score_completions(
    completions: Sequence[Completion],
    tasks: Sequence[CodeTask | Mapping[str, Any]],
    *,
    all_or_nothing: bool = False,
    workers: int = 4,
    limits: SandboxLimits | None = None,
) -> list[float]:
    """One reward per completion, in order; ``tasks[i]`` is the task of ``completions[i]``."""
    details = score_completions_detailed(
        completions, tasks, all_or_nothing=all_or_nothing, workers=workers, limits=limits,
    )
    return [d.reward for d in details]


TASK_COLUMNS = ("task_id", "text", "tests", "test_list", "setup_code", "test_setup_code", "test_imports", "reference",
                "code", "shown_test", "prompt_code", "judge_prelude", "entry_point")


def trl_reward_function(*, all_or_nothing: bool = False, workers: int = 4,
                        limits: SandboxLimits | None = None) -> Callable[..., list[float]]:
    """A reward function in TRL's form ``f(prompts, completions, **columns)``: the dataset's task
    columns (``test_list``/``tests``, ...) arrive as per-completion lists."""

    def code_reward(prompts: Sequence[Any], completions: Sequence[Completion], **columns: Any) -> list[float]:
        present = {k: v for k, v in columns.items() if k in TASK_COLUMNS and isinstance(v, list)}
        tasks = [{k: v[i] for k, v in present.items()} for i in range(len(completions))]
        return score_completions(completions, tasks, all_or_nothing=all_or_nothing, workers=workers,
                                 limits=limits)

    code_reward.__name__ = "code_pass_rate" if not all_or_nothing else "code_all_pass"
    return code_reward
