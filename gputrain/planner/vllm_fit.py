"""Does the vLLM memory share hold vLLM at all? Its weights, its runtime and one sequence's KV cache.

vLLM's ``gpu_memory_utilization`` is a fraction of *total* device memory. Inside it vLLM loads the
weights (compute dtype, split over ``tensor_parallel_size``), profiles a forward pass and captures CUDA
graphs (its runtime), and gives the rest to the KV cache; if no sequence of ``max_prompt_length +
max_completion_length`` tokens fits, vLLM refuses to start ("No available memory for the cache blocks" /
"max model len ... larger than the maximum number of tokens that can be stored in KV cache"). A share
below that is refused at plan time, naming the share that works; one that holds only a few sequences
makes the rollout run in waves, and a plan whose waves explode is refused too (``MAX_WAVES``).
"""

from __future__ import annotations

import math
from typing import NoReturn

from gputrain.errors import PlanError
from gputrain.planner import physics
from gputrain.planner.workload import Hardware
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe

#: vLLM's own memory beside weights and KV cache: the profiling forward's activations (up to
#: max_num_batched_tokens) and CUDA graphs captured for decode batch sizes, GiB (typical 0.5-2 GiB)
VLLM_RUNTIME_GIB = 1.5
#: more waves of the KV cache than this per step is a configuration error, not a plan
MAX_WAVES = 64


def _tp(recipe: Recipe) -> int:
    algo = recipe.algorithm
    return algo.vllm_tensor_parallel_size if isinstance(algo, GRPOAlgorithm) else 1


def needed_gib(recipe: Recipe, hw: Hardware) -> tuple[float, float, float, float]:
    """(total, weights, runtime, one sequence's KV cache) GiB per GPU that vLLM needs at least."""
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    tp = _tp(recipe)
    weights = physics.params_of(recipe.model) * physics.half_bytes(hw.precision) / tp / physics.GIB
    tokens = algo.max_prompt_length + algo.max_completion_length
    kv = tokens * physics.kv_bytes_per_token(recipe.model, hw.precision) / tp / physics.GIB
    return weights + VLLM_RUNTIME_GIB + kv, weights, VLLM_RUNTIME_GIB, kv


def minimum_share(recipe: Recipe, hw: Hardware) -> float:
    """The least share (rounded up to 0.01) that holds the weights, the runtime and one sequence."""
    if not hw.gpu.memory_gib:
        return 0.0
    return math.ceil(needed_gib(recipe, hw)[0] / hw.gpu.memory_gib * 100) / 100


def kv_cache_bytes(recipe: Recipe, hw: Hardware, share: float) -> float:
    """What is left to vLLM's KV cache on one GPU of an engine."""
    total, _, _, kv = needed_gib(recipe, hw)
    weights_runtime = total - kv
    return max(0.0, share * hw.gpu.memory_gib - weights_runtime) * physics.GIB * _tp(recipe)


def check_share(recipe: Recipe, hw: Hardware, share: float) -> None:
    """Refuse a share that cannot hold vLLM (one line, naming the share that works)."""
    total, weights, runtime, kv = needed_gib(recipe, hw)
    have = share * hw.gpu.memory_gib
    if have >= total:
        return
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    refuse_share("memory.vllm_gpu_memory_utilization", share, minimum_share(recipe, hw),
                 "use a larger GPU, algorithm.vllm_tensor_parallel_size, or algorithm.rollout_engine=hf",
                 f"gives vLLM {have:.1f} GiB of {hw.gpu.name}'s {hw.gpu.memory_gib:g} GiB, below what it needs: "
                 f"weights {weights:.1f} + runtime {runtime:g} + the KV cache of one "
                 f"{algo.max_prompt_length + algo.max_completion_length}-token sequence {kv:.2f} = {total:.1f} GiB")


def refuse_share(knob: str, share: float, least: float, otherwise: str, why: str) -> NoReturn:
    """The one-line refusal of an engine's memory share (vLLM's, SGLang's): what ``share`` gives and why it is
    too little, then the least share that works, or ``otherwise`` when even 0.95 would not."""
    fix = f"use --set {knob}={least:g} or more" if least <= 0.95 else otherwise
    raise PlanError(f"{knob}={share:g} {why}; {fix}")
