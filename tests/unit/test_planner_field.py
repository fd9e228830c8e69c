"""The field's published RL runs (``benchmarks/data/planner_field.yaml``) as a CI regression check of the planner."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.support.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _field() -> ModuleType:
    return load_benchmark("planner_field")


def test_published_runs_are_planned_not_refused_and_stay_within_2x() -> None:
    field = _field()
    rows, floor = field.load()
    assert len(rows) >= 15 and floor >= 0.8
    for row in rows:  # each row cites where its figure comes from, and quotes it
        assert row.url.startswith("https://"), row.id
        figure = row.quoted_figure or row.measured  # a derived step quotes the figure it comes from
        assert f"{figure:g}" in row.quote or repr(figure) in row.quote, row.id
    planned = field.plan_rows(rows)
    refused = [f"{r.id}: {r.refused}" for r in planned if r.refused]
    assert not refused, refused
    stats = field.summary(planned)
    assert stats["within_2x"] >= floor, stats
    assert stats["memory_within_1_5x"] >= 0.8, stats  # where a source publishes memory per GPU


def test_the_table_in_the_repository_was_written_from_the_data() -> None:
    field = _field()
    rows, _ = field.load()
    text = (ROOT / "benchmarks" / "planner_field.md").read_text(encoding="utf-8")
    for row in rows:
        assert row.id in text and row.url in text
    for accepted in field.ran():
        assert accepted.id in text and accepted.url in text
    for skipped in field.unplanned():  # published figures left out say what their source does not give
        assert skipped.id in text and skipped.missing.split(" (")[0] in text


def test_published_runs_without_a_step_time_are_not_refused() -> None:
    field = _field()
    rows = field.plan_ran(field.ran())
    assert rows, "the data lists configurations that really ran"
    for row in rows:
        assert row.url.startswith("https://") and row.quote, row.id
    refused = [f"{r.id}: {r.refused}" for r in rows if r.refused]
    assert not refused, refused


def test_fsdp_full_shard_keeps_fp32_parameters_only_while_deepspeed_zero3_adds_a_bf16_partition() -> None:
    """torch FSDP (verl's actor, NeMo RL's DTensor policy) stores the sharded parameters in fp32 and casts one
    unit at a time on all-gather; DeepSpeed ZeRO-3 keeps a bf16 partition beside the fp32 master copy."""
    from gputrain.planner import make_plan

    sets = ["distributed.sharding=zero3", "train.batch_size=1"]
    fsdp = make_plan(ROOT / "recipes" / "grpo_math_fsdp.yaml", gpu="H100", gpus_per_node=8, check_memory=False,
                     overrides=[*sets, "distributed.strategy=fsdp"]).estimate.memory_breakdown
    ds = make_plan(ROOT / "recipes" / "grpo_math_fsdp.yaml", gpu="H100", gpus_per_node=8, check_memory=False,
                   overrides=[*sets, "distributed.strategy=deepspeed"]).estimate.memory_breakdown
    assert "weights" not in fsdp and fsdp["master_weights"] == ds["master_weights"]
    assert ds["weights"] == ds["master_weights"] / 2  # bf16 partition: half the fp32 master's bytes
    states = ("weights", "master_weights", "optimizer", "gradients")
    assert sum(fsdp.get(k, 0.0) for k in states) == sum(ds[k] for k in states) - ds["weights"]


def test_vllm_without_cuda_graphs_pays_eager_launches_per_decode_step_and_is_plan_only() -> None:
    """verl v0.3-v0.5 run vLLM with ``enforce_eager: True`` (its rollout config): a small model's decode is then
    bound by the host launching ~40 kernels per layer eagerly, not by memory bandwidth."""
    from gputrain.planner import make_plan, physics
    from gputrain.recipe.plan_only import plan_only_fields

    recipe = ROOT / "recipes" / "grpo_math_fsdp.yaml"
    sets = ["memory.vllm_gpu_memory_utilization=0.3", "algorithm.rollout_engine=vllm"]
    graphed = make_plan(recipe, gpu="H100", check_memory=False, overrides=sets)
    eager = make_plan(recipe, gpu="H100", check_memory=False, overrides=[*sets, "algorithm.vllm_enforce_eager=true"])
    layers = eager.recipe.model.num_layers or 1
    steps = eager.recipe.algorithm.max_completion_length * eager.recipe.estimate.completion_fraction
    host_floor = steps * layers * physics.VLLM_OPS_PER_LAYER * physics.OP_SECONDS_GPU
    assert eager.estimate.phases["rollout"] >= host_floor > graphed.estimate.phases["rollout"]
    assert any("no CUDA graphs" in a for a in eager.estimate.assumptions)
    assert plan_only_fields(eager.recipe) == ["algorithm.vllm_enforce_eager"]
    assert plan_only_fields(graphed.recipe) == []


def test_verls_in_place_log_prob_head_holds_one_logits_tensor_and_is_plan_only() -> None:
    """verl's dp_actor divides the head's logits by the temperature in place and takes log-probs with flash-attn's
    cross-entropy (``inplace_backward``): a packed micro-batch holds one ``[T, V]`` bf16 tensor."""
    from gputrain.planner import make_plan
    from gputrain.recipe.plan_only import plan_only_fields

    recipe = ROOT / "recipes" / "grpo_math_fsdp.yaml"
    sets = ["algorithm.sequence_packing=true", "train.batch_size=4", "train.precision=bf16"]
    torch_path = make_plan(recipe, gpu="H100", check_memory=False, overrides=sets)
    fused = make_plan(recipe, gpu="H100", check_memory=False, overrides=[*sets, "algorithm.logits_in_place=true"])
    r = fused.recipe
    tokens = (r.algorithm.max_prompt_length * r.estimate.prompt_fraction
              + r.algorithm.max_completion_length * r.estimate.completion_fraction)
    expected = 4 * tokens * (r.model.vocab_size or 0) * 2 / 2**30
    assert abs(fused.estimate.memory_breakdown["logits"] - expected) < 0.01 * expected
    assert torch_path.estimate.memory_breakdown["logits"] > 2 * expected  # the trainer's copies
    assert set(plan_only_fields(r)) == {"algorithm.sequence_packing", "algorithm.logits_in_place"}


def test_recomputation_keeps_each_layers_input_in_the_compute_dtype_where_the_parameters_are_bf16() -> None:
    """The project's trainer runs fp32 weights under autocast, so each checkpointed layer input is fp32; ZeRO,
    torch FSDP's mixed precision and Megatron run the forward on bf16 parameters: the input is bf16."""
    from gputrain.hardware.catalog import get_gpu
    from gputrain.planner import make_plan
    from gputrain.planner.workload import Hardware
    from gputrain.planner.workload_rl import rl_shape

    recipe = ROOT / "recipes" / "grpo_math_fsdp.yaml"
    sets = ["train.gradient_checkpointing=true", "train.batch_size=8", "train.precision=bf16"]
    auto = make_plan(recipe, gpu="H100", gpus_per_node=8, check_memory=False, overrides=sets)
    zero = make_plan(recipe, gpu="H100", gpus_per_node=8, check_memory=False,
                     overrides=[*sets, "distributed.sharding=zero3"])
    m = auto.recipe.model
    shape = rl_shape(auto.recipe, Hardware(gpu=get_gpu("H100"), world=8, precision="bf16"))
    inputs_fp32 = 8 * shape.train_tokens * 4 * (m.hidden_size or 0) * (m.num_layers or 0) / 2**30
    gap = auto.estimate.memory_breakdown["activations"] - zero.estimate.memory_breakdown["activations"]
    assert abs(gap - inputs_fp32 / 2) < 0.01 * inputs_fp32  # half of the stored inputs: 2 of 4 bytes per unit
