"""Held-out evaluation for math RL: accuracy by dataset and MATH level, length, format; a samples table.

Runs on rank 0 only (the core calls it there). The samples table (problem / prediction / truth / correct)
goes to ``<job_dir>/eval_samples.jsonl`` (appended, one line per sample, tagged with the evaluation
number) and, when a W&B run is active in this process, to W&B as a table.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputrain.train.math_rl.answers import answers_equal, extract_answer
from gputrain.train.math_rl.rewards import format_reward, whitespace_tokens

Row = dict[str, Any]
SAMPLES_FILE = "eval_samples.jsonl"


def math_metrics(completions: list[str], rows: list[Row], count_tokens: Callable[[str], int]) -> dict[str, Any]:
    """Metrics plus the per-sample records they came from."""
    samples: list[dict[str, Any]] = []
    for text, row in zip(completions, rows, strict=True):
        predicted = extract_answer(text)
        samples.append(
            {
                "problem": row["problem"],
                "prediction": predicted,
                "truth": row["answer"],
                "correct": answers_equal(row["answer"], predicted),
                "dataset": row["dataset"],
                "level": row.get("level"),
                "length": count_tokens(text),
                "valid_format": format_reward(text, row) == 1.0,
                "completion": text,
            }
        )
    n = max(1, len(samples))
    metrics: dict[str, float] = {
        "accuracy": sum(s["correct"] for s in samples) / n,
        "mean_length": sum(s["length"] for s in samples) / n,
        "valid_format_rate": sum(s["valid_format"] for s in samples) / n,
    }
    gsm = [s for s in samples if s["dataset"] in ("gsm8k", "arithmetic")]
    if gsm:
        metrics["gsm8k_accuracy"] = sum(s["correct"] for s in gsm) / len(gsm)
    math_rows = [s for s in samples if s["dataset"] in ("math", "deepscaler")]
    if math_rows:
        metrics["math_accuracy"] = sum(s["correct"] for s in math_rows) / len(math_rows)
    for level in range(1, 6):
        at = [s for s in math_rows if s["level"] == level]
        if at:
            metrics[f"math_accuracy_level_{level}"] = sum(s["correct"] for s in at) / len(at)
    return {"metrics": metrics, "samples": samples}


class MathEvaluator:
    """``evaluate(completions, rows) -> metrics``, the ``GRPOTask.evaluate`` contract, writing the table."""

    def __init__(self, job_dir: Path, count_tokens: Callable[[str], int] | None = None) -> None:
        self.job_dir = Path(job_dir)
        self.count_tokens = count_tokens or whitespace_tokens
        self.calls = 0

    def __call__(self, completions: list[str], rows: list[Row]) -> dict[str, float]:
        self.calls += 1
        result = math_metrics(completions, rows, self.count_tokens)
        self._write_samples(result["samples"])
        self._log_wandb_table(result["samples"])
        return dict(result["metrics"])

    def _write_samples(self, samples: list[dict[str, Any]]) -> None:
        # Appending whole lines in one write and fsync-ing: a crash leaves earlier evaluations intact.
        text = "".join(json.dumps({"eval": self.calls, **s}) + "\n" for s in samples)
        with open(self.job_dir / SAMPLES_FILE, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    def _log_wandb_table(self, samples: list[dict[str, Any]]) -> None:
        wandb = sys.modules.get("wandb")  # only if the runtime already started a run
        if wandb is None or getattr(wandb, "run", None) is None:
            return
        columns = ["problem", "prediction", "truth", "correct"]
        table = wandb.Table(columns=columns, data=[[str(s[c]) for c in columns] for s in samples])
        wandb.log({"eval/samples": table})
