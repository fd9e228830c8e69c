"""Planner terms the field's published runs exposed (#28): each from the code of the framework that ran them.

- Qwen3's attention heads are 128 wide, wider than ``hidden_size / num_heads`` (transformers reads the config's
  ``head_dim``): the KV cache and the score FLOPs follow the real width.
- A mixture-of-experts token's activations come from the experts it is routed to (active parameters).
- NeMo RL's colocated Megatron worker moves weights, gradients and optimizer to the host while vLLM
  generates, keeps the reference weights in pinned host memory, and reduces gradients in bf16
  (``grad_reduce_in_fp32: false``): a plan that ignores these refuses a run that really ran.
- Each of these settings is plan-only: ``gputrain run`` refuses it by name.
"""

from __future__ import annotations

from gputrain.planner import make_plan, physics
from gputrain.planner.memory_rl import mlp_width
from gputrain.recipe.plan_only import plan_only_fields
from gputrain.recipe.schema import ModelSpec
from tests.conftest import RECIPES

MATH = RECIPES / "grpo_math_fsdp.yaml"
QWEN3_30B_A3B = ModelSpec(name="Qwen/Qwen3-30B-A3B", params=30.5e9, active_params=3.3e9, hidden_size=2048,
                          num_layers=48, num_heads=32, num_kv_heads=4, head_dim=128, vocab_size=151936)
#: the GB200 row of NeMo RL v0.5's table: Qwen3-32B, 16 GPUs, training TP 2, colocated vLLM at 0.6
QWEN3_32B_ON_GB200 = [
    "model.name=Qwen/Qwen3-32B", "model.params=32.8e9", "model.hidden_size=5120", "model.num_layers=64",
    "model.num_heads=64", "model.num_kv_heads=8", "model.head_dim=128", "model.vocab_size=151936",
    "algorithm.num_generations=16", "algorithm.train_batch_size=128", "algorithm.ppo_mini_batch_size=32",
    "algorithm.max_prompt_length=512", "algorithm.max_completion_length=3584", "algorithm.beta=0.01",
    "algorithm.rollout_engine=vllm", "algorithm.vllm_sleep_mode=true", "algorithm.sequence_packing=true",
    "estimate.completion_fraction=0.91", "memory.vllm_gpu_memory_utilization=0.6", "distributed.sharding=zero1",
    "distributed.tensor_parallel=2", "train.batch_size=1", "train.gradient_checkpointing=false",
    "algorithm.eval_samples=0"]
NEMO_RL_WORKER = ["memory.offload_during_rollout=true", "memory.reference_on_host=true",
                  "distributed.grads_in_fp32=false"]


def test_the_kv_cache_and_attention_flops_follow_the_configs_head_dim() -> None:
    # 2 (K, V) x 48 layers x 4 KV heads x 128 x 2 bytes: twice what hidden_size / num_heads (64) gives
    assert physics.kv_bytes_per_token(QWEN3_30B_A3B, "bf16") == 2 * 48 * 4 * 128 * 2
    derived = QWEN3_30B_A3B.model_copy(update={"head_dim": None})
    assert physics.kv_bytes_per_token(derived, "bf16") == 2 * 48 * 4 * 64 * 2
    attn = physics.forward_flops_per_token(QWEN3_30B_A3B, 1000) - physics.forward_flops_per_token(QWEN3_30B_A3B, 0)
    assert attn == 4 * 48 * (32 * 128) * 1000


def test_moe_activations_come_from_the_active_experts_not_all_of_them() -> None:
    # Qwen3-30B-A3B routes each token through 8 experts of width 768: 6144 wide (7063 from the parameter count,
    # which holds one embedding table, not the model's two), not the ~90k a dense reading of 30.5B gives
    assert 6000 < mlp_width(QWEN3_30B_A3B) < 7500
    assert mlp_width(QWEN3_30B_A3B.model_copy(update={"active_params": None})) > 80_000


