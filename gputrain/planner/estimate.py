"""Memory, time and cost estimates: rough on purpose, but with every term shown.

Memory per GPU follows the usual mixed-precision accounting: fp32 master weights (4 B/param), gradients
(4 B) and AdamW moments (8 B), divided by the world size under FSDP/DeepSpeed; a frozen reference model in
half precision when the algorithm has a KL term; activations from Korthikanti et al. (2022), ≈ s·b·h·(34 +
5·a·s/h) bytes per layer without recomputation and ≈ 2·s·b·h per layer with it; plus vLLM's reserved share.
Step time is training FLOPs (6 · params · tokens, ×4/3 with recomputation) over the GPU's dense rate at an
assumed MFU — the recipe's ``estimate.mfu`` states that assumption.
"""

from __future__ import annotations

import math

from gputrain.contract.estimate import Estimate
from gputrain.contract.hardware import GPUFacts
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe

GIB = 1024**3


def parameter_count(recipe: Recipe) -> float | None:
    m = recipe.model
    if m.params:
        return m.params
    if m.hidden_size and m.num_layers:
        return 12 * m.num_layers * m.hidden_size**2 + (m.vocab_size or 0) * m.hidden_size
    return None


def _activation_bytes(recipe: Recipe, micro_batch: int) -> float | None:
    m = recipe.model
    if not (m.hidden_size and m.num_layers and m.seq_len):
        return None
    s, h, layers, b = m.seq_len, m.hidden_size, m.num_layers, micro_batch
    heads = m.num_heads or max(1, h // 64)
    full_layer = s * b * h * (34 + 5 * heads * s / h)
    if recipe.train.gradient_checkpointing:
        return 2 * s * b * h * layers + full_layer
    return full_layer * layers


def _total_steps(recipe: Recipe, global_batch: int) -> int | None:
    if recipe.train.max_steps:
        return recipe.train.max_steps
    if recipe.train.epochs and recipe.data.train_size:
        return recipe.train.epochs * math.ceil(recipe.data.train_size / global_batch)
    return None


def estimate(recipe: Recipe, gpu: GPUFacts, gpus: int, nodes: int, precision: str, global_batch: int) -> Estimate:
    world = gpus * nodes
    params = parameter_count(recipe)
    warnings: list[str] = []
    breakdown: dict[str, float] = {}
    if params is not None:
        shard = world if recipe.distributed.strategy in ("fsdp", "deepspeed") else 1
        breakdown["weights"] = 4 * params / shard / GIB
        breakdown["gradients"] = 4 * params / shard / GIB
        breakdown["optimizer"] = 8 * params / shard / GIB
        if isinstance(recipe.algorithm, GRPOAlgorithm) and recipe.algorithm.beta > 0:
            breakdown["reference_model"] = 2 * params / shard / GIB
    act = _activation_bytes(recipe, recipe.train.batch_size)
    if act is not None:
        breakdown["activations"] = act / GIB
    util = recipe.memory.vllm_gpu_memory_utilization
    if util and not gpu.is_cpu:
        breakdown["vllm_reserved"] = util * gpu.memory_gib
    memory = sum(breakdown.values()) if breakdown else None
    if memory is not None and not gpu.is_cpu:
        memory += 1.0  # CUDA context, allocator slack
        breakdown["cuda_context"] = 1.0

    fits, message = True, ""
    if memory is not None and not gpu.is_cpu and memory > gpu.memory_gib:
        fits = False
        hints = "enable train.gradient_checkpointing, lower train.batch_size, or use distributed.strategy=fsdp"
        message = (
            f"{recipe.name} needs ~{memory:.1f} GiB per GPU on {gpu.name}, which has {gpu.memory_gib:g} GiB "
            f"({', '.join(f'{k} {v:.1f}' for k, v in breakdown.items())}): {hints}"
        )
    elif memory is not None and not gpu.is_cpu and memory > 0.9 * gpu.memory_gib:
        warnings.append(f"memory estimate {memory:.1f} GiB is within 10% of {gpu.name}'s {gpu.memory_gib:g} GiB")

    step_seconds = None
    flops = recipe.estimate.flops_per_sample
    tokens = recipe.estimate.tokens_per_sample or recipe.model.seq_len
    if flops is None and params is not None and tokens:
        flops = 6 * params * tokens * (4 / 3 if recipe.train.gradient_checkpointing else 1)
    if flops is not None:
        rate = gpu.peak_tflops(precision) * 1e12 * recipe.estimate.mfu * world
        step_seconds = flops * global_batch / rate
    total_steps = _total_steps(recipe, global_batch)
    hours = step_seconds * total_steps / 3600 if step_seconds is not None and total_steps else None
    cost = hours * world * gpu.price_usd_hour if hours is not None else None
    if step_seconds is None:
        warnings.append("no FLOPs estimate: give model.params and model.seq_len, or estimate.flops_per_sample")
    return Estimate(
        params=params, memory_gib_per_gpu=memory, memory_breakdown=breakdown, capacity_gib=gpu.memory_gib,
        step_seconds=step_seconds, total_steps=total_steps, total_hours=hours, cost_usd=cost,
        gpu_hourly_usd=gpu.price_usd_hour, mfu=recipe.estimate.mfu, fits=fits, fit_message=message,
        warnings=warnings,
    )
