"""Calibration: correct a plan's estimate with the closest measured run (``gputrain.registry.measured``).

A run's *cost fingerprint* is what determines its cost: entrypoint, model dimensions, batch and sequence
settings, the algorithm's cost settings, precision, strategy, GPU type and world size. Where a measured run
has this plan's fingerprint, the plan uses its measured step time and peak memory. Where one of the same
entrypoint and GPU type differs in other settings, the plan keeps its model but multiplies its step time
by that run's measured / modelled ratio (the model re-run on that run's own recipe, so a changed model
never compares against a stale prediction). Either way the estimate says which run it learned from.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from gputrain.contract.estimate import Calibration, Estimate, MemoryTerm
from gputrain.contract.hardware import GPUFacts
from gputrain.errors import GputrainError
from gputrain.planner.workload_rl import step_prompts
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.schema import Recipe
from gputrain.registry.measured import MeasuredRun

_ALGORITHM_COST_FIELDS = (
    "num_generations", "max_prompt_length", "max_completion_length", "train_batch_size", "ppo_mini_batch_size",
    "num_iterations", "beta", "rollout_engine", "vllm_sleep_mode", "block_size", "question_len", "plan_len",
    "exec_len", "num_colors", "min_nodes", "max_nodes", "random_features", "sequence_packing", "vllm_mode",
    "rollout_gpus", "vllm_tensor_parallel_size", "off_policy_steps", "old_logprob_pass",
)


def fingerprint(recipe: Recipe, gpu: str, world: int, precision: str) -> dict[str, Any]:
    model, train = recipe.model, recipe.train
    algo = recipe.algorithm.model_dump()
    out: dict[str, Any] = {
        "entrypoint": recipe.entrypoint, "gpu": gpu, "world_size": world, "precision": precision,
        "strategy": recipe.distributed.strategy, "params": model.params, "hidden_size": model.hidden_size,
        "num_layers": model.num_layers, "vocab_size": model.vocab_size, "seq_len": model.seq_len,
        "batch_size": train.batch_size, "grad_accum": train.grad_accum,
        "gradient_checkpointing": train.gradient_checkpointing, "compile": train.compile,
        "vllm_share": recipe.memory.vllm_gpu_memory_utilization,
        "sharding": recipe.distributed.sharding, "tensor_parallel": recipe.distributed.tensor_parallel,
        "pipeline_parallel": recipe.distributed.pipeline_parallel, "cpu_offload": recipe.distributed.cpu_offload,
        "active_params": model.active_params, "lora_rank": model.lora_rank,
        "train_size": recipe.data.train_size if entrypoint_of(recipe.entrypoint).workload == "gnn" else None,
    }
    out.update({k: algo[k] for k in _ALGORITHM_COST_FIELDS if k in algo})
    if isinstance(recipe.algorithm, GRPOAlgorithm):  # resolved, so a plan's stored values match a recipe's null
        out["train_batch_size"], out["ppo_mini_batch_size"] = step_prompts(recipe.algorithm, train.batch_size, world)
    return out


def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """0 for the same fingerprint; ∞ across entrypoints or GPU types; else Σ|log ratio| + 1 per other change."""
    if a["entrypoint"] != b["entrypoint"] or a["gpu"] != b["gpu"]:
        return math.inf
    total = 0.0
    for key in a.keys() | b.keys():
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool) and x > 0 and y > 0:
            total += abs(math.log(x / y))
        else:
            total += 1.0
    return total


def _model_run(run: MeasuredRun, facts: GPUFacts) -> tuple[Recipe, Estimate]:
    """The model's estimate for a measured run's own recipe (so a changed model never compares against a
    stale prediction)."""
    from gputrain.planner.estimate import estimate
    from gputrain.planner.workload import global_batch

    recipe = Recipe.model_validate(run.recipe)
    algo = recipe.algorithm
    if isinstance(algo, GRPOAlgorithm) and "generate_cache" not in algo.model_fields_set:
        # a plan from before algorithm.generate_cache (#27): its HF rollouts ran on the dynamic KV cache
        recipe = recipe.model_copy(update={"algorithm": algo.model_copy(update={"generate_cache": "dynamic"})})
    nodes = recipe.resources.nodes
    gpus = max(1, run.world_size // nodes)
    return recipe, estimate(recipe, facts, gpus, nodes, run.precision, global_batch(recipe, run.world_size))


def _assumed_scale(model: Estimate, measured_gib: float) -> float | None:
    """k with exact + k × assumed terms = the run's measured peak (its own terms; None: nothing to scale)."""
    from gputrain.planner.memory import peak_gib

    assumed = [t for t in model.memory_terms if t.basis == "assumed"]
    if not assumed:
        return None
    base = peak_gib([t.model_copy(update={"gib": 0.0}) if t.basis == "assumed" else t for t in model.memory_terms])
    modelled = (model.memory_gib_per_gpu or 0.0) - base
    return (measured_gib - base) / modelled if modelled > 0 and measured_gib > base else None


