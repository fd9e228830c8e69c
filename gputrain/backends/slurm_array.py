"""``gputrain submit --sweep`` as one Slurm job array: one ``sbatch``, one id for the whole sweep.

Every point is planned and rendered first (:func:`gputrain.backends.slurm.prepare_job` with ``array=``);
the points share one job script (``--array=0-N%P``), which picks its task's folder from
``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``. As for one job, the folders are staged, the array is
submitted held, each folder renamed to ``<recipe>_job_<ARRAY>_<TASK>_<stamp>`` and recorded as job
``<ARRAY>_<TASK>`` with ``sweep_id`` ``<ARRAY>``, then the array is released. ``status``, ``jobs --sweep``
and ``cancel`` accept the sweep id.
"""

from __future__ import annotations

from pathlib import Path

from gputrain.backends.base import Submission
from gputrain.backends.slurm import PreparedJob, SlurmBackend, _one_line, free_stamp, run_slurm
from gputrain.backends.slurm_submit import submit_held, write_folders
from gputrain.contract import jobstate
from gputrain.errors import ClusterError, UserError
from gputrain.registry.store import JobRecord
from gputrain.registry.transitions import record_state


def same_script(jobs: list[PreparedJob]) -> bool:
    """Can these points be one array? Only if they render the same job script (same shape and options)."""
    return len({job.files["job.sbatch"] for job in jobs}) == 1


def submit_array(backend: SlurmBackend, jobs: list[PreparedJob], *, dry_run: bool = False) -> list[Submission]:
    """Submit prepared points as one held array, record each task, release; all or nothing
    (:func:`gputrain.backends.slurm_submit.submit_held`). A dry run writes every folder or none."""
    if not jobs or not same_script(jobs):
        raise UserError("the sweep's points need different job scripts (resources or environment differ): "
                        "they cannot share one array")
    if not dry_run:
        return submit_held(backend, jobs, array=True)
    logs_dir = Path(jobs[0].logs_dir)

    def folders(stamp: str) -> list[Path]:
        return [logs_dir / f"{job.recipe}_job_dryrun_{stamp}_{task}" for task, job in enumerate(jobs)]

    stamp = free_stamp(folders)
    dirs = folders(stamp)
    write_folders([(d, job.stamped(stamp)) for d, job in zip(dirs, jobs, strict=True)], logs_dir, dry_run=True)
    return [Submission(job_id="dry-run", job_dir=d, script=job.files["job.sbatch"], dry_run=True,
                       extra={"array_task": task}) for task, (d, job) in enumerate(zip(dirs, jobs, strict=True))]


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
