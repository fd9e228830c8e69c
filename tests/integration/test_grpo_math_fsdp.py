"""grpo_math for real on CPU: the cpu profile's short seed (warm start, then GRPO) under fully_shard over 2 gloo
ranks; it learns the task (issue 29), and rank 0 evaluates at init, after the warm start and at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.math_rl_run import SHORT_SEED, assert_learns_the_task, metric_series, run_recipe

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch")


def test_grpo_math_cpu_learns_the_task_sharded_and_evaluates(tmp_path: Path) -> None:
    job = tmp_path / "grpo_math"
    # the profile's KL term (beta 0.04): its reference must be the warmed-up policy, not the random init
    rc, log = run_recipe(job, "grpo_math_fsdp.yaml", SHORT_SEED)
    assert rc == 0, log[-4000:]
    result = json.loads((job / "result.json").read_text())
    kl = metric_series(job, "kl")
    assert kl[0] < 1e-4 and "KL reference = the warmed-up policy" in log, kl[:3]  # step 1: policy == reference

    assert result["strategy_in_effect"] == "fsdp"
    assert result["sharded_local_numel"] <= 0.55 * result["global_numel"]
    assert "strategy requested=fsdp in effect=fsdp" in log
    assert_learns_the_task(job, result)

    for key in ("eval_accuracy", "eval_gsm8k_accuracy", "eval_valid_format_rate", "eval_mean_length"):
        assert key in result, sorted(result)
    samples = [json.loads(x) for x in (job / "eval_samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 64  # at init, after the warm start, at the end
    assert {"problem", "prediction", "truth", "correct"} <= set(samples[0])
    assert all(s["truth"].lstrip("-").isdigit() for s in samples)
