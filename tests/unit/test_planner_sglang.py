"""``algorithm.rollout_engine=sglang``: SGLang's memory share, its runtime, its refusal, its rollout, plan-only."""

from __future__ import annotations

import pytest

from gputrain.errors import PlanError
from gputrain.planner import make_plan, physics, sglang_fit
from gputrain.planner.workload import Hardware
from gputrain.recipe.plan_only import plan_only_fields, refuse_plan_only
from tests.conftest import RECIPES

MATH = RECIPES / "grpo_math_fsdp.yaml"
#: Qwen2.5-7B (4 KV heads of 28) on 8 H100, vLLM/SGLang asleep while training, as verl's and slime's rows run
QWEN7B = ["model.params=7.6e9", "model.hidden_size=3584", "model.num_layers=28", "model.num_heads=28",
          "model.num_kv_heads=4", "model.head_dim=128", "model.vocab_size=152064", "model.seq_len=4096",
          "algorithm.num_generations=8", "algorithm.train_batch_size=64", "algorithm.max_prompt_length=1024",
          "algorithm.max_completion_length=3072", "distributed.strategy=fsdp", "train.batch_size=2",
          "train.gradient_checkpointing=true", "algorithm.vllm_sleep_mode=true"]
SGLANG = ["algorithm.rollout_engine=sglang"]


def _plan(*sets: str, gpus: int = 8, check_memory: bool = False):  # type: ignore[no-untyped-def]
    return make_plan(MATH, gpu="H100", gpus_per_node=gpus, overrides=[*QWEN7B, *sets], check_memory=check_memory)


def test_sglangs_share_holds_weights_and_kv_pool_and_its_runtime_sits_outside_it() -> None:
    plan = _plan(*SGLANG, "memory.sglang_mem_fraction_static=0.5")
    terms = plan.estimate.memory_breakdown
    assert terms["sglang_static"] == pytest.approx(0.5 * 79.6, rel=0.01)  # share × device memory, exactly
    assert "vllm_share" not in terms and "kv_cache" not in terms  # no HF-generate or vLLM terms beside it
    # the runtime: req_to_token rows x (context + 4) int32, a prefill chunk and the graph pool, each > 0
    assert 0.3 < terms["sglang_runtime"] < 3.0, terms
    released = {t.name: t.phase for t in plan.estimate.memory_terms}
    assert released["sglang_static"] == "rollout" and released["sglang_runtime"] == "persistent"
    kept = _plan(*SGLANG, "memory.sglang_mem_fraction_static=0.5", "algorithm.vllm_sleep_mode=false")
    assert {t.name: t.phase for t in kept.estimate.memory_terms}["sglang_static"] == "persistent"


def test_tensor_parallel_splits_weights_but_keeps_a_kv_head_on_every_gpu() -> None:
    one = _plan(*SGLANG).recipe
    eight = _plan(*SGLANG, "algorithm.vllm_tensor_parallel_size=8").recipe
    hw = _hw()
    full = physics.kv_bytes_per_token(one.model, "bf16")
    assert sglang_fit.kv_cell_bytes(one, hw) == pytest.approx(full)
    assert sglang_fit.kv_cell_bytes(eight, hw) == pytest.approx(full / 4)  # 4 KV heads: one per GPU, not 1/8
    assert sglang_fit.weights_bytes(eight, hw) == pytest.approx(sglang_fit.weights_bytes(one, hw) / 8)
    assert sglang_fit.least_share(eight, hw) < sglang_fit.least_share(one, hw)


def test_sglangs_default_share_is_its_server_args_reserve_by_gpu() -> None:
    hw = _hw()
    assert sglang_fit.default_share(hw, 1) == pytest.approx(round((79.6 - 10.0) / 79.6, 3))  # H100: 9.5 + tp/2
    assert sglang_fit.default_share(hw, 8) == pytest.approx(round((79.6 - 13.5) / 79.6, 3))
    plan = _plan(*SGLANG)
    assert plan.estimate.memory_breakdown["sglang_static"] == pytest.approx(
        sglang_fit.default_share(hw, 1) * 79.6, rel=1e-3)


def test_a_share_below_weights_and_one_sequence_is_refused_naming_the_share_that_works() -> None:
    with pytest.raises(PlanError, match=r"sglang_mem_fraction_static=0\.1 .* weights 14\.2 GiB .* one 4096-token "
                                        r"sequence.*use --set memory\.sglang_mem_fraction_static=0\.19 or more") as err:
        _plan(*SGLANG, "memory.sglang_mem_fraction_static=0.1")
    share = float(str(err.value).rsplit("=", 1)[1].split()[0])
    assert _plan(*SGLANG, f"memory.sglang_mem_fraction_static={share}").estimate.step_seconds  # accepted
    with pytest.raises(PlanError, match="sglang_mem_fraction_static"):
        _plan(*SGLANG, f"memory.sglang_mem_fraction_static={share - 0.01:.2f}")


