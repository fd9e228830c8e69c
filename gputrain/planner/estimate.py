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
from gputrain.errors import PlanError
from gputrain.planner import physics
from gputrain.planner.fit import FIT_MARGIN, fit_suggestion
from gputrain.planner.memory import RL_ENTRYPOINTS, largest_term, memory_terms, peak_gib, peak_range
from gputrain.planner.parallel import deepspeed_runs_as_ddp
from gputrain.planner.step_time import peak_bound_seconds, step_model
from gputrain.planner.workload import Hardware, StepModel
from gputrain.planner.workload_rl import RL_EFFICIENCY, RL_EFFICIENCY_RANGE, rl_shape
from gputrain.recipe.schema import Recipe

GIB = physics.GIB
#: a step longer than this is a configuration error, not a plan
MAX_STEP_SECONDS = 86400.0
__all__ = ["FIT_MARGIN", "estimate", "fit_suggestion", "parameter_count", "peak_memory"]


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
    hw = Hardware(gpu, world, precision, gpus_per_node=gpus)
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
        elif (high := peak_range(terms)[1]) > gpu.memory_gib:
            hint = f"`plan --fit` applies {' '.join(fit.overrides)}" if fit.overrides else fit.note
            warnings.append(f"memory {memory:.1f} GiB fits {gpu.name}'s {gpu.memory_gib:g} GiB, but the upper end "
                            f"of its range ({high:.1f} GiB: {', '.join(_assumed_names(terms))} assumed) does not; "
                            f"{hint}")
    step = model.step_seconds if model.phases else None
    total_steps = _total_steps(recipe, hw, global_batch)
    hours = (step * total_steps + model.overhead_seconds) / 3600 if step is not None and total_steps else None
    cost = hours * world * gpu.price_usd_hour if hours is not None else None
    if step is None:
        warnings.append("no FLOPs estimate: give model.params and model.seq_len, or estimate.flops_per_sample")
    if step is not None and step > MAX_STEP_SECONDS:
        _refuse_step(model, step)
    if deepspeed_runs_as_ddp(recipe) and world > 1:
        warnings.append("distributed.strategy=deepspeed runs as DDP (the trainers have no DeepSpeed engine): "
                        "planned as DDP; distributed.sharding=zero2|zero3 plans DeepSpeed's ZeRO (plan-only)")
    return Estimate(
        params=parameter_count(recipe), workload=model.workload, memory_gib_per_gpu=memory,
        memory_breakdown={t.name: t.gib for t in terms}, memory_terms=terms, capacity_gib=gpu.memory_gib,
        memory_range_gib=tuple(round(x, 2) for x in peak_range(terms)),  # type: ignore[arg-type]
        step_range_seconds=_step_range(recipe, model),
        step_seconds=step, phases=dict(model.phases), step_flops=model.flops or None,
        peak_bound_seconds=peak_bound_seconds(model.flops, hw) or None, overhead_seconds=model.overhead_seconds,
        total_steps=total_steps, total_hours=hours, cost_usd=cost, gpu_hourly_usd=gpu.price_usd_hour,
        mfu=model.efficiency or _efficiency(recipe), assumptions=model.assumptions, fits=fits, fit_message=message,
        fit=fit, warnings=warnings,
    )


def _efficiency(recipe: Recipe) -> float:
    if recipe.entrypoint in RL_ENTRYPOINTS and "mfu" not in recipe.estimate.model_fields_set:
        return RL_EFFICIENCY
    return recipe.estimate.mfu


def _step_range(recipe: Recipe, model: StepModel) -> tuple[float, float] | None:
    """The step at the ends of the compute efficiency's range (RL's default; an override is one value)."""
    if not model.phases or not model.compute_seconds or "mfu" in recipe.estimate.model_fields_set:
        return None
    low_eff, high_eff = RL_EFFICIENCY_RANGE
    c = model.compute_seconds
    base = model.step_seconds
    return round(base - c + c * RL_EFFICIENCY / high_eff, 4), round(base - c + c * RL_EFFICIENCY / low_eff, 4)


def _refuse_step(model: StepModel, step: float) -> None:
    phase, seconds = max(model.phases.items(), key=lambda kv: kv[1])
    knobs = {"rollout": "algorithm.max_completion_length, algorithm.train_batch_size or the vLLM share",
             "update": "algorithm.train_batch_size, the model or the GPU count",
             "logprob": "algorithm.train_batch_size or the model", "reward": "algorithm.sandbox_workers",
             "compute": "train.batch_size × grad_accum or the model", "dispatch": "train.grad_accum"}
    raise PlanError(f"one step would take {step:.3g} s ({step / 86400:.3g} days), {phase} {seconds:.3g} s of it: "
                    f"not a plan; change {knobs.get(phase, 'the recipe')}")


def _assumed_names(terms: list[MemoryTerm]) -> list[str]:
    return [t.name for t in terms if t.basis == "assumed" and t.gib >= 0.01] or ["no term"]
