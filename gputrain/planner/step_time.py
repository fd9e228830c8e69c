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
from gputrain.planner.memory import memory_terms
from gputrain.planner.memory_rl import offloaded_bytes
from gputrain.planner.parallel import layout
from gputrain.planner.workload import Hardware, StepModel, global_batch
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
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
    host_copies(recipe, hw, model)
    bound = peak_bound_seconds(model.flops, hw)
    if bound and model.step_seconds < bound:  # a model bug, never a plan: say so rather than promise it
        raise AssertionError(f"{model.workload} model predicts {model.step_seconds:.3g} s, below the "
                             f"{bound:.3g} s its FLOPs need at peak")
    return model


def peak_bound_seconds(flops: float, hw: Hardware) -> float:
    """The fastest a step of ``flops`` (whole job) could run: every GPU at its dense peak."""
    return flops / (hw.peak * hw.world) if flops else 0.0


def host_copies(recipe: Recipe, hw: Hardware, out: StepModel) -> None:
    """RL only. Lives here, above the memory model, because it prices what the memory model moves off the GPU.
    Per-step host traffic of ``memory.offload_during_rollout`` (the model states out and back) and of
    ``memory.reference_on_host`` (the reference weights in, the policy's saved and restored)."""
    algo = recipe.algorithm
    if hw.gpu.is_cpu or not isinstance(algo, GRPOAlgorithm):
        return
    moved = 2 * offloaded_bytes(recipe, hw, memory_terms(recipe, hw))
    if algo.beta > 0 and recipe.memory.reference_on_host:
        lay = layout(recipe, hw.world)
        moved += 3 * physics.params_of(recipe.model) * physics.half_bytes(hw.precision) / (
            lay.weights_shard * lay.model_parallel)
    if moved:
        out.phases["host_copies"] = moved / workload_rl.HOST_COPY_BYTES_PER_S
        out.assumptions.append(f"host copies: {moved / physics.GIB:.1f} GiB per GPU per step at "
                               f"{workload_rl.HOST_COPY_BYTES_PER_S / 1e9:g} GB/s (memory.offload_during_rollout, "
                               "memory.reference_on_host)")
