"""Refuse the impossible with the knob that fixes it; plan what will run; plan-only fields stop at launch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gputrain.errors import PlanError
from gputrain.planner import make_plan
from tests.conftest import RECIPES

GDPO = RECIPES / "gdpo_deepscaler.yaml"
MATH = RECIPES / "grpo_math_fsdp.yaml"


def test_a_vllm_share_that_cannot_hold_the_weights_is_refused_naming_the_share_that_works() -> None:
    with pytest.raises(PlanError, match=r"vllm_gpu_memory_utilization=0\.02 .* weights .* runtime .* KV cache "
                                        r".*use --set memory\.vllm_gpu_memory_utilization=0\.0[5-9]") as err:
        make_plan(GDPO, gpu="H100", overrides=["memory.vllm_gpu_memory_utilization=0.02"], check_memory=False)
    share = float(str(err.value).rsplit("=", 1)[1].split()[0])
    plan = make_plan(GDPO, gpu="H100", overrides=[f"memory.vllm_gpu_memory_utilization={share}"],
                     check_memory=False)  # the share it names is accepted
    assert plan.estimate.step_seconds is not None


def test_rollout_waves_that_explode_are_a_refusal_not_a_number() -> None:
    with pytest.raises(PlanError, match=r"waves of vLLM's KV cache.*algorithm\.train_batch_size"):
        make_plan(GDPO, gpu="H100", check_memory=False, overrides=[
            "memory.vllm_gpu_memory_utilization=0.07", "algorithm.train_batch_size=4096",
            "algorithm.ppo_mini_batch_size=4096", "algorithm.max_completion_length=8192"])


def test_a_step_longer_than_a_day_is_a_refusal_naming_its_phase() -> None:
    with pytest.raises(PlanError, match=r"one step would take .* days\), (update|logprob|rollout) .*change"):
        make_plan(MATH, gpu="V100", gpus_per_node=1, check_memory=False, overrides=[
            "algorithm.rollout_engine=hf", "algorithm.train_batch_size=65536", "algorithm.ppo_mini_batch_size=1024",
            "algorithm.max_completion_length=8192", "memory.vllm_gpu_memory_utilization=null"])


def test_deepspeed_is_planned_as_the_ddp_that_runs_and_says_so() -> None:
    ds = make_plan(MATH, gpu="H100", overrides=["distributed.strategy=deepspeed"], check_memory=False)
    ddp = make_plan(MATH, gpu="H100", overrides=["distributed.strategy=ddp"], check_memory=False)
    assert ds.estimate.memory_breakdown == ddp.estimate.memory_breakdown
    assert any("runs as DDP" in w for w in ds.warnings)


def test_zero_sharding_drops_fsdp2s_full_gradients_and_moe_prices_active_parameters() -> None:
    fsdp = make_plan(GDPO, gpu="H100", overrides=["train.batch_size=1"], check_memory=False).estimate
    zero = make_plan(GDPO, gpu="H100", overrides=["train.batch_size=1", "distributed.sharding=zero3"],
                     check_memory=False).estimate
    assert "fsdp_unsharded_grads" in fsdp.memory_breakdown and "fsdp_unsharded_grads" not in zero.memory_breakdown
    moe = make_plan(GDPO, gpu="H100", overrides=["model.active_params=3.0e8"], check_memory=False).estimate
    dense = make_plan(GDPO, gpu="H100", check_memory=False).estimate
    assert moe.memory_breakdown["weights"] == dense.memory_breakdown["weights"]  # memory from the total
    assert moe.step_flops is not None and dense.step_flops is not None and moe.step_flops < 0.5 * dense.step_flops


def test_off_policy_overlap_makes_the_step_the_longer_of_rollout_and_training() -> None:
    sync = make_plan(MATH, gpu="H100", check_memory=False).estimate
    overlap = make_plan(MATH, gpu="H100", overrides=["algorithm.off_policy_steps=1"], check_memory=False).estimate
    assert sync.step_seconds is not None and overlap.step_seconds is not None
    rest = sum(v for k, v in overlap.phases.items() if k not in ("rollout", "sync"))
    assert overlap.step_seconds == pytest.approx(overlap.phases.get("sync", 0) + max(overlap.phases["rollout"], rest))
    assert overlap.step_seconds < sync.step_seconds


def test_packing_prices_the_expected_length_not_the_padded_one() -> None:
    padded = make_plan(MATH, gpu="H100", check_memory=False).estimate
    packed = make_plan(MATH, gpu="H100", overrides=["algorithm.sequence_packing=true"], check_memory=False).estimate
    assert packed.phases["update"] < padded.phases["update"]
    assert packed.memory_breakdown["activations"] < padded.memory_breakdown["activations"]


def test_a_plan_only_field_is_planned_but_run_refuses_it_in_one_line() -> None:
    plan = make_plan(RECIPES / "selftest.yaml", gpu="cpu", overrides=["distributed.cpu_offload=true"])
    assert plan.recipe.distributed.cpu_offload
    proc = subprocess.run([sys.executable, "-m", "gputrain.cli.main", "run", str(RECIPES / "selftest.yaml"),
                           "--gpu", "cpu", "--gpus", "1", "--set", "distributed.cpu_offload=true"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "distributed.cpu_offload" in lines[0] and "plan-only" in lines[0], proc.stderr


def test_k_step_off_policy_is_planned_at_the_engines_steady_rate_not_refused() -> None:
    """NeMo RL's 8-step async GRPO (max_trajectory_age_steps 8) ran: the schema took only 0 or 1 and refused it.
    With k > 1 steps in flight the engines decode up to k batches at once and a batch's tail overlaps the next
    batches, so a step's rollout is its tokens at the steady rate: shorter than the one-step rollout."""
    server = ["algorithm.rollout_engine=vllm", "algorithm.vllm_mode=server", "algorithm.rollout_gpus=1",
              "estimate.completion_fraction=0.5"]
    one = make_plan(MATH, gpu="H100", overrides=[*server, "algorithm.off_policy_steps=1"], check_memory=False)
    eight = make_plan(MATH, gpu="H100", overrides=[*server, "algorithm.off_policy_steps=8"], check_memory=False)
    assert eight.estimate.phases["rollout"] < one.estimate.phases["rollout"]
    assert any("8 steps in flight" in a for a in eight.estimate.assumptions)
    assert one.estimate.phases["update"] == eight.estimate.phases["update"]


def test_the_old_policy_log_prob_pass_follows_the_framework() -> None:
    """verl and NeMo RL recompute the old policy's log-probs every step, even for a single update (verl issue
    7412: 72 s of old_log_prob beside 72 s of ref); AReaL takes the rollout engine's log-probs instead."""
    one_update = ["algorithm.train_batch_size=16", "algorithm.ppo_mini_batch_size=16", "algorithm.beta=0.01"]
    auto = make_plan(MATH, gpu="H100", overrides=one_update, check_memory=False).estimate
    always = make_plan(MATH, gpu="H100", overrides=[*one_update, "algorithm.old_logprob_pass=always"],
                       check_memory=False).estimate
    assert always.phases["logprob"] == pytest.approx(2 * auto.phases["logprob"])  # old policy + reference
    four = ["algorithm.train_batch_size=16", "algorithm.ppo_mini_batch_size=4", "algorithm.beta=0"]
    never = make_plan(MATH, gpu="H100", overrides=[*four, "algorithm.old_logprob_pass=never"],
                      check_memory=False).estimate
    assert "logprob" not in never.phases
    assert make_plan(MATH, gpu="H100", overrides=four, check_memory=False).estimate.phases["logprob"] > 0
