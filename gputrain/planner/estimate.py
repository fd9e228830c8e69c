"""Memory, time and cost of one plan: the workload model's step, the memory model's terms, the fit search.

Pure: :func:`estimate` reads the resolved recipe and the hardware and returns a contract
:class:`~gputrain.contract.estimate.Estimate`. Calibration from measured runs and the guide comparison are
applied afterwards (``gputrain.planner.calibrate``, ``gputrain.planner.resolve``), so the model's own
prediction stays visible next to what corrected it.
"""

from __future__ import annotations

import math

from gputrain.contract.estimate import Estimate, FitSuggestion, MemoryTerm
from gputrain.contract.hardware import GPUFacts
from gputrain.planner import physics
from gputrain.planner.memory import RL_ENTRYPOINTS, largest_term, memory_terms, peak_gib
from gputrain.planner.workload import Hardware, peak_bound_seconds, step_model
from gputrain.planner.workload_rl import rl_shape
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe

GIB = physics.GIB
FIT_MARGIN = 0.1


def parameter_count(recipe: Recipe) -> float | None:
    return physics.params_of(recipe.model) or None


def _total_steps(recipe: Recipe, hw: Hardware, global_batch: int) -> int | None:
    if recipe.train.max_steps:
        return recipe.train.max_steps
    per_step = rl_shape(recipe, hw).prompts if recipe.entrypoint in RL_ENTRYPOINTS else global_batch
    if recipe.train.epochs and recipe.data.train_size:
        return recipe.train.epochs * math.ceil(recipe.data.train_size / per_step)
    return None


def peak_memory(recipe: Recipe, hw: Hardware) -> float:
    return peak_gib(memory_terms(recipe, hw))


def fit_suggestion(recipe: Recipe, hw: Hardware, margin: float = FIT_MARGIN) -> FitSuggestion:
    """The largest ``train.batch_size`` (after lowering the vLLM share if even batch 1 does not fit) whose
    peak stays under ``(1 - margin)`` of the device."""
    limit = hw.gpu.memory_gib * (1 - margin)

    def fits(batch: int, share: float | None) -> bool:
        changed = recipe.model_copy(update={
            "train": recipe.train.model_copy(update={"batch_size": batch}),
            "memory": recipe.memory.model_copy(update={"vllm_gpu_memory_utilization": share}),
        })
        return peak_memory(changed, hw) <= limit

    share = recipe.memory.vllm_gpu_memory_utilization
    engine_vllm = recipe.entrypoint in RL_ENTRYPOINTS and rl_shape(recipe, hw).engine == "vllm"
    overrides: list[str] = []
    if engine_vllm and share is not None and not fits(1, share):
        options = [round(share - 0.05 * k, 2) for k in range(1, 20) if share - 0.05 * k >= 0.1 - 1e-9]
        share = next((s for s in options if fits(1, s)), None)
        if share is None:
            return FitSuggestion(margin=margin, note="no batch fits, even with a vLLM share of 0.1")
        overrides.append(f"memory.vllm_gpu_memory_utilization={share:g}")
    if not fits(1, share):
        return FitSuggestion(margin=margin, note="even train.batch_size=1 does not fit: shard (fsdp), "
                             "recompute activations, or use a larger GPU")
    lo, hi = 1, max(2, recipe.train.batch_size * 16)
    while lo < hi:  # peak is monotone in the batch
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid, share) else (lo, mid - 1)
    overrides.insert(0, f"train.batch_size={lo}")
    note = f"largest per-GPU batch with {margin:.0%} of {hw.gpu.memory_gib:g} GiB left free"
    if recipe.entrypoint not in RL_ENTRYPOINTS and lo < recipe.train.batch_size:
        accum = math.ceil(recipe.train.batch_size * recipe.train.grad_accum / lo)
        overrides.append(f"train.grad_accum={accum}")
        note += f"; grad_accum {accum} keeps the global batch"
    return FitSuggestion(batch_size=lo, vllm_gpu_memory_utilization=share, margin=margin, overrides=overrides,
                         note=note)


def _fit_message(recipe: Recipe, gpu: GPUFacts, memory: float, terms: list[MemoryTerm], fit: FitSuggestion) -> str:
    biggest = largest_term(terms)
    excess = memory - gpu.memory_gib * (1 - FIT_MARGIN)
    parts = ", ".join(f"{t.name} {t.gib:.1f}" for t in terms)
    tail = f"; `plan --fit` applies {' '.join(fit.overrides)}" if fit.overrides else f"; {fit.note}"
    return (f"{recipe.name} needs ~{memory:.1f} GiB per GPU on {gpu.name}, which has {gpu.memory_gib:g} GiB "
            f"({parts}): cut {biggest.name} ({biggest.gib:.1f} GiB, via {biggest.knob or 'a larger GPU'}) by "
            f"{excess:.1f} GiB{tail}")


def estimate(recipe: Recipe, gpu: GPUFacts, gpus: int, nodes: int, precision: str, global_batch: int) -> Estimate:
    world = gpus * nodes
    hw = Hardware(gpu, world, precision)
    model = step_model(recipe, hw)
    terms = memory_terms(recipe, hw)
    memory = peak_gib(terms)
    warnings: list[str] = []
    fits, message, fit = True, "", None
    if not gpu.is_cpu:
        fit = fit_suggestion(recipe, hw)
        if memory > gpu.memory_gib:
            fits = False
            message = _fit_message(recipe, gpu, memory, terms, fit)
        elif memory > (1 - FIT_MARGIN) * gpu.memory_gib:
            warnings.append(f"memory estimate {memory:.1f} GiB is within {FIT_MARGIN:.0%} of {gpu.name}'s "
                            f"{gpu.memory_gib:g} GiB")
    step = model.step_seconds if model.phases else None
    total_steps = _total_steps(recipe, hw, global_batch)
    hours = (step * total_steps + model.overhead_seconds) / 3600 if step is not None and total_steps else None
    cost = hours * world * gpu.price_usd_hour if hours is not None else None
    if step is None:
        warnings.append("no FLOPs estimate: give model.params and model.seq_len, or estimate.flops_per_sample")
    algo = recipe.algorithm
    if isinstance(algo, GRPOAlgorithm) and recipe.entrypoint in RL_ENTRYPOINTS:
        shape = rl_shape(recipe, hw)
        if shape.engine == "vllm" and not gpu.is_cpu:
            warnings.append("the vLLM share is a fraction of total device memory: the training terms must fit "
                            "in the rest")
    return Estimate(
        params=parameter_count(recipe), workload=model.workload, memory_gib_per_gpu=memory,
        memory_breakdown={t.name: t.gib for t in terms}, memory_terms=terms, capacity_gib=gpu.memory_gib,
        step_seconds=step, phases=dict(model.phases), step_flops=model.flops or None,
        peak_bound_seconds=peak_bound_seconds(model.flops, hw) or None, overhead_seconds=model.overhead_seconds,
        total_steps=total_steps, total_hours=hours, cost_usd=cost, gpu_hourly_usd=gpu.price_usd_hour,
        mfu=recipe.estimate.mfu, assumptions=model.assumptions, fits=fits, fit_message=message, fit=fit,
        warnings=warnings,
    )
