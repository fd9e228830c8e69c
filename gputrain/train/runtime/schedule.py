"""The learning-rate schedule every entrypoint uses: linear warm-up, then cosine, linear or constant.

One definition so that ``train.lr_schedule`` and ``train.warmup_steps`` mean the same in every recipe.
Returns a factor for ``torch.optim.lr_scheduler.LambdaLR``.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def lr_factor(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"unknown lr_schedule {schedule!r}")

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if schedule == "linear":
            return 1.0 - progress
        return 1.0

    return factor
