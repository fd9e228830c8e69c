"""Step-time models, one per entrypoint family: pure functions of the resolved recipe and the hardware.

Each returns a :class:`~gputrain.planner.workload.StepModel`: seconds per phase of one step, the step's FLOPs
(whole job), run-level overheads and the assumptions in words, which ``gputrain plan`` prints. Families (the
entrypoint table's ``workload`` column):

- RL (grpo_code, grpo_math, gdpo): ``gputrain.planner.workload_rl``;
- diffusion (bd3lm, hdp) and GNN (gnn_coloring): ``gputrain.planner.workload_dense``;
- anything else: the supervised ``6·N·tokens`` model below.

No model may predict a step faster than its FLOPs at the GPUs' dense peak: compute phases divide by
``peak × mfu`` with ``mfu ≤ 1``, and :func:`step_model` checks the sum against ``flops / (peak × world)``.
"""

from __future__ import annotations

from gputrain.planner import physics, workload_dense, workload_rl
from gputrain.planner.workload import Hardware, StepModel, global_batch
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.schema import Recipe


def supervised(recipe: Recipe, hw: Hardware) -> StepModel:
    """``6·N·tokens`` (×4/3 with recomputation) at the recipe's MFU, plus the eager dispatch floor."""
    model = recipe.model
    params = physics.params_of(model)
    tokens = recipe.estimate.tokens_per_sample or model.seq_len or 0
    ckpt = 4 / 3 if recipe.train.gradient_checkpointing else 1.0
    per_sample = recipe.estimate.flops_per_sample or 6 * params * tokens * ckpt
    flops = per_sample * global_batch(recipe, hw.world)
    out = StepModel("supervised", flops=flops)
    if flops:
        out.phases["compute"] = flops / hw.world / (hw.peak * recipe.estimate.mfu)
        out.assumptions.append(
            f"supervised model: {per_sample:.3g} FLOPs per sample (6·N·tokens{' ×4/3 recompute' if ckpt > 1 else ''}"
            f" or estimate.flops_per_sample) at {recipe.estimate.mfu:.0%} MFU"
        )
    layers = model.num_layers or 1
    out.phases["dispatch"] = 3 * 25 * layers * recipe.train.grad_accum * hw.op_seconds
    return out


def step_model(recipe: Recipe, hw: Hardware) -> StepModel:
    family = {"rl": workload_rl.rl, "diffusion": workload_dense.diffusion, "gnn": workload_dense.gnn,
              "selftest": workload_dense.selftest}
    model = family.get(entrypoint_of(recipe.entrypoint).workload, supervised)(recipe, hw)
    bound = peak_bound_seconds(model.flops, hw)
    if bound and model.step_seconds < bound:  # a model bug, never a plan: say so rather than promise it
        raise AssertionError(f"{model.workload} model predicts {model.step_seconds:.3g} s, below the "
                             f"{bound:.3g} s its FLOPs need at peak")
    return model


def peak_bound_seconds(flops: float, hw: Hardware) -> float:
    """The fastest a step of ``flops`` (whole job) could run: every GPU at its dense peak."""
    return flops / (hw.peak * hw.world) if flops else 0.0
