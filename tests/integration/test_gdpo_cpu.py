"""GDPO for real on CPU: tiny Qwen2, generated GSM8K-style problems, fully_shard over 2 gloo ranks.

Each reward component (format, integer answer, length budget gated on format) must rise and the evaluation
must not be empty (the run before issue 16 "learned" the empty string), parameters must be FSDP shards,
and GDPO must resolve the rollouts at least as finely as summed GRPO on the same rewards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.math_rl_run import first_last, metric_series, run_recipe

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch")

OVERRIDES = ["algorithm.eval_samples=4"]  # the cpu profile as shipped (80 steps), a smaller evaluation


def test_gdpo_cpu_each_reward_rises_under_real_fsdp(tmp_path: Path) -> None:
    job = tmp_path / "gdpo"
    rc, log = run_recipe(job, "gdpo_deepscaler.yaml", OVERRIDES)
    assert rc == 0, log[-4000:]
    result = json.loads((job / "result.json").read_text())

    assert result["strategy_in_effect"] == "fsdp"
    assert result["sharded_local_numel"] <= 0.55 * result["global_numel"]  # each rank holds about half
    assert "strategy requested=fsdp in effect=fsdp" in log

    for name in ("format", "integer", "length"):  # every component rises, not only the sum
        first, last = first_last(metric_series(job, f"rewards/{name}/mean"))
        assert last > first + 0.02, (name, first, last)
        assert len(metric_series(job, f"rewards/{name}/std")) == 80
        assert result["rewards"][name]["last10"] > result["rewards"][name]["first10"]
    assert result["flags"] == [] and result["eval_empty_rate"] < 0.5  # evaluation completions are not empty

    assert result["distinct_advantages_gdpo_mean"] >= result["distinct_advantages_grpo_mean"]
    per_step = [json.loads(x) for x in (job / "gdpo_resolution.jsonl").read_text().splitlines()]
    assert [r["step"] for r in per_step] == list(range(1, 81))
    assert len(metric_series(job, "distinct_advantages")) == 80
