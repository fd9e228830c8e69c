"""The job-folder contract: exit codes, marker files and end states, and the one rule that maps them.

Every place that decides how a job ended asks :func:`end_state`: the local supervisor, the Slurm job script's
closing summary (``gputrain logs --final``), ``gputrain status``/``jobs``, the RunPod runner and the summary
files. So a cancelled job is CANCELLED in the registry, in ``summary.json`` and in ``jobs``, and a preempted
one PREEMPTED everywhere. Standard library only: job scripts and the registry import it.

The folder contract (``<logs>/<recipe>_job_<id>_<stamp>/``):

- ``plan.json`` (:mod:`gputrain.contract.plan`), ``training_output.log``, ``metrics.jsonl``, ``checkpoints/``;
- ``PREEMPTED`` (:data:`PREEMPTED_MARKER`): the training stopped at a step boundary after SIGUSR1/SIGTERM,
  checkpointed and exited :data:`REQUEUE_EXIT_CODE`; the job script may requeue it. JSON: step, signal, time.
- ``CANCELLED`` (:data:`CANCELLED_MARKER`): a user asked gputrain to cancel the job; written *before* the
  signal, so the job script does not requeue it and every reader calls it CANCELLED. JSON: by, time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REQUEUE_EXIT_CODE = 75
"""The training checkpointed and asks to be run again (EX_TEMPFAIL)."""

PREEMPTED_MARKER = "PREEMPTED"
CANCELLED_MARKER = "CANCELLED"
MARKERS = (PREEMPTED_MARKER, CANCELLED_MARKER)

PENDING, RUNNING, REQUEUED = "PENDING", "RUNNING", "REQUEUED"
COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED = "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED"
LOST = "LOST"
"""The runner lost the job (a RunPod run whose connection dropped and whose exit code never came back)."""
UNKNOWN = "UNKNOWN"

STATES = (PENDING, RUNNING, REQUEUED, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, LOST, UNKNOWN)
FINAL_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, LOST})
"""States a job never leaves."""
ENDED_STATES = FINAL_STATES | {PREEMPTED}
"""No process of the job runs: final, or preempted (a scheduler may requeue it, and then it runs again)."""
LIVE_STATES = frozenset({PENDING, RUNNING, REQUEUED})


@dataclass(frozen=True)
class BackendFacts:
    """What the runner knows besides the exit code and the folder.

    ``user_cancelled``: a cancel was asked (registry flag, Ctrl-C of a foreground run). ``scheduler_state``: the
    scheduler's verdict in gputrain's vocabulary (Slurm's TIMEOUT, CANCELLED, PREEMPTED...). ``log_causes``: causes
    the log shows (``gputrain.logs.classify``: ``time_limit``, ``preempted``, ``cancelled``...).
    ``connection_lost``: the runner lost the job before its exit code came back (RunPod over ssh).
    """

    user_cancelled: bool = False
    scheduler_state: str | None = None
    log_causes: frozenset[str] = frozenset()
    connection_lost: bool = False


@dataclass(frozen=True)
class Ending:
    state: str
    reason: str


def end_state(exit_code: int | None, markers: Iterable[str] = (), facts: BackendFacts | None = None) -> Ending:
    """How a job that has stopped ended, and why, from its exit code, the markers in its folder and ``facts``.

    Order: exit 0 is COMPLETED (a stale marker of an earlier attempt does not undo a resumed run that
    finished); a user's cancel wins over PREEMPTED (the runtime checkpoints on any SIGTERM, so a cancelled run
    also leaves PREEMPTED and exits 75); a lost runner is LOST; the scheduler's or the log's time limit is
    TIMEOUT; a PREEMPTED marker, exit 75 or the scheduler's preemption is PREEMPTED; any other code FAILED.
    """
    facts = facts or BackendFacts()
    present = frozenset(markers)
    sched, causes = facts.scheduler_state, facts.log_causes
    if exit_code == 0:
        return Ending(COMPLETED, "exit code 0")
    if facts.user_cancelled or CANCELLED_MARKER in present:
        return Ending(CANCELLED, "cancelled by the user")
    if sched == CANCELLED or "cancelled" in causes:
        return Ending(CANCELLED, "cancelled (the scheduler says so)")
    if facts.connection_lost and exit_code is None:
        return Ending(LOST, "the connection to the job was lost before it reported an exit code")
    if sched == TIMEOUT or "time_limit" in causes:
        return Ending(TIMEOUT, "time limit reached")
    if PREEMPTED_MARKER in present or exit_code == REQUEUE_EXIT_CODE or sched == PREEMPTED or "preempted" in causes:
        return Ending(PREEMPTED, "checkpointed and stopped for a requeue (preemption signal)")
    if exit_code is None:
        if sched in FINAL_STATES:
            return Ending(sched, f"the scheduler says {sched}")
        return Ending(UNKNOWN, "no exit code")
    return Ending(FAILED, f"exit code {exit_code}")


def markers_in(job_dir: str | os.PathLike[str] | None) -> frozenset[str]:
    """The marker files present in ``job_dir`` (none for a missing folder or a log file)."""
    if job_dir is None:
        return frozenset()
    folder = Path(job_dir)
    return frozenset(m for m in MARKERS if (folder / m).is_file())


def write_cancel_marker(job_dir: str | os.PathLike[str], by: str) -> None:
    """Record that a user asked for the cancel, before any signal is sent (so no requeue, and CANCELLED
    everywhere). Written atomically; a folder that is gone (or read-only) is not an error: the registry
    records the cancel too."""
    from gputrain.atomic import write_atomic

    try:
        write_atomic(Path(job_dir) / CANCELLED_MARKER, json.dumps({"by": by, "time": time.time()}) + "\n")
    except OSError:
        pass
