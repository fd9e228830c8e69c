"""Ending a local job: its launcher, torchrun, every worker and whatever they started, none left behind.

A local job's launcher runs in its own session (``start_new_session``), so its process group holds torchrun
and the workers; a sandboxed program or a data-loader worker may have left that group. So the whole
descendant tree is collected first (psutil), the group gets SIGTERM (torchrun forwards it; the runtime
checkpoints at a step boundary and exits 75), and whatever is still alive after the grace period gets
SIGKILL. psutil is imported here only: cancelling is rare, start-up is not.
"""

from __future__ import annotations

import os
import signal
from typing import Any

DEFAULT_GRACE_S = 30.0


def process_tree(pid: int) -> list[Any]:
    """``pid`` and all its descendants as psutil processes (empty when ``pid`` is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def end_tree(pid: int, grace_s: float = DEFAULT_GRACE_S) -> list[int]:
    """SIGTERM the process group led by ``pid`` (and every descendant outside it), wait ``grace_s``, SIGKILL
    what is left; returns the pids that were still alive for the SIGKILL (empty: all ended on SIGTERM)."""
    import psutil

    procs = process_tree(pid)
    if not procs:
        return []
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:  # descendants that left the group (their own session) get it directly
        try:
            if os.getpgid(proc.pid) != pid:
                proc.send_signal(signal.SIGTERM)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)
    return [p.pid for p in alive]


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as ended)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
