"""What a mixture-of-experts model's training passes reach, against a dense model's, from published figures.

The planner prices MoE compute from the parameters active per token (``model.active_params``). At the dense
efficiency that undercounts what Megatron-Core's MoE path spends beyond the active GEMMs: the router, token
permutation and un-permutation, the token dispatcher's all-to-all (or all-gather / reduce-scatter), the
per-expert GEMMs on a few hundred tokens each, the host synchronisation on the tokens-per-expert counts. None
of these is fitted here: Megatron-Bridge publishes, for the same container, system and precision, the *model*
TFLOP/s per GPU (active parameters only) of a fine-grained MoE and of a dense model, and their ratio is how far
the MoE path falls short of the dense one on that system:

- DGX-H100, FP8, NeMo container 26.04.01: Qwen3-30B-A3B (16 GPUs, EP 16) 206 model TFLOP/s/GPU; Llama3-70B
  (64 GPUs, TP 4 × PP 8) 731 → 0.282.
- DGX-GB200, MXFP8, same container: Qwen3-30B-A3B (8 GPUs, EP 8) 599; Llama3-70B (64 GPUs, TP 2 × PP 4) 1664
  → 0.360.

(``docs/performance-summary-archive.md`` of NVIDIA-NeMo/Megatron-Bridge at 067f987d, section "26.04.01 NeMo
Container"; 8960 tokens/s × 23 GFLOP per token = 206 TFLOP/s: the MoE figure counts active parameters, as the
planner does.) The planner's dense efficiency is multiplied by this ratio for the log-prob and update passes
of a MoE model. Those pretraining runs use Megatron's best MoE path (the DeepEP/HybridEP "flex" dispatcher,
grouped GEMM, fused permutation); the RL frameworks' MoE runs use the all-to-all or all-gather dispatcher and,
in NeMo RL v0.4-v0.5, unfused permutation and no load-balancing loss on a frozen router, so the ratio is an
upper bound on their efficiency. Both published MoE figures are of a fine-grained MoE (128 experts, 8 active,
expert width 768 on hidden 2048); a coarse MoE (few wide experts) is closer to dense, which no published pair
here measures. Systems without a published pair take the Hopper figure (Blackwell's is higher). The vLLM
rollout is a different path (fused MoE kernels) and keeps the dense efficiency.
"""

from __future__ import annotations

from gputrain.contract.hardware import GPUFacts
from gputrain.recipe.schema import Recipe

#: Megatron-Bridge 26.04.01: Qwen3-30B-A3B / Llama3-70B model TFLOP/s per GPU, same system and precision
MOE_RELATIVE_EFFICIENCY = {"H100-80GB": 206 / 731, "GB200": 599 / 1664}
#: systems without a published pair: the Hopper figure
MOE_RELATIVE_FALLBACK = "H100-80GB"


def moe_relative_efficiency(recipe: Recipe, gpu: GPUFacts) -> float:
    """Share of the dense efficiency a MoE model's training passes reach on ``gpu`` (1 for a dense model)."""
    if not recipe.model.active_params or gpu.is_cpu:
        return 1.0
    return MOE_RELATIVE_EFFICIENCY.get(gpu.name, MOE_RELATIVE_EFFICIENCY[MOE_RELATIVE_FALLBACK])


def moe_note(recipe: Recipe, gpu: GPUFacts) -> str:
    """The assumption line a plan prints for a MoE model ('' for a dense one)."""
    rel = moe_relative_efficiency(recipe, gpu)
    if rel == 1.0:
        return ""
    basis = gpu.name
    if gpu.name not in MOE_RELATIVE_EFFICIENCY:
        basis = f"{MOE_RELATIVE_FALLBACK}'s, none published for {gpu.name}"
    return (f"mixture-of-experts: log-prob and update passes at {rel:.3g}× the dense efficiency ({basis}: "
            "Megatron-Core's published Qwen3-30B-A3B / Llama3-70B model TFLOP/s, benchmarks/PLANNER.md)")
