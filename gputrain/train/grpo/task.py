"""What a GRPO entrypoint hands the core: prompts, reward components, and how to evaluate.

The core (``gputrain.train.grpo.trainer``) knows nothing about code or math: grpo_code, grpo_math and
gdpo each build one :class:`GRPOTask` and call :func:`gputrain.train.grpo.trainer.train_grpo`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
#: ``score(completions, rows) -> [len(completions)][len(reward_names)]`` rewards (NaN: not scored).
ScoreFn = Callable[[list[str], list[Row]], list[list[float]]]
#: ``evaluate(completions, rows) -> {metric: value}`` on held-out rows (rank 0 only).
EvalFn = Callable[[list[str], list[Row]], dict[str, float]]


@dataclass
class GRPOTask:
    name: str
    train_rows: Sequence[Row]
    """Each row has a ``prompt`` string plus whatever ``score`` needs (tests, answers)."""
    eval_rows: Sequence[Row]
    reward_names: list[str]
    score: ScoreFn
    evaluate: EvalFn | None = None
    """Default evaluation: the mean of each reward component on greedy completions."""
    corpus: list[str] = field(default_factory=list)
    """Text a tiny model's tokenizer is fitted on (prompts and reference solutions)."""
    report: dict[str, Any] = field(default_factory=dict)
    """Facts chosen at start that belong in ``result.json`` (e.g. the code sandbox's isolation)."""
    final_report: Callable[[], dict[str, Any]] | None = None
    """Figures the entry gathered during the run, merged into ``result.json`` when the core writes it."""
    check_prompts: Callable[[list[str], Sequence[Row]], None] | None = None
    """Called once before training with the first prompts as the policy sees them (chat template applied)
    and their rows; raises a one-line error when they contradict what the rewards demand."""
    plain_score: ScoreFn | None = None
    """``score`` without training-time wrappers (GDPO's per-step resolution tracker), for scoring evaluation
    completions; None: ``score`` itself."""
    answer_of: Callable[[str], str | None] | None = None
    """The final answer a completion states (math); the prompt-independence check compares answers too."""
    reference_completion: Callable[[Row], str | None] | None = None
    """A row's reference completion in the form the rewards read (math: the worked solution ending in the
    answer marker), for ``algorithm.warm_start_steps``; None: the task has none."""
