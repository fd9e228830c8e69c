"""Put the doctor's verdict into a job's summary: the remedy in ``root_cause.remedy`` and the plan's
predictions next to what the job measured (``predicted_vs_measured``), then rewrite the summary files.

The log summary (``gputrain.logs``) knows nothing of plans, so it leaves these slots empty; the CLI calls
:func:`annotate` whenever it writes or shows a job folder's summary, so ``summary.json``, ``job_summary.txt``
and ``gputrain logs JOB`` all carry them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.doctor.remedy import Remedy, prescribe

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan


def job_plan(job_dir: Path | None) -> JobPlan | None:
    """The job's ``plan.json`` read through the contract, or None (no folder, no plan, another version)."""
    from gputrain.contract.plan import load_job_plan
    from gputrain.errors import GputrainError
    from gputrain.logs.jsonfile import plain_file

    if job_dir is None or not plain_file(job_dir / "plan.json"):  # a link, a device, too large: not read
        return None
    try:
        return load_job_plan(job_dir / "plan.json")
    except (GputrainError, RecursionError):  # RecursionError: JSON nested deeper than the parser recurses
        return None


def _perf(job_dir: Path | None) -> dict[str, Any]:
    try:
        data = json.loads((job_dir / "perf.json").read_text(encoding="utf-8")) if job_dir else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def predicted_vs_measured(summary: dict[str, Any], plan: JobPlan | None,
                          job_dir: Path | None = None) -> dict[str, Any]:
    """Step time and peak memory: the plan's prediction and the job's measurement, where both exist.

    Like with like: the step is ``perf.json``'s median training step (what the plan predicts), not the
    run's wall time over its steps, which holds start-up, evaluation and export; a CUDA peak
    (``max_memory_allocated``) gets the CUDA context the plan counts added back."""
    if plan is None:
        return {}
    out: dict[str, Any] = {}
    perf = _perf(job_dir)
    rate = summary.get("steps_per_hour")
    measured_step = perf.get("step_seconds") or (3600 / float(rate) if rate else None)
    if plan.estimate.step_seconds is not None and measured_step is not None:
        out["step_seconds"] = {"predicted": round(plan.estimate.step_seconds, 4), "measured": round(measured_step, 4)}
    peak = summary.get("peak_gpu_mem_gib")
    if perf.get("peak_memory_gib") is not None and perf.get("peak_memory_kind") == "cuda_max_allocated":
        from gputrain.planner.calibrate import device_peak_gib

        peak = device_peak_gib(perf)
    if plan.estimate.memory_gib_per_gpu is not None and peak is not None:
        out["memory_gib_per_gpu"] = {"predicted": round(plan.estimate.memory_gib_per_gpu, 3),
                                     "measured": round(float(peak), 3)}
    return out


def annotate(summary: dict[str, Any], job_dir: Path | None, *, write: bool = True,
             slurm_job_id: str | None = None) -> Remedy | None:
    """Fill the remedy, predicted-vs-measured and efficiency slots of ``summary`` (in place); rewrite its
    files. ``slurm_job_id``: ask Slurm's accounting for the efficiency report (the job's own figures else)."""
    from gputrain.doctor.efficiency import efficiency

    plan = job_plan(job_dir)
    remedy = prescribe(summary, plan)
    if remedy is not None and isinstance(summary.get("root_cause"), dict):
        summary["root_cause"]["remedy"] = remedy.as_dict()
    compared = predicted_vs_measured(summary, plan, job_dir)
    if compared:
        summary["predicted_vs_measured"] = compared
    usage = None
    if slurm_job_id is not None and summary.get("state") not in ("RUNNING", "PENDING"):
        from gputrain.backends.slurm_accounting import sacct_usage

        usage = sacct_usage(slurm_job_id)
    wall = _perf(job_dir).get("wall_seconds")
    if not summary.get("duration_s") and isinstance(wall, (int, float)):
        # log stamps in whole seconds give 0 for a short run; the time row and the efficiency row must agree
        summary["duration_s"] = round(float(wall), 1)
    report = efficiency(summary, job_dir, plan, usage)
    if report is not None:
        summary["efficiency"] = report
    changed = None
    if job_dir is not None:
        from gputrain.doctor.provenance import changed_since_previous

        changed = changed_since_previous(job_dir, plan.recipe.name if plan is not None else None)
        if changed is not None:
            summary["changed"] = changed
    if write and job_dir is not None and (remedy is not None or compared or report or changed) \
            and (job_dir / "summary.json").is_file():
        from gputrain.logs.report import render_text
        from gputrain.logs.summarize import atomic_write

        atomic_write(job_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        atomic_write(job_dir / "job_summary.txt", render_text(summary))
    return remedy
