"""The RL planner charges FlexAttention's compile as start-up where the packed passes run through it (#27):
packed on an Ampere-or-later GPU, and only there (padded plans, the CPU's eager packer and a V100, which the
kernel resolver keeps off flex, compile nothing). The step time is the same either way: compile is start-up."""

from __future__ import annotations

import pytest

from gputrain.contract.estimate import Estimate
from gputrain.planner import make_plan
from gputrain.planner.workload_rl import FLEX_COMPILE_SECONDS, FLEX_RECOMPILE_SECONDS
from tests.conftest import RECIPES

MATH = RECIPES / "grpo_math_fsdp.yaml"
SETS = ["algorithm.rollout_engine=hf", "train.precision=fp16"]  # fp16: a precision the V100 and the CPU plan too


def _estimate(gpu: str, packing: bool) -> Estimate:
    return make_plan(MATH, gpu=gpu, gpus_per_node=1, check_memory=False,
                     overrides=[*SETS, f"algorithm.sequence_packing={str(packing).lower()}"]).estimate


def test_a_packed_plan_on_an_h100_pays_the_flex_compile_once_as_start_up() -> None:
    padded, packed = _estimate("H100", False), _estimate("H100", True)
    extra = packed.overhead_seconds - padded.overhead_seconds
    assert extra == pytest.approx(FLEX_COMPILE_SECONDS + FLEX_RECOMPILE_SECONDS)
    assert any("FlexAttention compile" in a for a in packed.assumptions)
    assert not any("FlexAttention compile" in a for a in padded.assumptions)


@pytest.mark.parametrize("gpu", ["cpu", "V100"])
def test_packing_without_flex_charges_no_compile(gpu: str) -> None:
    padded, packed = _estimate(gpu, False), _estimate(gpu, True)
    assert packed.overhead_seconds == pytest.approx(padded.overhead_seconds)
    assert not any("FlexAttention compile" in a for a in packed.assumptions)
