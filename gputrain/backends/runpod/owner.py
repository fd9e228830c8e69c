"""One owner per pod: a run id, a distinct pod name per run, a local lock and an owner label on the pod.

Two ``runpod up`` of the same recipe used to share one pod, one job folder and one remote folder, and the
first to finish terminated the pod under the other. Now each run gets its own name (``<base>-<run id>``),
holds an ``flock`` on ``$GPUTRAIN_HOME/runpod-locks/<name>.lock`` for as long as it drives the pod (the
kernel drops it when the process dies, so a closed laptop never leaves a stale lock), and writes
``GPUTRAIN_OWNER=<host>/<run id>`` into the pod's env, which another machine can see in the API's answer.
A run asked to reuse a name (``--name``) that another live run holds is refused with the command that
follows that run instead (``gputrain runpod attach NAME``).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import IO, Any

from gputrain.errors import RunPodUsageError

OWNER_ENV = "GPUTRAIN_OWNER"
"""Env var on the pod naming the run that drives it: ``<host>/<run id>``."""


def new_run_id() -> str:
    return secrets.token_hex(4)


def run_pod_name(base: str, run_id: str) -> str:
    """The default pod name of one run: distinct per run, still grouped by recipe and config."""
    return f"{base}-{run_id}"


def owner_label(run_id: str) -> str:
    return f"{socket.gethostname()}/{run_id}"


def owner_host(label: str) -> str:
    return label.partition("/")[0]


def lock_path(pod_name: str) -> Path:
    from gputrain.home import under_home

    return under_home("runpod-locks", f"{pod_name}.lock", what="pod name")


class PodLock:
    """A non-blocking ``flock`` held for the life of the run that drives ``pod_name``.

    The file holds who took it (pid, host, run id, time), so a refused run can say who holds it. The file
    is never deleted: unlinking a lock file that another process may be opening would let two runs hold
    "the" lock at once.
    """

    def __init__(self, pod_name: str) -> None:
        self.pod_name = pod_name
        self.path = lock_path(pod_name)
        self._fh: IO[str] | None = None

    def acquire(self, run_id: str) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115  (held until release)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return False
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id,
                             "since": time.time()}) + "\n")
        fh.flush()
        self._fh = fh
        return True

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now (None when nobody does)."""
        if self._fh is not None:
            return {"pid": os.getpid()}
        if not self.path.exists():
            return None
        with open(self.path, "a+", encoding="utf-8") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                try:
                    data = json.loads(fh.read() or "{}")
                except ValueError:
                    data = {}
                return data if isinstance(data, dict) else {}
            fcntl.flock(fh, fcntl.LOCK_UN)
        return None

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> PodLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def busy_error(pod_name: str, holder: dict[str, Any] | None) -> RunPodUsageError:
    """The one-line refusal for a name another live run drives."""
    who = f"pid {holder.get('pid')}" if holder and holder.get("pid") else "another run"
    return RunPodUsageError(
        f"pod {pod_name} is driven by another live gputrain run ({who}); follow it with "
        f"`gputrain runpod attach {pod_name}` (or `runpod up ... --attach`), or leave out --name for a new pod"
    )


def foreign_owner_error(pod_name: str, label: str) -> RunPodUsageError:
    return RunPodUsageError(
        f"pod {pod_name} belongs to a run on {owner_host(label)!r} (owner {label!r}); not taking it over — "
        "leave out --name for a new pod, or terminate it with `gputrain runpod down` on that machine"
    )
