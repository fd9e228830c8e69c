"""``plan --fit`` and the plan's uncertainty, held against what one H200 measured (a fixture of its sheet).

The old advice (``--set train.batch_size=139`` for ``bd3lm_gsm8k`` on an H100) needed 111.4 GiB on the
H200: these tests read the measured peaks from ``data/reference/gpu_h200_2026_11_26.json`` and fail on any
advice whose measured memory would not fit the device with the stated margin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.planner import make_plan
from tests.conftest import RECIPES

SHEET = json.loads((Path(__file__).parent / "data" / "reference" / "gpu_h200_2026_11_26.json").read_text())
BD3LM = RECIPES / "bd3lm_gsm8k.yaml"
CODE = RECIPES / "grpo_code_mbpp.yaml"
SDPA_EAGER = ["train.attention=sdpa", "train.compile=false"]


def _measured_bd3lm_gib(batch: int) -> float:
    """Peak memory of a bd3lm_gsm8k micro-batch (seq 512, SDPA), on the line through the sheet's two runs."""
    (b0, m0), (b1, m1) = [(r["batch_size"], r["measured_peak_gib"]) for r in SHEET["bd3lm_gsm8k_runs"]]
    slope = (m1 - m0) / (b1 - b0)
    return m0 + slope * (batch - b0)


@pytest.mark.parametrize("sets", [[], ["train.batch_size=128", "train.grad_accum=1"],
                                  ["train.batch_size=72", "train.grad_accum=4"]])
def test_fit_on_h100_never_advises_a_bd3lm_batch_that_the_h200_measured_over_capacity(sets: list[str]) -> None:
    sets = [*sets, *SDPA_EAGER]  # the sheet's runs measured this path (the default is now flex + compile)
    plan = make_plan(BD3LM, gpu="H100", overrides=sets, check_memory=False)
    fit = plan.estimate.fit
    assert fit is not None and fit.batch_size is not None
    measured = _measured_bd3lm_gib(fit.batch_size) + 1.0  # + the CUDA context the sheet's peak leaves out
    assert measured <= plan.gpu.memory_gib * (1 - fit.margin), (fit.batch_size, measured)
    # only the micro-batch and accumulation change: the global batch is the recipe's
    fitted = make_plan(BD3LM, gpu="H100", overrides=[*sets, *fit.overrides], check_memory=False)
    assert fitted.global_batch_size == plan.global_batch_size
    assert {o.split("=")[0] for o in fit.overrides} <= {"train.batch_size", "train.grad_accum"}


def test_fit_says_how_sure_it_is_and_the_range_brackets_the_central_figure() -> None:
    est = make_plan(BD3LM, gpu="H100", check_memory=False).estimate
    assert est.fit is not None and est.fit.memory_gib is not None
    low, high = est.memory_range_gib or (0.0, 0.0)
    assert est.memory_gib_per_gpu is not None and low < est.memory_gib_per_gpu < high
    # the diffusion terms that scale with the batch were held against the GPU rows: the fit says so
    assert est.fit.confidence == "measured" and "measured" in est.fit.note and "kept" in est.fit.note
    terms = {t.name: t for t in est.memory_terms}
    assert terms["weights"].basis == "exact" and terms["activations"].basis in ("assumed", "measured")


def test_borrowed_profile_keeps_the_global_batch_and_learning_rate() -> None:
    h200 = make_plan(BD3LM, gpu="H200", check_memory=False)
    h100 = make_plan(BD3LM, gpu="H100", check_memory=False)
    assert h100.global_batch_size == h200.global_batch_size == 512
    assert h100.learning_rate == h200.learning_rate
    assert h100.recipe.train.max_steps == h200.recipe.train.max_steps
    assert h100.recipe.train.batch_size < h200.recipe.train.batch_size
    assert any("global batch stays 512" in w for w in h100.warnings)


def test_grpo_memory_of_the_h200_run_within_10_percent_and_inside_its_range() -> None:
    row = SHEET["grpo_0_5b_run"]
    est = make_plan(CODE, gpu="H200", gpus_per_node=1, overrides=row["sets"], check_memory=False).estimate
    assert est.memory_gib_per_gpu is not None and est.memory_range_gib is not None
    allocator = est.memory_gib_per_gpu - 1.0  # the sheet's peak is max_memory_allocated: no CUDA context
    assert abs(allocator / row["measured_peak_gib"] - 1) <= 0.10
    low, high = est.memory_range_gib
    assert low - 1.0 <= row["measured_peak_gib"] <= high - 1.0