def calibrated_terms(terms: list[MemoryTerm], scale: float) -> list[MemoryTerm]:
    """The assumed terms scaled by a run's measured/modelled ratio; they now rest on a measurement."""
    return [t.model_copy(update={"gib": t.gib * scale, "basis": "measured",
                                 "note": f"{t.note}; ×{scale:.3g} from a measured run"})
            if t.basis == "assumed" else t for t in terms]


def device_peak_gib(perf: dict[str, Any]) -> float | None:
    """The run's peak as the plan counts it: CUDA's ``max_memory_allocated`` leaves out the CUDA context
    (and the allocator's slack) that the plan's ``cuda_context`` term holds, so it is added back."""
    peak = perf.get("peak_memory_gib")
    if peak is None:
        return None
    if perf.get("peak_memory_kind") == "cuda_max_allocated":
        from gputrain.planner.physics import CUDA_CONTEXT_GIB

        return float(peak) + CUDA_CONTEXT_GIB
    return float(peak)


def calibrate(est: Estimate, recipe: Recipe, gpu: GPUFacts, world: int, precision: str,
              runs: list[MeasuredRun], prefer_job: str | None = None) -> Estimate:
    """``est`` corrected by the closest measured run (unchanged when none is near). ``prefer_job`` (the
    probe ``plan --probe`` just ran) is used whenever it is among the runs, however near another is."""
    mine = fingerprint(recipe, gpu.name, world, precision)
    scored: list[tuple[float, MeasuredRun, Recipe, Estimate]] = []
    for run in runs:
        if run.entrypoint != recipe.entrypoint or run.gpu != gpu.name or not run.perf.get("step_seconds"):
            continue
        if prefer_job is not None and any(r.job.endswith(f":{prefer_job}") for r in runs) \
                and not run.job.endswith(f":{prefer_job}"):
            continue
        try:
            theirs, model = _model_run(run, gpu)
        except (ValidationError, GputrainError, KeyError, ValueError):
            continue  # a run of an older recipe schema: not comparable
        d = distance(mine, fingerprint(theirs, run.gpu, run.world_size, run.precision))
        scored.append((d, run, theirs, model))
    if not scored or est.step_seconds is None:
        return est
    d, run, _, model = min(scored, key=lambda item: (item[0], item[1].job))
    modelled = model.step_seconds
    measured = float(run.perf["step_seconds"])
    peak = device_peak_gib(run.perf)
    exact = d == 0
    factor = measured / modelled if modelled else 1.0
    step = measured if exact else est.step_seconds * factor
    cal = Calibration(match="exact" if exact else "near", job=run.job, job_dir=run.job_dir, distance=round(d, 3),
                      measured_step_seconds=measured, model_step_seconds=modelled, factor=factor,
                      measured_peak_gib=peak, predicted_step_seconds=est.step_seconds,
                      predicted_memory_gib=est.memory_gib_per_gpu)
    hours = est.total_hours
    if est.total_steps:
        hours = (step * est.total_steps + est.overhead_seconds) / 3600
    cost = hours * world * gpu.price_usd_hour if hours is not None else None
    memory = float(peak) if exact and peak is not None else est.memory_gib_per_gpu
    terms, memory_range = est.memory_terms, est.memory_range_gib
    mem_scale = _assumed_scale(model, peak) if peak is not None else None
    if mem_scale is not None and peak is not None:
        from gputrain.planner.memory import peak_gib, peak_range

        terms = calibrated_terms(est.memory_terms, mem_scale)
        memory = peak if exact else peak_gib(terms)
        memory_range = peak_range(terms)
    # the parts are the model's split of the step, scaled to the calibrated total (never larger than it)
    scale = step / est.step_seconds if est.step_seconds else 1.0
    phases = {k: v * scale for k, v in est.phases.items()}
    return est.model_copy(update={"step_seconds": step, "total_hours": hours, "cost_usd": cost, "phases": phases,
                                  "memory_gib_per_gpu": memory, "memory_terms": terms,
                                  "memory_breakdown": {t.name: t.gib for t in terms},
                                  "memory_range_gib": memory_range, "calibration": cal})
