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

from gputrain.contract.estimate import Calibration, Estimate
from gputrain.contract.hardware import GPUFacts
from gputrain.errors import GputrainError
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.schema import Recipe
from gputrain.registry.measured import MeasuredRun

_ALGORITHM_COST_FIELDS = (
    "num_generations", "max_prompt_length", "max_completion_length", "train_batch_size", "ppo_mini_batch_size",
    "num_iterations", "beta", "rollout_engine", "vllm_sleep_mode", "block_size", "question_len", "plan_len",
    "exec_len", "num_colors", "min_nodes", "max_nodes", "random_features",
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
        "train_size": recipe.data.train_size if entrypoint_of(recipe.entrypoint).workload == "gnn" else None,
    }
    out.update({k: algo[k] for k in _ALGORITHM_COST_FIELDS if k in algo})
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


def _model_step(run: MeasuredRun, facts: GPUFacts) -> tuple[Recipe, float | None]:
    from gputrain.planner.estimate import estimate

    recipe = Recipe.model_validate(run.recipe)
    nodes = recipe.resources.nodes
    gpus = max(1, run.world_size // nodes)
    batch = recipe.train.batch_size * run.world_size * recipe.train.grad_accum
    return recipe, estimate(recipe, facts, gpus, nodes, run.precision, batch).step_seconds


def calibrate(est: Estimate, recipe: Recipe, gpu: GPUFacts, world: int, precision: str,
              runs: list[MeasuredRun]) -> Estimate:
    """``est`` corrected by the closest measured run (unchanged when none is near)."""
    mine = fingerprint(recipe, gpu.name, world, precision)
    scored: list[tuple[float, MeasuredRun, Recipe, float | None]] = []
    for run in runs:
        if run.entrypoint != recipe.entrypoint or run.gpu != gpu.name or not run.perf.get("step_seconds"):
            continue
        try:
            theirs, modelled = _model_step(run, gpu)
        except (ValidationError, GputrainError, KeyError, ValueError):
            continue  # a run of an older recipe schema: not comparable
        d = distance(mine, fingerprint(theirs, run.gpu, run.world_size, run.precision))
        scored.append((d, run, theirs, modelled))
    if not scored or est.step_seconds is None:
        return est
    d, run, _, modelled = min(scored, key=lambda item: (item[0], item[1].job))
    measured = float(run.perf["step_seconds"])
    peak = run.perf.get("peak_memory_gib")
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
    return est.model_copy(update={"step_seconds": step, "total_hours": hours, "cost_usd": cost,
                                  "memory_gib_per_gpu": memory, "calibration": cal})
