"""Slurm submission all or nothing: one job, one job per ``--sweep`` point, or one array (#26).

    gputrain submit selftest --cluster testbed                                  # one job
    gputrain submit selftest --cluster testbed --sweep train.seed=0,1,2          # one array
    gputrain submit selftest --cluster testbed --sweep train.seed=0,1 --no-array  # one job per point

A job folder is named after its Slurm id, which exists only once ``sbatch`` answers, and Slurm makes no
folder for ``--output``. So, in order:

1. every folder is written into one hidden staging folder; a failure removes it (nothing was submitted);
2. every script is submitted ``--hold`` (one ``sbatch`` for an array, one per point otherwise);
3. each folder is renamed to its job-id name and the job recorded (:mod:`gputrain.registry.transitions`);
4. every job is released with one ``scontrol release``.

A failure in 2-4 (Slurm refusing a later point, a folder name already taken, the registry, the release, Ctrl-C)
cancels every job submitted so far — held, so none has started — withdraws their registry rows, removes
their folders, and says in one line what failed and what was cancelled. When even ``scancel`` fails the jobs
stay held (they never start) and the line gives the ``scancel`` to run.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.atomic import write_atomic
from gputrain.backends.base import Submission
from gputrain.backends.resume import seed_checkpoint
from gputrain.errors import ClusterError, GputrainError, UserError
from gputrain.registry.transitions import record_job, withdraw_jobs

if TYPE_CHECKING:
    from gputrain.backends.slurm import PreparedJob, SlurmBackend

_BAD_PATH = frozenset({errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.EEXIST,
                       errno.ELOOP})
"""Errors that say the ``--logs-dir`` given cannot hold folders (the user's to fix: exit 2); any other (a full
disk, a quota, an I/O error) is the world's (exit 1)."""


def folder_error(exc: OSError, logs_dir: Path, *, dry_run: bool) -> GputrainError:
    """One line for a job folder that could not be written, naming the ``--logs-dir`` the user gave."""
    done = "nothing was written" if dry_run else "nothing was submitted"
    if exc.errno in _BAD_PATH:
        return UserError(f"--logs-dir {logs_dir}: cannot make job folders there ({exc.strerror}); {done}")
    return ClusterError(f"cannot write job folders in {logs_dir}: {exc.strerror}; {done}")


def write_files(folder: Path, files: dict[str, str]) -> None:
    """The job folder's files and its empty ``checkpoints/`` (raises OSError: callers clean up)."""
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_atomic(folder / name, text, 0o755 if name.endswith(".sbatch") else 0o644)


def write_folders(folders: Sequence[tuple[Path, dict[str, str]]], logs_dir: Path, *, dry_run: bool) -> None:
    """Each folder whole (written beside it under a hidden name, then renamed) and all of them or none: a
    failure removes the ones already placed and raises :func:`folder_error`."""
    placed: list[Path] = []
    try:
        for folder, files in folders:
            tmp = folder.parent / f".{folder.name}.{os.urandom(4).hex()}"
            try:
                write_files(tmp, files)
                os.rename(tmp, folder)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            placed.append(folder)
    except BaseException as exc:
        for folder in placed:
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            raise folder_error(exc, logs_dir, dry_run=dry_run) from None
        raise


def submit_each(backend: SlurmBackend, jobs: Sequence[PreparedJob], *, dry_run: bool) -> list[Submission]:
    """One job per point (``--no-array``): held together, or (a dry run) each folder written, all or none."""
    from gputrain.backends.slurm import run_slurm

    if not dry_run:
        if shutil.which("sbatch") is None:
            run_slurm(["sbatch"])  # raises the one-line "not found on PATH" error
        return submit_held(backend, jobs, array=False)
    done: list[Submission] = []
    try:
        for job in jobs:
            done.append(backend.submit_prepared(job, dry_run=True))
    except BaseException:
        for sub in done:
            shutil.rmtree(sub.job_dir, ignore_errors=True)
        raise
    return done


