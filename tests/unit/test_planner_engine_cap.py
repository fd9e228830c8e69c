"""An inference engine's cap on sequences decoded at once (vLLM ``max_num_seqs``, SGLang
``max_running_requests``): more sequences than the cap run in waves even when the KV cache holds them all."""

from __future__ import annotations

import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "grpo_math_fsdp.yaml"
SETS = ["algorithm.rollout_engine=vllm", "memory.vllm_gpu_memory_utilization=0.5", "algorithm.train_batch_size=64",
        "algorithm.num_generations=8", "algorithm.max_completion_length=4096", "train.batch_size=4",
        "estimate.completion_fraction=0.5"]


def test_a_cap_below_the_sequences_an_engine_gets_decodes_them_in_waves_and_is_plan_only() -> None:
    from gputrain.planner import make_plan
    from gputrain.recipe.plan_only import plan_only_fields

    free = make_plan(RECIPE, gpu="H100", gpus_per_node=2, check_memory=False, overrides=SETS)
    per_engine = 64 * 8 // 2  # 256 sequences on each of the 2 colocated engines, one KV wave at share 0.5
    assert any("1 wave(s)" in a for a in free.estimate.assumptions), free.estimate.assumptions
    capped = make_plan(RECIPE, gpu="H100", gpus_per_node=2, check_memory=False,
                       overrides=[*SETS, f"algorithm.vllm_max_num_seqs={per_engine // 4}"])
    waves = math.ceil(per_engine / (per_engine // 4))
    assert any(f"{waves} wave(s)" in a and "max_num_seqs" in a for a in capped.estimate.assumptions)
    # each wave decodes a quarter of the batch for the whole length: the decode is at least as long again
    assert capped.estimate.phases["rollout"] > 1.5 * free.estimate.phases["rollout"]
    assert plan_only_fields(capped.recipe) == ["algorithm.vllm_max_num_seqs"]
    # a cap the engine's share never reaches changes nothing
    loose = make_plan(RECIPE, gpu="H100", gpus_per_node=2, check_memory=False,
                      overrides=[*SETS, f"algorithm.vllm_max_num_seqs={per_engine}"])
    assert loose.estimate.phases["rollout"] == free.estimate.phases["rollout"]