def test_a_run_nemo_rl_really_ran_is_refused_without_its_workers_offload_and_planned_with_it() -> None:
    bare = make_plan(MATH, gpu="GB200", gpus_per_node=4, nodes=4, overrides=QWEN3_32B_ON_GB200, check_memory=False)
    assert bare.estimate.memory_gib_per_gpu > 184  # model states + vLLM's share: more than a GB200 holds
    plan = make_plan(MATH, gpu="GB200", gpus_per_node=4, nodes=4, overrides=QWEN3_32B_ON_GB200 + NEMO_RL_WORKER)
    est, was = plan.estimate, bare.estimate
    assert est.memory_gib_per_gpu < 184
    assert "reference_model" in was.memory_breakdown and "reference_model" not in est.memory_breakdown
    assert abs(est.memory_breakdown["gradients"] - was.memory_breakdown["gradients"] / 2) < 0.01  # bf16, not fp32
    assert est.phases["host_copies"] > 0 and "host_copies" not in was.phases  # the traffic is priced


def test_the_workers_settings_are_plan_only() -> None:
    plan = make_plan(MATH, gpu="GB200", gpus_per_node=4, nodes=4, overrides=QWEN3_32B_ON_GB200 + NEMO_RL_WORKER)
    assert {"memory.offload_during_rollout", "memory.reference_on_host",
            "distributed.grads_in_fp32"} <= set(plan_only_fields(plan.recipe))



def test_a_sleeping_engine_pays_for_releasing_and_mapping_its_whole_share_each_step() -> None:
    """vLLM's sleep mode unmaps every allocation of its share and maps it again at wake-up (CuMemAllocator): the
    weight-sync phase grows with the share (2 x 0.8 x 79.6 GiB at vLLM's logged 51.57 GiB in 1.52 s: 3.8 s on an
    H100), where a flat 0.5 s stood before (the field's published syncs are 4-12 s)."""
    def sync(share: float) -> float:
        plan = make_plan(MATH, gpu="H100", gpus_per_node=8, overrides=[
            "algorithm.rollout_engine=vllm", "algorithm.vllm_sleep_mode=true",
            f"memory.vllm_gpu_memory_utilization={share}"])
        return plan.estimate.phases["sync"]

    high, low = sync(0.8), sync(0.5)
    assert high > 3.5
    assert 1.2 < (high - low) < 1.6  # 0.3 of the GPU less: ~1.4 s less to release and map again


def test_an_engine_spread_over_nodes_pays_the_networks_all_reduce_latency_in_every_decode_step() -> None:
    """NCCL's latency model (tuning.cc): ~10 us for 8 GPUs on NVLink, ~26 us for 16 over two nodes; a GB200 NVL72
    rack is one NVLink domain, so an engine over two of its 4-GPU trays stays on NVLink. The two all-reduces per
    layer sit between the layers' kernels: they lengthen the decode step (they did not, as host time)."""
    from gputrain.hardware.catalog import get_gpu
    from gputrain.planner.workload import Hardware
    from gputrain.planner.workload_rl import tp_allreduce_seconds

    h100 = Hardware(get_gpu("H100"), 256, "bf16", gpus_per_node=8)
    assert 9e-6 < tp_allreduce_seconds(h100, 8) < 11e-6
    assert 24e-6 < tp_allreduce_seconds(h100, 16) < 28e-6
    assert tp_allreduce_seconds(h100, 1) == 0.0
    gb200 = Hardware(get_gpu("GB200"), 128, "bf16", gpus_per_node=4)
    assert tp_allreduce_seconds(gb200, 8) == tp_allreduce_seconds(h100, 8)

    def rollout(tp: int) -> float:  # Qwen3-32B on 16 H100 (two nodes): two TP-8 engines or one TP-16 engine
        plan = make_plan(MATH, gpu="H100", gpus_per_node=8, nodes=2, check_memory=False,
                         overrides=[*QWEN3_32B_ON_GB200, f"algorithm.vllm_tensor_parallel_size={tp}"])
        return plan.estimate.phases["rollout"]

    assert rollout(16) >= rollout(8)  # the engine over two nodes is no faster (planned 0.88x before)
