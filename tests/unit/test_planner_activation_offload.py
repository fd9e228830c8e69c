"""Activations offloaded to the host (torchtune's ``OffloadActivations``, prime-rl's ``--model.ac-offloading``):
under recomputation the tensors a forward saves are the layer inputs, which leave the GPU; one recomputed
layer's working set stays."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "grpo_math_fsdp.yaml"
SETS = ["algorithm.sequence_packing=true", "algorithm.max_completion_length=15360", "algorithm.max_prompt_length=1024",
        "estimate.completion_fraction=1.0", "estimate.prompt_fraction=1.0", "train.batch_size=1",
        "train.gradient_checkpointing=true", "distributed.strategy=fsdp", "distributed.sharding=zero3",
        "train.precision=bf16", "algorithm.beta=0"]


def test_offloaded_activations_drop_the_layer_inputs_from_the_gpu_and_are_plan_only() -> None:
    from gputrain.planner import make_plan, physics
    from gputrain.recipe.plan_only import plan_only_fields

    kept = make_plan(RECIPE, gpu="H100", gpus_per_node=1, check_memory=False, overrides=SETS)
    moved = make_plan(RECIPE, gpu="H100", gpus_per_node=1, check_memory=False,
                      overrides=[*SETS, "memory.activations_on_host=true"])
    model = kept.recipe.model
    tokens = 1024 + 15360
    # bf16 layer inputs of every layer (the forward runs on half-precision parameters under ZeRO-3)
    inputs_gib = tokens * 2 * (model.hidden_size or 0) * (model.num_layers or 0) / physics.GIB
    drop = kept.estimate.memory_breakdown["activations"] - moved.estimate.memory_breakdown["activations"]
    assert abs(drop - inputs_gib) < 0.01 * inputs_gib, (drop, inputs_gib)
    assert moved.estimate.memory_breakdown["activations"] > 0  # the recomputed layer stays
    assert plan_only_fields(moved.recipe) == ["distributed.sharding", "memory.activations_on_host"]
    assert plan_only_fields(kept.recipe) == ["distributed.sharding"]
