"""The block-diffusion planner against the measured H200 rows (fixture copied from the GPU sheet and the suite).

Memory: the plan's figure minus its CUDA context against ``max_memory_allocated``, within 10 %. Time: the step
against the job's median step, within 25 % (the ``gputrain run`` rows are held out: the efficiencies come from
the benchmark rows only). Sources: ../shared/reference/gpu-h200-2026-11-26.md (sheet) and benchmarks/RESULTS.md
(GPU suite, 2026-11-26, commit e4328d4).
"""

from __future__ import annotations

import pytest

from gputrain.errors import PlanError
from gputrain.planner import make_plan
from tests.conftest import RECIPES

BENCH = ["train.grad_accum=1", "algorithm.ema=0"]  # diffusion_mfu.py: no EMA, one micro-batch
#: the switches every row before 2026-11-27 ran with (eager per-token modulation and loss; the defaults since #27
#: are shared modulation and the compiled loss): those rows are planned with the path they measured
OLD = ["algorithm.loss_kernel=torch", "algorithm.shared_modulation=false"]
SDPA = ["train.attention=sdpa", "train.compile=false", *OLD]
# (recipe, overrides, preset, measured step s or None, measured allocated GiB)
ROWS = [
    ("bd3lm_gsm8k.yaml", [*SDPA, *BENCH, "model.seq_len=1024", "train.batch_size=32"], None, None, 52.3),
    ("bd3lm_gsm8k.yaml", [*SDPA, *BENCH, "train.batch_size=128"], None, None, 102.1),
    ("bd3lm_gsm8k.yaml", SDPA, None, 2.124, 103.4),
    ("bd3lm_gsm8k.yaml", [*SDPA, "train.batch_size=139", "train.grad_accum=1"], None, 0.600, 111.4),
    ("bd3lm_gsm8k.yaml", ["train.attention=flex", "train.compile=true", "train.grad_accum=1", *OLD], None, 0.297,
     None),
    ("hdp_diffusion.yaml", SDPA, None, 1.824, 88.6),
    ("bd3lm_gsm8k.yaml", [*BENCH, *OLD, "model.seq_len=1024", "train.batch_size=32"], None, None, 36.64),
    ("bd3lm_gsm8k.yaml", OLD, None, 1.095, 72.32),
    ("bd3lm_gsm8k.yaml", OLD, "conservative", 0.567, 37.9),
    ("bd3lm_gsm8k.yaml", OLD, "aggressive", 1.642, 106.7),
    ("hdp_diffusion.yaml", OLD, None, 0.943, 61.36),
]


@pytest.mark.parametrize(("recipe", "overrides", "preset", "step", "allocated"), ROWS)
def test_diffusion_plan_matches_the_h200_rows(recipe: str, overrides: list[str], preset: str | None,
                                              step: float | None, allocated: float | None) -> None:
    plan = make_plan(RECIPES / recipe, gpu="H200", gpus_per_node=1, preset=preset, overrides=overrides,
                     check_memory=False)
    est = plan.estimate
    if allocated is not None:
        context = next(t.gib for t in est.memory_terms if t.name == "cuda_context")
        assert (est.memory_gib_per_gpu - context) / allocated == pytest.approx(1.0, abs=0.10)
    if step is not None:
        assert est.step_seconds / step == pytest.approx(1.0, abs=0.25)


#: one H100 80GB HBM3 (GPU suite, 2026-11-27, commit 7ed48ed, benchmarks/RESULTS.md): the plan a user on an H100
#: gets from --fit (64 x accum 8; a plain run resolves the same), HDP's recipe on an H100 (its H200 micro-batch
#: halved, accumulation doubled), and the 12 x 768 benchmark at batch 32, sequence 1024. The default path since
#: #27: head padded to 50,304, loss rows in fixed buckets, expandable segments. (57e3558's rows, before the
#: padding: 1.239 s / 37.9 GiB and 0.1646 s / 36.7 GiB.)
H100_ROWS = [
    ("bd3lm_gsm8k.yaml", ["train.batch_size=64", "train.grad_accum=8", *OLD], None, 1.198, 38.41),
    ("hdp_diffusion.yaml", OLD, None, 1.054, 32.78),
    ("bd3lm_gsm8k.yaml", [*BENCH, *OLD, "model.seq_len=1024", "train.batch_size=32"], None, 0.1573, 37.15),
]


@pytest.mark.parametrize(("recipe", "overrides", "preset", "step", "allocated"), H100_ROWS)
def test_diffusion_plan_matches_the_h100_rows(recipe: str, overrides: list[str], preset: str | None,
                                              step: float, allocated: float) -> None:
    """Measured on a real H100 (not the H200 under a cap): the figures the H100 user is shown."""
    plan = make_plan(RECIPES / recipe, gpu="H100", gpus_per_node=1, preset=preset, overrides=overrides,
                     check_memory=False)
    est = plan.estimate
    context = next(t.gib for t in est.memory_terms if t.name == "cuda_context")
    assert (est.memory_gib_per_gpu - context) / allocated == pytest.approx(1.0, abs=0.10)
    assert est.step_seconds / step == pytest.approx(1.0, abs=0.25)


