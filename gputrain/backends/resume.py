"""``--resume-from JOB``: a new job starts from another job's newest complete checkpoint.

The trainings resume from ``<job_dir>/checkpoints/step_NNNNNNNN`` when one is there (the runtime's
``CheckpointManager``; a checkpoint counts once its ``meta.json`` is written). Seeding a new job folder with
the old job's newest one, before the launcher starts, is all a rerun needs: the same code path as a requeue.
Files are hard-linked where the filesystem allows (checkpoints are large and never modified in place),
copied otherwise, into a temporary folder renamed into place, so a copy cut short is never taken for a
checkpoint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gputrain.errors import GputrainError, UserError

#: The runtime's layout (``gputrain.train.runtime.checkpoint``; train/ is an island, a test keeps them equal).
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "step_"


def newest_checkpoint(job_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a job, or None."""
    root = job_dir / CHECKPOINTS_DIR
    found: list[tuple[int, Path]] = []
    if root.is_dir():
        for path in root.iterdir():
            step = path.name.removeprefix(CHECKPOINT_PREFIX)
            if path.name.startswith(CHECKPOINT_PREFIX) and step.isdigit() and (path / "meta.json").is_file():
                found.append((int(step), path))
    return max(found)[1] if found else None


def seed_checkpoint(source_job_dir: Path, job_dir: Path) -> Path:
    """Put ``source_job_dir``'s newest checkpoint into ``job_dir``; returns the new checkpoint folder."""
    newest = newest_checkpoint(source_job_dir)
    if newest is None:
        raise UserError(f"--resume-from: {source_job_dir} has no complete checkpoint to resume from")
    final = job_dir / CHECKPOINTS_DIR / newest.name
    tmp = job_dir / CHECKPOINTS_DIR / f".tmp-{newest.name}"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(newest, tmp, copy_function=_link_or_copy)
        os.replace(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GputrainError(f"--resume-from: cannot copy {newest} into {job_dir}: {exc.strerror or exc}") from None
    return final


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