def submit_held(backend: SlurmBackend, jobs: Sequence[PreparedJob], *, array: bool) -> list[Submission]:
    """Submit prepared jobs (or one array of them) all or nothing; see the module docstring."""
    from gputrain.backends.slurm import run_slurm

    first = jobs[0]
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    logs_dir = Path(first.logs_dir)
    for job in jobs:
        backend._check_gres(job)  # sinfo once per (partition, gres)
    staging = _stage(logs_dir, first.recipe, [job.stamped(stamp) for job in jobs], [j.resume_from for j in jobs])
    held: list[str] = []  # submitted (held) ids, to cancel on failure
    recorded: list[str] = []  # registry rows, to withdraw on failure
    placed: list[Path] = []  # folders renamed into place, to remove on failure
    subs: list[Submission] = []
    releasing = False
    try:
        if array:
            held.append(backend._sbatch_held(staging / "0" / "job.sbatch", first))
        else:
            for n, job in enumerate(jobs):
                held.append(backend._sbatch_held(staging / str(n) / "job.sbatch", job))
        for n, job in enumerate(jobs):
            job_id, name, extra = _naming(job, n, held, stamp, array=array)
            job_dir = logs_dir / name
            _place(staging / str(n), job_dir)
            placed.append(job_dir)
            record = backend._record(job_id, job_dir, job)
            record_job(backend.registry, replace(record, extra={**record.extra, **extra}))
            recorded.append(job_id)
            subs.append(Submission(job_id=job_id, job_dir=job_dir, script=job.stamped(stamp)["job.sbatch"],
                                   extra=dict(extra)))
        releasing = True  # from here a job of the list may have been released (and started) before a failure
        released = run_slurm(["scontrol", "release", ",".join(held)])
        if released.returncode != 0:
            from gputrain.backends.slurm import _one_line

            raise ClusterError(_one_line("scontrol release", released.stderr or released.stdout))
    except BaseException as exc:
        error = _roll_back(backend, exc, held=held, recorded=recorded, placed=placed, releasing=releasing)
        if isinstance(exc, (OSError, GputrainError)):
            raise error from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return subs


def _stage(logs_dir: Path, recipe: str, folders: list[dict[str, str]], seeds: list[str | None]) -> Path:
    """Every job's folder under one hidden staging folder, or none (nothing is submitted yet)."""
    staging = logs_dir / f".staging_{recipe}_{os.urandom(4).hex()}"
    try:
        for n, files in enumerate(folders):
            write_files(staging / str(n), files)
            if seeds[n]:
                seed_checkpoint(Path(str(seeds[n])), staging / str(n))
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise folder_error(exc, logs_dir, dry_run=False) from None
        raise
    return staging


def _naming(job: PreparedJob, n: int, held: list[str], stamp: str, *, array: bool) -> tuple[str, str, dict[str, Any]]:
    """Point ``n``'s job id, folder name and the registry facts that go with them."""
    if array:
        return (f"{held[0]}_{n}", f"{job.recipe}_job_{held[0]}_{n}_{stamp}",
                {"sweep_id": held[0], "array_task": n})
    return held[n], f"{job.recipe}_job_{held[n]}_{stamp}", {}


def _place(staged: Path, job_dir: Path) -> None:
    """Rename a staged folder to its job-id name; never over a folder that is already there."""
    if job_dir.exists() or job_dir.is_symlink():
        raise ClusterError(f"cannot create job folder {job_dir}: something is already there")
    try:
        os.rename(staged, job_dir)
    except OSError as exc:
        raise ClusterError(f"cannot create job folder {job_dir}: {exc.strerror}") from None


def _roll_back(backend: SlurmBackend, exc: BaseException, *, held: list[str], recorded: list[str],
               placed: list[Path], releasing: bool) -> GputrainError:
    """Undo a partial submission; the error to raise says what failed and what became of the held jobs."""
    from gputrain.backends.slurm import _one_line, run_slurm

    if isinstance(exc, GputrainError):
        what, code = exc.message, exc.exit_code
    else:
        what, code = (f"cannot write {exc.filename}: {exc.strerror}" if isinstance(exc, OSError)
                      else f"interrupted ({type(exc).__name__})"), 1
    said = ""
    if held:
        ids = ", ".join(held)
        try:
            proc = run_slurm(["scancel", "--", *held])
            failed = _one_line("scancel", proc.stderr or proc.stdout) if proc.returncode != 0 else ""
        except ClusterError as cancel_exc:
            failed = cancel_exc.message
        if failed:
            held_says = "some may have been released" if releasing else "held, they never start"
            said = (f"; the job(s) {ids} could not be cancelled ({failed}): {held_says}; "
                    f"`scancel {' '.join(held)}` removes them")
        elif releasing:
            said = f"; cancelled the job(s) {ids} and removed their folders and records"
        else:
            said = f"; cancelled the held job(s) {ids} before any started and removed their folders and records"
    try:
        if recorded:
            withdraw_jobs(backend.registry, recorded, reason="submission rolled back")
    except GputrainError as reg_exc:
        said += f"; their registry rows {', '.join(recorded)} could not be removed ({reg_exc.message})"
    for job_dir in placed:
        shutil.rmtree(job_dir, ignore_errors=True)
    kind = type(exc) if isinstance(exc, GputrainError) else ClusterError
    return kind(f"{what}{said}", exit_code=code)
