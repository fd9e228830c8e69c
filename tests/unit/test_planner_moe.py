"""A mixture-of-experts model's training passes at Megatron-Core's published MoE shortfall (#28, planner.moe).

What breaks without it: a Qwen3-30B-A3B GRPO step is priced from its 3.3B active parameters at the dense
efficiency, and NeMo RL's published runs come out 2.5-4x faster than they ran.
"""

from __future__ import annotations

import pytest

from gputrain.planner import make_plan
from gputrain.planner.moe import MOE_RELATIVE_EFFICIENCY
from tests.conftest import RECIPES

MATH = RECIPES / "grpo_math_fsdp.yaml"
QWEN3_30B_A3B = ["model.name=Qwen/Qwen3-30B-A3B", "model.params=30.5e9", "model.active_params=3.3e9",
                 "model.hidden_size=2048", "model.num_layers=48", "model.num_heads=32", "model.num_kv_heads=4",
                 "model.head_dim=128", "model.vocab_size=151936", "model.seq_len=4096",
                 "algorithm.num_generations=16", "algorithm.train_batch_size=128",
                 "algorithm.ppo_mini_batch_size=32", "algorithm.max_prompt_length=512",
                 "algorithm.max_completion_length=3584", "algorithm.beta=0.01", "algorithm.rollout_engine=vllm",
                 "algorithm.sequence_packing=true", "algorithm.vllm_tensor_parallel_size=2",
                 "estimate.completion_fraction=0.9",
                 "memory.vllm_gpu_memory_utilization=0.6", "distributed.sharding=zero1",
                 "distributed.expert_parallel=8", "train.batch_size=1", "train.gradient_checkpointing=false",
                 "memory.offload_during_rollout=true", "memory.reference_on_host=true", "algorithm.eval_samples=0"]


def _plan(gpu: str, extra: list[str]):  # type: ignore[no-untyped-def]
    return make_plan(MATH, gpu=gpu, gpus_per_node=8 if gpu != "GB200" else 4, nodes=4,
                     overrides=QWEN3_30B_A3B + extra, check_memory=False).estimate


def test_the_published_ratios_are_the_tables_figures() -> None:
    # Megatron-Bridge 26.04.01: Qwen3-30B-A3B 206 (H100 FP8) and 599 (GB200 MXFP8); Llama3-70B 731 and 1664
    assert MOE_RELATIVE_EFFICIENCY["H100-80GB"] == pytest.approx(0.2818, abs=1e-4)
    assert MOE_RELATIVE_EFFICIENCY["GB200"] == pytest.approx(0.3600, abs=1e-4)


@pytest.mark.parametrize("gpu", ["H100", "GB200", "H200"])
def test_moe_training_passes_run_at_the_published_share_of_the_dense_efficiency(gpu: str) -> None:
    moe = _plan(gpu, [])
    plain = _plan(gpu, ["estimate.mfu=0.35"])  # a stated efficiency is the user's: no MoE term on top
    rel = MOE_RELATIVE_EFFICIENCY.get({"H100": "H100-80GB", "GB200": "GB200"}.get(gpu, ""),
                                      MOE_RELATIVE_EFFICIENCY["H100-80GB"])
    # the log-prob pass is compute plus a host term: its compute part (most of it) scales by 1 / ratio
    assert 0.75 * plain.phases["logprob"] / rel < moe.phases["logprob"] < plain.phases["logprob"] / rel
    assert moe.phases["update"] > 2 * plain.phases["update"]
    assert moe.phases["rollout"] == pytest.approx(plain.phases["rollout"])  # vLLM's MoE path is not Megatron's
    assert any("mixture-of-experts" in a for a in moe.assumptions)
    assert not any("mixture-of-experts" in a for a in plain.assumptions)


def test_a_dense_model_is_priced_as_before() -> None:
    dense = make_plan(MATH, gpu="H100", gpus_per_node=8, nodes=1, overrides=[], check_memory=False).estimate
    stated = make_plan(MATH, gpu="H100", gpus_per_node=8, nodes=1, overrides=["estimate.mfu=0.35"],
                       check_memory=False).estimate
    assert dense.phases["update"] == pytest.approx(stated.phases["update"])
    assert not any("mixture-of-experts" in a for a in dense.assumptions)
