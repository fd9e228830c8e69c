"""The RL planner prices HF generate's static KV cache (#27, #28: ``algorithm.generate_cache``).

What differs from the dynamic cache is priced, not fitted: each decode step's launch floor drops from the eager
operators' host time to a graphed replay (``workload_rl.compiled_decode_host_seconds``), the fixed-size cache is
read whole every step, and the decode compile is start-up. The figures it is held against are the H200's
(2026-11-27, benchmarks/RESULTS.md): the benchmark row ``rl_logprob_bench.py --generate-only --gen-rows 64
--new-tokens 256`` (0.5B bf16, prompts 64 wide: the GRPO run's rollout shape) took 0.943 s with the static cache
and ~24.7 s on its first call; the real GRPO job (``gputrain run``, dynamic cache) stepped in 8.075 s of which
6.28 s rollout, and keeps being predicted with ``generate_cache: dynamic``. The decision is the trainer's own
(``contract.kernels.resolve_generate_cache``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.contract.estimate import Estimate
from gputrain.planner import make_plan
from gputrain.planner.workload_rl import GENERATE_COMPILE_SECONDS
from tests.conftest import RECIPES

SHEET = json.loads((Path(__file__).parent / "data" / "reference" / "gpu_h200_2026_11_26.json").read_text())
SETS = SHEET["grpo_0_5b_run"]["sets"]  # 0.5B, 8 prompts x 8, <= 256 tokens, prompts <= 64 tokens, bf16, DDP


def _plan(gpu: str, *sets: str, gpus: int = 1) -> Estimate:
    return make_plan(RECIPES / "grpo_code_mbpp.yaml", gpu=gpu, gpus_per_node=gpus, overrides=[*SETS, *sets],
                     check_memory=False).estimate


def test_the_static_rollout_matches_the_h200_generate_benchmark_row() -> None:
    est = _plan("H200")  # auto: static on a CUDA GPU
    assert est.phases["rollout"] / 0.943 == pytest.approx(1.0, abs=0.15)
    assert any("compiled for the static KV cache of 320 tokens" in a for a in est.assumptions)


def test_the_dynamic_cache_keeps_the_h200_grpo_run_row() -> None:
    est = _plan("H200", "algorithm.generate_cache=dynamic")
    assert est.step_seconds / 8.075 == pytest.approx(1.0, abs=0.25)
    assert est.phases["rollout"] / 6.28 == pytest.approx(1.0, abs=0.25)
    assert est.step_seconds - _plan("H200").step_seconds > 5  # the rollout the static cache saves: ~5.9 s


def test_the_decode_compile_is_start_up_where_the_static_cache_compiles() -> None:
    static = _plan("H100", "algorithm.generate_cache=static")
    dynamic = _plan("H100", "algorithm.generate_cache=dynamic")
    assert static.overhead_seconds - dynamic.overhead_seconds == pytest.approx(GENERATE_COMPILE_SECONDS)
    assert any("compiling HF generate's decode step" in a for a in static.assumptions)
    # the CPU runs the static cache eagerly: nothing compiles, the eager host floor stays
    cpu_static = _plan("cpu", "algorithm.generate_cache=static", "train.precision=fp32")
    cpu_dynamic = _plan("cpu", "algorithm.generate_cache=dynamic", "train.precision=fp32")
    assert cpu_static.overhead_seconds == pytest.approx(cpu_dynamic.overhead_seconds)


@pytest.mark.parametrize(("gpu", "sets", "gpus", "expected"), [
    ("cpu", ["train.precision=fp32"], 1, "dynamic"),
    ("H100", ["distributed.strategy=fsdp"], 2, "dynamic"),  # FSDP2's hooks around every decode step
    ("H100", ["distributed.strategy=ddp"], 2, "static"),
])
def test_auto_plans_the_cache_the_trainer_picks(gpu: str, sets: list[str], gpus: int, expected: str) -> None:
    est = _plan(gpu, *sets, gpus=gpus)
    kv = next(t for t in est.memory_terms if t.name == "kv_cache")
    assert f"({expected} cache)" in kv.note


def test_a_run_planned_before_generate_cache_is_modelled_on_the_dynamic_cache() -> None:
    """The calibration re-plans a measured run from its plan's recipe: one written before the field (#27) ran
    HF generate on the dynamic cache, and must not be modelled with the static cache auto now picks."""
    from gputrain.planner.calibrate import _model_run
    from gputrain.registry.measured import MeasuredRun

    plan = make_plan(RECIPES / "grpo_code_mbpp.yaml", gpu="H200", gpus_per_node=1, overrides=SETS,
                     check_memory=False)
    old = plan.recipe.model_dump(mode="json")
    del old["algorithm"]["generate_cache"]
    run = MeasuredRun(job="local:1", job_dir="/nowhere", entrypoint=plan.recipe.entrypoint, gpu=plan.gpu.name,
                      world_size=1, precision=plan.precision, recipe=old)
    _, modelled = _model_run(run, plan.gpu)
    dynamic = _plan("H200", "algorithm.generate_cache=dynamic")
    assert modelled.phases["rollout"] == pytest.approx(dynamic.phases["rollout"])
