"""What ``benchmarks/gpu_suite.py`` records from a GRPO job for the planner's GPU rows (#27, #28).

The suite reads the job's own metrics.jsonl (a job its cap ends has no perf.json): the steady step by the
trainer's rule (not the first of more than two steps, not one that compiled), the warm-up those steps took,
and the rollout over the steady steps beside the plan's rollout phase. Records shaped as the H100's packed
job logged them (2026-11-27): 46.1 s (compiled), 22.0 s (recompiled), 8.59 s.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.conftest import ROOT


def _suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_suite_under_test", ROOT / "benchmarks" / "gpu_suite.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def rec(step: int, seconds: float, rollout: float, compiled: float = 0.0) -> dict[str, float]:
    r = {"step": step, "step_seconds": seconds, "rollout_seconds": rollout, "rollout_tokens_per_s": 5000 / rollout,
         "completions/mean_length": 80.0, "reward_seconds": 0.2, "loss": 0.1}
    return r | ({"compile_seconds": compiled} if compiled else {})


def test_rl_fields_keep_the_steady_steps_and_put_the_rest_in_warm_up() -> None:
    suite = _suite()
    recs = [rec(1, 46.1, 7.5, compiled=30.0), {"step": 1, "perf/step_seconds": 8.59},  # a perf record: skipped
            rec(2, 22.0, 7.0, compiled=12.0), rec(3, 8.59, 6.9), rec(4, 8.61, 7.1)]
    plan = {"estimate": {"phases": {"rollout": 6.89}, "overhead_seconds": 86.0}}
    out = suite.rl_fields(recs, plan, {"warmup_seconds": 68.1})
    assert out["meas_step_times_s"] == [46.1, 22.0, 8.59, 8.61]
    assert out["meas_steady_step_s"] == pytest.approx(8.6) and out["meas_steady_steps"] == 2
    assert out["meas_warmup_s"] == pytest.approx(68.1) and out["meas_compile_s"] == pytest.approx(42.0)
    assert out["meas_rollout_s"] == pytest.approx(7.0)  # the steady steps' rollouts only
    assert out["ratio_rollout"] == pytest.approx(7.0 / 6.89, abs=1e-3)
    assert out["meas_rollout_tokens_per_s"] == pytest.approx((5000 / 6.9 + 5000 / 7.1) / 2)
    assert (out["pred_overhead_s"], out["meas_perf_warmup_s"]) == (86.0, 68.1)
    # a padded job of three steps: the first alone is warm-up
    padded = suite.rl_fields([rec(1, 32.4, 6.0), rec(2, 9.69, 7.2), rec(3, 8.53, 6.6)], plan, {})
    assert padded["meas_warmup_s"] == pytest.approx(32.4)
    assert padded["meas_steady_step_s"] == pytest.approx(9.11)
    assert suite.rl_fields([{"step": 1, "loss": 0.5}], plan, {}) == {}  # not an RL job
