"""Salvage before teardown: bring back what a run made before its pod is terminated, within a time budget.

On Ctrl-C, SIGTERM, a connection lost past its deadline or any error after the training started, ``up``
downloads the small results first (metrics, logs, summary, result, ONNX: everything in ``job/`` except
``checkpoints/``), then the newest complete checkpoint, and says what it got. Every copy is stopped when the
budget runs out. Names listed by the pod are data: only plain names (and ``step_<digits>`` checkpoints)
are ever turned into paths.

The container log (RunPod's v2 logs endpoint, Server-Sent Events) is kept too, in ``container.log``, so
``gputrain runpod logs NAME`` still has something to show after the pod is gone.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.backends.runpod.ssh import LOCAL_ONLY, PLAIN_NAME, PodShell
from gputrain.errors import RunPodError

if TYPE_CHECKING:
    from gputrain.backends.runpod.api import RunPodClient

_PLAIN = PLAIN_NAME
_CHECKPOINT = re.compile(r"\Astep_(\d{1,12})\Z")
CONTAINER_LOG = "container.log"


class SalvageSkipped(Exception):
    """A second Ctrl-C: stop salvaging, go straight to termination."""


def newest_checkpoint(names: list[str]) -> str | None:
    """The newest complete checkpoint folder among ``names`` (``.tmp-``/``.old-`` ones are not complete)."""
    steps = [(int(m.group(1)), n) for n in names if (m := _CHECKPOINT.match(n))]
    return max(steps)[1] if steps else None


def salvage(shell: PodShell, remote_job: str, job_dir: Path, budget_s: float,
            say: Callable[[str], None]) -> list[str]:
    """Download what exists of ``remote_job`` into ``job_dir`` within ``budget_s``; the names got.

    Raises :class:`RunPodError` (or :class:`~gputrain.backends.runpod.ssh.SshConnectionLost`) when nothing
    could be listed; a copy that fails later leaves what was already got in place.
    """
    deadline = time.monotonic() + budget_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RunPodError(f"salvage ran out of its {budget_s:.0f} s budget")
        return remaining

    q = shlex.quote
    listing = shell.run_checked(
        f"cd {q(remote_job)} 2>/dev/null && ls -1A . && echo '--checkpoints--' && ls -1A checkpoints 2>/dev/null;"
        " true", "list the job folder", timeout_s=left())
    top, _, ckpts = listing.partition("--checkpoints--")
    small = [n for n in top.split() if _PLAIN.match(n) and n != "checkpoints" and n not in LOCAL_ONLY]
    got: list[str] = []
    if small:
        say(f"salvaging {len(small)} result file(s) from the pod")
        shell.download_paths([f"{remote_job}/{n}" for n in small], job_dir, timeout_s=left())
        got += small
    newest = newest_checkpoint(ckpts.split())
    if newest is not None:
        say(f"salvaging the newest checkpoint {newest}")
        shell.download_paths([f"{remote_job}/checkpoints/{newest}"], job_dir / "checkpoints", timeout_s=left())
        got.append(f"checkpoints/{newest}")
    dropped = drop_non_regular(job_dir, got)
    if dropped:
        say(f"ignored {len(dropped)} salvaged entr{'y' if len(dropped) == 1 else 'ies'} that were not regular "
            f"files (links, devices): {', '.join(dropped[:5])}")
    return [name for name in got if name not in dropped and (job_dir / name).exists()]


def drop_non_regular(job_dir: Path, names: list[str]) -> list[str]:
    """Remove whatever a salvage brought back that is not a regular file or a folder (a link, a FIFO, a
    device), at any depth under ``names``: the pod's folder is hostile data, and nothing here may later be
    read *through* it. (rsync -rt already skips them; scp, the fallback, is checked the same way.)"""
    dropped: list[str] = []
    for name in names:
        top = job_dir / name
        real_dir = top.is_dir() and not top.is_symlink()  # never walk into a link: it leads outside
        inside = [Path(d, n) for d, dirs, files in os.walk(top, followlinks=False) for n in (*dirs, *files)] \
            if real_dir else []
        for path in [top, *inside]:
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                path.unlink(missing_ok=True)
                dropped.append(str(path.relative_to(job_dir)))
    return dropped


def keep_container_log(client: RunPodClient, pod_id: str, job_dir: Path, idle_s: float = 3.0,
                       tail: int = 2000) -> int:
    """Write the pod's container log into ``job_dir/container.log`` (appending to an earlier copy); the
    number of lines kept. Called before termination: the endpoint answers 404 for a terminated pod."""
    from gputrain.atomic import write_atomic

    lines = client.pod_logs(pod_id, tail=tail, idle_s=idle_s)
    if lines:
        path = job_dir / CONTAINER_LOG
        write_atomic(path, _earlier_copy(path) + "".join(f"{line}\n" for line in lines), 0o600)
    return len(lines)


def _earlier_copy(path: Path) -> str:
    """The container log kept before, if it is our own regular file: a link the pod planted (to
    ``/proc/self/environ``, to a key) is never read through, and is replaced by the write."""
    try:
        info = path.lstat()
    except OSError:
        return ""
    if not stat.S_ISREG(info.st_mode):
        return ""
    return path.read_text(encoding="utf-8", errors="replace")
