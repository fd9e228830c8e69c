"""``gputrain submit --sweep`` as one Slurm job array: one ``sbatch``, one id for the whole sweep.

Every point is planned and rendered first (:func:`gputrain.backends.slurm.prepare_job` with ``array=``);
the points share one job script (``--array=0-N%P``), which picks its task's folder from
``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``. As for one job, the folders are staged, the array is
submitted held, each folder renamed to ``<recipe>_job_<ARRAY>_<TASK>_<stamp>`` and recorded as job
``<ARRAY>_<TASK>`` with ``sweep_id`` ``<ARRAY>``, then the array is released. ``status``, ``jobs --sweep``
and ``cancel`` accept the sweep id.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from gputrain.backends.base import Submission
from gputrain.backends.slurm import PreparedJob, SlurmBackend, _one_line, run_slurm
from gputrain.contract import jobstate
from gputrain.errors import ClusterError, GputrainError, UserError
from gputrain.registry.store import JobRecord
from gputrain.registry.transitions import forget_jobs, record_job, record_state


def same_script(jobs: list[PreparedJob]) -> bool:
    """Can these points be one array? Only if they render the same job script (same shape and options)."""
    return len({job.files["job.sbatch"] for job in jobs}) == 1


def submit_array(backend: SlurmBackend, jobs: list[PreparedJob], *, dry_run: bool = False) -> list[Submission]:
    """Submit prepared points as one held array, record each task, release; nothing is left on failure."""
    if not jobs or not same_script(jobs):
        raise UserError("the sweep's points need different job scripts (resources or environment differ): "
                        "they cannot share one array")
    first = jobs[0]
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    logs_dir = Path(first.logs_dir)
    if dry_run:
        out = []
        for task, job in enumerate(jobs):
            job_dir = logs_dir / f"{job.recipe}_job_dryrun_{stamp}_{task}"
            backend._write_folder(job_dir, job.stamped(stamp))
            out.append(Submission(job_id="dry-run", job_dir=job_dir, script=job.files["job.sbatch"], dry_run=True,
                                  extra={"array_task": task}))
        return out
    backend._check_gres(first)
    staging = logs_dir / f".staging_{first.recipe}_{stamp}_{os.urandom(4).hex()}"
    for task, job in enumerate(jobs):
        backend._write_folder(staging / str(task), job.stamped(stamp))
    try:
        array_id = backend._sbatch_held(staging / "0" / "job.sbatch", first)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    done: list[Submission] = []
    try:
        for task, job in enumerate(jobs):
            job_dir = logs_dir / f"{job.recipe}_job_{array_id}_{task}_{stamp}"
            os.rename(staging / str(task), job_dir)
            record = backend._record(f"{array_id}_{task}", job_dir, job)
            record = replace(record, extra={**record.extra, "sweep_id": array_id, "array_task": task})
            record_job(backend.registry, record)
            done.append(Submission(job_id=record.job_id, job_dir=job_dir, script=job.files["job.sbatch"],
                                   extra={"array_task": task, "sweep_id": array_id}))
        shutil.rmtree(staging, ignore_errors=True)
    except (OSError, GputrainError) as exc:
        run_slurm(["scancel", "--", array_id])
        for sub in done:
            forget_jobs(backend.registry, [backend.registry.get(sub.job_id)])
            shutil.rmtree(sub.job_dir, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, GputrainError):
            raise
        raise ClusterError(f"cannot create the sweep's job folders in {logs_dir}: {exc.strerror}") from None
    released = run_slurm(["scontrol", "release", array_id])
    if released.returncode != 0:
        run_slurm(["scancel", "--", array_id])
        for sub in done:
            record_state(backend.registry, sub.job_id, jobstate.CANCELLED, reason="release failed")
        raise ClusterError(_one_line("scontrol release", released.stderr))
    return done


def sweep_records(backend: SlurmBackend, sweep_id: str) -> list[JobRecord]:
    """The tasks of sweep ``sweep_id``, in task order (none: not a sweep gputrain submitted)."""
    tasks = [r for r in backend.registry.list(None, backend="slurm") if (r.extra or {}).get("sweep_id") == sweep_id]
    return sorted(tasks, key=lambda r: int((r.extra or {}).get("array_task", 0)))


def cancel_sweep(backend: SlurmBackend, sweep_id: str) -> list[str]:
    """One ``scancel`` for the whole array; each unfinished task is marked cancelled first (no requeue)."""
    tasks = sweep_records(backend, sweep_id)
    live = [r for r in backend.refresh(tasks) if r.state not in jobstate.ENDED_STATES]
    for record in live:
        if record.job_dir:
            jobstate.write_cancel_marker(record.job_dir, "gputrain cancel (sweep)")
    if live:
        proc = run_slurm(["scancel", "--", sweep_id])
        if proc.returncode != 0:
            raise ClusterError(_one_line("scancel", proc.stderr))
        for record in live:
            record_state(backend.registry, record.job_id, jobstate.CANCELLED, cancelled_by="sweep")
    return [r.job_id for r in live]
