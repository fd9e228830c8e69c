"""grpo_math for real on CPU: fully_shard over 2 gloo ranks, reward rises, rank-0 evaluation and samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.math_rl_run import first_last, metric_series, run_recipe

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch")

OVERRIDES = [
    "algorithm.rewards=[correctness,format,integer]",
    "algorithm.reward_weights=[1.0,1.0,1.0]",
    "algorithm.eval_samples=8",
    "train.learning_rate=1e-3",
    "train.max_steps=30",
    "train.eval_every=15",
]


def test_grpo_math_cpu_trains_sharded_and_evaluates(tmp_path: Path) -> None:
    job = tmp_path / "grpo_math"
    rc, log = run_recipe(job, "grpo_math_fsdp.yaml", OVERRIDES)
    assert rc == 0, log[-4000:]
    result = json.loads((job / "result.json").read_text())

    assert result["strategy_in_effect"] == "fsdp"
    assert result["sharded_local_numel"] <= 0.55 * result["global_numel"]
    assert "strategy requested=fsdp in effect=fsdp" in log

    first, last = first_last(metric_series(job, "reward_mean"))
    assert last > first + 0.03, (first, last)
    assert result["reward_last10"] > result["reward_first10"]

    for key in ("eval_accuracy", "eval_gsm8k_accuracy", "eval_valid_format_rate", "eval_mean_length"):
        assert key in result, sorted(result)
    assert 0.0 <= result["eval_gsm8k_accuracy"] <= 1.0 and result["eval_mean_length"] > 0
    samples = [json.loads(x) for x in (job / "eval_samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 8  # evaluations at step 15 and at the end, 8 problems each
    assert {"problem", "prediction", "truth", "correct"} <= set(samples[0])
    assert all(s["truth"].lstrip("-").isdigit() for s in samples)
