"""A GPU job's ``perf.json`` feeds the next plan of that recipe on that GPU, compared like with like.

The job folder is the one ``gputrain run bd3lm_gsm8k --gpu H200 --gpus 1`` writes (its own ``plan.json``),
with the measured figures of the H200 sheet (``data/reference/gpu_h200_2026_11_26.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputrain.contract.perf import MeasuredPerf
from gputrain.doctor.annotate import predicted_vs_measured
from gputrain.planner import make_plan
from gputrain.registry.store import JobRecord, JobRegistry
from tests.conftest import RECIPES

SHEET = json.loads((Path(__file__).parent / "data" / "reference" / "gpu_h200_2026_11_26.json").read_text())
BD3LM = RECIPES / "bd3lm_gsm8k.yaml"
H200_RUN = SHEET["bd3lm_gsm8k_runs"][0]  # the H200 profile: 128 × accum 4


def _measured_job(tmp_path: Path, job_id: str, sets: list[str], step: float, peak: float) -> Path:
    plan = make_plan(BD3LM, gpu="H200", gpus_per_node=1, overrides=sets, check_memory=False)
    job_dir = tmp_path / f"bd3lm_{job_id}"
    job_dir.mkdir()
    (job_dir / "plan.json").write_text(plan.to_json())
    perf = MeasuredPerf(step_seconds=step, steps_timed=25, peak_memory_gib=peak,
                        peak_memory_kind="cuda_max_allocated", world_size=1, device="NVIDIA H200")
    (job_dir / "perf.json").write_text(perf.model_dump_json())
    JobRegistry().add(JobRecord(job_id=job_id, backend="local", name="bd3lm_gsm8k", job_dir=str(job_dir),
                                state="COMPLETED", gpu="H200-141GB", gpus_per_node=1, nodes=1))
    return job_dir


@pytest.fixture
def h200_run(tmp_path: Path, gputrain_home: Path) -> Path:
    return _measured_job(tmp_path, "7", [], H200_RUN["measured_step_s"], H200_RUN["measured_peak_gib"])


def test_the_same_recipe_on_the_same_gpu_plans_what_the_h200_measured(h200_run: Path) -> None:
    before = make_plan(BD3LM, gpu="H200", gpus_per_node=1, check_memory=False).estimate
    after = make_plan(BD3LM, gpu="H200", gpus_per_node=1, check_memory=False, calibrate=True).estimate
    assert after.calibration is not None and after.calibration.match == "exact"
    assert after.step_seconds == pytest.approx(H200_RUN["measured_step_s"])
    assert after.memory_gib_per_gpu == pytest.approx(H200_RUN["measured_peak_gib"] + 1.0)  # + CUDA context
    assert before.step_seconds is not None and after.step_seconds != pytest.approx(before.step_seconds)
    # the parts are the model's split scaled to the measured step: never larger than the total
    assert sum(after.phases.values()) == pytest.approx(after.step_seconds)


def test_another_batch_on_that_gpu_is_corrected_by_the_runs_measured_over_modelled_ratio(h200_run: Path) -> None:
    sets = ["train.batch_size=139", "train.grad_accum=1"]
    near = make_plan(BD3LM, gpu="H200", gpus_per_node=1, overrides=sets, check_memory=False, calibrate=True)
    cal = near.estimate.calibration
    assert cal is not None and cal.match == "near" and cal.factor > 1
    assert near.estimate.step_seconds == pytest.approx(cal.predicted_step_seconds * cal.factor)  # type: ignore[operator]
    # memory: the run's measured/modelled ratio of its assumed terms carries over (the sheet measured this row)
    measured_139 = SHEET["bd3lm_gsm8k_runs"][1]["measured_peak_gib"] + 1.0
    assert near.estimate.memory_gib_per_gpu == pytest.approx(measured_139, rel=0.10)
    assert all(t.basis != "assumed" for t in near.estimate.memory_terms)
    other_gpu = make_plan(BD3LM, gpu="H100", check_memory=False, calibrate=True).estimate
    assert other_gpu.calibration is None  # an H200 run says nothing of an H100


def test_the_probe_just_run_is_the_one_the_plan_learns_from(tmp_path: Path, h200_run: Path) -> None:
    _measured_job(tmp_path, "8", ["train.max_steps=8"], 9.9, 50.0)  # the probe: further from the plan
    default = make_plan(BD3LM, gpu="H200", gpus_per_node=1, check_memory=False, calibrate=True).estimate
    probed = make_plan(BD3LM, gpu="H200", gpus_per_node=1, check_memory=False, calibrate=True,
                       prefer_job="8").estimate
    assert default.calibration is not None and default.calibration.job == "local:7"
    assert probed.calibration is not None and probed.calibration.job == "local:8"


def test_the_summary_compares_the_median_step_and_the_device_peak_not_the_wall_time(h200_run: Path) -> None:
    from gputrain.contract.plan import load_job_plan

    plan = load_job_plan(h200_run / "plan.json")
    summary = {"steps_per_hour": 3600 / 60.0, "peak_gpu_mem_gib": H200_RUN["measured_peak_gib"]}  # wall incl. start
    compared = predicted_vs_measured(summary, plan, h200_run)
    assert compared["step_seconds"]["measured"] == pytest.approx(H200_RUN["measured_step_s"])
    assert compared["memory_gib_per_gpu"]["measured"] == pytest.approx(H200_RUN["measured_peak_gib"] + 1.0)