def test_sglang_decodes_as_vllm_does_until_its_request_pool_caps_the_batch() -> None:
    vllm = _plan("algorithm.rollout_engine=vllm", "memory.vllm_gpu_memory_utilization=0.5").estimate
    sglang = _plan(*SGLANG, "memory.sglang_mem_fraction_static=0.5").estimate
    assert sglang.phases["rollout"] == pytest.approx(vllm.phases["rollout"], rel=1e-6)
    assert sglang.phases["sync"] == pytest.approx(vllm.phases["sync"], rel=1e-6)
    # the recipe's 0.5B model on 1 GPU, 8192 completions of <= 200 tokens: vLLM's KV cache holds them in one
    # wave, SGLang's req_to_token pool runs at most 4096 requests at once (two waves)
    short = ["algorithm.train_batch_size=1024", "algorithm.max_completion_length=200", "algorithm.max_prompt_length=64",
             "train.batch_size=1", "algorithm.num_generations=8"]

    def small(*sets: str):  # type: ignore[no-untyped-def]
        return make_plan(MATH, gpu="H100", gpus_per_node=1, overrides=[*short, *sets], check_memory=False).estimate

    v1 = small("algorithm.rollout_engine=vllm", "memory.vllm_gpu_memory_utilization=0.6")
    s1 = small(*SGLANG, "memory.sglang_mem_fraction_static=0.6")
    assert "1 wave(s)" in " ".join(v1.assumptions) and "2 wave(s)" in " ".join(s1.assumptions)
    assert s1.phases["rollout"] >= v1.phases["rollout"] * (1 - 1e-9)  # compute-bound here: waves cost no less


def test_sglang_is_planned_but_launching_it_is_refused_as_plan_only() -> None:
    recipe = _plan(*SGLANG, "memory.sglang_mem_fraction_static=0.5").recipe
    assert plan_only_fields(recipe) == ["algorithm.rollout_engine"]
    with pytest.raises(PlanError, match=r"^algorithm\.rollout_engine is plan-only"):
        refuse_plan_only(recipe)
    assert plan_only_fields(_plan("algorithm.rollout_engine=vllm").recipe) == []


def _hw() -> Hardware:
    plan = _plan(*SGLANG)
    return Hardware(plan.gpu, 8, "bf16")


def test_a_decode_batch_above_sglangs_captured_graphs_pays_eager_launches() -> None:
    def rollout(engine: str, prompts: int) -> float:
        share = ("memory.vllm_gpu_memory_utilization=0.6" if engine == "vllm"
                 else "memory.sglang_mem_fraction_static=0.6")
        sets = [f"algorithm.rollout_engine={engine}", share, f"algorithm.train_batch_size={prompts}",
                "algorithm.num_generations=8"]  # the recipe's 0.5B model: a decode step is launch-bound eagerly
        plan = make_plan(MATH, gpu="H100", gpus_per_node=8, overrides=sets, check_memory=False)
        return float(plan.estimate.phases["rollout"])

    # 8 engines, one wave: 160 completions each fit H100's cuda_graph_max_bs (160); 320 each do not
    assert rollout("sglang", 160) == pytest.approx(rollout("vllm", 160), rel=1e-6)
    assert rollout("sglang", 320) > 1.2 * rollout("vllm", 320)


def test_fit_lowers_sglangs_share_when_its_default_leaves_the_trainer_no_room() -> None:
    with pytest.raises(PlanError, match=r"sglang_static .* `plan --fit` applies .*memory\.sglang_mem_fraction_static="
                                        r"0\.\d+") as err:
        _plan(*SGLANG, check_memory=True)  # SGLang's H100 default (0.874) beside a trainer that stays resident
    fixed = str(err.value).rsplit("applies ", 1)[1].split()
    assert any(s.startswith("memory.sglang_mem_fraction_static=") for s in fixed)
    assert _plan(*SGLANG, *fixed, check_memory=True).estimate.memory_gib_per_gpu < 79.6  # the advice fits


def test_sglang_on_a_cpu_plan_is_a_one_line_refusal() -> None:
    with pytest.raises(PlanError, match=r"^algorithm\.rollout_engine=sglang needs a GPU .*rollout_engine=hf$"):
        make_plan(MATH, gpu="cpu", overrides=SGLANG, check_memory=False)
