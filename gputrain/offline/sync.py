"""``gputrain sync JOB``: after a job on nodes without internet, upload what it logged for later.

A job on an offline cluster runs W&B with ``WANDB_MODE=offline``: the run is written to
``<job>/wandb/offline-run-*/run-<id>.wandb`` and nothing leaves the node. On the login node, ``sync``
hands those folders to the real ``wandb sync`` (``--dry-run`` lists what would upload, without a server
or an API key); W&B marks a synced run with ``run-<id>.wandb.synced``, so a second sync skips it.
TensorBoard event files (``<job>/tensorboard/``) have no upload service since TensorBoard.dev closed:
``sync`` lists them and, with ``--tensorboard-to DIR``, copies them where ``tensorboard --logdir`` runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gputrain.errors import ClusterError, UserError


@dataclass(frozen=True)
class WandbRun:
    folder: Path
    log: Path  # run-<id>.wandb

    @property
    def synced(self) -> bool:
        return self.log.with_name(self.log.name + ".synced").exists()


def wandb_runs(job_dir: Path) -> list[WandbRun]:
    """Offline W&B runs under the job folder (every restart of a requeued job adds one)."""
    runs = []
    for folder in sorted((job_dir / "wandb").glob("offline-run-*")):
        logs = sorted(folder.glob("run-*.wandb"))
        if folder.is_dir() and logs:
            runs.append(WandbRun(folder, logs[0]))
    return runs


def tensorboard_files(job_dir: Path) -> list[Path]:
    return sorted(p for p in (job_dir / "tensorboard").rglob("events.out.tfevents.*") if p.is_file())


def wandb_command() -> list[str]:
    """The ``wandb`` CLI of this environment (next to the interpreter), else ``python -m wandb``."""
    script = Path(sys.executable).with_name("wandb")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "wandb"]


def sync_wandb(runs: list[WandbRun], *, dry_run: bool, project: str | None = None) -> str:
    """Run ``wandb sync`` on ``runs``; returns its output. Refuses (one line) without an API key."""
    if not runs:
        return ""
    if not dry_run and not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").exists():
        raise UserError("no W&B credentials here: set WANDB_API_KEY (or `wandb login`) on this machine, "
                        "or pass --dry-run to list what would upload")
    args = [*wandb_command(), "sync", *(["--dry-run"] if dry_run else []), *(["-p", project] if project else [])]
    args += [str(r.folder) for r in runs]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"wandb sync did not run: {exc}") from None
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        last = output.splitlines()[-1] if output else f"exit {proc.returncode}"
        raise ClusterError(f"wandb sync failed: {last}")
    return output


def copy_tensorboard(job_dir: Path, files: list[Path], dest: Path) -> list[Path]:
    """Copy event files under ``dest/<job folder name>/`` (same relative paths); existing equal files kept."""
    copied = []
    for src in files:
        target = dest / job_dir.name / src.relative_to(job_dir / "tensorboard")
        if target.exists() and target.stat().st_size == src.stat().st_size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".partial")
        shutil.copyfile(src, tmp)
        os.replace(tmp, target)
        copied.append(target)
    return copied
