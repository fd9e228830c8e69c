"""The RL planner against the GRPO jobs measured on real GPUs (#28): the GRPO counterpart of
``test_planner_diffusion_memory.py``'s H100/H200 rows.

Every row is ``benchmarks/gpu_suite.py``'s ``run_grpo`` / ``run_grpo_packed``: a real ``gputrain run`` of
``recipes/grpo_code_mbpp.yaml`` with a 0.5B random-init Qwen2 policy (24 x 1280, vocab 512), bf16, DDP on one
GPU, 8 prompts x 8 completions of at most 256 tokens, HF generate (the sets below are the sheet fixture's, the
suite's GRPO_RUN). Held like the diffusion rows: the steady step (the job's own rule: not the first step, not
one that compiled) within 25 %, the rollout phase within 25 %, ``max_memory_allocated`` against the plan's
figure minus its CUDA context within 10 %. A figure a row did not record is None. Sources: benchmarks/RESULTS.md
(H100 2026-11-27, 3d70085) and ../shared/reference/gpu-h200-2026-11-26.md (the H200 sheet).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.planner import make_plan
from tests.conftest import RECIPES

SHEET = json.loads((Path(__file__).parent / "data" / "reference" / "gpu_h200_2026_11_26.json").read_text())
SETS = SHEET["grpo_0_5b_run"]["sets"]
PACKED = ["algorithm.sequence_packing=true"]
#: these rows ran HF generate with the dynamic KV cache, before algorithm.generate_cache (auto: static on CUDA)
DYNAMIC = ["algorithm.generate_cache=dynamic"]
#: the plan's 8.36 s step is its 6.89 s rollout (within 25 % of the sheet's 5.65 s) + 1.2 s of sandboxed
#: programs (64 at 0.15 s, 8 at a time) + 0.27 s of passes; the H200 job's step was 5.86 s, so everything but
#: the rollout took 0.21 s there (a random-init policy's programs fail fast): the reward term is what is off
H200_STEP = pytest.mark.xfail(strict=True, reason="#28: 1.2 s of sandbox per step priced, ~0.2 s measured on the H200")

# (gpu, extra sets, steady step s, rollout s, allocated GiB)
ROWS = [
    pytest.param("H100", [], 9.11, None, None, id="H100-padded-3d70085"),  # steps 2-3: 9.69 / 8.53 s
    pytest.param("H100", PACKED, 8.59, None, None, id="H100-packed-3d70085"),  # step 3 (1-2 compiled)
    pytest.param("H200", [], None, None, SHEET["grpo_0_5b_run"]["measured_peak_gib"], id="H200-sheet-memory"),
    pytest.param("H200", [], SHEET["grpo_0_5b_run"]["measured_step_s"], SHEET["grpo_0_5b_run"]["measured_rollout_s"],
                 None, id="H200-sheet-time", marks=H200_STEP),
]


@pytest.mark.parametrize(("gpu", "extra", "step", "rollout", "allocated"), ROWS)
def test_grpo_plan_matches_the_gpu_rows(gpu: str, extra: list[str], step: float | None, rollout: float | None,
                                        allocated: float | None) -> None:
    est = make_plan(RECIPES / "grpo_code_mbpp.yaml", gpu=gpu, gpus_per_node=1, overrides=[*SETS, *DYNAMIC, *extra],
                    check_memory=False).estimate
    if allocated is not None:
        context = next(t.gib for t in est.memory_terms if t.name == "cuda_context")
        assert (est.memory_gib_per_gpu - context) / allocated == pytest.approx(1.0, abs=0.10)
    if step is not None:
        assert est.step_seconds / step == pytest.approx(1.0, abs=0.25)
    if rollout is not None:
        assert est.phases["rollout"] / rollout == pytest.approx(1.0, abs=0.25)
