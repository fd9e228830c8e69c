"""Rank-0 metrics: ``metrics.jsonl`` always, W&B and TensorBoard when enabled and installed.

One object, ``Metrics``, so training loops call ``ctx.metrics.log(step, loss=...)`` without ``if wandb``
branches; on ranks other than 0 it does nothing. W&B runs offline unless ``WANDB_API_KEY`` is in the
environment (or ``WANDB_MODE`` says otherwise); the config it receives has every value of a variable
named in the recipe's ``secrets:`` list replaced by ``***`` (the names are kept, never the values).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gputrain.logs.schema import METRICS_FILE, MetricsWriter
from gputrain.recipe.schema import Recipe
from gputrain.train.runtime.perf import PerfLog


def redact(obj: Any, secret_values: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: redact(v, secret_values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, secret_values) for v in obj]
    if isinstance(obj, str) and any(s and s in obj for s in secret_values):
        return "***"
    return obj


class Metrics:
    def __init__(self, job_dir: Path, recipe: Recipe, enabled: bool) -> None:
        self.enabled = enabled
        self.notes: list[str] = []
        self._writer = MetricsWriter(job_dir / METRICS_FILE, enabled=enabled)
        self._wandb: Any = None
        self._tb: Any = None
        self.last: dict[str, float] = {}
        self.perf = PerfLog()
        if not enabled:
            return
        tracking = recipe.tracking
        secrets = {os.environ.get(name, "") for name in recipe.secrets} - {""}
        safe_config = redact(recipe.model_dump(mode="json", exclude={"profiles"}), secrets)
        if tracking.wandb:
            self._start_wandb(job_dir, safe_config, tracking.project)
        if tracking.tensorboard:
            self._start_tensorboard(job_dir)

    def _start_wandb(self, job_dir: Path, config: dict[str, Any], project: str) -> None:
        try:
            import wandb
        except ImportError:
            self.notes.append("wandb enabled in the recipe but not installed: skipped")
            return
        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        self._wandb = wandb.init(
            project=project,
            name=job_dir.name,
            dir=str(job_dir),
            config=config,
            mode=mode,  # type: ignore[arg-type]
        )
        self.notes.append(f"wandb {mode}")

    def _start_tensorboard(self, job_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            self.notes.append("tensorboard enabled in the recipe but not installed: skipped")
            return
        self._tb = SummaryWriter(log_dir=str(job_dir / "tensorboard"))
        self.notes.append("tensorboard on")

    def log(self, step: int, **values: Any) -> None:
        if not self.enabled:
            return
        record = self._writer.log(step, **values)
        if record is None:
            return
        self.perf.observe(record)
        numbers = {k: v for k, v in record.items() if k not in ("step", "time")}
        self.last = {k: float(v) for k, v in numbers.items()}
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