def test_the_h100_fit_advice_ran_on_an_h100() -> None:
    """--fit on an H100 advised 64 x 8 on the old path, which ran at 38.4 GiB allocated / 40.3 GiB reserved of
    79.2 GiB (7ed48ed)."""
    plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H100", gpus_per_node=1, overrides=OLD)
    fit = plan.estimate.fit
    assert fit is not None and fit.batch_size == 64 and fit.grad_accum == 8


#: the defaults since #27 (shared modulation, the compiled loss) on one H200 (GPU suite 2026-11-27, commit
#: f7540f9, benchmarks/RESULTS.md): bench_fast, the 12 x 768 benchmark at batch 32, sequence 1024. Its step is the
#: efficiency's source (workload_dense.DIFFUSION_EFFICIENCY); its memory is held out (the loss term is derived
#: from compiled_ce.py, not from this row).
FAST_ROWS = [
    ("bd3lm_gsm8k.yaml", [*BENCH, "model.seq_len=1024", "train.batch_size=32"], None, 0.1315, 28.85),
]


@pytest.mark.parametrize(("recipe", "overrides", "preset", "step", "allocated"), FAST_ROWS)
def test_diffusion_plan_matches_the_default_path_rows(recipe: str, overrides: list[str], preset: str | None,
                                                     step: float, allocated: float) -> None:
    plan = make_plan(RECIPES / recipe, gpu="H200", gpus_per_node=1, preset=preset, overrides=overrides,
                     check_memory=False)
    est = plan.estimate
    context = next(t.gib for t in est.memory_terms if t.name == "cuda_context")
    assert (est.memory_gib_per_gpu - context) / allocated == pytest.approx(1.0, abs=0.10)
    assert est.step_seconds / step == pytest.approx(1.0, abs=0.25)


def test_the_loss_term_follows_the_loss_that_runs() -> None:
    """The compiled loss keeps the bf16 logits (2 B per row and column) where the eager one keeps three fp32
    tensors (12 B); where the blocks do not compile (SDPA eager) the compiled loss runs eagerly: 12 B again."""
    def logits(*sets: str) -> float:
        plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H200", gpus_per_node=1, check_memory=False,
                         overrides=[*BENCH, "model.seq_len=1024", "train.batch_size=32", *sets])
        return next(t.gib for t in plan.estimate.memory_terms if t.name == "logits")

    assert logits("algorithm.loss_kernel=torch") == pytest.approx(6 * logits("algorithm.loss_kernel=compiled"))
    assert logits("train.attention=sdpa", "train.compile=false") == pytest.approx(logits("algorithm.loss_kernel=torch"))
    assert logits("algorithm.loss_kernel=chunked") < logits("algorithm.loss_kernel=torch") / 3


def test_the_default_path_fit_on_an_h100_keeps_its_margin() -> None:
    """With the compiled loss a micro-batch needs less memory, so --fit packs more of the global batch into it;
    the upper bound of its prediction still leaves 10 % of the H100 free."""
    plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H100", gpus_per_node=1)
    fit = plan.estimate.fit
    assert fit is not None and fit.batch_size is not None and fit.memory_gib is not None
    assert fit.batch_size > 64 and fit.memory_gib[1] <= 0.9 * 79.6


def test_the_plan_records_the_path_that_runs() -> None:
    plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H200", gpus_per_node=1)
    assert plan.kernels is not None and (plan.kernels.attention, plan.kernels.compile) == ("flex", True)
    v100 = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="V100", gpus_per_node=1, check_memory=False,
                     overrides=["train.precision=auto"])
    assert v100.kernels is not None and (v100.kernels.attention, v100.kernels.compile) == ("sdpa", False)


def test_fit_no_longer_advises_the_batch_that_ran_out_of_memory_on_an_h100() -> None:
    """The old advice (139 per GPU) ran out of memory under an 79 GiB cap on the H200 (RESULTS.md)."""
    plan = make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H100", gpus_per_node=1)
    fit = plan.estimate.fit
    assert fit is not None and fit.batch_size is not None and fit.batch_size < 139
    with pytest.raises(PlanError, match="needs"):  # the eager loss's extreme preset (256 per GPU); the compiled
        # loss's fits in ~111 GiB
        make_plan(RECIPES / "bd3lm_gsm8k.yaml", gpu="H200", gpus_per_node=1, preset="extreme", overrides=OLD)
